"""Scalar special functions (``special``: log Phi, N/Phi, log sigmoid) and the LAPACK/BLAS
routines called from compiled code with the GIL released (``lapack``): the only places
these are computed. ``workspace``: the pool of large work arrays reused across evaluations.
``plain``: an array argument in the layout the compiled EP loop is compiled for.
``symbols``: numba cfuncs registered under fixed symbols, for compiled graphs to call."""

import numpy as np


def plain(a):
    """``a`` as a C-contiguous, writable array of its dtype: itself where it is one, else a copy.

    numba compiles a function once for each array layout and read-only flag of its arguments,
    and PyTensor hands a graph's constants (the labels) to ``perform`` read-only, while the
    compiled EP graph passes them on writable (``np.ascontiguousarray`` in
    ``backends.numba.compiled_ep``): a copy of the labels and the likelihood parameters
    (vectors) is cheaper than a second compilation of the EP loop (about 10 CPU seconds).
    """
    if a.flags.c_contiguous and a.flags.writeable:
        return a
    return np.array(a, order="C")
