"""Shared fixtures and ground-truth integrators for the tests.

Ground truth never reuses package code: likelihoods are re-implemented here with
scipy, and integrals are computed by quadrature or multivariate normal orthant
probabilities (Genz's algorithm in scipy).
"""

import itertools
import os
import pathlib

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

# JAX's persistent compilation cache, in the repository's ignored build/ folder: shared by
# the xdist workers and by the processes the tests start (they inherit the environment),
# and kept between runs. PyTensor's compiled graphs (its compiledir, ~/.pytensor) and the
# package's numba kernels (__pycache__ next to their modules, keyed by the package's
# contents: ``pymc_gpc._numba_cache``) are on disk and shared by the workers already.
os.environ.setdefault(
    "JAX_COMPILATION_CACHE_DIR", str(pathlib.Path(__file__).resolve().parents[1] / "build" / "jax-cache"))
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.1")
# XLA compiles the tests' JAX programs with its backend (LLVM) optimisation off, as
# test_jax_multiclass_fitc.py's programs were already: the same operations on problems that
# run in milliseconds either way, for less compilation time (CONTRIBUTING.md has the
# figures). Set before jax is imported (XLA reads its flags once); the processes the tests
# start inherit it, and test_jax_fitc.py's, which sets XLA_FLAGS itself, adds
# ``XLA_TEST_FLAGS`` (the two-process test of test_jax_distributed.py keeps XLA's default:
# it measured no cheaper with the flag).
XLA_TEST_FLAGS = "--xla_backend_optimization_level=0"
if "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {XLA_TEST_FLAGS}".strip()

import numpy as np
import pytensor
import pytest
from scipy import integrate, special, stats

from pymc_gpc import likelihoods as L

# The test files that take longest, longest first. ``scripts/test.sh`` runs the suite with
# ``--dist loadfile --no-loadscope-reorder``: xdist hands whole files to the workers in
# collection order, and ``pytest_collection_modifyitems`` puts these first, so that no long
# file starts near the end of the run while the other worker has nothing left to do
# (longest-processing-time-first scheduling). Without the reordering xdist would hand out
# the files with the most tests first, and these few-test files last. The figures are each
# file's CPU-seconds from empty caches (one process, ``-n 0``). The docs site and the
# two-process JAX test come second and third, out of turn: they call no numba kernel of the
# package (Sphinx and Chromium; JAX alone), so while the first worker's test_jax.py compiles
# the package's kernels into the shared cache, the second worker does not compile them too.
# The notebooks come last, out of turn: each runs in a kernel process whose chains sample in
# processes of their own, and they compile the package's numba kernels anew wherever the
# on-disk cache lacks them (the two chain processes side by side); after the files above,
# the cache has them. From empty caches the notebooks took 243 CPU-seconds, and 122 with
# the package's kernels cached (PyTensor's graph cache empty in both; a loaded machine).
# A file missing from the list is handed out after all of these, in collection order: the
# entries marked * were missing (tests/test_kernels.py, collected last, ran alone at the
# end of a full run for its last 85 s); their figures are their wall-seconds in that
# two-worker run from empty caches, divided by 2.3, the ratio of that loaded run's wall
# time to an idle one's, so estimates only.
LONGEST_FIRST = (
    "backends/test_jax.py",                      # 231
    "integration/test_docs_site.py",             # 43
    "backends/test_jax_distributed.py",          # 71 in two processes side by side
    "backends/test_jax_hsgp.py",                 # 91
    "backends/test_jax_fitc.py",                 # 70
    "test_sklearn.py",                           # 61
    "test_kernels.py",                           # 55 *
    "test_fuzz_invariants.py",                   # 53
    "ops/test_ops.py",                           # 43
    "integration/test_combinations.py",          # 41
    "integration/test_new_user.py",              # 38 *
    "backends/test_jax_multiclass.py",           # 36
    "integration/test_posterior_gold.py",        # 36
    "integration/test_multiclass_gold.py",       # 30
    "gp/test_fitc_api.py",                       # 28
    "likelihoods/test_adding_a_likelihood.py",   # 27
    "gp/test_multiclass_gp.py",                  # 27
    "structures/test_hsgp.py",                   # 24
    "integration/test_robustness.py",            # 23 *
    "gp/test_gp.py",                             # 21 *
    "backends/numba/test_compiled_hsgp.py",      # 20 *
    "likelihoods/test_ordinal.py",               # 20
    "approximations/test_accuracy.py",           # 20
    "backends/test_jax_ordinal.py",              # 19
    "approximations/test_multiclass.py",         # 18
    "test_pymc_conventions.py",                  # 18
    "structures/test_fitc_memory.py",            # 14 *
    "integration/test_cli_outputs.py",           # 14 *
    "integration/test_notebook.py",              # 154 from empty caches
)


# Marked ``slow`` (``bash scripts/test.sh -m "not slow"`` leaves them out between edits;
# CI runs everything): whole files whose tests compile JAX programs, build the docs, run
# notebooks, sample with NUTS against gold standards, start other processes or compile every
# combination's graph with numba (``test_combinations``; ``ops/test_ops.py`` keeps the
# numba-compiled Ops in the fast tier).
SLOW_FILES = (
    "integration/test_docs_site.py",
    "backends/test_jax.py",
    "backends/test_jax_fitc.py",
    "backends/test_jax_multiclass.py",
    "backends/test_jax_multiclass_fitc.py",
    "backends/test_jax_ordinal.py",
    "backends/test_jax_hsgp.py",
    "backends/test_jax_distributed.py",
    "integration/test_notebook.py",
    "integration/test_multiclass_gold.py",
    "integration/test_posterior_gold.py",
    "integration/test_robustness.py",
    "integration/test_new_user.py",
    "approximations/test_loo_ground_truth.py",
    "ops/test_compilation.py",
    "integration/test_combinations.py",
    "likelihoods/test_ordinal_nuts.py",
    "test_sklearn.py",
    "test_fuzz_invariants.py",
)


# Compiled in PyTensor's default mode (the numba linker), as a user's model is: the files whose
# subject is the compiled graph (the Ops' numba implementations and the compiled EP path, every
# combination a user can write, the README and the notebooks as written) and every file that a
# seeded fault of ``scripts/mutation.py`` names (``tests/integration/test_mutation_list.py``
# holds the list to that), so that the faults are killed through the code users run. The other
# test files compile with FAST_COMPILE (the Python linker: each node's ``perform``, the
# package's numba kernels inside it, no numba compilation of the model's graph), which computes
# the same numbers at a fraction of the CPU time of compiling each model's graph.
# The JAX backend's files (backends/test_jax*.py) check mode="JAX" against the CPU path on the
# Python linker: where the numba linker does not run ``perform`` itself (in an object-mode
# block), it runs the compiled EP engines, which test_ops.py, likelihoods/test_ordinal.py and
# backends/numba/test_compiled_hsgp.py hold to ``perform`` along random walks (to 1e-8 or
# closer). Compiling their reference graphs with numba as well cost about 90 CPU-seconds of
# tests/backends/ from an empty PyTensor cache.
DEFAULT_MODE_FILES = (
    "ops/test_ops.py",
    "ops/test_ops_inputs.py",
    "ops/test_compilation.py",
    "integration/test_combinations.py",
    "integration/test_new_user.py",
    "integration/test_notebook.py",
    "integration/test_docs.py",
    "integration/test_docs_site.py",
    # the files of the mutation list
    "approximations/test_ep_schedules.py",
    "approximations/test_loo_ground_truth.py",
    "approximations/test_meanfield_rounding.py",
    "approximations/test_multiclass.py",
    "approximations/test_multiclass_ground_truth.py",
    "gp/test_gp_label_coding.py",
    "likelihoods/test_ordered_logit_large_variance.py",
    "likelihoods/test_ordinal_labels.py",
    "structures/test_fitc.py",
    "test_idata_coords.py",
)


@pytest.fixture(scope="module", autouse=True)
def _compile_mode(request):
    """FAST_COMPILE for the graphs of a test file outside ``DEFAULT_MODE_FILES`` (a graph
    compiled with an explicit ``mode=`` keeps it)."""
    try:
        name = pathlib.Path(request.path).relative_to(pathlib.Path(__file__).parent).as_posix()
    except ValueError:  # a test outside tests/
        name = None
    if name is None or name in DEFAULT_MODE_FILES:
        yield
        return
    with pytensor.config.change_flags(mode="FAST_COMPILE"):
        yield


# The package's three large numba units, compiled (or loaded from numba's on-disk cache) in
# processes of their own while the xdist workers start and collect, one process per worker;
# the controller hands out the first tests once they are done. From an empty cache, every
# process that called one before it was cached compiled it: the workers' first tests, the
# notebooks' chain processes (two side by side). The dense EP engine is the longest (about
# 65 CPU-s cold); the HSGP engine shares about 30 s of callees with it, so the second process
# takes the ARD kernels (15 s) first. With the cache filled, each process only imports the
# package and loads them (about 4 s).
WARM_UNITS = (
    ("pymc_gpc.backends.numba.compiled_ep:external",),
    ("pymc_gpc.kernels:external_kernels", "pymc_gpc.backends.numba.compiled_hsgp:external"),
)
_warming = []  # the controller's (units, process) pairs, until the first worker has collected


def unit_calls(units):
    """Python source that imports each ``module:function`` of ``units`` and calls the function."""
    return "import importlib\n" + "".join(
        f"importlib.import_module({m!r}).{f}()\n" for m, f in (unit.split(":") for unit in units))


def _start_warming(groups):
    """Start each group of ``module:function`` compilations in a process of its own."""
    import subprocess
    import sys

    for group in groups:
        _warming.append((group, subprocess.Popen([sys.executable, "-c", unit_calls(group)], stdout=subprocess.DEVNULL,
                                                 stderr=subprocess.PIPE, text=True)))


def _finish_warming():
    """Wait for the processes of ``_start_warming``. One that failed is reported and otherwise
    ignored: the tests that call its units fail with their own message."""
    import warnings

    while _warming:
        group, run = _warming.pop()
        _, err = run.communicate()
        if run.returncode:
            warnings.warn(f"compiling {', '.join(group)} before the tests failed:\n{err[-2000:]}", stacklevel=1)


def pytest_configure(config):
    """In the controller of a run with two or more xdist workers: start ``WARM_UNITS``."""
    workers = getattr(config.option, "numprocesses", None)
    if not hasattr(config, "workerinput") and isinstance(workers, int) and workers >= 2:
        _start_warming(WARM_UNITS[:workers])


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node, ids):
    """Before xdist schedules the first test: wait for ``WARM_UNITS``."""
    _finish_warming()


def pytest_unconfigure(config):
    _finish_warming()


def pytest_collection_modifyitems(config, items):
    """Stable-sort the tests so that the files of ``LONGEST_FIRST`` come first, in its order,
    and mark the tests of ``SLOW_FILES`` ``slow``."""
    here = pathlib.Path(__file__).parent
    slow = set(SLOW_FILES)
    for item in items:
        try:
            if pathlib.Path(item.path).relative_to(here).as_posix() in slow:
                item.add_marker(pytest.mark.slow)
        except ValueError:  # a test outside tests/
            pass
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}

    def key(item):
        try:
            name = pathlib.Path(item.path).relative_to(here).as_posix()
        except ValueError:  # a test outside tests/
            return len(rank)
        return rank.get(name, len(rank))

    items.sort(key=key)

# One instance of every likelihood with a non-trivial parameter value.
LIKELIHOOD_CASES = [
    L.Probit(),
    L.ProbitBias(0.4),
    L.ProbitNoise(0.6),
    L.StepLabelNoise(0.1),
    L.Logistic(),
]


def lik_id(lik):
    return type(lik).__name__


def reference_log_lik(lik, params=None):
    """log p(y | f) written independently with scipy: returns a vectorised function."""
    p = lik.params if params is None else np.asarray(params, float)
    name = type(lik).__name__
    if name == "Probit":
        return lambda y, f: special.log_ndtr(y * f)
    if name == "ProbitBias":
        return lambda y, f: special.log_ndtr(y * (f + p[0]))
    if name == "ProbitNoise":
        return lambda y, f: special.log_ndtr(y * f / p[0])
    if name == "StepLabelNoise":
        return lambda y, f: np.log(p[0] + (1 - 2 * p[0]) * (y * f > 0))
    if name == "Logistic":
        return lambda y, f: -np.logaddexp(0.0, -y * f)
    raise KeyError(name)


def reference_lik(lik, params=None):
    """p(y | f) from ``reference_log_lik``."""
    log_p = reference_log_lik(lik, params)
    return lambda y, f: np.exp(log_p(y, f))


def brute_force_log_z(lik, K, y, n_nodes=48):
    """log of the integral of prod_i p(y_i | f_i) N(f; 0, K) over R^n (n <= 4).

    Smooth likelihoods: tensor Gauss-Hermite in whitened coordinates f = L z.
    Step likelihood: expand prod_i (eps + (1 - 2 eps) H(y_i f_i)) over subsets S and
    add eps^{n-|S|} (1-2eps)^{|S|} P(y_i f_i > 0, i in S), orthant probabilities.
    """
    n = len(y)
    if n == 1:  # adaptive quadrature, breakpoints at the likelihood's transition
        sd = np.sqrt(K[0, 0])
        p = reference_lik(lik)
        val = integrate.quad(
            lambda t: p(y[0], sd * t) * stats.norm.pdf(t), -40, 40, points=[0.0],
            epsabs=0, epsrel=1e-13, limit=500,
        )[0]
        return float(np.log(val))
    if type(lik).__name__ == "StepLabelNoise":
        eps = lik.params[0]
        total = 0.0
        for r in range(n + 1):
            for S in itertools.combinations(range(n), r):
                S = list(S)
                weight = eps ** (n - r) * (1 - 2 * eps) ** r
                if r == 0:
                    prob = 1.0
                elif r == 1:
                    prob = 0.5
                else:
                    D = np.diag(y[S])
                    cov = D @ K[np.ix_(S, S)] @ D
                    prob = stats.multivariate_normal.cdf(
                        np.zeros(r), mean=np.zeros(r), cov=cov, abseps=1e-10, releps=1e-10,
                        maxpts=2_000_000 * r, rng=np.random.default_rng(0),
                    )
                total += weight * prob
        return float(np.log(total))
    x, w = np.polynomial.hermite_e.hermegauss(n_nodes)  # weight exp(-z^2/2)
    w = w / np.sqrt(2 * np.pi)
    Lk = np.linalg.cholesky(K)
    grids = np.meshgrid(*([x] * n), indexing="ij")
    Z = np.stack([g.ravel() for g in grids])
    W = np.prod(np.meshgrid(*([w] * n), indexing="ij"), axis=0).ravel()
    F = Lk @ Z
    log_p = reference_log_lik(lik)
    log_terms = np.sum([log_p(y[i], F[i]) for i in range(n)], axis=0)
    return float(special.logsumexp(log_terms, b=W))


def ard_kernel(X, log_ls, log_amp, jitter=1e-8):
    """Squared-exponential ARD kernel and its derivatives w.r.t. (log_ls..., log_amp)."""
    ls = np.exp(log_ls)
    diff2 = (X[:, None, :] - X[None, :, :]) ** 2 / ls**2
    K0 = np.exp(log_amp) * np.exp(-0.5 * diff2.sum(-1))
    dK = [K0 * diff2[:, :, m] for m in range(X.shape[1])] + [K0]
    return K0 + jitter * np.eye(len(X)), dK


@pytest.fixture
def rng():
    return np.random.default_rng(20261122)


def se_kernel(A, B, ls, amp):
    """The squared-exponential kernel amp exp(-|(a - b) / ls|^2 / 2) between the rows of A and
    B (pm.gp.cov.ExpQuad's, scaled); ``ls`` a scalar or one per column; 1-D inputs are one
    column. The one copy for the tests (written with numpy, not the package)."""
    A, B = np.asarray(A, float), np.asarray(B, float)
    A, B = (A[:, None] if A.ndim == 1 else A), (B[:, None] if B.ndim == 1 else B)
    return amp * np.exp(-0.5 * (((A[:, None, :] - B[None, :, :]) / ls) ** 2).sum(-1))


def random_problem(rng, n, d=2, flip=0.15):
    X = rng.normal(size=(n, d))
    y = np.where(X[:, 0] + 0.5 * X[:, 1] ** 2 - 0.3 > 0, 1.0, -1.0)
    flips = rng.random(n) < flip
    y[flips] *= -1
    if len(np.unique(y)) < 2:
        y[0] = -y[0]
    return X, y



def nested_gp(X, y, marginal, likelihood):
    """(outer, gp): a ``marginal`` GP with an ExpQuad kernel (lengthscale ``sub::ls``) on (X, y),
    added to a model "sub" nested in an outer model that has one variable of its own."""
    import pymc as pm

    with pm.Model() as outer:
        pm.Normal("other", 0.0, 1.0)
        with pm.Model("sub"):
            ls = pm.LogNormal("ls", 0.0, 1.0)
            gp = marginal(cov_func=pm.gp.cov.ExpQuad(X.shape[1], ls=ls), likelihood=likelihood)
            gp.marginal_likelihood("y", X=X, y=y)
    return outer, gp


@pytest.fixture
def compiled_ep(monkeypatch):
    """Binary EP's compiled numba implementation (``backends.numba.compiled_ep``) for graphs compiled
    in the test (``backends.numba.dispatch.COMPILED_EP``, on by default unless PYMC_GPC_COMPILED_EP=0)."""
    from pymc_gpc.backends.numba import dispatch

    monkeypatch.setattr(dispatch, "COMPILED_EP", True)
