"""The evidence lower bound of the softmax Laplace Gaussian (``approximations.laplace_bound``).

Ground truth: the bound computed from its definition, E_q[log p(y | f)] - KL(q || N(0, K)),
on the joint Gaussian q = N(f^, (K^-1 + W)^-1) formed densely (all c n latent values) with
plain Monte Carlo draws of the joint; the model's evidence by importance sampling; the
FITC prior against its dense Q + Lambda.
"""

import numpy as np
import pytest
from scipy.linalg import block_diag
from scipy.stats import multivariate_normal
from scipy.special import logsumexp

from pymc_gpc.approximations.laplace_bound import softmax_laplace_bound
from pymc_gpc.approximations.laplace import laplace
from pymc_gpc.approximations.multinomial_probit_ep import multinomial_probit_ep
from pymc_gpc.approximations.softmax_laplace import softmax_laplace
from pymc_gpc.likelihoods import Probit
from pymc_gpc.structures.multiclass_fitc import MulticlassFITCPrior

from ..conftest import se_kernel as rbf


def _problem(n=5, c=3, variance=25.0, seed=0):
    """Per-class SE kernels (c, n, n) with a large variance (a likelihood far from quadratic
    over q, so that the bound's added terms are large) and labels 0..c-1."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    y = np.arange(n) % c
    K = np.array([rbf(X, X, 0.8 + 0.2 * k, variance) + 1e-8 * np.eye(n) for k in range(c)])
    return K, y


def _joint(res, K):
    """f^ (c n,), the joint Sigma (c n, c n) and the dense prior, class-major (index k n + i)."""
    F, c, n = res.mean, K.shape[0], K.shape[1]
    pi = np.exp(F - logsumexp(F, axis=0))
    W = np.zeros((c * n, c * n))
    for i in range(n):
        block = np.diag(pi[:, i]) - np.outer(pi[:, i], pi[:, i])
        idx = np.arange(c) * n + i
        W[np.ix_(idx, idx)] = block
    Kbig = block_diag(*K)
    Sigma = np.linalg.inv(np.linalg.inv(Kbig) + W)
    return F.ravel(), 0.5 * (Sigma + Sigma.T), Kbig


def _bound_from_definition(res, K, y, draws=400_000, seed=1):
    """E_q[log p(y | f)] - KL(q || N(0, K)) with q the joint Laplace Gaussian; its Monte Carlo
    standard error."""
    f, Sigma, Kbig = _joint(res, K)
    c, n = K.shape[0], K.shape[1]
    rng = np.random.default_rng(seed)
    G = f + rng.standard_normal((draws, c * n)) @ np.linalg.cholesky(Sigma).T
    G = G.reshape(draws, c, n)
    log_lik = (G[:, y, np.arange(n)] - logsumexp(G, axis=1)).sum(axis=1)
    Kinv = np.linalg.inv(Kbig)
    kl = 0.5 * (np.trace(Kinv @ Sigma) + f @ Kinv @ f - c * n
                + np.linalg.slogdet(Kbig)[1] - np.linalg.slogdet(Sigma)[1])
    return log_lik.mean() - kl, log_lik.std() / np.sqrt(draws)


def test_the_bound_equals_its_definition_on_the_joint_gaussian():
    K, y = _problem()
    res = softmax_laplace(K, y, tol=1e-12)
    assert res.converged
    bound, left_out = softmax_laplace_bound(res, y, size=8192)
    truth, se = _bound_from_definition(res, K, y)
    # the test has power: the added terms are far from zero here (their tr(W_i Sigma_ii) / 2
    # part alone is about 3, a sign or a factor in it moves the bound far outside the tolerance)
    assert left_out < -0.3
    assert bound == pytest.approx(truth, abs=4 * se + 2e-3)


def test_blocks_of_rows_give_the_same_bound(monkeypatch):
    """The draws run over blocks of rows; one row a block gives the bound of one block."""
    import pymc_gpc.approximations.laplace_bound as lb

    K, y = _problem()
    res = softmax_laplace(K, y, tol=1e-12)
    whole = softmax_laplace_bound(res, y, size=1024)
    monkeypatch.setattr(lb, "_BLOCK", 1)
    assert softmax_laplace_bound(res, y, size=1024) == pytest.approx(whole, rel=1e-12)


def test_the_bound_lies_below_the_evidence():
    """log p(y) by importance sampling from a widened q (a Gaussian with twice q's covariance);
    the bound is at most it, and Laplace's own evidence lies above the bound."""
    K, y = _problem(n=3, c=2, variance=16.0, seed=2)
    res = softmax_laplace(K, y, tol=1e-12)
    bound, _ = softmax_laplace_bound(res, y, size=8192)
    f, Sigma, Kbig = _joint(res, K)
    rng = np.random.default_rng(3)
    prop = 2.0 * Sigma
    Lp = np.linalg.cholesky(prop)
    G = f + rng.standard_normal((400_000, f.size)) @ Lp.T
    c, n = K.shape[0], K.shape[1]
    Gr = G.reshape(-1, c, n)
    log_lik = (Gr[:, y, np.arange(n)] - logsumexp(Gr, axis=1)).sum(axis=1)
    log_w = log_lik + multivariate_normal(cov=Kbig).logpdf(G) - multivariate_normal(mean=f, cov=prop).logpdf(G)
    log_evidence = logsumexp(log_w) - np.log(len(log_w))
    se = np.std(np.exp(log_w - log_w.max())) / np.mean(np.exp(log_w - log_w.max())) / np.sqrt(len(log_w))
    assert bound <= log_evidence + 3 * se
    assert res.log_z > bound + 0.1  # Laplace's evidence is no bound: the added terms matter


def test_on_the_fitc_prior_the_bound_is_the_dense_one_on_q_plus_lambda():
    rng = np.random.default_rng(4)
    n, m, c = 30, 6, 3
    X = rng.normal(size=(n, 2))
    y = np.digitize(X[:, 0], [-0.4, 0.4])
    Xu = X[rng.choice(n, m, replace=False)] + 0.1 * rng.normal(size=(m, 2))
    hyp = [(0.7, 9.0), (1.0, 16.0), (0.5, 4.0)]
    Kuu = np.array([rbf(Xu, Xu, *h) + 1e-6 * np.eye(m) for h in hyp])
    Kuf = np.array([rbf(Xu, X, *h) for h in hyp])
    kd = np.array([np.full(n, h[1] + 1e-6) for h in hyp])
    prior = MulticlassFITCPrior(Kuu, Kuf, kd)
    fitc, dense = softmax_laplace(prior, y, tol=1e-12), softmax_laplace(prior.dense(), y, tol=1e-12)
    b_fitc, gap_fitc = softmax_laplace_bound(fitc, y)
    b_dense, gap_dense = softmax_laplace_bound(dense, y)
    assert gap_fitc < -0.1
    assert b_fitc == pytest.approx(b_dense, rel=1e-6, abs=1e-6)
    assert gap_fitc == pytest.approx(gap_dense, rel=1e-5, abs=1e-6)


def test_a_result_that_is_not_a_softmax_laplace_one_is_refused():
    """A binary Laplace result, and nested EP's, whose mean and covariances have the softmax's
    shapes; an odd number of draws."""
    K, y = _problem(n=4, c=2)
    binary = laplace(K[0], np.array([-1, 1, -1, 1]), Probit())
    nested = multinomial_probit_ep(K, y)
    for res in (binary, nested):
        with pytest.raises(ValueError, match="softmax Laplace result"):
            softmax_laplace_bound(res, y)
    with pytest.raises(ValueError, match="even number of draws"):
        softmax_laplace_bound(softmax_laplace(K, y), y, size=1001)
