"""The Ops that numba-compiled graphs call back into, by a key that is the same in every process.

A compiled graph cannot hold a Python object, so it names its Op by a string (``numba_key``:
the Op's props and its constant inputs' data, hashed) and reaches it through ``OPS``; both
the object-mode implementation (``dispatch``) and the compiled paths' fallbacks
(``dispatch._fallback_ep``, ``compiled_hsgp``) look the Op up here. Held weakly: an Op's
compiled-path blocks are released once no Op of its key is alive (``release_if_unused``).
"""

import hashlib

import numpy as np
from numba.extending import overload

from ..._numba_cache import cache_key
from . import thread_state

# Ops whose numba implementation has been built in this process, by cache key
# (``numba_key``), held weakly; the compiled graph names its Op by that key. Equal Ops
# on equal data share one key: the first one still alive answers (results are the
# same; its warm starts and ``counts`` are shared).
OPS = {}


def numba_key(op, node):
    """A key for ``op`` at ``node`` that is the same in every process: the Op's props
    and the data of its constant inputs (the labels, usually), hashed."""
    parts = [type(op).__qualname__, [(k, repr(getattr(op, k))) for k in op.__props__]]
    for v in node.inputs:
        data = getattr(v, "data", None)
        if isinstance(data, np.ndarray):
            parts.append(hashlib.sha256(np.ascontiguousarray(data).tobytes()).hexdigest())
    return cache_key(*parts)


def perform_registered(key, inputs):
    """Run the ``perform`` of the Op registered under ``key`` (called from compiled graphs)."""
    op, n_outputs = next((ref(), k) for ref, k in OPS[key] if ref() is not None)
    storage = [[None] for _ in range(n_outputs)]
    op.perform(None, list(inputs), storage)  # neither Op's perform reads the node
    return tuple(s[0] for s in storage)


def registered_op(key):
    """The first Op still alive among those registered under ``key``."""
    return next(ref() for ref, _ in OPS[key] if ref() is not None)


def release_if_unused(key):
    """Drop the compiled path's blocks of ``key`` once no Op of that key is alive (a
    finalizer: the release itself waits for the next block made, ``release_later``)."""
    if not any(ref() is not None for ref, _ in OPS.get(key, ())):
        thread_state.release_later(key)


def runtime_key(key):
    """``key`` itself; in compiled code, typed as a plain string rather than as the literal
    string a closure's key is frozen to, so that the module-level object-mode steps
    (``dispatch._fallback_block``, ``compiled_hsgp._fallback_block``, ...) are compiled and
    cached once, not once more for every model's key."""
    return key


@overload(runtime_key)
def _runtime_key(key):
    return lambda key: key  # overloads are typed on non-literal arguments first
