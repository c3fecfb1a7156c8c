"""Inducing-point (FITC) benchmark: evidence + gradient time and memory, and accuracy against dense EP.

Part 1, scaling: synthetic 5-d data (as ``engine.synthetic``), the ARD squared-exponential
kernel (lengthscales 1.5, amplitude 2), probit likelihood, inducing inputs a random subset
of the data, EP with the sampler's tolerance (1e-2) and the engine's (1e-8). Timed: one
evaluation as the Op does it, FITC structure (chol K_uu, V = L_uu^{-1} K_uf) + EP +
gradient in (K_uu, K_uf, diag K_ff), given the kernel matrices; warm = started from the
sites at hyperparameters 2 % away (as inside NUTS), cold = from zero sites. Warm: medians
of 5 repeats (at n = 10^5 the first two allocate the arrays that later evaluations reuse,
``numerics.workspace``); cold: a single run, under tracemalloc. Peak memory: tracemalloc's peak of NumPy
allocations during the cold evaluation (kernel inputs excluded). The dense floor: dense EP +
gradient (the compiled loop) up to n = 4000. At n = 10^5 only the sampler's tolerance.

Part 2, accuracy at n = 2000 (1000 test points) as m grows, at fixed hyperparameters
(those above): the evidence gap to dense EP, test errors and mean test log predictive
probability, inducing inputs by k-means (scipy's, on whitened inputs, as
``pm.gp.util.kmeans_inducing_points``).

Only NumPy, SciPy, numba and the engine are used (no PyMC/PyTensor), so that it can run
on a machine without them.

Run:  OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/sparse.py [--quick]
Writes benchmarks/results/sparse.md.
      python benchmarks/sparse.py --warm N M [N M ...]: only the warm time at tol 1e-2 for
      these (n, m), printed (medians of 5 repeats).
      python benchmarks/sparse.py --gradient: the single-precision gradient of the sampler's
      tolerances (``FITCPosterior.kernel_gradient(rough=True)``) against the double one:
      its error in two hyperparameter directions beside the error of stopping EP at tol
      1e-2, and the warm evaluation's time with each, alternated (writes
      benchmarks/results/sparse_gradient.md).
      python benchmarks/sparse.py --threads: warm evaluations in two threads at once against
      the same work in one thread (nutpie's chains are threads; writes
      benchmarks/results/sparse_threads.md).
"""

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import pathlib
import sys
import time
import tracemalloc

from _provenance import write_results  # noqa: E402  (benchmarks/_provenance.py)
import numpy as np
from scipy.cluster.vq import kmeans

from pymc_gpc import likelihoods as L
from pymc_gpc.approximations.ep import ep
from pymc_gpc.numerics.workspace import POOL
from pymc_gpc.structures import FITCPrior

OUT = pathlib.Path(__file__).parent / "results" / "sparse.md"
LS, AMP, JITTER = 1.5, 2.0, 1e-6


def synthetic(n, seed=0):
    """``engine.synthetic`` (engine.py imports PyTensor)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 5))
    y = np.where(X[:, 0] + X[:, 1] ** 2 - 1.0 + 0.5 * rng.normal(size=n) > 0, 1.0, -1.0)
    return X, y


def median_time(fn, repeats):
    times, result = [], None
    for _ in range(repeats):
        t = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t)
    return float(np.median(times)), result


def timed_peak(fn):
    """(seconds, result, peak MB of traced allocations) of one call; the work-array pool is
    emptied first, so that the call allocates (and tracemalloc sees) its own arrays."""
    POOL.clear()
    tracemalloc.start()
    t = time.perf_counter()
    result = fn()
    elapsed = time.perf_counter() - t
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return elapsed, result, peak / 2**20


def cross(A, B, scale=1.0):
    """k(A, B) in blocks of rows (no (n, m, d) temporary)."""
    out = np.empty((A.shape[0], B.shape[0]))
    ls = LS * scale
    for i in range(0, A.shape[0], 2000):
        a = A[i:i + 2000] / ls
        d2 = (a**2).sum(1)[:, None] + ((B / ls) ** 2).sum(1)[None, :] - 2 * a @ (B / ls).T
        out[i:i + 2000] = AMP * scale * np.exp(-0.5 * np.maximum(d2, 0.0))
    return out


def fitc_inputs(X, Xu, scale=1.0):
    Kuu = cross(Xu, Xu, scale) + JITTER * np.eye(len(Xu))
    return Kuu, cross(Xu, X, scale), np.full(len(X), AMP * scale + JITTER)


def evaluate(inputs, y, state, tol):
    return ep(FITCPrior(*inputs), y, L.Probit(), state=state, tol=tol)


def scaling_rows(sizes, ms, dense_max):
    rows = []
    for n in sizes:
        X, y = synthetic(n)
        rng = np.random.default_rng(1)
        for m in ms:
            Xu = X[rng.choice(n, m, replace=False)]
            base_in, near_in = fitc_inputs(X, Xu), fitc_inputs(X, Xu, 1.02)
            reps = 5  # at n = 10^5 the first two fill the work-array pool (``numerics.workspace``)
            for tol in (1e-2, 1e-8) if n < 100_000 else (1e-2,):
                base = evaluate(base_in, y, None, tol)
                t_warm, r_warm = median_time(lambda: evaluate(near_in, y, base.state, tol), reps)
                t_cold, r_cold, mem = timed_peak(lambda: evaluate(near_in, y, None, tol))
                rows.append((n, f"FITC m={m}", tol, t_warm, r_warm.n_iter, t_cold, r_cold.n_iter, mem))
                print(rows[-1], flush=True)
        if n <= dense_max:
            K1 = cross(X, X) + JITTER * np.eye(n)
            K2 = cross(X, X, 1.02) + JITTER * np.eye(n)
            for tol in (1e-2, 1e-8):
                base = ep(K1, y, L.Probit(), tol=tol)
                t_warm, r_warm = median_time(lambda: ep(K2, y, L.Probit(), state=base.state, tol=tol), 3)
                t_cold, r_cold = median_time(lambda: ep(K2, y, L.Probit(), tol=tol), 1)
                rows.append((n, "dense", tol, t_warm, r_warm.n_iter, t_cold, r_cold.n_iter, 8 * 3 * n * n / 2**20))
                print(rows[-1], flush=True)
    return rows


def kmeans_inputs(m, X):
    scale = X.std(axis=0)
    return kmeans(X / scale, m, seed=0)[0] * scale


def accuracy_rows(ms, n=2000, n_test=1000):
    X_all, y_all = synthetic(n + n_test, seed=3)
    X, y, Xs, ys = X_all[:n], y_all[:n], X_all[n:], y_all[n:]
    lik = L.Probit()

    def scores(mean, var):
        p = lik.predict(mean, var, lik.params)
        p = np.clip(p, 1e-300, 1 - 1e-16)
        errors = int(np.sum(np.where(p > 0.5, 1.0, -1.0) != ys))
        return errors, float(np.mean(np.where(ys > 0, np.log(p), np.log1p(-p))))

    dense = ep(cross(X, X) + JITTER * np.eye(n), y, lik)
    rows = [("dense", dense.log_z, 0.0, *scores(*dense.predict_latent(cross(X, Xs), np.full(n_test, AMP))))]
    for m in ms:
        Xu = kmeans_inputs(m, X)
        res = ep(FITCPrior(*fitc_inputs(X, Xu)), y, lik)
        rows.append((f"FITC m={m}", res.log_z, res.log_z - dense.log_z,
                     *scores(*res.predict_latent(cross(Xu, Xs), np.full(n_test, AMP)))))
        print(rows[-1], flush=True)
    return rows


def warm_only(pairs):
    for n, m in pairs:
        X, y = synthetic(n)
        Xu = X[np.random.default_rng(1).choice(n, m, replace=False)]
        base = evaluate(fitc_inputs(X, Xu), y, None, 1e-2)
        near = fitc_inputs(X, Xu, 1.02)
        t, r = median_time(lambda: evaluate(near, y, base.state, 1e-2), 5)
        print(f"n={n} m={m} warm median {t * 1e3:.0f} ms ({r.n_iter} sweeps)", flush=True)


def thread_rows(pairs, k=8, rounds=3):
    """Two threads at once against one doing their work in turn: warm evaluations at tol
    1e-2 (k per thread, each at its own hyperparameters 0-4 % from the start's). nutpie
    runs chains as threads, so an evaluation that holds the GIL serialises them."""
    import threading

    rows = []
    for n, m in pairs:
        X, y = synthetic(n)
        Xu = X[np.random.default_rng(1).choice(n, m, replace=False)]
        base = evaluate(fitc_inputs(X, Xu), y, None, 1e-2)
        points = [[fitc_inputs(X, Xu, 1.0 + 0.005 * (j + 1) * (1 if t else -1)) for j in range(k)] for t in (0, 1)]

        def work(t):
            for inputs in points[t]:
                evaluate(inputs, y, base.state, 1e-2)

        work(0)
        for _ in range(rounds):
            t0 = time.perf_counter()
            work(0)
            work(1)
            seq = time.perf_counter() - t0
            threads = [threading.Thread(target=work, args=(t,)) for t in (0, 1)]
            t0 = time.perf_counter()
            for th in threads:
                th.start()
            for th in threads:
                th.join()
            par = time.perf_counter() - t0
            rows.append((n, m, seq, par))
            print(f"n={n} m={m}: in turn {seq:.2f} s, two threads {par:.2f} s, ratio {par / seq:.2f}", flush=True)
    return rows


def threads_main():
    rows = thread_rows(((10_000, 100), (10_000, 200), (40_000, 100)))
    lines = ["# FITC: two sampler threads", "",
             "Generated by `OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/sparse.py --threads`"
             f" ({os.environ.get('BENCH_MACHINE', 'this machine')}, 2 cores).", "",
             "8 warm evaluations (structure + EP at tol 1e-2 + gradient) per thread, two threads at once",
             "against the same 16 evaluations in one thread; 0.5 would be perfect scaling, 1.0 none.", "",
             "| n | m | in turn (s) | two threads (s) | ratio |", "|---|---|---|---|---|"]
    lines += [f"| {n} | {m} | {a:.2f} | {b:.2f} | {b / a:.2f} |" for n, m, a, b in rows]
    out = OUT.with_name("sparse_threads.md")
    write_results(out, "\n".join(lines) + "\n")
    print("\n".join(lines))


def _hyper_directions(X, Xu, ls, amp, h=1e-5):
    """d(K_uu, K_uf, diag K_ff) / d(log lengthscale) and / d(log amplitude), by central
    differences of the kernel matrices."""
    global LS, AMP
    saved, dirs = (LS, AMP), []
    for which in (0, 1):
        plus, minus = [np.log(ls), np.log(amp)], [np.log(ls), np.log(amp)]
        plus[which] += h
        minus[which] -= h
        LS, AMP = np.exp(plus)
        a = fitc_inputs(X, Xu)
        LS, AMP = np.exp(minus)
        b = fitc_inputs(X, Xu)
        dirs.append([(u - v) / (2 * h) for u, v in zip(a, b)])
    LS, AMP = saved
    return dirs


def _along(grad, direction):
    return float(np.sum(grad.Kuu * direction[0]) + np.sum(grad.Kuf * direction[1]) + grad.k_diag @ direction[2])


def gradient_rows():
    """(data, n, m, Xu, ls, amp, direction, gradient, rel. error of tol 1e-2, rel. error of rounding)."""
    from pymc_gpc.datasets import load_default

    global LS, AMP
    saved, rows = (LS, AMP), []
    default = load_default()  # ISLR's Default, 8000 training rows, 3 standardised inputs
    cases = [("synthetic", *synthetic(n), m, how) for n, m, how in
             ((2000, 100, "subset"), (2000, 100, "k-means"), (10_000, 200, "subset"), (10_000, 50, "k-means"))]
    cases += [("Default", default.X_train, default.y_train, m, "k-means") for m in (50, 200)]
    for data, X, y, m, how in cases:
        n = len(y)
        Xu = X[np.random.default_rng(1).choice(n, m, replace=False)] if how == "subset" else kmeans_inputs(m, X)
        for ls, amp in ((1.5, 2.0), (0.7, 5.0), (3.0, 1.0), (1.0, 20.0)):
            dirs = _hyper_directions(X, Xu, ls, amp)
            LS, AMP = ls / 1.02, amp * 1.02
            base = evaluate(fitc_inputs(X, Xu), y, None, 1e-2)
            LS, AMP = ls, amp
            inputs = fitc_inputs(X, Xu)
            tight = evaluate(inputs, y, None, 1e-10)
            res = evaluate(inputs, y, base.state, 1e-2)
            exact = res.posterior.ep_gradient(res.a)
            rough = res.posterior.ep_gradient(res.a, rough=True)
            for name, d in zip(("log ls", "log amp"), dirs):
                g_tight, g_exact, g_rough = (_along(g, d) for g in (tight.dlog_z_dK, exact, rough))
                rows.append((data, n, m, how, ls, amp, name, g_tight, abs(g_exact - g_tight) / abs(g_tight),
                             abs(g_rough - g_exact) / abs(g_tight)))
                print(rows[-1], flush=True)
    LS, AMP = saved
    return rows


def gradient_timing(pairs, rounds=7):
    """Warm evaluations at tol 1e-2 (as ``warm_only``) with the rough gradient and with the
    double one (``FITCPosterior.ep_gradient`` forced exact), alternated; medians."""
    from pymc_gpc.structures.fitc import FITCPosterior

    rough_gradient = FITCPosterior.ep_gradient
    rows = []
    for n, m in pairs:
        X, y = synthetic(n)
        Xu = X[np.random.default_rng(1).choice(n, m, replace=False)]
        base = evaluate(fitc_inputs(X, Xu), y, None, 1e-2)
        near = fitc_inputs(X, Xu, 1.02)
        times = {"double": [], "rough": []}
        for _ in range(rounds if n <= 10_000 else 3):
            for label in times:
                FITCPosterior.ep_gradient = (rough_gradient if label == "rough" else
                                             lambda self, b, rough=False: rough_gradient(self, b))
                t = time.perf_counter()
                evaluate(near, y, base.state, 1e-2)
                times[label].append(time.perf_counter() - t)
        FITCPosterior.ep_gradient = rough_gradient
        ratio = float(np.median(np.array(times["rough"]) / np.array(times["double"])))
        rows.append((n, m, np.median(times["double"]), np.median(times["rough"]), ratio))
        print(rows[-1], flush=True)
    return rows


def gradient_main():
    started = time.time()
    timing = gradient_timing(((2000, 200), (10_000, 100), (10_000, 200), (100_000, 100), (100_000, 200)))
    acc = gradient_rows()
    lines = ["# FITC: the sampler's single-precision gradient", "",
             "Generated by `OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/sparse.py --gradient`"
             f" (one BLAS thread; {os.environ.get('BENCH_MACHINE', 'this machine')}).", "",
             "At EP tolerances of 1e-3 and looser (the sampler's: 1e-2) the gradient's two m^2 n products",
             "(L_uu^-T P and the dsyrk of `FITCPosterior.kernel_gradient`) run in single precision.", "",
             "## Warm evaluation (structure + EP + gradient, tol 1e-2), double and rough gradient alternated",
             "", "| n | m | double gradient (ms) | rough gradient (ms) | time ratio (median of pairs) |",
             "|---|---|---|---|---|"]
    lines += [f"| {n} | {m} | {a * 1e3:.0f} | {b * 1e3:.0f} | {r:.2f} |" for n, m, a, b, r in timing]
    lines += ["", "## Error in the gradient along a hyperparameter, relative to the gradient of a 1e-10 solve", "",
              "Synthetic 5-d data (as part 1) and ISLR's Default (8000 training rows, 3 standardised inputs),",
              "SE kernel at the lengthscale and amplitude given, EP warm-started at tol 1e-2 from the solution",
              "at hyperparameters 2 % away; directions by central differences of the kernel matrices.", "",
              "| data | n | m | Xu | lengthscale | amplitude | direction | gradient (tol 1e-10) | error of tol 1e-2 | error of rounding |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {data} | {n} | {m} | {how} | {ls:g} | {amp:g} | {name} | {g:.3f} | {e1:.1e} | {e2:.1e} |"
              for data, n, m, how, ls, amp, name, g, e1, e2 in acc]
    worst = max(e2 for *_, e2 in acc)
    below = sum(e2 < e1 for *_, e1, e2 in acc)
    lines += ["", f"Rounding error at most {worst:.1e}; below the tolerance's error in {below} of {len(acc)} cases.",
              "", f"Total run time {time.time() - started:.0f} s."]
    out = OUT.with_name("sparse_gradient.md")
    write_results(out, "\n".join(lines) + "\n")
    print("\n".join(lines))


def main():
    if "--gradient" in sys.argv:
        return gradient_main()
    if "--threads" in sys.argv:
        return threads_main()
    if "--warm" in sys.argv:
        args = [int(a) for a in sys.argv[sys.argv.index("--warm") + 1:]]
        return warm_only(zip(args[::2], args[1::2]))
    quick = "--quick" in sys.argv
    sizes = (1000, 10_000) if quick else (1000, 4000, 10_000, 100_000)
    started = time.time()
    acc = accuracy_rows((25, 50, 100, 200, 400))
    scale = []
    for n in sizes:  # the table is rewritten after every size (a long run can be stopped)
        scale += scaling_rows((n,), (100, 200, 500), dense_max=2000 if quick else 4000)
        write(scale, acc, started)


def write(scale, acc, started):
    lines = [
        "# FITC (inducing points): EP evidence + gradient",
        "",
        "Generated by `OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/sparse.py`"
        f" (one BLAS thread; {os.environ.get('BENCH_MACHINE', 'this machine')}).",
        "",
        "## Time and memory per evaluation (structure + EP + gradient, kernel matrices given)",
        "",
        "| n | prior | EP tol | warm (ms) | sweeps | cold (ms) | sweeps | peak MB (cold) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for n, name, tol, tw, sw, tc, sc, mem in scale:
        lines.append(f"| {n} | {name} | {tol:g} | {tw * 1e3:.0f} | {sw} | {tc * 1e3:.0f} | {sc} | "
                     + ("-" if np.isnan(mem) else f"{mem:.0f}") + " |")
    lines += ["", "Dense rows: peak MB is that of the dense path's three n x n matrices (K, L, L^-1), "
              "computed, not measured.", "",
              "## Accuracy against dense EP at n = 2000 (1000 test points, fixed hyperparameters)", "",
              "| prior | log evidence | gap to dense | test errors / 1000 | mean test log p |",
              "|---|---|---|---|---|"]
    for name, lz, gap, err, lp in acc:
        lines.append(f"| {name} | {lz:.2f} | {gap:+.2f} | {err} | {lp:.4f} |")
    lines += ["", f"Total run time {time.time() - started:.0f} s."]
    write_results(OUT, "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
