"""Where one logp + gradient evaluation of a NUTS trajectory spends its time (issue 18).

For each data set, one NUTS chain (``ep_sweeps.record``: ``pymc_gpc.sample``, 200 tune +
200 draws, seed 1) gives the hyperparameter points the sampler evaluated; the second half
of them (at most the last 1000) is replayed, in order, through the model's compiled ``logp_dlogp_function`` (the
numba backend, as PyMC's NUTS calls it; with the object-mode Op, ``backends.numba.dispatch.COMPILED_EP``
off, since the passes patch the Op's Python): once untimed (so that every path the replay takes,
retries included, is compiled), then three times:

1. as is, recording each call's inputs and outputs: the time of a whole call (the copies
   of the recording included);
2. timing the Op's ``_perform`` inside the call (the EP solve with the Op's Python around
   it: warm starts, recent results, checks);
3. with the Op's ``perform`` answering from a table of the outputs of pass 1: what the
   call costs without the solve (the kernel and its pullback, the object-mode boundary,
   the function's own Python).

and the compiled solve alone, ``ep.ep_warm`` on the same kernel matrices from the previous
solution, gives the floor of pass 2. The difference between pass 2 and the floor is the
Op's Python; pass 3 bounds what a fully compiled Op (no object mode) could save.

Run:  OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/evaluation_cost.py [--data pima breast-cancer]
Writes benchmarks/results/evaluation_cost.md.
"""

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse
import pathlib
import sys
import time

from _provenance import write_results  # noqa: E402  (benchmarks/_provenance.py)
import numpy as np

import pymc_gpc
from pymc_gpc.approximations import ep as E
from pymc_gpc.likelihoods import Probit
from pymc_gpc.backends.numba import dispatch as numba_dispatch
from pymc_gpc.ops import marginal as M

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from ep_sweeps import DATASETS, TOL, record  # noqa: E402

OUT = pathlib.Path(__file__).parent / "results" / "evaluation_cost.md"
MAX_EVALUATIONS = 1000  # the recorded copies (2 n x n arrays per call) stay in memory


def per_call(f, points):
    t = time.perf_counter()
    for x in points:
        f(x)
    return (time.perf_counter() - t) / len(points)


def measure(name):
    data = DATASETS[name]()
    log, _ = record(data, tune=200, draws=200)
    points = [h for h, _, _ in log[len(log) // 2:]][-MAX_EVALUATIONS:]
    model, _ = pymc_gpc.ard_classifier(data.X_train, data.y_train)
    compiled, numba_dispatch.COMPILED_EP = numba_dispatch.COMPILED_EP, False  # the passes patch the object-mode Op's Python
    try:
        f = model.logp_dlogp_function(ravel_inputs=True)
    finally:
        numba_dispatch.COMPILED_EP = compiled
    f.set_extra_values({})
    original_perform, original_solve = M.ApproxMarginalOp.perform, M.ApproxMarginalOp._perform
    inputs, outputs, solve_times = [], [], []

    def recording(self, node, ins, storage):
        original_perform(self, node, ins, storage)
        inputs.append(tuple(np.array(v) for v in ins[:3]))
        outputs.append(tuple(np.array(s[0]) for s in storage))

    def timed(self, ins, storage):
        t = time.perf_counter()
        original_solve(self, ins, storage)
        solve_times.append(time.perf_counter() - t)

    answers = iter(())

    def canned(self, node, ins, storage):
        for s, v in zip(storage, next(answers)):
            s[0] = v

    for x in points:  # compile every path the replay takes (retries included) and warm up
        f(x)
    try:
        M.reset_warm_starts()
        M.ApproxMarginalOp.perform = recording
        whole = per_call(f, points)
        M.ApproxMarginalOp.perform = original_perform
        M.ApproxMarginalOp._perform = timed
        M.reset_warm_starts()
        with_op = per_call(f, points)
        M.ApproxMarginalOp._perform = original_solve
        answers = iter(outputs)
        M.ApproxMarginalOp.perform = canned
        without_solve = per_call(f, points)
    finally:
        M.ApproxMarginalOp.perform, M.ApproxMarginalOp._perform = original_perform, original_solve
    lik = Probit()
    th = lik.check_params(lik.resolve_params(None))
    state, sweeps = None, []
    E.ep_warm(*inputs[0][:1], inputs[0][2], lik, th, None, tol=TOL)  # compile
    t = time.perf_counter()
    for K, _, y in inputs:
        result = E.ep_warm(K, y, lik, th, state, tol=TOL)
        if result is not None:
            state = result[-1]
            sweeps.append(result[4])
    floor = (time.perf_counter() - t) / len(inputs)
    return {"data": name, "n": inputs[0][0].shape[0], "evals": len(points), "whole": whole, "with_op": with_op,
            "perform": float(np.mean(solve_times)), "floor": floor, "without_solve": without_solve,
            "sweeps": float(np.mean(sweeps))}


def table(rows):
    lines = [
        "# One logp + gradient evaluation along a NUTS trajectory, taken apart",
        "",
        "Generated by `OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/evaluation_cost.py`"
        " (one run; ms per evaluation, means over the replayed evaluations; module docstring for the passes).",
        "",
        "| data | n | evaluations | whole call (pass 1) | whole call (pass 2) | Op's _perform (pass 2) | compiled EP alone (sweeps) | Op's Python | call without the solve (pass 3) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['data']} | {r['n']} | {r['evals']} | {1e3 * r['whole']:.3f} | {1e3 * r['with_op']:.3f} | "
            f"{1e3 * r['perform']:.3f} | "
            f"{1e3 * r['floor']:.3f} ({r['sweeps']:.1f}) | {1e3 * (r['perform'] - r['floor']):.3f} | "
            f"{1e3 * r['without_solve']:.3f} |")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", nargs="+", default=["pima", "breast-cancer"])
    rows = [measure(name) for name in ap.parse_args().data]
    write_results(OUT, table(rows))
    print(OUT.read_text())


if __name__ == "__main__":
    main()
