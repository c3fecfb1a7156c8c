"""Prediction over posterior draws at EP tolerances 1e-8, 1e-4, 1e-3: time and the largest
change of the averaged probabilities (``pymc_gpc.prediction``; docs: binary classification, predictions).

Pima and Crabs, ``ard_classifier``, 2 x (500 + 500) draws (seed 1), medians of 3.
Run: OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/prediction_tolerance.py
Writes benchmarks/results/prediction_tolerance.md.
"""

import dataclasses
import pathlib
import time

import numpy as np
from _provenance import write_results  # noqa: E402  (benchmarks/_provenance.py)

import pymc_gpc
from pymc_gpc.approximations import registry
from pymc_gpc.datasets import load


OUT = pathlib.Path(__file__).parent / "results" / "prediction_tolerance.md"


def main():
    default = registry.APPROXIMATIONS["ep"]
    lines = ["# Prediction over posterior draws at EP tolerances 1e-8, 1e-4, 1e-3", "",
             "| data | tol | median time | max abs change of p vs 1e-8 | test errors |", "|---|---|---|---|---|"]
    print("\n".join(lines[2:]))
    for name in ("pima", "crabs"):
        d = load(name)
        model, gp = pymc_gpc.ard_classifier(d.X_train, d.y_train)
        with model:
            idata = pymc_gpc.sample(draws=500, tune=500, chains=2, random_seed=1, progressbar=False)
        gp.predict(d.X_test[:5], idata=idata, max_draws=5, progressbar=False)  # compile
        ref = None
        for tol in (1e-8, 1e-4, 1e-3):
            registry.APPROXIMATIONS["ep"] = dataclasses.replace(default, prediction_defaults={"tol": tol})
            times = []
            for _ in range(3):
                t = time.perf_counter()
                p = gp.predict(d.X_test, idata=idata, progressbar=False)
                times.append(time.perf_counter() - t)
            ref = p if ref is None else ref
            errors = int(np.sum(np.where(p > 0.5, 1, -1) != d.y_test))
            lines.append(f"| {name} | {tol:g} | {np.median(times):.2f} s | {np.max(np.abs(p - ref)):.1e} | "
                         f"{errors}/{len(d.y_test)} |")
            print(lines[-1], flush=True)
    registry.APPROXIMATIONS["ep"] = default
    write_results(OUT, "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
