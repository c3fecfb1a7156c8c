"""Multi-class inducing-point (FITC) benchmark: evidence + gradient time, and memory.

Synthetic 5-d data (labels: the argmax of the first c inputs plus noise), one ARD-free
squared-exponential kernel per class (lengthscale 1.5, amplitude 2, per class), inducing
inputs a random subset of the data shared by the classes, one BLAS thread. Timed: one
evaluation as ``MulticlassSparseMarginalOp`` does it, given the kernel matrices: the
structure (each class's chol K_uu and V_k), the solve and the gradient in every class's
(K_uu, K_uf, diag K_ff); warm = started from the solution at lengthscales 2 % away (as
inside NUTS or an optimiser). Softmax Laplace at the engine's tolerance, nested EP at the
sampler's (tol 1e-4, ``SAMPLING_DEFAULTS``) and the engine's (1e-8). Medians of ``REPEATS``.
Memory: tracemalloc's peak of the NumPy allocations during a cold softmax-Laplace evaluation
with its gradient and LOO terms (kernel inputs excluded), and the ru_maxrss of a fresh
process running only that evaluation (VmHWM: tracemalloc's own bookkeeping inflates the RSS).

Run:  OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/multiclass_fitc.py [--quick]
Writes benchmarks/results/multiclass_fitc.md.
"""

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import pathlib
import resource
import subprocess
import sys
import time
import tracemalloc

from _provenance import write_results  # noqa: E402  (benchmarks/_provenance.py)
import numpy as np

from pymc_gpc.approximations.multinomial_probit_ep import multinomial_probit_ep
from pymc_gpc.approximations.softmax_laplace import softmax_laplace
from pymc_gpc.structures.multiclass_fitc import MulticlassFITCPrior

OUT = pathlib.Path(__file__).parent / "results" / "multiclass_fitc.md"
LS, AMP, JITTER, D = 1.5, 2.0, 1e-6, 5
REPEATS = 3


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
    t = time.perf_counter()
    res = solver(MulticlassFITCPrior(*arrays), y, state=state, with_loo=False, **options)
    return time.perf_counter() - t, res


def timing(n, c, m):
    X, y, Xu = data(n, c, m)
    near, here = inputs(X, Xu, c, 1.02), inputs(X, Xu, c)
    rows = []
    for name, solver, options in (("softmax Laplace (tol 1e-10)", softmax_laplace, {}),
                                  ("nested EP, sampler's tol 1e-4", multinomial_probit_ep, {"tol": 1e-4}),
                                  ("nested EP, engine's tol 1e-8", multinomial_probit_ep, {})):
        _, start = evaluate(solver, near, y, **options)
        times, iters = [], []
        for _ in range(REPEATS):
            dt, res = evaluate(solver, here, y, state=start.state.copy(), **options)
            times.append(dt)
            iters.append(res.n_iter)
        rows.append(f"| {name} | {n} | {c} | {m} | {np.median(times):.2f} | {min(times):.2f} | "
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
    """GFlop/s of the A-forming product (m x n times n x m, dgemm) on this machine now: the
    yardstick for the times above on a shared machine (median of ``repeats``)."""
    V = np.asfortranarray(np.random.default_rng(0).normal(size=(m, n)))
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        V @ V.T
        times.append(time.perf_counter() - t)
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


def main():
    if "--memory-child" in sys.argv:
        i = sys.argv.index("--memory-child")
        return memory_child(*(int(v) for v in sys.argv[i + 1:i + 4]))
    quick = "--quick" in sys.argv
    t_sizes = [(2000, 5, 50)] if quick else [(10_000, 5, 200)]
    m_sizes = [(4000, 5, 50)] if quick else [(20_000, 5, 100)]
    rate_before = gemm_rate()
    trows = [r for s in t_sizes for r in timing(*s)]
    rate_after = gemm_rate()
    mrows = [memory(*s) for s in m_sizes]
    load = os.getloadavg()[0]
    text = f"""# Multi-class FITC: evidence + gradient time and memory

``structures.multiclass_fitc`` (each class's FITC prior; the (c m) x (c m) precision A of the
inducing values). Time per evaluation = structure + solve + gradient in every class's
(K_uu, K_uf, diag K_ff), warm-started from the solution at lengthscales 2 % away; medians
(and minima) of {REPEATS} repeats; one BLAS thread. The machine was shared (load
{load:.1f} at the end on its {os.cpu_count()} cores): the minima are the better guide, and
the yardstick is the rate of the product that forms A's blocks, a 200 x 10^4 x 200 dgemm:
{rate_before:.1f} GFlop/s before the timings, {rate_after:.1f} after.

| evaluation | n | c | m | median s | min s | Newton steps / EP sweeps |
|---|---|---|---|---|---|---|
{chr(10).join(trows)}

Goal: under 1 s at n = 10^4, c = 5, m = 200. Not met. One posterior forms A in
c (c + 1) m^2 n = 1.2e10 flops; the site covariances with the gradient's V_k R_kk need a pass
of 2 c^2 m^2 n = 2e10 more. A warm Laplace evaluation forms A twice (its first Newton step's
and the mode's; the steps between solve by CG preconditioned with the last A) and makes one
pass: about 5e10 flops with the gradient, 1.5 s at the dgemm rate above. The rest of the
measured time is memory-bound NumPy work on the m x n arrays (the weighted copies of V_k that
A's blocks need, the pass's combinations, the gradient's terms) and the c FITC structures,
which a shared machine slows most. Every nested-EP sweep forms A and its site covariances
(by triangular products, another c (c + 1) m^2 n), and the gradient's pass comes once at the
end. The floor of this exact scheme is the mode's A and its pass, O(c^2 m^2 n); below it
needs another method (e.g. the log-determinant and the site covariances by stochastic
estimation, which this package does not do).

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
