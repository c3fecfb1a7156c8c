"""The compiled evaluation of ``ApproxMarginalOp`` for binary EP: logp and gradient with no Python.

Inside a sampler nearly every evaluation is the same case: EP with the default
schedule, labels -1/+1, valid likelihood parameters, a warm start with non-negative
sites, and a compiled loop that converges (``ApproxMarginalOp._fast_ep``). The numba
implementation of the Op (``marginal._register_numba``) runs that case entirely here, in
nopython mode and without the GIL: the recent-result lookup, the warm-start guess and
store (``thread_state``, per OS thread), ``ep.ep_warm_compiled`` and the outputs. Every
other case (a point ``evaluate`` declines, a non-converged loop, a failure) goes to the
Op's Python path in an object-mode block, with the warm start found here, and its
result is stored here as well (``store``), so the two paths share one state.
"""

import numpy as np
from numba import njit

from ..approximations.ep import ep_warm_compiled
from ..likelihoods.binary import PROBIT_NOISE, STEP_LABEL_NOISE
from . import thread_state as ts


@njit(nogil=True, cache=True)
def params_valid(kind, th, n_params):
    """``Likelihood.check_params`` of the package's binary likelihoods, as a yes / no."""
    if th.size != n_params:
        return False
    for v in th:
        if not np.isfinite(v):
            return False
    if kind == PROBIT_NOISE:
        return th[0] > 0.0
    if kind == STEP_LABEL_NOISE:
        return 0.0 <= th[0] < 0.5
    return True


@njit(nogil=True, cache=True)
def _fast_case(K, y, tau):
    """The conditions of ``ApproxMarginalOp._fast_ep`` on K, y and the start's sites."""
    n = y.shape[0]
    if n == 0 or K.shape[0] != n or K.shape[1] != n:
        return False
    for i in range(n):
        if abs(y[i]) != 1.0 or not K[i, i] > 0.0:
            return False
    return np.all(np.isfinite(K)) and np.min(tau) >= 0.0


@njit(nogil=True, cache=True)
def evaluate(block, kind, n_params, tol, max_sweeps, K, params, y, hyper):
    """One evaluation from ``block`` (this thread's ``thread_state`` block, or empty).

    Returns (done, log_z, dlog_z_dK, dlog_z_dtheta, loo, n_iter, status, has_start, tau,
    nu, first_change): done when answered here (a recent result, or a converged compiled
    solve, stored); otherwise the warm start (has_start, tau, nu, first_change) for the
    Python path. K is C-contiguous; dlog_z_dK is returned C-contiguous.
    """
    n, p, q = y.shape[0], hyper.shape[0], params.shape[0]
    tau, nu = np.zeros(n), np.zeros(n)
    nothing = np.empty((0, 0))
    if block.size == 0:
        return False, np.nan, nothing, np.empty(0), np.empty(0), 0, 0, False, tau, nu, np.inf
    ts.count_call(block)
    found, log_z, dK, dth, loo, n_iter, status = ts.recent_get(block, n, p, q, K, params, y, hyper)
    if found:
        return True, log_z, dK, dth, loo, n_iter, status, False, tau, nu, np.inf
    has, first_change = ts.warm_guess(block, n, p, q, hyper, tau, nu)
    if not (_fast_case(K, y, tau) and params_valid(kind, params, n_params)):
        return False, np.nan, nothing, np.empty(0), np.empty(0), 0, 0, has, tau, nu, first_change
    ok, log_z, dK_f, dth, loo, sweeps, tau_new, nu_new, change = ep_warm_compiled(
        kind, K, y, params.copy(), tau.copy(), nu.copy(), first_change if has else np.inf, tol, max_sweeps, n_params)
    if not ok:
        return False, np.nan, nothing, np.empty(0), np.empty(0), 0, 0, has, tau, nu, first_change
    dK = np.ascontiguousarray(dK_f)  # the same values as the Python path's Fortran-ordered array
    ts.count_solve(block, not has, sweeps)
    store(block, K, params, y, hyper, log_z, dK, dth, loo, sweeps, 0, True, tau_new, nu_new, change)
    return True, log_z, dK, dth, loo, sweeps, 0, has, tau_new, nu_new, change


@njit(nogil=True, cache=True)
def store(block, K, params, y, hyper, log_z, dK, dth, loo, n_iter, status, has_state, tau, nu, first_change):
    """Keep an evaluation in ``block``: its solution as a warm start (where it has one) and
    its outputs as a recent result."""
    if block.size == 0:
        return
    n, p, q = y.shape[0], hyper.shape[0], params.shape[0]
    if has_state:
        ts.warm_add(block, n, p, q, hyper, tau, nu, first_change)
    ts.recent_add(block, n, p, q, K, params, y, hyper, log_z, dK, dth, loo, n_iter, status)
