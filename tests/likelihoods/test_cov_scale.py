"""``cov_scale`` of the multi-class likelihoods: ``predict`` averages over N(mean, s cov).

Ground truth: with two classes the softmax depends on f_1 - f_2 alone, whose law under
N(mean, s cov) is one-dimensional, so the average is a quadrature (scipy's ``quad``),
independent of the package's quasi-random draws."""

import numpy as np
import pytest
from scipy import integrate, stats

from pymc_gpc.likelihoods import MultinomialProbit, Softmax


def _latent(m, c, seed=0):
    rng = np.random.default_rng(seed)
    mean = rng.normal(0.0, 2.0, (m, c))
    A = rng.normal(size=(m, c, c))
    cov = A @ np.swapaxes(A, 1, 2) + 0.5 * np.eye(c)
    return mean, cov


@pytest.mark.parametrize("scale", [0.05, 0.3, 1.0])
def test_softmax_two_classes_matches_quadrature(scale):
    mean, cov = _latent(4, 2)
    got = Softmax(predictive="integrate", cov_scale=scale).predict(mean, cov)
    for i in range(4):
        mu = mean[i, 0] - mean[i, 1]
        sd = np.sqrt(scale * (cov[i, 0, 0] + cov[i, 1, 1] - 2.0 * cov[i, 0, 1]))
        p0 = integrate.quad(lambda t: stats.norm.pdf(t, mu, sd) / (1.0 + np.exp(-t)), mu - 12 * sd, mu + 12 * sd,
                            epsabs=1e-12)[0]
        np.testing.assert_allclose(got[i], [p0, 1.0 - p0], atol=2e-3)


@pytest.mark.parametrize("lik", [Softmax, MultinomialProbit])
def test_scale_zero_is_the_plug_in_and_one_the_default(lik):
    mean, cov = _latent(5, 3, seed=1)
    plug_in = lik(predictive="mean").predict(mean, cov)
    np.testing.assert_allclose(lik(predictive="integrate", cov_scale=0.0).predict(mean, cov), plug_in,
                               rtol=1e-9, atol=1e-12)
    np.testing.assert_array_equal(lik(predictive="integrate", cov_scale=1.0).predict(mean, cov),
                                  lik(predictive="integrate").predict(mean, cov))
    # an intermediate scale is the unscaled likelihood at s * cov
    np.testing.assert_array_equal(lik(predictive="integrate", cov_scale=0.3).predict(mean, cov),
                                  lik(predictive="integrate").predict(mean, 0.3 * cov))


def test_softmax_probit_predictive_is_scaled_too():
    mean, cov = _latent(5, 3, seed=2)
    np.testing.assert_array_equal(Softmax(predictive="probit", cov_scale=0.2).predict(mean, cov),
                                  Softmax(predictive="probit").predict(mean, 0.2 * cov))
    assert not np.allclose(Softmax(predictive="probit", cov_scale=0.2).predict(mean, cov),
                           Softmax(predictive="probit").predict(mean, cov), atol=1e-3)


@pytest.mark.parametrize("lik", [Softmax, MultinomialProbit])
def test_loo_expected_probability_keeps_the_cavity_covariance(lik):
    """``expected_prob`` (the LOO predictive over a cavity) is not a prediction at new inputs."""
    mean, cov = _latent(5, 3, seed=3)
    y = np.array([0, 1, 2, 1, 0])
    np.testing.assert_array_equal(lik(cov_scale=0.1).expected_prob(y, mean, cov), lik().expected_prob(y, mean, cov))


@pytest.mark.parametrize("bad", [-0.1, np.nan, np.inf, "a", None, [0.1, 0.2]])
def test_a_bad_scale_is_a_value_error(bad):
    with pytest.raises(ValueError, match="cov_scale"):
        Softmax(cov_scale=bad)


def test_repr_names_the_scale():
    assert repr(Softmax(cov_scale=0.2)) == "Softmax(cov_scale=0.2)"
    assert repr(Softmax(predictive="integrate", cov_scale=0.5)) == "Softmax(predictive='integrate', cov_scale=0.5)"
    assert repr(Softmax()) == "Softmax()"
