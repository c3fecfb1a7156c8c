"""The dense algebra of posterior.py and lapack.py against plain NumPy."""

import numpy as np
import pytest

from pymc_gpc.numerics import lapack
from pymc_gpc.structures.dense import LatentPosterior, chol_lower, inv_lower


@pytest.mark.parametrize("n", [0, 1, 31, 32, 33, 97, 200])
def test_blocked_triangular_inverse_matches_numpy(n):
    rng = np.random.default_rng(n)
    A = rng.normal(size=(n, n))
    L = chol_lower(A @ A.T + n * np.eye(n)) if n else np.zeros((0, 0), order="F")
    Li = inv_lower(L)
    assert Li.flags.f_contiguous
    if n:
        np.testing.assert_allclose(Li, np.linalg.inv(L), rtol=1e-10, atol=1e-13)
        assert np.all(np.triu(Li, 1) == 0.0)


def test_blocked_triangular_inverse_reports_the_singular_column():
    T = np.asfortranarray(np.tril(np.ones((70, 70))))
    T[40, 40] = 0.0
    assert lapack.inv_lower(T) == 41  # LAPACK's 1-based info, through the block offset


def test_latent_posterior_pieces_match_dense_formulas():
    rng = np.random.default_rng(3)
    n = 90
    X = rng.normal(size=(n, 2))
    K = 2.0 * np.exp(-0.5 * ((X[:, None] - X[None]) ** 2).sum(-1)) + 1e-8 * np.eye(n)
    w = rng.uniform(0.0, 2.0, n)
    w[:5] = 1e-9  # sites where the variance identity would lose digits
    v = rng.normal(size=n)
    Sigma = np.linalg.inv(np.linalg.inv(K) + np.diag(w))
    want_b = np.linalg.solve(K + np.diag(1.0 / w), v / w)
    post = LatentPosterior(K, w)
    np.testing.assert_allclose(post.weights(v), want_b, rtol=1e-7, atol=1e-9)  # before L^-1 exists
    np.testing.assert_allclose(post.var_diag(), np.diag(Sigma), rtol=1e-7)
    np.testing.assert_allclose(post.weights(v), want_b, rtol=1e-7, atol=1e-9)  # through L^-1
    np.testing.assert_allclose(post.R(), np.linalg.inv(K + np.diag(1.0 / w)), rtol=1e-7, atol=1e-9)
    assert post.half_logdet_B() == pytest.approx(
        0.5 * np.linalg.slogdet(np.eye(n) + np.sqrt(w)[:, None] * K * np.sqrt(w))[1], rel=1e-12)
