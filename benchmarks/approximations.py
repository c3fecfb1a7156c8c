"""Approximations benchmark: evidence + gradient time of EP, Laplace, mean field I/II, ADF.

Synthetic 5-d data and the fixed ARD squared-exponential kernel of ``engine.py``
(lengthscales 1.5, amplitude 2, jitter 1e-8), probit likelihood, n = 200 and 1000,
one BLAS thread. For each method: evidence + gradient from a cold start, and warm-started
from the solution at hyperparameters 2 % away (as NUTS or an optimiser would); medians
over repeats. ADF has no gradient and no warm start: its time is the evidence alone.

Run:  OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/approximations.py
Writes benchmarks/results/approximations.md.
"""

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import pathlib

from _provenance import write_results  # noqa: E402  (benchmarks/_provenance.py)
import numpy as np
from engine import median_time, rbf, synthetic

from pymc_gpc import adf, ep, laplace, meanfield
from pymc_gpc import likelihoods as L

OUT = pathlib.Path(__file__).parent / "results" / "approximations.md"

METHODS = {
    "EP (parallel)": lambda K, y, lik, s: ep(K, y, lik, state=s),
    "Laplace": lambda K, y, lik, s: laplace(K, y, lik, state=s),
    "MF-I (ensemble)": lambda K, y, lik, s: meanfield(K, y, lik, variant="ensemble", state=s),
    "MF-II (naive)": lambda K, y, lik, s: meanfield(K, y, lik, variant="naive", state=s),
    "ADF (1 pass, no gradient)": lambda K, y, lik, s: adf(K, y, lik),
}


def rows_for(n):
    X, y = synthetic(n)
    ls = np.full(5, 1.5)
    K1 = rbf(X, ls, 2.0) + 1e-8 * np.eye(n)
    K2 = rbf(X, ls * 1.02, 2.0 * 1.02) + 1e-8 * np.eye(n)
    lik = L.Probit()
    reps = 5 if n <= 500 else 3
    rows = []
    for name, run in METHODS.items():
        run(K1, y, lik, None)  # compile numba kernels outside the timing
        base = run(K1, y, lik, None)
        t_cold, r_cold = median_time(lambda: run(K2, y, lik, None), reps)
        warm = name.startswith("ADF")
        t_warm, r_warm = (t_cold, r_cold) if warm else median_time(lambda: run(K2, y, lik, base.state), reps)
        rows.append((n, name, t_cold, r_cold.n_iter, t_warm, r_warm.n_iter, r_cold.log_z, r_cold.converged))
        print(f"n={n} {name}: cold {t_cold * 1e3:.1f} ms ({r_cold.n_iter}), warm {t_warm * 1e3:.1f} ms, "
              f"log Z {r_cold.log_z:.3f}", flush=True)
    return rows


def main():
    table = [
        "| n | method | cold (ms) | warm (ms) | log evidence | converged |",
        "|---|---|---|---|---|---|",
    ]
    for n in (200, 1000):
        for n_, name, tc, ic, tw, iw, lz, conv in rows_for(n):
            warm = "-" if name.startswith("ADF") else f"{tw * 1e3:.1f} ({iw})"
            table.append(f"| {n_} | {name} | {tc * 1e3:.1f} ({ic}) | {warm} | {lz:.3f} | {conv} |")
    text = "\n".join(
        ["## Evidence + gradient time by approximation (probit; ms; iterations in brackets)", "",
         "EP: parallel sweeps; Laplace: Newton steps; MF-I / MF-II: Newton steps on alpha; "
         "ADF: passes. Synthetic 5-d data, ARD SE kernel (ls 1.5, amplitude 2, jitter 1e-8), "
         f"1 BLAS thread, medians. Load average at the end of the run: {os.getloadavg()[0]:.1f} "
         f"on {os.cpu_count()} cores (timings from a shared machine are noisy).", ""] + table
    ) + "\n"
    OUT.parent.mkdir(parents=True, exist_ok=True)
    write_results(OUT, text)
    print(text)


if __name__ == "__main__":
    main()
