r"""q(f) for c independent latent GPs coupled through the likelihood (softmax structure).

The latent vector stacks the classes, f = (f_1, ..., f_c), each f_k of length n with its
own prior covariance K_k, so K = blockdiag(K_1, ..., K_c). The softmax's negative Hessian
couples the classes of one observation:

.. math::

    W = D - \Pi \Pi^T, \quad D = \mathrm{diag}(\pi), \quad
    \Pi = [\mathrm{diag}(\pi_1); \dots; \mathrm{diag}(\pi_c)], \quad \sum_k \pi_k = 1.

More generally, per observation W_i = diag(d_i) - d_i d_i^T / s_i with d_i >= 0 and
s_i = \sum_k d_{ki}: the softmax has d = pi (s = 1); the sites of nested EP for the
multinomial probit have exactly this form (``approximations.multinomial_probit_ep``).
With \Pi = D R S^{-1/2} the derivation below goes through unchanged except for the
log-determinant's extra -\tfrac12 \sum_i \log s_i.

Rasmussen & Williams (2006), sec. 3.5 and Alg. 3.3-3.4: with
E_k = D_k^{1/2} (I + D_k^{1/2} K_k D_k^{1/2})^{-1} D_k^{1/2} (= ``LatentPosterior(K_k,
pi_k).R()``) and M = \sum_k E_k = L_M L_M^T,

.. math::

    (K + W^{-1})^{-1} = E - E R M^{-1} R^T E, \qquad R = [I; \dots; I],

and (derivation: |I + K W| = |I + K D| |I - \Pi^T (K^{-1} + D)^{-1} \Pi|, and
D (K^{-1} + D)^{-1} D = D - E, so the second factor is |I - \sum_k (D_k - E_k)| = |M|)

.. math::

    \tfrac12 \log |I + K W| = \sum_k \tfrac12 \log |B_k| + \log |L_M|
        - \tfrac12 \sum_i \log s_i.

(Alg. 3.3 as printed omits log|L_M| and has the sign of the log-sum-exp wrong; the
tests check the evidence against quadrature.) Everything costs (c + 1) Cholesky
factorisations of n x n matrices plus O(c n^3) products; no cn x cn matrix is formed.
"""

import numpy as np
from scipy.linalg.blas import dsyrk

from .dense import LatentPosterior, chol_lower, chol_solve, inv_lower, lower_times


def _times(A, v):
    """A_k v_k for a stack A (c, n, p) and v (c, p): (c, n), through BLAS."""
    return (A @ v[:, :, None])[:, :, 0]


class CoupledBlockPosterior:
    """q(f) = N(K a, (K^{-1} + W)^{-1}) with the block structure above.

    Parameters
    ----------
    K : (c, n, n) prior covariances, one per class.
    d : (c, n) non-negative weights, every column with a positive sum (the softmax's
        class probabilities pi at the current f).
    """

    def __init__(self, K, d):
        self.K = K
        self.d = d
        self.s = d.sum(axis=0)
        self.blocks = [LatentPosterior(K[k], d[k]) for k in range(K.shape[0])]
        self.E = np.array([b.R() for b in self.blocks])  # (c, n, n)
        self.LM = chol_lower(self.E.sum(axis=0))
        self._H = None

    def half_logdet_B(self):
        r"""\tfrac12 \log|I + K W| (module docstring)."""
        return (sum(b.half_logdet_B() for b in self.blocks) + float(np.sum(np.log(np.diag(self.LM))))
                - 0.5 * float(np.sum(np.log(self.s))))

    def W_times(self, f):
        """W f = d * f - d (sum_k d_k f_k) / s, per observation."""
        return self.d * f - self.d * (np.sum(self.d * f, axis=0) / self.s)

    def K_times(self, v):
        return _times(self.K, v)

    def R_times(self, v):
        """(K + W^{-1})^{-1} v = E v - E R M^{-1} R^T E v, for v (c, n)."""
        Ev = _times(self.E, v)
        t = chol_solve(self.LM, Ev.sum(axis=0))
        return Ev - self.E @ t

    def weights(self, v):
        """(I - (K + W^{-1})^{-1} K) v: the Newton update a from v = W f + g (Alg. 3.3)."""
        return v - self.R_times(self.K_times(v))

    @property
    def H(self):
        """H_k = L_M^{-1} E_k, (c, n, n), computed once."""
        if self._H is None:
            LMi = inv_lower(self.LM)
            self._H = np.array([lower_times(LMi, Ek) for Ek in self.E])
        return self._H

    def R_diag_blocks(self):
        """The diagonal blocks (K + W^{-1})^{-1}_{kk} = E_k - E_k M^{-1} E_k = E_k - H_k^T H_k:
        (c, n, n), H_k^T H_k by BLAS dsyrk (half the flops of a product)."""
        out = np.empty_like(self.E)
        for k, Hk in enumerate(self.H):
            HtH = dsyrk(1.0, Hk, trans=1, lower=1)  # lower triangle of H_k^T H_k, zeros above
            np.subtract(self.E[k], HtH + np.tril(HtH, -1).T, out=out[k])
        return out

    def site_covariances(self):
        r"""The c x c posterior covariance of f_i = (f_1(x_i), ..., f_c(x_i)) for every i: (n, c, c).

        Sigma = K - K (K + W^{-1})^{-1} K: block (k, l) has diagonal
        delta_kl diag(K_k - K_k E_k K_k) + diag(K_k E_k M^{-1} E_l K_l). The first term is
        the marginal variance of class k's own posterior (K_k^{-1} + D_k)^{-1}
        (``LatentPosterior.var_diag``, O(n^2)); the second is diag(G_k^T G_l) with
        G_k = L_M^{-1} E_k K_k = H_k K_k.
        """
        c, n = self.d.shape
        own = np.array([b.var_diag() for b in self.blocks])  # (c, n)
        G = self.H @ self.K  # (c, n, n)
        S = np.einsum("kmi,lmi->ikl", G, G, optimize=True)
        S[:, np.arange(c), np.arange(c)] += own.T
        return S

    def predict(self, a, K_cross, k_star, full_cov=False):
        """Latent predictive at m new points (R&W Alg. 3.4).

        K_cross : (c, n, m); k_star : (c, m) prior variances, or (c, m, m) with ``full_cov``.
        Returns mean (c, m) and covariance (m, c, c), or (c m, c m) class-major with ``full_cov``.
        """
        c, _, m = K_cross.shape
        mean = _times(np.transpose(K_cross, (0, 2, 1)), a)
        P = self.E @ K_cross  # E_k k_k*
        LMi = inv_lower(self.LM)
        Q = np.array([lower_times(LMi, Pk) for Pk in P])
        if not full_cov:
            cov = np.einsum("kjm,ljm->mkl", Q, Q, optimize=True)
            own = k_star - np.einsum("kim,kim->km", K_cross, P)
            cov[:, np.arange(c), np.arange(c)] += own.T
            return mean, cov
        cov = np.tensordot(Q, Q, axes=([1], [1]))  # (k, m, l, p)
        for k in range(c):
            cov[k, :, k, :] += k_star[k] - K_cross[k].T @ P[k]
        cov = cov.reshape(c * m, c * m)
        return mean, 0.5 * (cov + cov.T)
