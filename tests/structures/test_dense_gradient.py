"""The dense posterior's gradient in K (``structures.dense``): G = scale_R R plus the
symmetrised outer products, added as one in-place BLAS product (issue 60, part 3)."""

import numpy as np
import pytest

from pymc_gpc.structures.dense import LatentPosterior, add_symmetric_product


def _explicit(R, outer, scale_R):
    """The formula term by term with explicit loops over entries' outer products."""
    G = scale_R * np.array(R, dtype=float)
    for x, y, c in outer:
        G += 0.5 * c * (x[:, None] * y[None, :] + y[:, None] * x[None, :])
    return G


@pytest.mark.parametrize("order", ["C", "F"])
def test_add_symmetric_product_in_place(order):
    rng = np.random.default_rng(0)
    n = 37
    A = rng.standard_normal((n, n))
    G = np.asarray(A + A.T, order=order)
    x, y = rng.standard_normal(n), rng.standard_normal(n)
    P, Q = np.column_stack([x, y]), np.column_stack([0.7 * y, 0.7 * x])
    expected = G + 0.7 * (np.outer(x, y) + np.outer(y, x))
    before = G.__array_interface__["data"][0]
    out = add_symmetric_product(G, P, Q)
    assert out is G and G.__array_interface__["data"][0] == before
    np.testing.assert_allclose(G, expected, rtol=0, atol=1e-13)


def test_laplace_kernel_gradient_against_the_explicit_formula():
    rng = np.random.default_rng(1)
    n = 30
    X = rng.standard_normal((n, 2))
    K = np.exp(-0.5 * ((X[:, None] - X[None]) ** 2).sum(-1)) + 1e-8 * np.eye(n)
    post = LatentPosterior(K, rng.uniform(0.1, 1.0, n))
    a, u = rng.standard_normal(n), rng.standard_normal(n)
    outer = [(a, a, 0.5), (u, a, 1.0)]
    R = np.linalg.inv(K + np.diag(1.0 / post.w))  # (K + W^-1)^-1 by a general inverse
    np.testing.assert_allclose(post.kernel_gradient(outer, -0.5), _explicit(R, outer, -0.5), rtol=1e-9, atol=1e-10)
    G = post.kernel_gradient([], -0.5)
    np.testing.assert_allclose(G, -0.5 * R, rtol=1e-9, atol=1e-10)
