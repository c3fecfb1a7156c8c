"""Ordered logit at large latent variance (issue 58): the tilted moments and the predictive
against independent quadrature at every mean and variance up to 1e6, rows summing to one,
the derivatives against finite differences, and the JAX kernel equal to numba's.

The reference integrates p(y | f) N(f; mu, s2) with scipy's adaptive ``quad`` over the
Gaussian's +-12 sd, split at the cutpoints, the mean and +-60 around each cutpoint (where
the integrand changes scale); p(y = k | f) is formed in logs (log sigma differences)."""

import numpy as np
import pytest
from scipy import integrate
from scipy.special import log_expit

import pymc_gpc
from pymc_gpc.likelihoods import ordinal

CUT = np.array([-1.0, 1.0])


def _log_p(k, f):
    """log p(y = k | f) for the ordered logit with cutpoints CUT (logs throughout)."""
    if k == 0:
        return log_expit(CUT[0] - f)
    if k == len(CUT):
        return log_expit(f - CUT[-1])
    lo, hi = CUT[k - 1], CUT[k]
    # sigma(hi - f) - sigma(lo - f) = sigma(hi - f) sigma(f - lo) (1 - e^(lo - hi))
    return log_expit(hi - f) + log_expit(f - lo) + np.log1p(-np.exp(lo - hi))


def _reference(k, mu, s2):
    s = np.sqrt(s2)
    lo, hi = mu - 12 * s, mu + 12 * s
    cuts = [mu] + [c + d for c in CUT for d in (-60.0, -10.0, 0.0, 10.0, 60.0)]
    br = sorted({lo, hi, *[x for x in cuts if lo < x < hi]})

    def g(f):
        return np.exp(_log_p(k, f) - 0.5 * (f - mu) ** 2 / s2) / np.sqrt(2 * np.pi * s2)

    return sum(integrate.quad(g, a, b, epsabs=1e-15, epsrel=1e-12, limit=400)[0] for a, b in zip(br[:-1], br[1:]))


def test_issue_reproduction_middle_class():
    """The issue's point: [0.277, 0, 0.653] before (sum 0.93); quadrature gives 0.0695 for the middle class."""
    p = pymc_gpc.OrderedLogit(CUT).predict(np.array([5.0]), np.array([100.0]))[0]
    ref = np.array([_reference(k, 5.0, 100.0) for k in range(3)])
    np.testing.assert_allclose(p, ref, rtol=1e-9, atol=1e-12)
    assert abs(p[1] - 0.0695) < 1e-4


@pytest.mark.parametrize("s2", [1e-4, 1.0, 1e2, 1e4, 1e6])
def test_predictive_against_quadrature(s2):
    lik = pymc_gpc.OrderedLogit(CUT)
    mus = np.array([-40.0, -5.0, 0.0, 0.5, 5.0, 40.0])
    p = lik.predict(mus, np.full(mus.size, s2))
    assert np.all(np.isfinite(p))
    np.testing.assert_allclose(p.sum(axis=1), 1.0, rtol=0, atol=1e-12)
    ref = np.array([[_reference(k, mu, s2) for k in range(3)] for mu in mus])
    np.testing.assert_allclose(p, ref, rtol=1e-8, atol=1e-13)


def test_rows_sum_to_one_everywhere():
    rng = np.random.default_rng(58)
    th = np.array([-2.0, -0.5, 0.3, 4.0])
    mu = rng.normal(0, 30, 400)
    s2 = 10 ** rng.uniform(-6, 6, 400)
    p = pymc_gpc.OrderedLogit(th).predict(mu, s2)
    assert np.all(p >= 0)
    np.testing.assert_allclose(p.sum(axis=1), 1.0, rtol=0, atol=1e-12)


@pytest.mark.parametrize("mu, s2", [(5.0, 100.0), (-30.0, 1e4), (300.0, 1e6), (0.2, 1e-3)])
@pytest.mark.parametrize("k", [0, 1, 2])
def test_tilted_derivatives_against_finite_differences(k, mu, s2):
    """d log Z / d mu, d^2 log Z / d mu^2 and d log Z / d b_j at large and small variance."""
    def lz(m, th=CUT):
        return ordinal.ordinal_tilted_local(True, float(k), m, s2, th)[0]

    r = ordinal.ordinal_tilted_local(True, float(k), mu, s2, CUT)
    h = 1e-4 * max(1.0, np.sqrt(s2)) ** 0.5
    d1 = (lz(mu + h) - lz(mu - h)) / (2 * h)
    d2 = (lz(mu + h) - 2 * lz(mu) + lz(mu - h)) / h ** 2
    assert abs(r[1] - d1) < 1e-6 * (1 + abs(d1))
    assert abs(r[2] - d2) < 1e-4 * (1 + abs(d2))
    for j, slot in ((k, 3), (k - 1, 4)):
        if 0 <= j < CUT.size:
            e = np.zeros_like(CUT)
            e[j] = 1e-5
            fd = (lz(mu, CUT + e) - lz(mu, CUT - e)) / 2e-5
            assert abs(r[slot] - fd) < 1e-6 * (1 + abs(fd))


def test_jax_equals_numba_at_every_variance():
    jax = pytest.importorskip("jax")
    from pymc_gpc.backends.jax import likelihoods as jl

    jax.config.update("jax_enable_x64", True)
    th = np.array([-1.0, 0.5, 1.0])
    rng = np.random.default_rng(7)
    n = 200
    y = rng.integers(0, 4, n).astype(float)
    mu = rng.normal(0, 10, n)
    s2 = 10 ** rng.uniform(-4, 6, n)
    ref = np.array([ordinal.ordinal_tilted_local(True, y[i], mu[i], s2[i], th) for i in range(n)]).T
    out = np.asarray(jax.jit(jl.ordinal_tilted, static_argnums=0)(True, y, mu, s2, th))
    np.testing.assert_allclose(out[[0, 1, 3, 4]], ref[[0, 1, 3, 4]], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(out[2], ref[2], rtol=1e-7, atol=1e-10)  # (var - s2) / s2^2: cancellation at small s2
