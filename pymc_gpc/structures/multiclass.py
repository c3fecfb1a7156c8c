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
from numba import njit
from scipy.linalg.lapack import dtrcon

from ..numerics import lapack
from .dense import (
    IDENTITY_MIN,
    LatentPosterior,
    NotPositiveDefiniteError,
    _single_inverse_factor,
    chol_lower,
    inv_lower,
    lower_times,
    marginal_variances,
    rough_R_into,
)


def _times(A, v):
    """A_k v_k for a stack A (c, n, p) and v (c, p): (c, n), through BLAS."""
    return (A @ v[:, :, None])[:, :, 0]


@njit(nogil=True, cache=True)
def _block_gradient(E, HtH, X, Y, coef, scale_R, out):
    """out = scale_R (E - HtH) + sum_t coef_t (x_t y_t^T + y_t x_t^T) / 2, symmetric, in one
    pass (E symmetric; HtH's lower triangle, the rest unread)."""
    n = E.shape[0]
    for j in range(n):
        for i in range(j, n):
            g = scale_R * (E[j, i] - HtH[i, j])
            for t in range(X.shape[0]):
                g += 0.5 * coef[t] * (X[t, i] * Y[t, j] + Y[t, i] * X[t, j])
            out[i, j] = g
            out[j, i] = g


@njit(nogil=True, cache=True)
def _site_covariance_blocks(LMi, Ht, d, index, Gd):
    """S[i, k, l] = G_k[:, i] . G_l[:, i] with G_k = L_M^{-1} - H_k D_k^{-1}
    (``CoupledBlockPosterior.site_covariances``), each column of G_k formed once, in a buffer, from
    L_M^{-1} (Fortran-ordered) and Ht[k, i, :] = H_k[:, i]; a column with
    index[k, i] >= 0 is Gd[index[k, i]] instead (the direct product). (n, c, c)."""
    c, n = d.shape
    S = np.empty((n, c, c))
    g = np.empty((c, n))
    for i in range(n):
        for k in range(c):
            j = index[k, i]
            if j >= 0:
                g[k, :] = Gd[j]
            else:
                inv = 1.0 / d[k, i]
                for m in range(n):
                    g[k, m] = LMi[m, i] - Ht[k, i, m] * inv
        for k in range(c):
            for l in range(k, c):
                acc = 0.0
                for m in range(n):
                    acc += g[k, m] * g[l, m]
                S[i, k, l] = acc
                S[i, l, k] = acc
    return S


@njit(nogil=True, cache=True)
def _rough_block_into(K, w, sw, out):
    """One class's E_k = W^1/2 B^{-1} W^1/2 into the Fortran-ordered float64 ``out`` and its own
    marginal variances diag((K_k^{-1} + W_k)^{-1}) (``dense.marginal_variances``), both from
    one single-precision factorisation (``dense._single_inverse_factor``, then slauum):
    ``dense.rough_R_into`` with the variances kept. Returns (variances, info); info != 0:
    not done (the condition bound or a factorisation failed)."""
    n = K.shape[0]
    single, info = _single_inverse_factor(K, sw)
    if info != 0:
        return np.empty(0), info
    Li = np.zeros((n, n)).T  # Fortran-ordered double copy of the lower triangle
    for j in range(n):
        for i in range(j, n):
            Li[i, j] = single[i, j]
    own = marginal_variances(K, w, sw, Li)
    info = lapack.lauum_lower(single)
    for j in range(n):
        for i in range(n):
            out[i, j] = sw[i] * single[i, j] * sw[j]
    return own, info


def _single_H(LMi, E):
    """H_k^T = E_k L_M^{-T} for every k, in single precision: a C-ordered float32 (c, n, n)
    stack whose slots' Fortran views are H_k (``CoupledBlockPosterior.H``)."""
    Ht = E.astype(np.float32)  # E_k symmetric: the Fortran view Ht[k].T holds E_k
    L = np.asfortranarray(LMi, dtype=np.float32)
    for k in range(Ht.shape[0]):
        lapack.triangular_left(L, Ht[k].T, 1.0, False, False)
    return Ht


@njit(nogil=True, cache=True)
def _stack_times(A, shared, V):
    """A_k v_k for a stack A (c, n, n) of symmetric matrices and V (c, n); with ``shared``
    every A_k is A_0, and the c products are one (V A_0: row k is (A_0 v_k)^T)."""
    V = np.ascontiguousarray(V)
    if shared:
        return np.dot(V, A[0])
    out = np.empty(V.shape)
    for k in range(V.shape[0]):
        out[k] = np.dot(A[k], V[k])
    return out


@njit(nogil=True, cache=True)
def _coupled_W_times(d, s, f):
    """W f per observation (``coupled_W_times``), with s = sum_k d_k given."""
    c, n = d.shape
    out = np.empty((c, n))
    for i in range(n):
        m = 0.0
        for k in range(c):
            m += d[k, i] * f[k, i]
        m /= s[i]
        for k in range(c):
            out[k, i] = d[k, i] * f[k, i] - d[k, i] * m
    return out


@njit(nogil=True, cache=True)
def _R_times(E, LM, u):
    """(K + W^{-1})^{-1} u = E u - E R M^{-1} R^T E u for u (c, n), from the stack E and
    M = sum_k E_k = L_M L_M^T (module docstring; ``BlockPreconditioner.R_times``)."""
    Eu = _stack_times(E, False, u)
    t = Eu.sum(axis=0)
    lapack.potrs_lower(LM, t)
    for k in range(Eu.shape[0]):
        Eu[k] -= np.dot(E[k], t)
    return Eu


class BlockKernel:
    """The prior's product v -> (K_k v_k)_k, v (c, n), for the stack K (c, n, n). ``shared``:
    every K_k equals K_1 (a kernel shared by the classes), and one BLAS product with K_1
    replaces c mat-vecs (the stack is read once instead of c times)."""

    def __init__(self, K):
        self.K = K
        self.shared = all(np.array_equal(K[0], K[k]) for k in range(1, K.shape[0]))

    def __call__(self, v):
        return _stack_times(self.K, self.shared, np.asarray(v, dtype=float))


def coupled_W_times(d, f):
    """W f = d * f - d (sum_k d_k f_k) / s per observation, for weights d (c, n)."""
    return _coupled_W_times(d, d.sum(axis=0), np.asarray(f, dtype=float))


class BlockPreconditioner:
    r"""R = (K + W^{-1})^{-1} = E - E R M^{-1} R^T E from the stack E (c, n, n) and L_M alone
    (module docstring): what a posterior keeps to precondition later Newton steps."""

    def __init__(self, E, LM):
        self.E = E
        self.LM = LM

    def R_times(self, v):
        """(K + W^{-1})^{-1} v = E v - E R M^{-1} R^T E v, for v (c, n) (``_R_times``)."""
        return _R_times(self.E, self.LM, np.asarray(v, dtype=float))

    def solve_other_weights(self, K_times, d, v, q, eps, eta=0.0, max_iter=20):
        """Newton's update (I + W K)^{-1} v for a prior K (``K_times``: a ``BlockKernel``) and weights
        d other than this posterior's, by conjugate gradients preconditioned with it (compiled:
        ``_cg_newton``); None if that takes more than ``max_iter`` steps.

        Solves (K^{-1} + W) x = v in x = K q, preconditioned by P = K - K R_0 K with this
        posterior's R_0 = (K_0 + W_0^{-1})^{-1} (at K_0 = K, P = (K^{-1} + W_0)^{-1}); P r has a
        factored form, so K^{-1} is never needed. Each step costs four stacked n x n mat-vecs
        instead of c + 1 Cholesky factorisations. ``q`` is the start (K q the current f). Stops
        when P r, the estimate of the remaining error in x, is at most max(eps, eta |x - x_start|)
        in the max norm (eta: an inexact-Newton forcing term).
        """
        q, ok = _cg_newton(K_times.K, K_times.shared, self.E, self.LM, d, d.sum(axis=0),
                           np.asarray(v, dtype=float), np.array(q, dtype=float), eps, eta, max_iter)
        return q if ok else None


@njit(nogil=True, cache=True)
def _cg_newton(K, shared, E, LM, d, s, v, q, eps, eta, max_iter):
    """``BlockPreconditioner.solve_other_weights`` compiled (no Python, the GIL released, so
    that sampler threads run their Newton steps at once): preconditioned CG on
    (K^{-1} + W) x = v in q with x = K q. Returns (q, converged); q is updated in place."""

    def precondition(r):
        zq = r - _R_times(E, LM, _stack_times(K, shared, r))
        return zq, _stack_times(K, shared, zq)

    r = v - q - _coupled_W_times(d, s, _stack_times(K, shared, q))
    zq, z = precondition(r)
    rz = np.sum(r * z)
    pq, p = zq, z
    dx = np.zeros_like(q)
    for _ in range(max_iter):
        Ap = pq + _coupled_W_times(d, s, p)
        pAp = np.sum(p * Ap)
        if not (pAp > 0.0 and rz != 0.0 and np.isfinite(rz)):
            return q, False
        alpha = rz / pAp
        q += alpha * pq
        dx += alpha * p
        r = r - alpha * Ap
        zq, z = precondition(r)
        if np.max(np.abs(z)) <= max(eps, eta * np.max(np.abs(dx))):
            return q, True
        rz, rz_old = np.sum(r * z), rz
        beta = rz / rz_old
        pq, p = zq + beta * pq, z + beta * p
    return q, False


class CoupledBlockPosterior(BlockPreconditioner):
    """q(f) = N(K a, (K^{-1} + W)^{-1}) with the block structure above.

    Parameters
    ----------
    K : (c, n, n) prior covariances, one per class.
    d : (c, n) non-negative weights, every column with a positive sum (the softmax's
        class probabilities pi at the current f).
    rough : allow a rough posterior: each E_k from single-precision factors
        (``dense.rough_R_into``), for Newton steps that do not end the iteration
        (``weights``, ``R_times``, ``preconditioner``) only; exact where a B_k is too
        ill-conditioned for single precision (``dense.MAX_COND_ROUGH``) or its factorisation
        fails. ``self.rough`` says which.
    rough_gradient : form the c products H_k = L_M^{-1} E_k and the gradient's H_k^T H_k
        in single precision (``H``), for a sampler's gradient: the site covariances and
        the gradient then carry single-precision rounding; the factors, the
        log-determinant and the weights stay double. Honoured where cond(L_M) is at most
        ``MAX_COND_ROUGH_GRADIENT``; ``self.rough_H`` says whether it was.
    rough_covariances : with ``rough``, a rough posterior that also serves
        ``site_covariances`` (nested EP's early sweeps): each class's own marginal variances
        from its single-precision factor (``_rough_block_into``) and the H_k in single
        precision whatever cond(L_M); L_M stays double.
    """

    # where a rough gradient's products are formed in single precision (``H``)
    MAX_COND_ROUGH_GRADIENT = 1e4

    def __init__(self, K, d, rough=False, rough_gradient=False, rough_covariances=False):
        self.K = K
        self.d = d
        self.rough_gradient = rough_gradient
        self.rough_covariances = rough_covariances
        self._own = None  # each class's own marginal variances (c, n), from a rough posterior
        self.rough_H = None  # decided when H is first formed
        self.s = d.sum(axis=0)
        E = np.empty(K.shape)  # (c, n, n), each E_k written in place (symmetric: E[k].T is E_k)
        self.rough, LM = rough and self._rough_E(E), None
        if self.rough:
            try:
                LM = chol_lower(E.sum(axis=0))
            except NotPositiveDefiniteError:  # M indefinite by rounding
                self.rough = False
        if not self.rough:
            self.blocks = [LatentPosterior(K[k], d[k]) for k in range(K.shape[0])]
            for k, b in enumerate(self.blocks):
                b.R(out=E[k].T)
            LM = chol_lower(E.sum(axis=0))
        super().__init__(E, LM)
        self._H = self._Ht = None
        self._LMi = None

    def _rough_E(self, E):
        """E_k from single-precision factors into E (and, for ``rough_covariances``, each
        class's own marginal variances); whether every class's succeeded."""
        if self.rough_covariances:
            own = np.empty(self.d.shape)
            for k in range(self.K.shape[0]):
                var, info = _rough_block_into(self.K[k], self.d[k], np.sqrt(self.d[k]), E[k].T)
                if info != 0:
                    return False
                own[k] = var
            self._own = own
            return True
        for k in range(self.K.shape[0]):
            if rough_R_into(self.K[k], np.sqrt(self.d[k]), E[k].T) != 0:
                return False
        return True

    def _exact(self, covariances=False):
        if self.rough and not (covariances and self.rough_covariances):
            raise RuntimeError("a rough (single-precision) posterior serves Newton steps only: "
                               "it has no log-determinant, gradient, site covariances or predictions")

    def half_logdet_B(self):
        r"""\tfrac12 \log|I + K W| (module docstring)."""
        self._exact()
        return (sum(b.half_logdet_B() for b in self.blocks) + float(np.sum(np.log(np.diag(self.LM))))
                - 0.5 * float(np.sum(np.log(self.s))))

    def K_times(self, v):
        return _times(self.K, v)

    def preconditioner(self):
        """This posterior's E and L_M, to precondition later solves (``solve_other_weights``)."""
        return BlockPreconditioner(self.E, self.LM)

    def weights(self, v):
        """(I - (K + W^{-1})^{-1} K) v: the Newton update a from v = W f + g (Alg. 3.3)."""
        return v - self.R_times(self.K_times(v))

    @property
    def LMi(self):
        """L_M^{-1}, computed once."""
        if self._LMi is None:
            self._LMi = inv_lower(self.LM)
        return self._LMi

    @property
    def H(self):
        """H_k = L_M^{-1} E_k, c Fortran-ordered (n, n) arrays, computed once: the
        transposes of the slots of one C-ordered stack ``_Ht`` (Ht[k, i, :] = H_k[:, i]).

        With ``rough_gradient`` and cond(L_M) <= ``MAX_COND_ROUGH_GRADIENT`` (LAPACK's
        estimate), by single-precision triangular products (``_single_H``; H_k itself is
        then float32, and so are the gradient's products with it): errors about
        6e-8 cond(L_M) relative to |E_k|. A rough posterior's (``rough_covariances``) are
        always single."""
        self._exact(covariances=True)
        if self._H is None:
            self.rough_H = bool(self.rough or self.rough_gradient and self._suits_single())
            if self.rough_H:  # kept in single precision: its readers promote as they go
                Ht = _single_H(self.LMi, self.E)
            else:
                Ht = self.E.copy()  # E_k symmetric: the Fortran view Ht[k].T holds E_k
                for k in range(Ht.shape[0]):
                    lapack.triangular_left(self.LMi, Ht[k].T, 1.0, False, False)
            self._Ht, self._H = Ht, [Ht[k].T for k in range(Ht.shape[0])]
        return self._H

    def _suits_single(self):
        rcond, info = dtrcon(self.LM, norm="1", uplo="L")
        return info == 0 and rcond * self.MAX_COND_ROUGH_GRADIENT >= 1.0

    def kernel_gradient(self, outer, scale_R):
        r"""G_k = sum_t c_t (x_tk y_tk^T + y_tk x_tk^T) / 2 + scale_R R_kk for every class: the
        gradient in each K_k (as ``structures.dense``'s, with (c, n) vectors). (c, n, n).

        R_kk = (K + W^{-1})^{-1}_{kk} = E_k - E_k M^{-1} E_k = E_k - H_k^T H_k, the only
        blocks of R a block-diagonal K needs; H_k^T H_k by BLAS dsyrk (half the flops of a
        product; ssyrk where H was formed in single precision, ``rough_gradient``; both
        with the GIL released, ``numerics.lapack``), the rest in one compiled pass.
        """
        self._exact()
        X = np.array([np.asarray(x, dtype=float) for x, _, _ in outer])  # (t, c, n)
        Y = np.array([np.asarray(y, dtype=float) for _, y, _ in outer])
        coef = np.array([float(w) for _, _, w in outer])
        H = self.H  # (decides rough_H)
        out = np.empty_like(self.E)
        n = self.E.shape[1]
        # its lower triangle: H_k^T H_k (in H's precision; the pass promotes it, and reads
        # nothing above the diagonal, which syrk leaves unwritten)
        HtH = np.empty((n, n), H[0].dtype, order="F")
        for k, Hk in enumerate(H):
            lapack.syrk_lower(1.0, Hk, 0.0, HtH, True)
            _block_gradient(self.E[k], HtH, np.ascontiguousarray(X[:, k]), np.ascontiguousarray(Y[:, k]),
                            coef, float(scale_R), out[k])
        return out

    def site_covariances(self):
        r"""The c x c posterior covariance of f_i = (f_1(x_i), ..., f_c(x_i)) for every i: (n, c, c).

        Sigma = K - K (K + W^{-1})^{-1} K: block (k, l) has diagonal
        delta_kl diag(K_k - K_k E_k K_k) + diag(K_k E_k M^{-1} E_l K_l). The first term is
        the marginal variance of class k's own posterior (K_k^{-1} + D_k)^{-1}
        (``LatentPosterior.var_diag``, O(n^2)); the second is diag(G_k^T G_l) with
        G_k = L_M^{-1} E_k K_k, formed without the product: E_k K_k = I - E_k D_k^{-1}
        (E_k D_k^{-1} = D^{1/2} B_k^{-1} D^{-1/2}, and I - B_k^{-1} = B_k^{-1} D^{1/2} K_k
        D^{1/2}), so G_k = L_M^{-1} - H_k D_k^{-1}, O(n^2) given H_k. Where d_j K_jj is
        small the subtraction loses digits (as for the binary marginal variances,
        ``structures.dense``): those columns are H_k K_k[:, j] by a product. The c (c + 1) / 2
        column dot products per i run in one compiled pass (``_site_covariance_blocks``).
        A rough posterior (``rough_covariances``) forms them from its single-precision
        factors, for the sweeps of nested EP that do not end it.
        """
        self._exact(covariances=True)
        c, n = self.d.shape
        own = self._own if self.rough else np.array([b.var_diag() for b in self.blocks])  # (c, n)
        H = self.H
        direct = self.d * np.diagonal(self.K, axis1=1, axis2=2) < IDENTITY_MIN  # the product's columns
        index = np.full((c, n), -1, dtype=np.int64)
        index[direct] = np.arange(np.count_nonzero(direct))
        Gd = np.concatenate([(H[k] @ self.K[k][:, direct[k]]).T for k in range(c)] + [np.empty((0, n))])
        S = _site_covariance_blocks(self.LMi, self._Ht, self.d, index, np.ascontiguousarray(Gd))
        S[:, np.arange(c), np.arange(c)] += own.T
        return S

    def predict(self, a, K_cross, k_star, full_cov=False):
        """Latent predictive at m new points (R&W Alg. 3.4).

        K_cross : (c, n, m); k_star : (c, m) prior variances, or (c, m, m) with ``full_cov``.
        Returns mean (c, m) and covariance (m, c, c), or (c m, c m) class-major with ``full_cov``.
        """
        self._exact()
        c, _, m = K_cross.shape
        mean = _times(np.transpose(K_cross, (0, 2, 1)), a)
        P = self.E @ K_cross  # E_k k_k*
        Q = np.array([lower_times(self.LMi, Pk) for Pk in P])
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
