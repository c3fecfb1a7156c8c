"""The softmax's "probit" predictive (``pairwise_probit_softmax``) against ground truth:
Monte Carlo of E[softmax(f)], f ~ N(mu, Sigma) (independent draws, not the package's), 1-d
Gauss-Hermite quadrature for two classes, the softmax itself without variance, and the
softmax's invariance to a shift common to all classes (which the earlier per-class scaling
mu_k / sqrt(1 + pi Sigma_kk / 8) broke: ``test_common_shift`` fails on it)."""

import numpy as np
import pytest
from scipy.special import expit, softmax

from pymc_gpc.likelihoods import Softmax
from pymc_gpc.likelihoods.multiclass import pairwise_probit_softmax


def _case(c, scale, offset, seed):
    """A mean (c,) with a common offset and a covariance with variances of about ``scale``."""
    rng = np.random.default_rng(seed)
    A = rng.normal(size=(c, c))
    return rng.normal(size=c) * 1.5 + offset, scale * (A @ A.T) / c + 0.05 * np.eye(c)


def _monte_carlo(mean, cov, n=400_000, seed=7):
    rng = np.random.default_rng(seed)
    f = mean + rng.normal(size=(n, len(mean))) @ np.linalg.cholesky(cov).T
    return softmax(f, axis=1).mean(axis=0)  # standard error below 8e-4 per class


CASES = [(c, scale, offset, seed) for seed, (c, scale) in enumerate([(3, 0.3), (3, 1.0), (5, 0.3), (5, 1.0), (6, 0.5)])
         for offset in (0.0, 5.0)]


@pytest.mark.parametrize("c, scale, offset, seed", CASES)
def test_against_monte_carlo(c, scale, offset, seed):
    """Within 0.035 of E[softmax(f)] per class where the latent variances are at most about 1
    (measured 0.002-0.031), 0.08 in the case with a variance of 3.2 (measured 0.067); and
    closer than the per-class scaling softmax(mu_k / sqrt(1 + pi Sigma_kk / 8)) in every case
    (that one erred by 0.013-0.31, worst once the means share an offset)."""
    mean, cov = _case(c, scale, offset, seed)
    p = Softmax().predict(mean[None], cov[None], predictive="probit")[0]
    exact = _monte_carlo(mean, cov)
    per_class = softmax(mean / np.sqrt(1.0 + np.pi / 8.0 * np.diag(cov)))
    error = np.max(np.abs(p - exact))
    assert np.allclose(p.sum(), 1.0)
    assert error < (0.035 if np.diag(cov).max() < 1.5 else 0.08), (p, exact)
    assert error < np.max(np.abs(per_class - exact))


@pytest.mark.parametrize("c, scale, offset, seed", CASES[::2])
def test_common_shift(c, scale, offset, seed):
    """p(mu + a 1) = p(mu): the softmax depends on differences of its arguments only."""
    mean, cov = _case(c, scale, offset, seed)
    p = Softmax().predict(np.array([mean, mean + 3.0, mean - 40.0]), np.array([cov] * 3), predictive="probit")
    assert np.allclose(p[1], p[0], atol=1e-12) and np.allclose(p[2], p[0], atol=1e-12)


def test_two_classes_against_quadrature():
    """c = 2: E[sigma(d)], d = f_1 - f_2 ~ N(mu_1 - mu_2, v), by 80-point Gauss-Hermite; MacKay's
    approximation is within 0.02 of it for any mean and variance (0.0113 at most over these)."""
    x, w = np.polynomial.hermite_e.hermegauss(80)
    for mu, v in [(0.5, 0.5), (2.0, 1.0), (-1.0, 4.0), (3.0, 9.0), (0.0, 2.0)]:
        mean, cov = np.array([[mu + 1.0, 1.0]]), np.array([[[v / 2 + 0.3, 0.3], [0.3, v / 2 + 0.3]]])
        exact = np.sum(w * expit(mu + np.sqrt(v) * x)) / np.sum(w)
        p = pairwise_probit_softmax(mean, cov)[0]
        assert abs(p[0] - exact) < 0.02 and np.isclose(p.sum(), 1.0)
        assert np.isclose(p[0], expit(mu / np.sqrt(1.0 + np.pi * v / 8.0)))


def test_no_variance_is_the_softmax():
    rng = np.random.default_rng(3)
    mean = rng.normal(size=(4, 5)) * 3
    assert np.allclose(pairwise_probit_softmax(mean, np.zeros((4, 5, 5))), softmax(mean, axis=1), atol=1e-14)


def test_extreme_means_and_bad_shapes():
    """Far-apart means give 0 / 1 without overflow; wrong shapes are refused."""
    p = pairwise_probit_softmax(np.array([[800.0, -800.0, 0.0]]), np.eye(3)[None])
    assert np.all(np.isfinite(p)) and np.isclose(p[0, 0], 1.0)
    with pytest.raises(ValueError, match="mean"):
        pairwise_probit_softmax(np.zeros((2, 3)), np.zeros((2, 3, 2)))
