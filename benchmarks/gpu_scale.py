"""One accelerator session's measurements of the JAX backend at scale: FITC EP evidence +
gradient at n = 10^5 and 10^6, multi-class FITC at n = 10^5, c = 5, and numpyro's NUTS over
the hyperparameters of a FITC model with 10^6 rows.

Written for a lent GPU machine with minutes of device time: one process, every section
guarded (a failure is recorded and the next section runs), every row appended to
``--out`` (a markdown file) as soon as it is measured, and a wall-clock budget
(``--budget`` seconds from the start) that the sampler section sizes itself to.

0. smoke: the device JAX sees, pymc-gpc's import, a 2,000-row FITC evaluation on the
   device against the same function on the host's XLA CPU backend (log Z to 1e-8 relative, gradient to 1e-6). The run stops
   here if this fails.
1. FITC EP, end to end: the ARD squared-exponential kernel (5 inputs, variance exp(h_amp),
   lengthscales exp(h_ls)) built on the device from X and m inducing inputs (rows of X),
   ``jax.value_and_grad`` of log Z in the 6 log-hyperparameters through
   ``backends.jax.fitc.marginal_fn``'s ``custom_vjp`` (what a JAX sampler evaluates):
   n in ``--sizes``, m in ``--ms``, at the sampler's tol 1e-2 and at the engine's 1e-8.
   Median of ``--repeats`` calls after a compiling call. Data: ``engine.synthetic``
   (y = sign(x0 + x1^2 - 1 + noise)), lengthscales 1.5, variance 2.
   At the first (n, m), tol 1e-8, the same function on the host's XLA CPU backend is the reference.
2. Multi-class FITC (``jax_backend.fitc_rows``, its ``multiclass`` subcommand's): softmax Laplace and nested EP,
   n = 10^5, c = 5, m = 200, one evaluation (evidence, gradient in K_uu, K_uf, diag K_ff,
   LOO terms) after a compiling call.
3. numpyro NUTS (``pm.sample(nuts_sampler="numpyro")``, 2 vectorised chains, the
   sampler's tolerances as ``pymc_gpc.sample`` sets them) on a PyMC model with a
   ``MarginalEP(approx="FITC")`` term, n = ``--nuts-n``, m = ``--nuts-m``, priors
   N(log 1.5, 1) on the log lengthscales and N(log 2, 1) on the log variance. tune = draws,
   sized from section 1's evaluation time to end inside the budget (at most 500 + 500).

Run on the accelerator machine:
    python benchmarks/gpu_scale.py --out $OUT/gpu_scale.md --budget 420
``--out`` defaults to benchmarks/results/jax_gpu_scale.md; the file starts with the provenance
header of ``_provenance.py``.
A dry run on a CPU: ``--sizes 2000 --ms 20 --mc-n 500 --mc-m 10 --nuts-n 500 --nuts-m 10``
(``run.py --quick gpu`` runs it).
"""

import argparse
import os
import pathlib
import platform
import subprocess
import sys
import time
import traceback

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
T0 = time.time()

from engine import median_time, synthetic  # noqa: E402  (benchmarks/engine.py)
from _provenance import header, results_path  # noqa: E402  (benchmarks/_provenance.py)


class Report:
    """Lines appended to a markdown file, flushed after every line."""

    def __init__(self, path):
        self.path = pathlib.Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(header(peers=("jax", "numpyro")))  # benchmarks/_provenance.py

    def __call__(self, *lines):
        with self.path.open("a") as f:
            for line in lines:
                f.write(line + "\n")
                print(line, flush=True)


def left(budget):
    return budget - (time.time() - T0)


def device_line():
    import jax

    d = jax.devices()[0]
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        smi = "nvidia-smi not available"
    import jaxlib

    versions = {}
    for name in ("pymc", "pytensor", "numpyro", "numba", "numpy", "scipy"):
        try:
            versions[name] = __import__(name).__version__
        except Exception:  # noqa: BLE001 - a version line must not stop the run
            versions[name] = "missing"
    return (f"device: {d.device_kind} ({jax.default_backend()}, {len(jax.devices())} device(s)); nvidia-smi: {smi}; "
            f"jax {jax.__version__}, jaxlib {jaxlib.__version__}, "
            + ", ".join(f"{k} {v}" for k, v in versions.items())
            + f"; host: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}")


def ard(A, B, h_ls, h_amp):
    """exp(h_amp) exp(-|a - b|^2_ls / 2), the squared distances by one product (clipped at 0)."""
    import jax.numpy as jnp

    a, b = A / jnp.exp(h_ls), B / jnp.exp(h_ls)
    sq = jnp.sum(a * a, 1)[:, None] + jnp.sum(b * b, 1)[None, :] - 2.0 * a @ b.T
    return jnp.exp(h_amp) * jnp.exp(-0.5 * jnp.maximum(sq, 0.0))


def fitc_value_and_grad(tol):
    """jit((h, X, Xu, y) -> ((log Z, (sweeps, status)), dlog Z / dh)), h = (5 log lengthscales, log variance)."""
    import jax
    import jax.numpy as jnp

    from pymc_gpc.backends.jax import fitc as jax_fitc
    from pymc_gpc.likelihoods import Probit

    marginal = jax_fitc.marginal_fn("ep", Probit.kind, tol=tol)

    def log_z(h, X, Xu, y):
        h_ls, h_amp = h[:5], h[5]
        Kuu = ard(Xu, Xu, h_ls, h_amp) + 1e-8 * jnp.exp(h_amp) * jnp.eye(Xu.shape[0])
        out = marginal(Kuu, ard(Xu, X, h_ls, h_amp), jnp.full(X.shape[0], jnp.exp(h_amp)), jnp.zeros(0), y)
        return out[0], (out[-2], out[-1])

    return jax.jit(jax.value_and_grad(log_z, has_aux=True))


def data(n, m, seed=0):

    X, y = synthetic(n, seed)
    Xu = X[np.random.default_rng(seed + 1).choice(n, m, replace=False)]
    return X, Xu, y


H0 = np.array([np.log(1.5)] * 5 + [np.log(2.0)])


def cpu_log_z(X, Xu, y, tol):
    """The same evaluation on the host's XLA CPU backend (``backends.jax.fitc``'s CPU tests put it
    at 1e-8 from the numba engine): the reference for the accelerator's rounding."""
    import jax

    cpu = jax.devices("cpu")[0]
    with jax.default_device(cpu):
        args = [jax.device_put(a, cpu) for a in (H0, X, Xu, y)]
        (lz, _), g = fitc_value_and_grad(tol)(*args)
    return float(lz), np.asarray(g)


def smoke(report):
    import jax

    report(device_line(), "")
    X, Xu, y = data(2000, 50)
    (lz, (sweeps, status)), g = fitc_value_and_grad(1e-8)(H0, X, Xu, y)
    ref, ref_g = cpu_log_z(X, Xu, y, 1e-8)
    rel = abs(float(lz) - ref) / abs(ref)
    rel_g = float(np.max(np.abs(np.asarray(g) - ref_g)) / np.max(np.abs(ref_g)))
    report(f"smoke: n = 2000, m = 50 on {jax.devices()[0].platform}: log Z {float(lz):.8f} (XLA CPU on the host "
           f"{ref:.8f}, relative difference {rel:.1e}; gradient {rel_g:.1e}), sweeps {int(sweeps)}, "
           f"status {int(status)}", "")
    if not (rel < 1e-8 and rel_g < 1e-6):
        raise RuntimeError("smoke check failed")


def fitc_section(report, sizes, ms, repeats, budget, reserve):
    import jax

    report("## FITC EP: log Z and its gradient in the 6 log-hyperparameters (kernel built on the device)", "",
           "| n | m | tol | s per evaluation (median) | sweeps | first call incl. compile s | status | log Z | "
           "XLA CPU on the host |", "|---|---|---|---|---|---|---|---|---|")
    timings = {}
    big_n, big_m, small_n, small_m = sizes[-1], ms[-1], sizes[0], ms[0]
    essential = [(n, m, 1e-2) for n in sizes for m in ms] + [(big_n, big_m, 1e-8)]
    optional = [(small_n, small_m, 1e-8)] + [(n, m, 1e-8) for n in sizes for m in ms
                                              if (n, m) not in ((big_n, big_m), (small_n, small_m))]
    for n, m, tol in dict.fromkeys(essential + optional):  # one row each where the lists meet
        if left(budget) < (60 if (n, m, tol) in essential else reserve):
            report(f"| {n} | {m} | {tol:g} | not run: budget | | | | | |")
            continue
        try:
            X, Xu, y = data(n, m)
            args = (jax.device_put(H0), jax.device_put(X), jax.device_put(Xu), jax.device_put(y))
            fn = fitc_value_and_grad(tol)
            t = time.perf_counter()
            jax.block_until_ready(fn(*args))
            first = time.perf_counter() - t
            reps = repeats if first < 20 else 1
            s, ((lz, (sweeps, status)), g) = median_time(lambda: jax.block_until_ready(fn(*args)), reps)
            ref = ""
            if (n, m, tol) == (small_n, small_m, 1e-8):
                r, r_g = cpu_log_z(X, Xu, y, tol)
                ref = (f"{r:.6f} (log Z diff {abs(float(lz) - r):.1e}, gradient diff "
                       f"{float(np.max(np.abs(np.asarray(g) - r_g))):.1e})")
            timings[(n, m, tol)] = s
            report(f"| {n} | {m} | {tol:g} | {s:.3f} | {int(sweeps)} | {first:.1f} | {int(status)} | {float(lz):.4f} | "
                   f"{ref} |")
        except Exception as e:  # noqa: BLE001 - record and go on
            report(f"| {n} | {m} | {tol:g} | failed: {type(e).__name__}: {str(e)[:200]} | | | | | |")
            traceback.print_exc()
    report("")
    return timings


def multiclass_section(report, n, c, m):
    import jax_backend as jax_multiclass  # benchmarks/jax_backend.py (its multiclass subcommand)

    report(f"## Multi-class FITC, n = {n}, c = {c}, m = {m} per class: one evaluation (evidence, gradient in "
           "K_uu, K_uf, diag K_ff, LOO terms)", "", "| approximation | s | first call incl. compile s | iterations | "
           "status |", "|---|---|---|---|---|")
    try:
        rows = jax_multiclass.fitc_rows([n], [c], [m], with_numba=False)
        for r in rows:
            report(f"| {r['approx']} | {r['jax']:.3f} | {r['compile']:.1f} | {r['jax_iter']} | {r['status']} |")
    except Exception as e:  # noqa: BLE001
        report(f"| failed: {type(e).__name__}: {str(e)[:300]} | | | | |")
        traceback.print_exc()
    report("")


def nuts_model(n, m):
    import pymc as pm
    import pytensor.tensor as pt

    import pymc_gpc

    X, Xu, y = data(n, m, seed=3)
    with pm.Model() as model:
        h_ls = pm.Normal("log_ls", np.log(1.5), 1.0, shape=5)
        h_amp = pm.Normal("log_var", np.log(2.0), 1.0)
        cov = pt.exp(h_amp) * pm.gp.cov.ExpQuad(5, ls=pt.exp(h_ls))
        gp = pymc_gpc.MarginalEP(cov_func=cov, likelihood=pymc_gpc.likelihoods.Probit(), approx="FITC")
        gp.marginal_likelihood("y", X=X, y=y, Xu=Xu)
    return model


def nuts_section(report, n, m, eval_s, budget, max_draws=500, steps_guess=12, max_tree_depth=8):
    """NUTS with tune = draws sized to the time left: 2 vectorised chains cost about twice one
    evaluation per leapfrog step on a saturated device. ``max_tree_depth`` 8 (numpyro's
    default 10) bounds an early warm-up iteration's cost at 255 steps."""
    import warnings

    import arviz as az
    import pymc as pm

    from pymc_gpc.ops.rewrites import sampling_tolerance

    report(f"## numpyro NUTS over the 6 hyperparameters, FITC EP, n = {n}, m = {m}, 2 vectorised chains, "
           f"max_tree_depth {max_tree_depth}", "")
    spare = left(budget) - 100  # compilation and the result's conversion
    per_iteration = 2 * steps_guess * eval_s if eval_s else None
    draws = max_draws if per_iteration is None else int(min(max_draws, spare / per_iteration / 2))
    if draws < 20:
        report(f"not run: {left(budget):.0f} s left, an evaluation takes {eval_s:.3f} s", "")
        return
    report(f"tune = draws = {draws} (sized from {eval_s} s per evaluation and {left(budget):.0f} s left; the goal's "
           f"run is 500 + 500)", "")
    try:
        t = time.perf_counter()
        model = nuts_model(n, m)
        build = time.perf_counter() - t
        with model, warnings.catch_warnings(), sampling_tolerance():
            warnings.simplefilter("ignore")
            t = time.perf_counter()
            idata = pm.sample(draws=draws, tune=draws, chains=2, random_seed=7, progressbar=False,
                              nuts_sampler="numpyro",
                              nuts={"chain_method": "vectorized", "max_tree_depth": max_tree_depth},
                              idata_kwargs={"log_likelihood": False}, compute_convergence_checks=False)
            wall = time.perf_counter() - t
        stats = idata.sample_stats
        div = int(np.asarray(stats["diverging"]).sum())
        steps = np.asarray(stats["n_steps"]) if "n_steps" in stats else np.asarray(stats["tree_depth"])
        summ = az.summary(idata, var_names=["log_ls", "log_var"])
        attrs = {k: v for k, v in idata.posterior.attrs.items() if "time" in k or "tuning" in k}
        report(f"posterior attrs: {attrs}", "")
        report(f"model built in {build:.1f} s; pm.sample (compilation included) {wall:.1f} s for 2 x ({draws} + "
               f"{draws}); divergences {div}; mean leapfrog steps (or depth) per draw {float(np.mean(steps)):.1f}", "",
               summ.to_markdown() if hasattr(summ, "to_markdown") else str(summ), "")
        per_iteration = wall / (2 * draws)
        report(f"wall per iteration (both chains, compilation included): {per_iteration:.3f} s; at this rate "
               f"2 x (500 + 500) would take {per_iteration * 1000 / 60:.1f} min (an extrapolation, not a run)", "")
    except Exception as e:  # noqa: BLE001
        report(f"failed: {type(e).__name__}: {str(e)[:400]}", "")
        traceback.print_exc()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=str(HERE / "results" / "jax_gpu_scale.md"))
    p.add_argument("--budget", type=float, default=420)
    p.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    p.add_argument("--ms", type=int, nargs="+", default=[200, 500])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--mc-n", type=int, default=100_000)
    p.add_argument("--mc-m", type=int, default=200)
    p.add_argument("--nuts-n", type=int, default=1_000_000)
    p.add_argument("--nuts-m", type=int, default=200)
    p.add_argument("--reserve", type=float, default=300,
                   help="seconds kept for the multi-class and sampler sections: optional FITC rows stop there")
    p.add_argument("--skip", nargs="*", default=[], choices=["fitc", "multiclass", "nuts"])
    a = p.parse_args()
    report = Report(results_path(a.out))
    report("# JAX backend at scale on an accelerator (benchmarks/gpu_scale.py)", "",
           "command: `" + " ".join(["python", *sys.argv]) + "`", "")
    try:
        smoke(report)
    except Exception:  # noqa: BLE001
        report("smoke failed:", "```", traceback.format_exc(), "```")
        sys.exit(1)
    timings = {}
    if "fitc" not in a.skip:
        timings = fitc_section(report, a.sizes, a.ms, a.repeats, a.budget, a.reserve)
    if "multiclass" not in a.skip and left(a.budget) > a.reserve - 60:
        multiclass_section(report, a.mc_n, 5, a.mc_m)
    if "nuts" not in a.skip:
        nuts_section(report, a.nuts_n, a.nuts_m, timings.get((a.nuts_n, a.nuts_m, 1e-2)), a.budget)
    report(f"total wall {time.time() - T0:.0f} s")


if __name__ == "__main__":
    main()
