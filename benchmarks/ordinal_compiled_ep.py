"""Ordinal EP on the numba backend: the compiled path (``backends.numba.compiled_ep``) against
the Op's Python path (object-mode ``perform``, what ordinal likelihoods ran on before they
were admitted to the compiled path), issue 47.

A model with n = 300 points (2 inputs), an ordered probit with K = 4 (free cutpoints under
the ordered transform, sigma 0.5), free lengthscale and amplitude. For each path
(``backends.numba.dispatch.COMPILED_EP`` on / off when the graph is compiled):

1. ``model.compile_fn([logp, dlogp], mode="NUMBA")`` along a random walk of 40 points
   (steps of 0.05 in every unconstrained coordinate, as NUTS's leapfrog moves): the median
   time of one evaluation of log p and its gradient, warm-started from the previous point;
2. ``pymc_gpc.sample`` (PyMC's NUTS, one chain, 100 tune + 100 draws, seed 1): wall time
   and time per gradient evaluation (sample_stats ``n_steps`` summed).

Run:  OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/ordinal_compiled_ep.py
Writes benchmarks/results/ordinal_compiled_ep.md.
"""

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import pathlib
import time

import numpy as np
import pymc as pm
from _provenance import write_results  # noqa: E402  (benchmarks/_provenance.py)

import pymc_gpc
from pymc_gpc.backends.numba import dispatch as numba_dispatch

OUT = pathlib.Path(__file__).parent / "results" / "ordinal_compiled_ep.md"
N, K_CLASSES, WALK = 300, 4, 40


def data():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(N, 2))
    f = np.sin(1.5 * X[:, 0]) + 0.5 * X[:, 1] + 0.4 * rng.normal(size=N)
    cuts = np.quantile(f, np.arange(1, K_CLASSES) / K_CLASSES)
    return X, np.digitize(f, cuts)


def model(X, y):
    with pm.Model() as m:
        ls = pm.LogNormal("ls", 0.0, 0.5)
        amp = pm.HalfNormal("amp", 2.0)
        c = pm.Normal("c", 0.0, 3.0, shape=K_CLASSES - 1, transform=pm.distributions.transforms.ordered,
                      initval=np.linspace(-1.0, 1.0, K_CLASSES - 1))
        gp = pymc_gpc.MarginalEP(cov_func=amp ** 2 * pm.gp.cov.ExpQuad(2, ls=ls),
                                 likelihood=pymc_gpc.OrderedProbit(c, sigma=0.5))
        gp.marginal_likelihood("y", X=X, y=y)
    return m


def walk_time(X, y, compiled):
    numba_dispatch.COMPILED_EP = compiled
    m = model(X, y)
    fn = m.compile_fn([m.logp(), m.dlogp()], mode="NUMBA")
    point = m.initial_point()
    fn(point)  # compilation and a cold start
    rng = np.random.default_rng(1)
    times = []
    for _ in range(WALK):
        point = {k: v + 0.05 * rng.normal(size=np.shape(v)) for k, v in point.items()}
        t = time.perf_counter()
        value, grad = fn(point)
        times.append(time.perf_counter() - t)
        assert np.isfinite(value) and np.all(np.isfinite(grad))
    return float(np.median(times))


def sample_time(X, y, compiled):
    numba_dispatch.COMPILED_EP = compiled
    with model(X, y):
        t = time.perf_counter()
        idata = pymc_gpc.sample(draws=100, tune=100, chains=1, cores=1, random_seed=1, progressbar=False,
                                nuts_sampler="pymc", compute_convergence_checks=False)
        wall = time.perf_counter() - t
    steps = int(idata.sample_stats["n_steps"].sum())  # draws only; tuning steps are not stored
    return wall, steps


def main():
    X, y = data()
    rows = []
    for compiled in (True, False):
        per_call = walk_time(X, y, compiled)
        wall, steps = sample_time(X, y, compiled)
        rows.append((compiled, per_call, wall, steps))
        print(compiled, per_call, wall, steps, flush=True)
    numba_dispatch.COMPILED_EP = True
    lines = ["# Ordinal EP: the numba compiled path against the Op's Python path", "",
             f"Ordered probit, K = {K_CLASSES}, n = {N} (2 inputs), free lengthscale, amplitude and cutpoints "
             "(`benchmarks/ordinal_compiled_ep.py`). Walk: median of one log p + gradient evaluation over a "
             f"{WALK}-point random walk (`compile_fn(mode=\"NUMBA\")`, warm starts). Sample: `pymc_gpc.sample`, "
             "PyMC's NUTS, 1 chain, 100 tune + 100 draws (sampling tolerance), wall time including compilation; "
             "leapfrog steps counted over the draws only.", "",
             "| path | walk: s per evaluation | sample: wall s | sample: draw steps |", "|---|---|---|---|"]
    for compiled, per_call, wall, steps in rows:
        name = "compiled (`compiled_ep`)" if compiled else "Python (`perform`, object mode)"
        lines.append(f"| {name} | {per_call:.4f} | {wall:.1f} | {steps} |")
    ratio = rows[1][1] / rows[0][1]
    lines += ["", f"Walk: the Python path takes {ratio:.2f} times the compiled path's time per evaluation."]
    write_results(OUT, "\n".join(lines) + "\n", note="2 cores shared with other jobs: timings are noisy")


if __name__ == "__main__":
    main()
