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
circle without label noise, as ``sampling_hard.py`` builds them), with the columns that say
where the time goes: NUTS steps per draw (gradient evaluations; the kept draws' mean),
ms of wall time per evaluation (wall / all evaluations of both chains, tuning counted at the
kept draws' rate, x 2 chains running at once) and EP sweeps per evaluation (the
``y_n_iter`` deterministic at the kept draws). ``--methods`` picks the samplers: on breast
cancer ``pm.gp.Latent`` would need hours per seed (0.02 ESS/s when the issue was filed), so
a row without a Latent run of the same seed has no ratio.

Run:  OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/sampling.py [--draws 500 --tune 500 --seeds 1 2 3 4 5
      --data pima crabs breast-cancer separable --methods ep-pymc ep-nutpie latent --out FILE]
Writes benchmarks/results/sampling.md (with ``--out``: that file in benchmarks/results instead).
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
from pymc_gpc.models import LOG_V0_START, classification_metrics

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from sampling_hard import DATASETS, diagnostic  # noqa: E402

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


if __name__ == "__main__":
    main()
