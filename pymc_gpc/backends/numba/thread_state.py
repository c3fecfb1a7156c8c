r"""Per-thread warm starts and recent results that compiled code reaches without Python.

The compiled EP Op (``compiled_ep``) keeps, for each Op key (``registered.numba_key``)
and each OS thread, what ``marginal.WarmStarts`` and ``marginal.RecentResults`` keep
for the Python path, in one float64 block per (key, thread, n, p, q) (n points, p
hyperparameters, q likelihood parameters): nutpie's chains are Rust threads, and a
state looked up through Python would take the GIL at every evaluation.

Blocks are found through a process-wide table of int64 rows (key hash, thread id, n,
p, q, block address, block length). The table's address is registered with LLVM under
a fixed symbol name (as ``numerics.lapack`` does for the LAPACK routines), so compiled
code that refers to it can be cached on disk and reloaded by another process. A thread
that finds no block asks Python for one (``allocate``, under a lock, in an object-mode
block: once per thread and key); the row's key is written last, so a scanning thread
never reads a half-written row. Rows are released (key set to ``_FREED``) and their
blocks freed once no Op of their key is alive (``release_later``, from a finalizer;
done at the next ``allocate``), so a compiled function must not outlive its Ops (a
PyTensor function holds its graph's). A full table leaves the Op on its Python state.

Shared rows (thread id ``_SHARED_THREAD``) hold one block per (key, n, p, q) that every
thread reads, built once in Python (``allocate_shared``): the compiled HSGP path's basis
tables (``compiled_hsgp``), whose per-thread blocks hold warm starts only (``warm_length``).
A replaced shared block stays allocated until its key is released, since another thread
may still be reading it.

Block layout (``_layout``): a header of ``_HEADER`` numbers (warm-start count and
oldest slot, recent-result count and oldest slot, then the ``TALLIES``), then the
``WARM`` warm-start slots (hyperparameters, tau, nu, first change), then the recent
results (hyperparameters, likelihood parameters, labels, K, and the outputs).
"""

import ctypes
import hashlib
import sys
import threading

import llvmlite.binding as llvm
import numpy as np
from llvmlite import ir
from numba import carray, njit, types
from numba.extending import intrinsic

from ...numerics.extrapolation import trajectory_weights

ROWS = 4096
_KEY, _THREAD, _N, _P, _Q, _ADDRESS, _LENGTH = range(7)
_FREED = -1  # a released row's key (a scan goes on past it; 0 ends the scan)
_TABLE = np.zeros((ROWS, 8), dtype=np.int64)
_TABLE_SYMBOL = "pymc_gpc_thread_state_table"
llvm.add_symbol(_TABLE_SYMBOL, _TABLE.ctypes.data)

if sys.platform == "win32":  # pragma: no cover - not tested here
    _thread_function = ctypes.windll.kernel32.GetCurrentThreadId
else:  # threading.get_ident() is pthread_self() on POSIX
    _thread_function = ctypes.CDLL(None).pthread_self
llvm.add_symbol("pymc_gpc_thread_self", ctypes.cast(_thread_function, ctypes.c_void_p).value)
_thread_self = types.ExternalFunction("pymc_gpc_thread_self", types.uintp())

WARM = 16  # warm-start slots, as ``marginal.WarmStarts``
_HEADER = 8
_WARM_COUNT, _WARM_OLDEST, _RECENT_COUNT, _RECENT_OLDEST = range(4)
# tallies (diagnostics, never reset): calls of the compiled function (recent results and
# the Python path's included), compiled solves, those started cold, and their EP sweeps
TALLIES = ("calls", "solves", "cold", "sweeps")
_RECENT_MEMORY = 32e6  # bytes of K and dlog_z/dK kept per thread, as ``marginal.RecentResults``
_RECENT_MAX = 16


@intrinsic
def _table_pointer(typingctx):
    """The address of ``_TABLE``'s data, as the external symbol ``_TABLE_SYMBOL``."""
    def codegen(context, builder, signature, args):
        module = builder.module
        try:
            table = module.get_global(_TABLE_SYMBOL)
        except KeyError:
            table = ir.GlobalVariable(module, ir.IntType(64), _TABLE_SYMBOL)
            table.linkage = "external"
        return builder.bitcast(table, ir.IntType(64).as_pointer())
    return types.CPointer(types.int64)(), codegen


@intrinsic
def _float_pointer(typingctx, address):
    """An int64 address as a float64 pointer."""
    def codegen(context, builder, signature, args):
        return builder.inttoptr(args[0], ir.DoubleType().as_pointer())
    return types.CPointer(types.float64)(types.int64), codegen


@njit(nogil=True, cache=True)
def thread_id():
    """This OS thread's id (``threading.get_ident()`` on POSIX)."""
    return np.int64(_thread_self())


@njit(nogil=True, cache=True)
def recent_size(n, p):
    """Recent results kept: none without hyperparameters, else up to 16 within 32 MB."""
    if p == 0:
        return 0
    return max(1, min(_RECENT_MAX, int(_RECENT_MEMORY // (16 * max(n * n, 1)))))


@njit(nogil=True, cache=True)
def _layout(n, p, q):
    """Offsets of the block's parts (see the module docstring) and its length."""
    r = recent_size(n, p)
    o = np.empty(15, dtype=np.int64)
    o[0] = _HEADER  # warm: hyperparameters (WARM, p)
    o[1] = o[0] + WARM * p  # tau (WARM, n)
    o[2] = o[1] + WARM * n  # nu (WARM, n)
    o[3] = o[2] + WARM * n  # first change (WARM,)
    o[4] = o[3] + WARM  # recent: hyperparameters (r, p)
    o[5] = o[4] + r * p  # likelihood parameters (r, q)
    o[6] = o[5] + r * q  # labels (r, n)
    o[7] = o[6] + r * n  # K (r, n, n)
    o[8] = o[7] + r * n * n  # dlog_z/dK (r, n, n)
    o[9] = o[8] + r * n * n  # log_z (r,)
    o[10] = o[9] + r  # dlog_z/dtheta (r, q)
    o[11] = o[10] + r * q  # loo (r, n)
    o[12] = o[11] + r * n  # n_iter (r,)
    o[13] = o[12] + r  # status (r,)
    o[14] = o[13] + r  # the length
    return o


def block_length(n, p, q):
    return int(_layout(n, p, q)[14])


@njit(nogil=True, cache=True)
def find_block(key, n, p, q):
    """This thread's block for (key, n, p, q), or an empty array."""
    table = carray(_table_pointer(), (ROWS, 8))
    me = thread_id()
    for r in range(ROWS):
        k = table[r, _KEY]
        if k == 0:
            break
        if k == key and table[r, _THREAD] == me and table[r, _N] == n and table[r, _P] == p and table[r, _Q] == q:
            return carray(_float_pointer(table[r, _ADDRESS]), (table[r, _LENGTH],))
    return np.empty(0)


# -- Python's side: the blocks' memory --------------------------------------------------

_LOCK = threading.Lock()
_BLOCKS = {}  # key -> [(row, block)]
_PENDING = []  # keys whose Ops have all died, released at the next ``allocate``


def key_hash(key):
    """A positive int64 for a key string (the same in every process)."""
    return int(hashlib.sha256(key.encode()).hexdigest()[:15], 16) + 1


def allocate(key, n, p, q, length=None):
    """Give this thread a zeroed block for (key, n, p, q), unless the table is full. ``length``:
    a shorter block (``warm_length``: warm starts only, no recent results)."""
    h = key_hash(key)
    with _LOCK:
        _release_pending()
        me = threading.get_ident()
        for row, _ in _BLOCKS.get(h, ()):
            if tuple(_TABLE[row, _THREAD:_Q + 1]) == (me, n, p, q):
                return  # already there
        block = np.zeros(block_length(n, p, q) if length is None else int(length))
        row = _add_row(h, me, n, p, q, block)
        if row is not None:
            _BLOCKS.setdefault(h, []).append((row, block))


def _add_row(h, thread, n, p, q, block):
    """Enter ``block`` in the first free row of the table (under ``_LOCK``); its row, or None
    where the table is full."""
    free = np.flatnonzero(_TABLE[:, _KEY] <= 0)
    if free.size == 0:
        return None
    row = int(free[0])
    _TABLE[row, _THREAD:_LENGTH + 1] = (thread, n, p, q, block.ctypes.data, block.size)
    _TABLE[row, _KEY] = h  # last: the row is complete when its key is set
    return row


def warm_length(n, p, q):
    """The length of a block holding the header and the warm starts only (the layout's first
    parts: ``warm_guess`` and ``warm_add`` work on it; ``recent_get`` and ``recent_add`` must not
    be called on it). The compiled HSGP path's blocks (``compiled_hsgp``), whose point is not an
    n x n matrix."""
    return int(_layout(n, p, q)[4])


# Shared rows: one block per (key, n, p, q) that every thread reads (their thread id is
# ``_SHARED_THREAD``), e.g. the compiled HSGP path's basis tables; kept until the key is released.
_SHARED_THREAD = 0
_SHARED = {}  # key hash -> [(row, block)], replaced blocks included (a thread may still read one)


def allocate_shared(key, n, p, q, block):
    """Make ``block`` (a float64 array, kept here) the shared block of (key, n, p, q), in place
    of any earlier one; False where the table is full."""
    h = key_hash(key)
    block = np.ascontiguousarray(block, dtype=np.float64)
    with _LOCK:
        _release_pending()
        for row, _ in _SHARED.get(h, ()):
            if _TABLE[row, _KEY] == h and tuple(_TABLE[row, _N:_Q + 1]) == (n, p, q):
                _TABLE[row, _KEY] = _FREED
        row = _add_row(h, _SHARED_THREAD, n, p, q, block)
        if row is None:
            return False
        _SHARED.setdefault(h, []).append((row, block))
        return True


@njit(nogil=True, cache=True)
def find_shared_block(key, n, p, q):
    """The shared block of (key, n, p, q) (``allocate_shared``), or an empty array."""
    table = carray(_table_pointer(), (ROWS, 8))
    for r in range(ROWS):
        k = table[r, _KEY]
        if k == 0:
            break
        if (k == key and table[r, _THREAD] == _SHARED_THREAD and table[r, _N] == n and table[r, _P] == p
                and table[r, _Q] == q):
            return carray(_float_pointer(table[r, _ADDRESS]), (table[r, _LENGTH],))
    return np.empty(0)


def reset(key):
    """Forget the warm starts and recent results of every thread for ``key``."""
    for _, block in _BLOCKS.get(key_hash(key), ()):
        block[:4] = 0.0


def tallies(key=None):
    """The ``TALLIES`` of ``key`` (all keys if None), summed over threads, as a dict."""
    keys = _BLOCKS if key is None else [key_hash(key)]
    blocks = [block for k in keys for _, block in _BLOCKS.get(k, ())]
    return {name: int(sum(b[4 + i] for b in blocks)) for i, name in enumerate(TALLIES)}


def evaluations(key, cold=False):
    """Solves the compiled path has made for ``key`` in all threads (``cold``: those
    started without a warm start)."""
    return tallies(key)["cold" if cold else "solves"]


def stored(key):
    """(warm starts, recent results) held for ``key``, all threads."""
    blocks = [block for _, block in _BLOCKS.get(key_hash(key), ())]
    return int(sum(b[_WARM_COUNT] for b in blocks)), int(sum(b[_RECENT_COUNT] for b in blocks))


def threads(key):
    """The ids of the threads holding a block of ``key``."""
    return {int(_TABLE[row, _THREAD]) for row, _ in _BLOCKS.get(key_hash(key), ())}


def release(key):
    """Drop the blocks of ``key`` (no Op of that key is alive)."""
    with _LOCK:
        _release_pending()
        _drop(key_hash(key))


def release_later(key):
    """``release`` at the next ``allocate``: for finalizers, which run inside garbage
    collection, possibly while this thread holds the lock (one list append, no lock)."""
    _PENDING.append(key)


def _release_pending():
    while _PENDING:
        _drop(key_hash(_PENDING.pop()))


def _drop(h):
    for row, _ in list(_BLOCKS.pop(h, ())) + _SHARED.pop(h, []):
        if _TABLE[row, _KEY] == h:
            _TABLE[row, _KEY] = _FREED


# -- Compiled warm starts (``marginal.WarmStarts``) -------------------------------------


@njit(nogil=True, cache=True)
def _warm_slot(block, i):
    """The slot of the i-th stored warm start, oldest first."""
    return (int(block[_WARM_OLDEST]) + i) % WARM


def compiled_tolerances(op):
    """(tol, cold_tol, max_sweeps) of a compiled EP path's solves for ``op`` (an
    ``ApproxMarginalOp``): its solver options' tolerance from a warm start, a cold solve's
    (``ApproxMarginalOp.solver_options(cold=True)``, ``solve_tolerance``) and the sweep cap."""
    options = op.solver_options()
    return (float(options["tol"]), float(op.solver_options(cold=True)["tol"]),
            int(options.get("max_sweeps", 300)))


@njit(nogil=True, cache=True)
def solve_tolerance(has_start, tol, cold_tol):
    """The site-change tolerance of a solve: ``tol`` from a warm start, the smaller of ``tol`` and
    ``cold_tol`` from zero sites.

    The site change bounds EP's error only as well as the parallel map contracts: from zero
    sites, where it contracts slowly, a change below the sampler's 1e-2 can leave log Z far
    off (``benchmarks/results/hsgp.md``, "Divergences"). The cold solve, once a chain, is the
    warm start of every later one, so it runs to the engine's tolerance
    (``ApproxMarginalOp.solver_options(cold=True)``, as the Python path does).
    """
    return tol if has_start else min(tol, cold_tol)


@njit(nogil=True, cache=True)
def warm_guess(block, n, p, q, x, tau, nu):
    """``WarmStarts.guess`` on the block: writes the start into tau and nu and returns
    (whether there is one, its first change): the local linear model of the stored
    solutions (``numerics.extrapolation.trajectory_weights``, on the slots oldest first, as
    ``WarmStarts`` keeps them); s_a where a field non-negative at s_a would turn negative;
    the last solution without hyperparameters or with one stored."""
    o = _layout(n, p, q)
    count = int(block[_WARM_COUNT])
    if count == 0:
        return False, np.inf
    P = block[o[0]:o[1]].reshape((WARM, p))
    T = block[o[1]:o[2]].reshape((WARM, n))
    V = block[o[2]:o[3]].reshape((WARM, n))
    F = block[o[3]:o[4]]
    if p == 0 or count == 1:
        a = _warm_slot(block, count - 1)
        tau[:] = T[a]
        nu[:] = V[a]
        return True, F[a]
    slots = np.empty(count, dtype=np.int64)
    for i in range(count):
        slots[i] = _warm_slot(block, i)
    a, js, w = trajectory_weights(P[slots], x)
    a = slots[a]
    tau[:] = T[a]
    nu[:] = V[a]
    if w.shape[0] == 0:
        return True, F[a]
    tau_x = T[a].copy()
    nu_x = V[a].copy()
    for j in range(w.shape[0]):
        s = slots[js[j]]
        tau_x += w[j] * (T[s] - T[a])
        nu_x += w[j] * (V[s] - V[a])
    if (np.min(T[a]) >= 0.0 > np.min(tau_x)) or (np.min(V[a]) >= 0.0 > np.min(nu_x)):
        return True, F[a]
    tau[:] = tau_x
    nu[:] = nu_x
    return True, F[a]


@njit(nogil=True, cache=True)
def warm_add(block, n, p, q, x, tau, nu, first_change):
    """``WarmStarts.add``: store a solution, dropping the oldest beyond ``WARM``."""
    o = _layout(n, p, q)
    count = int(block[_WARM_COUNT])
    if count < WARM:
        s = _warm_slot(block, count)
        block[_WARM_COUNT] = count + 1
    else:
        s = int(block[_WARM_OLDEST])
        block[_WARM_OLDEST] = (s + 1) % WARM
    block[o[0] + s * p:o[0] + (s + 1) * p] = x
    block[o[1] + s * n:o[1] + (s + 1) * n] = tau
    block[o[2] + s * n:o[2] + (s + 1) * n] = nu
    block[o[3] + s] = first_change


@njit(nogil=True, cache=True)
def count_call(block):
    block[4] += 1.0


@njit(nogil=True, cache=True)
def count_solve(block, cold, sweeps):
    """Count a compiled solve: whether it started without a warm start, and its sweeps."""
    block[5] += 1.0
    block[6] += 1.0 if cold else 0.0
    block[7] += sweeps


# -- Compiled recent results (``marginal.RecentResults``) -------------------------------


@njit(nogil=True, cache=True)
def _same(a, b):
    if a.size != b.size:
        return False
    for i in range(a.size):
        if a[i] != b[i]:
            return False
    return True


@njit(nogil=True, cache=True)
def _recent_entry(block, o, n, p, q, params, y, hyper):
    """The stored entry with these hyperparameters, parameters and labels, or -1."""
    for e in range(int(block[_RECENT_COUNT])):
        if (_same(block[o[4] + e * p:o[4] + (e + 1) * p], hyper)
                and _same(block[o[5] + e * q:o[5] + (e + 1) * q], params)
                and _same(block[o[6] + e * n:o[6] + (e + 1) * n], y)):
            return e
    return -1


@njit(nogil=True, cache=True)
def recent_get(block, n, p, q, K, params, y, hyper):
    """``RecentResults.get``: (found, log_z, dK, dth, loo, n_iter, status), copies; found
    only for the same hyperparameters, parameters, labels and K (exact)."""
    nn = n * n
    if recent_size(n, p) == 0:
        return False, 0.0, np.empty((0, 0)), np.empty(0), np.empty(0), 0, 0
    o = _layout(n, p, q)
    e = _recent_entry(block, o, n, p, q, params, y, hyper)
    if e < 0 or not _same(block[o[7] + e * nn:o[7] + (e + 1) * nn], K.reshape(-1)):
        return False, 0.0, np.empty((0, 0)), np.empty(0), np.empty(0), 0, 0
    dK = block[o[8] + e * nn:o[8] + (e + 1) * nn].reshape((n, n)).copy()
    return (True, block[o[9] + e], dK, block[o[10] + e * q:o[10] + (e + 1) * q].copy(),
            block[o[11] + e * n:o[11] + (e + 1) * n].copy(), int(block[o[12] + e]), int(block[o[13] + e]))


@njit(nogil=True, cache=True)
def recent_add(block, n, p, q, K, params, y, hyper, log_z, dK, dth, loo, n_iter, status):
    """``RecentResults.add``: store an evaluation's outputs, over an entry with the same
    hyperparameters, parameters and labels, else over the oldest beyond the size."""
    size = recent_size(n, p)
    if size == 0 or dK.shape != (n, n) or dth.size != q or loo.size != n:
        return
    o = _layout(n, p, q)
    e = _recent_entry(block, o, n, p, q, params, y, hyper)
    if e < 0:
        count = int(block[_RECENT_COUNT])
        if count < size:
            e = count
            block[_RECENT_COUNT] = count + 1
        else:
            e = int(block[_RECENT_OLDEST])
            block[_RECENT_OLDEST] = (e + 1) % size
    nn = n * n
    block[o[4] + e * p:o[4] + (e + 1) * p] = hyper
    block[o[5] + e * q:o[5] + (e + 1) * q] = params
    block[o[6] + e * n:o[6] + (e + 1) * n] = y
    block[o[7] + e * nn:o[7] + (e + 1) * nn] = K.reshape(-1)
    block[o[8] + e * nn:o[8] + (e + 1) * nn] = dK.reshape(-1)
    block[o[9] + e] = log_z
    block[o[10] + e * q:o[10] + (e + 1) * q] = dth
    block[o[11] + e * n:o[11] + (e + 1) * n] = loo
    block[o[12] + e] = n_iter
    block[o[13] + e] = status
