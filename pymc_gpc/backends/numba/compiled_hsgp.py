r"""The compiled evaluation of the HSGP evidence Op for binary and ordinal EP: no Python per evaluation.

The HSGP prior (``structures.hsgp``) K~ = Phi diag(S) Phi^T on the Laplacian basis, whose
products go through the product-to-sum tables (``numerics.product_to_sum``). Inside a
sampler nearly every evaluation is one case: EP with the default schedule, valid labels and
likelihood parameters, finite non-negative S, a warm start with non-negative sites and an
undamped parallel loop that converges. The numba implementation of the Op
(``compiled_function``, routed by ``dispatch.compiles_hsgp``) runs that case here, in
nopython mode and without the GIL: the warm-start guess and store (``thread_state``, per OS
thread), the sweeps and the outputs. A solve from zero sites runs to the engine's tolerance
(``thread_state.solve_tolerance``), and the thread's last result answers an evaluation at the same inputs
(``recent_get``: PyMC's NUTS evaluates each draw's starting point twice). Every other case (a
declined point, a loop that does not converge or would take a step ``ep._parallel`` handles in
Python, a failure) goes to the Op's Python path (``ApproxMarginalOp.evaluate``) from the warm
start found here, and its solution is stored here as well.

The sweep is ``approximations.ep._parallel`` on ``structures.hsgp.HSGPPosterior`` with the
basis operator ``CosineProductBasis``, the same arithmetic in one compiled function: with
site precisions w = tau and s = sqrt(S),

* H = Phi^T diag(w) Phi from the table T = KR(C_<d)^T diag(w) C_d (one GEMM) and the pairs'
  gather (``CosineProductBasis.gram``);
* A = I + diag(s) H diag(s) = L_A L_A^T (dpotrf), (1/2) log|B| = sum log diag L_A;
* A^{-1} by dtrtri and dlauum (LAPACK's dpotri), the marginal variances
  diag(Phi s A^{-1} s Phi^T) by the pairs' scatter and one GEMM
  (``CosineProductBasis.quad_diag``), floored at 1e-14 diag K~;
* the mean Phi s A^{-1} s Phi^T nu through the basis's factors (dpotrs);
* the sites by ``ep.parallel_site_update``, Anderson's step by ``ep.anderson_update`` (with
  ``_parallel``'s restarts).

At the fixed point the evidence is R&W eq. 3.65 (``ep.stable_log_z``) and its gradient in S is
d log Z / dS_j = (Phi^T b)_j^2 / 2 - Q_jj / 2 (``HSGPPosterior.ep_gradient``), Q_jj by the
more accurate of its two forms, (1 - (A^{-1})_jj) / S_j from the A^{-1} the last sweep
formed, or H_jj - ||L_A^{-1} s H_j||^2 (dtrsm). One sweep costs O(n P + M^3) flops
(P ~ 2^d M the tables' size) and O(n P) memory for the tables, built once per training
inputs X and shared by the threads (``thread_state``). The work sits behind two C-callable
functions (``external``), as in ``compiled_ep``.
"""

import numba
import numpy as np
from numba import carray, njit, types

from ...approximations.ep import ANDERSON_MEMORY, EPState, anderson_update, parallel_site_update, stable_log_z
from ...likelihoods.base import freeze, labels_valid, params_valid, tilted_dparams_sum
from ...numerics.lapack import inv_lower, lauum_lower, potrf_lower, potrs_lower
from ...numerics.product_to_sum import khatri_rao_rows
from ...numerics.symbols import register_cfuncs
from ...structures.dense import subtract_scaled_norms
from ...structures.hsgp import PRIOR_VARIANCE_FLOOR
from . import thread_state as ts
from .registered import perform_registered, registered_op, runtime_key

SYMBOLS = ("pymc_gpc_compiled_hsgp_evaluate", "pymc_gpc_compiled_hsgp_store")
# What ``evaluate_at`` returns (FAILED: numba's return value from a cfunc whose code raised).
FAILED, DONE, DECLINED, NO_BLOCK, NO_BASIS = 0, 1, 2, 3, 4
# ``out``: log_z, n_iter, status, whether there is a warm start (DECLINED) or a solution to
# store (store_at), its first change
OUT, HAS_START, FIRST_CHANGE = 5, 3, 4
_HEADER = 9  # the basis block's: n, D, d, M, widths of KR(C_<d), C_d, KR(F_<d), F_d, 2^d
_P = types.CPointer(types.float64)
_I = types.int64
# evaluate_at: key hash, likelihood kind, n_params, tol, cold tol, max_sweeps, n, p, q, M, D; then the
# C-contiguous arrays S (M,), X (n, D), params (q,), y (n,), hyper (p,), dlog_z/dS (M,),
# dlog_z/dtheta (q,), loo (n,), out (OUT,), tau (n,), nu (n,).
_EVALUATE = (_I, _I, _I, types.float64, types.float64, _I, _I, _I, _I, _I, _I)
_N_EVALUATE_ARRAYS = 11
# store_at: key hash, n, p, q; hyper (p,), tau (n,), nu (n,), out (OUT,).
_STORE = (_I, _I, _I, _I)
_N_STORE_ARRAYS = 4
_CFUNCS = []


def external():
    """(evaluate_at, store_at) as numba external functions, compiled or loaded from numba's
    cache and registered on the first call in a process (``numerics.symbols.register_cfuncs``).
    Arrays are passed as ``arr.ctypes``."""
    if not _CFUNCS:
        freeze("backends.numba.compiled_hsgp")  # the cfuncs hold the dispatch of the kinds known now
    return register_cfuncs(_CFUNCS, [(symbol, types.int64(*scalars, *(_P,) * k), function)
                                     for symbol, function, scalars, k in zip(
                                         SYMBOLS, (_evaluate_at, _store_at), (_EVALUATE, _STORE),
                                         (_N_EVALUATE_ARRAYS, _N_STORE_ARRAYS))])


# -- The basis block: the product-to-sum tables at the training inputs -----------------------


def basis_block(X, operator):
    """The tables of ``operator`` (a ``CosineProductBasis`` at the training inputs X, (n, D))
    packed into one float64 array (``basis_parts`` reads it): the header, X, the Khatri-Rao
    product of the cosine tables of the first d - 1 dimensions and the last one's, the same
    for the factors, the prefactors (M, M), the pairs' signs and positions in T (int64
    bits), the basis functions' positions in the factors' grid (int64 bits)."""
    X = np.ascontiguousarray(X, dtype=float)
    n, D = X.shape
    every = slice(0, n)
    d, M = operator.d, operator.M
    ones = np.ones((n, 1))
    KRc = khatri_rao_rows(operator.cosines[:-1], every) if d > 1 else ones
    KRf = khatri_rao_rows(operator.factors[:-1], every) if d > 1 else ones
    Cd, Fd = operator.cosines[-1], operator.factors[-1]
    pairs = np.stack([flat for flat, _ in operator._pairs]).astype(np.int64)
    signs = np.array([sign for _, sign in operator._pairs])
    header = np.array([n, D, d, M, KRc.shape[1], Cd.shape[1], KRf.shape[1], Fd.shape[1], len(signs)], dtype=float)
    parts = [header, X, KRc, Cd, KRf, Fd, operator._pref, signs, pairs.view(np.float64),
             np.asarray(operator._factor_flat, dtype=np.int64).view(np.float64)]
    return np.concatenate([np.ascontiguousarray(a, dtype=float).reshape(-1) for a in parts])


@njit(nogil=True, cache=True)
def basis_parts(B):
    """The arrays of a ``basis_block`` (views): X (n, D), KR(C_<d), C_d, KR(F_<d), F_d, the
    prefactors (M, M), the signs (2^d,), the pairs (2^d, M^2), the grid positions (M,)."""
    n, D, M = int(B[0]), int(B[1]), int(B[3])
    c0, c1, f0, f1, k = int(B[4]), int(B[5]), int(B[6]), int(B[7]), int(B[8])
    o = _HEADER
    X = B[o:o + n * D].reshape((n, D))
    o += n * D
    KRc = B[o:o + n * c0].reshape((n, c0))
    o += n * c0
    Cd = B[o:o + n * c1].reshape((n, c1))
    o += n * c1
    KRf = B[o:o + n * f0].reshape((n, f0))
    o += n * f0
    Fd = B[o:o + n * f1].reshape((n, f1))
    o += n * f1
    pref = B[o:o + M * M].reshape((M, M))
    o += M * M
    signs = B[o:o + k]
    o += k
    pairs = B[o:o + k * M * M].view(np.int64).reshape((k, M * M))
    o += k * M * M
    flat = B[o:o + M].view(np.int64)
    return X, KRc, Cd, KRf, Fd, pref, signs, pairs, flat


# Rows of the products over the n points, taken a block at a time (bounded temporaries).
_ROWS = 4096


@njit(nogil=True, cache=True)
def _rmatvec(KRf, Fd, flat, v):
    """Phi^T v through the factors (``CosineProductBasis.rmatvec``)."""
    n = v.shape[0]
    G = np.zeros((KRf.shape[1], Fd.shape[1]))
    for r in range(0, n, _ROWS):
        e = min(r + _ROWS, n)
        G += np.dot(KRf[r:e].T, v[r:e, None] * Fd[r:e])
    return G.reshape(-1)[flat]


@njit(nogil=True, cache=True)
def _grid_product(KRf, Fd, flat, z, squared):
    """sum_j z_j prod_k F_k[:, j_k] at every point (``CosineProductBasis.matvec``), or on the
    squared factors (``squared``: ``CosineProductBasis.sq_diag``)."""
    n = KRf.shape[0]
    U = np.zeros(KRf.shape[1] * Fd.shape[1])
    U[flat] = z
    U = U.reshape((KRf.shape[1], Fd.shape[1]))
    out = np.empty(n)
    for r in range(0, n, _ROWS):
        e = min(r + _ROWS, n)
        K, F = (KRf[r:e] * KRf[r:e], Fd[r:e] * Fd[r:e]) if squared else (KRf[r:e], Fd[r:e])
        W = np.dot(np.ascontiguousarray(K), U)
        for i in range(e - r):
            acc = 0.0
            for j in range(W.shape[1]):
                acc += W[i, j] * F[i, j]
            out[r + i] = acc
    return out


@njit(nogil=True, cache=True)
def _gram(KRc, Cd, pairs, signs, pref, w):
    """H = Phi^T diag(w) Phi from T (``CosineProductBasis.gram``), Fortran-ordered."""
    n, M = w.shape[0], pref.shape[0]
    T = np.zeros((KRc.shape[1], Cd.shape[1]))
    for r in range(0, n, _ROWS):
        e = min(r + _ROWS, n)
        T += np.dot(KRc[r:e].T, w[r:e, None] * Cd[r:e])
    t = T.reshape(-1)
    H = np.empty((M, M)).T  # Fortran: H[a, b] at a + M b, and H is symmetric
    h = H.T.reshape(-1)  # C-ordered view of the same memory: h[a M + b] = H[b, a] = H[a, b]
    pf = pref.reshape(-1)
    for idx in range(M * M):
        acc = 0.0
        for k in range(signs.shape[0]):
            acc += signs[k] * t[pairs[k, idx]]
        h[idx] = pf[idx] * acc
    return H


@njit(nogil=True, cache=True)
def _quad_diag(KRc, Cd, pairs, signs, pref, Sigma):
    """phi(x_i)^T Sigma phi(x_i) for every i (``CosineProductBasis.quad_diag_matrix``)."""
    n, M = KRc.shape[0], pref.shape[0]
    size = KRc.shape[1] * Cd.shape[1]
    weights = (pref * Sigma).reshape(-1)
    G = np.zeros(size)
    part = np.empty(size)
    for k in range(signs.shape[0]):
        part[:] = 0.0
        for idx in range(M * M):
            part[pairs[k, idx]] += weights[idx]
        G += signs[k] * part
    G2 = G.reshape((KRc.shape[1], Cd.shape[1]))
    out = np.empty(n)
    for r in range(0, n, _ROWS):
        e = min(r + _ROWS, n)
        W = np.dot(KRc[r:e], G2)
        for i in range(e - r):
            acc = 0.0
            for j in range(W.shape[1]):
                acc += W[i, j] * Cd[r + i, j]
            out[r + i] = acc
    return out


@njit(nogil=True, cache=True)
def _posterior(parts, s, w):
    """(H, L_A, info) at site precisions w: A = I + diag(s) H diag(s) = L_A L_A^T (Fortran)."""
    _, KRc, Cd, _, _, pref, signs, pairs, _ = parts
    H = _gram(KRc, Cd, pairs, signs, pref, w)
    M = s.shape[0]
    L = np.empty((M, M)).T
    for b in range(M):
        for a in range(M):
            L[a, b] = s[a] * H[a, b] * s[b]
        L[b, b] += 1.0
    info = potrf_lower(L)
    return H, L, info


@njit(nogil=True, cache=True)
def _inverse(L):
    """(A^{-1} (M, M) symmetric, info) from A's Cholesky factor (dtrtri, dlauum: dpotri)."""
    M = L.shape[0]
    A_inv = np.empty((M, M)).T
    A_inv[:, :] = L
    info = inv_lower(A_inv)
    if info == 0:
        info = lauum_lower(A_inv)
    return A_inv, info


@njit(nogil=True, cache=True)
def _moments(parts, s, L, nu, prior_var):
    """(var, mean, A^{-1}, info): the marginal variances (floored at 1e-14 diag K~) and the mean
    Phi s A^{-1} s Phi^T nu (``HSGPPosterior.var_diag``, ``mean_and_weights``)."""
    _, KRc, Cd, KRf, Fd, pref, signs, pairs, flat = parts
    A_inv, info = _inverse(L)
    n = nu.shape[0]
    if info != 0:
        return np.empty(n), np.empty(n), A_inv, info
    Sigma = np.empty((s.shape[0], s.shape[0]))
    for a in range(s.shape[0]):
        for b in range(s.shape[0]):
            Sigma[a, b] = s[a] * A_inv[a, b] * s[b]
    var = np.maximum(_quad_diag(KRc, Cd, pairs, signs, pref, Sigma), 1e-14 * prior_var)
    z = s * _rmatvec(KRf, Fd, flat, nu)
    info = potrs_lower(L, z)
    mean = _grid_product(KRf, Fd, flat, s * z, False)
    return var, mean, A_inv, info


@njit(nogil=True, cache=True)
def _projected_R_diag(S, s, H, L, A_inv):
    """Q_jj = (Phi^T R Phi)_jj by the more accurate of its two forms (``HSGPPosterior.R_projected_diag``):
    (1 - (A^{-1})_jj) / S_j where S_j |H_jj| > 1, else H_jj - ||L_A^{-1} s H_j||^2."""
    M = S.shape[0]
    Q = np.empty(M)
    direct = np.empty(M, dtype=np.int64)
    k = 0
    for j in range(M):
        if S[j] * abs(H[j, j]) > 1.0:
            Q[j] = (1.0 - A_inv[j, j]) / S[j]
        else:
            direct[k] = j
            k += 1
    subtract_scaled_norms(L, np.bool_(True), H, s, direct[:k], Q)
    return Q


@njit(nogil=True, cache=True)
def ep_hsgp(kind, parts, S, y, th, tau, nu, tol, max_sweeps, n_params):
    """Undamped parallel EP on the HSGP prior from the sites (tau, nu) (non-negative tau):
    ``ep._parallel`` with ``HSGPPosterior``'s arithmetic (module docstring), then the
    evidence and its gradients at the fixed point (``ep.ep``).

    Returns (done, log_z, dlog_z/dS (M,), dlog_z/dtheta (n_params,), LOO terms, sweeps, tau,
    nu, first change); not done where the loop would leave the compiled case (a non-finite
    change, negative sites of the map, a failed factorisation), reached ``max_sweeps``, or
    gave a non-finite result: the caller then runs the Python path.
    """
    n, M = y.shape[0], S.shape[0]
    s = np.sqrt(S)
    _, _, _, KRf, Fd, _, _, _, flat = parts
    prior_var = np.maximum(_grid_product(KRf, Fd, flat, S, True), PRIOR_VARIANCE_FLOOR)
    memory = ANDERSON_MEMORY
    dF, dG = np.zeros((memory, 2 * n)), np.zeros((memory, 2 * n))
    f_prev, g_prev = np.zeros(2 * n), np.zeros(2 * n)
    have_prev, count = False, 0
    change, best, sweeps, first_change, done = np.inf, np.inf, 0, np.inf, False
    dS, dth = np.zeros(M), np.zeros(n_params)
    H, L, info = _posterior(parts, s, tau)
    if info != 0:
        return False, np.nan, dS, dth, np.zeros(n), sweeps, tau, nu, first_change
    tau_c, nu_c, tilted = np.empty(n), np.empty(n), np.empty((4, n))
    var, mean, A_inv = np.empty(n), np.empty(n), np.empty((0, 0)).T
    while sweeps < max_sweeps:
        var, mean, A_inv, info = _moments(parts, s, L, nu, prior_var)
        if info != 0:
            break
        tau_g, nu_g, change, tau_c, nu_c, tilted = parallel_site_update(kind, y, th, var, mean, tau, nu, prior_var, 1.0)
        sweeps += 1
        if sweeps == 1:
            first_change = change
        if not np.isfinite(change):
            break
        if change < tol:
            done = True
            break
        x, count, f_prev, g_prev, best = anderson_update(dF, dG, count, have_prev, f_prev, g_prev, best, change,
                                                         tau, nu, tau_g, nu_g, var)
        have_prev = True
        tau_x, nu_x = x[:n].copy(), x[n:].copy()
        if np.min(tau_x) < 0.0:  # Anderson went astray: restart it from the map's value
            have_prev, count = False, 0
            tau_x, nu_x = tau_g.copy(), nu_g.copy()
            if np.min(tau_x) < 0.0:  # negative sites of the map itself: the Python path's business
                break
        if not np.all(np.isfinite(x)):
            break
        H, L, info = _posterior(parts, s, tau_x)
        if info != 0:
            break
        tau, nu = tau_x, nu_x
    if not done:
        return False, np.nan, dS, dth, np.zeros(n), sweeps, tau, nu, first_change
    # the fixed point: b = nu - tau mean (``HSGPPosterior.mean_and_weights``)
    b = nu - tau * mean
    half_logdet = 0.0
    for j in range(M):
        half_logdet += np.log(L[j, j])
    log_z = stable_log_z(half_logdet, tau, nu, mean, tau_c, nu_c, tilted[0])
    Q = _projected_R_diag(S, s, H, L, A_inv)
    pb = _rmatvec(KRf, Fd, flat, b)
    for j in range(M):
        dS[j] = -0.5 * Q[j] + 0.5 * pb[j] * pb[j]
    tilted_dparams_sum(kind, y, nu_c / tau_c, 1.0 / tau_c, th, tilted[3], dth)
    # log_z <= 0: every kind here has discrete labels (``Likelihood.max_log_evidence``)
    ok = np.isfinite(log_z) and log_z <= 0.0 and np.all(np.isfinite(dS)) and np.all(np.isfinite(dth))
    return ok, log_z, dS, dth, tilted[0].copy(), sweeps, tau, nu, first_change


@njit(nogil=True, cache=True)
def _fast_case(kind, S, y, tau, params, n_params):
    """The compiled case's conditions on the inputs and the start (module docstring)."""
    if y.shape[0] == 0 or not labels_valid(kind, y, params) or not params_valid(kind, params, n_params):
        return False
    for j in range(S.shape[0]):
        if not (np.isfinite(S[j]) and S[j] >= 0.0):
            return False
    return np.min(tau) >= 0.0


# -- The last result: PyMC's NUTS evaluates each draw's starting point again -----------------


@njit(nogil=True, cache=True)
def recent_length(n, p, q, M, D):
    """The length of a thread block's last-result slot, at the block's end: its own length and a
    validity flag, the inputs (hyperparameters, S, likelihood parameters, labels, training
    inputs X) and the outputs (log Z, sweeps, dlog Z/dS, dlog Z/dtheta, LOO terms)."""
    return 2 + p + M + q + n + n * D + 2 + M + q + n


@njit(nogil=True, cache=True)
def _recent_start(block, n, p, q, M, D):
    """Where the block's last-result slot begins, or -1 where the block has none."""
    length = recent_length(n, p, q, M, D)
    start = block.shape[0] - length
    return start if start >= 0 and block[start] == length else -1


@njit(nogil=True, cache=True)
def recent_get(block, S, X, params, y, hyper, dS, dth, loo, out):
    """Write the last result's outputs where the inputs equal its inputs exactly (the solve
    would repeat itself: its warm start is the point's own stored sites, which the first sweep
    accepts); whether they did."""
    n, p, q, M, D = y.shape[0], hyper.shape[0], params.shape[0], S.shape[0], X.shape[1]
    o = _recent_start(block, n, p, q, M, D)
    if o < 0 or block[o + 1] != 1.0:
        return False
    o += 2
    for a in (hyper, S, params, y, X.reshape(-1)):
        for i in range(a.shape[0]):
            if block[o + i] != a[i]:
                return False
        o += a.shape[0]
    out[0], out[1], out[2] = block[o], block[o + 1], 0.0
    o += 2
    dS[:] = block[o:o + M]
    dth[:] = block[o + M:o + M + q]
    loo[:] = block[o + M + q:o + M + q + n]
    return True


@njit(nogil=True, cache=True)
def recent_put(block, S, X, params, y, hyper, dS, dth, loo, out):
    """Keep a converged compiled result as the block's last result (where it has the slot)."""
    n, p, q, M, D = y.shape[0], hyper.shape[0], params.shape[0], S.shape[0], X.shape[1]
    start = _recent_start(block, n, p, q, M, D)
    if start < 0:
        return
    block[start + 1] = 0.0
    o = start + 2
    for a in (hyper, S, params, y, X.reshape(-1), out[:2], dS, dth, loo):
        block[o:o + a.shape[0]] = a
        o += a.shape[0]
    block[start + 1] = 1.0


@njit(nogil=True, cache=True)
def evaluate(block, basis, kind, n_params, tol, cold_tol, max_sweeps, S, X, params, y, hyper, dS, dth, loo, out, tau,
             nu):
    """One evaluation from this thread's warm-start ``block`` and the shared ``basis`` block:
    the block's last result where the inputs are its inputs (``recent_get``), else a solve.

    A solve from zero sites (no warm start in the block) runs to ``cold_tol`` (the engine's
    tolerance, ``thread_state.solve_tolerance``), a warm-started one to ``tol``.

    Returns (done, has_start, first_change). Done: a converged compiled solve, stored, with
    dlog_z/dS, dlog_z/dtheta, loo and (log_z, n_iter, status) written. Otherwise the warm start
    for the Python path is in ``tau`` and ``nu`` (where has_start).
    """
    n, p = y.shape[0], hyper.shape[0]
    ts.count_call(block)
    if recent_get(block, S, X, params, y, hyper, dS, dth, loo, out):
        return True, True, 0.0
    has, first_change = ts.warm_guess(block, n, p, params.shape[0], hyper, tau, nu)
    if not _fast_case(kind, S, y, tau, params, n_params):
        return False, has, first_change
    ok, log_z, dS_v, dth_v, loo_v, sweeps, tau_new, nu_new, change = ep_hsgp(
        kind, basis_parts(basis), S, y, params.copy(), tau.copy(), nu.copy(), ts.solve_tolerance(has, tol, cold_tol),
        max_sweeps, params.shape[0])
    if not ok:
        return False, has, first_change
    dS[:] = dS_v
    dth[:] = dth_v
    loo[:] = loo_v
    out[0], out[1], out[2] = log_z, sweeps, 0
    recent_put(block, S, X, params, y, hyper, dS, dth, loo, out)
    ts.count_solve(block, not has, sweeps)
    ts.warm_add(block, n, p, params.shape[0], hyper, tau_new, nu_new, change)
    return True, has, change


@njit(nogil=True, cache=True)
def _same_inputs(basis, X):
    """Whether the basis block was built at these training inputs (exactly)."""
    B = basis_parts(basis)[0]
    if B.shape[0] != X.shape[0] or B.shape[1] != X.shape[1]:
        return False
    for i in range(X.shape[0]):
        for k in range(X.shape[1]):
            if B[i, k] != X[i, k]:
                return False
    return True


def _evaluate_at(h, kind, n_params, tol, cold_tol, max_sweeps, n, p, q, M, D, S_, X_, params_, y_, hyper_, dS_,
                 dth_, loo_, out_, tau_, nu_):
    """``evaluate`` on this thread's block of the Op with key hash ``h``: DONE with the outputs
    written, DECLINED with the warm start for the Python path written (tau, nu, out[HAS_START],
    out[FIRST_CHANGE]), NO_BLOCK or NO_BASIS (the caller makes the thread's block or the basis
    block at X and calls again)."""
    block = ts.find_block(h, n, p, q)
    if block.size == 0:
        return NO_BLOCK
    X = carray(X_, (n, D))
    basis = ts.find_shared_block(h, n, D, M)
    if basis.size == 0 or not _same_inputs(basis, X):
        return NO_BASIS
    S, params, y, hyper = carray(S_, (M,)), carray(params_, (q,)), carray(y_, (n,)), carray(hyper_, (p,))
    dS, dth, loo, out = carray(dS_, (M,)), carray(dth_, (q,)), carray(loo_, (n,)), carray(out_, (OUT,))
    tau, nu = carray(tau_, (n,)), carray(nu_, (n,))
    tau[:] = 0.0
    nu[:] = 0.0
    done, has, change = evaluate(block, basis, kind, n_params, tol, cold_tol, max_sweeps, S, X, params, y, hyper, dS,
                                 dth, loo, out, tau, nu)
    out[HAS_START], out[FIRST_CHANGE] = has, change
    return DONE if done else DECLINED


def _store_at(h, n, p, q, hyper_, tau_, nu_, out_):
    """Keep the Python path's solution (out[HAS_START] > 0) as this thread's warm start."""
    block = ts.find_block(h, n, p, q)
    out = carray(out_, (OUT,))
    if block.size > 0 and out[HAS_START] > 0.0:
        ts.warm_add(block, n, p, q, carray(hyper_, (p,)), carray(tau_, (n,)), carray(nu_, (n,)), out[FIRST_CHANGE])
    return DONE


# -- Python's side: the object-mode steps ---------------------------------------------------


def _allocate(key, n, p, q, M, D):
    """This thread's block: the warm starts (``thread_state.warm_length``; not
    ``thread_state``'s recent results, which hold an n x n K) and the last result
    (``recent_length``)."""
    extra = recent_length(n, p, q, M, D)
    ts.allocate(key, n, p, q, length=ts.warm_length(n, p, q) + extra)
    block = ts.find_block(ts.key_hash(key), n, p, q)
    if block.size == ts.warm_length(n, p, q) + extra and block[-extra] == 0.0:
        block[-extra] = extra  # the slot's mark (``_recent_start``)


def _build_basis(key, X):
    """The basis block of the Op registered under ``key`` at the training inputs X, shared by
    every thread; False where none can be built (bad X, no Op alive, a full table)."""
    try:
        op = registered_op(key)
        basis = op.structure.basis
        X = np.array(X, dtype=float)
        block = basis_block(X, basis.at(X))
    except (ValueError, StopIteration, ArithmeticError, np.linalg.LinAlgError):
        return False
    M = int(block[3])
    return ts.allocate_shared(key, X.shape[0], X.shape[1], M, block)


def _fallback(key, S, X, params, y, hyper, has_start, tau, nu, first_change):
    """The Python path of an evaluation ``evaluate`` declined, from its warm start. Returns the
    seven outputs as the compiled code declares them, then (whether there is a solution to
    keep, its tau, nu and first change)."""
    op = registered_op(key)
    storage = [[None] for _ in range(7)]
    guess = EPState(tau.copy(), nu.copy(), first_change) if has_start else None
    with np.errstate(over="ignore", invalid="ignore", divide="ignore", under="ignore"):
        state, _ = op.evaluate([S, X, params, y, hyper], guess, storage)
    log_z, dS, dX, dth, loo, n_iter, status = (s[0] for s in storage)
    outputs = (float(log_z), np.ascontiguousarray(dS, dtype=float), np.ascontiguousarray(dX, dtype=float),
               np.ascontiguousarray(dth, dtype=float), np.ascontiguousarray(loo, dtype=float), int(n_iter),
               int(status))
    n = y.shape[0]
    if state is None:
        return (*outputs, False, np.zeros(n), np.zeros(n), np.inf)
    return (*outputs, True, np.ascontiguousarray(state.tau, dtype=float),
            np.ascontiguousarray(state.nu, dtype=float), float(state.first_change))


@numba.njit(cache=True)
def _allocate_block(key, n, p, q, M, D):
    with numba.objmode():
        _allocate(key, n, p, q, M, D)


@numba.njit(cache=True)
def _basis_block(key, X):
    with numba.objmode(ok="boolean"):
        ok = _build_basis(key, X)
    return ok


@numba.njit(cache=True)
def _fallback_block(key, S, X, params, y, hyper, has, tau, nu, change):
    with numba.objmode(log_z="float64", dS="float64[::1]", dX="float64[:, ::1]", dth="float64[::1]",
                       loo="float64[::1]", n_iter="int64", status="int64", stored="boolean", tau_out="float64[::1]",
                       nu_out="float64[::1]", change_out="float64"):
        log_z, dS, dX, dth, loo, n_iter, status, stored, tau_out, nu_out, change_out = _fallback(
            key, S, X, params, y, hyper, has, tau, nu, change)
    return log_z, dS, dX, dth, loo, n_iter, status, stored, tau_out, nu_out, change_out


def compiled_function(op, key, numba_njit, ret_sig):
    """The numba implementation of an HSGP evidence Op for which ``dispatch.compiles_hsgp``
    holds: ``evaluate_at`` answers the common case without Python; the object-mode steps make
    the thread's block and the basis block when missing, run the Python path from the
    compiled warm start where it declined (its solution stored back by ``store_at``), and the
    Op's ``perform`` where the inputs do not fit or its code raised."""
    evaluate_at, store_at = external()
    h = ts.key_hash(key)
    kind, n_params = op.likelihood.kind, op.likelihood.n_params
    tol, cold_tol, max_sweeps = ts.compiled_tolerances(op)

    @numba_njit
    def approx_marginal_hsgp(S, X, params, y, hyper):
        n, p, q, M, D = y.shape[0], hyper.shape[0], params.shape[0], S.shape[0], X.shape[1]
        if X.shape[0] == n:
            Sc, Xc, pc, yc, hc = (np.ascontiguousarray(S), np.ascontiguousarray(X), np.ascontiguousarray(params),
                                  np.ascontiguousarray(y), np.ascontiguousarray(hyper))
            dS, dth, loo, out = np.empty(M), np.empty(q), np.empty(n), np.zeros(OUT)
            tau, nu = np.empty(n), np.empty(n)
            code = NO_BLOCK
            for _ in range(3):  # at most: the thread's block, then the basis block
                code = evaluate_at(h, kind, n_params, tol, cold_tol, max_sweeps, n, p, q, M, D, Sc.ctypes, Xc.ctypes,
                                   pc.ctypes, yc.ctypes, hc.ctypes, dS.ctypes, dth.ctypes, loo.ctypes, out.ctypes,
                                   tau.ctypes, nu.ctypes)
                if code == NO_BLOCK:
                    _allocate_block(runtime_key(key), n, p, q, M, D)
                elif code == NO_BASIS:
                    if not _basis_block(runtime_key(key), Xc):
                        break
                else:
                    break
            if code == DONE:
                return (np.asarray(out[0]), dS, np.zeros((n, D)), dth, loo, np.asarray(np.int64(out[1])),
                        np.asarray(np.int64(out[2])))
            if code == DECLINED:  # the Python path, from the warm start if any
                log_z, dS2, dX2, dth2, loo2, n_iter, status, stored, tau2, nu2, change = _fallback_block(
                    runtime_key(key), Sc, Xc, pc, yc, hc, out[HAS_START] > 0.0, tau, nu, out[FIRST_CHANGE])
                if stored and tau2.size == n and nu2.size == n:
                    out[HAS_START], out[FIRST_CHANGE] = 1.0, change
                    store_at(h, n, p, q, hc.ctypes, tau2.ctypes, nu2.ctypes, out.ctypes)
                return np.asarray(log_z), dS2, dX2, dth2, loo2, np.asarray(n_iter), np.asarray(status)
        with numba.objmode(ret=ret_sig):  # one block: two in one function failed LLVM's verifier
            ret = perform_registered(key, (S, X, params, y, hyper))
        return ret

    return approx_marginal_hsgp
