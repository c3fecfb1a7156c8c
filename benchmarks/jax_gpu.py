"""Dense EP evidence + gradient with the JAX engine, on whatever device JAX sees (GPU or CPU).

The data and kernel of ``benchmarks/engine.py`` (synthetic 5-d data, probit, ARD squared
exponential with lengthscales 1.5 and amplitude 2, jitter 1e-8), float64. One call of
``jax_engine.marginal_fn`` computes log Z and dlog Z / dK together (cold start, parallel EP
with Anderson acceleration): timed after a compiling call, median of ``--repeats``, at the
engine's tolerance 1e-8 and at the sampler's 1e-2, with the sweeps taken.

Runs without PyMC: it imports ``pymc_gpc.backends.jax.engine`` if it can, else the
two engine files copied beside this script as a package ``gpcjax`` (how it ran on the
accelerator machine). Prints a markdown table; ``--out FILE`` also writes it.

    python benchmarks/jax_gpu.py --sizes 2000 5000 10000 20000 [--out results.md]
"""

import argparse
import os
import platform
import sys
import time

import numpy as np
from _provenance import write_results  # noqa: E402  (benchmarks/_provenance.py, copied beside this file)

try:
    from pymc_gpc.backends.jax import engine as jax_engine
except Exception:  # no PyMC here (ImportError or worse): the engine files carried beside this script
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from gpcjax.approximations import jax_engine

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

PROBIT = 0


def synthetic(n, seed=0):
    """``benchmarks/engine.synthetic``."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 5))
    y = np.where(X[:, 0] + X[:, 1] ** 2 - 1.0 + 0.5 * rng.normal(size=n) > 0, 1.0, -1.0)
    return X, y


@jax.jit
def rbf(X, ls, amp):
    Z = X / ls
    sq = jnp.sum(Z * Z, axis=1)
    D = jnp.maximum(sq[:, None] + sq[None, :] - 2.0 * Z @ Z.T, 0.0)
    return amp * jnp.exp(-0.5 * D) + 1e-8 * jnp.eye(X.shape[0])


def timed(fn, args, repeats):
    t0 = time.perf_counter()
    out = jax.block_until_ready(fn(*args))
    first = time.perf_counter() - t0
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t0)
    return first, float(np.median(times)), out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[2000, 5000, 10000, 20000])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--tols", type=float, nargs="+", default=[1e-8, 1e-2])
    ap.add_argument("--out")
    args = ap.parse_args()
    dev = jax.devices()[0]
    lines = [f"device: {dev.device_kind} ({dev.platform}); jax {jax.__version__}; host {platform.node()}", "",
             "| n | tol | first call incl. compile (s) | evidence + gradient (s) | sweeps | log Z | status |",
             "|---|---|---|---|---|---|---|"]
    print("\n".join(lines), flush=True)
    fns = {tol: jax.jit(jax_engine.marginal_fn("ep", PROBIT, tol=tol)) for tol in args.tols}
    for n in args.sizes:
        X, y = synthetic(n)
        K = rbf(jnp.asarray(X), jnp.full(5, 1.5), 2.0)
        yj, th = jnp.asarray(y), jnp.zeros(0)
        for tol, fn in fns.items():
            first, med, out = timed(fn, (K, th, yj), args.repeats)
            row = (f"| {n} | {tol:g} | {first:.2f} | {med:.3f} | {int(out[4])} | {float(out[0]):.4f} | "
                   f"{int(out[5])} |")
            lines.append(row)
            print(row, flush=True)
    if args.out:
        write_results(args.out, "\n".join(lines) + "\n", peers=("jax", "jaxlib"),
                      note=f"device: {dev.device_kind} ({dev.platform})")


if __name__ == "__main__":
    main()
