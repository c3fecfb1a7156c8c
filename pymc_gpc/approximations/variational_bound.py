r"""The bound SVGP maximises, taken at Laplace's q(u) under the DTC prior, and its exact gradient.

With c classes and inducing values u_k (m per class; ``structures.multiclass_fitc``'s
whitened z_k = L_{uu,k}^{-1} u_k ~ N(0, I)), the evidence lower bound of sparse variational
GP classification (Titsias 2009; Hensman, Matthews & Ghahramani 2015) for a Gaussian q(u) is

.. math::

    \mathcal L(q) = \sum_i E_{q(f_i)}[\log \pi_{y_i}(f_i)] - \mathrm{KL}(q(u) \,\|\, p(u)),
    \qquad q(f_i) = N(\mu_i, S_i + \mathrm{diag}\, r_i),

where :math:`\mu_i, S_i` are q(u)'s mean and covariance carried to the c latent values of row
i and :math:`r_{ik} = k_k(x_i, x_i) - Q_{k,ii}` is the conditional variance p(f | u) adds,
which no data shrink. Here q(u) is the softmax Laplace Gaussian of the DTC prior
:math:`\tilde K_k = Q_k` (``softmax_laplace`` on a ``MulticlassFITCPrior`` whose Lambda is
clipped to zero): mode :math:`\hat f`, :math:`S_i = P_i A^{-1} P_i^\top`. Its KL and expected
log likelihood combine with Laplace's evidence of the DTC model (``laplace_bound``'s
identity) into

.. math::

    \mathcal L = \log Z_L + \sum_i e_i, \qquad
    e_i = -E\big[\mathrm{lse}(\hat f_i + D) - \mathrm{lse}(\hat f_i)
          - \tfrac12 D^\top W_i D\big] - \tfrac12 \operatorname{tr}(W_i\, \mathrm{diag}\, r_i),
    \quad D \sim N(0, S_i + \mathrm{diag}\, r_i),

the expectation over fixed antithetic quasi-random draws D = L_i z_s
(``likelihoods.multiclass.standard_draws``; L_i L_i^T = S_i + diag r_i), so that the bound is
a smooth function of the hyperparameters.

Gradient in (K_uu, K_uf, diag K_ff), exact for the draws. Per row, the partial derivatives of
e_i in :math:`\hat f_i` (W held), in W_i (:math:`\Psi_i`) and in L_i; L's adjoint gives that
in :math:`\Sigma_i = S_i + \mathrm{diag}\, r_i` (Murray 2016, the Cholesky factor's
reverse mode). Then :math:`\sum_i \operatorname{tr}(\bar S_i S_i)`, with
:math:`S_i = P_i A^{-1} P_i^\top`, :math:`A = I + P^\top W P` and
:math:`N = A^{-1} P^\top \bar G P A^{-1}` (:math:`\bar G` block diagonal by row), moves by

.. math::

    2 \operatorname{tr}\big((A^{-1} P^\top \bar G - N P^\top W)\, dP\big)
    - \sum_i \operatorname{tr}\big((P N P^\top)_{ii}\, dW_i\big);

the W terms go to :math:`\hat f` through :math:`W_i = \mathrm{diag}\,\pi_i - \pi_i\pi_i^\top`,
and :math:`\hat f`'s movement with the prior, :math:`d\hat f = (I + \tilde K W)^{-1}
d\tilde K\, a`, is taken by the adjoint :math:`u = (I + W \tilde K)^{-1} \bar f` (as
``softmax_laplace._gradient`` takes log Z_L's). The cotangent of each V_k = L_{uu,k}^{-1}
K_{uf,k} goes to K_uf and K_uu as in ``MulticlassFITCPosterior.kernel_gradient``. Cost
O(c^2 m^2 n) beyond the solve (three products of the size of forming A), and O(n c draws)
for the expectation.
"""

import numpy as np
from numba import njit

from ..likelihoods.multiclass import standard_draws
from ..structures import multiclass_fitc
from ..structures.fitc import NonFiniteKernelError
from ..structures.multiclass_fitc import MulticlassFITCGradient, MulticlassFITCPrior
from .softmax_laplace import softmax_W_pullback, softmax_laplace

__all__ = ["softmax_dtc_bound", "check_dtc_inputs", "DTCBound"]


class DTCBound:
    """The bound's value, its gradient (a ``MulticlassFITCGradient``), the DTC solve's result
    (``result``: its ``state`` warm-starts the next) and the parts: ``log_z`` (Laplace's
    evidence of the DTC model) and ``left_out`` (the sum of the e_i)."""

    def __init__(self, value, gradient, result, left_out):
        self.value, self.gradient, self.result = value, gradient, result
        self.log_z, self.left_out = float(result.log_z), left_out


def check_dtc_inputs(Kuu, Kuf, k_diag):
    """The kernel arrays as float arrays: ValueError where their shapes do not match (c >= 2
    classes, (c, m, m), (c, m, n), (c, n)); ``NonFiniteKernelError`` (a ValueError) where one holds
    NaN or inf, as ``structures.fitc.FITCPrior`` refuses them."""
    Kuu, Kuf, k_diag = (np.asarray(v, dtype=float) for v in (Kuu, Kuf, k_diag))
    if Kuf.ndim != 3 or Kuu.shape != (Kuf.shape[0], Kuf.shape[1], Kuf.shape[1]) or k_diag.shape != (Kuf.shape[0], Kuf.shape[2]):
        raise ValueError(f"the SVGP-type bound needs Kuu (c, m, m), Kuf (c, m, n) and k_diag (c, n); got {Kuu.shape}, "
                         f"{Kuf.shape}, {k_diag.shape}")
    for name, a in (("Kuu", Kuu), ("Kuf", Kuf), ("k_diag", k_diag)):
        if not np.all(np.isfinite(a)):
            raise NonFiniteKernelError(f"{name} contains NaN or inf")
    return Kuu, Kuf, k_diag


def softmax_dtc_bound(Kuu, Kuf, k_diag, y, *, state=None, draws=256, with_grad=True, **solver_options):
    r"""The SVGP-type bound at the DTC prior's softmax Laplace q(u), and its gradient (module docstring).

    Parameters
    ----------
    Kuu, Kuf, k_diag : (c, m, m), (c, m, n), (c, n) the kernel arrays of a multi-class FITC
        model (``structures.select.FITCMulticlass``; K_uu jittered).
    y : (n,) class codes 0..c-1.
    state : a ``SoftmaxLaplaceState`` of an earlier call, to warm-start the DTC solve.
    draws : quasi-random draws per row for the expectation (an even number; fixed, so the
        bound is a smooth function of the kernel arrays).
    with_grad : compute the gradient (else ``gradient`` is None).
    **solver_options : ``softmax_laplace``'s ``tol`` and ``max_iter`` for the DTC mode.

    Returns
    -------
    DTCBound
        ``value`` the bound, ``gradient`` its ``MulticlassFITCGradient`` (d/dK_uu, d/dK_uf,
        d/d diag K_ff), ``result`` the DTC solve (``state`` warm-starts the next call),
        ``log_z`` and ``left_out`` its two parts.

    Raises
    ------
    ValueError
        For an odd or non-positive ``draws``, arrays and labels that do not match, or arrays
        holding NaN or inf (``check_dtc_inputs``).
    numpy.linalg.LinAlgError
        Where the DTC mode's Newton iteration does not converge (the gradient assumes the
        mode), after a cold start where a warm one failed.

    Examples
    --------
    >>> import numpy as np
    >>> from pymc_gpc.solvers import softmax_dtc_bound
    >>> rng = np.random.default_rng(0)
    >>> X, Xu = rng.normal(size=(80, 2)), rng.normal(size=(8, 2))
    >>> y = np.digitize(X[:, 0], [-0.5, 0.5])                        # 3 classes, coded 0..2
    >>> def k(A, B):
    ...     return 4.0 * np.exp(-0.5 * ((A[:, None] - B[None]) ** 2).sum(-1))
    >>> Kuu = np.stack([k(Xu, Xu) + 1e-6 * np.eye(8)] * 3)
    >>> Kuf, k_diag = np.stack([k(Xu, X)] * 3), np.full((3, 80), 4.0 + 1e-6)
    >>> b = softmax_dtc_bound(Kuu, Kuf, k_diag, y)
    >>> bool(b.value < b.log_z), b.gradient.Kuf.shape                # the bound lies below the DTC evidence here
    (True, (3, 8, 80))
    """
    if int(draws) != draws or draws < 2 or draws % 2:
        raise ValueError(f"draws must be an even number >= 2, got {draws!r}")
    Kuu, Kuf, k_diag = check_dtc_inputs(Kuu, Kuf, k_diag)
    prior = MulticlassFITCPrior(Kuu, Kuf, np.zeros_like(k_diag))  # Lambda clipped to 0: K~_k = Q_k
    q_diag = np.array([np.einsum("rn,rn->n", V, V) for V in prior.V])
    unclipped = k_diag > q_diag
    r = np.where(unclipped, k_diag - q_diag, 0.0)  # (c, n): what p(f | u) adds
    result = _dtc_mode(prior, y, state, with_grad, solver_options)
    f_hat, S = np.asarray(result.mean), np.asarray(result.var)
    pi = result.posterior.d  # softmax(f_hat): the weights of the mode's posterior
    W = result.posterior.Wt  # with Lambda = 0 its effective site precision is W_i = diag(pi_i) - pi_i pi_i^T
    parts = _expectation(f_hat.T, pi.T, W, S, r.T, standard_draws(prior.c, int(draws)), with_grad)
    left_out = float(np.sum(parts[0]))
    value = float(result.log_z) + left_out
    if not with_grad:
        return DTCBound(value, None, result, left_out)
    return DTCBound(value, _gradient(prior, result, pi, W, r, unclipped, *parts[1:]), result, left_out)


def _dtc_mode(prior, y, state, with_grad, options):
    """``softmax_laplace`` on the DTC prior, from ``state`` and then, where that does not converge,
    from a = 0; LinAlgError where neither does."""
    for start in (state, None) if state is not None else (None,):
        result = softmax_laplace(prior, y, state=start, with_grad=with_grad, with_loo=False, **options)
        if result.converged:
            return result
    raise np.linalg.LinAlgError(f"the DTC mode's Newton iteration did not converge (last change {result.max_change:.2e})")


def _expectation(F_hat, P, W, S, R, Z, with_grad):
    """Per row (F_hat, P, R (n, c), W, S (n, c, c)): e_i (module docstring) and, with
    ``with_grad``, de_i/df_i with W held, Psi_i = de_i/dW_i and de_i/dSigma_i (``_row_terms``)."""
    n, c = F_hat.shape
    Sigma = S + R[:, :, None] * np.eye(c)
    L = np.linalg.cholesky(Sigma)
    e, g_f, Psi, L_bar = np.empty(n), np.empty((n, c)), np.empty((n, c, c)), np.empty((n, c, c))
    _row_terms(np.ascontiguousarray(F_hat), np.ascontiguousarray(P), np.ascontiguousarray(W), L,
               np.ascontiguousarray(R), np.ascontiguousarray(Z), bool(with_grad), e, g_f, Psi, L_bar)
    if not with_grad:
        return e, None, None, None
    return e, g_f, Psi, _cholesky_adjoint(L, L_bar)


@njit(nogil=True, cache=True, fastmath={"reassoc", "contract"})
def _row_terms(F_hat, P, W, L, R, Z, with_grad, e, g_f, Psi, L_bar):
    """The expectation's loop over rows i and draws s (D = L_i z_s): e_i, and with ``with_grad``
    g_f[i] = pi_i - mean_s softmax(f_i + D), Psi_i = mean_s D D^T / 2 - diag(r_i) / 2 and
    L_bar_i = mean_s (W_i D - softmax(f_i + D)) z_s^T (lower triangle)."""
    n, c = F_hat.shape
    M = Z.shape[0]
    D, F, p, WD = np.empty(c), np.empty(c), np.empty(c), np.empty(c)
    for i in range(n):
        top = F_hat[i, 0]
        for k in range(1, c):
            top = max(top, F_hat[i, k])
        acc = 0.0
        for k in range(c):
            acc += np.exp(F_hat[i, k] - top)
        lse_hat = top + np.log(acc)
        total = 0.0
        if with_grad:
            g_f[i, :] = 0.0
            Psi[i, :, :] = 0.0
            L_bar[i, :, :] = 0.0
        for s in range(M):
            for k in range(c):
                v = 0.0
                for j in range(k + 1):
                    v += L[i, k, j] * Z[s, j]
                D[k] = v
                F[k] = F_hat[i, k] + v
            top = F[0]
            for k in range(1, c):
                top = max(top, F[k])
            acc = 0.0
            for k in range(c):
                p[k] = np.exp(F[k] - top)
                acc += p[k]
            lse = top + np.log(acc)
            quad = 0.0
            for k in range(c):
                v = 0.0
                for j in range(c):
                    v += W[i, k, j] * D[j]
                WD[k] = v
                quad += D[k] * v
            total += lse - lse_hat - 0.5 * quad
            if with_grad:
                for k in range(c):
                    p[k] /= acc
                    g_f[i, k] -= p[k]
                    for j in range(c):
                        Psi[i, k, j] += D[k] * D[j]
                    for j in range(k + 1):
                        L_bar[i, k, j] += (WD[k] - p[k]) * Z[s, j]
        widen = 0.0
        for k in range(c):
            widen += W[i, k, k] * R[i, k]
        e[i] = -total / M - 0.5 * widen
        if with_grad:
            for k in range(c):
                g_f[i, k] = P[i, k] + g_f[i, k] / M
                for j in range(c):
                    Psi[i, k, j] *= 0.5 / M
                Psi[i, k, k] -= 0.5 * R[i, k]
                for j in range(k + 1):
                    L_bar[i, k, j] /= M


def _cholesky_adjoint(L, L_bar):
    r"""The symmetric cotangent of Sigma = L L^T (batched (n, c, c)) from that of its lower
    factor L: :math:`\bar\Sigma = \tfrac12 L^{-\top} \Phi(L^\top \bar L) L^{-1}` symmetrised, Phi
    the lower triangle with its diagonal halved (Murray 2016, eq. 10)."""
    c = L.shape[-1]
    X = np.transpose(L, (0, 2, 1)) @ np.tril(L_bar)
    X = np.tril(X) - 0.5 * X * np.eye(c)
    Linv = np.linalg.inv(L)
    Y = np.transpose(Linv, (0, 2, 1)) @ X @ Linv
    return 0.5 * (Y + np.transpose(Y, (0, 2, 1)))


@njit(nogil=True, cache=True, fastmath={"reassoc", "contract"})
def _bound_columns(FA, FN, V, G, W, start, width, V_bar, PNP):
    """For the columns start .. start + width, given FA[l, j] and FN[l, j] the column start + j of
    (A^{-1})_{:,l} V_l and N_{:,l} V_l ((c, b, c m)): V_bar[k][:, i] = 2 sum_l (FA_l G_i[l, k] -
    FN_l W_i[l, k])[k-block] (the cotangent of V_k, ``_gradient``) and
    (P N P^T)_ii[k, l] = V_k[:, i] . FN_l[k-block]."""
    c = FA.shape[0]
    m = V[0].shape[0]
    for j in range(width):
        i = start + j
        for k in range(c):
            off = k * m
            Vk = V[k]
            out = V_bar[k]
            for r in range(m):
                acc = 0.0
                for l in range(c):
                    acc += FA[l, j, off + r] * G[i, l, k] - FN[l, j, off + r] * W[i, l, k]
                out[r, i] = 2.0 * acc
            for l in range(c):
                acc = 0.0
                for r in range(m):
                    acc += Vk[r, i] * FN[l, j, off + r]
                PNP[i, k, l] = acc


def _gradient(prior, result, pi, W, r, unclipped, g_f, Psi, Sigma_bar):
    """d bound / d(K_uu, K_uf, diag K_ff) (module docstring): log Z_L's own gradient (the solver's),
    the mode's movement under the bound's pull on it (the adjoint u) and the cotangents of the V_k
    and of r, carried to the kernel arrays."""
    post = result.posterior
    r_bar = np.einsum("ikk->ki", Sigma_bar) - 0.5 * pi * (1.0 - pi)  # through Sigma_i and the widening term
    V_bar, PNP = _site_covariance_pullback(prior, post, Sigma_bar, W)
    f_bar = g_f + softmax_W_pullback(pi, Psi - 0.5 * (PNP + np.transpose(PNP, (0, 2, 1)))).T
    u = f_bar.T - post.R_times(post.K_times(f_bar.T))  # (I + W K~)^{-1} f_bar
    implicit = post.kernel_gradient([(u, np.asarray(result.a), 1.0)], 0.0)
    d_lz = result.dlog_z_dK
    dKuu = np.asarray(d_lz.Kuu) + np.asarray(implicit.Kuu)
    dKuf = np.asarray(d_lz.Kuf) + np.asarray(implicit.Kuf)
    dkd = np.where(unclipped, r_bar, 0.0)
    V = prior.V
    for k in range(prior.c):
        Vb = V_bar[k] - 2.0 * V[k] * dkd[k]  # r = k_diag - diag Q: diag Q's cotangent is -r_bar
        # V_k = L_uu^{-1} K_uf: as ``MulticlassFITCPosterior.kernel_gradient`` with V_k G'_k = Vb / 2
        Du = -prior.inducing_weights(k, prior.inducing_weights(k, 0.5 * (Vb @ V[k].T)).T)
        dKuu[k] += 0.5 * (Du + Du.T)
        dKuf[k] += prior.classes[k].L_uu.solve(Vb, trans=1)  # in place: Vb is not used again
    return MulticlassFITCGradient(dKuu, dKuf, dkd)


def _site_covariance_pullback(prior, post, G, W):
    """For sum_i tr(G_i S_i), S_i = P_i A^{-1} P_i^T (module docstring): the cotangents of the V_k
    with W held ((c, m, n)) and (P N P^T)_ii (n, c, c), N = A^{-1} P^T G P A^{-1}, whose pairing
    with dW_i is the rest. O(c^2 m^2 n): forming P^T G P as A is formed, then one pass over
    column blocks with A^{-1} and N (``_bound_columns``)."""
    c, m, n = prior.c, prior.m, prior.n
    V, Ai = prior.V, post.A_inv
    H = np.empty((c * m, c * m))  # P^T G P: block (k, l) = V_k diag(G_kl) V_l^T
    for k in range(c):
        for l in range(k, c):
            block = (V[k] * G[:, k, l]) @ V[l].T
            H[k * m:(k + 1) * m, l * m:(l + 1) * m] = block
            H[l * m:(l + 1) * m, k * m:(k + 1) * m] = block.T
    N = Ai @ H @ Ai
    V_bar = np.empty((c, n, m)).transpose(0, 2, 1)  # each V_bar[k] Fortran-ordered, as the V_k
    PNP = np.empty((n, c, c))
    blocks = multiclass_fitc.column_blocks(n, c, m)
    FA, FN = (np.empty((c, blocks[0].stop - blocks[0].start, c * m)) for _ in range(2))
    for cols in blocks:
        width = cols.stop - cols.start
        for l in range(c):  # A^{-1} and N are symmetric: row blocks give the columns' products
            np.matmul(V[l][:, cols].T, Ai[l * m:(l + 1) * m], out=FA[l, :width])
            np.matmul(V[l][:, cols].T, N[l * m:(l + 1) * m], out=FN[l, :width])
        _bound_columns(FA, FN, tuple(V), G, W, cols.start, width, V_bar, PNP)
    return V_bar, PNP
