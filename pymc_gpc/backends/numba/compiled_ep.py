"""The compiled evaluation of ``ApproxMarginalOp`` for binary and ordinal EP: logp and gradient with no Python.

Inside a sampler nearly every evaluation is the same case: EP with the default
schedule, labels -1/+1 (the ordinal likelihoods: class codes 0..K-1), valid likelihood
parameters, a warm start with non-negative
sites, and a compiled loop that converges (``ApproxMarginalOp._fast_ep``). The numba
implementation of the Op (``dispatch._compiled_ep_function``) runs that case entirely
here, in nopython mode and without the GIL: the recent-result lookup, the warm-start
guess and store (``thread_state``, per OS thread), ``ep.ep_warm_compiled`` and the
outputs. Every other case (a point ``evaluate`` declines, a non-converged loop, a
failure) goes to the Op's Python path with the warm start found here, and its result is
stored here as well (``store``), so the two paths share one state.

The work sits behind two C-callable functions (``external``: numba cfuncs cached on disk,
registered with LLVM under fixed symbols, as ``numerics.lapack`` does). Compiled graphs call
those symbols rather than linking the engine in, which LLVM would re-optimise at every
nutpie compilation. Neither function enters Python: the object-mode steps are the caller's
(object-mode blocks in a cfunc fail when it is loaded from the disk cache, numba 0.63).
"""

import numpy as np
from numba import carray, njit, types

from ...approximations.ep import ep_warm_compiled
from ...likelihoods.base import freeze, labels_valid, params_valid
from ...numerics.symbols import register_cfuncs
from . import thread_state as ts

SYMBOLS = ("pymc_gpc_compiled_ep_evaluate", "pymc_gpc_compiled_ep_store")
# What ``evaluate_at`` returns. FAILED is what numba returns from a cfunc whose code
# raised (after printing the exception as unraisable).
FAILED, DONE, DECLINED, NO_BLOCK = 0, 1, 2, 3
# ``out``: log_z, n_iter, status, then whether there is a warm start (evaluate_at's
# DECLINED) or a solution to store (store_at), and its first change
OUT, HAS_START, FIRST_CHANGE = 5, 3, 4
_P = types.CPointer(types.float64)
_I = types.int64
# evaluate_at: key hash, likelihood kind, n_params, tol, cold_tol, max_sweeps, n, p, q; then the
# C-contiguous arrays K (n, n), params (q,), y (n,), hyper (p,), dlog_z/dK (n, n),
# dlog_z/dtheta (q,), loo (n,), out (OUT,), tau (n,), nu (n,).
# store_at: key hash, n, p, q and the same arrays, given.
_EVALUATE = (_I, _I, _I, types.float64, types.float64, _I, _I, _I, _I)
_STORE = (_I, _I, _I, _I)
_CFUNCS = []


def external():
    """(evaluate_at, store_at) as numba external functions, compiled or loaded from numba's
    cache and registered on the first call in a process (``numerics.symbols.register_cfuncs``).
    Arrays are passed as ``arr.ctypes``."""
    if not _CFUNCS:
        freeze("backends.numba.compiled_ep")  # the cfuncs hold the dispatch of the kinds known now
    return register_cfuncs(_CFUNCS, [(symbol, types.int64(*scalars, *(_P,) * 10), function) for symbol, function, scalars
                                     in zip(SYMBOLS, (_evaluate_at, _store_at), (_EVALUATE, _STORE))])


def _evaluate_at(h, kind, n_params, tol, cold_tol, max_sweeps, n, p, q, K_, params_, y_, hyper_, dK_, dth_, loo_, out_,
                 tau_, nu_):
    """``evaluate`` on this thread's block of the Op with key hash ``h``: DONE with the
    outputs written, DECLINED with the warm start for the Python path written (tau, nu,
    out[HAS_START], out[FIRST_CHANGE]), or NO_BLOCK (the caller makes one and calls again;
    if none can be made, the Python path without a start)."""
    block = ts.find_block(h, n, p, q)
    if block.size == 0:
        return NO_BLOCK
    K, params, y, hyper = carray(K_, (n, n)), carray(params_, (q,)), carray(y_, (n,)), carray(hyper_, (p,))
    dK, dth, loo, out = carray(dK_, (n, n)), carray(dth_, (q,)), carray(loo_, (n,)), carray(out_, (OUT,))
    tau, nu = carray(tau_, (n,)), carray(nu_, (n,))
    tau[:] = 0.0
    nu[:] = 0.0
    done, has, change = evaluate(block, kind, n_params, tol, cold_tol, max_sweeps, K, params, y, hyper, dK, dth, loo,
                                 out, tau, nu)
    out[HAS_START], out[FIRST_CHANGE] = has, change
    return DONE if done else DECLINED


def _store_at(h, n, p, q, K_, params_, y_, hyper_, dK_, dth_, loo_, out_, tau_, nu_):
    """``store`` into this thread's block: the Python path's result (out: log_z, n_iter,
    status, whether tau and nu hold a solution to keep, its first change)."""
    block = ts.find_block(h, n, p, q)
    out = carray(out_, (OUT,))
    store(block, carray(K_, (n, n)), carray(params_, (q,)), carray(y_, (n,)), carray(hyper_, (p,)), out[0],
          carray(dK_, (n, n)), carray(dth_, (q,)), carray(loo_, (n,)), out[1], out[2], out[HAS_START] > 0.0,
          carray(tau_, (n,)), carray(nu_, (n,)), out[FIRST_CHANGE])
    return DONE


@njit(nogil=True, cache=True)
def _fast_case(kind, K, y, tau, params):
    """The conditions of ``ApproxMarginalOp._fast_ep`` on K, y and the start's sites (labels
    coded for likelihood ``kind`` with parameters ``params``: ``likelihoods.base.labels_valid``)."""
    n = y.shape[0]
    if n == 0 or K.shape[0] != n or K.shape[1] != n or not labels_valid(kind, y, params):
        return False
    for i in range(n):
        if not K[i, i] > 0.0:
            return False
    return np.all(np.isfinite(K)) and np.min(tau) >= 0.0


@njit(nogil=True, cache=True)
def evaluate(block, kind, n_params, tol, cold_tol, max_sweeps, K, params, y, hyper, dK, dth, loo, out, tau, nu):
    """One evaluation from ``block`` (this thread's ``thread_state`` block); a solve from zero
    sites runs to ``cold_tol`` (``thread_state.solve_tolerance``), a warm-started one to ``tol``.

    Returns (done, has_start, first_change). Done: answered here (a recent result, or a
    converged compiled solve, stored), with dlog_z/dK, dlog_z/dtheta, loo and (log_z,
    n_iter, status) written into ``dK``, ``dth``, ``loo`` and ``out``. Otherwise the warm
    start for the Python path is written into ``tau`` and ``nu`` (where has_start).
    """
    n, p, q = y.shape[0], hyper.shape[0], params.shape[0]
    ts.count_call(block)
    found, log_z, dK_r, dth_r, loo_r, n_iter, status = ts.recent_get(block, n, p, q, K, params, y, hyper)
    if found:
        _write(dK, dth, loo, out, dK_r, dth_r, loo_r, log_z, n_iter, status)
        return True, False, np.inf
    has, first_change = ts.warm_guess(block, n, p, q, hyper, tau, nu)
    if not (_fast_case(kind, K, y, tau, params) and params_valid(kind, params, n_params)):
        return False, has, first_change
    # q parameters: a binary kind's params_valid holds q == n_params; an ordinal template's
    # n_params is 0, its cutpoints arrive with th. np.bool_: a constant True would be typed
    # Literal[bool], a specialisation of the loop apart from the Python path's (ep.ep_warm)
    ok, log_z, dK_f, dth_s, loo_s, sweeps, tau_new, nu_new, change = ep_warm_compiled(
        kind, K, y, params.copy(), tau.copy(), nu.copy(), first_change if has else np.inf, ts.solve_tolerance(has, tol, cold_tol),
        max_sweeps, q, np.bool_(True), has)
    if not ok:
        return False, has, first_change
    _write(dK, dth, loo, out, dK_f, dth_s, loo_s, log_z, sweeps, 0)  # dK: C order, the Python path's values
    ts.count_solve(block, not has, sweeps)
    store(block, K, params, y, hyper, log_z, dK, dth, loo, sweeps, 0, True, tau_new, nu_new, change)
    return True, has, change


@njit(nogil=True, cache=True)
def _write(dK, dth, loo, out, dK_v, dth_v, loo_v, log_z, n_iter, status):
    dK[:, :] = dK_v
    dth[:] = dth_v
    loo[:] = loo_v
    out[0], out[1], out[2] = log_z, n_iter, status


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
