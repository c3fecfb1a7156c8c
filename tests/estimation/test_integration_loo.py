"""Leave-one-out over a CCD or grid design (``integration.loo``, ``loo_design``) against
two references on a one-hyperparameter model: the same integral by quadrature on a fine
grid (EP's own LOO terms at each grid point: isolates the design), and brute force (EP
refitted without each observation at every grid point, p(y_i | y_-i) by quadrature over
p(theta | y_-i): the design and EP-LOO's cavity approximation together); and ``az.loo``
on the same ``InferenceData`` (its draws are resampled duplicates)."""

import arviz as az
import numpy as np
import pytest
from scipy.stats import norm

import pymc_gpc
from pymc_gpc import likelihoods as L
from pymc_gpc.estimation import integration

from .test_integration import X1, Y1, _one_hyper_model

AMPLITUDE, PRIOR_SD, JITTER = 4.0, 0.7, 1e-6  # _one_hyper_model's: 4 ExpQuad(ls), ls ~ LogNormal(0, 0.7)


def _kernel(X, Z, u):
    d2 = ((X[:, None, :] - Z[None, :, :]) ** 2).sum(-1)
    return AMPLITUDE * np.exp(-0.5 * d2 / np.exp(2 * u))


def quadrature_loo(u):
    """-log int p(theta | y) / q(y_i | y_-i, theta) dtheta with EP-LOO's q (``loo_design``'s
    integral), by the trapezoidal rule over u = log ls."""
    y = np.where(Y1 > 0, 1, -1)
    log_post, terms = [], []
    for v in u:
        res = pymc_gpc.ep(_kernel(X1, X1, v) + JITTER * np.eye(len(y)), y, L.Probit(), tol=1e-10, with_grad=False)
        log_post.append(res.log_z + norm.logpdf(v, 0.0, PRIOR_SD))
        terms.append(res.loo_log_p)
    w = np.exp(np.array(log_post) - max(log_post))
    w /= np.trapezoid(w, u)
    return -np.log(np.trapezoid(w[:, None] * np.exp(-np.array(terms)), u, axis=0))


def brute_force_loo(u):
    """log p(y_i | y_-i) for every i: EP on the other rows at every grid value u of
    log ls (evidence and predictive at x_i), integrated with the prior N(0, 0.7^2) on u
    by the trapezoidal rule."""
    y = np.where(Y1 > 0, 1, -1)
    n = len(y)
    out = np.empty(n)
    lik = L.Probit()
    for i in range(n):
        keep = np.arange(n) != i
        log_joint, p_i = np.empty(u.size), np.empty(u.size)
        for j, v in enumerate(u):
            K = _kernel(X1[keep], X1[keep], v) + JITTER * np.eye(n - 1)
            res = pymc_gpc.ep(K, y[keep], lik, tol=1e-10, with_loo=False, with_grad=False)
            mean, var = res.posterior.predict(res.a, _kernel(X1[keep], X1[i:i + 1], v), np.array([AMPLITUDE]))
            p1 = lik.predict(mean, var)[0]
            p_i[j] = p1 if y[i] > 0 else 1.0 - p1
            log_joint[j] = res.log_z + norm.logpdf(v, 0.0, PRIOR_SD)
        w = np.exp(log_joint - log_joint.max())
        out[i] = np.log(np.trapezoid(w * p_i, u) / np.trapezoid(w, u))
    return out


@pytest.fixture(scope="module")
def designs():
    model, _ = _one_hyper_model()
    return {m: pymc_gpc.sample(model=model, method=m, random_seed=1, progressbar=False) for m in ("grid", "ccd")}


@pytest.fixture(scope="module")
def reference(designs):
    group = designs["grid"]["integration"]
    u = np.log(np.asarray(group["ls"]))
    u = np.linspace(u.min() - 1.0, u.max() + 1.0, 161)
    return quadrature_loo(u), brute_force_loo(u[::2])


def test_design_loo_matches_quadrature(designs, reference):
    quadrature, _ = reference
    for method, atol in (("grid", 1e-4), ("ccd", 2e-2)):  # the CCD: 3 points in one dimension
        log_p, _ = integration.loo_design(designs[method])
        np.testing.assert_allclose(log_p, quadrature, rtol=0, atol=atol, err_msg=method)


def test_design_loo_matches_brute_force(designs, reference):
    # the difference is EP-LOO's (cavity instead of refit): 0.03 at most here, 0.2 % of the sum
    _, refit = reference
    log_p, _ = integration.loo_design(designs["grid"])
    np.testing.assert_allclose(log_p, refit, rtol=0, atol=0.05)
    assert abs(log_p.sum() - refit.sum()) < 0.01 * abs(refit.sum())


def test_az_loo_gets_the_design_values_and_finite_k(designs):
    idata = designs["grid"]
    log_p, k = integration.loo_design(idata)
    result = integration.loo(idata, pointwise=True)
    np.testing.assert_allclose(np.asarray(result.elpd_i), log_p, rtol=0, atol=1e-12)
    assert abs(result.elpd - log_p.sum()) < 1e-10
    assert np.all(np.isfinite(np.asarray(result.pareto_k)))
    np.testing.assert_array_equal(np.asarray(result.pareto_k), k)
    assert 0 < result.p < 2  # one hyperparameter: lppd - elpd is small and positive
    assert az.compare({"a": result, "b": result}).shape[0] == 2


def test_pareto_k_of_a_heavy_tail_is_large():
    # ratios r with P(r > t) ~ t^(-1/k): a Pareto tail of shape k = 0.8 under equal weights
    rng = np.random.default_rng(0)
    r = (1 - rng.random(4000)) ** -0.8
    k = integration._weighted_pareto_k(np.log(r), np.full(r.size, 1.0 / r.size))
    assert 0.65 < k < 0.95
    # and a bounded (uniform) one is far below 0.5
    k0 = integration._weighted_pareto_k(np.log(1 + rng.random(4000)), np.full(4000, 1 / 4000))
    assert k0 < 0


def test_plain_az_loo_sees_duplicates(designs):
    # what the docstring says: PSIS on resampled copies of the design points is degenerate
    idata = designs["grid"]
    assert np.unique(np.asarray(idata["sample_stats"][integration.DESIGN_POINT])).size <= \
        idata["integration"].attrs["n_points"]
    try:
        result = az.loo(idata, pointwise=True)
    except ValueError as err:
        assert "tail values" in str(err)
    else:
        assert not np.all(np.isfinite(np.asarray(result.pareto_k)))


def test_loo_needs_a_design():
    with pytest.raises(ValueError, match="integration"):
        integration.loo(az.from_dict({"posterior": {"a": np.zeros((1, 5))}}))
