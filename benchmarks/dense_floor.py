"""Dense EP and Laplace logp + gradient against their floor (issue 60, part 3).

Protocol (fixed before the first run). Binary probit, ARD squared-exponential kernel
(``pymc_gpc.ard_classifier``, d = 8), synthetic data: X ~ N(0, I_8), labels from a
draw of a smooth function (``datasets.synthetic``-like: y = 1[sin(x_1) + x_2 x_3 / 2 + e > 0],
e ~ N(0, 0.5^2), seed 0), n = 1,000, 2,000 and 5,000. For each n and approximation:

- the model's logp + gradient as NUTS calls it (``model.logp_dlogp_function`` compiled
  inside ``ops.rewrites.sampling_tolerance``, the numba backend), *warm*: evaluated once at
  the initial point, then along a random walk from there with N(0, 1e-3^2) steps in every
  log-hyperparameter (small moves like a NUTS trajectory's; a new point each call, since the
  Op answers a repeated point from its recent results), median of ``REPEATS`` calls;
- the floor: one Cholesky of an n x n SPD matrix (``scipy.linalg.lapack.dpotrf``) plus the
  inverse the gradient needs (``dpotri``), median of ``REPEATS``;
- the ratio of the two, measured in the same process one after the other.

One BLAS thread (OMP/OPENBLAS set to 1 before NumPy loads). The machine is shared: the
ratios, measured back to back in one process, are the figures to read, not the seconds.

Run:  OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/dense_floor.py [--sizes 1000 2000 5000]
Writes benchmarks/results/dense_floor.md.
"""

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse
import pathlib
import sys
import time

import numpy as np
from scipy.linalg import lapack

sys.path.insert(0, str(pathlib.Path(__file__).parent))
sys.path.insert(0, str(pathlib.Path(__file__).parent.parent))  # this checkout's pymc_gpc, not an installed one
from _provenance import write_results  # noqa: E402

import pymc_gpc  # noqa: E402
from pymc_gpc.ops.rewrites import sampling_tolerance  # noqa: E402

OUT = pathlib.Path(__file__).parent / "results" / "dense_floor.md"
REPEATS = 5
D = 8


def data(n, seed=0):
    """The protocol's synthetic binary set."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, D))
    f = np.sin(X[:, 0]) + 0.5 * X[:, 1] * X[:, 2] + 0.5 * rng.standard_normal(n)
    return X, (f > 0).astype(int)


def floor(n, repeats=REPEATS, seed=1):
    """Median seconds of dpotrf + dpotri on an n x n SPD matrix."""
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((n, n)) / np.sqrt(n)
    S = A @ A.T + np.eye(n)
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        c, info = lapack.dpotrf(S, lower=1)
        inv, info2 = lapack.dpotri(c, lower=1)
        times.append(time.perf_counter() - t)
        assert info == 0 and info2 == 0
    return float(np.median(times))


def evaluation(n, approximation, repeats=REPEATS):
    """Median seconds of a warm logp + gradient (module docstring), and the cold first call."""
    X, y = data(n)
    model, _gp = pymc_gpc.ard_classifier(X, y, approximation=approximation, inducing=None)
    with sampling_tolerance():
        f = model.logp_dlogp_function(ravel_inputs=True)
    f.set_extra_values({})
    x0 = model.initial_point()
    q0 = np.concatenate([np.ravel(x0[v.name]) for v in model.continuous_value_vars])
    t = time.perf_counter()
    f(q0)
    cold = time.perf_counter() - t
    times = []
    steps = 1e-3 * np.random.default_rng(2).standard_normal((repeats, q0.size))
    for i in range(repeats):
        q = q0 + steps[: i + 1].sum(axis=0)  # a new point each call (the Op keeps recent results)
        t = time.perf_counter()
        logp, grad = f(q)
        times.append(time.perf_counter() - t)
        assert np.isfinite(logp) and np.all(np.isfinite(grad))
    return float(np.median(times)), cold


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 2000, 5000])
    args = parser.parse_args()
    rows = []
    for n in args.sizes:
        base = floor(n)
        for approximation in ("ep", "laplace"):
            warm, cold = evaluation(n, approximation)
            rows.append((n, approximation, warm, cold, base))
            print(f"n={n} {approximation}: warm {warm:.3f} s, cold {cold:.3f} s, floor {base:.3f} s, "
                  f"ratio {warm / base:.2f}", flush=True)
    lines = ["# Dense logp + gradient against one Cholesky plus its inverse", "",
             "Binary probit, ARD SE kernel (d = 8), synthetic data; warm evaluations at the sampler's",
             "tolerances (`model.logp_dlogp_function` under `sampling_tolerance`), medians of "
             f"{REPEATS}; floor: LAPACK dpotrf + dpotri, one thread, median of {REPEATS}. The machine",
             "was shared and loaded by other jobs: read the ratios (measured back to back in one",
             "process), not the seconds.", "",
             "| n | approximation | warm logp + grad (s) | first call (s) | floor (s) | ratio |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {n} | {a} | {w:.3f} | {c:.3f} | {b:.3f} | {w / b:.2f} |" for n, a, w, c, b in rows]
    write_results(OUT, "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
