"""The JAX backend of the multi-class Ops (``backends/jax/multiclass.py``): softmax Laplace
and nested EP (multinomial probit) under ``pytensor.function(mode="JAX")`` against the
numba solvers (evidence, gradient, LOO terms, latent predictive), the gradient through
the ``custom_vjp`` against central differences, the failure convention, and numpyro
against PyMC's NUTS.

Skipped where jax is not installed (``pip install pymc-gpc[jax]``). Every JAX function is
compiled once per module (compiling dominates the time: tiny problems, n = 12, c = 3).
"""


import numpy as np
import pytest

jax = pytest.importorskip("jax", reason="the JAX backend needs jax: pip install pymc-gpc[jax]")

import pymc as pm  # noqa: E402
import pytensor  # noqa: E402
import pytensor.tensor as pt  # noqa: E402

import pymc_gpc  # noqa: E402
from pymc_gpc import likelihoods as L  # noqa: E402
from pymc_gpc import multinomial_probit_ep, softmax_laplace  # noqa: E402
from pymc_gpc.ops import ApproxMarginalOp, LatentPredictiveOp  # noqa: E402
from pymc_gpc.structures.select import DENSE_MULTICLASS  # noqa: E402

from .test_jax_fitc import assert_same_posterior, sample_both  # noqa: E402

N, C, M = 12, 3, 4
# the numba solvers at a tight tolerance: both backends at the same fixed point
CASES = {
    "laplace": ("laplace", L.Softmax, (("tol", 1e-12),), softmax_laplace),
    "ep": ("ep", L.MultinomialProbit, (("tol", 1e-11),), multinomial_probit_ep),
}
LS = np.array([1.0, 0.7, 1.5])  # per-class lengthscales


def _data():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(N, 2))
    y = np.digitize(X[:, 0] + 0.3 * rng.normal(size=N), [-0.5, 0.5]).astype(float)
    return X, y, rng.normal(size=(M, 2))


def _sq_dist(A, B):
    return ((A[:, None] - B[None]) ** 2).sum(-1)


def _stacks(X, Xnew, log_amp, log_ls, jitter):
    """K (c, n, n), K_cross (c, n, m), k_star (c, m) as numpy: amp_k exp(-d / (2 (l_k e^log_ls)^2))."""
    amp = np.exp(log_amp) * np.array([1.0, 2.0, 0.5])
    ls = LS * np.exp(log_ls)
    K = np.stack([a * np.exp(-0.5 * _sq_dist(X, X) / l**2) + jitter * np.eye(len(X)) for a, l in zip(amp, ls)])
    Kc = np.stack([a * np.exp(-0.5 * _sq_dist(X, Xnew) / l**2) for a, l in zip(amp, ls)])
    return K, Kc, np.outer(amp, np.ones(len(Xnew)))


def _graph(approximation, lik_type, options, X, y, Xnew):
    """The marginal Op and the predictive Op on the same (c, n, n) stack, built by PyTensor
    from (log amplitude, log lengthscale, jitter); the gradient through the Op's pullback
    (numba) or its custom_vjp (JAX)."""
    log_amp, log_ls, jitter = pt.dscalar("log_amp"), pt.dscalar("log_ls"), pt.dscalar("jitter")
    amp = pt.exp(log_amp) * np.array([1.0, 2.0, 0.5])
    ls = LS * pt.exp(log_ls)
    d, dc = _sq_dist(X, X), _sq_dist(X, Xnew)
    K = pt.stack([amp[k] * pt.exp(-0.5 * d / ls[k] ** 2) + jitter * pt.eye(N) for k in range(C)])
    Kc = pt.stack([amp[k] * pt.exp(-0.5 * dc / ls[k] ** 2) for k in range(C)])
    Ks = pt.outer(amp, pt.ones(M))
    out = ApproxMarginalOp(approximation, lik_type, options, structure=DENSE_MULTICLASS)(K, pt.zeros(0), y)
    mean, cov = LatentPredictiveOp(approximation, lik_type, options, structure=DENSE_MULTICLASS)(K, y, Kc, Ks)
    grads = pytensor.grad(out[0], [log_amp, log_ls])
    return [log_amp, log_ls, jitter], [out[0], *grads, out[1], out[3], out[5], mean, cov]


@pytest.fixture(scope="module")
def data():
    return _data()


@pytest.fixture(scope="module", params=list(CASES))
def compiled(request, data):
    """(case, the graph compiled with mode="JAX")."""
    X, y, Xnew = data
    approximation, lik_type, options, _ = CASES[request.param]
    inputs, outputs = _graph(approximation, lik_type, options, X, y, Xnew)
    return request.param, pytensor.function(inputs, outputs, mode="JAX")


def _numba_reference(case, data, log_amp, log_ls, jitter=1e-6):
    X, y, Xnew = data
    approximation, lik_type, options, solver = CASES[case]
    K, Kc, ks = _stacks(X, Xnew, log_amp, log_ls, jitter)
    res = solver(K, y.astype(int), lik_type(), **dict(options))
    return res, res.posterior.predict(res.a, Kc, ks)


@pytest.mark.parametrize("log_amp", [0.0, 2.5])
def test_evidence_gradient_loo_and_predictive_equal_the_numba_solvers(compiled, data, log_amp):
    """At a small and a large kernel amplitude: log q, dlog q / dK_k, the LOO terms and the
    latent predictive (mean, per-point c x c covariance) to 1e-8."""
    case, fn = compiled
    log_z, _, _, dK, loo, status, mean, cov = fn(log_amp, 0.1, 1e-6)
    ref, (ref_mean, ref_cov) = _numba_reference(case, data, log_amp, 0.1)
    assert int(status) == 0 and ref.converged
    assert float(log_z) == pytest.approx(ref.log_z, abs=1e-8)
    np.testing.assert_allclose(np.asarray(dK), ref.dlog_z_dK, atol=1e-8, rtol=1e-8)
    np.testing.assert_allclose(np.asarray(loo), ref.loo_log_p, atol=1e-8, rtol=1e-8)
    np.testing.assert_allclose(np.asarray(mean), ref_mean, atol=1e-8, rtol=1e-8)
    np.testing.assert_allclose(np.asarray(cov), ref_cov, atol=1e-8, rtol=1e-8)


def test_gradient_through_the_custom_vjp_equals_central_differences(compiled):
    """d log q / d(log amplitude, log lengthscale) by the custom_vjp against central
    differences of the JAX value itself."""
    _, fn = compiled
    h, e = np.array([0.8, -0.2]), 1e-5
    g = np.array([float(v) for v in fn(*h, 1e-6)[1:3]])
    for k in range(2):
        step = np.eye(2)[k] * e
        fd = (float(fn(*(h + step), 1e-6)[0]) - float(fn(*(h - step), 1e-6)[0])) / (2 * e)
        assert g[k] == pytest.approx(fd, rel=1e-6, abs=1e-8)


@pytest.mark.parametrize("point", [(0.0, 0.0, -5.0), (0.0, 0.0, np.nan), (60.0, 0.0, 1e-6), (3.0, -40.0, 1e-6),
                                   (-60.0, 5.0, 1e-6)], ids=["not-psd", "nan", "huge-amp", "tiny-ls", "tiny-amp"])
def test_extreme_points_give_a_finite_value_or_minus_inf_never_nan(compiled, point):
    """A kernel that is not positive definite or holds NaN is a failure: -inf, status 2, a
    zero gradient. Extreme hyperparameters give a finite value or that failure, and a
    finite gradient either way."""
    _, fn = compiled
    log_z, g_amp, g_ls, dK, loo, status = fn(*point)[:6]
    log_z = float(log_z)
    assert np.isfinite(float(g_amp)) and np.isfinite(float(g_ls)) and np.all(np.isfinite(dK))
    assert not np.isnan(log_z) and not np.any(np.isnan(loo))
    assert (int(status) == 2) == (log_z == -np.inf)
    if point[2] != 1e-6:
        assert log_z == -np.inf and int(status) == 2 and float(g_amp) == 0.0 and not np.any(dK)


def test_numpyro_and_pymc_nuts_agree_on_a_multiclass_model_and_predict_uses_the_draws(data):
    """numpyro (the JAX Op) and PyMC's NUTS (the Op's CPU path) on a softmax Laplace model with
    per-class kernels: every evaluation converged, the posterior means and sds of log_ls and
    log_amp agree within 4 combined Monte Carlo standard errors, and ``predict`` averages
    over numpyro's draws."""
    X, y, Xnew = data
    with pm.Model() as model:
        log_ls = pm.Normal("log_ls", 0.0, 1.0)
        log_amp = pm.Normal("log_amp", 0.0, 1.0)
        covs = [pt.exp(log_amp) * pm.gp.cov.ExpQuad(2, ls=pt.exp(log_ls) * s) for s in LS]
        gp = pymc_gpc.MarginalLaplace(cov_func=covs, likelihood=L.Softmax())
        gp.marginal_likelihood("y", X=X, y=y.astype(int))
    idata = sample_both(model, seed=2)
    assert np.all(np.asarray(idata["numpyro"]["sample_stats"]["y_status"]) == 0)
    assert_same_posterior(idata["pymc"], idata["numpyro"], ["log_ls", "log_amp"])
    p = np.asarray(gp.predict(Xnew, idata=idata["numpyro"], max_draws=4, progressbar=False))
    assert p.shape == (M, C) and np.allclose(p.sum(axis=1), 1.0) and np.all(p > 0)
