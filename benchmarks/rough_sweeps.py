"""Single-precision ("rough") EP sweeps for the dense prior, along NUTS trajectories (issue 18).

At the sampler's tolerance (1e-2) the compiled EP loop (``ep._parallel_compiled``) runs the
sweeps it predicts not to be the last on B = I + W^1/2 K W^1/2 factorised and inverted in
single precision (``structures.dense.factors``); the sweep that ends the iteration, the
evidence and the gradient are exact. This benchmark measures what that saves and costs.

For each data set one NUTS chain (``ep_sweeps.record``: ``pymc_gpc.sample``, 200 tune + 200
draws, seed 1) gives the hyperparameter points the sampler evaluated; the last (at most)
800 of its second half are replayed in order through ``ep.ep_warm`` (the Op's hot path:
the loop, the evidence and its gradient in K), each variant with its own ``WarmStarts`` as
in the Op, all sweeps exact (``rough_ok=False``) against rough sweeps allowed. The two
variants alternate evaluation by evaluation (lockstep, the order flipped every other
evaluation) so that the machine's drifts fall on both; three passes after one untimed
pass, the median ratio reported. Every 10th evaluation is also solved to 1e-10: the errors
of log Z and of the log-hyperparameter gradient (through the ARD kernel's derivative) of
each variant against it.

Run:  OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/rough_sweeps.py [--data breast-cancer crabs separable pima]
Writes benchmarks/results/rough_sweeps.md.
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

from pymc_gpc.approximations import ep as E
from pymc_gpc.ops.warm_start import WarmStarts

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from ep_sweeps import ARD, DATASETS, LIK, TH, TOL, record  # noqa: E402

OUT = pathlib.Path(__file__).parent / "results" / "rough_sweeps.md"
MAX_EVALUATIONS = 800
VARIANTS = {"exact sweeps": False, "rough sweeps": True}


def evaluate(K, y, warm, h, rough_ok):
    """One evaluation as the Op does it: ``ep_warm`` from the warm start, ``ep`` where it
    declines (``ep`` may sweep rough in either variant: such evaluations are counted)."""
    state = warm.guess(h)
    out = E.ep_warm(K, y, LIK, TH, state, TOL, rough_ok=rough_ok)
    declined = out is None
    if declined:
        r = E.ep(K, y, LIK, state=state, tol=TOL)
        out = (r.log_z, r.dlog_z_dK, r.dlog_z_dparams, r.loo_log_p, r.n_iter, r.state)
    warm.add(h, out[5])
    return out + (declined,)


def lockstep(Ks, y, points):
    """One pass over the trajectory, the variants alternating; their times, sweeps and outputs."""
    warm = {v: WarmStarts() for v in VARIANTS}
    seconds = dict.fromkeys(VARIANTS, 0.0)
    outs = {v: [] for v in VARIANTS}
    for i, (h, K) in enumerate(zip(points, Ks)):
        for v in (VARIANTS if i % 2 else reversed(VARIANTS)):
            t = time.perf_counter()
            out = evaluate(K, y, warm[v], h, VARIANTS[v])
            seconds[v] += time.perf_counter() - t
            outs[v].append(out)
    return seconds, outs


def study(name):
    data = DATASETS[name]()
    log, _ = record(data, tune=200, draws=200)
    points = [h for h, _, _ in log[len(log) // 2:]][-MAX_EVALUATIONS:]
    y = np.asarray(data.y_train, dtype=float)
    kernel = ARD(np.asarray(data.X_train, dtype=float))
    Ks = [np.ascontiguousarray(kernel(h)) for h in points]
    lockstep(Ks, y, points)  # untimed: compiles every path
    passes = [lockstep(Ks, y, points) for _ in range(3)]
    ms = {v: 1e3 * np.median([s[v] for s, _ in passes]) / len(points) for v in VARIANTS}
    ratios = [s["rough sweeps"] / s["exact sweeps"] for s, _ in passes]
    outs = passes[0][1]
    sweeps = {v: np.mean([o[4] for o in outs[v]]) for v in VARIANTS}
    declined = {v: sum(o[6] for o in outs[v]) for v in VARIANTS}
    errors = {v: [] for v in VARIANTS}
    for i in range(0, len(points), 10):
        ref = E.ep(Ks[i], y, LIK, tol=1e-10)
        g_ref = kernel.gradient(points[i], ref.dlog_z_dK)
        for v in VARIANTS:
            g = kernel.gradient(points[i], outs[v][i][1])
            errors[v].append((abs(outs[v][i][0] - ref.log_z), np.linalg.norm(g - g_ref) / np.linalg.norm(g_ref)))
    return dict(name=data.name, n=len(y), evals=len(points), ms=ms, ratios=ratios, sweeps=sweeps,
                declined=declined, errors={v: np.array(e) for v, e in errors.items()})


def report(results):
    text = ["Rough (single-precision) EP sweeps against exact ones, one NUTS chain's evaluations replayed "
            "through `ep.ep_warm` at tol 1e-2 in lockstep (module docstring); "
            "`python benchmarks/rough_sweeps.py`.", "",
            "| data | n | evaluations | ms / evaluation, exact | ms / evaluation, rough | time ratio (median of 3; all) "
            "| sweeps exact / rough | `ep_warm` declined, exact / rough | log Z error, median (max): exact / rough "
            "| gradient rel. error, median (max): exact / rough |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        e, q = r["errors"]["exact sweeps"], r["errors"]["rough sweeps"]
        text.append(
            f"| {r['name']} | {r['n']} | {r['evals']} | {r['ms']['exact sweeps']:.2f} | {r['ms']['rough sweeps']:.2f} | "
            f"{np.median(r['ratios']):.3f} ({', '.join(f'{x:.3f}' for x in r['ratios'])}) | "
            f"{r['sweeps']['exact sweeps']:.2f} / {r['sweeps']['rough sweeps']:.2f} | "
            f"{r['declined']['exact sweeps']} / {r['declined']['rough sweeps']} | "
            f"{np.median(e[:, 0]):.0e} ({e[:, 0].max():.0e}) / {np.median(q[:, 0]):.0e} ({q[:, 0].max():.0e}) | "
            f"{np.median(e[:, 1]):.0e} ({e[:, 1].max():.0e}) / {np.median(q[:, 1]):.0e} ({q[:, 1].max():.0e}) |")
    return text


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", nargs="+", default=["breast-cancer", "crabs", "separable", "pima"], choices=list(DATASETS))
    args = parser.parse_args()
    results = []
    for name in args.data:
        results.append(study(name))
        print("\n".join(report(results)[-1:]), flush=True)
    text = report(results)
    write_results(OUT, "\n".join(text) + "\n")
    print("\n".join(text))


if __name__ == "__main__":
    main()
