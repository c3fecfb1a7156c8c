"""The dense algebra of posterior.py and lapack.py against plain NumPy."""

import numpy as np
import pytest

from pymc_gpc.numerics import lapack
from pymc_gpc.structures.dense import (
    LatentPosterior,
    chol_lower,
    factor_B,
    factors,
    inv_lower,
    inverse_factor,
    rough_inverse_factor,
)


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


@pytest.mark.parametrize("n", [1, 31, 33, 97, 200])
def test_single_precision_cholesky_and_inverse_match_numpy(n):
    # the float32 versions (spotrf, strmm, strsm, strtri) of potrf_lower and inv_lower
    rng = np.random.default_rng(n)
    A = rng.normal(size=(n, n))
    A = A @ A.T / n + np.eye(n)
    L = np.asfortranarray(A, dtype=np.float32)
    assert lapack.potrf_lower(L) == 0
    assert L.dtype == np.float32 and np.all(np.triu(L, 1) == 0.0)
    exact = np.linalg.cholesky(A)
    gap = np.max(np.abs(L - exact)) / np.max(np.abs(exact))
    assert 1e-10 < gap < 1e-5  # rounded in single precision, and only that
    assert lapack.inv_lower(L) == 0
    inv = np.linalg.inv(exact)
    gap = np.max(np.abs(L - inv)) / np.max(np.abs(inv))
    assert 1e-10 < gap < 1e-5 and np.all(np.triu(L, 1) == 0.0)


@pytest.mark.parametrize("dtype, rtol", [(np.float64, 1e-12), (np.float32, 1e-5)])
def test_lauum_gives_the_full_symmetric_product(dtype, rtol):
    # dlauum / slauum write the lower triangle of L^T L; lauum_lower mirrors it into the upper
    rng = np.random.default_rng(3)
    L = np.tril(rng.normal(size=(40, 40))) + 40.0 * np.eye(40)
    a = np.asfortranarray(L, dtype=dtype)
    assert lapack.lauum_lower(a) == 0
    assert a.dtype == dtype and np.array_equal(a, a.T)
    np.testing.assert_allclose(a, L.T @ L, rtol=rtol, atol=rtol * 40.0**2)


def test_cholesky_reports_the_failing_column_with_the_upper_triangle_zeroed():
    A = np.diag([4.0, 1.0, -1.0, 9.0]) + np.triu(np.ones((4, 4)), 1) * 0.1
    a = np.asfortranarray(A + np.triu(A, 1).T)
    assert lapack.potrf_lower(a) == 3  # LAPACK's info: the leading minor of order 3 is not positive
    assert np.all(np.triu(a, 1) == 0.0)


def test_triangular_products_refuse_mixed_precisions():
    A32 = np.asfortranarray(np.tril(np.ones((4, 4))), dtype=np.float32)
    for A, B in ((A32, np.ones((4, 2), order="F")), (A32.astype(float), np.ones((4, 2), np.float32, order="F"))):
        with pytest.raises(ValueError, match="same precision"):
            lapack.triangular_left(A, B, 1.0, False, False)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("transpose", [False, True])
def test_syrk_updates_the_lower_triangle(dtype, transpose):
    """``lapack.syrk_lower`` (BLAS dsyrk / ssyrk from numba, GIL released): c's lower
    triangle <- alpha op(a) op(a)^T + beta c in a's precision, on a block of columns of a
    larger array too; the strict upper triangle left as it was."""
    rng = np.random.default_rng(3)
    big = np.asfortranarray(rng.normal(size=(37, 40)).astype(dtype))
    # a^T a of a block of columns (37 x 23), or a a^T of a 23 x 17 array
    a = big[:, 5:28] if transpose else np.asfortranarray(big[:23, :17])
    c0 = np.asfortranarray(rng.normal(size=(23, 23)).astype(dtype))
    c = c0.copy(order="F")
    lapack.syrk_lower(-0.5, a, 2.0, c, transpose)
    a64 = a.astype(np.float64)
    expected = -0.5 * (a64.T @ a64 if transpose else a64 @ a64.T) + 2.0 * c0
    tol = 1e-12 if dtype == np.float64 else 1e-5
    lower = np.tril_indices(23)
    np.testing.assert_allclose(c[lower], expected[lower], rtol=tol, atol=tol * np.max(np.abs(expected)))
    assert np.array_equal(c[np.triu_indices(23, 1)], c0[np.triu_indices(23, 1)])
    with pytest.raises(ValueError, match="precision"):
        lapack.syrk_lower(1.0, a, 0.0, c.astype(np.float64 if dtype == np.float32 else np.float32), transpose)
    with pytest.raises(ValueError, match="Fortran"):
        lapack.syrk_lower(1.0, np.ascontiguousarray(big[:23, :17]), 0.0, c, False)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_gemm_and_triangular_products_match_numpy(dtype):
    """``lapack.gemm`` (c <- alpha a op(b) + beta c) and ``lapack.triangular_left`` (B <-
    alpha op(T) B, op = T, T^T, T^-1, T^-T) on column blocks, against NumPy in double."""
    rng = np.random.default_rng(4)
    tol = 1e-11 if dtype == np.float64 else 2e-4
    a = np.asfortranarray(rng.normal(size=(6, 9)).astype(dtype))
    wide = np.asfortranarray(rng.normal(size=(9, 30)).astype(dtype))
    for transpose_b, b in ((False, wide[:, 4:15]), (True, np.asfortranarray(rng.normal(size=(11, 9)).astype(dtype)))):
        c0 = np.asfortranarray(rng.normal(size=(6, 11)).astype(dtype))
        c = c0.copy(order="F")
        lapack.gemm(1.5, a, b, -1.0, c, transpose_b)
        b64 = b.astype(np.float64).T if transpose_b else b.astype(np.float64)
        np.testing.assert_allclose(c, 1.5 * a.astype(np.float64) @ b64 - c0, rtol=tol, atol=tol * 10)
    with pytest.raises(ValueError, match="shapes"):
        lapack.gemm(1.0, a, wide[:, :4], 0.0, np.zeros((6, 5), dtype, order="F"), False)
    T = np.asfortranarray(np.tril(rng.normal(size=(9, 9))) + 5 * np.eye(9), dtype=dtype)
    T64 = T.astype(np.float64)
    for transpose in (False, True):
        for solve in (False, True):
            op = T64.T if transpose else T64
            op = np.linalg.inv(op) if solve else op
            B = wide.copy(order="F")
            lapack.triangular_left(T, B[:, 3:20], -2.0, transpose, solve)
            expected = wide.astype(np.float64).copy()
            expected[:, 3:20] = -2.0 * op @ expected[:, 3:20]
            np.testing.assert_allclose(B, expected, rtol=tol, atol=tol * 10)


def test_the_triangular_block_product_is_compiled_without_literal_arguments():
    """``triangular_left`` and the blocked ``inv_lower`` call ``_triangular_times`` with typed
    side, flags and offsets, not literals: numba compiles it once per precision and layout,
    not once more for each caller's constants (15 signatures after a run of the suite)."""
    import numba
    from numba import types

    # fresh, uncached copies of the callers: the cached ones would not type their calls again
    triangular_left, inv_lower = (numba.njit(f.py_func) for f in (lapack.triangular_left, lapack.inv_lower))
    rng = np.random.default_rng(6)
    for dtype in (np.float64, np.float32):
        T = np.asfortranarray(np.tril(rng.normal(size=(70, 70))) + 9 * np.eye(70), dtype=dtype)
        triangular_left(T, np.asfortranarray(rng.normal(size=(70, 3)), dtype=dtype), 1.0, False, True)
        assert inv_lower(T.copy(order="F")) == 0  # n > its block: the dtrmm / dtrsm steps
    assert lapack._triangular_times.signatures
    for sig in lapack._triangular_times.signatures:
        assert not any(isinstance(t, (types.Literal, types.Omitted)) for t in sig), sig


def test_rough_inverse_factor_is_the_inverse_rounded_in_single_precision():
    rng = np.random.default_rng(4)
    n = 150
    X = rng.normal(size=(n, 3))
    K = 5.0 * np.exp(-0.5 * ((X[:, None] - X[None]) ** 2).sum(-1)) + 1e-6 * np.eye(n)
    sw = np.sqrt(rng.uniform(0.0, 3.0, n))
    Li, info = rough_inverse_factor(K, sw)
    exact, _ = inverse_factor(factor_B(K, sw)[0])
    assert info == 0 and Li.dtype == np.float64 and Li.flags.f_contiguous and np.all(np.triu(Li, 1) == 0.0)
    gap = np.max(np.abs(Li - exact)) / np.max(np.abs(exact))
    assert 1e-10 < gap < 1e-4
    L, Li_r, info, rough = factors(K, sw, True)
    assert rough and info == 0 and L.size == 0 and np.array_equal(Li_r, Li)


def test_factors_fall_back_to_double_where_single_precision_cannot_factorise():
    # B = I + 1e9 (1 1^T + eps): far beyond MAX_COND_ROUGH (and 1 + 1e9 rounds to 1e9 in
    # float32, so float32 B would be singular): not attempted, factorised in double
    n = 40
    rng = np.random.default_rng(5)
    X = rng.normal(size=(n, 2))
    K = 1e9 * (1.0 + 1e-3 * np.exp(-0.5 * ((X[:, None] - X[None]) ** 2).sum(-1))) + np.eye(n)
    sw = np.ones(n)
    assert rough_inverse_factor(K, sw)[1] == -1
    L, Li, info, rough = factors(K, sw, True)
    want_L, _ = factor_B(K, sw)
    assert info == 0 and not rough
    np.testing.assert_array_equal(L, want_L)
    np.testing.assert_array_equal(Li, inverse_factor(want_L)[0])
    assert not LatentPosterior(K, sw**2, rough=True).rough


def test_rough_latent_posterior_serves_the_sweeps_and_refuses_the_gradient():
    rng = np.random.default_rng(6)
    n = 120
    X = rng.normal(size=(n, 2))
    K = 3.0 * np.exp(-0.5 * ((X[:, None] - X[None]) ** 2).sum(-1)) + 1e-6 * np.eye(n)
    w = rng.gamma(1.0, 1.0, n)
    v = rng.normal(size=n)
    exact, rough = LatentPosterior(K, w), LatentPosterior(K, w, rough=True)
    assert rough.rough and not exact.rough and rough.L is None
    var_gap = np.max(np.abs(rough.var_diag() / exact.var_diag() - 1))
    assert 1e-12 < var_gap < 1e-3
    np.testing.assert_allclose(rough.weights(v), exact.weights(v), rtol=1e-4, atol=1e-5 * np.abs(v).max())
    for method in (rough.half_logdet_B, rough.R, lambda: rough.ep_gradient(v)):
        with pytest.raises(RuntimeError, match="rough"):
            method()


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
