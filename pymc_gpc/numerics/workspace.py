"""Large work arrays reused across evaluations instead of freshly mapped each time.

An array above glibc's largest mmap threshold is a fresh mapping at every allocation,
and its first touch faults in every page: a large FITC evaluation's four m x n arrays
(V, its single-precision copy, E = A^-1 V and dlog Z / dK_uf) are new pages at every
evaluation, paid in system time. Worse, NumPy advises the kernel to back large arrays
with huge pages (``MADV_HUGEPAGE``); where transparent huge pages are ``madvise`` with
``defrag`` ``madvise``, a fault may then stall in synchronous memory compaction (NumPy
issue 31590). The sizes and timings are in ``docs/design/engine_notes.md``
("Reused work arrays").

``ArrayPool.empty`` hands out an array it made before wherever nothing else refers to it
any more (no result, view or PyTensor storage cell holds it: its reference count is the
pool's own), so an array is never handed out twice while in use, whatever keeps it alive.
Arrays below ``min_bytes`` come from ``np.empty`` (the allocator reuses those itself).
"""

import sys
import threading

import numpy as np


def _references(items, i):
    return sys.getrefcount(items[i])


class ArrayPool:
    """Reusable arrays of at least ``min_bytes``. Before each new allocation the oldest idle
    arrays are forgotten until the idle ones take at most ``max_bytes`` with it; ``clear``
    forgets all of them (e.g. after sampling a large model).

    ``empty(shape, dtype, order)`` is ``np.empty``'s contract (contents undefined).
    Thread-safe: the test for a free array and its handing out happen under one lock, and
    a handed-out array is referenced by the caller before the lock is released.
    """

    def __init__(self, min_bytes=32 << 20, max_bytes=1 << 30):
        self.min_bytes = min_bytes
        self.max_bytes = max_bytes
        self._arrays = []  # oldest first
        self._lock = threading.Lock()
        probe = [object()]
        self._idle_count = _references(probe, 0)  # the reference count of an array only the pool holds

    def empty(self, shape, dtype=np.float64, order="F"):
        dtype = np.dtype(dtype)
        shape = tuple(int(s) for s in np.atleast_1d(shape))
        nbytes = dtype.itemsize * int(np.prod(shape))
        if nbytes < self.min_bytes:
            return np.empty(shape, dtype=dtype, order=order)
        fortran = order == "F"
        with self._lock:
            for i in range(len(self._arrays)):
                a = self._arrays[i]
                if (a.shape == shape and a.dtype == dtype and a.flags.f_contiguous == fortran
                        and _references(self._arrays, i) == self._idle_count + 1):  # + ``a``
                    self._arrays.append(self._arrays.pop(i))  # most recently used last
                    return a
                del a
            self._drop_idle(self.max_bytes - nbytes)
            a = np.empty(shape, dtype=dtype, order=order)
            self._arrays.append(a)
            return a

    def copy(self, a):
        """A copy of ``a`` (``np.array(a)``'s), in a reused array where it is large."""
        a = np.asarray(a)
        if a.nbytes < self.min_bytes:  # the common case, as cheap as np.array (the Ops' hot path)
            return np.array(a)
        order = "F" if a.flags.f_contiguous and not a.flags.c_contiguous else "C"
        out = self.empty(a.shape, a.dtype, order=order)
        np.copyto(out, a)
        return out

    def _drop_idle(self, budget):
        """Forget the oldest idle arrays until the idle ones take at most ``budget`` bytes."""
        idle = [i for i in range(len(self._arrays)) if _references(self._arrays, i) == self._idle_count]
        total = sum(self._arrays[i].nbytes for i in idle)
        drop = []
        for i in idle:  # oldest first
            if total <= budget:
                break
            total -= self._arrays[i].nbytes
            drop.append(i)
        for i in reversed(drop):
            del self._arrays[i]

    def idle_bytes(self):
        """Bytes held by arrays nothing else refers to."""
        with self._lock:
            return sum(self._arrays[i].nbytes for i in range(len(self._arrays))
                       if _references(self._arrays, i) == self._idle_count)

    def clear(self):
        """Forget every array (those in use stay valid: their holders keep them)."""
        with self._lock:
            self._arrays.clear()


# The package's pool (``structures.fitc``'s m x n arrays, the Ops' copies of recent results).
POOL = ArrayPool()
