"""FITC evidence + gradient: the numba path against the JAX backend (``backends/jax/fitc.py``).

Synthetic 5-d data and an ARD squared-exponential kernel (``engine.synthetic``, lengthscale
1.5, amplitude 2), m inducing inputs drawn from the data, probit. Sections:

``--cpu``   CPU time of one evidence + gradient evaluation, numba (``pymc_gpc.ep`` on a
            ``FITCPrior``) against JAX (jitted, after a compiling call), cold starts, one
            thread each (XLA's CPU backend is set to one thread before jax is imported),
            n = 10^4 and 5 x 10^4, m = 200, at the engine's tol 1e-8 and the sampler's 1e-2.
``--walk``  EP sweeps per evaluation along a NUTS-like random walk of (log lengthscale,
            log amplitude): numba cold, numba warm (the previous point's sites, as the Op's
            per-thread warm starts) and JAX (cold: a pure function keeps no sites).
``--nuts``  numpyro (``pymc_gpc.sample(nuts_sampler="numpyro")``, vectorised chains) against
            PyMC's NUTS on a tiny FITC EP model (n = 40, m = 6): posterior means and sds
            within Monte Carlo error (4 combined MCSEs + 0.02).
``--gpu``   Prepared for an accelerator session, NOT RUN HERE: JAX only, n = 10^5 and 10^6,
            m = 200 and 500, tol 1e-2 and 1e-8, on whatever device JAX sees; one short call:
            ``python benchmarks/jax_fitc.py --gpu --out results/jax_fitc_gpu.md``.

Run:  nice python benchmarks/jax_fitc.py --cpu --walk   (writes benchmarks/results/jax_fitc.md)
"""

import argparse
import os
import sys

_GPU = "--gpu" in sys.argv
if not _GPU:  # one thread for XLA's CPU backend, as OMP/OPENBLAS for numba's BLAS
    for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_v, "1")
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                               + " --xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")

import pathlib  # noqa: E402
import time  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from _provenance import write_results  # noqa: E402  (benchmarks/_provenance.py)
from engine import rbf, synthetic  # noqa: E402  (benchmarks/engine.py)

from pymc_gpc import ep  # noqa: E402
from pymc_gpc.backends.jax import fitc as jax_fitc  # noqa: E402
from pymc_gpc.likelihoods import Probit  # noqa: E402
from pymc_gpc.structures import FITCPrior  # noqa: E402

OUT = pathlib.Path(__file__).parent / "results" / "jax_fitc.md"
PROBIT = Probit.kind


def fitc_inputs(n, m, ls=1.5, amp=2.0, seed=0):
    X, y = synthetic(n, seed)
    Xu = X[np.random.default_rng(seed + 1).choice(n, m, replace=False)]
    Kuu = rbf(Xu, ls, amp) + 1e-8 * amp * np.eye(m)
    return Kuu, rbf(Xu, ls, amp, X), np.full(n, amp), y


def _median_time(fn, repeats):
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times)), out


def cpu_rows(sizes, m, tols, repeats):
    rows = []
    for n in sizes:
        Kuu, Kuf, kd, y = fitc_inputs(n, m)
        for tol in tols:
            fn = jax.jit(jax_fitc.marginal_fn("ep", PROBIT, tol=tol))
            args = (Kuu, Kuf, kd, jnp.zeros(0), y)
            t0 = time.perf_counter()
            jax.block_until_ready(fn(*args))
            first = time.perf_counter() - t0
            t_jax, out = _median_time(lambda: jax.block_until_ready(fn(*args)), repeats)
            t_nb, res = _median_time(lambda: ep(FITCPrior(Kuu, Kuf, kd), y, Probit(), tol=tol), repeats)
            rows.append(f"| {n} | {m} | {tol:g} | {t_nb:.2f} ({res.n_iter}) | {t_jax:.2f} ({int(out[-2])}) | "
                        f"{t_jax / t_nb:.2f} | {first:.1f} | {abs(float(out[0]) - res.log_z):.1e} |")
            print(rows[-1], flush=True)
    return ["## CPU: one evidence + gradient, cold start, one thread", "",
            "Median of the repeats after a compiling call; in brackets the EP sweeps. `first` is the JAX "
            "call that compiled (seconds). `|dlog Z|`: the two backends' evidence difference.", "",
            "| n | m | tol | numba s (sweeps) | JAX s (sweeps) | JAX / numba | first JAX call s | abs diff log Z |",
            "|---|---|---|---|---|---|---|---|", *rows, ""]


def walk_rows(n, m, steps, step_size, tols, seed=2):
    """Sweeps along a random walk in (log ls, log amp): each point a small move from the last."""
    X, y = synthetic(n, seed)
    Xu = X[np.random.default_rng(seed).choice(n, m, replace=False)]
    rng = np.random.default_rng(seed + 7)
    h = np.array([np.log(1.5), np.log(2.0)])
    path = []
    for _ in range(steps):
        h = h + step_size * rng.normal(size=2)
        path.append(h.copy())
    lines = []
    for tol in tols:
        fn = jax.jit(jax_fitc.marginal_fn("ep", PROBIT, tol=tol))
        cold, warm, jx, state = [], [], [], None
        for ls, amp in np.exp(path):
            Kuu, Kuf = rbf(Xu, ls, amp) + 1e-8 * amp * np.eye(m), rbf(Xu, ls, amp, X)
            prior = FITCPrior(Kuu, Kuf, np.full(n, amp))
            cold.append(ep(prior, y, Probit(), tol=tol).n_iter)
            r = ep(prior, y, Probit(), tol=tol, state=state)
            warm.append(r.n_iter)
            state = r.state
            jx.append(int(fn(Kuu, Kuf, np.full(n, amp), jnp.zeros(0), y)[-2]))
        lines.append(f"| {tol:g} | {np.mean(cold):.2f} | {np.mean(warm):.2f} | {np.mean(jx):.2f} | "
                     f"{np.max(cold)} / {np.max(warm)} / {np.max(jx)} |")
        print(lines[-1], flush=True)
    return [f"## EP sweeps along a random walk (n = {n}, m = {m}, {steps} points, step sd {step_size} "
            "in log lengthscale and log amplitude)", "",
            "Numba cold: zero sites at every point; numba warm: the previous point's sites (the Op's "
            "per-thread warm start); JAX: cold (Anderson-accelerated parallel EP from zero sites).", "",
            "| tol | numba cold sweeps (mean) | numba warm | JAX cold | max cold / warm / JAX |",
            "|---|---|---|---|---|", *lines, ""]


def nuts_rows(draws=500, tune=500):
    import warnings

    import arviz as az
    import pymc as pm
    import pytensor.tensor as pt

    import pymc_gpc

    rng = np.random.default_rng(0)
    X = rng.uniform(-3, 3, size=(40, 1))
    y = np.where(np.sin(1.5 * X[:, 0]) + 0.3 * rng.normal(size=40) > 0, 1, -1)
    with pm.Model() as model:
        log_ls = pm.Normal("log_ls", 0.0, 1.0)
        log_amp = pm.Normal("log_amp", 0.0, 1.0)
        cov = pt.exp(log_amp) * pm.gp.cov.ExpQuad(1, ls=pt.exp(log_ls))
        gp = pymc_gpc.MarginalEP(cov_func=cov, likelihood=pymc_gpc.likelihoods.Probit(), approx="FITC")
        gp.marginal_likelihood("y", X=X, y=y, Xu=np.linspace(-3, 3, 6)[:, None])
    kw = dict(draws=draws, tune=tune, chains=2, random_seed=3, progressbar=False)
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t0 = time.perf_counter()
        ref = pymc_gpc.sample(**kw, cores=1, nuts_sampler="pymc")
        t_ref = time.perf_counter() - t0
        t0 = time.perf_counter()
        jx = pymc_gpc.sample(**kw, nuts_sampler="numpyro", nuts={"chain_method": "vectorized"})
        t_jx = time.perf_counter() - t0
    rows = []
    for name in ("log_ls", "log_amp"):
        a, b = az.summary(ref, var_names=[name]).iloc[0], az.summary(jx, var_names=[name]).iloc[0]
        se = float(np.hypot(a["mcse_mean"], b["mcse_mean"]))
        se_sd = float(np.hypot(a["mcse_sd"], b["mcse_sd"]))
        ok = abs(a["mean"] - b["mean"]) <= 4 * se + 0.02 and abs(a["sd"] - b["sd"]) <= 4 * se_sd + 0.02
        rows.append(f"| {name} | {a['mean']:.3f} ({a['mcse_mean']:.3f}) | {b['mean']:.3f} ({b['mcse_mean']:.3f}) | "
                    f"{a['sd']:.3f} | {b['sd']:.3f} | {'yes' if ok else 'NO'} |")
    status = np.asarray(jx["sample_stats"]["y_status"])
    return [f"## numpyro against PyMC's NUTS on a FITC EP model (n = 40, m = 6, 2 chains x ({tune} + {draws}))", "",
            f"Wall time (compilation included): PyMC {t_ref:.0f} s, numpyro {t_jx:.0f} s; numpyro's "
            f"evaluations: {int(np.sum(status == 0))} of {status.size} recorded draws converged.", "",
            "| variable | PyMC mean (mcse) | numpyro mean (mcse) | PyMC sd | numpyro sd | within MC error |",
            "|---|---|---|---|---|---|", *rows, ""]


def gpu_rows(sizes, ms, tols, repeats):
    """JAX only, on the default device (prepared for an accelerator session)."""
    rows = []
    for m in ms:
        for n in sizes:
            Kuu, Kuf, kd, y = fitc_inputs(n, m)
            args = [jax.device_put(a) for a in (Kuu, Kuf, kd, np.zeros(0), y)]
            for tol in tols:
                fn = jax.jit(jax_fitc.marginal_fn("ep", PROBIT, tol=tol))
                t0 = time.perf_counter()
                jax.block_until_ready(fn(*args))
                first = time.perf_counter() - t0
                t, out = _median_time(lambda: jax.block_until_ready(fn(*args)), repeats)
                rows.append(f"| {n} | {m} | {tol:g} | {t:.3f} | {int(out[-2])} | {first:.1f} | {int(out[-1])} |")
                print(rows[-1], flush=True)
    return [f"## Accelerator: FITC EP evidence + gradient on {jax.devices()[0].device_kind}", "",
            "| n | m | tol | s per evaluation (median) | sweeps | first call s | status |",
            "|---|---|---|---|---|---|---|", *rows, ""]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cpu", action="store_true")
    p.add_argument("--walk", action="store_true")
    p.add_argument("--nuts", action="store_true")
    p.add_argument("--gpu", action="store_true")
    p.add_argument("--sizes", type=int, nargs="+", default=None)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", default=None)
    a = p.parse_args()
    load = os.getloadavg()[0]
    lines = ["# FITC evidence + gradient: numba against the JAX backend", "",
             f"1-minute load average at the start: {load:.2f} (the machine is shared; compare ratios "
             "within a run).", ""]
    if a.cpu:
        lines += cpu_rows(a.sizes or [10_000, 50_000], 200, [1e-2, 1e-8], a.repeats)
    if a.walk:
        lines += walk_rows(2000, 50, 60, 0.05, [1e-2, 1e-8])
    if a.nuts:
        lines += nuts_rows()
    if a.gpu:
        lines += gpu_rows(a.sizes or [100_000, 1_000_000], [200, 500], [1e-2, 1e-8], a.repeats)
    write_results(pathlib.Path(a.out) if a.out else OUT, "\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
