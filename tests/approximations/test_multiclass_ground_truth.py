"""Multi-class predictions and leave-one-out terms against independent references
(``multiclass_reference``: dense cn x cn matrices through K^-1, tensor Gauss-Hermite
expectations, the multinomial probit by its own u-quadrature), and the limits that pin
the formulas.

Tolerances. The package averages the softmax and the multinomial probit over fixed
quasi-random draws (``predict``: 4096 for the softmax, 1024 for the probit; LA-LOO: 512),
so its expectations carry an integration error. Observed on the Gaussians below: softmax
``predict`` 9e-5 and ``expected_prob`` 6e-5 (4096 draws; tolerance 3e-4), 1.2e-3 with 512
draws (tolerance 3e-3), the multinomial probit's ``predict`` 4.7e-4 and 6.9e-4 at c = 2
(1024 draws; tolerance 1.5e-3 and 2e-3); in log p, LA-LOO's 512 draws up to 1e-2 on the
LOO cavities (tolerance 0.03). Draws at half the standard deviation or a covariance off by
10 % move these probabilities by 1e-2 or more. Where the package's own expectation is not the question
(the cavities of the LOO terms) the reference Gaussian is passed to the package's
expectation with the same draws, and the comparison is to rounding.
"""

import numpy as np
import pytest
from scipy.special import log_softmax
from scipy.stats import norm

from pymc_gpc import laplace, multinomial_probit_ep, softmax_laplace
from pymc_gpc.approximations.softmax_laplace import LOO_DRAWS
from pymc_gpc.likelihoods import Logistic, MultinomialProbit, Softmax

from ..reference.multiclass_reference import (
    dense_latent_predictive,
    dense_softmax_mode,
    gaussian_expectation,
    gaussian_sites_posterior,
    nested_ep_tilted_log_z,
    multinomial_probit_outer_site,
    multinomial_probit_probabilities,
    observation_block,
    rbf,
    softmax_probabilities,
)

HYP = [(1.0, 3.0), (0.6, 1.5), (1.5, 6.0)]


def _kernels(X, Xs, hyp, jitter=1e-3):
    K = np.array([rbf(X, ls, v, jitter=jitter) for ls, v in hyp])
    Kx = np.array([v * np.exp(-0.5 * (X[:, None] - Xs[None]) ** 2 / ls**2) for ls, v in hyp])
    Kss = np.array([rbf(Xs, ls, v, jitter=0.0) for ls, v in hyp])
    return K, Kx, Kss


def _data(n=8, c=3, seed=4):
    rng = np.random.default_rng(seed)
    X = np.sort(rng.uniform(-2.5, 2.5, n))
    y = rng.integers(0, c, n)
    y[:c] = np.arange(c)
    return X, y, np.array([-3.0, -0.4, 0.9, 2.0])


def _gaussians(rng, m, c, scale):
    mean = rng.normal(size=(m, c))
    A = scale * rng.normal(size=(m, c, c)) / np.sqrt(c)
    return mean, A @ A.transpose(0, 2, 1) + 0.05 * np.eye(c)


# -- the latent predictive -------------------------------------------------------------


def test_softmax_laplace_predictive_against_the_dense_posterior():
    X, y, Xs = _data()
    K, Kx, Kss = _kernels(X, Xs, HYP)
    c, m = 3, len(Xs)
    res = softmax_laplace(K, y, tol=1e-13)
    F, W, g = dense_softmax_mode(K, y)
    np.testing.assert_allclose(res.mean, F, atol=1e-8)
    _, Sigma = gaussian_sites_posterior(K, W, np.zeros(c * len(y)))
    mean_ref, cov_ref = dense_latent_predictive(K, F.ravel(), Sigma, Kx, Kss)
    mean, cov = res.posterior.predict(res.a, Kx, np.diagonal(Kss, axis1=1, axis2=2))
    np.testing.assert_allclose(mean.ravel(), mean_ref, atol=1e-7)
    for i in range(m):
        idx = np.arange(c) * m + i
        np.testing.assert_allclose(cov[i], cov_ref[np.ix_(idx, idx)], atol=1e-7)
    mean_full, cov_full = res.posterior.predict(res.a, Kx, Kss, full_cov=True)
    np.testing.assert_allclose(mean_full.ravel(), mean_ref, atol=1e-7)
    np.testing.assert_allclose(cov_full, cov_ref, atol=1e-7)
    # the training marginals (site covariances) too
    for i in range(len(y)):
        _, S_ref = observation_block(F.ravel(), Sigma, c, len(y), i)
        np.testing.assert_allclose(res.var[i], S_ref, atol=1e-8)


def _nested_ep_reference(K, y, state):
    """The posterior that nested EP's inner sites define, formed densely: outer sites by
    ``multinomial_probit_outer_site``, then N(0, K) times them."""
    c, n, _ = K.shape
    T, h = np.zeros((c * n, c * n)), np.zeros(c * n)
    for i in range(n):
        Ti, hi = multinomial_probit_outer_site(y[i], state.tau[i], state.nu[i], c)
        idx = np.arange(c) * n + i
        T[np.ix_(idx, idx)] = Ti
        h[idx] = hi
    return T, h


def test_nested_ep_posterior_predictive_and_loo_with_four_classes():
    """c = 4: q(f) from the returned inner sites (dense), its predictive, and each LOO term
    against its definition, the inner EP's normaliser of the cavity times p(y_i | f)
    (``nested_ep_tilted_log_z``, to rounding), and against the exact normaliser
    log E_cavity[p(y_i | f)] (4-D quadrature), which the inner EP approximates: observed
    differences up to 3.4e-3 nats here, bound 0.01 (before the cross-term fix in
    ``_loo_log_z`` they reached 0.045)."""
    hyp = HYP + [(0.8, 2.0)]
    X, y, Xs = _data(n=7, c=4, seed=2)
    K, Kx, Kss = _kernels(X, Xs, hyp)
    c, n, m = 4, len(y), len(Xs)
    res = multinomial_probit_ep(K, y, tol=1e-12, inner_tol=1e-13, inner_max_sweeps=50)
    assert res.converged
    T, h = _nested_ep_reference(K, y, res.state)
    mean, Sigma = gaussian_sites_posterior(K, T, h)
    np.testing.assert_allclose(res.mean.ravel(), mean, atol=1e-8)
    for i in range(n):
        np.testing.assert_allclose(res.var[i], observation_block(mean, Sigma, c, n, i)[1], atol=1e-8)
    mean_ref, cov_ref = dense_latent_predictive(K, mean, Sigma, Kx, Kss)
    pm, pc = res.posterior.predict(res.a, Kx, np.diagonal(Kss, axis1=1, axis2=2))
    np.testing.assert_allclose(pm.ravel(), mean_ref, atol=1e-7)
    for j in range(m):
        idx = np.arange(c) * m + j
        np.testing.assert_allclose(pc[j], cov_ref[np.ix_(idx, idx)], atol=1e-7)
    for i in range(n):
        mc, Cc = observation_block(*gaussian_sites_posterior(K, T, h, drop=i), c, n, i)
        inner = nested_ep_tilted_log_z(y[i], mc, Cc)
        assert abs(res.loo_log_p[i] - inner) < 1e-7, (i, res.loo_log_p[i], inner)
        exact = np.log(gaussian_expectation(lambda F: multinomial_probit_probabilities(F, 20)[y[i]], mc, Cc, nodes=10))
        assert abs(res.loo_log_p[i] - exact) < 0.01, (i, res.loo_log_p[i], exact)


# -- LOO: softmax Laplace ----------------------------------------------------------------


@pytest.mark.parametrize("amp", [1.0, 8.0])
def test_softmax_la_loo_cavities_and_values(amp):
    """LA-LOO: the Laplace posterior is N(0, K) times sites of precision W_i and location
    W_i f^_i + g_i (the Newton fixed point); the cavity drops site i (dense, through K^-1).
    The package's terms equal its own expectation at that cavity (to rounding) and the
    quadrature value to the error of its 512 draws (observed up to 1e-2 in log p here)."""
    X, y, _ = _data()
    K, _, _ = _kernels(X, X[:1], [(ls, amp * v) for ls, v in HYP])
    c, n = 3, len(y)
    res = softmax_laplace(K, y, tol=1e-13)
    F, W, g = dense_softmax_mode(K, y)
    h = W @ F.ravel() + g.ravel()
    for i in range(n):
        mc, Cc = observation_block(*gaussian_sites_posterior(K, W, h, drop=i), c, n, i)
        same_draws = np.log(Softmax().expected_prob([y[i]], mc[None], Cc[None], size=LOO_DRAWS))[0]
        assert abs(res.loo_log_p[i] - same_draws) < 1e-7, (i, res.loo_log_p[i], same_draws)
        exact = np.log(gaussian_expectation(lambda F: softmax_probabilities(F)[y[i]], mc, Cc))
        assert abs(res.loo_log_p[i] - exact) < 0.03, (i, res.loo_log_p[i], exact)


@pytest.mark.parametrize("approx", ["laplace", "ep"])
def test_single_point_multiclass_loo_is_the_exact_marginal(approx):
    """n = 1: the cavity is the prior N(0, diag K_k(x, x)). Softmax: the LOO term is the
    log of the likelihood's average over the prior, to the error of the 512 draws (observed
    up to 5.6e-3; bound 0.02); nested EP: the inner EP's normaliser at the prior (to
    rounding), within its approximation error of the exact value (observed up to 9e-3)."""
    K = np.array([[[v]] for v in (0.5, 2.0, 5.0)])
    for y in range(3):
        if approx == "laplace":
            res = softmax_laplace(K, [y], tol=1e-13)
            prob = softmax_probabilities
        else:
            res = multinomial_probit_ep(K, [y], tol=1e-12, inner_tol=1e-13, inner_max_sweeps=50)
            prob = multinomial_probit_probabilities
        prior = np.diag(K[:, 0, 0])
        if approx == "ep":
            inner = nested_ep_tilted_log_z(y, np.zeros(3), prior)
            assert abs(res.loo_log_p[0] - inner) < 1e-8, (y, res.loo_log_p[0], inner)
        exact = np.log(gaussian_expectation(lambda F: prob(F)[y], np.zeros(3), prior, nodes=24))
        assert abs(res.loo_log_p[0] - exact) < 0.02, (y, res.loo_log_p[0], exact)


# -- c = 2 softmax Laplace is binary logistic Laplace on K_0 + K_1 ---------------------


def test_two_class_softmax_laplace_is_logistic_laplace_on_the_summed_kernel():
    """With c = 2, pi_0(f) = sigmoid(f_0 - f_1), and g = f_0 - f_1 ~ N(0, K_0 + K_1) a priori:
    the likelihood depends on g only, and given g the rest of f is exactly Gaussian, so the
    joint mode has g at the binary mode, the Laplace integral over the other direction is
    exact, and the evidence, the mean of g (training and new points), its predictive
    variance, the probabilities and the LA-LOO cavities of g are binary logistic Laplace's
    on K_0 + K_1 with y = +1 for class 0."""
    X, y, Xs = _data(n=9, c=2, seed=7)
    hyp = [(1.0, 4.0), (0.5, 2.0)]
    K, Kx, Kss = _kernels(X, Xs, hyp)
    kss = np.diagonal(Kss, axis1=1, axis2=2)
    multi = softmax_laplace(K, y, tol=1e-13)
    yb = np.where(y == 0, 1.0, -1.0)
    binary = laplace(K[0] + K[1], yb, Logistic(), tol=1e-13)
    assert abs(multi.log_z - binary.log_z) < 1e-9
    np.testing.assert_allclose(multi.mean[0] - multi.mean[1], binary.mean, atol=1e-9)
    mean, cov = multi.posterior.predict(multi.a, Kx, kss)
    mb, vb = binary.predict_latent(Kx[0] + Kx[1], kss[0] + kss[1])
    np.testing.assert_allclose(mean[0] - mean[1], mb, atol=1e-9)
    np.testing.assert_allclose(cov[:, 0, 0] + cov[:, 1, 1] - 2 * cov[:, 0, 1], vb, atol=1e-9)
    # the two sides' expectations: 4096 and 512 quasi-random draws against the trapezoidal
    # rule (observed 3.5e-5 and 6.1e-4)
    np.testing.assert_allclose(Softmax(predictive="integrate").predict(mean.T, cov)[:, 0], Logistic().predict(mb, vb), atol=3e-4)
    np.testing.assert_allclose(multi.loo_log_p, binary.loo_log_p, atol=2e-3)


# -- expectations: predict and expected_prob against quadrature ----------------------------


def test_softmax_predict_and_expected_prob_against_quadrature():
    rng = np.random.default_rng(12)
    mean, cov = _gaussians(rng, 6, 3, 2.0)
    ref = np.array([gaussian_expectation(softmax_probabilities, mean[i], cov[i], nodes=28) for i in range(6)])
    np.testing.assert_allclose(Softmax(predictive="integrate").predict(mean, cov), ref, atol=3e-4)
    # the default predictive is the plug-in at the latent mean
    np.testing.assert_allclose(Softmax().predict(mean, cov), softmax_probabilities(mean.T).T, atol=1e-12)
    y = rng.integers(0, 3, 6)
    np.testing.assert_allclose(Softmax().expected_prob(y, mean, cov), ref[np.arange(6), y], atol=3e-4)
    np.testing.assert_allclose(Softmax().expected_prob(y, mean, cov, size=LOO_DRAWS), ref[np.arange(6), y], atol=3e-3)


def test_multinomial_probit_predict_against_quadrature():
    rng = np.random.default_rng(13)
    mean, cov = _gaussians(rng, 5, 3, 1.5)
    ref = np.array([gaussian_expectation(multinomial_probit_probabilities, mean[i], cov[i], nodes=20)
                    for i in range(5)])
    np.testing.assert_allclose(MultinomialProbit().predict(mean, cov), ref, atol=1.5e-3)


def test_zero_covariance_gives_the_likelihood_at_the_mean():
    rng = np.random.default_rng(14)
    mean = 2.0 * rng.normal(size=(5, 4))
    zero = np.zeros((5, 4, 4))
    # the integrated predictive (the default plug-in ignores the covariance: nothing to test)
    np.testing.assert_allclose(Softmax(predictive="integrate").predict(mean, zero), np.exp(log_softmax(mean, axis=1)),
                               atol=1e-12)
    y = rng.integers(0, 4, 5)
    np.testing.assert_allclose(Softmax().expected_prob(y, mean, zero), np.exp(log_softmax(mean, axis=1))[np.arange(5), y],
                               atol=1e-12)
    np.testing.assert_allclose(MultinomialProbit().predict(mean, zero), multinomial_probit_probabilities(mean.T).T,
                               atol=1e-9)


def test_two_class_multinomial_probit_is_a_probit_of_the_difference():
    """c = 2: p(0 | f) = Phi((f_0 - f_1) / sqrt 2), so under f ~ N(m, C) it is
    Phi((m_0 - m_1) / sqrt(2 + v)) with v = C_00 + C_11 - 2 C_01, the variance of f_0 - f_1."""
    rng = np.random.default_rng(15)
    mean, cov = _gaussians(rng, 8, 2, 2.0)
    v = cov[:, 0, 0] + cov[:, 1, 1] - 2 * cov[:, 0, 1]
    want = norm.cdf((mean[:, 0] - mean[:, 1]) / np.sqrt(2 + v))
    np.testing.assert_allclose(MultinomialProbit().predict(mean, cov)[:, 0], want, atol=2e-3)
    np.testing.assert_allclose(MultinomialProbit().expected_prob(np.zeros(8, int), mean, cov), want, atol=2e-3)


def test_multinomial_probit_predict_is_a_gaussian_orthant_probability():
    """Under f ~ N(m, C), p(y = k) = P(t_j > 0 for all j != k) with t_j = f_k - f_j + u - e_j
    (u, e_j ~ N(0, 1): Phi(x) = P(e <= x)), a (c - 1)-variate normal orthant probability with
    mean m_k - m_j and covariance C_kk - C_kj - C_kl + C_jl + 1 + [j = l]; by scipy's
    multivariate normal CDF (Genz), for four classes, up to the 1024 draws' error. A class far
    behind (where products of Phi lose their digits to underflow) keeps its logarithm."""
    from scipy.stats import multivariate_normal

    rng = np.random.default_rng(16)
    mean, cov = _gaussians(rng, 4, 4, 2.0)
    mean *= 2.0
    c = 4
    want = np.empty((4, c))
    for i in range(4):
        for k in range(c):
            o = [j for j in range(c) if j != k]
            mu = mean[i, k] - mean[i, o]
            S = cov[i, k, k] - cov[i, k][o][:, None] - cov[i, k][o][None, :] + cov[i][np.ix_(o, o)] + 1 + np.eye(c - 1)
            want[i, k] = multivariate_normal.cdf(np.zeros(c - 1), -mu, S, abseps=1e-6, releps=1e-6)
    got = MultinomialProbit().predict(mean, cov)
    np.testing.assert_allclose(got.sum(axis=1), 1.0, atol=1e-12)
    np.testing.assert_allclose(got, want / want.sum(axis=1, keepdims=True), atol=2e-3)
    # zero covariance, class 3 behind by 29: p about 1e-262 by the 32-node u-rule, below where
    # products of Phi keep their digits; its logarithm as the reference's (same rule, in logs)
    far = np.array([[0.0, 0.5, -0.3, -29.0]])
    p = MultinomialProbit().predict(far, np.zeros((1, 4, 4)))
    ref = multinomial_probit_probabilities(far.T, u_nodes=32).T
    assert 0.0 < p[0, 3] < 1e-250
    np.testing.assert_allclose(np.log(p[0, 3]), np.log(ref[0, 3]), rtol=1e-9)
    np.testing.assert_allclose(p[0, :3], ref[0, :3] / ref[0].sum(), rtol=1e-9)
