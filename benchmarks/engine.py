"""Engine benchmark: log Z + gradient time against the dense linear-algebra floor.

For n = 200 ... 4000 (synthetic 5-d data, probit, ARD squared-exponential kernel):
  * floor: one Cholesky factorisation plus one inverse from it (LAPACK dpotrf + dpotri);
  * EP and Laplace, cold (from zero) and warm-started from the solution at hyperparameters
    2 % away (a NUTS leapfrog step is of that order), value and gradient together; EP
    at the engine's tolerance (1e-8) and, warm, at the sampler's (the registry's ``sampling_defaults``);
and, on Pima at a fixed kernel, the same evidence + gradient by scikit-learn (Laplace)
and GPy (EP), when they are installed.

Run:  OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/engine.py [--quick]
Writes benchmarks/results/engine.md. Timings are medians over repeats.

Subcommand ``approximations`` (formerly its own script):

    Approximations benchmark: evidence + gradient time of EP, Laplace, mean field I/II, ADF.

    Synthetic 5-d data and the fixed ARD squared-exponential kernel of ``engine.py``
    (lengthscales 1.5, amplitude 2, jitter 1e-8), probit likelihood, n = 200 and 1000,
    one BLAS thread. For each method: evidence + gradient from a cold start, and warm-started
    from the solution at hyperparameters 2 % away (as NUTS or an optimiser would); medians
    over repeats. ADF has no gradient and no warm start: its time is the evidence alone.

    Run:  OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/engine.py approximations
    Writes benchmarks/results/approximations.md.

Subcommand ``dense-floor`` (formerly its own script):

    Dense EP and Laplace logp + gradient, as NUTS calls them, against their floor.

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

    Run:  OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/engine.py dense-floor [--sizes 1000 2000 5000]
    Writes benchmarks/results/dense_floor.md.
"""

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse
import pathlib
import sys
import time
import warnings

from _provenance import write_results  # noqa: E402  (benchmarks/_provenance.py)
import numpy as np
from scipy.linalg import lapack

sys.path.insert(0, str(pathlib.Path(__file__).parent.parent))  # this checkout's pymc_gpc, not an installed one
from pymc_gpc import ep, laplace
from pymc_gpc import likelihoods as L
from pymc_gpc.datasets import load_pima
from pymc_gpc.approximations.registry import APPROXIMATIONS

SAMPLING_DEFAULTS = {"ep": dict(APPROXIMATIONS["ep"].sampling_defaults)}

OUT = pathlib.Path(__file__).parent / "results" / "engine.md"


def median_time(fn, repeats):
    times, result = [], None
    for _ in range(repeats):
        t = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t)
    return float(np.median(times)), result


def synthetic(n, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 5))
    y = np.where(X[:, 0] + X[:, 1] ** 2 - 1.0 + 0.5 * rng.normal(size=n) > 0, 1.0, -1.0)
    return X, y


def rbf(X, ls, amp, Z=None):
    Z = X if Z is None else Z
    D = (((X[:, None, :] - Z[None, :, :]) / ls) ** 2).sum(-1)
    return amp * np.exp(-0.5 * D)


def floor(K):
    c, _ = lapack.dpotrf(K, lower=1)
    inv, _ = lapack.dpotri(c, lower=1)
    return inv


def scaling_rows(sizes):
    lik = L.Probit()
    rows = []
    for n in sizes:
        X, y = synthetic(n)
        ls = np.full(5, 1.5)
        K1 = rbf(X, ls, 2.0) + 1e-8 * np.eye(n)
        K2 = rbf(X, ls * 1.02, 2.0 * 1.02) + 1e-8 * np.eye(n)
        reps = 5 if n <= 500 else (3 if n <= 1000 else 1)
        t_floor, _ = median_time(lambda: floor(K1), max(reps, 3))
        base_ep = ep(K1, y, lik)
        base_la = laplace(K1, y, lik)
        t_ep_cold, r_ep_cold = median_time(lambda: ep(K2, y, lik), reps)
        t_ep_warm, r_ep_warm = median_time(lambda: ep(K2, y, lik, state=base_ep.state), reps)
        t_ep_samp, r_ep_samp = median_time(
            lambda: ep(K2, y, lik, state=base_ep.state, **SAMPLING_DEFAULTS["ep"]), reps)
        t_la_cold, r_la_cold = median_time(lambda: laplace(K2, y, lik), reps)
        t_la_warm, r_la_warm = median_time(lambda: laplace(K2, y, lik, state=base_la.state), reps)
        rows.append(
            (n, t_floor, t_ep_cold, r_ep_cold.n_iter, t_ep_warm, r_ep_warm.n_iter,
             t_ep_samp, r_ep_samp.n_iter, t_la_cold, r_la_cold.n_iter, t_la_warm, r_la_warm.n_iter)
        )
        print(f"n={n}: floor {t_floor*1e3:.1f} ms, EP warm {t_ep_warm*1e3:.1f} ms "
              f"({t_ep_warm/t_floor:.1f}x), Laplace warm {t_la_warm*1e3:.1f} ms", flush=True)
    return rows


def pima_rows(repeats=7):
    """Evidence + gradient at one fixed kernel on Pima, this package and its peers."""
    d = load_pima()
    X, y = d.X_train, d.y_train
    ls = np.array([1.5, 2.0, 3.0, 2.5, 1.8, 2.2, 1.7])
    amp = 2.0
    K = rbf(X, ls, amp)
    rows = []
    t, r = median_time(lambda: ep(K, y, L.Probit()), repeats)
    rows.append(("pymc-gpc EP (probit), cold", t, r.log_z))
    t, r = median_time(lambda: laplace(K, y, L.Logistic()), repeats)
    rows.append(("pymc-gpc Laplace (logistic), cold", t, r.log_z))
    try:
        from sklearn.gaussian_process import GaussianProcessClassifier
        from sklearn.gaussian_process.kernels import RBF, ConstantKernel

        gpc = GaussianProcessClassifier(
            kernel=ConstantKernel(amp, "fixed") * RBF(ls, "fixed"), optimizer=None
        ).fit(X, (y > 0).astype(int))
        kern = ConstantKernel(amp) * RBF(ls)
        est = gpc.base_estimator_
        est.kernel_ = kern
        t, v = median_time(lambda: est.log_marginal_likelihood(kern.theta, eval_gradient=True), repeats)
        rows.append(("scikit-learn Laplace (logistic)", t, float(v[0])))
    except ImportError:
        pass
    try:
        import GPy

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")

            def gpy_ep():
                m = GPy.core.GP(
                    X, (y[:, None] > 0).astype(float),
                    kernel=GPy.kern.RBF(7, variance=amp, lengthscale=ls, ARD=True),
                    likelihood=GPy.likelihoods.Bernoulli(),
                    inference_method=GPy.inference.latent_function_inference.EP(ep_mode="nested"),
                )
                return float(m.log_likelihood()), m.gradient

            t, v = median_time(gpy_ep, repeats)
        rows.append(("GPy EP (probit, nested)", t, v[0]))
    except ImportError:
        pass
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="n = 200, 500, 1000 only")
    args = ap.parse_args()
    sizes = [200, 500, 1000] if args.quick else [200, 500, 1000, 2000, 4000]
    rows = scaling_rows(sizes)
    engine_table = [
        f"| n | Cholesky + inverse | EP cold | EP warm | EP warm / floor | EP warm, tol {SAMPLING_DEFAULTS['ep']['tol']:g} (sampler) "
        "| / floor | Laplace cold | Laplace warm | Laplace warm / floor |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for n, tf, tec, nec, tew, new, tes, nes, tlc, nlc, tlw, nlw in rows:
        engine_table.append(
            f"| {n} | {tf*1e3:.1f} | {tec*1e3:.1f} ({nec}) | {tew*1e3:.1f} ({new}) | {tew/tf:.1f}x "
            f"| {tes*1e3:.1f} ({nes}) | {tes/tf:.1f}x "
            f"| {tlc*1e3:.1f} ({nlc}) | {tlw*1e3:.1f} ({nlw}) | {tlw/tf:.1f}x |"
        )
    pima_table = ["| method | time (ms) | log evidence |", "|---|---|---|"]
    for name, t, v in pima_rows():
        pima_table.append(f"| {name} | {t*1e3:.1f} | {v:.3f} |")
    lines = (
        ["## Evidence + gradient time (probit; ms; sweeps or Newton iterations in brackets)", ""]
        + engine_table
        + ["", "## Pima (200 x 7), one fixed ARD kernel: evidence + gradient", ""]
        + pima_table
    )
    text = "\n".join(lines) + "\n"
    OUT.parent.mkdir(parents=True, exist_ok=True)
    write_results(OUT, text, peers=('scikit-learn', 'GPy'))
    print(text)


# ---- subcommand ``approximations`` ----------------------------------------
from pymc_gpc import adf, meanfield  # noqa: E402
from pymc_gpc import likelihoods as L

APPROXIMATIONS_OUT = pathlib.Path(__file__).parent / "results" / "approximations.md"

METHODS = {
    "EP (parallel)": lambda K, y, lik, s: ep(K, y, lik, state=s),
    "Laplace": lambda K, y, lik, s: laplace(K, y, lik, state=s),
    "MF-I (ensemble)": lambda K, y, lik, s: meanfield(K, y, lik, variant="ensemble", state=s),
    "MF-II (naive)": lambda K, y, lik, s: meanfield(K, y, lik, variant="naive", state=s),
    "ADF (1 pass, no gradient)": lambda K, y, lik, s: adf(K, y, lik),
}


def rows_for(n):
    X, y = synthetic(n)
    ls = np.full(5, 1.5)
    K1 = rbf(X, ls, 2.0) + 1e-8 * np.eye(n)
    K2 = rbf(X, ls * 1.02, 2.0 * 1.02) + 1e-8 * np.eye(n)
    lik = L.Probit()
    reps = 5 if n <= 500 else 3
    rows = []
    for name, run in METHODS.items():
        run(K1, y, lik, None)  # compile numba kernels outside the timing
        base = run(K1, y, lik, None)
        t_cold, r_cold = median_time(lambda: run(K2, y, lik, None), reps)
        warm = name.startswith("ADF")
        t_warm, r_warm = (t_cold, r_cold) if warm else median_time(lambda: run(K2, y, lik, base.state), reps)
        rows.append((n, name, t_cold, r_cold.n_iter, t_warm, r_warm.n_iter, r_cold.log_z, r_cold.converged))
        print(f"n={n} {name}: cold {t_cold * 1e3:.1f} ms ({r_cold.n_iter}), warm {t_warm * 1e3:.1f} ms, "
              f"log Z {r_cold.log_z:.3f}", flush=True)
    return rows


def approximations_main():
    table = [
        "| n | method | cold (ms) | warm (ms) | log evidence | converged |",
        "|---|---|---|---|---|---|",
    ]
    for n in (200, 1000):
        for n_, name, tc, ic, tw, iw, lz, conv in rows_for(n):
            warm = "-" if name.startswith("ADF") else f"{tw * 1e3:.1f} ({iw})"
            table.append(f"| {n_} | {name} | {tc * 1e3:.1f} ({ic}) | {warm} | {lz:.3f} | {conv} |")
    text = "\n".join(
        ["## Evidence + gradient time by approximation (probit; ms; iterations in brackets)", "",
         "EP: parallel sweeps; Laplace: Newton steps; MF-I / MF-II: Newton steps on alpha; "
         "ADF: passes. Synthetic 5-d data, ARD SE kernel (ls 1.5, amplitude 2, jitter 1e-8), "
         f"1 BLAS thread, medians. Load average at the end of the run: {os.getloadavg()[0]:.1f} "
         f"on {os.cpu_count()} cores (timings from a shared machine are noisy).", ""] + table
    ) + "\n"
    APPROXIMATIONS_OUT.parent.mkdir(parents=True, exist_ok=True)
    write_results(APPROXIMATIONS_OUT, text)
    print(text)


def approximations_entry():
    """Subcommand ``approximations``."""
    approximations_main()


# ---- subcommand ``dense-floor`` ----------------------------------------
import pymc_gpc  # noqa: E402
from pymc_gpc.ops.rewrites import sampling_tolerance  # noqa: E402

DENSE_FLOOR_OUT = pathlib.Path(__file__).parent / "results" / "dense_floor.md"
DENSE_FLOOR_REPEATS = 5
DENSE_FLOOR_D = 8


def dense_floor_data(n, seed=0):
    """The protocol's synthetic binary set."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, DENSE_FLOOR_D))
    f = np.sin(X[:, 0]) + 0.5 * X[:, 1] * X[:, 2] + 0.5 * rng.standard_normal(n)
    return X, (f > 0).astype(int)


def cholesky_floor(n, repeats=DENSE_FLOOR_REPEATS, seed=1):
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


def dense_floor_evaluation(n, approximation, repeats=DENSE_FLOOR_REPEATS):
    """Median seconds of a warm logp + gradient (the module docstring's ``dense-floor``), and the
    cold first call."""
    X, y = dense_floor_data(n)
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


def dense_floor_main():
    """Subcommand ``dense-floor``."""
    parser = argparse.ArgumentParser(description="engine.py dense-floor")
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 2000, 5000])
    args = parser.parse_args(sys.argv[2:])
    rows = []
    for n in args.sizes:
        base = cholesky_floor(n)
        for approximation in ("ep", "laplace"):
            warm, cold = dense_floor_evaluation(n, approximation)
            rows.append((n, approximation, warm, cold, base))
            print(f"n={n} {approximation}: warm {warm:.3f} s, cold {cold:.3f} s, floor {base:.3f} s, "
                  f"ratio {warm / base:.2f}", flush=True)
    lines = ["# Dense logp + gradient against one Cholesky plus its inverse", "",
             "Binary probit, ARD SE kernel (d = 8), synthetic data; warm evaluations at the sampler's",
             "tolerances (`model.logp_dlogp_function` under `sampling_tolerance`), medians of "
             f"{DENSE_FLOOR_REPEATS}; floor: LAPACK dpotrf + dpotri, one thread, median of "
             f"{DENSE_FLOOR_REPEATS}. The machine",
             "was shared and loaded by other jobs: read the ratios (measured back to back in one",
             "process), not the seconds.", "",
             "| n | approximation | warm logp + grad (s) | first call (s) | floor (s) | ratio |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {n} | {a} | {w:.3f} | {c:.3f} | {b:.3f} | {w / b:.2f} |" for n, a, w, c, b in rows]
    write_results(DENSE_FLOOR_OUT, "\n".join(lines) + "\n")


SUBCOMMANDS = {"approximations": approximations_entry, "dense-floor": dense_floor_main}

if __name__ == "__main__" and sys.argv[1:2] and sys.argv[1] in SUBCOMMANDS:
    SUBCOMMANDS[sys.argv[1]]()
elif __name__ == "__main__":
    main()
