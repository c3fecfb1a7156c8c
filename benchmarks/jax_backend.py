"""PyMC's JAX samplers (numpyro, blackjax) on the JAX backend against PyMC's NUTS and nutpie.

Pima (Pima.tr, 200 x 7) and Crabs (80 x 6), ``pymc_gpc.ard_classifier`` (EP, probit, ARD
kernel, log-hyperparameters ~ N(-3, 3^2)), 2 chains x (``--tune`` + ``--draws``), one seed,
all four samplers in one run, each through ``pymc_gpc.sample`` with its defaults: PyMC's
NUTS (dense mass matrix, chains in 2 processes, numba path with warm starts), nutpie
(threads, numba path), numpyro and blackjax (chains mapped over 2 host devices by
``jax.pmap``, which PyMC sets up, JAX path, every evaluation a cold start). Each sampler
first runs 5 + 5 draws; for the numba samplers that fills the compile caches, while the JAX
samplers compile the model again in every call, so their wall time includes the
compilation (also given apart where PyMC records the sampling time).

Reported: wall time of the sampling call, min bulk ESS over the hyperparameters, ESS/s,
divergences, max r_hat, mean EP sweeps per recorded draw (``y_n_iter``: warm starts on the
numba path, cold starts on the JAX path), posterior mean of log v0.

Run:  OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/jax_backend.py [--draws 500 --tune 500 --seed 1]
Writes benchmarks/results/jax_backend.md.
"""

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse
import pathlib
import time
import warnings

import arviz as az
from _provenance import write_results  # noqa: E402  (benchmarks/_provenance.py)
from sampling_hard import diagnostic  # noqa: E402  (pymc_gpc.sample: diagnostics in sample_stats)
import numpy as np

import pymc_gpc
from pymc_gpc.datasets import load

OUT = pathlib.Path(__file__).parent / "results" / "jax_backend.md"
HYPER = ["log_w", "log_v0", "log_v1"]
SAMPLERS = ["pymc", "nutpie", "numpyro", "blackjax"]


def run(data, sampler, draws, tune, seed):
    model, _ = pymc_gpc.ard_classifier(data.X_train, data.y_train, feature_names=data.feature_names)
    kwargs = dict(chains=2, random_seed=seed, nuts_sampler=sampler, progressbar=False,
                  compute_convergence_checks=False)
    if sampler == "pymc":
        kwargs["cores"] = 2
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pymc_gpc.sample(draws=5, tune=5, **kwargs)
        t = time.perf_counter()
        idata = pymc_gpc.sample(draws=draws, tune=tune, **kwargs)
        wall = time.perf_counter() - t
    summary = az.summary(idata, var_names=HYPER)
    stats = idata["sample_stats"]
    sampling_time = stats.attrs.get("sampling_time")
    return {
        "data": data.name, "sampler": sampler, "wall": wall,
        "sampling": float(sampling_time) if sampling_time is not None else None,
        "ess": float(summary["ess_bulk"].min()), "div": int(np.asarray(stats["diverging"]).sum()),
        "rhat": float(summary["r_hat"].max()),
        "sweeps": float(diagnostic(idata, "y_n_iter").mean()),
        "log_v0": float(np.asarray(idata["posterior"]["log_v0"]).mean()),
        "log_v0_mcse": float(az.summary(idata, var_names=["log_v0"])["mcse_mean"].iloc[0]),
    }


def table(rows):
    lines = ["| data | sampler | path | wall (s) | of which sampling (s) | min bulk ESS | ESS/s | divergent | "
             "max r_hat | EP sweeps / draw | mean log v0 (MCSE) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        path = "JAX, cold starts" if r["sampler"] in ("numpyro", "blackjax") else "numba, warm starts"
        samp = f"{r['sampling']:.1f}" if r["sampling"] is not None else "-"
        lines.append(f"| {r['data']} | {r['sampler']} | {path} | {r['wall']:.1f} | {samp} | {r['ess']:.0f} | "
                     f"{r['ess'] / r['wall']:.2f} | {r['div']} | {r['rhat']:.3f} | {r['sweeps']:.2f} | "
                     f"{r['log_v0']:.3f} ({r['log_v0_mcse']:.3f}) |")
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--draws", type=int, default=500)
    ap.add_argument("--tune", type=int, default=500)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--data", nargs="+", default=["pima", "crabs"])
    ap.add_argument("--samplers", nargs="+", default=SAMPLERS)
    args = ap.parse_args()
    rows = []
    for name in args.data:
        data = load(name)
        for sampler in args.samplers:
            rows.append(run(data, sampler, args.draws, args.tune, args.seed))
            print(table(rows)[-1], flush=True)
    text = [
        "# PyMC's JAX samplers against PyMC's NUTS and nutpie",
        "",
        f"`OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/jax_backend.py --draws {args.draws} "
        f"--tune {args.tune} --seed {args.seed}`: 2 chains x ({args.tune} + {args.draws}), one seed, one run, "
        "on a 2-core machine shared with other jobs (timings are disturbed; compare within this table only).",
        "",
        *table(rows),
    ]
    write_results(OUT, "\n".join(text) + "\n", peers=('jax', 'numpyro', 'blackjax', 'nutpie'))
    print("\n".join(text))


if __name__ == "__main__":
    main()
