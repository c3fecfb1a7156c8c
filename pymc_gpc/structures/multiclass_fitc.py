r"""Several classes with inducing-point (FITC) priors: q(f) through the inducing values.

Each class k has its own FITC prior (``structures.fitc``) with m inducing inputs,

.. math::

    \tilde K_k = Q_k + \Lambda_k, \quad Q_k = V_k^T V_k, \quad V_k = L_{uu,k}^{-1} K_{uf,k},
    \quad \Lambda_k = \mathrm{diag}(k_{ff,k} - \mathrm{diag}\, Q_k),

so f = P z + e with z ~ N(0, I_{cm}), e ~ N(0, Lambda) and P = blockdiag(V_1^T, ..., V_c^T).
The likelihood couples the c latent values of one observation,
W_i = diag(d_i) - d_i d_i^T / s_i (``structures.multiclass``). Integrating e out,
observation i acts on z through

.. math::

    \tilde W_i = W_i (I + \Lambda_i W_i)^{-1} = (W_i^{-1} + \Lambda_i)^{-1}, \qquad
    A = I_{cm} + P^T \tilde W P = L_A L_A^T,

A the posterior precision of z, with blocks V_k diag(W~_{kl}) V_l^T. Then (Woodbury;
T_i = (I + Lambda_i W_i)^{-1}):

* R = (K~ + W^{-1})^{-1} = W~ - W~ P A^{-1} P^T W~;
* (I + W K~)^{-1} v = v - R K~ v (Newton's next a; EP's b);
* \tfrac12 \log|I + \tilde K W| = \tfrac12 \sum_i \log|I + \Lambda_i W_i| + \log|L_A|;
* Sigma_i = T_i Lambda_i + T_i S_i T_i^T with S_i = P_i A^{-1} P_i^T;
* the predictive, with V_*k = L_uu,k^{-1} K_u*,k: mean_k = V_*k^T V_k a_k, covariance
  diag(k_**,k - |V_*k|^2) + P_* A^{-1} P_*^T.

Gradient: each class's is ``structures.fitc``'s with G_k the diagonal block of
dlog Z/dK~. Its only n x n piece has the closed form V_k R_kk = (A^{-1})_{k,:} Y_k, Y_k's
block l = V_l diag(W~_{lk}), and R_ii = W~_i - W~_i S_i W~_i; one pass of
F_l = (A^{-1})_{:,l} V_l over column blocks gives the site covariances, diag R and V_k R_kk.
W~_i = diag(delta_i) - q_i q_i^T with delta = d / (1 + lambda d) (``_effective_precision``),
so A - I = blockdiag(V_k diag(delta_k) V_k^T) - Q Q^T, Q the stacked V_k diag(q_k): one
dsyrk of Q below the diagonal and one per diagonal block (``_precision``).

Cost O(c^2 m^2 n) time per factorised posterior and O(c m n) memory; never an n x n or
cn x cn matrix. Softmax Laplace's later Newton steps solve with A by CG preconditioned with
the last factorised A (``FITCNewtonPreconditioner``). The members are those of
``structures.base``'s ``SolverPrior`` and ``MulticlassPosterior``.
"""

from collections import namedtuple

import numpy as np
from numba import njit
from scipy.linalg import cho_solve

from ..numerics import lapack
from ..numerics.workspace import POOL
from .dense import NotPositiveDefiniteError, chol_lower, inv_lower
from .fitc import FITCPrior, NonFiniteKernelError

MulticlassFITCGradient = namedtuple("MulticlassFITCGradient", ["Kuu", "Kuf", "k_diag"])
MulticlassFITCGradient.__doc__ = """d log Z / d(K_uu (c, m, m), K_uf (c, m, n), diag K_ff (c, n)): what
``softmax_laplace`` and ``multinomial_probit_ep`` return as ``dlog_z_dK`` for a
``MulticlassFITCPrior``."""

# Columns per block of the pass over the n observations: about this many floats in the
# c products F_l (c m x block each).
_BLOCK_FLOATS = 1 << 21


def _coupling(delta):
    """q_i = delta_i / sqrt(sum_k delta_ik) (c, n): W~_i = diag(delta_i) - q_i q_i^T."""
    return delta / np.sqrt(delta.sum(axis=0))


def _precision(V, delta):
    """A = I + P^T W~ P (lower triangle, Fortran-ordered; the strict upper triangle is not
    set) for W~_i = diag(delta_i) - q_i q_i^T (``_coupling``, ``_effective_precision``).

    The blocks below the diagonal are V_k diag(W~_kl) V_l^T = -Q_k Q_l^T with Q the stacked
    Q_k = V_k diag(q_k): one dsyrk of Q, (c m)^2 n flops, writes them (and diagonal blocks
    that are then replaced). Each diagonal block V_k diag(W~_kk) V_k^T is a dsyrk of its own,
    with W~_kk = delta_k (sum_{j != k} delta_j) / sum delta >= 0 summed without cancellation
    (``own_weights``), rather than V_k diag(delta_k) V_k^T - Q_k Q_k^T. Q comes from the
    package's pool of work arrays (``numerics.workspace``): a fresh (c m) x n array costs
    its first touch at every formation."""
    c, (m, n) = len(V), V[0].shape
    q = _coupling(delta)
    root = np.sqrt(own_weights(delta))
    Q = POOL.empty((c * m, n))
    for k in range(c):
        np.multiply(V[k], q[k], out=Q[k * m:(k + 1) * m])
    A = np.empty((c * m, c * m), order="F")
    lapack.syrk_lower(-1.0, Q, 0.0, A, False)
    del Q
    scaled, block = np.empty((m, n), order="F"), np.zeros((m, m), order="F")
    for k in range(c):
        rows = slice(k * m, (k + 1) * m)
        np.multiply(V[k], root[k], out=scaled)
        lapack.syrk_lower(1.0, scaled, 0.0, block, False)
        A[rows, rows] = block
    A[np.diag_indices(c * m)] += 1.0
    return A


def own_weights(delta):
    """W~_kk,i = delta_ik sum_{j != k} delta_ij / sum_j delta_ij (c, n), the sum over the
    other classes formed directly (no difference of nearly equal numbers)."""
    c = len(delta)
    others = np.array([sum(delta[j] for j in range(c) if j != k) for k in range(c)])
    return delta * others / delta.sum(axis=0)


def _effective_precision(prior, d):
    r"""W~_i = (I + W_i Lambda_i)^{-1} W_i (n, c, c), log|I + W_i Lambda_i| (n,) and delta (c, n)
    for the coupled weights d (c, n).

    For W_i = diag(d_i) - d_i d_i^T / s_i (s_i = sum_k d_ik) and Lambda_i = diag(lambda_i),
    Sherman-Morrison on I + Lambda_i W_i = E_i - Lambda_i d_i d_i^T / s_i, E_i = I + Lambda_i
    diag(d_i), gives W~ of the same form with d replaced by delta = d / (1 + lambda d):

    .. math::

        \tilde W_i = \mathrm{diag}(\delta_i) - \frac{\delta_i \delta_i^T}{\sum_k \delta_{ik}},
        \qquad \log|I + \Lambda_i W_i| = \sum_k \log(1 + \lambda_{ik} d_{ik})
            + \log \frac{\sum_k \delta_{ik}}{s_i}.
    """
    lam = prior.lam
    E = 1.0 + lam * d
    if not (np.all(E > 0.0) and np.all(np.isfinite(E))):
        raise NotPositiveDefiniteError("I + Lambda_i W_i is not positive definite")
    delta = d / E
    total = delta.sum(axis=0)
    logdet = np.sum(np.log(E), axis=0) + np.log(total / d.sum(axis=0))
    D = delta.T  # (n, c)
    Wt = D[:, :, None] * np.eye(prior.c) - D[:, :, None] * D[:, None, :] / total[:, None, None]
    return Wt, logdet, delta


def _Pt(prior, u):
    """P^T u = (V_k u_k)_k, stacked (c m,)."""
    return np.concatenate([prior.V[k] @ u[k] for k in range(prior.c)])


def _P(prior, z):
    """P z = (V_k^T z_k)_k, (c, n)."""
    m = prior.m
    return np.array([prior.V[k].T @ z[k * m:(k + 1) * m] for k in range(prior.c)])


def _Wt_times(Wt, v):
    """W~ v per observation, v (c, n)."""
    return np.einsum("ikl,li->ki", Wt, v)


@njit(nogil=True, cache=True, fastmath={"reassoc", "contract"})
def _precision_times(V, delta, q, x, out):
    """out = A x = x + P^T W~ P x (``_precision``'s A, W~_i = diag(delta_i) - q_i q_i^T) in
    one pass over the observations: each column of the V_k (Fortran-ordered, so contiguous)
    read once for both P x and P^T (W~ P x), instead of once for each."""
    c = len(V)
    m, n = V[0].shape
    p = np.empty(c)
    out[:] = x
    for i in range(n):
        qp = 0.0
        for k in range(c):
            Vk = V[k]
            acc = 0.0
            for r in range(m):
                acc += Vk[r, i] * x[k * m + r]
            p[k] = acc
            qp += q[k, i] * acc
        for k in range(c):
            Vk = V[k]
            w = delta[k, i] * p[k] - q[k, i] * qp
            for r in range(m):
                out[k * m + r] += Vk[r, i] * w


@njit(nogil=True, cache=True, fastmath={"reassoc", "contract"})
def _pass_columns(F, V, delta, q, start, width, S, VR):
    """The elementwise part of ``MulticlassFITCPosterior._column_pass`` for the columns
    start .. start + width of one block, given F[l, j] = ((A^{-1})_{:,l} V_l)[:, start + j]
    ((c, b, c m), each column contiguous): S_i's entries (S_i)_kl = V_k[:, i] . F_l[k-block]
    for l >= k (S_i is symmetric), and V_k R_kk's columns from W~_i = diag(delta_i) -
    q_i q_i^T (module docstring), (V_k R_kk)[:, i] = delta_ik F_k[k-block] -
    q_ik sum_l q_il F_l[k-block]. One read of each column of F while it is in cache, instead
    of one pass over the block per term."""
    c = F.shape[0]
    m = V[0].shape[0]
    qF = np.empty(m)
    for j in range(width):
        i = start + j
        for k in range(c):
            Vk = V[k]
            off = k * m
            for l in range(k, c):
                acc = 0.0
                for r in range(m):
                    acc += Vk[r, i] * F[l, j, off + r]
                S[i, k, l] = acc
                S[i, l, k] = acc
            qF[:] = 0.0
            for l in range(c):
                ql = q[l, i]
                for r in range(m):
                    qF[r] += ql * F[l, j, off + r]
            dk, qk = delta[k, i], q[k, i]
            VRk = VR[k]
            for r in range(m):
                VRk[r, i] = dk * F[k, j, off + r] - qk * qF[r]


@njit(nogil=True, cache=True, fastmath={"reassoc", "contract"})
def _site_columns(C, start, width, m, S):
    """S_i = C_i^T C_i for the columns start .. start + width of one block (``_site_blocks``),
    given C[k, j] = the column start + j of C_k = L_A^{-1} P_k^T ((c, b, c m); its entries
    above block k are zero and not read): (S_i)_kl = sum_{p >= l} C_k[p-block] . C_l[p-block]
    for l >= k, each column read while in cache."""
    c, cm = C.shape[0], C.shape[2]
    for j in range(width):
        i = start + j
        for k in range(c):
            for l in range(k, c):
                acc = 0.0
                for x in range(l * m, cm):
                    acc += C[k, j, x] * C[l, j, x]
                S[i, k, l] = acc
                S[i, l, k] = acc


@njit(nogil=True, cache=True, fastmath={"reassoc", "contract"})
def _gradient_columns(VR, V, g, left_t, right, scale, out):
    """out = scale VR - V diag(g) + left right for VR, V, out (m, n) Fortran-ordered,
    left_t = left^T (t, m), right (t, n): V_k G'_k of ``MulticlassFITCPosterior.kernel_gradient``
    in one pass over the columns."""
    m, n = V.shape
    t = left_t.shape[0]
    for i in range(n):
        gi = g[i]
        for r in range(m):
            out[r, i] = scale * VR[r, i] - V[r, i] * gi
        for s in range(t):
            w = right[s, i]
            for r in range(m):
                out[r, i] += left_t[s, r] * w


def _newton_rhs(prior, Wt, v):
    """P^T (v - W~ Lambda v), the right-hand side of ``_newton_weights``'s solve."""
    return _Pt(prior, v - _Wt_times(Wt, prior.lam * v))


def _newton_weights(prior, Wt, v, y):
    r"""(I + W K~)^{-1} v = v - W~ (Lambda v + P y) for y = A^{-1} P^T (v - W~ Lambda v)
    (``_newton_rhs``).

    This is v - R K~ v (module docstring) with K~ v = P P^T v + Lambda v and
    P^T W~ P = A - I: P^T W~ K~ v = (A - I) P^T v + P^T W~ Lambda v, so
    A^{-1} P^T W~ K~ v = P^T v - y and K~ v - P A^{-1} P^T W~ K~ v = Lambda v + P y.
    The solve's right-hand side is free of K~, whose large eigenvalues (up to n times a
    kernel amplitude) would otherwise enter it and, through an iterative solve's residual
    relative to it, the error of the Newton step (``FITCNewtonPreconditioner``).
    """
    return v - _Wt_times(Wt, prior.lam * v + _P(prior, y))


class FITCNewtonPreconditioner:
    r"""Newton steps at new weights without a new factorisation: (I + W K~)^{-1} v =
    v - R K~ v needs A^{-1} once, at A = I + P^T W~ P for the new W~; it is solved by
    conjugate gradients on A x = b preconditioned with an earlier posterior's L_A, each
    step O(c m n) (two products with the V_k) instead of A's O(c^2 m^2 n). Where the CG
    does not reach a relative residual of ``RTOL`` in ``MAX_STEPS`` steps, None (the
    solver then factorises, ``approximations.softmax_laplace``)."""

    RTOL = 1e-12
    MAX_STEPS = 40

    def __init__(self, prior, L_A):
        self.prior, self.L_A = prior, L_A

    def solve_other_weights(self, K_times, d, v, q, eps, eta=0.0, max_iter=20):
        """(I + W K~)^{-1} v at weights d (c, n), or None (class docstring).

        Stops where the residual of A x = b is below ``RTOL`` |b|. An inexact-Newton
        forcing term on the preconditioned residual (``eta``, as the dense structure's CG
        takes it) was tried and rejected: an error in x reaches f amplified by P (norm up
        to sqrt(n) times a kernel amplitude), the steps then failed the line search and the
        solver fell back to factorising. ``q``, ``eps``, ``eta`` and ``max_iter`` (the
        dense structure's CG settings) are not used; at most ``MAX_STEPS`` steps."""
        prior = self.prior
        try:
            Wt, _, delta = _effective_precision(prior, np.asarray(d, dtype=float))
        except NotPositiveDefiniteError:
            return None
        v = np.asarray(v, dtype=float)
        b = _newton_rhs(prior, Wt, v)
        q = delta / np.sqrt(delta.sum(axis=0))
        V = tuple(prior.V)

        def A_times(x):
            out = np.empty_like(x)
            _precision_times(V, delta, q, x, out)
            return out

        def precondition(r):
            return cho_solve((self.L_A, True), r, check_finite=False)

        x = precondition(b)
        r = b - A_times(x)
        z = precondition(r)
        p, rz = z, float(r @ z)
        stop = self.RTOL * float(np.linalg.norm(b))
        for _ in range(self.MAX_STEPS):
            if not np.linalg.norm(r) > stop:
                return _newton_weights(prior, Wt, v, x)
            Ap = A_times(p)
            pAp = float(p @ Ap)
            if not (pAp > 0.0 and np.isfinite(pAp)):
                return None
            alpha = rz / pAp
            x += alpha * p
            r -= alpha * Ap
            z = precondition(r)
            rz, rz_old = float(r @ z), rz
            p = z + (rz / rz_old) * p
        return None


def column_blocks(n, c, m):
    """The column blocks (slices of 0..n) of the passes over the n observations: about
    ``_BLOCK_FLOATS`` floats in the c products of c m rows each (at least 64 columns)."""
    step = max(64, _BLOCK_FLOATS // max(c * c * m, 1))
    return [slice(j, min(j + step, n)) for j in range(0, n, step)]


class MulticlassFITCPrior:
    r"""c independent FITC priors :math:`\tilde K_k = Q_k + \Lambda_k`, one per class (module docstring).

    Parameters
    ----------
    Kuu : (c, m, m) covariances of each class's inducing values (any jitter added).
    Kuf : (c, m, n) cross-covariances between each class's inducing inputs and the data.
    k_diag : (c, n) prior variances diag K_ff,k.

    Notes
    -----
    Each class's K_uu is factorised by ``structures.fitc.FITCPrior`` (with its jitter
    fallback, recorded per class in ``jitter``).
    """

    sequential = False

    def __init__(self, Kuu, Kuf, k_diag):
        Kuu, Kuf, k_diag = (np.asarray(a, dtype=float) for a in (Kuu, Kuf, k_diag))
        if Kuu.ndim != 3 or Kuf.ndim != 3 or k_diag.ndim != 2:
            raise ValueError(f"multi-class FITC needs Kuu (c, m, m), Kuf (c, m, n), k_diag (c, n); got "
                             f"{Kuu.shape}, {Kuf.shape}, {k_diag.shape}")
        c, m, n = Kuf.shape
        if Kuu.shape != (c, m, m) or k_diag.shape != (c, n):
            raise ValueError(f"multi-class FITC shapes do not match: Kuu {Kuu.shape}, Kuf {Kuf.shape}, "
                             f"k_diag {k_diag.shape}")
        if c < 2:
            raise ValueError(f"a multi-class model needs c >= 2 latent functions, got {c}")
        self.c, self.m, self.n = c, m, n
        self.classes = [FITCPrior(Kuu[k], Kuf[k], k_diag[k]) for k in range(c)]
        self.V = [np.asfortranarray(p.V) for p in self.classes]  # each (m, n), Fortran-ordered
        self.lam = np.array([p.lam for p in self.classes])  # (c, n)
        self.unclipped = np.array([p.unclipped for p in self.classes])
        self.jitter = [p.jitter for p in self.classes]
        self._diag = np.array([p.diag() for p in self.classes])

    def diag(self):
        """diag K~_k for every class, (c, n)."""
        return self._diag

    def matvec(self, v):
        r""":math:`\tilde K v = (\Lambda_k v_k + V_k^\top (V_k v_k))_k` for v (c, n)."""
        v = np.asarray(v, dtype=float)
        return np.array([self.lam[k] * v[k] + self.V[k].T @ (self.V[k] @ v[k]) for k in range(self.c)])

    __call__ = matvec

    def posterior(self, d, rough=False, rough_gradient=False):
        """q(f) at the coupled weights d (c, n) (``MulticlassFITCPosterior``); the rough
        flags are accepted for the solvers' sake and ignored (always exact: see there)."""
        return MulticlassFITCPosterior(self, d)

    def dense(self):
        """The (c, n, n) stack of K~_k (tests and small problems only)."""
        return np.array([p.dense() for p in self.classes])

    def cross(self, Kus):
        r"""The list of :math:`V_{*k} = L_{uu,k}^{-1} K_{u*,k}` for Kus (c, m, n*)."""
        return [p.cross(Kus[k]) for k, p in enumerate(self.classes)]

    def inducing_weights(self, k, M):
        r""":math:`L_{uu,k}^{-\top} M`."""
        return self.classes[k].inducing_weights(M)


class MulticlassFITCPosterior:
    """q(f) = N(K~ a, (K~^{-1} + W)^{-1}) for the multi-class FITC prior (module docstring).

    Parameters
    ----------
    prior : a ``MulticlassFITCPrior``.
    d : (c, n) non-negative weights, every column with a positive sum: W_i =
        diag(d_i) - d_i d_i^T / s_i (the softmax's pi; nested EP's outer-site weights).

    Always exact (``rough`` False): A formed in single precision for Newton's intermediate
    steps was tried and rejected, since A's condition number (its eigenvalues run from 1 to
    about n times the kernel amplitude) made the rounded directions slow Newton down
    (3 -> 10 warm steps at n = 10^4, c = 5, m = 200).
    """

    rough = False
    rough_H = False

    def __init__(self, prior, d):
        d = np.asarray(d, dtype=float)
        c, n, m = prior.c, prior.n, prior.m
        if d.shape != (c, n):
            raise ValueError(f"weights d have shape {d.shape}, the prior needs {(c, n)}")
        self.prior, self.K = prior, prior
        self.d = d
        self.s = d.sum(axis=0)
        if not np.all(self.s > 0.0) or np.min(d) < 0.0:
            raise NotPositiveDefiniteError("the coupled weights must be >= 0 with a positive sum per observation")
        self.Wt, logdet, delta = _effective_precision(prior, d)
        self._delta = delta
        self._half_logdet_sites = 0.5 * float(np.sum(logdet))
        self.L_A = chol_lower(self._capacitance(delta), overwrite=True)
        self._A_inv = None
        self._pass = self._S = None
        self._with_VR = False

    # -- factors ---------------------------------------------------------------------

    def _capacitance(self, delta):
        """A = I + P^T W~ P (``_precision``), to be factorised; a prior whose P has more
        structure forms it its own way (``multiclass_hsgp``)."""
        return _precision(self.prior.V, delta)

    @property
    def A_inv(self):
        """A^{-1} = L_A^{-T} L_A^{-1} (c m, c m), symmetric, computed once: dtrtri and dlauum
        (LAPACK's dpotri, 2 (c m)^3 / 3 flops) instead of two triangular solves with the
        identity (2 (c m)^3)."""
        if self._A_inv is None:
            Ai = inv_lower(self.L_A)
            if lapack.lauum_lower(Ai) != 0:
                raise NotPositiveDefiniteError("A^{-1}: dlauum failed")
            self._A_inv = Ai
        return self._A_inv

    def _Pt(self, u):
        return _Pt(self.prior, u)

    def _P(self, z):
        return _P(self.prior, z)

    def _Wt_times(self, v):
        return _Wt_times(self.Wt, v)

    # -- the solvers' questions ---------------------------------------------------------

    def half_logdet_B(self):
        r"""\tfrac12 \log|I + \tilde K W| (module docstring)."""
        return self._half_logdet_sites + float(np.sum(np.log(np.diag(self.L_A))))

    def K_times(self, v):
        return self.prior.matvec(v)

    def R_times(self, v):
        """(K~ + W^{-1})^{-1} v = W~ v - W~ P A^{-1} P^T W~ v, v (c, n)."""
        wv = self._Wt_times(np.asarray(v, dtype=float))
        z = cho_solve((self.L_A, True), self._Pt(wv), check_finite=False)
        return wv - self._Wt_times(self._P(z))

    def weights(self, v):
        """(I + W K~)^{-1} v = v - R K~ v (Newton's next a from v = W f + g; EP's b from h),
        by ``_newton_weights``."""
        v = np.asarray(v, dtype=float)
        y = cho_solve((self.L_A, True), _newton_rhs(self.prior, self.Wt, v), check_finite=False)
        return _newton_weights(self.prior, self.Wt, v, y)

    def mean_and_weights(self, v):
        """(K~ b, b) for b = ``weights(v)``."""
        b = self.weights(v)
        return self.K_times(b), b

    def preconditioner(self):
        """This posterior's L_A, to solve Newton steps at other weights by preconditioned CG
        (``FITCNewtonPreconditioner``)."""
        return FITCNewtonPreconditioner(self.prior, self.L_A)

    def _column_pass(self):
        """S_i = P_i A^{-1} P_i^T (n, c, c) and V_k R_kk (c arrays (m, n)) in one pass of
        F_l = (A^{-1})_{:,l} V_l over column blocks (module docstring); computed once."""
        if self._pass is None:
            prior = self.prior
            c, m, n = prior.c, prior.m, prior.n
            Ai, V = self.A_inv, prior.V
            q = _coupling(self._delta)
            S = np.empty((n, c, c))
            # each VR[k] Fortran-ordered as the V_k, in one reused array (``numerics.workspace``)
            VR = tuple(POOL.empty((c, n, m), order="C").transpose(0, 2, 1))
            blocks = column_blocks(n, c, m)
            F = np.empty((c, blocks[0].stop - blocks[0].start, c * m))  # F[l]'s columns contiguous
            for cols in blocks:
                width = cols.stop - cols.start
                for l in range(c):  # A^{-1} is symmetric: F_l^T = V_l^T (A^{-1})_{l,:}
                    np.matmul(V[l][:, cols].T, Ai[l * m:(l + 1) * m], out=F[l, :width])
                _pass_columns(F, tuple(V), self._delta, q, cols.start, width, S, VR)
            self._pass = S, list(VR)
        return self._pass

    def expect_gradient(self):
        """Announce a ``kernel_gradient``: the site covariances then come from the pass that
        also gives V_k R_kk (``_column_pass``), instead of the cheaper one without it
        (``_site_blocks``) followed by that pass."""
        self._with_VR = True

    def _site_blocks(self):
        """S_i = P_i A^{-1} P_i^T (n, c, c), computed once: from ``_column_pass`` where it was
        made or is announced (``expect_gradient``), else as dot products of the columns of
        C_k = L_A^{-1} P_k^T, whose rows above block k vanish (L_A^{-1} is lower triangular):
        c (c + 1) m^2 n flops instead of the pass's 2 c^2 m^2 n (nested EP's sweeps)."""
        if self._pass is not None or self._with_VR:
            return self._column_pass()[0]
        if self._S is None:
            prior = self.prior
            c, m, n = prior.c, prior.m, prior.n
            Li, V = inv_lower(self.L_A), prior.V
            S = np.empty((n, c, c))
            blocks = column_blocks(n, c, m)
            C = np.empty((c, blocks[0].stop - blocks[0].start, c * m))  # C_k^T's rows: C_k's columns
            for cols in blocks:
                width = cols.stop - cols.start
                for k in range(c):  # C_k's rows from block k on (those above vanish)
                    np.matmul(V[k][:, cols].T, Li[k * m:, k * m:(k + 1) * m].T, out=C[k, :width, k * m:])
                _site_columns(C, cols.start, width, m, S)
            self._S = S
        return self._S

    def site_covariances(self):
        """The c x c posterior covariance of each observation's latent values, (n, c, c):
        Sigma_i = T_i Lambda_i + T_i S_i T_i^T, T_i = I - Lambda_i W~_i."""
        S = self._site_blocks()
        c = self.prior.c
        Lam = self.prior.lam.T  # (n, c)
        T = np.eye(c) - Lam[:, :, None] * self.Wt
        TL = T * Lam[:, None, :]
        Sigma = TL + T @ S @ np.transpose(T, (0, 2, 1))
        return 0.5 * (Sigma + np.transpose(Sigma, (0, 2, 1)))

    def R_diag(self):
        """diag R_kk for every class, (c, n): R_ii = W~_i - W~_i S_i W~_i."""
        S = self._site_blocks()
        Rii = self.Wt - self.Wt @ S @ self.Wt
        return np.einsum("ikk->ki", Rii)

    def kernel_gradient(self, outer, scale_R):
        r"""d/d(K_uu, K_uf, k_diag) of every class, for an evidence whose gradient in K~_k is
        G_k = sum_t c_t (x_tk y_tk^T + y_tk x_tk^T)/2 + scale_R R_kk (module docstring).

        outer : sequence of (x, y, c_t), x and y (c, n). Returns a ``MulticlassFITCGradient``.
        O(c m^2 n) beyond the pass of ``_column_pass``.
        """
        prior = self.prior
        c, m, n = prior.c, prior.m, prior.n
        _, VR = self._column_pass()
        Rd = self.R_diag()
        dKuu, dKuf, dkd = np.empty((c, m, m)), POOL.empty((c, m, n), order="C"), np.empty((c, n))
        VG = np.empty((m, n), order="F")  # V_k G'_k, then dlog Z / dK_uf,k (in place)
        for k in range(c):
            Vk = prior.V[k]
            diag_G = scale_R * Rd[k]
            for x, y, ct in outer:
                diag_G = diag_G + ct * np.asarray(x)[k] * np.asarray(y)[k]
            diag_G = np.where(prior.unclipped[k], diag_G, 0.0)
            # sum_t c_t/2 (V x_t y_t^T + V y_t x_t^T) as left right, t = 2 len(outer)
            left_t = np.array([0.5 * ct * (Vk @ np.asarray(v)[k]) for x, y, ct in outer for v in (x, y)]).reshape(-1, m)
            right = np.array([np.asarray(v)[k] for x, y, ct in outer for v in (y, x)]).reshape(-1, n)
            _gradient_columns(VR[k], Vk, diag_G, left_t, right, float(scale_R), VG)
            VGVt = VG @ Vk.T
            dKuf[k] = prior.classes[k].L_uu.solve(VG, trans=1, alpha=2.0)  # 2 L_uu^{-T} V_k G'_k
            Du = -prior.inducing_weights(k, prior.inducing_weights(k, VGVt).T)
            dKuu[k] = 0.5 * (Du + Du.T)
            dkd[k] = diag_G
        return MulticlassFITCGradient(dKuu, dKuf, dkd)

    def predict(self, a, Kus, k_star, full_cov=False):
        """Latent predictive at n* new inputs (module docstring), O(n* c m) memory.

        Kus : (c, m, n*) covariances between each class's inducing inputs and the new inputs.
        k_star : (c, n*) prior variances, or (c, n*, n*) with ``full_cov``.
        Returns mean (c, n*) and covariances (n*, c, c), or (c n*, c n*) class-major with
        ``full_cov``.
        """
        prior = self.prior
        c, m = prior.c, prior.m
        Kus, k_star = np.asarray(Kus, dtype=float), np.asarray(k_star, dtype=float)
        ns = Kus.shape[2]
        Vs = prior.cross(Kus)
        mean = np.array([Vs[k].T @ (prior.V[k] @ a[k]) for k in range(c)])
        Ai = self.A_inv
        if full_cov:
            cov = np.empty((c * ns, c * ns))
            F = [Ai[:, l * m:(l + 1) * m] @ Vs[l] for l in range(c)]
            for k in range(c):
                for l in range(c):
                    cov[k * ns:(k + 1) * ns, l * ns:(l + 1) * ns] = Vs[k].T @ F[l][k * m:(k + 1) * m]
                cov[k * ns:(k + 1) * ns, k * ns:(k + 1) * ns] += k_star[k] - Vs[k].T @ Vs[k]
            return mean, 0.5 * (cov + cov.T)
        cov = np.empty((ns, c, c))
        for cols in column_blocks(ns, c, m):
            F = [Ai[:, l * m:(l + 1) * m] @ Vs[l][:, cols] for l in range(c)]
            for k in range(c):
                Vk = Vs[k][:, cols]
                for l in range(k, c):
                    cov[cols, k, l] = np.einsum("rb,rb->b", Vk, F[l][k * m:(k + 1) * m])
                    cov[cols, l, k] = cov[cols, k, l]
                cov[cols, k, k] += k_star[k, cols] - np.einsum("rb,rb->b", Vk, Vk)
        return mean, cov


__all__ = ["MulticlassFITCPrior", "MulticlassFITCPosterior", "MulticlassFITCGradient", "NonFiniteKernelError"]
