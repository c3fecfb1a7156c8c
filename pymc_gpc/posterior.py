r"""The Gaussian posterior shared by EP and Laplace: all of the package's dense algebra.

Both approximations end in the same object (Rasmussen & Williams 2006, sec. 3.4-3.6):

.. math::

    q(f) = N(f;\ K a,\ \Sigma), \qquad \Sigma = (K^{-1} + W)^{-1},

with W = diag(w), w >= 0 the site precisions (EP) or the negative Hessian of
log p(y|f) (Laplace), and ``a`` the representer weights. Every computation goes
through the stable matrix B = I + W^{1/2} K W^{1/2} = L L^T (R&W eq. 3.26), never
through K^{-1} or W^{-1}.

The marginal variances, needed at every EP sweep, use the identity

.. math::

    \Sigma = W^{-1/2} (I - B^{-1}) W^{-1/2},

(substitute K = W^{-1/2}(B - I)W^{-1/2} in \Sigma = K - K W^{1/2} B^{-1} W^{1/2} K), so
diag(Sigma) costs one triangular inverse L^{-1} (n^3/3 flops) instead of the
triangular solve with n right-hand sides (n^3) of R&W Alg. 3.5. Where w_i K_ii is
small the subtraction 1 - (B^{-1})_ii would lose digits, and those sites use
Sigma_ii = K_ii - ||L^{-1} W^{1/2} K_{:,i}||^2.
"""

import numpy as np
from numba import njit

from . import lapack

# Below this value of w_i K_ii the identity above loses more than ~1e-12 relative.
_IDENTITY_MIN = 1e-4
# Floor on Sigma_ii / K_ii against rounding (the exact value is positive).
_MIN_RELATIVE_VAR = 1e-14


class NotPositiveDefiniteError(np.linalg.LinAlgError):
    """B = I + W^1/2 K W^1/2 has no Cholesky factor (K not positive semi-definite)."""


def chol_lower(a, overwrite=False):
    """Lower Cholesky factor (Fortran-ordered) of a symmetric positive-definite matrix.

    With ``overwrite`` and a Fortran-ordered (or, being symmetric, C-ordered and then
    transposed) ``a``, the factor is computed in place.
    """
    L = a if (overwrite and a.flags.f_contiguous) else np.array(a, dtype=float, order="F")
    info = lapack.potrf_lower(L)
    if info != 0:
        raise NotPositiveDefiniteError(f"Cholesky factorisation failed (LAPACK info={info})")
    return L


def inv_lower(L):
    """Inverse of a lower-triangular matrix (blocked, ``lapack.inv_lower``), Fortran-ordered."""
    Li = np.array(L, dtype=float, order="F")
    info = lapack.inv_lower(Li)
    if info != 0:
        raise NotPositiveDefiniteError(f"singular triangular factor (LAPACK info={info})")
    return Li


def chol_solve(L, b):
    """Solve (L L^T) x = b given the lower Cholesky factor L (LAPACK dpotrs)."""
    x = np.array(b, dtype=float, order="F")
    info = lapack.potrs_lower(L, x)
    if info != 0:
        raise ValueError(f"dpotrs failed (LAPACK info={info})")
    return x


def lower_times(Li, X):
    """Li @ X for lower-triangular Li (BLAS dtrmm), as a new Fortran-ordered array."""
    out = np.array(X, dtype=float, order="F")
    lapack.trmm_lower_left(Li, out)
    return out


@njit(nogil=True)
def _scaled_plus_identity(K, s):
    """B = I + diag(s) K diag(s), Fortran-ordered, in one pass (lower triangle and
    diagonal only: dpotrf reads no more)."""
    n = K.shape[0]
    Bt = np.empty((n, n))  # C-ordered B^T is the Fortran-ordered B
    for j in range(n):
        Bt[j, j] = 1.0 + s[j] * K[j, j] * s[j]
        for i in range(j + 1, n):
            Bt[j, i] = s[i] * K[i, j] * s[j]
    return Bt.T


def _floor_var(var, prior_var):
    """Sigma_ii > 0 exactly; rounding can make a tiny one negative at extreme scales."""
    return np.maximum(var, _MIN_RELATIVE_VAR * np.maximum(prior_var, 1e-300))


class LatentPosterior:
    r"""q(f) = N(K a, (K^{-1} + diag(w))^{-1}) represented through B = L L^T.

    Parameters
    ----------
    K : (n, n) prior covariance.
    w : (n,) non-negative precisions of the Gaussian factors (EP sites or Laplace W).
    """

    def __init__(self, K, w):
        self.K = K
        self.w = np.asarray(w, dtype=float)
        self.sw = np.sqrt(self.w)
        self.L = chol_lower(_scaled_plus_identity(K, self.sw), overwrite=True)
        self._Li = None

    @property
    def Li(self):
        """L^{-1}, computed once on demand."""
        if self._Li is None:
            self._Li = inv_lower(self.L)
        return self._Li

    def half_logdet_B(self):
        """(1/2) log|B| = sum log L_ii."""
        return float(np.sum(np.log(np.diag(self.L))))

    def weights(self, v):
        r"""(K + W^{-1})^{-1} W^{-1} v = v - W^{1/2} B^{-1} W^{1/2} K v.

        With v = nu~ (EP) this is b of R&W Alg. 3.6 and the posterior mean is K b;
        with v = W f + grad log p (Laplace) it is the Newton update of a (R&W Alg. 3.1).
        """
        u = self.sw * (self.K @ v)
        if self._Li is not None:  # B^{-1} u = L^{-T} (L^{-1} u): two mat-vecs, |L^{-1}| <= 1
            return v - self.sw * (self._Li.T @ (self._Li @ u))
        return v - self.sw * chol_solve(self.L, u)

    def var_diag(self):
        """diag((K^{-1} + W)^{-1}) (module docstring)."""
        Kd = np.diag(self.K)
        binv_diag = np.einsum("ij,ij->j", self.Li, self.Li)
        use_identity = self.w * Kd >= _IDENTITY_MIN
        out = np.empty_like(Kd)
        safe_w = np.where(use_identity, self.w, 1.0)
        out[use_identity] = ((1.0 - binv_diag) / safe_w)[use_identity]
        direct = np.flatnonzero(~use_identity)
        if direct.size:
            V = lower_times(self.Li, self.sw[:, None] * self.K[:, direct])
            out[direct] = Kd[direct] - np.einsum("ij,ij->j", V, V)
        return _floor_var(out, Kd)

    def full_cov(self):
        """Sigma = K - K W^{1/2} B^{-1} W^{1/2} K as a dense matrix (sequential EP)."""
        V = lower_times(self.Li, self.sw[:, None] * self.K)
        return self.K - V.T @ V

    def R(self):
        r"""R = W^{1/2} B^{-1} W^{1/2} = (K + W^{-1})^{-1}, symmetric, dense."""
        Binv = np.array(self.Li, order="F")
        info = lapack.lauum_lower(Binv)  # B^{-1} = L^{-T} L^{-1}
        if info != 0:
            raise ValueError(f"dlauum failed (LAPACK info={info})")
        return self.sw[:, None] * Binv * self.sw[None, :]

    def predict(self, a, K_cross, k_diag):
        """Latent predictive mean and variance at new points (R&W Alg. 3.2 / 3.6).

        K_cross : (n, m) covariances between training and new points.
        k_diag : (m,) prior variances at the new points.
        """
        mean = K_cross.T @ a
        V = lower_times(self.Li, self.sw[:, None] * K_cross)
        var = k_diag - np.einsum("ij,ij->j", V, V)
        return mean, np.maximum(var, 0.0)


class IndefiniteSitePosterior:
    r"""q(f) = N(K a, (K^{-1} + S)^{-1}) when some site precisions are negative.

    EP sites of a likelihood that is not log-concave (the step likelihood with label
    noise) may have tau_i < 0 while K^{-1} + S stays positive definite; B then has no
    real square root W^{1/2}. This representation goes through K = L_K L_K^T instead:

    .. math::

        C = I + L_K^T S L_K = L_C L_C^T, \quad \Sigma = L_K C^{-1} L_K^T, \quad
        |B| = |I + K S| = |C|, \quad (K + S^{-1})^{-1} = S - S \Sigma S.

    It costs about three times ``LatentPosterior`` per sweep, so it is used only when a
    site is negative (``latent_posterior``). Same interface as ``LatentPosterior``.
    """

    def __init__(self, K, w):
        self.K = K
        self.w = np.asarray(w, dtype=float)
        n = K.shape[0]
        jitter = 1e-10 * max(float(np.mean(np.diag(K))), 1e-300)
        self.LK = chol_lower(K + jitter * np.eye(n))
        C = self.LK.T @ (self.w[:, None] * self.LK)
        C[np.diag_indices_from(C)] += 1.0
        self.L = chol_lower(C)  # fails exactly when K^{-1} + S is not positive definite
        # M M^T = Sigma with M = L_K L_C^{-T}
        self.M = lower_times(inv_lower(self.L), self.LK.T).T

    def half_logdet_B(self):
        return float(np.sum(np.log(np.diag(self.L))))

    def _sigma_times(self, v):
        return self.M @ (self.M.T @ v)

    def weights(self, v):
        """(I + S K)^{-1} v = v - S Sigma v; the posterior mean is K times this."""
        return v - self.w * self._sigma_times(v)

    def var_diag(self):
        return _floor_var(np.einsum("ij,ij->i", self.M, self.M), np.diag(self.K))

    def full_cov(self):
        return self.M @ self.M.T

    def R(self):
        """(K + S^{-1})^{-1} = S - S Sigma S."""
        return np.diag(self.w) - self.w[:, None] * self.full_cov() * self.w[None, :]

    def predict(self, a, K_cross, k_diag):
        mean = K_cross.T @ a
        var = k_diag - np.einsum("ij,ij->j", K_cross, self.R() @ K_cross)
        return mean, np.maximum(var, 0.0)


def latent_posterior(K, w):
    """The representation of q(f) that fits the site precisions w (all >= 0 or not)."""
    if np.min(w) >= 0.0:
        return LatentPosterior(K, w)
    return IndefiniteSitePosterior(K, w)
