"""PyMC's JAX samplers (numpyro, blackjax) on the JAX backend against PyMC's NUTS and nutpie.

Pima (Pima.tr, 200 x 7) and Crabs (80 x 6), ``pymc_gpc.ard_classifier`` (EP, probit, ARD
kernel, log-hyperparameters ~ N(-3, 3^2)), 2 chains x (``--tune`` + ``--draws``), one seed,
all four samplers in one run, each through ``pymc_gpc.sample`` with its defaults: PyMC's
NUTS (dense mass matrix, chains in 2 processes, numba path with warm starts), nutpie
(threads, numba path), numpyro and blackjax (chains mapped over 2 host devices by
``jax.pmap``, which PyMC sets up, JAX path, every evaluation a cold start). Each sampler
first runs 5 + 5 draws; for the numba samplers that fills the compile caches, while the JAX
samplers compile the model again in every call, so their wall time includes the
compilation (also given apart where PyMC records the sampling time).

Reported: wall time of the sampling call, min bulk ESS over the hyperparameters, ESS/s,
divergences, max r_hat, mean EP sweeps per recorded draw (``y_n_iter``: warm starts on the
numba path, cold starts on the JAX path), posterior mean of log v0.

Run:  OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/jax_backend.py [--draws 500 --tune 500 --seed 1]
Writes benchmarks/results/jax_backend.md.

Subcommand ``fitc`` (formerly its own script):

    FITC evidence + gradient: the numba path against the JAX backend (``backends/jax/fitc.py``).

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
                ``python benchmarks/jax_backend.py fitc --gpu --out results/jax_fitc_gpu.md``.

    Run:  nice python benchmarks/jax_backend.py fitc --cpu --walk   (writes benchmarks/results/jax_fitc.md)

Subcommand ``multiclass`` (formerly its own script):

    The multi-class models on the JAX backend: CPU time of one evaluation (evidence + gradient
    + LOO terms) numba against JAX, and numpyro against PyMC's NUTS on a small model.

    1. Evaluation time. Synthetic c-class data (Gaussian blobs in 2-d, ``make_data``), one
       RBF kernel per class, n = 200 and 1000, c = 3 and 6. numba: ``softmax_laplace`` /
       ``multinomial_probit_ep`` from a cold start with the gradient and the LOO terms (what
       the Op computes when its LOO output is used; under a sampler the numba Op also starts
       warm, which a pure JAX function cannot). JAX: ``backends.jax.multiclass.marginal_fn``
       under ``jax.jit`` (always cold), compiled first (compile time given apart). Both at the
       engines' default tolerances; one BLAS thread and one XLA thread. Median of ``--repeats``
       (one evaluation from n = 1000 on).
       The table also gives |log Z_jax - log Z_numba| and the largest gradient difference.
    2. numpyro against PyMC's NUTS: softmax Laplace, n = 30, c = 3, per-class RBF kernels with
       a shared log lengthscale and log amplitude (N(0, 1) priors), 2 chains x (tune + draws);
       posterior means and sds of both, and their difference in units of the combined Monte
       Carlo standard error.
    3. Multi-class FITC (``--fitc-sizes``, ``--fitc-m``): the same blobs and kernels, m inducing
       inputs per class drawn from the data (``fitc_inputs``), n = 10^4, c = 5, m = 100 and
       200. numba: the solvers on ``structures.multiclass_fitc.MulticlassFITCPrior`` (built in
       the timed call); JAX: ``backends.jax.multiclass_fitc.marginal_fn`` under ``jax.jit``.
       One cold evaluation each (evidence, gradient in K_uu, K_uf, diag K_ff, LOO terms).
       ``--fitc-only`` measures only these and rewrites only the file's multi-class FITC
       section, under a provenance block of its own.
    4. ``--gpu``: the evaluation on the default JAX device (an accelerator), JAX only: dense
       at n = 2000 and 4000, c = 5, and multi-class FITC at n = 10^5, c = 5, m = 200 (the
       issue's size). Not run on the CPU machine that wrote the results file.

    Run:  OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/jax_backend.py multiclass [--repeats 3 --draws 400]
          OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/jax_backend.py multiclass --fitc-only
          python benchmarks/jax_backend.py multiclass --gpu     (on a machine with an accelerator; prints only)
    Writes benchmarks/results/jax_multiclass.md (not with --gpu).
"""

import os
import sys

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

# ``fitc`` and ``multiclass`` time single evaluations: one thread for XLA's CPU backend (as
# OMP/OPENBLAS for numba's BLAS) unless --gpu, set before jax is imported
_GPU = GPU = "--gpu" in sys.argv
if sys.argv[1:2] in (["fitc"], ["multiclass"]) and not GPU:
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                               + " --xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")

import argparse
import pathlib
import time
import warnings

import arviz as az
from _provenance import write_results  # noqa: E402  (benchmarks/_provenance.py)
from sampling import diagnostic  # noqa: E402  (pymc_gpc.sample: diagnostics in sample_stats)
import numpy as np

import pymc_gpc
from pymc_gpc.datasets import load

OUT = pathlib.Path(__file__).parent / "results" / "jax_backend.md"
HYPER = ["log_w", "log_v0", "log_v1"]
SAMPLERS = ["pymc", "nutpie", "numpyro", "blackjax"]


def run(data, sampler, draws, tune, seed):
    model, _ = pymc_gpc.ard_classifier(data.X_train, data.y_train, feature_names=data.feature_names)
    kwargs = dict(chains=2, random_seed=seed, nuts_sampler=sampler, progressbar=False,
                  compute_convergence_checks=False)
    if sampler == "pymc":
        kwargs["cores"] = 2
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pymc_gpc.sample(draws=5, tune=5, **kwargs)
        t = time.perf_counter()
        idata = pymc_gpc.sample(draws=draws, tune=tune, **kwargs)
        wall = time.perf_counter() - t
    summary = az.summary(idata, var_names=HYPER)
    stats = idata["sample_stats"]
    sampling_time = stats.attrs.get("sampling_time")
    return {
        "data": data.name, "sampler": sampler, "wall": wall,
        "sampling": float(sampling_time) if sampling_time is not None else None,
        "ess": float(summary["ess_bulk"].min()), "div": int(np.asarray(stats["diverging"]).sum()),
        "rhat": float(summary["r_hat"].max()),
        "sweeps": float(diagnostic(idata, "y_n_iter").mean()),
        "log_v0": float(np.asarray(idata["posterior"]["log_v0"]).mean()),
        "log_v0_mcse": float(az.summary(idata, var_names=["log_v0"])["mcse_mean"].iloc[0]),
    }


def table(rows):
    lines = ["| data | sampler | path | wall (s) | of which sampling (s) | min bulk ESS | ESS/s | divergent | "
             "max r_hat | EP sweeps / draw | mean log v0 (MCSE) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        path = "JAX, cold starts" if r["sampler"] in ("numpyro", "blackjax") else "numba, warm starts"
        samp = f"{r['sampling']:.1f}" if r["sampling"] is not None else "-"
        lines.append(f"| {r['data']} | {r['sampler']} | {path} | {r['wall']:.1f} | {samp} | {r['ess']:.0f} | "
                     f"{r['ess'] / r['wall']:.2f} | {r['div']} | {r['rhat']:.3f} | {r['sweeps']:.2f} | "
                     f"{r['log_v0']:.3f} ({r['log_v0_mcse']:.3f}) |")
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--draws", type=int, default=500)
    ap.add_argument("--tune", type=int, default=500)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--data", nargs="+", default=["pima", "crabs"])
    ap.add_argument("--samplers", nargs="+", default=SAMPLERS)
    args = ap.parse_args()
    rows = []
    for name in args.data:
        data = load(name)
        for sampler in args.samplers:
            rows.append(run(data, sampler, args.draws, args.tune, args.seed))
            print(table(rows)[-1], flush=True)
    text = [
        "# PyMC's JAX samplers against PyMC's NUTS and nutpie",
        "",
        f"`OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/jax_backend.py --draws {args.draws} "
        f"--tune {args.tune} --seed {args.seed}`: 2 chains x ({args.tune} + {args.draws}), one seed, one run, "
        "on a 2-core machine shared with other jobs (timings are disturbed; compare within this table only).",
        "",
        *table(rows),
    ]
    write_results(OUT, "\n".join(text) + "\n", peers=('jax', 'numpyro', 'blackjax', 'nutpie'))
    print("\n".join(text))


# ---- subcommand ``fitc`` ----------------------------------------


import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from engine import rbf, synthetic  # noqa: E402  (benchmarks/engine.py)

from pymc_gpc import ep  # noqa: E402
from pymc_gpc.backends.jax import fitc as jax_fitc  # noqa: E402
from pymc_gpc.likelihoods import Probit  # noqa: E402
from pymc_gpc.structures import FITCPrior  # noqa: E402

FITC_OUT = pathlib.Path(__file__).parent / "results" / "jax_fitc.md"
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


def fitc_main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cpu", action="store_true")
    p.add_argument("--walk", action="store_true")
    p.add_argument("--nuts", action="store_true")
    p.add_argument("--gpu", action="store_true")
    p.add_argument("--sizes", type=int, nargs="+", default=None)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", default=None)
    a = p.parse_args(sys.argv[2:])
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
    write_results(pathlib.Path(a.out) if a.out else FITC_OUT, "\n".join(lines))
    print("\n".join(lines))


def fitc_entry():
    """Subcommand ``fitc``."""
    fitc_main()



# ---- subcommand ``multiclass`` ----------------------------------------



MULTICLASS_OUT = pathlib.Path(__file__).parent / "results" / "jax_multiclass.md"
CASES = {"softmax Laplace": ("laplace", "softmax_laplace"),
         "nested EP": ("ep", "multinomial_probit_ep")}


def make_data(n, c, seed=0):
    """n points in 2-d from c Gaussian blobs on a circle (sd 0.8), labels 0..c-1."""
    rng = np.random.default_rng(seed)
    y = np.arange(n) % c
    centres = 1.5 * np.stack([np.cos(2 * np.pi * np.arange(c) / c), np.sin(2 * np.pi * np.arange(c) / c)], 1)
    return centres[y] + 0.8 * rng.normal(size=(n, 2)), y


def kernels(X, c):
    """(c, n, n): amplitude 2 + k/2, lengthscale 0.8 + 0.1 k, jitter 1e-6."""
    d = ((X[:, None] - X[None]) ** 2).sum(-1)
    return np.stack([(2.0 + 0.5 * k) * np.exp(-0.5 * d / (0.8 + 0.1 * k) ** 2) + 1e-6 * np.eye(len(X))
                     for k in range(c)])


def multiclass_fitc_inputs(X, c, m, seed=0):
    """Per-class FITC inputs (K_uu (c, m, m), K_uf (c, m, n), diag K_ff (c, n)) for the kernels
    of ``kernels``, the m inducing inputs of each class drawn from X without replacement."""
    rng = np.random.default_rng(seed)
    Kuu, Kuf, kd = [], [], []
    for k in range(c):
        Xu = X[rng.choice(len(X), m, replace=False)]
        amp, ls = 2.0 + 0.5 * k, 0.8 + 0.1 * k

        def se(A, B):
            return amp * np.exp(-0.5 * ((A[:, None] - B[None]) ** 2).sum(-1) / ls ** 2)

        Kuu.append(se(Xu, Xu) + 1e-6 * np.eye(m))
        Kuf.append(se(Xu, X))
        kd.append(np.full(len(X), amp + 1e-6))
    return np.stack(Kuu), np.stack(Kuf), np.stack(kd)


def multiclass_median_time(f, repeats):
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        out = f()
        times.append(time.perf_counter() - t)
    return float(np.median(times)), out


def evaluation_rows(sizes, classes, repeats, with_numba=True, rows=None, written=lambda rows: None):
    import jax
    import jax.numpy as jnp

    import pymc_gpc
    from pymc_gpc.backends.jax import multiclass as jmc

    rows = [] if rows is None else rows
    for label, (approximation, solver_name) in CASES.items():
        solver = getattr(pymc_gpc, solver_name)
        for n in sizes:
            for c in classes:
                X, y = make_data(n, c)
                K = kernels(X, c)
                fn = jax.jit(jmc.marginal_fn(approximation))
                Kj, th, yj = jnp.asarray(K), jnp.zeros(0), jnp.asarray(y, dtype=float)
                t = time.perf_counter()
                jax.block_until_ready(fn(Kj, th, yj))
                compile_s = time.perf_counter() - t
                reps = repeats if n < 1000 else 1
                t_jax, out = multiclass_median_time(lambda: jax.block_until_ready(fn(Kj, th, yj)), reps)
                row = {"approx": label, "n": n, "c": c, "jax": t_jax, "compile": compile_s,
                       "jax_iter": int(out[4]), "status": int(out[5])}
                if with_numba:
                    solver(K[:, :20, :20], y[:20])  # numba's compile caches
                    t_nb, ref = multiclass_median_time(lambda: solver(K, y), reps)
                    row.update(numba=t_nb, numba_iter=ref.n_iter, dlogz=abs(float(out[0]) - ref.log_z),
                               dgrad=float(np.max(np.abs(np.asarray(out[1]) - ref.dlog_z_dK))))
                rows.append(row)
                written(rows)
                print(row, flush=True)
    return rows


def fitc_rows(sizes, classes, ms, with_numba=True, rows=None, written=lambda rows: None):
    """One cold evaluation per (approximation, n, c, m), JAX (and numba): multi-class FITC."""
    import jax
    import jax.numpy as jnp

    import pymc_gpc
    from pymc_gpc.backends.jax import multiclass_fitc as jmf
    from pymc_gpc.structures.multiclass_fitc import MulticlassFITCPrior

    rows = [] if rows is None else rows
    for label, (approximation, solver_name) in CASES.items():
        solver = getattr(pymc_gpc, solver_name)
        for n in sizes:
            for c in classes:
                for m in ms:
                    X, y = make_data(n, c)
                    inputs = multiclass_fitc_inputs(X, c, m)
                    fn = jax.jit(jmf.marginal_fn(approximation))
                    args = (*map(jnp.asarray, inputs), jnp.zeros(0), jnp.asarray(y, dtype=float))
                    t = time.perf_counter()
                    jax.block_until_ready(fn(*args))
                    compile_s = time.perf_counter() - t
                    t_jax, out = multiclass_median_time(lambda: jax.block_until_ready(fn(*args)), 1)
                    row = {"approx": label, "n": n, "c": c, "m": m, "jax": t_jax, "compile": compile_s,
                           "jax_iter": int(out[-2]), "status": int(out[-1])}
                    if with_numba:
                        small = multiclass_fitc_inputs(X[:50], c, 5)
                        solver(MulticlassFITCPrior(*small), y[:50])  # numba's compile caches
                        t_nb, ref = multiclass_median_time(lambda: solver(MulticlassFITCPrior(*inputs), y), 1)
                        row.update(numba=t_nb, numba_iter=ref.n_iter, dlogz=abs(float(out[0]) - ref.log_z),
                                   dgrad=max(float(np.max(np.abs(np.asarray(g) - w)))
                                             for g, w in zip(out[1:4], ref.dlog_z_dK)))
                    rows.append(row)
                    written(rows)
                    print(row, flush=True)
    return rows


def sampler_rows(draws, tune, seed):
    import arviz as az
    import pymc as pm
    import pytensor.tensor as pt

    import pymc_gpc

    X, y = make_data(30, 3, seed=1)
    with pm.Model() as model:
        log_ls = pm.Normal("log_ls", 0.0, 1.0)
        log_amp = pm.Normal("log_amp", 0.0, 1.0)
        covs = [pt.exp(log_amp) * pm.gp.cov.ExpQuad(2, ls=pt.exp(log_ls)) for _ in range(3)]
        pymc_gpc.MarginalLaplace(cov_func=covs, likelihood=pymc_gpc.likelihoods.Softmax()).marginal_likelihood(
            "y", X=X, y=y)
    results = {}
    for sampler in ("pymc", "numpyro"):
        kw = dict(draws=draws, tune=tune, chains=2, random_seed=seed, progressbar=False, nuts_sampler=sampler)
        if sampler == "pymc":
            kw["cores"] = 1
        with model, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t = time.perf_counter()
            idata = pm.sample(**kw)
            wall = time.perf_counter() - t
        summary = az.summary(idata, var_names=["log_ls", "log_amp"])
        results[sampler] = (summary, wall)
        print(sampler, wall, summary, flush=True)
    rows = []
    for name in ("log_ls", "log_amp"):
        a, b = results["pymc"][0].loc[name], results["numpyro"][0].loc[name]
        se = float(np.hypot(a["mcse_mean"], b["mcse_mean"]))
        se_sd = float(np.hypot(a["mcse_sd"], b["mcse_sd"]))
        rows.append({"name": name, "pymc": (a["mean"], a["sd"]), "numpyro": (b["mean"], b["sd"]),
                     "z_mean": abs(a["mean"] - b["mean"]) / se, "z_sd": abs(a["sd"] - b["sd"]) / se_sd})
    return rows, {s: results[s][1] for s in results}


FITC_HEADING = "## Multi-class FITC, numba against JAX"


def render_fitc(rows, provenance=""):
    """The multi-class FITC section (``--fitc-only`` writes it under its own provenance block)."""
    text = [FITC_HEADING, "", provenance.rstrip("\n"), "" if provenance else None,
            "One cold evaluation each (evidence, gradient in every class's K_uu, K_uf and diag K_ff, LOO "
            "terms), JAX compiled first; CPU, one BLAS thread and one XLA thread, on a machine shared "
            "with other jobs (2 cores), so compare the two backends within a row. The JAX softmax "
            "Laplace factorises A = I + P^T W~ P at every Newton step, where the numba path solves "
            "the later steps by preconditioned conjugate gradients.", "",
            "| approximation | n | c | m | numba (s) | JAX (s) | JAX / numba | JAX first call, compiling (s) "
            "| iterations numba / JAX | abs. diff. log Z | max abs. diff. gradient |",
            "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        text.append(f"| {r['approx']} | {r['n']} | {r['c']} | {r['m']} | {r['numba']:.2f} | {r['jax']:.2f} | "
                    f"{r['jax'] / r['numba']:.2f} | {r['compile']:.1f} | {r['numba_iter']} / {r['jax_iter']} | "
                    f"{r['dlogz']:.1e} | {r['dgrad']:.1e} |")
    return "\n".join(t for t in text if t is not None) + "\n"


GPU_TEXT = ("## GPU (prepared, not run here)\n\n"
            "`python benchmarks/jax_backend.py multiclass --gpu` times the JAX evaluation on the default JAX device, "
            "printed (no file written): dense at n = 2000 and 4000, c = 5, and multi-class FITC at n = 10^5, "
            "c = 5, m = 200, for both approximations. No accelerator was available to the session that wrote "
            "this file.\n")


def render(rows, samp, walls, args, fitc=()):
    text = ["# The multi-class models on the JAX backend", "",
            "`benchmarks/jax_backend.py multiclass` (its docstring has the set-up). CPU, one BLAS thread and "
            "one XLA thread; the machine was shared with other jobs while this ran (2 cores), so "
            "compare the two backends within a row, not across files. Times are medians of "
            f"{args.repeats} evaluations at n < 1000 and one at n = 1000, each a cold start with evidence, "
            "gradient and LOO terms.", "",
            "## One evaluation, numba against JAX", "",
            "| approximation | n | c | numba (s) | JAX (s) | JAX / numba | JAX first call, compiling (s) | iterations numba / JAX "
            "| abs. diff. log Z | max abs. diff. gradient |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        text.append(f"| {r['approx']} | {r['n']} | {r['c']} | {r['numba']:.3f} | {r['jax']:.3f} | "
                    f"{r['jax'] / r['numba']:.2f} | {r['compile']:.1f} | {r['numba_iter']} / {r['jax_iter']} | "
                    f"{r['dlogz']:.1e} | {r['dgrad']:.1e} |")
    if samp:
        text += ["", f"## numpyro against PyMC's NUTS (softmax Laplace, n = 30, c = 3, 2 chains x "
                     f"({args.tune} + {args.draws}))", "",
                 "| parameter | PyMC NUTS mean (sd) | numpyro mean (sd) | mean diff. / MCSE | sd diff. / MCSE of sd |",
                 "|---|---|---|---|---|"]
        for r in samp:
            text.append(f"| {r['name']} | {r['pymc'][0]:.3f} ({r['pymc'][1]:.3f}) | {r['numpyro'][0]:.3f} "
                        f"({r['numpyro'][1]:.3f}) | {r['z_mean']:.2f} | {r['z_sd']:.2f} |")
        text += ["", f"Wall time of the sampling call (numpyro's includes compiling the model): PyMC "
                     f"{walls['pymc']:.0f} s, numpyro {walls['numpyro']:.0f} s."]
    if fitc:
        text += ["", render_fitc(fitc).rstrip("\n")]
    text += ["", GPU_TEXT.rstrip("\n")]
    return "\n".join(text) + "\n"


def replace_fitc_section(path, section):
    """The results file with its multi-class FITC section (up to the GPU section) replaced."""
    old = path.read_text()
    head = old.split(FITC_HEADING)[0].split("## GPU")[0].rstrip("\n")
    return f"{head}\n\n{section.rstrip()}\n\n{GPU_TEXT}"


def multiclass_main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--draws", type=int, default=400)
    parser.add_argument("--tune", type=int, default=400)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--sizes", type=int, nargs="+", default=[200, 1000])
    parser.add_argument("--classes", type=int, nargs="+", default=[3, 6])
    parser.add_argument("--no-sampler", action="store_true")
    parser.add_argument("--fitc-sizes", type=int, nargs="+", default=[10_000])
    parser.add_argument("--fitc-classes", type=int, nargs="+", default=[5])
    parser.add_argument("--fitc-m", type=int, nargs="+", default=[100, 200])
    parser.add_argument("--fitc-only", action="store_true")
    parser.add_argument("--gpu", action="store_true")
    args = parser.parse_args(sys.argv[2:])
    if args.gpu:
        import jax

        print("device:", jax.devices())
        evaluation_rows([2000, 4000], [5], args.repeats, with_numba=False)
        fitc_rows([100_000], [5], [200], with_numba=False)
        return
    from _provenance import header, results_path, write_results  # noqa: E402  (benchmarks/_provenance.py)

    if args.fitc_only:
        def fitc_written(rows):  # this section only, under its own provenance block
            results_path(MULTICLASS_OUT).write_text(replace_fitc_section(MULTICLASS_OUT, render_fitc(rows, header(peers=("jax",)))))

        fitc_rows(args.fitc_sizes, args.fitc_classes, args.fitc_m, written=fitc_written)
        return

    rows, samp, walls, fitc = [], [], {}, []

    def written(_rows=None):  # the file is rewritten after each row: a long run leaves what it measured
        write_results(MULTICLASS_OUT, render(rows, samp, walls, args, fitc), peers=("jax", "numpyro"))

    evaluation_rows([n for n in args.sizes if n < 1000], args.classes, args.repeats, rows=rows, written=written)
    if not args.no_sampler:
        samp[:], sampler_walls = sampler_rows(args.draws, args.tune, args.seed)
        walls.update(sampler_walls)
        written(rows)
    evaluation_rows([n for n in args.sizes if n >= 1000], args.classes, args.repeats, rows=rows, written=written)
    fitc_rows(args.fitc_sizes, args.fitc_classes, args.fitc_m, rows=fitc, written=written)


def multiclass_entry():
    """Subcommand ``multiclass``."""
    multiclass_main()


SUBCOMMANDS = {"multiclass": multiclass_entry, "fitc": fitc_entry}

if __name__ == "__main__" and sys.argv[1:2] and sys.argv[1] in SUBCOMMANDS:
    SUBCOMMANDS[sys.argv[1]]()
elif __name__ == "__main__":
    main()
