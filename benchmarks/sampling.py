"""Hyperparameter sampling: EP-NUTS (this package) against pm.gp.Latent + NUTS, in one run.

Pima (Pima.tr / Pima.te) and Crabs (80 / 120), ARD squared-exponential kernel with a
bias term, log-hyperparameters ~ N(-3, 3^2) (Barber & Williams), probit likelihood.
Both models use PyMC's NUTS with 2 chains in 2 processes and the same draws, each
with its own sampler defaults: this package through ``pymc_gpc.sample`` (a dense mass
matrix over its d + 2 hyperparameters, ``idata.default_init``), pm.gp.Latent through
``pm.sample`` (PyMC's diagonal one; a dense one over Latent's 209 values was slower); this package is also run with nutpie (threads). Both use the same kernel
(``MixedARD``, as ``ard_classifier`` does). Reported: wall time of the sampling call (``pm.sample``, or
``pymc_gpc.sample``, which adds the log_likelihood group in milliseconds; compilation included,
from the compile caches: each model is first run for 5+5 draws, as any earlier run of
it on the machine would have done), min bulk ESS over the hyperparameters and ESS/s,
divergences, max r_hat, test errors and mean test log predictive (probabilities
averaged over draws). A single run's min ESS moves with the seed (EP on Pima 645-990,
Latent 178-244 over five seeds), so every method runs with several seeds and the table
gives medians (divergences summed and r_hat the maximum over the seeds; a row is not
one run); the ratio to Latent is the median of the per-seed ratios.

Issue 18's harder data can join the table (``--data breast-cancer separable``: scikit-learn's
breast-cancer data, a fixed 300-row training subset with 30 inputs, and Kim & Ghahramani's
circle without label noise, as the ``hard`` subcommand builds them), with the columns that say
where the time goes: NUTS steps per draw (gradient evaluations; the kept draws' mean),
ms of wall time per evaluation (wall / all evaluations of both chains, tuning counted at the
kept draws' rate, x 2 chains running at once) and EP sweeps per evaluation (the
``y_n_iter`` deterministic at the kept draws). ``--methods`` picks the samplers: on breast
cancer ``pm.gp.Latent`` would need hours per seed (0.02 ESS/s when the issue was filed), so
a row without a Latent run of the same seed has no ratio.

Run:  OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/sampling.py [--draws 500 --tune 500 --seeds 1 2 3 4 5
      --data pima crabs breast-cancer separable --methods ep-pymc ep-nutpie latent --out FILE]
Writes benchmarks/results/sampling.md (with ``--out``: that file in benchmarks/results instead).

Subcommand ``hard`` (formerly its own script):

    Hyperparameter sampling where EP is hard: near-separable data, large amplitudes (issue 18).

    Data: scikit-learn's breast-cancer data (569 x 30, a fixed 300-row training subset,
    inputs standardised with the training rows' statistics), a separable synthetic set (Kim &
    Ghahramani's circle without label flips, 200 training points) and Crabs (80 rows, posterior
    amplitudes log v0 near 5). Model: ``ard_classifier`` (ARD squared exponential + bias,
    probit, EP, log-hyperparameters ~ N(-3, 3^2)). Samplers, 2 chains x (tune + draws), each
    first run for 5+5 draws to fill the compile caches:

    * ``pymc_gpc.sample`` (PyMC's NUTS in 2 processes, dense mass matrix: the package default),
    * ``pymc_gpc.sample(nuts_sampler="nutpie")`` (nutpie's Rust NUTS, chains as threads),
    * plain ``pm.sample`` (picks nutpie when it is installed; PyMC's diagonal-mass defaults);
    * on request (``--samplers``), nutpie with its diagonal (gradient-based, its default),
      draw-based diagonal or low-rank mass-matrix adaptation named explicitly
      (``nuts_sampler_kwargs={"adaptation": ...}``), or with a lower target acceptance rate
      (0.65 instead of 0.8: longer steps, fewer per draw).

    Columns: wall time of the call, min bulk ESS over the hyperparameters and ESS/s,
    the sampling time alone (``idata.posterior.attrs["sampling_time"]``, which both PyMC's NUTS
    and nutpie stamp: without the model's compilation, which nutpie repeats at every call
    and PyMC's NUTS mostly loads from PyTensor's cache) and ESS per second of it,
    divergences, NUTS steps per draw (gradient evaluations), ms of wall time per gradient
    evaluation (wall / all steps of both chains, x 2 processes or threads running at once),
    EP sweeps per evaluation at the kept draws (the ``y_n_iter`` deterministic).

    Run:  OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/sampling.py hard [--seeds 1 2 --draws 500 --tune 500]
          [--data breast-cancer-10 breast-cancer-20 --samplers ... --tol 3e-2 --out FILE]
    Writes benchmarks/results/sampling_hard.md.
"""

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse
import pathlib
import sys
import time
import warnings

import arviz as az
from _provenance import write_results  # noqa: E402  (benchmarks/_provenance.py)
import numpy as np
import pymc as pm
import pytensor.tensor as pt

import pymc_gpc
from pymc_gpc.kernels import MixedARD
from pymc_gpc.gp.models import LOG_V0_START, classification_metrics


OUT = pathlib.Path(__file__).parent / "results" / "sampling.md"
HYPER = ["log_w", "log_v0", "log_v1"]


def latent_model(X, y):
    d = X.shape[1]
    with pm.Model() as model:
        log_w = pm.Normal("log_w", -3, 3, shape=d)
        log_v0 = pm.Normal("log_v0", -3, 3, initval=LOG_V0_START)  # ard_classifier's initial point
        log_v1 = pm.Normal("log_v1", -3, 3)
        # the kernel of ard_classifier (= v0 ExpQuad(ls=w^-1/2) + v1, as one fused Op)
        cov = MixedARD(d, v0=pt.exp(log_v0), l=pt.exp(log_w), v1=pt.exp(log_v1))
        gp = pm.gp.Latent(cov_func=cov)
        f = gp.prior("f", X=X, jitter=1e-6)
        pm.Bernoulli("y", p=pm.math.invprobit(f), observed=(y > 0).astype(int))
    return model, gp


def timed_sample(model, sampler, draws, tune, seed, sample=pm.sample):
    """(idata, wall time) of 2 chains in parallel, after a 5+5-draw warm-up run that fills
    the compile caches (PyTensor's and numba's on-disk caches). ``sample``: ``pm.sample``
    (Latent) or ``pymc_gpc.sample`` (this package: its defaults, i.e. a dense mass matrix
    for PyMC's NUTS, and the log_likelihood group)."""
    kwargs = dict(chains=2, cores=2, random_seed=seed, nuts_sampler=sampler, progressbar=False,
                  compute_convergence_checks=False)
    with model:
        sample(draws=5, tune=5, **kwargs)
        t = time.perf_counter()
        idata = sample(draws=draws, tune=tune, **kwargs)
    return idata, time.perf_counter() - t


def run_latent(data, draws, tune, seed):
    model, gp = latent_model(data.X_train, data.y_train)
    idata, wall = timed_sample(model, "pymc", draws, tune, seed)
    with model:
        gp.conditional("f_star", data.X_test, jitter=1e-6)
        pp = pm.sample_posterior_predictive(idata, var_names=["f_star"], random_seed=seed, progressbar=False)
    f_star = np.asarray(pp["posterior_predictive"]["f_star"]).reshape(-1, len(data.y_test))
    from scipy.special import ndtr

    return idata, wall, ndtr(f_star).mean(axis=0)


def run_ep(data, draws, tune, seed, sampler):
    model, gp = pymc_gpc.ard_classifier(data.X_train, data.y_train, feature_names=data.feature_names)
    idata, wall = timed_sample(model, sampler, draws, tune, seed, sample=pymc_gpc.sample)
    p = gp.predict(data.X_test, idata=idata, model=model, max_draws=400)
    return idata, wall, p


METHODS = {  # --methods name -> (table label, run(data, draws, tune, seed))
    "ep-pymc": ("pymc-gpc EP, PyMC NUTS", lambda data, draws, tune, seed: run_ep(data, draws, tune, seed, "pymc")),
    "ep-nutpie": ("pymc-gpc EP, nutpie", lambda data, draws, tune, seed: run_ep(data, draws, tune, seed, "nutpie")),
    "latent": ("pm.gp.Latent, PyMC NUTS", run_latent),
}


def row(method, data, idata, wall, p, tune):
    summary = az.summary(idata, var_names=HYPER)
    ess = float(summary["ess_bulk"].min())
    stats = idata["sample_stats"]
    div = int(np.asarray(stats["diverging"]).sum())
    n_draws = int(np.asarray(stats["diverging"]).size)
    chains = int(stats.sizes["chain"])
    steps = float(np.asarray(stats["n_steps"]).mean())
    # the tuning steps are not in the trace: counted at the kept draws' rate
    evaluations = steps * (n_draws + tune * chains)
    sweeps = diagnostic(idata, "y_n_iter", missing=np.nan).mean()  # nan for pm.gp.Latent
    m = classification_metrics(p, data.y_test)
    return {
        "data": data.name, "method": method, "wall": wall, "ess": ess, "ess_s": ess / wall,
        "div": div, "div_pct": 100.0 * div / n_draws, "rhat": float(summary["r_hat"].max()),
        "errors": m["errors"], "n_test": m["n"], "mlp": m["mean_log_pred"], "n_draws": n_draws,
        "steps": steps, "ms_eval": 1e3 * wall * chains / evaluations, "sweeps": float(sweeps),
    }


def _ratio_text(ratios):
    return f"{np.median(ratios):.1f}x ({min(ratios):.1f}-{max(ratios):.1f})" if ratios else "no Latent run"


def _sweeps_text(value):
    return "-" if np.isnan(value) else f"{value:.2f}"


def summarise(rows):
    """One table row per (data, method): medians over seeds; the ratio to pm.gp.Latent is
    the median of the per-seed ratios (each measured in the same run), with their range."""
    table = [
        "| data | method | wall (s) | min bulk ESS | ESS/s | ESS/s vs Latent (range) | divergent | max r_hat | "
        "test errors | mean test log p | NUTS steps / draw | ms / evaluation | EP sweeps / evaluation |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    keys = list(dict.fromkeys((r["data"], r["method"]) for r in rows))
    for data, method in keys:
        mine = [r for r in rows if (r["data"], r["method"]) == (data, method)]
        ratios = []
        for r in mine:
            ref = next((x for x in rows if x["data"] == data and x["seed"] == r["seed"]
                        and x["method"].startswith("pm.gp.Latent")), None)
            if ref is not None:
                ratios.append(r["ess_s"] / ref["ess_s"])
        med = {k: float(np.median([r[k] for r in mine]))
               for k in ("wall", "ess", "ess_s", "errors", "mlp", "steps", "ms_eval", "sweeps")}
        div, n = sum(r["div"] for r in mine), sum(r["n_draws"] for r in mine)
        table.append(
            f"| {data} | {method} | {med['wall']:.0f} | {med['ess']:.0f} | {med['ess_s']:.2f} | "
            f"{_ratio_text(ratios)} | {div} ({100.0 * div / n:.1f} %) | "
            f"{max(r['rhat'] for r in mine):.3f} | {med['errors']:.0f}/{mine[0]['n_test']} | {med['mlp']:.4f} | "
            f"{med['steps']:.1f} | {med['ms_eval']:.2f} | {_sweeps_text(med['sweeps'])} |"
        )
    return table


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--draws", type=int, default=500)
    ap.add_argument("--tune", type=int, default=500)
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    ap.add_argument("--data", nargs="+", default=["pima", "crabs"], choices=["pima", "crabs", "breast-cancer", "separable"])
    ap.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    ap.add_argument("--out", default=None,
                    help="write this results file (in benchmarks/results) instead of sampling.md")
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    rows = []
    for name in args.data:
        data = DATASETS[name]()
        for seed in args.seeds:
            for method in args.methods:
                label, run = METHODS[method]
                idata, wall, p = run(data, args.draws, args.tune, seed)
                rows.append(row(label, data, idata, wall, p, args.tune) | {"seed": seed})
                r = rows[-1]
                print(f"{name} seed {seed} {label}: {r['wall']:.0f} s, min ESS {r['ess']:.0f} ({r['ess_s']:.2f}/s), "
                      f"div {r['div']}, rhat {r['rhat']:.3f}, errors {r['errors']}/{r['n_test']}, mlp {r['mlp']:.4f}, "
                      f"{r['steps']:.1f} steps/draw, {r['ms_eval']:.2f} ms/eval, {r['sweeps']:.2f} sweeps", flush=True)
    table = summarise(rows)
    runs = ["| data | seed | method | wall (s) | min bulk ESS | ESS/s | divergent | max r_hat | steps / draw | ms / eval | sweeps |",
            "|---|---|---|---|---|---|---|---|---|---|---|"]
    runs += [f"| {r['data']} | {r['seed']} | {r['method']} | {r['wall']:.0f} | {r['ess']:.0f} | {r['ess_s']:.2f} "
             f"| {r['div']} | {r['rhat']:.3f} | {r['steps']:.1f} | {r['ms_eval']:.2f} | {_sweeps_text(r['sweeps'])} |"
             for r in rows]
    header = (f"2 chains x ({args.tune} tune + {args.draws} draws), seeds {args.seeds}; wall, min bulk ESS, ESS/s, "
              "test errors and mean test log p are medians over the seeds, divergent the sum and max r_hat the "
              "maximum (a row is not one run)\n\n")
    out = OUT if args.out is None else OUT.parent / args.out
    out.parent.mkdir(parents=True, exist_ok=True)
    write_results(out, header + "\n".join(table) + "\n\nEvery run:\n\n" + "\n".join(runs) + "\n", peers=('nutpie',))
    print("\n".join(table))


# ---- subcommand ``hard`` ----------------------------------------


import dataclasses


from pymc_gpc.datasets import Split, load
from pymc_gpc.datasets.synthetic import circle

HARD_OUT = pathlib.Path(__file__).parent / "results" / "sampling_hard.md"
HARD_HYPER = ["log_w", "log_v0", "log_v1"]


def diagnostic(idata, name, missing=None):
    """A solver diagnostic (``y_n_iter``, ``y_status``) at the kept draws: in ``sample_stats``
    after ``pymc_gpc.sample`` (or ``add_log_likelihood``), in the posterior after a plain
    ``pm.sample``; ``missing`` (as an array) where neither has it, if given."""
    for group in ("sample_stats", "posterior"):
        if group in idata and name in idata[group]:
            return np.asarray(idata[group][name])
    if missing is not None:
        return np.asarray(missing)
    raise KeyError(f"{name} is in neither sample_stats nor the posterior")


def breast_cancer(n_train=300, seed=0, n_inputs=30):
    """scikit-learn's breast-cancer data, a fixed random 300-row training subset, standardised;
    only its first ``n_inputs`` columns (the same rows: the number of hyperparameters
    changes, the data's difficulty little)."""
    from sklearn.datasets import load_breast_cancer

    data = load_breast_cancer()
    X, y = data.data[:, :n_inputs], np.where(data.target == 1, 1.0, -1.0)
    idx = np.random.default_rng(seed).permutation(len(y))
    tr, te = idx[:n_train], idx[n_train:]
    mu, sd = X[tr].mean(axis=0), X[tr].std(axis=0)
    names = tuple(f"x{m}" for m in range(X.shape[1]))
    name = "breast-cancer" if n_inputs == 30 else f"breast-cancer, first {n_inputs} inputs"
    return Split(name, (X[tr] - mu) / sd, y[tr], (X[te] - mu) / sd, y[te], names)


DATASETS = {
    "breast-cancer": breast_cancer,
    "breast-cancer-10": lambda: breast_cancer(n_inputs=10),
    "breast-cancer-20": lambda: breast_cancer(n_inputs=20),
    "separable": lambda: dataclasses.replace(circle(n_train=200, n_test=800, n_flipped=0), name="separable circle"),
    "crabs": lambda: load("crabs"),
    "pima": lambda: load("pima"),  # the easy case, for comparison
}

SAMPLERS = {  # label -> (sampling function, nuts_sampler, nuts_sampler_kwargs)
    "pymc_gpc.sample (PyMC NUTS)": (pymc_gpc.sample, "pymc", None),
    "pymc_gpc.sample (nutpie)": (pymc_gpc.sample, "nutpie", None),
    "nutpie, diagonal mass matrix": (pymc_gpc.sample, "nutpie", {"adaptation": "diag"}),
    "nutpie, low-rank mass matrix": (pymc_gpc.sample, "nutpie", {"adaptation": "low_rank"}),
    "nutpie, draw-based diagonal mass matrix": (pymc_gpc.sample, "nutpie", {"adaptation": "draw_diag"}),
    "nutpie, target_accept 0.65": (pymc_gpc.sample, "nutpie", {"target_accept": 0.65}),
    "pm.sample (default: nutpie)": (pm.sample, None, None),
}

DEFAULT_SAMPLERS = ["pymc_gpc.sample (PyMC NUTS)", "pymc_gpc.sample (nutpie)", "pm.sample (default: nutpie)"]


def run(data, label, seed, draws, tune, tol=None):
    sample, sampler, sampler_kwargs = SAMPLERS[label]
    options = {} if tol is None else {"tol": tol}  # EP's tolerance while sampling (default 1e-2)
    model, _ = pymc_gpc.ard_classifier(data.X_train, data.y_train, **options)
    kwargs = dict(chains=2, cores=2, random_seed=seed, progressbar=False, compute_convergence_checks=False)
    if sampler is not None:
        kwargs["nuts_sampler"] = sampler
    if sampler_kwargs is not None:
        kwargs["nuts_sampler_kwargs"] = sampler_kwargs
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sample(draws=5, tune=5, **kwargs)
        t = time.perf_counter()
        idata = sample(draws=draws, tune=tune, **kwargs)
        wall = time.perf_counter() - t
    stats = idata["sample_stats"]
    steps = np.asarray(stats["n_steps"])
    ess = float(az.summary(idata, var_names=HARD_HYPER)["ess_bulk"].min())
    # all gradient evaluations of the run, tuning included, are not in the trace: the kept
    # draws' mean steps times all iterations is the estimate
    evals = float(steps.mean()) * (draws + tune) * 2
    sampling = float(idata["posterior"].attrs.get("sampling_time", np.nan))
    return {
        "data": data.name, "method": label, "seed": seed, "wall": wall, "ess": ess, "ess_s": ess / wall,
        "sampling": sampling, "ess_sampling": ess / sampling,
        "div": int(np.asarray(stats["diverging"]).sum()), "steps": float(steps.mean()),
        "ms_eval": 1e3 * wall * 2 / evals,
        "sweeps": float(diagnostic(idata, "y_n_iter").mean()),
        "log_v0": float(np.asarray(idata["posterior"]["log_v0"]).mean()),
    }


def table(rows):
    lines = [
        "| data | method | wall (s) | min bulk ESS | ESS/s | sampling alone (s) | ESS per s of sampling | divergent | NUTS steps / draw | ms / evaluation | EP sweeps / evaluation | posterior mean log v0 |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for key in dict.fromkeys((r["data"], r["method"]) for r in rows):
        mine = [r for r in rows if (r["data"], r["method"]) == key]
        med = {k: float(np.median([r[k] for r in mine]))
               for k in ("wall", "ess", "ess_s", "sampling", "ess_sampling", "steps", "ms_eval", "sweeps", "log_v0")}
        lines.append(
            f"| {key[0]} | {key[1]} | {med['wall']:.0f} | {med['ess']:.0f} | {med['ess_s']:.2f} | "
            f"{med['sampling']:.1f} | {med['ess_sampling']:.2f} | "
            f"{sum(r['div'] for r in mine)} | {med['steps']:.1f} | {med['ms_eval']:.2f} | {med['sweeps']:.2f} | {med['log_v0']:.2f} |"
        )
    return lines


def hard_main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--draws", type=int, default=500)
    parser.add_argument("--tune", type=int, default=500)
    parser.add_argument("--data", nargs="+", default=["breast-cancer", "separable", "crabs"], choices=list(DATASETS))
    parser.add_argument("--samplers", nargs="+", default=DEFAULT_SAMPLERS, choices=list(SAMPLERS))
    parser.add_argument("--tol", type=float, default=None, help="EP's tolerance while sampling (default: the package's)")
    parser.add_argument("--out", default=HARD_OUT.name, help="results file (in benchmarks/results)")
    args = parser.parse_args(sys.argv[2:])
    rows = []
    for name in args.data:
        data = DATASETS[name]()
        for seed in args.seeds:
            for label in args.samplers:
                rows.append(run(data, label, seed, args.draws, args.tune, args.tol))
                r = rows[-1]
                print(f"{r['data']} seed {seed} {label}: {r['wall']:.0f} s ({r['sampling']:.0f} s sampling), ESS {r['ess']:.0f}, {r['ess_s']:.2f} ESS/s, "
                      f"{r['div']} div, {r['steps']:.1f} steps/draw, {r['ms_eval']:.2f} ms/eval, {r['sweeps']:.2f} sweeps", flush=True)
    text = [
        f"2 chains x ({args.tune} tune + {args.draws} draws), seeds {args.seeds}; medians over the seeds "
        "(divergent: the sum). BLAS at one thread. `python benchmarks/sampling.py hard`.",
        "",
        *table(rows),
        "",
        "Every run:",
        "",
        "| data | seed | method | wall (s) | min bulk ESS | ESS/s | sampling alone (s) | divergent | steps / draw | ms / eval | sweeps |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
        *(f"| {r['data']} | {r['seed']} | {r['method']} | {r['wall']:.0f} | {r['ess']:.0f} | {r['ess_s']:.2f} | {r['sampling']:.1f} | "
          f"{r['div']} | {r['steps']:.1f} | {r['ms_eval']:.2f} | {r['sweeps']:.2f} |" for r in rows),
    ]
    write_results((HARD_OUT.parent / args.out), "\n".join(text) + "\n", peers=('nutpie', 'scikit-learn'))
    print("\n".join(text))


def hard_entry():
    """Subcommand ``hard``."""
    hard_main()


SUBCOMMANDS = {"hard": hard_entry}

if __name__ == "__main__" and sys.argv[1:2] and sys.argv[1] in SUBCOMMANDS:
    SUBCOMMANDS[sys.argv[1]]()
elif __name__ == "__main__":
    main()
