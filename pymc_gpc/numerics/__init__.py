"""Scalar special functions (``special``: log Phi, N/Phi, log sigmoid) and the LAPACK/BLAS
routines called from compiled code with the GIL released (``lapack``): the only places
these are computed. ``workspace``: the pool of large work arrays reused across evaluations.
``plain``: an array argument as the compiled functions are compiled for."""

import numpy as np


def plain(a):
    """``a`` as a C-contiguous, writable float array: itself where it is one, else a copy.

    numba compiles a function once for each array layout and read-only flag of its arguments,
    and PyTensor hands a graph's constants (the labels, the inputs X) to ``perform`` read-only:
    for the small arrays (vectors, n x d inputs) that the Python path passes to compiled code,
    a copy is cheaper than a second compilation of that code (about 10 CPU seconds for the EP
    loop) beside the one the compiled graphs use.
    """
    if a.dtype == np.float64 and a.flags.c_contiguous and a.flags.writeable:
        return a
    return np.array(a, dtype=float, order="C")
