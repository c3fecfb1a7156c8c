"""Multi-class inducing-point (FITC) benchmark: evidence + gradient time, and memory.

Synthetic 5-d data (labels: the argmax of the first c inputs plus noise), one ARD-free
squared-exponential kernel per class (lengthscale 1.5, amplitude 2, per class), inducing
inputs a random subset of the data shared by the classes, one BLAS thread. Timed: one
evaluation as ``ApproxMarginalOp`` on the FITC multi-class structure does it, given the kernel matrices: the
structure (each class's chol K_uu and V_k), the solve and the gradient in every class's
(K_uu, K_uf, diag K_ff); warm = started from the solution at lengthscales 2 % away (as
inside NUTS or an optimiser). Softmax Laplace at the engine's tolerance, nested EP at the
sampler's (tol 1e-4, ``SAMPLING_DEFAULTS``) and the engine's (1e-8). Medians of ``REPEATS``,
in wall and CPU seconds (``time.process_time``: on a shared machine the better guide). For
softmax Laplace also the times A is formed, and the flops of the exact scheme as this code
runs it (``laplace_flops``). ``--baseline COMMIT`` times softmax Laplace at the goal size also
on that commit's ``pymc_gpc`` (extracted with ``git archive``; fresh processes alternating with
this code's); ``--warm-json NEW OLD`` quotes two ``multiclass_large.py --phase warm`` results
(the whole model through PyTensor).
Memory: tracemalloc's peak of the NumPy allocations during a cold softmax-Laplace evaluation
with its gradient and LOO terms (kernel inputs excluded), and the ru_maxrss of a fresh
process running only that evaluation (VmHWM: tracemalloc's own bookkeeping inflates the RSS).

Run:  PYTHONPATH=. OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/multiclass_fitc.py [--quick]
      [--baseline COMMIT] [--warm-json NEW.json OLD.json]
Writes benchmarks/results/multiclass_fitc.md.
"""

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import json
import pathlib
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import tracemalloc

from _provenance import write_results  # noqa: E402  (benchmarks/_provenance.py)
import numpy as np

from pymc_gpc.approximations.multinomial_probit_ep import multinomial_probit_ep
from pymc_gpc.approximations.softmax_laplace import softmax_laplace
from pymc_gpc.structures import multiclass_fitc
from pymc_gpc.structures.multiclass_fitc import MulticlassFITCPrior

OUT = pathlib.Path(__file__).parent / "results" / "multiclass_fitc.md"
LS, AMP, JITTER, D = 1.5, 2.0, 1e-6, 5
REPEATS = 3
LAPLACE_REPEATS = 5  # per process, for the goal-size softmax Laplace rows (two processes each)


def data(n, c, m, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, D))
    y = np.argmax(X[:, :c] + 0.5 * rng.normal(size=(n, c)), axis=1)
    return X, y, X[rng.choice(n, m, replace=False)]


def se(A, B, ls):
    sq = (A**2).sum(1)[:, None] + (B**2).sum(1)[None] - 2.0 * A @ B.T
    return AMP * np.exp(-0.5 * np.maximum(sq, 0.0) / ls**2)


def inputs(X, Xu, c, scale=1.0):
    """(K_uu, K_uf, diag K_ff) with class k's lengthscale LS (1 + 0.1 k) * scale."""
    m, n = len(Xu), len(X)
    ls = [LS * (1 + 0.1 * k) * scale for k in range(c)]
    return (np.array([se(Xu, Xu, l) + JITTER * np.eye(m) for l in ls]), np.array([se(Xu, X, l) for l in ls]),
            np.full((c, n), AMP + JITTER))


def evaluate(solver, arrays, y, state=None, **options):
    t, c = time.perf_counter(), time.process_time()
    res = solver(MulticlassFITCPrior(*arrays), y, state=state, with_loo=False, **options)
    return time.perf_counter() - t, time.process_time() - c, res


def laplace_flops(n, c, m, formed, cg_steps, A_terms=None, inverse=2 / 3):
    """Flops of one exact warm softmax-Laplace evaluation + gradient (multiply-add = 2):
    the c FITC structures (chol K_uu, V_k = L_uu^{-1} K_uf: c (m^3 / 3 + m^2 n)); A formed
    ``formed`` times (A_terms m^2 n each, c^2 by default: c (c - 1) below the diagonal, c on
    it) with its Cholesky factor ((c m)^3 / 3); A^{-1} (``inverse`` (c m)^3: 2/3 by dtrtri and
    dlauum, 2 by two triangular solves with the identity before this branch); the pass over A^{-1}'s
    column blocks (2 c^2 m^2 n); the gradient (V_k G'_k V_k^T and L_uu^{-T} V_k G'_k:
    3 c m^2 n); ``cg_steps`` CG steps (4 c m n + 2 (c m)^2 each)."""
    cm, m2n = c * m, m * m * n
    A_terms = c * c if A_terms is None else A_terms
    parts = {"structures": c * (m**3 / 3 + m2n), "A": formed * (A_terms * m2n + cm**3 / 3),
             "A_inv": inverse * cm**3, "pass": 2 * c * c * m2n, "gradient": 3 * c * m2n,
             "cg": cg_steps * (4 * c * m * n + 2 * cm**2)}
    return sum(parts.values()), parts


def count_laplace(n, c, m, repeats):
    """Warm softmax Laplace at (n, c, m) with A's formations and the CG steps counted: a dict
    of the medians (wall, CPU, formations, Newton and CG steps) and every call's CPU."""
    X, y, Xu = data(n, c, m)
    near, here = inputs(X, Xu, c, 1.02), inputs(X, Xu, c)
    counts = {"A": 0, "cg": 0}
    precision, times_A = multiclass_fitc._precision, getattr(multiclass_fitc, "_precision_times", None)

    def formed(*args):
        counts["A"] += 1
        return precision(*args)

    def cg_step(*args):
        counts["cg"] += 1
        return times_A(*args)

    multiclass_fitc._precision = formed
    if times_A is not None:
        multiclass_fitc._precision_times = cg_step
    try:
        _, _, start = evaluate(softmax_laplace, near, y)
        rows = []
        for _ in range(repeats):
            counts.update(A=0, cg=0)
            wall, cpu, res = evaluate(softmax_laplace, here, y, state=start.state.copy())
            rows.append({"wall": wall, "cpu": cpu, "A": counts["A"], "cg": counts["cg"], "newton": res.n_iter,
                         "log_z": float(res.log_z)})
    finally:
        multiclass_fitc._precision = precision
        if times_A is not None:
            multiclass_fitc._precision_times = times_A
    med = {k: float(np.median([r[k] for r in rows])) for k in ("wall", "cpu", "A", "cg", "newton")}
    return {**med, "cpu_all": [r["cpu"] for r in rows], "log_z": rows[-1]["log_z"], "min_cpu": min(r["cpu"] for r in rows)}


def _child(tree, n, c, m, repeats):
    """``count_laplace`` in a fresh process importing pymc_gpc from ``tree`` (None: this
    checkout's, not an installed copy's)."""
    root = pathlib.Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": str(root) if tree is None else tree}
    child = subprocess.run([sys.executable, __file__, "--laplace-child", str(n), str(c), str(m), str(repeats)],
                           capture_output=True, text=True, check=True, env=env)
    return json.loads(child.stdout.strip().splitlines()[-1])


def _merge(runs):
    """The medians over every call of several ``count_laplace`` runs (each run's own medians
    for the counts)."""
    cpu = [x for r in runs for x in r["cpu_all"]]
    return {"wall": float(np.median([r["wall"] for r in runs])), "cpu": float(np.median(cpu)), "min_cpu": min(cpu),
            "cpu_all": cpu, **{k: float(np.median([r[k] for r in runs])) for k in ("A", "cg", "newton")},
            "log_z": runs[-1]["log_z"]}


def compare(commit, n, c, m, repeats, rounds=2):
    """``count_laplace`` on this code and on ``commit``'s pymc_gpc (extracted by ``git
    archive`` into a temporary directory), each in fresh processes, alternating
    (new, old, new, old, ...) so that a shared machine's changing load falls on both."""
    root = pathlib.Path(__file__).resolve().parent.parent
    tmp = tempfile.mkdtemp()
    try:
        archive = subprocess.run(["git", "archive", commit, "pymc_gpc"], cwd=root, capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", tmp], input=archive.stdout, check=True)
        new, old = [], []
        for _ in range(rounds):
            new.append(_child(None, n, c, m, repeats))
            old.append(_child(tmp, n, c, m, repeats))
        return _merge(new), _merge(old)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def laplace_row(label, n, c, m, r, **scheme):
    flops, _ = laplace_flops(n, c, m, r["A"], r["cg"], **scheme)
    return (f"| {label} | {r['wall']:.2f} | {r['cpu']:.2f} | {r['min_cpu']:.2f} | {r['A']:.0f} | {r['newton']:.0f} | "
            f"{r['cg']:.0f} | {flops:.2e} | {flops / r['cpu'] / 1e9:.0f} |")


def timing(n, c, m):
    X, y, Xu = data(n, c, m)
    near, here = inputs(X, Xu, c, 1.02), inputs(X, Xu, c)
    rows = []
    for name, solver, options in (("nested EP, sampler's tol 1e-4", multinomial_probit_ep, {"tol": 1e-4}),
                                  ("nested EP, engine's tol 1e-8", multinomial_probit_ep, {})):
        _, _, start = evaluate(solver, near, y, **options)
        walls, cpus, iters = [], [], []
        for _ in range(REPEATS):
            wall, cpu, res = evaluate(solver, here, y, state=start.state.copy(), **options)
            walls.append(wall)
            cpus.append(cpu)
            iters.append(res.n_iter)
        rows.append(f"| {name} | {n} | {c} | {m} | {np.median(walls):.2f} | {np.median(cpus):.2f} | {min(cpus):.2f} | "
                    f"{int(np.median(iters))} |")
        print(rows[-1], flush=True)
    return rows


def _rss():
    """The process's peak resident set (MiB): VmHWM (Linux; unlike ru_maxrss, not inherited
    from the parent across fork and exec), else ru_maxrss."""
    try:
        for line in pathlib.Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def gemm_rate(m=200, n=10_000, repeats=5):
    """GFlop/s of the product that forms A's blocks below the diagonal (m x n times n x m,
    dgemm, 2 m^2 n flops) per CPU second on this machine now: the yardstick for the times
    above on a shared machine (median of ``repeats``). Two different factors: NumPy runs
    V @ V.T as a dsyrk, half the flops."""
    rng = np.random.default_rng(0)
    V, W = (np.asfortranarray(rng.normal(size=(m, n))) for _ in range(2))
    times = []
    for _ in range(repeats):
        t = time.process_time()
        V @ W.T
        times.append(time.process_time() - t)
    return 2.0 * m * m * n / np.median(times) / 1e9


def memory_child(n, c, m):
    """In a fresh process, without tracemalloc: ru_maxrss before and after one cold evaluation."""
    X, y, Xu = data(n, c, m)
    arrays = inputs(X, Xu, c)
    Xs, ys, Xus = data(200, c, 20)
    softmax_laplace(MulticlassFITCPrior(*inputs(Xs, Xus, c)), ys)  # numba's compilation
    before = _rss()
    t = time.perf_counter()
    res = softmax_laplace(MulticlassFITCPrior(*arrays), y)
    assert np.isfinite(res.log_z)
    print(f"{before:.0f} {_rss():.0f} {time.perf_counter() - t:.1f}")


def memory(n, c, m):
    X, y, Xu = data(n, c, m)
    arrays = inputs(X, Xu, c)
    tracemalloc.start()
    res = softmax_laplace(MulticlassFITCPrior(*arrays), y)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert np.isfinite(res.log_z)
    child = subprocess.run([sys.executable, __file__, "--memory-child", str(n), str(c), str(m)], capture_output=True,
                           text=True, check=True, env=os.environ)
    before, after, dt = child.stdout.split()[-3:]
    inputs_mb = sum(a.nbytes for a in arrays) / 2**20
    row = (f"| softmax Laplace, cold, gradient and LOO | {n} | {c} | {m} | {peak / 2**20:.0f} | {inputs_mb:.0f} | "
           f"{before} | {after} | {dt} |")
    print(row, flush=True)
    return row


def _option(name, count=1):
    if name not in sys.argv:
        return None
    i = sys.argv.index(name)
    return sys.argv[i + 1:i + 1 + count]


def _warm_paragraph(paths):
    """The two ``multiclass_large.py --phase warm`` results (new, old), as prose (the commit
    each ran on from its optional "commit" entry)."""
    if not paths:
        return ""
    new, old = (json.loads(pathlib.Path(q).read_text()) for q in paths)
    return f"""
The same goal through PyTensor (``benchmarks/multiclass_large.py --phase warm``: ggplot2's
diamonds, n = {new['n']}, c = {new['c']}, m = {new['m']}, per-class ARD kernels at the MAP-II point of
``multiclass_large.md``; ``logp`` and its gradient compiled once, 9 calls at three nearby
points, each warm-started by the previous; the two runs at the same time, so under the same
load): CPU median {new['cpu_median']:.2f} s (range {min(new['cpu']):.2f} to {max(new['cpu']):.2f}) on the code of
{new.get('commit', 'this branch')} against {old['cpu_median']:.2f} s ({min(old['cpu']):.2f} to {max(old['cpu']):.2f}) on {old.get('commit', 'the baseline')}; wall medians
{new['median']:.1f} s and {old['median']:.1f} s under the load. The difference from the solver alone is
the kernel matrices and their pullback in PyTensor, and the c FITC structures.
"""


def main():
    if "--memory-child" in sys.argv:
        return memory_child(*(int(v) for v in _option("--memory-child", 3)))
    if "--laplace-child" in sys.argv:
        print(json.dumps(count_laplace(*(int(v) for v in _option("--laplace-child", 4)))))
        return None
    quick = "--quick" in sys.argv
    goal = (2000, 5, 50) if quick else (10_000, 5, 200)
    t_sizes = [goal]
    m_sizes = [(4000, 5, 50)] if quick else [(20_000, 5, 100)]
    commit = (_option("--baseline") or [None])[0]
    repeats = 3 if quick else LAPLACE_REPEATS
    rate_before = gemm_rate()
    if commit:
        new, base = compare(commit, *goal, repeats)
    else:
        new, base = count_laplace(*goal, repeats), None
    print(new, base, flush=True)
    trows = [r for s in t_sizes for r in timing(*s)]
    rate_after = gemm_rate()
    mrows = [memory(*s) for s in m_sizes]
    load = os.getloadavg()[0]
    n, c, m = goal
    flops, parts = laplace_flops(n, c, m, new["A"], new["cg"])
    floor = flops - parts["A"] / max(new["A"], 1) * (max(new["A"], 1) - 1) - parts["cg"]
    lrows = [laplace_row("this code", n, c, m, new)]
    if base is not None:
        # before this branch A's dsyrk also formed the diagonal blocks, (c^2 + c) m^2 n, and
        # A^{-1} came from two triangular solves with the identity
        lrows.append(laplace_row(f"baseline {commit}", n, c, m, base, A_terms=c * c + c, inverse=2.0))
    part_text = ", ".join(f"{k} {v:.1e}" for k, v in parts.items())
    text = f"""# Multi-class FITC: evidence + gradient time and memory

``structures.multiclass_fitc`` (each class's FITC prior; the (c m) x (c m) precision A of the
inducing values). Time per evaluation = structure + solve + gradient in every class's
(K_uu, K_uf, diag K_ff), warm-started from the solution at lengthscales 2 % away (synthetic
5-d data, the module docstring of ``benchmarks/multiclass_fitc.py``); one BLAS thread. The
machine was shared (load {load:.1f} at the end on its {os.cpu_count()} cores): CPU seconds
(``time.process_time``) are the better guide, wall seconds include waiting for a core. The
yardstick is the rate (per CPU second) of the product that forms A's blocks, a 200 x 10^4 x 200
dgemm:
{rate_before:.1f} GFlop/s before the timings, {rate_after:.1f} after.

## Softmax Laplace at the goal size (n = {n}, c = {c}, m = {m}, tol 1e-10)

Medians of 2 x {repeats} warm calls (min: the smallest CPU time); "A formed", Newton and CG steps per
call; flops of the exact scheme as the code runs it (``laplace_flops``), and the rate they
imply per CPU second.{" This code and the baseline each ran in two fresh processes, alternating (medians over all their calls)." if base else ""}

| code | wall s | CPU s | min CPU s | A formed | Newton steps | CG steps | flops | GFlop/s |
|---|---|---|---|---|---|---|---|---|
{chr(10).join(lrows)}

Flops of one call of this code: {part_text} ({flops:.2e} in all). The floor of this exact scheme,
A formed once and no CG: {floor:.2e} flops, {floor / rate_before / 1e9:.2f} s at the dgemm rate measured
before the timings.
{_warm_paragraph(_option("--warm-json", 2))}
## Nested EP

| evaluation | n | c | m | median wall s | median CPU s | min CPU s | EP sweeps |
|---|---|---|---|---|---|---|---|
{chr(10).join(trows)}

## Memory

Peak memory: tracemalloc's peak of the NumPy allocations during the evaluation (the kernel
inputs excluded), and, in a fresh process without tracemalloc, the process's peak resident
set (VmHWM) before the evaluation (imports, the kernel inputs and a small warm-up evaluation)
and after it (its time is that process's):

| evaluation | n | c | m | tracemalloc peak MiB | kernel inputs MiB | peak RSS before MiB | peak RSS after MiB | s |
|---|---|---|---|---|---|---|---|---|
{mrows[0] if mrows else ''}

Goal: under 1.5 GB at c = 5, n = 20,000, m = 100: O(c m n) arrays only (the V_k, V_k R_kk,
the gradient in K_uf), no n x n or c n x c n matrix.
"""
    if not quick:
        write_results(OUT, text)
    else:
        print(text)


if __name__ == "__main__":
    main()
