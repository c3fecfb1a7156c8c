"""numba cfuncs registered with LLVM under fixed symbols, once a process.

A compiled graph that called a large numba function through its dispatcher linked the
function's code into its own, and numba optimised all of it again in every graph; calling
it through a symbol (``numba.types.ExternalFunction``) links nothing. The EP and HSGP
engines (``backends.numba.compiled_ep``, ``compiled_hsgp``) and the ARD kernels
(``kernels.external_kernels``) are reached this way; ``lapack`` registers scipy's routines
the same way."""

import threading

import llvmlite.binding as llvm
from numba import cfunc, types

_LOCK = threading.Lock()


def register_cfuncs(store, entries):
    """Compile (or load from numba's cache) each ``(symbol, signature, function)`` of
    ``entries`` as a cfunc and register its address under ``symbol``, unless ``store`` (the
    caller's module-level list) already holds them; ``store`` then holds the cfuncs, which
    must stay alive while LLVM holds their addresses. Under a lock: a thread that calls this
    while another compiles waits, and never sees a partial ``store``.

    Returns one ``ExternalFunction`` per entry, with pointer arguments taken as ``voidptr``
    (callers pass ``arr.ctypes``)."""
    with _LOCK:
        if not store:
            compiled = [cfunc(signature, cache=True)(function) for _, signature, function in entries]
            for (symbol, _, _), c in zip(entries, compiled):
                llvm.add_symbol(symbol, c.address)
            store.extend(compiled)
    return tuple(types.ExternalFunction(symbol, signature.return_type(
        *(types.voidptr if isinstance(t, types.CPointer) else t for t in signature.args)))
        for symbol, signature, _ in entries)
