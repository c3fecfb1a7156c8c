"""Where numpyro's NUTS starts, on a FITC EP model: PyMC's jittered initial points against
the type-II point of ``pymc_gpc.fit``.

At n = 10^6 rows on a GPU (``benchmarks/results/jax_gpu_scale.md``) warm-up from PyMC's
jittered initial points took more than 6 s per iteration, more than 15 leapfrog steps of the
two chains per iteration. This measures, on a CPU at a size it can sample, how much of a run's
cost is warm-up's early long trajectories and what starting at the fitted point changes:
the model of ``benchmarks/gpu_scale.py`` (synthetic 5-d data, probit, ARD squared-exponential
kernel, N(log 1.5, 1) priors on the log lengthscales, N(log 2, 1) on the log variance, FITC with
m inducing inputs drawn from the data), ``pm.sample(nuts_sampler="numpyro")`` with 2 vectorised
chains at the sampler's tolerance (``sampling_tolerance``).

Per start: wall time (compilation included; the fit's time given apart: warm-up's share is
the difference, as PyMC keeps no warm-up statistics), leapfrog steps (``n_steps``) per
iteration of the sampling phase, divergences, the slowest variable's bulk ESS and the largest
R-hat.

Run:  OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 nice python benchmarks/nuts_init.py [--n 5000 --m 20]
Writes benchmarks/results/jax_nuts_init.md.
"""

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")
os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")

import argparse  # noqa: E402
import pathlib  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402

import numpy as np  # noqa: E402
from _provenance import write_results  # noqa: E402  (benchmarks/_provenance.py)
from gpu_scale import nuts_model  # noqa: E402  (the model of the GPU run)

OUT = pathlib.Path(__file__).parent / "results" / "jax_nuts_init.md"


def run(model, draws, tune, initvals, seed):
    """(idata, wall seconds) of 2 vectorised numpyro chains; ``initvals`` None: PyMC's jitter."""
    import pymc as pm

    from pymc_gpc.ops.rewrites import sampling_tolerance

    nuts = {"chain_method": "vectorized"}
    if initvals is not None:
        nuts["jitter"] = False
    with model, warnings.catch_warnings(), sampling_tolerance():
        warnings.simplefilter("ignore")
        t = time.perf_counter()
        idata = pm.sample(draws=draws, tune=tune, chains=2, random_seed=seed, progressbar=False,
                          nuts_sampler="numpyro", nuts=nuts, initvals=initvals,
                          idata_kwargs={"log_likelihood": False}, compute_convergence_checks=False)
        return idata, time.perf_counter() - t


def row(label, idata, wall, draws, extra=""):
    import arviz as az

    stats = idata.sample_stats
    steps = np.asarray(stats["n_steps"])
    summ = az.summary(idata, var_names=["log_ls", "log_var"])
    return (f"| {label} | {wall:.0f}{extra} | {steps.mean():.1f} | "
            f"{int(np.asarray(stats['diverging']).sum())} | {summ['ess_bulk'].min():.0f} | {summ['r_hat'].max():.3f} |")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=5000)
    p.add_argument("--m", type=int, default=20)
    p.add_argument("--draws", type=int, default=150)
    p.add_argument("--tune", type=int, default=150)
    p.add_argument("--seed", type=int, default=7)
    a = p.parse_args()
    import pymc_gpc

    model = nuts_model(a.n, a.m)
    rows = []
    idata, wall = run(model, a.draws, a.tune, None, a.seed)
    rows.append(row("PyMC's jittered initial points", idata, wall, a.draws))
    print(rows[-1], flush=True)
    t = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = pymc_gpc.fit(model=model, method="type2", progressbar=False)
    fit_s = time.perf_counter() - t
    start = {k: np.asarray(res.point[k]) for k in ("log_ls", "log_var")}
    idata, wall = run(model, a.draws, a.tune, start, a.seed)
    rows.append(row("the type-II point (`pymc_gpc.fit`), no jitter", idata, wall, a.draws, f" (+ fit {fit_s:.0f})"))
    print(rows[-1], flush=True)
    text = "\n".join([
        f"# numpyro NUTS on a FITC EP model: where the chains start (n = {a.n}, m = {a.m}, 2 x ({a.tune} + {a.draws}))",
        "", __doc__.split("\n\n")[1].replace("\n", " "), "",
        "Leapfrog steps per draw: mean over both chains; a vectorised step costs about two evaluations.", "",
        "| start | wall s (compilation included) | leapfrog steps per draw (sampling phase) | "
        "divergences | min bulk ESS | max R-hat |",
        "|---|---|---|---|---|---|", *rows, ""])
    write_results(OUT, text, peers=("jax", "numpyro"))
    print(text)


if __name__ == "__main__":
    main()
