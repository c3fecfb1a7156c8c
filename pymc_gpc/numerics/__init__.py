"""Scalar special functions (``special``: log Phi, N/Phi, log sigmoid) and the LAPACK/BLAS
routines called from compiled code with the GIL released (``lapack``): the only places
these are computed. ``workspace``: the pool of large work arrays reused across evaluations."""
