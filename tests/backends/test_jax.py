"""The JAX backend (``backends/jax/engine.py``, ``backends/jax/dispatch.py``): values and gradients
against the CPU path (the package's solvers; graphs on the Python linker, as
``tests/conftest.py`` says why), failure semantics, vmap, prediction, the ARD kernel, and
PyMC's JAX samplers (numpyro, blackjax) against PyMC's NUTS.

Skipped where jax is not installed (``pip install pymc-gpc[jax]``); the ``test`` extra,
which CI installs, includes it. JAX compiles each new function (a few seconds per Op here).
"""

import subprocess
import sys
import warnings

import numpy as np
import pytest

jax = pytest.importorskip("jax", reason="the JAX backend needs jax: pip install pymc-gpc[jax]")

import arviz as az  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import pymc as pm  # noqa: E402
import pytensor  # noqa: E402
import pytensor.tensor as pt  # noqa: E402

import pymc_gpc  # noqa: E402
from pymc_gpc import ep, laplace  # noqa: E402
from pymc_gpc import likelihoods as L  # noqa: E402
from pymc_gpc.backends.jax import engine as jax_engine  # noqa: E402
from pymc_gpc.ops import ApproxMarginalOp, LatentPredictiveOp  # noqa: E402

from ..conftest import random_problem  # noqa: E402
from .test_jax_fitc import jittered_starts  # noqa: E402

LIKS = [(L.Probit, []), (L.ProbitBias, [0.4]), (L.ProbitNoise, [0.6]), (L.StepLabelNoise, [0.1]), (L.Logistic, [])]
PAIRS = [(a, lik, th) for lik, th in LIKS for a in ("ep", "laplace") if lik.supports_laplace or a == "ep"]
TIGHT = {"ep": (("tol", 1e-11),), "laplace": ()}


def _graph(approx, lik_type, X, y, options):
    """log Z, its gradient in (log lengthscales, log amplitude, theta) and status, through a
    sum of pm.gp.cov kernels."""
    log_ls, log_amp, theta = pt.dvector("log_ls"), pt.dscalar("log_amp"), pt.dvector("theta")
    d = X.shape[1]
    cov = pt.exp(log_amp) * pm.gp.cov.ExpQuad(d, ls=pt.exp(log_ls)) + 0.3 * pm.gp.cov.Matern52(d, ls=2.0)
    K = cov(X) + 1e-6 * pt.eye(X.shape[0])
    out = ApproxMarginalOp(approx, lik_type, options)(K, theta, y)
    grads = pytensor.grad(out[0], [log_ls, log_amp, theta])
    return [log_ls, log_amp, theta], [out[0], *grads, out[3], out[5]], K


@pytest.mark.parametrize("approx, lik_type, theta", PAIRS, ids=lambda v: getattr(v, "__name__", str(v)))
def test_jax_value_and_gradient_equal_the_cpu_path(approx, lik_type, theta):
    """pytensor.function(mode="JAX") against the CPU linker (the Op's ``perform``): evidence, gradient
    through the kernel's hyperparameters and the likelihood parameter, LOO terms, at a
    small and a large kernel amplitude (EP: 11 and 21 sweeps)."""
    rng = np.random.default_rng(5)
    X, y = random_problem(rng, 25, d=2)
    inputs, outputs, _ = _graph(approx, lik_type, X, y, TIGHT[approx])
    cpu_fn = pytensor.function(inputs, outputs)
    jax_fn = pytensor.function(inputs, outputs, mode="JAX")
    for amplitude in (1.0, 30.0):
        p = [np.log([0.8, 1.3]), np.log(amplitude), np.array(theta, float)]
        ref, got = cpu_fn(*p), jax_fn(*p)
        assert int(ref[-1]) == 0 and int(got[-1]) == 0
        for r, g in zip(ref[:-1], got[:-1]):
            np.testing.assert_allclose(np.asarray(g), r, rtol=1e-8, atol=1e-8)


@pytest.mark.parametrize("approx, lik_type, theta", [PAIRS[4], PAIRS[6], PAIRS[3]],
                         ids=lambda v: getattr(v, "__name__", str(v)))
def test_jax_custom_vjp_matches_finite_differences(approx, lik_type, theta):
    """jax.grad of the engine's function (the custom_vjp) against central differences of its value."""
    rng = np.random.default_rng(7)
    X, y = random_problem(rng, 15, d=2)
    fn = jax_engine.marginal_fn(approx, lik_type.kind, **dict(TIGHT[approx]))
    D = jnp.asarray(((X[:, None] - X[None]) ** 2).sum(-1))

    def log_z(h):  # h = (log amplitude, log lengthscale, theta...)
        K = jnp.exp(h[0]) * jnp.exp(-0.5 * D / jnp.exp(2 * h[1])) + 1e-6 * jnp.eye(X.shape[0])
        return fn(K, h[2:], jnp.asarray(y))[0]

    h = jnp.asarray([np.log(2.0), np.log(0.9), *theta])
    g = np.asarray(jax.jit(jax.grad(log_z))(h))
    f = jax.jit(log_z)
    for k in range(h.shape[0]):
        e = np.zeros(h.shape[0])
        e[k] = 1e-5
        fd = (float(f(h + e)) - float(f(h - e))) / 2e-5
        assert g[k] == pytest.approx(fd, rel=1e-5, abs=1e-7)


def test_step_likelihood_with_negative_sites_matches_numba():
    """The step likelihood's EP has negative site precisions here; both backends reach the
    same fixed point through chol(K)."""
    rng = np.random.default_rng(1)
    X, y = random_problem(rng, 30, d=2)
    D = ((X[:, None] - X[None]) ** 2).sum(-1)
    K = 5.0 * np.exp(-0.5 * D / 1.3 ** 2) + 1e-6 * np.eye(30)
    ref = ep(K, y, L.StepLabelNoise(0.1), tol=1e-11)
    assert ref.state.tau.min() < 0.0
    out = jax.jit(jax_engine.marginal_fn("ep", L.StepLabelNoise.kind, tol=1e-11))(K, jnp.asarray([0.1]), y)
    assert float(out[0]) == pytest.approx(ref.log_z, abs=1e-8)
    np.testing.assert_allclose(np.asarray(out[1]), ref.dlog_z_dK, atol=1e-8)
    assert int(out[5]) == 0


def test_failures_give_minus_inf_with_a_finite_gradient_and_status():
    rng = np.random.default_rng(2)
    X, y = random_problem(rng, 12, d=2)
    K = np.exp(-0.5 * ((X[:, None] - X[None]) ** 2).sum(-1)) + 1e-6 * np.eye(12)
    noise = jax.jit(jax_engine.marginal_fn("ep", L.ProbitNoise.kind, tol=1e-8))
    grad = jax.jit(jax.grad(lambda K, th: noise(K, th, y)[0], argnums=(0, 1)))
    for K_bad, th in [(K, jnp.asarray([-1.0])), (np.full_like(K, np.nan), jnp.asarray([1.0])),
                      (K - 3.0 * np.eye(12), jnp.asarray([1.0]))]:  # sigma < 0, NaN, not PSD
        out = noise(K_bad, th, y)
        assert float(out[0]) == -np.inf and int(out[5]) == 2
        gK, gth = grad(K_bad, th)
        assert np.all(np.isfinite(gK)) and np.all(np.isfinite(gth))
    capped = jax.jit(jax_engine.marginal_fn("laplace", L.Logistic.kind, max_iter=1))(20 * K, jnp.zeros(0), y)
    assert int(capped[5]) == 1 and np.isfinite(float(capped[0]))  # not converged: value used


def test_vmap_over_kernels_equals_separate_evaluations():
    """Vectorised chains evaluate a batch of kernels in one call (lax.while_loop under vmap)."""
    rng = np.random.default_rng(4)
    X, y = random_problem(rng, 20, d=2)
    D = ((X[:, None] - X[None]) ** 2).sum(-1)
    Ks = jnp.stack([a * np.exp(-0.5 * D) + 1e-6 * np.eye(20) for a in (0.5, 3.0, 40.0)])
    fn = jax_engine.marginal_fn("ep", L.Probit.kind, tol=1e-10)
    batched = jax.jit(jax.vmap(fn, in_axes=(0, None, None)))(Ks, jnp.zeros(0), y)
    for k in range(3):
        ref = ep(np.asarray(Ks[k]), y, L.Probit(), tol=1e-10)
        assert float(batched[0][k]) == pytest.approx(ref.log_z, abs=1e-8)
        assert int(batched[4][k]) == ref.n_iter


@pytest.mark.parametrize("approx, lik_type, theta", [("ep", L.StepLabelNoise, [0.1]), ("laplace", L.Logistic, [])])
@pytest.mark.parametrize("full_cov", [False, True])
def test_latent_predictive_equals_numba(approx, lik_type, theta, full_cov):
    rng = np.random.default_rng(6)
    X, y = random_problem(rng, 20, d=2)
    Xnew = rng.normal(size=(7, 2))
    amp = pt.dscalar("amp")  # symbolic, so that nothing is folded at compile time
    cov = amp * pm.gp.cov.ExpQuad(2, ls=1.1)
    K = cov(X) + 1e-6 * pt.eye(20)
    op = LatentPredictiveOp(approx, lik_type, (("tol", 1e-11),) if approx == "ep" else (), full_cov)
    out = op(K, pt.as_tensor(np.array(theta, float)), y, cov(X, Xnew), cov(Xnew) if full_cov else cov(Xnew, diag=True))
    ref = pytensor.function([amp], out)(2.0)
    got = pytensor.function([amp], out, mode="JAX")(2.0)
    for r, g in zip(ref, got):
        np.testing.assert_allclose(np.asarray(g), r, rtol=1e-8, atol=1e-9)


def test_ard_kernel_op_and_its_gradient_equal_numba():
    rng = np.random.default_rng(8)
    X = np.column_stack([rng.normal(size=(15, 2)), rng.integers(0, 3, 15)])
    l, v0 = pt.dvector("l"), pt.dscalar("v0")
    cov = pymc_gpc.kernels.MixedARD(3, v0=v0, l=l, v1=0.3, v2=0.1, discrete=[2])
    K = cov(X)
    out = [K, *pytensor.grad(pt.sum(K * np.cos(np.arange(225.0)).reshape(15, 15)), [l, v0])]
    p = [np.array([0.5, 1.5, 0.7]), 1.7]
    for r, g in zip(pytensor.function([l, v0], out)(*p), pytensor.function([l, v0], out, mode="JAX")(*p)):
        np.testing.assert_allclose(np.asarray(g), r, rtol=1e-10, atol=1e-12)


def test_mean_field_has_no_jax_implementation_and_says_what_works():
    X, y = random_problem(np.random.default_rng(0), 8, d=2)
    amp = pt.dscalar("amp")
    K = amp * pm.gp.cov.ExpQuad(2, ls=1.0)(X) + 1e-6 * pt.eye(8)
    out = ApproxMarginalOp("meanfield", L.Probit, (("variant", "naive"),))(K, pt.zeros(0), y)[0]
    with pytest.raises(NotImplementedError, match="EP and Laplace"):
        pytensor.function([amp], out, mode="JAX")


def test_missing_jax_names_the_extra(monkeypatch):
    import pymc_gpc.idata as idata_module

    monkeypatch.setattr(idata_module, "jax_available", lambda: False)
    with pm.Model():
        pm.Normal("x")
        with pytest.raises(ImportError, match=r"pip install pymc-gpc\[jax\]"):
            pymc_gpc.sample(nuts_sampler="numpyro")


def test_import_does_not_import_jax_until_pytensor_jax_is_used():
    code = ("import sys, pymc_gpc; a = 'jax' in sys.modules; import pytensor.link.jax.dispatch as d; "
            "from pymc_gpc.ops import ApproxMarginalOp; print(a, ApproxMarginalOp in d.jax_funcify.registry)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True"]


@pytest.mark.parametrize("first", ["multiclass", "multiclass_fitc", "multiclass_hsgp", "hsgp"])
def test_importing_a_backend_module_first_registers_every_op(first):
    """A direct import of one backend module before PyTensor's JAX dispatch (whose import
    runs the registration hook mid-import) raises no circular ImportError, and the evidence
    and predictive Ops find an implementation for each prior structure the registry says
    JAX serves (dense, FITC, HSGP and their multi-class forms) through the lookup
    ``jax_funcify`` uses. (Importing ``multiclass_fitc`` first raised an ImportError from
    ``multiclass_hsgp``, which subclasses one of its classes.)"""
    code = (f"import pymc_gpc.backends.jax.{first}; import pytensor.link.jax.dispatch as d; "
            "from pymc_gpc.ops import ApproxMarginalOp, LatentPredictiveOp; "
            "from pymc_gpc.backends.jax.dispatch import implementation; "
            "from pymc_gpc.approximations.registry import BACKEND_STRUCTURES; "
            "ops = (ApproxMarginalOp, LatentPredictiveOp); "
            "served = set(BACKEND_STRUCTURES['jax']); "
            "print(all(op in d.jax_funcify.registry for op in ops) and "
            "served >= {'dense', 'fitc', 'dense-multiclass', 'fitc-multiclass', 'hsgp', 'hsgp-multiclass'} and "
            "all(callable(implementation(op, s)) for op in ops for s in served))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["True"]


def _small_model(X, y):
    with pm.Model() as model:
        log_ls = pm.Normal("log_ls", 0.0, 1.0)
        log_amp = pm.Normal("log_amp", 0.0, 1.0)
        cov = pt.exp(log_amp) * pm.gp.cov.ExpQuad(1, ls=pt.exp(log_ls))
        pymc_gpc.MarginalEP(cov_func=cov, likelihood=L.Probit()).marginal_likelihood("y", X=X, y=y)
    return model


def test_numpyro_posterior_agrees_with_pymc_nuts_and_blackjax_runs():
    """numpyro (through pymc_gpc.sample, vectorised chains) against PyMC's NUTS on the same
    model: posterior means and sds within Monte Carlo error; blackjax runs (one chain); both
    record converged diagnostics.

    The Monte Carlo tolerance scales with the draws: each mean (sd) may differ by four
    combined Monte Carlo standard errors (ArviZ's mcse_mean, mcse_sd of the two runs, in
    quadrature) plus 0.02, so 2 x 300 draws per sampler keep the test's false-alarm rate
    while its cost is mostly the two samplers' runs and the JAX compilations."""
    rng = np.random.default_rng(0)
    X = rng.uniform(-3, 3, size=(25, 1))
    y = np.where(np.sin(1.5 * X[:, 0]) + 0.3 * rng.normal(size=25) > 0, 1, -1)
    model = _small_model(X, y)
    kw = dict(draws=300, tune=300, chains=2, random_seed=3, progressbar=False)
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = pymc_gpc.sample(**kw, cores=1)
        # jitter=False with jittered_starts: no eager (op-by-op compiled) logp at the starts
        jx = pymc_gpc.sample(**kw, nuts_sampler="numpyro", initvals=jittered_starts(model, 2, 3),
                             nuts={"chain_method": "vectorized", "jitter": False})
        # one chain: PyMC maps blackjax's chains with jax.pmap, which needs a device per
        # chain (JAX was initialised with one CPU device by the tests before this one), or
        # with vmap (chain_method="vectorized"), whose batched while-loops cost twice the
        # compilation; numpyro's run above has the vectorised chains
        bj = pm.sample(draws=50, tune=50, chains=1, random_seed=1, progressbar=False, nuts_sampler="blackjax",
                       initvals=jittered_starts(model, 1, 1), nuts={"jitter": False})
    assert "/log_likelihood" in jx.groups  # pymc_gpc.sample added the LOO terms
    for name in ("log_ls", "log_amp"):
        a, b = az.summary(ref, var_names=[name]), az.summary(jx, var_names=[name])
        se = float(np.hypot(a["mcse_mean"].iloc[0], b["mcse_mean"].iloc[0]))
        assert abs(a["mean"].iloc[0] - b["mean"].iloc[0]) <= 4 * se + 0.02
        se_sd = float(np.hypot(a["mcse_sd"].iloc[0], b["mcse_sd"].iloc[0]))
        assert abs(a["sd"].iloc[0] - b["sd"].iloc[0]) <= 4 * se_sd + 0.02
    for idata, group in ((jx, "sample_stats"), (bj, "posterior")):  # pymc_gpc.sample's layout, pm.sample's
        assert np.all(np.asarray(idata[group]["y_status"]) == 0)
        assert np.all(np.isfinite(np.asarray(idata["posterior"]["log_amp"])))
