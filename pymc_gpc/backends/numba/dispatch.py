"""The numba backend's implementations of the package's Ops (``numba_funcify``).

``register_numba`` makes numba-compiled graphs (PyMC's default backend, nutpie) run the
Ops' Python ``perform`` through an object-mode block keyed by a string, so that numba can
cache the whole graph on disk; binary and ordinal EP's evidence Op on the dense prior
(``compiles_ep``) gets a compiled function instead (``compiled_ep``), which answers its
common case without Python and falls back on the Op's Python path (``_fallback_ep``) for
the rest. ``pymc_gpc/__init__`` calls ``register_numba`` once, for ``ApproxMarginalOp`` and
``LatentPredictiveOp`` (one class each for every prior structure).

Only the Ops' public interface is used: ``perform``, ``evaluate`` (the Python path from a
given warm start), ``solver_options``, ``structure``, ``likelihood``, and
``attach_backend_state`` with ``thread_state``'s reset and count, so that the Op's
``reset_warm_starts`` and ``counts`` cover the compiled path's per-thread blocks.
"""

import os
import weakref

import numba
import numpy as np

from ...approximations import registry
from ...approximations.ep import EPState
from ...likelihoods.binary import LIKELIHOODS
from ...likelihoods.ordinal import ORDINAL_LIKELIHOODS
from ...ops import ApproxMarginalOp, LatentPredictiveOp
from . import thread_state
from .compiled_hsgp import compiled_function as compiled_hsgp_function
from .registered import OPS, numba_key, perform_registered, registered_op, release_if_unused, runtime_key

# Whether binary and ordinal EP's numba implementation is the compiled one (``compiled_ep``: no
# Python, no GIL per evaluation) rather than the object-mode call of ``perform``; read when
# a graph is compiled (environment variable PYMC_GPC_COMPILED_EP=0 switches it off, or set
# this).
COMPILED_EP = os.environ.get("PYMC_GPC_COMPILED_EP", "1") == "1"


def compiles_ep(op):
    """Whether the numba implementation runs ``op``'s common case compiled (``compiled_ep``):
    where ``COMPILED_EP`` is set, EP on a structure its loop solves (``compiled_ep_loop``: the
    dense one) with the default schedule and one of the package's binary or ordinal
    likelihoods (one latent value per site) that is log-concave (else ``perform``:
    ``solve.highest_converged``)."""
    return (COMPILED_EP and isinstance(op, ApproxMarginalOp) and op.structure.compiled_ep_loop
            and registry.solver_for(op.approximation, op.likelihood_type).compiled_loop
            and op.likelihood_type in LIKELIHOODS + ORDINAL_LIKELIHOODS
            and op.likelihood_type.log_concave
            and dict(op.options).keys() <= {"tol", "max_sweeps"})


def compiles_hsgp(op):
    """Whether the numba implementation runs ``op``'s common case compiled (``compiled_hsgp``):
    where ``COMPILED_EP`` is set, EP on the HSGP prior with the Laplacian basis (the periodic
    expansion's basis is a dense Phi: ``perform``), with the conditions of ``compiles_ep`` on
    the likelihood and the options."""
    structure = op.structure if isinstance(op, ApproxMarginalOp) else None
    return (COMPILED_EP and structure is not None and structure.name == "hsgp"
            and getattr(structure, "box", None) is not None and structure.box[0] != "periodic"
            and registry.solver_for(op.approximation, op.likelihood_type).compiled_loop
            and op.likelihood_type in LIKELIHOODS + ORDINAL_LIKELIHOODS
            and op.likelihood_type.log_concave
            and dict(op.options).keys() <= {"tol", "max_sweeps"})


def _fallback_ep(key, K, params, y, hyper, use_block, has_start, tau, nu, first_change):
    """The Python path of a compiled EP evaluation that ``compiled_ep.evaluate`` left undone,
    from its warm start (tau, nu, first_change where ``has_start``). Returns the six
    outputs as the compiled code declares them, then (whether there is a solution to keep,
    its tau, nu and first change). Without a block (``thread_state``'s table is full) the
    Op's ``perform`` with its Python state."""
    op = registered_op(key)
    storage = [[None] for _ in range(6)]
    inputs = [K, params, y, hyper]
    state = None
    if not use_block:
        op.perform(None, inputs, storage)
    else:
        guess = EPState(tau.copy(), nu.copy(), first_change) if has_start else None
        with np.errstate(over="ignore", invalid="ignore", divide="ignore", under="ignore"):
            state, _ = op.evaluate(inputs, guess, storage)
    log_z, dK, dth, loo, n_iter, status = (s[0] for s in storage)
    outputs = (float(log_z), np.ascontiguousarray(dK, dtype=float), np.ascontiguousarray(dth, dtype=float),
               np.ascontiguousarray(loo, dtype=float), int(n_iter), int(status))
    if state is None:
        return (*outputs, False, np.zeros(y.shape[0]), np.zeros(y.shape[0]), np.inf)
    return (*outputs, True, np.ascontiguousarray(state.tau, dtype=float),
            np.ascontiguousarray(state.nu, dtype=float), float(state.first_change))


# The two object-mode steps of the compiled function, module-level so that PyTensor's cache
# of the whole graph hits (closures calling closures made it miss).
@numba.njit(cache=True)
def _allocate_block(key, n, p, q):
    with numba.objmode():
        thread_state.allocate(key, n, p, q)


@numba.njit(cache=True)
def _fallback_block(key, K, params, y, hyper, use_block, has, tau, nu, change):
    with numba.objmode(log_z="float64", dK="float64[:, ::1]", dth="float64[::1]", loo="float64[::1]",
                       n_iter="int64", status="int64", stored="boolean", tau_out="float64[::1]",
                       nu_out="float64[::1]", change_out="float64"):
        log_z, dK, dth, loo, n_iter, status, stored, tau_out, nu_out, change_out = _fallback_ep(
            key, K, params, y, hyper, use_block, has, tau, nu, change)
    return log_z, dK, dth, loo, n_iter, status, stored, tau_out, nu_out, change_out


def register_numba(op_types=None):
    """Run the Ops' Python ``perform`` from numba-compiled graphs, without a warning.

    Registering replaces PyTensor's fallback, which warns at every compilation. The
    object-mode block calls a module-level function with a string key (``numba_key``), not
    a closure over the Op, so that numba caches the whole compiled graph on disk.

    An Op for which ``compiles_ep`` holds (binary or ordinal EP, by default) gets
    ``_compiled_ep_function`` instead: its common case runs without Python
    (``compiled_ep``), the rest through ``_fallback_ep``.
    """
    try:
        import numba
        from pytensor.link.numba.dispatch.basic import (
            get_numba_type,
            numba_njit,
            register_funcify_and_cache_key,
        )
    except ImportError:  # pragma: no cover - numba backend unavailable
        return

    def funcify(op, node, **kwargs):
        key = numba_key(op, node)
        refs = OPS.setdefault(key, [])
        refs[:] = [r for r in refs if r[0]() is not None]
        if not any(r[0]() is op for r in refs):
            refs.append((weakref.ref(op), len(node.outputs)))
        compiled = compiles_ep(op) or compiles_hsgp(op)
        if compiled and op.attach_backend_state(key, thread_state.reset, thread_state.evaluations):
            weakref.finalize(op, release_if_unused, key)
        for ref, _ in refs:  # any of them may answer the compiled graph (``perform_registered``)
            alive = ref()
            if alive is not None and hasattr(alive, "reset_warm_starts"):
                alive.reset_warm_starts()
        ret_sig = numba.types.Tuple([get_numba_type(o.type) for o in node.outputs])
        if compiled:
            thread_state.reset(key)
            if compiles_hsgp(op):
                return compiled_hsgp_function(op, key, numba_njit, ret_sig), key + "_compiled_hsgp"
            return _compiled_ep_function(op, key, numba_njit, ret_sig), key + "_compiled"

        @numba_njit
        def perform(*inputs):
            with numba.objmode(ret=ret_sig):
                ret = perform_registered(key, inputs)
            return ret

        return perform, key

    for op_type in op_types or (ApproxMarginalOp, LatentPredictiveOp):
        register_funcify_and_cache_key(op_type)(funcify)



def _compiled_ep_function(op, key, numba_njit, ret_sig):
    """The numba implementation of an Op for which ``compiles_ep`` holds: ``compiled_ep``'s C function
    answers the common case without Python; the object-mode steps here make the thread's
    block when it has none (``_allocate_block``), run the Python path from the compiled
    warm start where it declined (``_fallback_block``, its result stored back by the second
    C function), and the Op's ``perform`` where its code raised."""
    from . import compiled_ep as C

    evaluate_at, store_at = C.external()
    h = thread_state.key_hash(key)
    kind, n_params = op.likelihood.kind, op.likelihood.n_params
    tol, cold_tol, max_sweeps = thread_state.compiled_tolerances(op)

    @numba_njit
    def approx_marginal_ep(K, params, y, hyper):
        n, p, q = y.shape[0], hyper.shape[0], params.shape[0]
        if K.shape[0] == n and K.shape[1] == n:  # else the Op's perform: -inf, status 2
            Kc, pc, yc, hc = (np.ascontiguousarray(K), np.ascontiguousarray(params), np.ascontiguousarray(y),
                              np.ascontiguousarray(hyper))
            dK, dth, loo, out = np.empty((n, n)), np.empty(q), np.empty(n), np.zeros(C.OUT)
            tau, nu = np.empty(n), np.empty(n)
            pointers = (Kc.ctypes, pc.ctypes, yc.ctypes, hc.ctypes, dK.ctypes, dth.ctypes, loo.ctypes, out.ctypes,
                        tau.ctypes, nu.ctypes)
            code = evaluate_at(h, kind, n_params, tol, cold_tol, max_sweeps, n, p, q, *pointers)
            if code == C.NO_BLOCK:
                _allocate_block(runtime_key(key), n, p, q)
                code = evaluate_at(h, kind, n_params, tol, cold_tol, max_sweeps, n, p, q, *pointers)
            if code == C.DONE:
                return np.asarray(out[0]), dK, dth, loo, np.asarray(np.int64(out[1])), np.asarray(np.int64(out[2]))
            if code != C.FAILED:  # declined, or no block (a full table): the Python path, from the warm start if any
                log_z, dK2, dth2, loo2, n_iter, status, stored, tau2, nu2, change = _fallback_block(
                    runtime_key(key), Kc, pc, yc, hc, code == C.DECLINED, out[C.HAS_START] > 0.0, tau, nu, out[C.FIRST_CHANGE])
                if code == C.DECLINED and dK2.shape == (n, n) and dth2.size == q and loo2.size == n:
                    out[0], out[1], out[2], out[C.HAS_START], out[C.FIRST_CHANGE] = log_z, n_iter, status, stored, change
                    store_at(h, n, p, q, Kc.ctypes, pc.ctypes, yc.ctypes, hc.ctypes, dK2.ctypes, dth2.ctypes,
                             loo2.ctypes, out.ctypes, tau2.ctypes, nu2.ctypes)
                return np.asarray(log_z), dK2, dth2, loo2, np.asarray(n_iter), np.asarray(status)
        with numba.objmode(ret=ret_sig):  # one block: two in one function failed LLVM's verifier
            ret = perform_registered(key, (K, params, y, hyper))
        return ret

    return approx_marginal_ep
