r"""The inducing-point (FITC) prior: K ~ Q + Lambda in O(n m^2) time and O(n m) memory.

Snelson & Ghahramani (2006); for EP classification Naish-Guzman & Holden (2008) and
GPML's ``apxSparse`` / ``infFITC_EP``. With m inducing inputs Xu,

.. math::

    \tilde K = Q + \Lambda, \quad Q = K_{fu} K_{uu}^{-1} K_{uf} = V^T V, \quad
    V = L_{uu}^{-1} K_{uf}, \quad \Lambda = \mathrm{diag}(k_{ff} - \mathrm{diag}\, Q),

with K_uu = L_uu L_uu^T. No n x n matrix is ever formed. Generatively, f = V^T z + e
with z ~ N(0, I_m) and e ~ N(0, Lambda) independent, which gives every formula below:
given Gaussian sites of precision w (EP's tau, Laplace's W), f_i | z has precision
1/Lambda_i + w_i, and the sites act on z with the effective precisions

.. math::

    d_i = \frac{w_i}{1 + w_i \Lambda_i} = w_i g_i, \qquad
    A = I_m + V \mathrm{diag}(d) V^T = L_A L_A^T \quad (\text{posterior precision of } z),

so that (Woodbury, with D = Lambda + W^{-1}, D^{-1} = diag(d)):

* R = (K~ + W^{-1})^{-1} = diag(d) - diag(d) V^T A^{-1} V diag(d);
* Sigma = (K~^{-1} + W)^{-1} = diag(g Lambda) + diag(g) V^T A^{-1} V diag(g);
* |B| = |I + W^{1/2} K~ W^{1/2}| = prod_i (1 + w_i Lambda_i) |A|;
* (I + W K~)^{-1} v = g v - d V^T A^{-1} V (g v) (the EP/Newton weights).

These stay finite at w_i = 0, and hold for negative w_i (the step likelihood's EP sites)
as long as 1 + w_i Lambda_i > 0 and A is positive definite, which is exactly when
K~^{-1} + W is (the joint precision of (z, f) and its Schur complements).

Gradient. Given the gradient G = dlog Z / dK~ of an evidence in the FITC covariance
(EP: (b b^T - R)/2; Laplace: its implicit term added, see ``approximations.laplace``),
with Bu = K_uu^{-1} K_uf and G' = G - diag(diag G) (diag Q cancels in K~'s diagonal):

.. math::

    \frac{\partial}{\partial K_{uf}} = 2 B_u G', \qquad
    \frac{\partial}{\partial K_{uu}} = -B_u G' B_u^T, \qquad
    \frac{\partial}{\partial k_{ff}} = \mathrm{diag}\, G,

(differentiate tr(G' dQ) with dQ = dK_fu Bu + Bu^T dK_uf - Bu^T dK_uu Bu). G is
a sum of a few outer products and a multiple of R, so Bu G' costs O(n m^2). Where
Lambda_i is clipped at zero (k_ff,i < Q_ii by rounding), K~_ii = Q_ii and d/dk_ff,i = 0.

Ill-conditioned K_uu: the Cholesky factorisation is retried with a jitter of 1e-10, ...,
1e-2 times mean diag(K_uu) (``FITCPrior.jitter``); the gradient is exact for the jittered
K_uu. Beyond 1e-2 the ``LinAlgError`` propagates (the Op: -inf, status 2).
"""

from collections import namedtuple

import numpy as np
from scipy.linalg import cho_solve
from scipy.linalg.lapack import dtrcon, dtrtri
from numba import njit

from ..numerics import lapack
from ..numerics.workspace import POOL
from .dense import NotPositiveDefiniteError, chol_lower

FITCGradient = namedtuple("FITCGradient", ["Kuu", "Kuf", "k_diag"])
FITCGradient.__doc__ = """d log Z / d(K_uu, K_uf, diag K_ff) of an evidence with the FITC prior.

What an approximation returns as ``dlog_z_dK`` when its ``K`` is a ``FITCPrior``; PyTensor's
autodiff carries the three pieces into the kernel's hyperparameters and the inducing inputs.

Examples
--------
>>> res = pymc_gpc.ep(prior, y, Probit())   # doctest: +SKIP
>>> res.dlog_z_dK.Kuu.shape, res.dlog_z_dK.Kuf.shape, res.dlog_z_dK.k_diag.shape  # doctest: +SKIP
((m, m), (m, n), (n,))
"""

# Relative jitters tried, in turn, when K_uu has no Cholesky factor.
_JITTER_FALLBACK = (0.0, 1e-10, 1e-8, 1e-6, 1e-4, 1e-2)


def _chol_with_jitter(Kuu):
    """(L_uu, jitter): the Cholesky factor of K_uu + jitter I, with the smallest jitter
    of ``_JITTER_FALLBACK`` (relative to mean diag K_uu) that works."""
    scale = max(float(np.mean(np.diag(Kuu))), 1e-300)
    for rel in _JITTER_FALLBACK:
        jitter = rel * scale
        try:
            return chol_lower(Kuu + jitter * np.eye(Kuu.shape[0])), jitter
        except NotPositiveDefiniteError:
            continue
    raise NotPositiveDefiniteError(
        f"K_uu has no Cholesky factor even with a jitter of {_JITTER_FALLBACK[-1]:g} x mean diag: "
        "check the inducing inputs (duplicates?) and the covariance function")


class _TriangularFactor:
    """A lower-triangular factor L applied as L^{-1} B or L^{-T} B to many right-hand sides.

    Where L is well conditioned (LAPACK's 1-norm condition estimate <= ``MAX_COND``) L^{-1} is
    formed once and applied by dtrmm, faster than dtrsm with many right-hand sides, with a
    rounding error of about cond(L) times the unit roundoff; otherwise by triangular solves.
    A float32 B is handled in single precision.
    """

    MAX_COND = 1e6

    def __init__(self, L):
        self.L = L
        self._inv = self._single = None
        rcond, info = dtrcon(L, norm="1", uplo="L")
        self.rcond = rcond if info == 0 else 0.0  # 1 / (estimated 1-norm condition number)
        self.by_inverse = self.rcond * self.MAX_COND >= 1.0

    def inverse(self):
        """L^{-1} (computed once)."""
        if self._inv is None:
            inv, info = dtrtri(self.L, lower=1)
            if info != 0:
                raise NotPositiveDefiniteError(f"the triangular factor is singular (dtrtri info {info})")
            self._inv = inv
        return self._inv

    def solve(self, B, trans=0, alpha=1.0):
        """alpha L^{-1} B (alpha L^{-T} B with trans=1), in place where B is a Fortran-ordered float64
        or float32 array (or a block of columns of one), else on a Fortran-ordered float64 copy.
        """
        if B.dtype == np.float32:
            if self._single is None:
                self._single = np.asfortranarray(self.inverse() if self.by_inverse else self.L, dtype=np.float32)
            T = self._single
        else:
            T = np.asfortranarray(self.inverse() if self.by_inverse else self.L)
            B = np.asarray(B, dtype=np.float64)
        if not B.flags.f_contiguous:
            B = np.asfortranarray(B)
        lapack.triangular_left(T, B, alpha, bool(trans), not self.by_inverse)
        return B


def _column_blocks(m, n):
    """Slices of about 1 MB of columns of an m x n array: the O(n m^2) products run over them so
    that no m x n temporary (a fresh mapping, costly to first touch) is made.
    """
    step = max(256, (1 << 17) // max(m, 1))
    return [slice(j, min(j + step, n)) for j in range(0, n, step)]


def _in_place(view, result):
    """``view`` holding ``result`` (a BLAS call with overwrite may have returned a copy)."""
    if not np.may_share_memory(view, result):
        view[...] = result
    return view


@njit(nogil=True, cache=True)
def _gradient_block_terms(P, E, e, V, g, Vxy, xy, root_h, scaled):
    """In one pass over a column block: P = E diag(e) - V diag(g) + Vxy xy, and
    scaled = V diag(root_h) (``FITCPosterior.kernel_gradient``; four NumPy/BLAS passes
    otherwise)."""
    m, b = V.shape
    for j in range(b):  # column by column, each loop over i contiguous (Fortran order)
        ej, gj, rj = e[j], g[j], root_h[j]
        for i in range(m):
            P[i, j] = E[i, j] * ej - V[i, j] * gj
            scaled[i, j] = V[i, j] * rj
        for k in range(xy.shape[0]):
            xkj = xy[k, j]
            for i in range(m):
                P[i, j] += Vxy[i, k] * xkj


def _solve_columns(factor, B, keep=True, single=None):
    """(L^{-1} B, squared column norms of L^{-1} B) for a ``_TriangularFactor`` L, in one
    pass over column blocks of B (each block's norms taken while it is still in cache).
    With ``keep=False`` only the norms are wanted: L^{-1} B is not kept (None), and the
    blocks pass through one block-sized buffer. ``single``: a float32 array of B's shape
    into which each block of B is rounded and solved in single precision, the result then
    kept in float64 (the norms of the rounded result, in double)."""
    blocks = _column_blocks(*B.shape)
    width = blocks[0].stop if blocks else 0
    dtype = np.float64 if single is not None else B.dtype
    X = POOL.empty((B.shape[0], B.shape[1]), dtype) if keep else np.empty((B.shape[0], width), dtype, order="F")
    col_sq = np.empty(B.shape[1])
    for cols in blocks:
        Xb = X[:, cols] if keep else X[:, :cols.stop - cols.start]
        if single is None:
            Xb[...] = B[:, cols]
            Xb = _in_place(Xb, factor.solve(Xb))  # in place (an F-contiguous block)
        else:
            Sb = single[:, cols]
            Sb[...] = B[:, cols]
            Xb[...] = _in_place(Sb, factor.solve(Sb))
        col_sq[cols] = np.einsum("ij,ij->j", Xb, Xb)
    return (X if keep else None), col_sq


def _inducing_precision(V, d, blockwise=False):
    """A = I + V diag(d) V^T (lower triangle, Fortran-ordered, in V's precision),
    accumulated over column blocks (syrk where d >= 0, else a product with the signed
    weights). ``blockwise`` (a float32 V, d >= 0): each block's syrk in single precision,
    their sum in double (a float64 A)."""
    m, n = V.shape
    A = np.asfortranarray(np.eye(m, dtype=np.float64 if blockwise else V.dtype))
    block = np.zeros((m, m), dtype=V.dtype, order="F") if blockwise else None
    d = d.astype(V.dtype, copy=False)
    for cols in _column_blocks(m, n):
        Vb, db = np.asfortranarray(V[:, cols]), d[cols]
        if block is not None:
            lapack.syrk_lower(1.0, np.asfortranarray(Vb * np.sqrt(db)), 0.0, block, False)
            A += block
        elif np.min(db, initial=0.0) >= 0.0:
            lapack.syrk_lower(1.0, np.asfortranarray(Vb * np.sqrt(db)), 1.0, A, False)
        else:
            lapack.gemm(1.0, np.asfortranarray(Vb * db), Vb, 1.0, A, True)
    return A


class NonFiniteKernelError(ValueError):
    """A prior structure given kernel values that are NaN or inf (e.g. a lengthscale of 0):
    the objective is -inf there, which a point estimate's line search may step back from."""


class FITCPrior:
    r"""The FITC prior covariance :math:`\tilde K = Q + \Lambda` (module docstring), never formed.

    Parameters
    ----------
    Kuu : (m, m) covariance of the inducing values (any jitter already added).
    Kuf : (m, n) cross-covariance between inducing and training inputs.
    k_diag : (n,) prior variances diag K_ff.
    single : :math:`V = L_{uu}^{-1} K_{uf}` formed in single precision (then kept in double too) where
        cond(L_uu) <= ``MAX_COND_SINGLE_V``: for EP at the sampler's tolerances (the evidence
        Op asks for it there), whose posteriors and gradient round V to single anyway.

    Examples
    --------
    >>> import numpy as np, pymc_gpc
    >>> from pymc_gpc.structures import FITCPrior
    >>> X = np.linspace(-2, 2, 200)[:, None]
    >>> Xu = np.linspace(-2, 2, 10)[:, None]
    >>> k = lambda A, B: np.exp(-0.5 * (A - B.T) ** 2)
    >>> prior = FITCPrior(k(Xu, Xu) + 1e-8 * np.eye(10), k(Xu, X), np.ones(200))
    >>> res = pymc_gpc.ep(prior, np.sign(X[:, 0] + 0.1), pymc_gpc.likelihoods.Probit())
    >>> type(res.dlog_z_dK).__name__
    'FITCGradient'
    """

    sequential = False  # no rank-one sequential EP sweeps (they need the dense Sigma)
    single_posteriors = True  # ``posterior(w, single=True)`` (``FITCPosterior``)

    # V in single precision (``single=True``) where cond(L_uu) is at most this (LAPACK's estimate):
    # V's entries then carry relative errors of about 1e-7 cond(L_uu) or less (measured: 5e-6
    # at 240). Along a NUTS path at 50,000 rows (cond 4e3 to 1.5e4) the log posterior moved
    # from 1.5e-3 to 4.6e-3 nats (medians) from a tight solve's, its gradient not at all, for
    # a tenth of each evaluation's CPU (docs/design/engine_notes.md, "FITC structure")
    MAX_COND_SINGLE_V = 2e4

    def __init__(self, Kuu, Kuf, k_diag, single=False):
        Kuu, Kuf, k_diag = (np.asarray(a, dtype=float) for a in (Kuu, Kuf, k_diag))
        m, n = Kuf.shape
        if Kuu.shape != (m, m) or k_diag.shape != (n,):
            raise ValueError(f"FITC shapes do not match: Kuu {Kuu.shape}, Kuf {Kuf.shape}, k_diag {k_diag.shape}")
        for name, arr in (("Kuu", Kuu), ("Kuf", Kuf), ("k_diag", k_diag)):
            if not np.all(np.isfinite(arr)):
                raise NonFiniteKernelError(f"{name} contains NaN or inf")
        if n and np.min(k_diag) < 0.0:
            raise ValueError(f"k_diag has a negative entry ({np.min(k_diag):.3g}): not a covariance")
        self.n, self.m = n, m
        L_uu, self.jitter = _chol_with_jitter(0.5 * (Kuu + Kuu.T))
        self.L_uu = _TriangularFactor(L_uu)
        self._V_single = None
        if single and self.L_uu.rcond * self.MAX_COND_SINGLE_V >= 1.0:
            self._V_single = POOL.empty((m, n), np.float32)
        self.V, q_diag = _solve_columns(self.L_uu, Kuf, single=self._V_single)
        self.unclipped = k_diag > q_diag
        self.lam = np.where(self.unclipped, k_diag - q_diag, 0.0)
        self._diag = self.lam + q_diag

    def diag(self):
        """diag K~ (the prior variances)."""
        return self._diag

    def matvec(self, v):
        r""":math:`\tilde K v`."""
        return self.lam * v + self.V.T @ (self.V @ v)

    def posterior(self, w, rough=False, single=False):
        """q(f) at site precisions w (``FITCPosterior``); ``rough`` and ``single``: see there."""
        return FITCPosterior(self, w, rough=rough, single=single)

    def V_single(self):
        """V in float32 (computed once; rough posteriors)."""
        if self._V_single is None:
            self._V_single = POOL.empty(self.V.shape, np.float32)
            self._V_single[...] = self.V
        return self._V_single

    def dense(self):
        """K~ as an n x n matrix (for tests and small problems only)."""
        return self.V.T @ self.V + np.diag(self.lam)

    def cross(self, Kus):
        r""":math:`V_* = L_{uu}^{-1} K_{u*}` for new inputs (prediction)."""
        return self.L_uu.solve(np.array(Kus, dtype=float, order="F"))

    def inducing_weights(self, M):
        r"""Bu-type products: :math:`K_{uu}^{-1} K_{uf} = L_{uu}^{-\top} V` (or :math:`L_{uu}^{-\top} M` for any M)."""
        return self.L_uu.solve(np.array(M, dtype=float, order="F"), trans=1)


class FITCPosterior:
    """q(f) = N(K~ a, (K~^{-1} + diag(w))^{-1}) for the FITC prior, through A = I + V diag(d) V^T.

    The members of ``structures.base.LatentPosterior`` (formulas: module docstring), O(n m^2)
    for the factorisation and O(n m) per solve. An exact double posterior takes the marginal
    variances from E = A^{-1} V (``_precision_columns``), which the gradient reuses.

    ``rough=True`` (where every site precision is >= 0 and cond(L_A) <= ``MAX_COND_ROUGH``)
    forms A and L_A^{-1} V in single precision: the variances carry relative errors of about
    1e-7 cond(L_A), the means and weights are exact for the rounded A; no gradient. For EP
    sweeps that do not end the iteration (``approximations.ep._parallel``).

    ``single=True`` (every site precision >= 0, cond(L_A) <= ``MAX_COND_SINGLE``) is an exact
    posterior whose m^2 n products run in single precision: each column block's syrk of A
    summed in double, W = L_A^{-1} V for the variances, and E = L_A^{-T} W only when the
    gradient asks (``_precision_E``), with L_A^{-1} rounded to single. Until then it costs what a
    rough one does, so it serves sweeps that may not be the last as well. A's Cholesky factor,
    the means, weights and log-determinant are double; the variances carry absolute errors of
    about 1e-7 ||V_i||^2 <= 1e-7 k_ii. For EP at the sampler's tolerance, whose gradient is
    rounded alike (``kernel_gradient``'s ``rough``). With both flags: single where cond(L_A)
    allows, else rough where it allows, else double.
    """

    # E = A^{-1} V by dgemm with the explicit A^{-1} where cond(L_A) is at most this
    # (cond A <= 1e8: relative error below 1e-8), else two triangular solves
    MAX_COND_INVERSE = 1e4
    # Rough posteriors where cond(L_A) is at most this: the variances' relative error is
    # then at most about 6e-3, below the sampler's tol 1e-2
    MAX_COND_ROUGH = 1e5
    # Rough gradients where cond(L_uu) is at most this (figures for the three limits:
    # docs/design/engine_notes.md, "FITC structure")
    MAX_COND_ROUGH_GRADIENT = 1e6
    # single-precision exact posteriors where cond(L_A) is at most this (the variances' relative
    # error measured at most 1e-4 up to cond(L_A) 1.5e4; docs/design/engine_notes.md)
    MAX_COND_SINGLE = 5e3

    def __init__(self, prior, w, rough=False, single=False):
        self.prior = prior
        self.w = np.asarray(w, dtype=float)
        denom = 1.0 + self.w * prior.lam
        if np.min(denom, initial=1.0) <= 0.0:
            raise NotPositiveDefiniteError("K~^-1 + W is not positive definite (1 + w_i Lambda_i <= 0)")
        self.g = 1.0 / denom
        self.d = self.w * self.g
        self._log_denom = np.log(denom)
        nonnegative = np.min(self.w, initial=0.0) >= 0.0
        self.single = bool(single) and nonnegative and self._factor_single(True, self.MAX_COND_SINGLE)
        self.rough = (bool(rough) and nonnegative and not self.single
                      and self._factor_single(False, self.MAX_COND_ROUGH))
        if not (self.rough or self.single):
            self._A = _inducing_precision(prior.V, self.d)  # lower triangle (the gradient's A - I)
            self.L_A = chol_lower(self._A.copy(order="F"), overwrite=True)
            # (NotPositiveDefiniteError exactly when K~^-1 + W is indefinite)
            self.A_factor = _TriangularFactor(self.L_A)
        self._E = self._W = self._c_sq_cached = self._A_inv = None
        self._last_v = self._last_mw = None

    def _factor_single(self, blockwise, max_cond):
        """Factorise A formed from V in single precision (``_inducing_precision``: summed in
        single, or per block in double with ``blockwise``, then kept as the gradient's A);
        whether that succeeded with cond(L_A) <= ``max_cond``, else the caller forms A in double."""
        try:
            A = _inducing_precision(self.prior.V_single(), self.d, blockwise=blockwise)
            if blockwise:
                self._A = A
            self.L_A = chol_lower(A.astype(float) if not blockwise else A.copy(order="F"), overwrite=True)
        except NotPositiveDefiniteError:  # rounding beyond A's unit eigenvalue floor
            return False
        self.A_factor = _TriangularFactor(self.L_A)
        return self.A_factor.rcond * max_cond >= 1.0

    def _precision_columns(self):
        """||L_A^{-1} V_i||^2 for every i, and (exact double posteriors) E = A^{-1} V, over column
        blocks.

        Rough: the column norms of L_A^{-1} V in single precision. Single: W = L_A^{-1} V in
        float32 (by ``_TriangularFactor``'s single-precision L_A^{-1}), kept for
        ``_precision_E``, and its column norms: m^2 n flops, what a rough posterior costs,
        where E by sgemm would cost 2 m^2 n for a posterior that may not be the last. Exact: E by
        dgemm with A^{-1} where cond(L_A) <= ``MAX_COND_INVERSE``, else by two triangular solves
        (negative sites can bring A near singular); the norms are V_i . E_i.
        """
        if self.rough or self.single:
            self._W, self._c_sq_cached = _solve_columns(self.A_factor, self.prior.V_single(), keep=self.single)
            return
        V = self.prior.V
        E, c_sq = POOL.empty(V.shape, V.dtype), np.empty(V.shape[1])
        A_inv = self._A_inverse() if self.A_factor.rcond * self.MAX_COND_INVERSE >= 1.0 else None
        for cols in _column_blocks(*V.shape):
            Vb, Eb = V[:, cols], E[:, cols]
            if A_inv is not None:
                lapack.gemm(1.0, A_inv, np.asfortranarray(Vb), 0.0, Eb, False)
            else:
                Eb[...] = Vb
                _in_place(Eb, self.A_factor.solve(Eb))
                _in_place(Eb, self.A_factor.solve(Eb, trans=1))
            c_sq[cols] = np.einsum("ij,ij->j", Vb, Eb)
        self._E, self._c_sq_cached = E, c_sq

    def _precision_E(self):
        """E = A^{-1} V (computed once; the gradient's): a single posterior's as L_A^{-T} W from
        ``_precision_columns``'s W = L_A^{-1} V, in W's array (m^2 n flops in float32)."""
        if self._E is None and self._W is None:
            self._precision_columns()
        if self._E is None:
            E, self._W = self._W, None
            for cols in _column_blocks(*E.shape):
                _in_place(E[:, cols], self.A_factor.solve(E[:, cols], trans=1))
            self._E = E
        return self._E

    def _A_inverse(self):
        """A^{-1} (m, m, symmetric; computed once)."""
        if self._A_inv is None:
            self._A_inv = np.asfortranarray(self._A_solve(np.eye(self.prior.m)))
        return self._A_inv

    def _A_solve(self, x):
        return cho_solve((self.L_A, True), x, check_finite=False)

    def _low_rank(self, s, v):
        """diag(s) V^T A^{-1} V diag(s) v."""
        V = self.prior.V
        return s * (V.T @ self._A_solve(V @ (s * v)))

    def half_logdet_B(self):
        """(1/2) log|I + W^{1/2} K~ W^{1/2}| = (1/2) sum log(1 + w Lambda) + sum log diag L_A."""
        return float(0.5 * np.sum(self._log_denom) + np.sum(np.log(np.diag(self.L_A))))

    def weights(self, v):
        """(I + W K~)^{-1} v = g v - d V^T A^{-1} V (g v); the mean is K~ times this."""
        return self.mean_and_weights(v)[1]

    def mean_and_weights(self, v):
        """(K~ b, b) for b = ``weights(v)`` in two products with V instead of four: with
        u = V (g v) and z = A^{-1} u, b = g v - d V^T z, and V b = u - (A - I) z = z (as
        V D V^T = A - I), so K~ b = Lambda b + V^T z."""
        v = np.asarray(v, dtype=float)
        if self._last_v is None or not np.array_equal(v, self._last_v):  # EP asks twice at its last sweep
            V = self.prior.V
            gv = self.g * v
            Vt_z = V.T @ self._A_solve(V @ gv)
            b = gv - self.d * Vt_z
            self._last_v, self._last_mw = v.copy(), (self.prior.lam * b + Vt_z, b)
        mean, b = self._last_mw
        return mean.copy(), b.copy()

    def R_times(self, v):
        """(K~ + W^{-1})^{-1} v."""
        return self.d * v - self._low_rank(self.d, v)

    def sigma_times(self, v):
        """(K~^{-1} + W)^{-1} v."""
        return self.g * self.prior.lam * v + self._low_rank(self.g, v)

    def _c_sq(self):
        """||L_A^{-1} V_i||^2 for every i (computed once)."""
        if self._c_sq_cached is None:
            self._precision_columns()
        return self._c_sq_cached

    def var_diag(self):
        """diag Sigma = g Lambda + g^2 ||L_A^{-1} V_i||^2, floored at a tiny positive value."""
        var = self.g * self.prior.lam + self.g**2 * self._c_sq()
        return np.maximum(var, 1e-14 * np.maximum(self.prior.diag(), 1e-300))

    def covariance_factors(self):
        """(a0, U) with Sigma = diag(a0) + U U^T: a0 = g Lambda, U = (L_A^{-1} V diag(g))^T (n x m;
        the module docstring's Sigma). For EM-EP's M-step bound (``point_estimates``)."""
        if self.rough:
            raise RuntimeError("a rough (single-precision) FITC posterior has no covariance factors")
        C = self.A_factor.solve(np.asfortranarray(self.prior.V * self.g))
        return self.g * self.prior.lam, np.ascontiguousarray(C.T)

    def R_diag(self):
        return self.d - self.d**2 * self._c_sq()

    def kernel_gradient(self, outer, scale_R, rough=False):
        r"""d/d(K_uu, K_uf, k_diag) of an evidence whose gradient in K~ is
        G = sum_k c_k (x_k y_k^T + y_k x_k^T)/2 + scale_R R (module docstring).

        outer : sequence of (x, y, c).

        With Bu = L_uu^{-T} V, the module docstring's Bu G' is L_uu^{-T} P for

        .. math::

            P = s A^{-1} V D + \sum_k \tfrac{c_k}{2} (V x_k y_k^T + V y_k x_k^T) - V \mathrm{diag}(g'),

        (s = scale_R, D = diag(d), g' = diag G where Lambda is unclipped, else 0), since
        Bu R = L_uu^{-T} A^{-1} V D. As A^{-1} V D V^T = I - A^{-1},

        .. math::

            P V^T = s (I - A^{-1}) + \sum_k \tfrac{c_k}{2} (V x_k (V y_k)^T + V y_k (V x_k)^T)
                    - V \mathrm{diag}(g') V^T,

        and dK_uu = -L_uu^{-T} (P V^T) L_uu^{-1}. About 2 m^2 n flops over column blocks, P formed
        in one pass (``_gradient_block_terms``), the only m x n array made.

        ``rough=True`` runs the two m^2 n products in single precision where cond(L_uu) <=
        ``MAX_COND_ROUGH_GRADIENT`` (else double): for EP solves at the sampler's tolerances.
        """
        if self.rough:  # (``rough=True`` here rounds an exact posterior's gradient)
            raise RuntimeError("a rough (single-precision) FITC posterior has no gradient")
        prior = self.prior
        V, d, m = prior.V, self.d, prior.m
        diag_G = scale_R * self.R_diag()
        for x, y, c in outer:
            diag_G += c * x * y
        diag_G = np.where(prior.unclipped, diag_G, 0.0)
        # the rank-2 terms of P, as Vxy @ xy[:, cols]: sum_k c_k/2 (V x_k y_k^T + V y_k x_k^T)
        # (one product with V per distinct vector: EP's outer term is (b, b))
        Vx = [V @ x for x, y, c in outer]
        Vy = [vx if y is x else V @ y for (x, y, c), vx in zip(outer, Vx)]
        Vxy = np.column_stack([0.5 * c * v for (x, y, c), vx, vy in zip(outer, Vx, Vy) for v in (vx, vy)]
                              or [np.zeros(m)])
        xy = np.ascontiguousarray(np.vstack([v for x, y, c in outer for v in (y, x)] or [np.zeros(prior.n)]))
        E, E_d = self._precision_E(), scale_R * d
        dKuf = POOL.empty((m, prior.n))
        # S = V diag(g') V^T = scale_R (A - I) + V diag(h) V^T (V D V^T = A - I), h = g' - scale_R d:
        # one dsyrk over the n points where h >= 0 (EP's h = (d^2 ||C_i||^2 + b^2)/2), else two
        h = diag_G - E_d
        S = np.asfortranarray(np.tril(scale_R * (self._A - np.eye(m))))  # lower triangle (A may be full)
        signs = [(1.0, h > 0.0), (-1.0, h < 0.0)]
        signs = [(sign, None if part.all() else part) for sign, part in signs if part.any()]
        root_h = np.sqrt(np.abs(h))
        rough = rough and prior.L_uu.rcond * self.MAX_COND_ROUGH_GRADIENT >= 1.0
        width0 = _column_blocks(m, prior.n)[0].stop
        dtype = np.float32 if rough else np.float64
        scaled = np.empty((m, width0), dtype=dtype, order="F")
        block = np.empty((m, width0), dtype=dtype, order="F") if rough else None
        S32 = np.zeros((m, m), dtype=np.float32, order="F") if rough else None  # a block's syrk (lower)
        for cols in _column_blocks(m, prior.n):
            Vb, width = V[:, cols], cols.stop - cols.start
            # P (docstring) is formed in place (rough: in a single-precision buffer), then 2 L_uu^{-T} P
            P = dKuf[:, cols] if block is None else block[:, :width]
            _gradient_block_terms(P, E[:, cols], E_d[cols], Vb, diag_G[cols], Vxy, xy[:, cols],
                                  root_h[cols], scaled[:, :width])
            _in_place(P, prior.L_uu.solve(P, trans=1, alpha=2.0))
            if block is not None:
                dKuf[:, cols] = P
            for sign, part in signs:  # dsyrk needs one sign
                Vh = scaled[:, :width] if part is None else np.asfortranarray(
                    (Vb[:, part[cols]] * root_h[cols][part[cols]]).astype(dtype, copy=False))
                if rough:  # each block's single-precision sum accumulated in double
                    lapack.syrk_lower(sign, Vh, 0.0, S32, False)
                    S += S32
                else:
                    lapack.syrk_lower(sign, Vh, 1.0, S, False)
        PVt = -(S + np.tril(S, -1).T)
        for (x, y, c), vx, vy in zip(outer, Vx, Vy):  # sum_k c_k/2 (V x_k (V y_k)^T + V y_k (V x_k)^T)
            PVt += 0.5 * c * (np.outer(vx, vy) + np.outer(vy, vx))
        if scale_R != 0.0:
            PVt += scale_R * (np.eye(m) - self._A_inverse())
        dKuu = -prior.inducing_weights(prior.inducing_weights(PVt).T)  # -L_uu^{-T} (P V^T) L_uu^{-1}
        return FITCGradient(0.5 * (dKuu + dKuu.T), dKuf, diag_G)

    def ep_gradient(self, b, rough=False):
        """dlog Z_EP / d(K_uu, K_uf, k_diag), from dlog Z_EP / dK~ = (b b^T - R)/2;
        ``rough``: its m^2 n products in single precision (``kernel_gradient``)."""
        return self.kernel_gradient([(b, b, 0.5)], -0.5, rough=rough)

    def predict(self, a, Kus, k_diag_star):
        r"""Latent predictive mean and variance at new inputs, O(n_* m) memory.

        f_* = V_*^T z + e_*: mean Q_*f a = V_*^T (V a); variance
        k_** - ||V_*||^2 + ||L_A^{-1} V_*||^2 (Cov(z | y) = A^{-1}).

        Kus : (m, n_*) covariances between inducing and new inputs.
        k_diag_star : (n_*,) prior variances at the new inputs.
        """
        Vs = self.prior.cross(Kus)
        mean = Vs.T @ (self.prior.V @ a)
        Cs = self.A_factor.solve(Vs.copy(order="F"))
        var = k_diag_star - np.einsum("ij,ij->j", Vs, Vs) + np.einsum("ij,ij->j", Cs, Cs)
        return mean, np.maximum(var, 0.0)

    def predict_cov(self, a, Kus, K_star):
        """Mean and full covariance K_** - V_*^T (I - A^{-1}) V_* at new inputs."""
        Vs = self.prior.cross(Kus)
        Cs = self.A_factor.solve(Vs.copy(order="F"))
        cov = K_star - Vs.T @ Vs + Cs.T @ Cs
        return Vs.T @ (self.prior.V @ a), 0.5 * (cov + cov.T)
