r"""Products of tensor-product trigonometric bases in O(n P^d) through the product-to-sum identity.

The Laplacian eigenfunctions of a box (``structures.hsgp.LaplacianBasis``) are products over
the d dimensions of one trigonometric function each,

.. math::

    \phi_j(x) = \prod_k a_{jk}\, \mathrm{trig}_k(i_{jk} u_k), \qquad u_k = \frac{\pi (x_k + L_k)}{2 L_k},

with integer or half-integer indices i_jk and trig_k sine or cosine. Since
sin(a) sin(b) = (cos(a - b) - cos(a + b)) / 2 and cos(a) cos(b) = (cos(a - b) + cos(a + b)) / 2,

.. math::

    \phi_j(x) \phi_{j'}(x) = \prod_k \frac{a_{jk} a_{j'k}}{2}
        \big( c_{|i_{jk} - i_{j'k}|}(u_k) + \sigma_k\, c_{i_{jk} + i_{j'k}}(u_k) \big),
    \qquad c_p(u) = \cos(p u),

sigma_k = -1 for sine, +1 for cosine; p is an integer below P_k = 2 max_j i_jk + 1. Every
product of two basis functions is therefore a combination of the P = prod_k P_k functions
prod_k c_{p_k}(u_k), and so

* the weighted Gram matrix H = Phi^T diag(w) Phi is read off T[p] = sum_i w_i prod_k
  c_{p_k}(u_ik), one product of n x prod_{k<d} P_k and n x P_d matrices (``gram``);
* the quadratic forms phi(x_i)^T Sigma phi(x_i) (a posterior's marginal variances) are
  sum_p G[p] prod_k c_{p_k}(u_ik), with G gathered from Sigma in O(2^d M^2) (``quad_diag``);

O(n P) instead of the O(n M^2) of the dense products, M = prod_k m_k and P ~ 2^d M:
at d = 2, m = 30 x 30 that is 3,721 against 810,000 per point. The products Phi^T v and
Phi u go through the factors (one matrix product over the n points, O(n M) flops and
O(n sum_k m_k) memory). Rounding: H as accurately as the dense sum; the quadratic forms
with an absolute error of about the unit roundoff times sum |Sigma_jj'| / prod L_k, which
grows relative to the variances as the data pin the weights down.
"""

import itertools

import numpy as np
from scipy.linalg.lapack import dpotri


def _row_blocks(n, width):
    step = max(256, (1 << 20) // max(width, 1))
    return [slice(i, min(i + step, n)) for i in range(0, n, step)]


def khatri_rao_rows(factors, rows):
    """Row-wise Kronecker product of the factors' rows (first factor slowest), (rows, prod widths)."""
    out = factors[0][rows]
    for F in factors[1:]:
        out = (out[:, :, None] * F[rows][:, None, :]).reshape(out.shape[0], -1)
    return out


class CosineProductBasis:
    """The matrix Phi (n, M) of a tensor-product trigonometric basis, never formed.

    Parameters
    ----------
    u : (n, d) phases u_ik (module docstring).
    index : (M, d) the indices i_jk (integers or half-integers), one row per basis function.
    amplitude : (M, d) the factors a_jk.
    sine : (d,) bool, whether dimension k's functions are sines (else cosines).
    """

    def __init__(self, u, index, amplitude, sine):
        u, index, amplitude = (np.asarray(a, dtype=float) for a in (u, index, amplitude))
        self.n, self.d = u.shape
        self.M = index.shape[0]
        sine = np.asarray(sine, dtype=bool)
        # the factors: per dimension, the distinct (index, amplitude) pairs at the n points
        self.factors, position = [], []
        for k in range(self.d):
            levels, where = np.unique(np.column_stack([index[:, k], amplitude[:, k]]), axis=0, return_inverse=True)
            trig = np.sin if sine[k] else np.cos
            self.factors.append(np.ascontiguousarray(levels[:, 1] * trig(np.outer(u[:, k], levels[:, 0]))))
            position.append(where.reshape(-1))
        widths = [F.shape[1] for F in self.factors]
        self._factor_flat = np.ravel_multi_index(position, widths)  # column j in the factors' grid
        self._factor_shape = (int(np.prod(widths[:-1])), widths[-1])
        # the cosine tables c_p(u_k), p < P_k, and the pairs' positions in T (module docstring)
        twice = np.rint(2.0 * index).astype(np.int64)  # 2 i_jk, exact for half-integers
        P = [int(twice[:, k].max()) + 1 for k in range(self.d)]  # 2 max i + 1
        self.cosines = [np.ascontiguousarray(np.cos(np.outer(u[:, k], np.arange(P[k])))) for k in range(self.d)]
        self._T_shape = (int(np.prod(P[:-1])), P[-1])
        diff = [np.abs(twice[:, None, k] - twice[None, :, k]) // 2 for k in range(self.d)]
        summ = [(twice[:, None, k] + twice[None, :, k]) // 2 for k in range(self.d)]
        self._pairs = []
        for choice in itertools.product((0, 1), repeat=self.d):
            p = [summ[k] if c else diff[k] for k, c in enumerate(choice)]
            sign = float(np.prod([(-1.0 if sine[k] else 1.0) for k, c in enumerate(choice) if c]))
            self._pairs.append((np.ravel_multi_index(p, P).reshape(-1), sign))
        self._pref = np.prod([0.5 * np.outer(amplitude[:, k], amplitude[:, k]) for k in range(self.d)], axis=0)

    def pair_tables(self):
        """What ``gram`` and ``quad_diag_matrix`` read besides the cosine tables, for another
        implementation of them (``backends.jax.hsgp``): the widths P_k of the tables c_p(u_k),
        the 2^d (positions in T of the pairs (j, j'), flattened M^2; sign) and the prefactors
        prod_k a_jk a_j'k / 2 (M, M) (module docstring)."""
        return [t.shape[1] for t in self.cosines], list(self._pairs), self._pref

    def _blocks(self, tables):
        width = int(np.prod([t.shape[1] for t in tables]))
        for rows in _row_blocks(self.n, width):
            yield rows, khatri_rao_rows(tables[:-1], rows) if self.d > 1 else np.ones((rows.stop - rows.start, 1))

    def rmatvec(self, v):
        """Phi^T v, through the factors: (KR(F_<d)^T diag(v) F_d)[grid position of j]."""
        G = np.zeros(self._factor_shape)
        for rows, K in self._blocks(self.factors):
            G += K.T @ (v[rows, None] * self.factors[-1][rows])
        return G.reshape(-1)[self._factor_flat]

    def matvec(self, z):
        """Phi z: sum_j z_j prod_k F_k[:, j_k], as rowsum((KR(F_<d) U) * F_d)."""
        return self._grid_product(self.factors, z)

    def _grid_product(self, factors, z):
        """sum_j z_j prod_k factors_k[:, j_k] for every point (``matvec`` on ``factors``)."""
        U = np.zeros(self._factor_shape[0] * self._factor_shape[1])
        U[self._factor_flat] = z
        U = U.reshape(self._factor_shape)
        out = np.empty(self.n)
        for rows, K in self._blocks(factors):
            out[rows] = np.einsum("ij,ij->i", K @ U, factors[-1][rows])
        return out

    def gram(self, w):
        """H = Phi^T diag(w) Phi (M x M) from T (module docstring)."""
        T = np.zeros(self._T_shape)
        for rows, K in self._blocks(self.cosines):
            T += K.T @ (w[rows, None] * self.cosines[-1][rows])
        T = T.reshape(-1)
        H = np.zeros(self.M * self.M)
        for flat, sign in self._pairs:
            H += sign * T[flat]
        return self._pref * H.reshape(self.M, self.M)

    def quad_diag_matrix(self, Sigma):
        """phi(x_i)^T Sigma phi(x_i) for every i (Sigma symmetric, M x M; module docstring)."""
        weights = (self._pref * Sigma).reshape(-1)
        size = self._T_shape[0] * self._T_shape[1]
        G = np.zeros(size)
        for flat, sign in self._pairs:
            G += sign * np.bincount(flat, weights=weights, minlength=size)
        G = G.reshape(self._T_shape)
        out = np.empty(self.n)
        for rows, K in self._blocks(self.cosines):
            out[rows] = np.einsum("ij,ij->i", K @ G, self.cosines[-1][rows])
        return out

    def quad_diag(self, L_A, s):
        """diag(Phi s A^{-1} s Phi^T) for A = L_A L_A^T (the HSGP posterior's variances).

        A^{-1} from its Cholesky factor by LAPACK's ``dpotri`` (M^3 / 3 + M^3 / 3 flops for
        the triangle's inverse and product, a third of solving against the identity)."""
        A_inv, info = dpotri(L_A, lower=1)
        if info != 0:
            raise np.linalg.LinAlgError(f"the HSGP posterior's A is singular (dpotri info {info})")
        A_inv = np.tril(A_inv) + np.tril(A_inv, -1).T
        return self.quad_diag_matrix(s[:, None] * A_inv * s[None, :])

    def sq_diag(self, S):
        """sum_j S_j phi_j(x_i)^2 for every i (the prior variances): ``matvec``'s product on the
        squared factors (phi_j^2 = prod_k F_k[:, j_k]^2), O(n M) rather than the O(n P) and
        O(M^2) gather of ``quad_diag_matrix`` on diag(S)."""
        return self._grid_product([F * F for F in self.factors], np.asarray(S, dtype=float))

    def dense(self):
        """Phi itself (n, M), for tests and small problems."""
        out = np.empty((self.n, self.M))
        for j in range(self.M):
            e = np.zeros(self.M)
            e[j] = 1.0
            out[:, j] = self.matvec(e)
        return out
