"""``numerics.symbols.register_cfuncs``: cfuncs registered once a process, callable by symbol
from compiled code, and never half-registered for a second thread."""

import threading

import numpy as np
from numba import carray, njit, types

from pymc_gpc.numerics.symbols import register_cfuncs


def _scale_at(n, factor, x_):
    x = carray(x_, (n,))
    for i in range(n):
        x[i] *= factor
    return n


def _offset_at(n, x_):
    x = carray(x_, (n,))
    x += 1.0
    return 2 * n


_STORE = []
_ENTRIES = [("pymc_gpc_test_scale", types.int64(types.int64, types.float64, types.CPointer(types.float64)), _scale_at),
            ("pymc_gpc_test_offset", types.int64(types.int64, types.CPointer(types.float64)), _offset_at)]


def test_threads_registering_at_once_all_get_every_symbol_and_compile_once():
    results, barrier = [], threading.Barrier(4)

    def register():
        barrier.wait()
        results.append(register_cfuncs(_STORE, _ENTRIES))

    threads = [threading.Thread(target=register) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 4 and all(len(r) == 2 for r in results)
    assert len(_STORE) == 2  # one cfunc per entry, not one per thread
    scale, offset = results[0]

    @njit
    def call(x):
        a = scale(x.shape[0], 3.0, x.ctypes)
        b = offset(x.shape[0], x.ctypes)
        return a, b

    x = np.arange(4.0)
    assert call(x) == (4, 8)
    np.testing.assert_array_equal(x, 3.0 * np.arange(4.0) + 1.0)
