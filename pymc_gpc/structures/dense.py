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
from scipy.linalg import blas
from numba import njit

from ..numerics import lapack

# Below this value of w_i K_ii the identity above loses more than ~1e-12 relative.
IDENTITY_MIN = 1e-4
# Floor on Sigma_ii / K_ii against rounding (the exact value is positive).
_MIN_RELATIVE_VAR = 1e-14
# Rough (single-precision) factors of B only where cond(B) <= 1 + sum_i w_i K_ii is at most
# this: B^{-1} then carries relative errors of about 6e-4, below the sampler's tol 1e-2.
MAX_COND_ROUGH = 1e4


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
    Li, info = inverse_factor(np.asarray(L, dtype=float))
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
    lapack.triangular_left(Li, out, 1.0, False, False)
    return out


@njit(nogil=True, cache=True)
def _scaled_plus_identity(K, s, Bt):
    """B = I + diag(s) K diag(s), Fortran-ordered, in one pass (lower triangle and
    diagonal only: dpotrf reads no more), written through the C-ordered (n, n) buffer Bt
    (its transpose is the Fortran-ordered B; float64, or float32 for a rough factor)."""
    n = K.shape[0]
    for j in range(n):
        Bt[j, j] = 1.0 + s[j] * K[j, j] * s[j]
        for i in range(j + 1, n):
            Bt[j, i] = s[i] * K[i, j] * s[j]
    return Bt.T


def _floor_var(var, prior_var):
    """Sigma_ii > 0 exactly; rounding can make a tiny one negative at extreme scales."""
    return np.maximum(var, _MIN_RELATIVE_VAR * np.maximum(prior_var, 1e-300))


# The computations of ``LatentPosterior``, compiled so that compiled solvers (parallel
# EP, ``ep._parallel_compiled``) can run whole iterations without returning to Python.


@njit(nogil=True, cache=True)
def factor_B(K, sw):
    """(L, info): the lower Cholesky factor of B = I + W^1/2 K W^1/2 (info != 0: failed)."""
    L = _scaled_plus_identity(K, sw, np.empty(K.shape))
    return L, lapack.potrf_lower(L)


@njit(nogil=True, cache=True)
def rough_suits(K, sw):
    """Whether B = I + W^1/2 K W^1/2 may be factorised in single precision: its condition
    bound 1 + sum_i w_i K_ii is at most ``MAX_COND_ROUGH``."""
    bound = 1.0
    for i in range(K.shape[0]):
        bound += sw[i] * sw[i] * K[i, i]
    return bound <= MAX_COND_ROUGH


@njit(nogil=True, cache=True)
def _single_inverse_factor(K, sw):
    """(L^{-1}, info) of B in single precision (Fortran-ordered, lower triangle; spotrf and
    ``lapack.inv_lower``); info -1: not attempted, the condition bound exceeds
    ``MAX_COND_ROUGH`` (``rough_suits``)."""
    if not rough_suits(K, sw):
        return np.zeros((0, 0), np.float32).T, -1
    Li = _scaled_plus_identity(K, sw, np.empty(K.shape, np.float32))
    info = lapack.potrf_lower(Li)
    if info == 0:
        info = lapack.inv_lower(Li)
    return Li, info


@njit(nogil=True, cache=True)
def rough_inverse_factor(K, sw):
    """(L^{-1}, info) for B = I + W^1/2 K W^1/2 = L L^T, factorised and inverted in single
    precision (``_single_inverse_factor``) and returned in double, lower triangle,
    Fortran-ordered, for EP's rough sweeps: its entries carry relative errors of about
    6e-8 cond(L), cond(L)^2 = cond(B) <= 1 + sum_i w_i K_ii.
    """
    n = K.shape[0]
    single, info = _single_inverse_factor(K, sw)
    Li = np.zeros((n, n)).T  # Fortran-ordered
    if info != 0:
        return Li, info
    for j in range(n):
        for i in range(j, n):
            Li[i, j] = single[i, j]
    return Li, info


@njit(nogil=True, cache=True)
def rough_R_into(K, sw, out):
    """R = W^1/2 B^{-1} W^1/2 (``LatentPosterior.R``) from single-precision factors (B^{-1} =
    L^{-T} L^{-1} by ``_single_inverse_factor`` and slauum), written into the Fortran-ordered
    float64 ``out``; returns info as ``_single_inverse_factor`` (0: done). Relative errors
    about 6e-8 cond(B): for the rough posteriors of ``structures.multiclass`` (0.5-0.6 of the
    time of ``LatentPosterior.R`` at n = 100-300 here)."""
    n = K.shape[0]
    Binv, info = _single_inverse_factor(K, sw)
    if info == 0:
        info = lapack.lauum_lower(Binv)
    if info != 0:
        return info
    for j in range(n):
        for i in range(n):
            out[i, j] = sw[i] * Binv[i, j] * sw[j]
    return info


@njit(nogil=True, cache=True)
def inverse_factor(L):
    """(L^{-1}, info), Fortran-ordered."""
    Li = L.T.copy().T  # a Fortran-ordered copy whatever the layout of L
    return Li, lapack.inv_lower(Li)


@njit(nogil=True, cache=True)
def factors(K, sw, rough):
    """(L, L^{-1}, info, rough) of B at W^1/2 = sw, for compiled EP sweeps: ``LatentPosterior``'s
    factors, both computed now. ``rough``: L^{-1} from single precision
    (``rough_inverse_factor``) and no L (an empty array), falling back to double where B is
    too ill-conditioned for it or its factorisation fails; the fourth output says which was
    done."""
    if rough:
        Li, info = rough_inverse_factor(K, sw)
        if info == 0:
            return np.empty((0, 0)).T, Li, info, True
    L, info = factor_B(K, sw)
    if info != 0:
        return L, L, info, False
    Li, info = inverse_factor(L)
    return L, Li, info, False


@njit(nogil=True, cache=True)
def weights_from_inverse(K, sw, Li, v):
    """v - W^{1/2} B^{-1} W^{1/2} K v with B^{-1} u = L^{-T} (L^{-1} u) (``LatentPosterior.weights``)."""
    u = sw * (K @ v)
    return v - sw * (Li.T @ (Li @ u))


@njit(nogil=True, cache=True)
def subtract_scaled_norms(T, solve, M, scale, columns, out):
    """out[j] = M[j, j] - ||T^{-1} (scale * M[:, j])||^2 for j in ``columns`` (T lower
    triangular, applied by a solve; with ``solve`` False, T is the inverse factor itself and
    applied by a product): the direct form of a posterior diagonal where the identity's
    subtraction would lose digits (``marginal_variances``; the HSGP gradient's Q_jj)."""
    k = columns.shape[0]
    if k == 0:
        return
    n = M.shape[0]
    C = np.empty((k, n)).T  # Fortran-ordered (n, k)
    for c in range(k):
        j = columns[c]
        for i in range(n):
            C[i, c] = scale[i] * M[i, j]
    lapack.triangular_left(T, C, 1.0, np.bool_(False), solve)  # typed, not a literal
    for c in range(k):
        acc = 0.0
        for i in range(n):
            acc += C[i, c] * C[i, c]
        out[columns[c]] = M[columns[c], columns[c]] - acc


@njit(nogil=True, cache=True)
def marginal_variances(K, w, sw, Li):
    """diag((K^{-1} + W)^{-1}) from L^{-1} (module docstring), floored at a tiny positive value."""
    n = K.shape[0]
    out = np.empty(n)
    direct = np.empty(n, np.int64)
    n_direct = 0
    for j in range(n):
        if w[j] * K[j, j] >= IDENTITY_MIN:
            binv = 0.0
            for i in range(j, n):  # column j of the lower-triangular L^{-1}
                binv += Li[i, j] * Li[i, j]
            out[j] = (1.0 - binv) / w[j]
        else:
            direct[n_direct] = j
            n_direct += 1
    subtract_scaled_norms(Li, np.bool_(False), K, sw, direct[:n_direct], out)
    for j in range(n):
        out[j] = max(out[j], _MIN_RELATIVE_VAR * max(K[j, j], 1e-300))
    return out


@njit(nogil=True, cache=True)
def outer_minus_R(b, Li, sw, scale):
    """scale (b b^T - R), R = W^{1/2} L^{-T} L^{-1} W^{1/2}, in one pass after dlauum."""
    n = b.shape[0]
    out = np.empty((n, n)).T  # Fortran-ordered
    outer_minus_R_into(b, Li, sw, scale, out)
    return out


@njit(nogil=True, cache=True)
def outer_minus_R_into(b, Li, sw, scale, out):
    """``outer_minus_R`` written into a Fortran-ordered (n, n) ``out`` (e.g. one class's slot
    of a stack, ``structures.multiclass``)."""
    n = b.shape[0]
    for j in range(n):
        for i in range(n):
            out[i, j] = Li[i, j]
    info = lapack.lauum_lower(out)  # B^{-1} = L^{-T} L^{-1}; cannot fail for a triangular factor
    if info != 0:
        out[:, :] = np.nan
    for j in range(n):
        for i in range(n):
            out[i, j] = scale * (b[i] * b[j] - sw[i] * out[i, j] * sw[j])


class _KernelGradient:
    """The structure-generic questions (``structures.base.LatentPosterior``), answered densely."""

    rough = False  # exact unless a posterior says otherwise (``LatentPosterior``)

    def _R_cached(self):
        if getattr(self, "_R", None) is None:
            self._R = self.R()
        return self._R

    def R_times(self, v):
        """(K + W^{-1})^{-1} v."""
        return self._R_cached() @ v

    def sigma_times(self, v):
        """(K^{-1} + W)^{-1} v = K v - K R K v."""
        Kv = self.K @ v
        return Kv - self.K @ (self._R_cached() @ Kv)

    def mean_and_weights(self, v):
        """(K b, b) for b = ``weights(v)``: EP's posterior mean and b from nu~."""
        b = self.weights(v)
        return self.K @ b, b

    def kernel_gradient(self, outer, scale_R):
        """G = sum_k c_k (x_k y_k^T + y_k x_k^T)/2 + scale_R R, the gradient in K itself."""
        G = scale_R * self._R_cached()
        if outer:  # one rank-2k product added in place, not 2k outer products and their sums
            P = np.column_stack([v for x, y, _ in outer for v in (x, y)])
            Q = np.column_stack([v for x, y, c in outer for v in (0.5 * c * y, 0.5 * c * x)])
            add_symmetric_product(G, P, Q)
        return G


def add_symmetric_product(G, P, Q):
    """G += P Q^T in place (one BLAS dgemm, beta = 1), for a symmetric P Q^T (as
    sum_k c_k (x_k y_k^T + y_k x_k^T) / 2): a C-ordered G is updated through its
    Fortran-ordered transpose, whose update Q P^T equals P Q^T."""
    F = G if G.flags.f_contiguous else G.T
    if not F.flags.f_contiguous or G.dtype != np.float64:
        G += P @ Q.T
        return G
    out = blas.dgemm(1.0, P, Q, beta=1.0, c=F, trans_b=1, overwrite_c=1)
    if not np.shares_memory(out, F):  # BLAS copied: write back
        F[...] = out
    return G


class LatentPosterior(_KernelGradient):
    r"""q(f) = N(K a, (K^{-1} + diag(w))^{-1}) represented through B = L L^T.

    Parameters
    ----------
    K : (n, n) prior covariance.
    w : (n,) non-negative precisions of the Gaussian factors (EP sites or Laplace W).
    L, Li : optionally, the Cholesky factor of B and its inverse, already computed at
        these w (by a compiled solver).
    rough : allow a rough posterior (``structures.base.SolverPrior.posterior``): L^{-1} from single
        precision (``rough_inverse_factor``), serving ``var_diag`` and ``weights`` only.
        Where B is too ill-conditioned for single precision (``MAX_COND_ROUGH``) or its
        factorisation fails the posterior is exact; ``self.rough`` says which.
    """

    def __init__(self, K, w, L=None, Li=None, rough=False):
        self.K = K
        self.w = np.asarray(w, dtype=float)
        self.sw = np.sqrt(self.w)
        self.rough = False
        if rough and L is None and Li is None:
            Li, info = rough_inverse_factor(K, self.sw)
            self.rough = info == 0
            Li = Li if self.rough else None
        if L is None and not self.rough:
            L, info = factor_B(K, self.sw)
            if info != 0:
                raise NotPositiveDefiniteError(f"Cholesky factorisation failed (LAPACK info={info})")
        self.L = L
        self._Li = Li

    def _exact(self):
        if self.rough:
            raise RuntimeError("a rough (single-precision) posterior serves EP's sweeps only (variances, "
                               "weights): it has no log-determinant, gradient or predictions")

    @property
    def Li(self):
        """L^{-1}, computed once on demand."""
        if self._Li is None:
            self._Li = inv_lower(self.L)
        return self._Li

    def half_logdet_B(self):
        """(1/2) log|B| = sum log L_ii."""
        self._exact()
        return float(np.sum(np.log(np.diag(self.L))))

    def weights(self, v):
        r"""(K + W^{-1})^{-1} W^{-1} v = v - W^{1/2} B^{-1} W^{1/2} K v.

        With v = nu~ (EP) this is b of R&W Alg. 3.6 and the posterior mean is K b;
        with v = W f + grad log p (Laplace) it is the Newton update of a (R&W Alg. 3.1).
        """
        if self._Li is not None:  # B^{-1} u = L^{-T} (L^{-1} u): two mat-vecs, |L^{-1}| <= 1
            return weights_from_inverse(self.K, self.sw, self._Li, np.asarray(v, dtype=float))
        return v - self.sw * chol_solve(self.L, self.sw * (self.K @ v))

    def var_diag(self):
        """diag((K^{-1} + W)^{-1}) (module docstring)."""
        return marginal_variances(self.K, self.w, self.sw, self.Li)

    def full_cov(self):
        """Sigma = K - K W^{1/2} B^{-1} W^{1/2} K as a dense matrix (sequential EP)."""
        self._exact()
        V = lower_times(self.Li, self.sw[:, None] * self.K)
        return self.K - V.T @ V

    def R(self, out=None):
        r"""R = W^{1/2} B^{-1} W^{1/2} = (K + W^{-1})^{-1}, symmetric, dense; written into
        ``out`` (a Fortran-ordered (n, n) array) where given."""
        self._exact()
        no_outer = np.zeros(self.w.shape[0])
        if out is None:
            return outer_minus_R(no_outer, self.Li, self.sw, -1.0)  # -(0 0^T - R)
        outer_minus_R_into(no_outer, self.Li, self.sw, -1.0, out)
        return out

    def ep_gradient(self, b, rough=False):
        r"""dlog Z_EP / dK = (b b^T - R) / 2 at EP's fixed point (``ep`` module docstring);
        always exact (``rough`` is for structures with a single-precision gradient: its
        n^3/3 dlauum is small beside the sweeps)."""
        self._exact()
        return outer_minus_R(np.asarray(b, dtype=float), self.Li, self.sw, 0.5)

    def predict(self, a, K_cross, k_diag):
        """Latent predictive mean and variance at new points (R&W Alg. 3.2 / 3.6).

        K_cross : (n, m) covariances between training and new points.
        k_diag : (m,) prior variances at the new points.
        """
        self._exact()
        mean = K_cross.T @ a
        V = lower_times(self.Li, self.sw[:, None] * K_cross)
        var = k_diag - np.einsum("ij,ij->j", V, V)
        return mean, np.maximum(var, 0.0)


class IndefiniteSitePosterior(_KernelGradient):
    r"""q(f) = N(K a, (K^{-1} + S)^{-1}) when some site precisions are negative (B then has no real
    W^{1/2}), through K = L_K L_K^T:

    .. math::

        C = I + L_K^T S L_K = L_C L_C^T, \quad \Sigma = L_K C^{-1} L_K^T, \quad
        |B| = |I + K S| = |C|, \quad (K + S^{-1})^{-1} = S - S \Sigma S.

    About three times ``LatentPosterior``'s cost per sweep; same interface.
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

    def ep_gradient(self, b, rough=False):
        """As ``LatentPosterior.ep_gradient`` (always exact)."""
        return 0.5 * (np.outer(b, b) - self.R())

    def predict(self, a, K_cross, k_diag):
        mean = K_cross.T @ a
        var = k_diag - np.einsum("ij,ij->j", K_cross, self.R() @ K_cross)
        return mean, np.maximum(var, 0.0)


def latent_posterior(K, w, rough=False):
    """The representation of q(f) that fits the site precisions w (all >= 0 or not);
    ``rough``: see ``LatentPosterior`` (non-negative w only)."""
    if np.min(w) >= 0.0:
        return LatentPosterior(K, w, rough=rough)
    return IndefiniteSitePosterior(K, w)


class DensePrior:
    """The dense prior structure: a kernel matrix K (n, n), already checked.

    The approximations ask a prior structure for its diagonal, products K v and the
    posterior at given site precisions (``structures.base``).

    Parameters
    ----------
    K : (n, n) ndarray
        Symmetric positive semi-definite prior covariance.

    Examples
    --------
    >>> import numpy as np, pymc_gpc
    >>> from pymc_gpc.structures import DensePrior
    >>> X = np.linspace(-2, 2, 30)[:, None]
    >>> K = np.exp(-0.5 * (X - X.T) ** 2) + 1e-8 * np.eye(30)
    >>> res = pymc_gpc.ep(DensePrior(K), np.sign(X[:, 0] + 0.1), pymc_gpc.likelihoods.Probit())
    """

    sequential = True  # sequential EP's rank-one sweeps work on the dense Sigma

    def __init__(self, K):
        self.K = K
        self.n = K.shape[0]
        self._diag = np.diag(K).copy()

    def diag(self):
        return self._diag

    def matvec(self, v):
        return self.K @ v

    def posterior(self, w, rough=False):
        """q(f) at site precisions w; ``rough``: see ``LatentPosterior``."""
        return latent_posterior(self.K, w, rough=rough)

    def dense(self):
        return self.K
