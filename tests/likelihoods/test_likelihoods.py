"""Each likelihood's numeric contract against quadrature and finite differences."""

import numpy as np
import pytest
from scipy import integrate, stats

import pymc_gpc
from pymc_gpc import likelihoods as L
from pymc_gpc.validation import as_signed_labels

from ..conftest import LIKELIHOOD_CASES, lik_id, reference_lik, reference_log_lik

CAVITIES = [(mu, s2) for mu in (-6.0, -1.3, 0.0, 0.7, 4.0) for s2 in (1e-3, 0.4, 3.0, 60.0)]


def test_every_likelihood_class_is_tested():
    assert {type(l) for l in LIKELIHOOD_CASES} == set(L.LIKELIHOODS)


def quad_moments(p, y, mu, s2):
    """Z, E f, Var f of p(y|f) N(f; mu, s2) by adaptive quadrature, f = mu + s t."""
    s = np.sqrt(s2)
    g = lambda t, k: p(y, mu + s * t) * stats.norm.pdf(t) * t**k
    brk = sorted({0.0, float(np.clip(-mu / s, -30, 30))})
    m = [
        integrate.quad(g, -30, 30, args=(k,), points=brk, epsabs=0, epsrel=1e-13, limit=500)[0]
        for k in range(3)
    ]
    Z = m[0]
    Et = m[1] / Z
    Vt = m[2] / Z - Et**2
    return Z, mu + s * Et, s2 * Vt


@pytest.mark.filterwarnings("ignore::scipy.integrate.IntegrationWarning")  # asks 1e-13, asserts 1e-9
@pytest.mark.parametrize("lik", LIKELIHOOD_CASES, ids=lik_id)
@pytest.mark.parametrize("y", [1.0, -1.0])
def test_tilted_moments_match_quadrature(lik, y):
    p = reference_lik(lik)
    mus = np.array([c[0] for c in CAVITIES])
    s2s = np.array([c[1] for c in CAVITIES])
    t = lik.tilted(np.full(len(mus), y), mus, s2s)
    for i, (mu, s2) in enumerate(CAVITIES):
        Z, mean, var = quad_moments(p, y, mu, s2)
        assert t.log_z[i] == pytest.approx(np.log(Z), rel=1e-9, abs=1e-9), (mu, s2)
        # d log Z / d mu = (E f - mu) / s2 ; d2 = (Var f - s2) / s2^2
        assert t.dlog_z[i] * s2 == pytest.approx(mean - mu, rel=1e-6, abs=1e-8 * np.sqrt(s2)), (mu, s2)
        assert t.d2log_z[i] * s2**2 == pytest.approx(var - s2, rel=1e-5, abs=1e-7 * s2), (mu, s2)


@pytest.mark.parametrize("lik", [l for l in LIKELIHOOD_CASES if l.n_params], ids=lik_id)
def test_tilted_parameter_derivative_matches_finite_differences(lik):
    mus = np.array([c[0] for c in CAVITIES])
    s2s = np.array([c[1] for c in CAVITIES])
    y = np.where(np.arange(len(mus)) % 2 == 0, 1.0, -1.0)
    h = 1e-6
    p0 = lik.params
    got = lik.tilted(y, mus, s2s).dlog_z_dparams[:, 0]
    fd = (lik.tilted(y, mus, s2s, p0 + h).log_z - lik.tilted(y, mus, s2s, p0 - h).log_z) / (2 * h)
    np.testing.assert_allclose(got, fd, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("lik", [l for l in LIKELIHOOD_CASES if l.supports_laplace], ids=lik_id)
def test_log_lik_derivatives_match_finite_differences(lik):
    f = np.linspace(-9, 9, 37)
    y = np.where(np.arange(f.size) % 3 == 0, -1.0, 1.0)
    d = lik.log_lik(y, f)
    np.testing.assert_allclose(d.lp, reference_log_lik(lik)(y, f), rtol=1e-12, atol=1e-300)
    h = 1e-5
    up, dn = lik.log_lik(y, f + h), lik.log_lik(y, f - h)
    np.testing.assert_allclose(d.d1, (up.lp - dn.lp) / (2 * h), rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(d.d2, (up.d1 - dn.d1) / (2 * h), rtol=1e-6, atol=1e-9)
    # third-order checks: FD of a quantity known to ~1e-13 absolute, hence atol 1e-7
    np.testing.assert_allclose(d.d3, (up.d2 - dn.d2) / (2 * h), rtol=1e-5, atol=1e-7)
    if lik.n_params:
        p0 = lik.params
        up, dn = lik.log_lik(y, f, p0 + h), lik.log_lik(y, f, p0 - h)
        np.testing.assert_allclose(d.lp_dparams[:, 0], (up.lp - dn.lp) / (2 * h), rtol=1e-6, atol=1e-9)
        np.testing.assert_allclose(d.d1_dparams[:, 0], (up.d1 - dn.d1) / (2 * h), rtol=1e-6, atol=1e-9)
        np.testing.assert_allclose(d.d2_dparams[:, 0], (up.d2 - dn.d2) / (2 * h), rtol=1e-5, atol=1e-7)


def test_closed_form_predictions_tan_eq13():
    mu, s2 = np.array([-1.0, 0.3, 2.0]), np.array([0.5, 2.0, 0.1])
    Phi = stats.norm.cdf
    np.testing.assert_allclose(L.Probit().predict(mu, s2), Phi(mu / np.sqrt(1 + s2)), rtol=1e-12)
    np.testing.assert_allclose(L.ProbitBias(0.5).predict(mu, s2), Phi((mu + 0.5) / np.sqrt(1 + s2)), rtol=1e-12)
    np.testing.assert_allclose(L.ProbitNoise(0.3).predict(mu, s2), Phi(mu / np.sqrt(0.09 + s2)), rtol=1e-12)
    np.testing.assert_allclose(
        L.StepLabelNoise(0.1).predict(mu, s2), 0.1 + 0.8 * Phi(mu / np.sqrt(s2)), rtol=1e-12
    )


def test_logistic_quadrature_survives_extreme_cavities():
    mu = np.array([-300.0, 300.0, 0.0, 5.0, -40.0])
    s2 = np.array([1e-8, 1e4, 1e6, 1e-6, 900.0])
    t = L.Logistic().tilted(np.ones(5), mu, s2)
    assert np.all(np.isfinite(t.log_z)) and np.all(np.isfinite(t.dlog_z)) and np.all(np.isfinite(t.d2log_z))
    assert t.log_z[0] == pytest.approx(-300.0, rel=1e-10)  # log sigmoid(-300)


def test_step_has_no_laplace_and_says_so():
    with pytest.raises(ValueError, match="no Laplace approximation"):
        L.StepLabelNoise(0.1).log_lik(np.ones(2), np.zeros(2))


def test_read_only_inputs_add_no_compiled_specialisation():
    """PyTensor hands ``perform`` its constants read-only. The likelihoods' site maps, ADF and
    the mean field pass their array arguments on as C-contiguous, writable arrays
    (``numerics.plain``), so read-only inputs run the functions numba already compiled for
    writable ones instead of compiling them again (2 to 5 CPU-s each)."""
    from pymc_gpc.approximations import adf as adf_module
    from pymc_gpc.likelihoods import base

    def read_only(a):
        a = np.array(a, dtype=float)
        a.setflags(write=False)
        return a

    rng = np.random.default_rng(41)
    X = rng.normal(size=(12, 2))
    K = np.exp(-0.5 * ((X[:, None] - X[None]) ** 2).sum(-1)) + 1e-6 * np.eye(12)
    y = np.where(X[:, 0] > 0, 1.0, -1.0)
    mu, s2, f = rng.normal(size=12), rng.uniform(0.5, 2.0, 12), rng.normal(size=12)
    ordinal, labels = L.OrderedProbit([-0.5, 0.5]), rng.integers(0, 3, 12).astype(float)
    compiled = (base.tilted_map, base.log_lik_map, adf_module._steps)

    def run(wrap):
        lik = L.ProbitNoise(wrap([0.7]))
        lik.tilted(wrap(y), wrap(mu), wrap(s2))
        lik.log_lik(wrap(y), wrap(f))
        ordinal.tilted(wrap(labels), wrap(mu), wrap(s2))
        ordinal.log_lik(wrap(labels), wrap(f))
        return pymc_gpc.adf(wrap(K), wrap(y), lik).log_z

    writable = run(np.asarray)
    before = [set(fn.signatures) for fn in compiled]
    assert run(read_only) == writable
    assert [set(fn.signatures) for fn in compiled] == before
