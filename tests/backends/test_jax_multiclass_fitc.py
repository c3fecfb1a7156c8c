"""The JAX backend of the multi-class FITC Ops (``backends/jax/multiclass_fitc.py``):
softmax Laplace and nested EP with each class's inducing-point prior, against the numba
solvers on ``structures.multiclass_fitc.MulticlassFITCPrior``.

The evidence, its gradient in every class's (K_uu, K_uf, diag K_ff), the LOO terms and,
through ``jax.value_and_grad`` (the ``custom_vjp``) and the kernel, the gradient in the
log amplitude, the log lengthscale and the inducing inputs, shared by the classes or one
set per class; the latter against the numba gradient contracted with the kernel's
analytic derivatives (numpy). The failure convention at extreme points, and a model under
``pytensor.function(mode="JAX")`` against the numba solver and the analytic derivatives.

Skipped where jax is not installed (``pip install pymc-gpc[jax]``). Each JAX function is
compiled once per module, with XLA's backend optimisation off (``_FAST``: these tiny
problems run in milliseconds either way; compiling is what the tests spend their time on).
"""

import functools
import warnings

import numpy as np
import pytest

jax = pytest.importorskip("jax", reason="the JAX backend needs jax: pip install pymc-gpc[jax]")

import jax.numpy as jnp  # noqa: E402
import pymc as pm  # noqa: E402
import pytensor  # noqa: E402
import pytensor.tensor as pt  # noqa: E402

import pymc_gpc  # noqa: E402
from pymc_gpc import likelihoods as L  # noqa: E402
from pymc_gpc import multinomial_probit_ep, softmax_laplace  # noqa: E402
from pymc_gpc.backends.jax import multiclass_fitc  # noqa: E402
from pymc_gpc.structures.multiclass_fitc import MulticlassFITCPrior  # noqa: E402

N, C, M, D = 14, 3, 4, 2
AMP = np.array([1.0, 2.0, 0.5])  # per-class amplitude and lengthscale factors
LS = np.array([1.0, 0.7, 1.5])
JITTER = 1e-6
# the numba solvers at a tight tolerance: both backends at the same fixed point
CASES = {"laplace": ("laplace", softmax_laplace, L.Softmax, {"tol": 1e-12}),
         "ep": ("ep", multinomial_probit_ep, L.MultinomialProbit, {"tol": 1e-11})}
_FAST = {"xla_backend_optimization_level": 0}

_rng = np.random.default_rng(5)
X = _rng.normal(size=(N, D))
Y = np.digitize(X[:, 0] + 0.3 * _rng.normal(size=N), [-0.5, 0.5]).astype(float)
XU = {"shared": np.broadcast_to(X[::4][:M] + 0.1, (C, M, D)).copy(),
      "per-class": X[::4][:M][None] + 0.4 * _rng.normal(size=(C, M, D))}


def _kernels(xp, log_amp, log_ls, Xu, jitter=JITTER):
    """(K_uu + jitter I (c, m, m), K_uf (c, m, n), diag K_ff + jitter (c, n)) of amp_k
    exp(-|x - x'|^2 / (2 ls_k^2)), amp = e^log_amp AMP, ls = e^log_ls LS; numpy or jax.numpy (``xp``)."""
    amp, ls = xp.exp(log_amp) * AMP, LS * xp.exp(log_ls)
    Duu = ((Xu[:, :, None] - Xu[:, None]) ** 2).sum(-1)
    Duf = ((Xu[:, :, None] - X[None, None]) ** 2).sum(-1)
    Kuu = amp[:, None, None] * xp.exp(-0.5 * Duu / ls[:, None, None] ** 2) + jitter * xp.eye(M)
    Kuf = amp[:, None, None] * xp.exp(-0.5 * Duf / ls[:, None, None] ** 2)
    return Kuu, Kuf, amp[:, None] * xp.ones((1, N)) + jitter


def _chain_rule(log_amp, log_ls, Xu, dKuu, dKuf, dkd):
    """d log Z / d(log_amp, log_ls, Xu) from the gradient in the kernel matrices, by the
    kernel's analytic derivatives (numpy)."""
    Kuu, Kuf, kd = _kernels(np, log_amp, log_ls, Xu, jitter=0.0)  # d/d log_amp: the jitter is constant
    ls2 = (LS * np.exp(log_ls))[:, None, None] ** 2
    Duu = ((Xu[:, :, None] - Xu[:, None]) ** 2).sum(-1)
    Duf = ((Xu[:, :, None] - X[None, None]) ** 2).sum(-1)
    g_amp = np.sum(dKuu * Kuu) + np.sum(dKuf * Kuf) + np.sum(dkd * kd)
    g_ls = np.sum(dKuu * Kuu * Duu / ls2) + np.sum(dKuf * Kuf * Duf / ls2)
    Wuf = dKuf * Kuf / ls2
    Wuu = (dKuu + np.transpose(dKuu, (0, 2, 1))) * Kuu / ls2
    g_Xu = -(Wuf.sum(-1)[..., None] * Xu - Wuf @ X) - (Wuu.sum(-1)[..., None] * Xu - Wuu @ Xu)
    return g_amp, g_ls, g_Xu


@pytest.fixture(scope="module", params=list(CASES))
def evaluator(request):
    """(case, jitted (log_amp, log_ls, Xu, jitter) -> ((log_z, the Op's outputs), gradients in
    (log_amp, log_ls, Xu)) by ``jax.value_and_grad`` through the custom_vjp)."""
    approximation, _, _, options = CASES[request.param]
    marginal = multiclass_fitc.marginal_fn(approximation, **options)

    def value(log_amp, log_ls, Xu, jitter):
        out = marginal(*_kernels(jnp, log_amp, log_ls, Xu, jitter), jnp.zeros(0), Y)
        return out[0], out

    grad = jax.value_and_grad(value, argnums=(0, 1, 2), has_aux=True)
    return request.param, jax.jit(grad, compiler_options=_FAST)


def _numba(case, log_amp, log_ls, Xu):
    _, solver, lik, options = CASES[case]
    return solver(MulticlassFITCPrior(*_kernels(np, log_amp, log_ls, Xu)), Y.astype(int), lik(), **options)


@pytest.mark.parametrize("log_amp", [0.0, 2.0])
@pytest.mark.parametrize("inducing", list(XU))
def test_evidence_gradients_and_loo_equal_the_numba_solvers(evaluator, inducing, log_amp):
    """log q, its gradient in every class's K_uu, K_uf, diag K_ff, the LOO terms, and the
    gradient in (log amplitude, log lengthscale, Xu) to 1e-8, at a small and a large amplitude."""
    case, fn = evaluator
    Xu = XU[inducing]
    (log_z, out), grads = fn(log_amp, 0.1, Xu, JITTER)
    ref = _numba(case, log_amp, 0.1, Xu)
    assert int(out[-1]) == 0 and ref.converged
    assert np.isfinite(ref.log_z) and float(log_z) == pytest.approx(ref.log_z, abs=1e-8, rel=1e-10)
    for got, want in zip(out[1:4], ref.dlog_z_dK):
        assert np.any(want != 0.0)
        np.testing.assert_allclose(np.asarray(got), want, atol=1e-8, rtol=1e-8)
    np.testing.assert_allclose(np.asarray(out[5]), ref.loo_log_p, atol=1e-8, rtol=1e-8)
    want = _chain_rule(log_amp, 0.1, Xu, *ref.dlog_z_dK)
    for got, w in zip(grads, want):
        np.testing.assert_allclose(np.asarray(got), w, atol=1e-8, rtol=1e-8)


@pytest.mark.parametrize("point", [(0.0, 0.0, -5.0), (60.0, 0.0, JITTER), (2.0, -40.0, JITTER), (-60.0, 3.0, JITTER)],
                         ids=["not-psd", "huge-amp", "tiny-ls", "tiny-amp"])
def test_extreme_points_give_a_finite_value_or_minus_inf_never_nan(evaluator, point):
    """K_uu with no Cholesky factor at any jitter of the fallback is a failure: -inf, status
    2, a zero gradient. Extreme hyperparameters give a finite value or that failure, and a
    finite gradient either way."""
    _, fn = evaluator
    log_amp, log_ls, jitter = point
    (log_z, out), grads = fn(log_amp, log_ls, XU["per-class"], jitter)
    log_z, status = float(log_z), int(out[-1])
    assert all(np.all(np.isfinite(np.asarray(g))) for g in (*grads, *out[1:4]))
    assert not np.isnan(log_z) and not np.any(np.isnan(np.asarray(out[5])))
    assert (status == 2) == (log_z == -np.inf)
    if point[0] == 0.0:
        assert log_z == -np.inf and status == 2
        assert all(not np.any(np.asarray(g)) for g in (*grads, *out[1:4]))


def test_a_fitc_softmax_model_under_mode_jax_equals_the_numba_solver(monkeypatch):
    """A softmax Laplace model with one kernel and one set of inducing inputs (a random
    variable) per class: logp and its gradient in the log lengthscale and Xu under
    ``mode="JAX"`` (the registered Op, PyTensor's autodiff of the kernel) against the numba
    solver with the kernel's analytic derivatives and the N(0, 1) and N(XU, 1) priors'."""
    with pm.Model() as model:
        log_ls = pm.Normal("log_ls", 0.0, 1.0)
        Xu = pm.Normal("Xu", XU["per-class"], 1.0, shape=(C, M, D))
        covs = [float(a) * pm.gp.cov.ExpQuad(D, ls=pt.exp(log_ls) * float(s)) for a, s in zip(AMP, LS)]
        gp = pymc_gpc.MarginalLaplace(cov_func=covs, likelihood=L.Softmax(), approx="FITC", jitter=JITTER, tol=1e-12)
        gp.marginal_likelihood("y", X=X, y=Y.astype(int), Xu=Xu)
    logp = model.logp()
    # PyTensor's JAX linker calls jax.jit: compile with _FAST as the other tests do
    monkeypatch.setattr(jax, "jit", functools.partial(jax.jit, compiler_options=_FAST))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        jax_fn = pytensor.function(model.value_vars, [logp, *pytensor.grad(logp, model.value_vars)], mode="JAX")
    h, xu = 0.3, XU["per-class"] + 0.05
    value, g_ls, g_Xu = jax_fn(np.asarray(h), xu)
    ref = _numba("laplace", 0.0, h, xu)
    _, want_ls, want_Xu = _chain_rule(0.0, h, xu, *ref.dlog_z_dK)
    log_prior = -0.5 * h ** 2 - 0.5 * np.sum((xu - XU["per-class"]) ** 2) - 0.5 * (1 + xu.size) * np.log(2 * np.pi)
    assert float(value) == pytest.approx(ref.log_z + log_prior, abs=1e-8, rel=1e-10)
    assert float(g_ls) == pytest.approx(want_ls - h, abs=1e-8, rel=1e-8)
    np.testing.assert_allclose(np.asarray(g_Xu), want_Xu - (xu - XU["per-class"]), atol=1e-8, rtol=1e-8)


XNEW = np.random.default_rng(11).normal(size=(5, D))


def _cross(log_amp, log_ls, Xu):
    """K_u* (c, m, n*), k_** (c, n*) and K_** (c, n*, n*) at XNEW, as ``_kernels`` (numpy)."""
    amp, ls = np.exp(log_amp) * AMP, LS * np.exp(log_ls)
    Dus = ((Xu[:, :, None] - XNEW[None, None]) ** 2).sum(-1)
    Dss = ((XNEW[:, None] - XNEW[None]) ** 2).sum(-1)
    Kss = amp[:, None, None] * np.exp(-0.5 * Dss[None] / ls[:, None, None] ** 2)
    return amp[:, None, None] * np.exp(-0.5 * Dus / ls[:, None, None] ** 2), amp[:, None] * np.ones((1, len(XNEW))), Kss


@pytest.mark.parametrize("case, full_cov", [("laplace", False), ("ep", True)], ids=["laplace-per-point", "ep-full"])
def test_latent_predictive_equals_the_numba_posterior(case, full_cov):
    """The predictive Op's JAX function (mean (c, n*) and the per-point c x c or the joint
    class-major covariance) against the numba posterior's ``predict`` at the same fixed
    point, to 1e-8, with per-class inducing inputs (each solver with one of the two forms:
    the forms share everything up to the last product)."""
    approximation, _, _, options = CASES[case]
    Xu = XU["per-class"]
    Kus, k_diag, Kss = _cross(0.5, 0.1, Xu)
    predict = jax.jit(multiclass_fitc.predictive_fn(approximation, full_cov=full_cov, **options),
                      compiler_options=_FAST)
    mean, cov = predict(*_kernels(jnp, 0.5, 0.1, Xu), Y, Kus, Kss if full_cov else k_diag)
    ref = _numba(case, 0.5, 0.1, Xu)
    ref_mean, ref_cov = ref.posterior.predict(ref.a, Kus, Kss if full_cov else k_diag, full_cov=full_cov)
    assert ref.converged and np.all(np.isfinite(np.asarray(cov)))
    np.testing.assert_allclose(np.asarray(mean), ref_mean, atol=1e-8, rtol=1e-8)
    np.testing.assert_allclose(np.asarray(cov), ref_cov, atol=1e-8, rtol=1e-8)
