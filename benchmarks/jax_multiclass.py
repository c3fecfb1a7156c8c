"""The multi-class models on the JAX backend: CPU time of one evaluation (evidence + gradient
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

Run:  OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/jax_multiclass.py [--repeats 3 --draws 400]
      OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/jax_multiclass.py --fitc-only
      python benchmarks/jax_multiclass.py --gpu     (on a machine with an accelerator; prints only)
Writes benchmarks/results/jax_multiclass.md (not with --gpu).
"""

import os
import sys

GPU = "--gpu" in sys.argv
if not GPU:
    for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_v, "1")
    os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")

import argparse  # noqa: E402
import pathlib  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402

import numpy as np  # noqa: E402

OUT = pathlib.Path(__file__).parent / "results" / "jax_multiclass.md"
CASES = {"softmax Laplace": ("laplace-multiclass", "softmax_laplace"),
         "nested EP": ("ep-multiclass", "multinomial_probit_ep")}


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


def fitc_inputs(X, c, m, seed=0):
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


def _median_time(f, repeats):
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
                t_jax, out = _median_time(lambda: jax.block_until_ready(fn(Kj, th, yj)), reps)
                row = {"approx": label, "n": n, "c": c, "jax": t_jax, "compile": compile_s,
                       "jax_iter": int(out[4]), "status": int(out[5])}
                if with_numba:
                    solver(K[:, :20, :20], y[:20])  # numba's compile caches
                    t_nb, ref = _median_time(lambda: solver(K, y), reps)
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
                    inputs = fitc_inputs(X, c, m)
                    fn = jax.jit(jmf.marginal_fn(approximation))
                    args = (*map(jnp.asarray, inputs), jnp.zeros(0), jnp.asarray(y, dtype=float))
                    t = time.perf_counter()
                    jax.block_until_ready(fn(*args))
                    compile_s = time.perf_counter() - t
                    t_jax, out = _median_time(lambda: jax.block_until_ready(fn(*args)), 1)
                    row = {"approx": label, "n": n, "c": c, "m": m, "jax": t_jax, "compile": compile_s,
                           "jax_iter": int(out[-2]), "status": int(out[-1])}
                    if with_numba:
                        small = fitc_inputs(X[:50], c, 5)
                        solver(MulticlassFITCPrior(*small), y[:50])  # numba's compile caches
                        t_nb, ref = _median_time(lambda: solver(MulticlassFITCPrior(*inputs), y), 1)
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
            "`python benchmarks/jax_multiclass.py --gpu` times the JAX evaluation on the default JAX device, "
            "printed (no file written): dense at n = 2000 and 4000, c = 5, and multi-class FITC at n = 10^5, "
            "c = 5, m = 200, for both approximations. No accelerator was available to the session that wrote "
            "this file.\n")


def render(rows, samp, walls, args, fitc=()):
    text = ["# The multi-class models on the JAX backend", "",
            "`benchmarks/jax_multiclass.py` (its docstring has the set-up). CPU, one BLAS thread and "
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


def main():
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
    args = parser.parse_args()
    if args.gpu:
        import jax

        print("device:", jax.devices())
        evaluation_rows([2000, 4000], [5], args.repeats, with_numba=False)
        fitc_rows([100_000], [5], [200], with_numba=False)
        return
    from _provenance import header, write_results  # noqa: E402  (benchmarks/_provenance.py)

    if args.fitc_only:
        def fitc_written(rows):  # this section only, under its own provenance block
            OUT.write_text(replace_fitc_section(OUT, render_fitc(rows, header(peers=("jax",)))))

        fitc_rows(args.fitc_sizes, args.fitc_classes, args.fitc_m, written=fitc_written)
        return

    rows, samp, walls, fitc = [], [], {}, []

    def written(_rows=None):  # the file is rewritten after each row: a long run leaves what it measured
        write_results(OUT, render(rows, samp, walls, args, fitc), peers=("jax", "numpyro"))

    evaluation_rows([n for n in args.sizes if n < 1000], args.classes, args.repeats, rows=rows, written=written)
    if not args.no_sampler:
        samp[:], sampler_walls = sampler_rows(args.draws, args.tune, args.seed)
        walls.update(sampler_walls)
        written(rows)
    evaluation_rows([n for n in args.sizes if n >= 1000], args.classes, args.repeats, rows=rows, written=written)
    fitc_rows(args.fitc_sizes, args.fitc_classes, args.fitc_m, rows=fitc, written=written)


if __name__ == "__main__":
    main()
