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

Subcommand ``hsgp`` (formerly its own script):

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

    Run:  OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/sparse_default.py hsgp [--inducing 50] [--hsgp-m 3 15 6] [--sklearn [--sklearn-rows 2000]]
    Writes benchmarks/results/sparse_hsgp.md.
"""

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import pathlib
import sys
import time

from _provenance import write_results  # noqa: E402  (benchmarks/_provenance.py)
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
        "Generated by `OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/sparse_default.py hsgp"
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


def hsgp_main():
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


def hsgp_entry():
    """Subcommand ``hsgp``."""
    hsgp_main()


SUBCOMMANDS = {"hsgp": hsgp_entry, "nuts": nuts_entry}

if __name__ == "__main__" and sys.argv[1:2] and sys.argv[1] in SUBCOMMANDS:
    SUBCOMMANDS[sys.argv[1]]()
elif __name__ == "__main__":
    if sys.argv[1:2] == ["--em-ep"]:
        em_ep_main([int(a) for a in sys.argv[2:]] or [50])
    else:
        main()
