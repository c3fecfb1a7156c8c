"""The package's sampler defaults against PyMC's: the mass matrix and the initial point.

The evidence for ``pymc_gpc.sample``'s dense mass matrix (``idata.default_init``) and
for ``ard_classifier``'s initial log v0 = 0: EP + probit, Barber & Williams' ARD model
(``ard_classifier``), PyMC's NUTS, 2 chains x (500 tune + 500 draws) per seed.
1. Pima, PyMC's diagonal mass matrix against the dense one (both from log v0 = 0), on
   the same seeds in turn. Reported per run: min bulk ESS over the hyperparameters, the
   gradient evaluations (NUTS steps, tuning included) and their ratio, which does not
   depend on the machine's speed, and the wall time, which does.
2. Pima and Crabs, dense mass matrix, chains started at log v0 = 0 against the prior
   mean -3: the gradient evaluations.

Run:  OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/mass_matrix.py [--seeds 11 12 13 14 15]
Writes benchmarks/results/mass_matrix.md.
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
import numpy as np
import pymc as pm

import pymc_gpc
from pymc_gpc.datasets import load

OUT = pathlib.Path(__file__).parent / "results" / "mass_matrix.md"
INITS = ("jitter+adapt_diag", "jitter+adapt_full")
START_SEEDS = (11, 12, 13)


def run(model, init, seed, draws, tune, initvals=None):
    kwargs = dict(chains=2, cores=2, nuts_sampler="pymc", progressbar=False, compute_convergence_checks=False)
    t = time.perf_counter()
    with model:
        idata = pm.sample(draws=draws, tune=tune, random_seed=seed, init=init, discard_tuned_samples=False,
                          initvals=initvals, **kwargs)
    wall = time.perf_counter() - t
    ess = float(az.summary(idata["posterior"], var_names=["log_w", "log_v0", "log_v1"])["ess_bulk"].min())
    steps = int(idata["warmup_sample_stats"]["n_steps"].sum() + idata["sample_stats"]["n_steps"].sum())
    return {"init": init, "seed": seed, "ess": ess, "steps": steps, "per_k": 1000.0 * ess / steps, "wall": wall}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[11, 12, 13, 14, 15])
    ap.add_argument("--draws", type=int, default=500)
    ap.add_argument("--tune", type=int, default=500)
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    data = load("pima")
    model, _ = pymc_gpc.ard_classifier(data.X_train, data.y_train, feature_names=data.feature_names)
    with model:  # fill the compile caches
        pm.sample(draws=5, tune=5, chains=2, cores=2, nuts_sampler="pymc", progressbar=False,
                  compute_convergence_checks=False)
    rows = []
    for seed in args.seeds:
        for init in INITS:
            rows.append(run(model, init, seed, args.draws, args.tune))
            r = rows[-1]
            print(f"seed {seed} {init}: min ESS {r['ess']:.0f}, {r['steps']} steps, {r['per_k']:.1f} per 1000, "
                  f"{r['wall']:.1f} s", flush=True)
    lines = [f"Pima, EP + probit, PyMC NUTS, 2 chains x ({args.tune} tune + {args.draws} draws), seeds {args.seeds}",
             "",
             "| init | min bulk ESS per 1000 gradient evaluations: median (range) | min bulk ESS: median (range) "
             "| wall (s): median |",
             "|---|---|---|---|"]
    for init in INITS:
        mine = [r for r in rows if r["init"] == init]
        per_k, ess = [r["per_k"] for r in mine], [r["ess"] for r in mine]
        lines.append(f"| {init} | {np.median(per_k):.1f} ({min(per_k):.1f}-{max(per_k):.1f}) | "
                     f"{np.median(ess):.0f} ({min(ess):.0f}-{max(ess):.0f}) | {np.median([r['wall'] for r in mine]):.1f} |")
    lines += ["", "Every run:", "", "| seed | init | min bulk ESS | gradient evaluations | per 1000 | wall (s) |",
              "|---|---|---|---|---|---|"]
    lines += [f"| {r['seed']} | {r['init']} | {r['ess']:.0f} | {r['steps']} | {r['per_k']:.1f} | {r['wall']:.1f} |"
              for r in rows]
    lines += ["", f"Initial log v0 (dense mass matrix, seeds {list(START_SEEDS)}): gradient evaluations per run", "",
              "| data | seed | from log v0 = 0 | from log v0 = -3 (prior mean) | saved |", "|---|---|---|---|---|"]
    for name in ("pima", "crabs"):
        data = load(name)
        model, _ = pymc_gpc.ard_classifier(data.X_train, data.y_train, feature_names=data.feature_names)
        for seed in START_SEEDS:
            at0 = run(model, INITS[1], seed, args.draws, args.tune)["steps"]
            at3 = run(model, INITS[1], seed, args.draws, args.tune, initvals={"log_v0": -3.0})["steps"]
            lines.append(f"| {name} | {seed} | {at0} | {at3} | {100.0 * (1 - at0 / at3):.1f} % |")
            print(lines[-1], flush=True)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    write_results(OUT, "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
