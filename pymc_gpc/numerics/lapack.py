"""The LAPACK/BLAS routines the package uses, called with the GIL released.

scipy's ``scipy.linalg.lapack`` wrappers hold the GIL, so two sampler threads (nutpie
runs chains as threads) would take turns. These functions call the same Fortran
routines through ``scipy.linalg.cython_lapack`` / ``cython_blas`` from numba with
``nogil=True``, and are cached on disk (``_routine``). Arrays are Fortran-ordered and
overwritten in place; the lower triangle is used throughout. Each returns LAPACK's
``info`` (0 = success) where it has one. ``potrf_lower``, ``lauum_lower``,
``triangular_left``, ``inv_lower``, ``syrk_lower`` and ``gemm`` also
take float32 arrays (spotrf, slauum, strmm, strsm, strtri, ssyrk, sgemm: the rough
posteriors of ``structures.dense`` and ``structures.fitc`` and the rough gradients); numba
compiles one version per precision.
scipy's ``scipy.linalg.blas`` wrappers hold the GIL too: two threads calling them take
as long as one doing their work in turn (``docs/design/engine_notes.md``, "LAPACK
and BLAS without the GIL").
"""

import llvmlite.binding as llvm
import numpy as np
from numba import njit, types
from numba.extending import get_cython_function_address


def _routine(module, name, n_args, addresses=()):
    """scipy's Fortran routine ``name`` as a numba external function.

    Its address is registered with LLVM under a fixed symbol name, and compiled code
    refers to that name (resolved when the code is loaded), so the functions below
    can be cached on disk by numba, unlike calls through ctypes pointers. Arguments are
    pointers (``arr.ctypes``), except at the positions ``addresses``: integer
    addresses (same calling convention), so that a block of a larger array can be
    passed as its address plus an offset.
    """
    symbol = f"pymc_gpc_{name}"
    llvm.add_symbol(symbol, get_cython_function_address(f"scipy.linalg.cython_{module}", name))
    args = [types.intp if i in addresses else types.voidptr for i in range(n_args)]
    return types.ExternalFunction(symbol, types.void(*args))


_dpotrf = _routine("lapack", "dpotrf", 5)
_dlauum = _routine("lapack", "dlauum", 5)
_dpotrs = _routine("lapack", "dpotrs", 8)
_dtrmm_at = _routine("blas", "dtrmm", 11, (7, 9))
_dtrsm_at = _routine("blas", "dtrsm", 11, (7, 9))
_dtrtri_at = _routine("lapack", "dtrtri", 6, (3,))
_spotrf = _routine("lapack", "spotrf", 5)
_slauum = _routine("lapack", "slauum", 5)
_strmm_at = _routine("blas", "strmm", 11, (7, 9))
_strsm_at = _routine("blas", "strsm", 11, (7, 9))
_strtri_at = _routine("lapack", "strtri", 6, (3,))
_dsyrk = _routine("blas", "dsyrk", 10)
_ssyrk = _routine("blas", "ssyrk", 10)
_dgemm = _routine("blas", "dgemm", 13)
_sgemm = _routine("blas", "sgemm", 13)

_L = 76  # ord("L")
_N = 78  # ord("N")
_R = 82  # ord("R")
_T = 84  # ord("T")
# Block size of ``inv_lower``: below it dtrtri is called directly.
_INV_BLOCK = 32


@njit(nogil=True, cache=True)
def _lower_args(a):
    """LAPACK's (uplo = "L", n, info) pointer arguments for a routine on a's lower triangle
    (lda = n): ``potrf_lower`` and ``lauum_lower``."""
    return np.array([_L], np.uint8), np.array([a.shape[0]], np.int32), np.zeros(1, np.int32)


@njit(nogil=True, cache=True)
def potrf_lower(a):
    """a <- L with a = L L^T (LAPACK dpotrf, spotrf for float32); the strict upper triangle is zeroed."""
    uplo, nn, info = _lower_args(a)
    if a.itemsize == 4:
        _spotrf(uplo.ctypes, nn.ctypes, a.ctypes, nn.ctypes, info.ctypes)
    else:
        _dpotrf(uplo.ctypes, nn.ctypes, a.ctypes, nn.ctypes, info.ctypes)
    for j in range(a.shape[0]):
        for i in range(j):
            a[i, j] = 0.0
    return info[0]


@njit(nogil=True, cache=True)
def lauum_lower(a):
    """a <- a^T a for lower-triangular a, returned as a full symmetric matrix (dlauum, slauum
    for float32)."""
    uplo, nn, info = _lower_args(a)
    if a.itemsize == 4:
        _slauum(uplo.ctypes, nn.ctypes, a.ctypes, nn.ctypes, info.ctypes)
    else:
        _dlauum(uplo.ctypes, nn.ctypes, a.ctypes, nn.ctypes, info.ctypes)
    for j in range(a.shape[0]):
        for i in range(j):
            a[i, j] = a[j, i]
    return info[0]


@njit(nogil=True, cache=True)
def potrs_lower(L, b):
    """b <- (L L^T)^{-1} b for a vector or Fortran-ordered matrix b (dpotrs)."""
    n = L.shape[0]
    nrhs = 1 if b.ndim == 1 else b.shape[1]
    uplo = np.array([_L], np.uint8)
    nn = np.array([n], np.int32)
    nr = np.array([nrhs], np.int32)
    info = np.zeros(1, np.int32)
    _dpotrs(uplo.ctypes, nn.ctypes, nr.ctypes, L.ctypes, nn.ctypes, b.ctypes, nn.ctypes, info.ctypes)
    return info[0]


@njit(nogil=True, cache=True)
def _triangular_times(side, solve, alpha, t, it, jt, b, ib, jb, rows, cols, transpose=False):
    """The block B = b[ib:ib+rows, jb:jb+cols] <- alpha op(T) B (side "L") or
    alpha B op(T) (side "R"), with T the lower-triangular block of t at (it, jt) and
    op(T) = T or T^{-1} (``solve``), transposed with ``transpose``; t and b are
    Fortran-ordered (their leading dimensions their first), and may be one array (BLAS
    dtrmm / dtrsm; strmm / strsm for float32 t and b)."""
    sd = np.array([side], np.uint8)
    uplo = np.array([_L], np.uint8)
    trans = np.array([_T if transpose else _N], np.uint8)
    diag = np.array([_N], np.uint8)
    mm = np.array([rows], np.int32)
    nn = np.array([cols], np.int32)
    lt = np.array([t.shape[0]], np.int32)
    lb = np.array([b.shape[0]], np.int32)
    if t.itemsize != b.itemsize:
        raise ValueError("_triangular_times: t and b must have the same precision")
    al = np.empty(1, t.dtype)
    al[0] = alpha
    t_at = t.ctypes.data + t.itemsize * (it + jt * t.shape[0])
    b_at = b.ctypes.data + b.itemsize * (ib + jb * b.shape[0])
    if t.itemsize == 4:
        if solve:
            _strsm_at(sd.ctypes, uplo.ctypes, trans.ctypes, diag.ctypes, mm.ctypes, nn.ctypes,
                      al.ctypes, t_at, lt.ctypes, b_at, lb.ctypes)
        else:
            _strmm_at(sd.ctypes, uplo.ctypes, trans.ctypes, diag.ctypes, mm.ctypes, nn.ctypes,
                      al.ctypes, t_at, lt.ctypes, b_at, lb.ctypes)
    elif solve:
        _dtrsm_at(sd.ctypes, uplo.ctypes, trans.ctypes, diag.ctypes, mm.ctypes, nn.ctypes,
                  al.ctypes, t_at, lt.ctypes, b_at, lb.ctypes)
    else:
        _dtrmm_at(sd.ctypes, uplo.ctypes, trans.ctypes, diag.ctypes, mm.ctypes, nn.ctypes,
                  al.ctypes, t_at, lt.ctypes, b_at, lb.ctypes)


@njit(nogil=True, cache=True)
def triangular_left(T, B, alpha, transpose, solve):
    """B <- alpha op(T) B for lower-triangular T (n, n) and B (n, m) of T's precision, both
    Fortran-ordered with their first dimension as leading dimension (B may be a block of
    columns of a larger array); op(T) = T, T^T, T^{-1} or T^{-T} (``transpose``, ``solve``)."""
    _check_fortran(T)
    _check_fortran(B)
    n, m = B.shape
    zero = np.int64(0)  # typed arguments, not literals: ``_triangular_times`` compiles once per precision
    _triangular_times(np.uint8(_L), np.bool_(solve), alpha, T, zero, zero, B, zero, zero, n, m, np.bool_(transpose))


@njit(nogil=True, cache=True)
def _check_fortran(a):
    if a.shape[0] > 1 and a.strides[0] != a.itemsize or a.shape[1] > 1 and a.strides[1] != a.itemsize * a.shape[0]:
        raise ValueError("BLAS arguments must be Fortran-ordered, leading dimension = rows")


@njit(nogil=True, cache=True)
def inv_lower(a):
    """a <- a^{-1} for a Fortran-ordered lower-triangular a; returns LAPACK's info.

    The blocked algorithm of LAPACK's dtrtri (lower case), block column by block
    column from the last: A21 <- -(A22^{-1} A21) A11^{-1} by one dtrmm and one dtrsm,
    then the diagonal block A11 by dtrtri. The same n^3/3 flops as a single dtrtri
    call, mostly at BLAS-3 speed, where OpenBLAS's own dtrtri runs well below the rate of
    its Cholesky (timings: ``docs/design/engine_notes.md``, "The blocked triangular
    inverse").
    """
    n = a.shape[0]
    if n == 0:
        return 0
    uplo = np.array([_L], np.uint8)
    diag = np.array([_N], np.uint8)
    ll = np.array([n], np.int32)
    nb = np.zeros(1, np.int32)
    info = np.zeros(1, np.int32)
    start = ((n - 1) // _INV_BLOCK) * _INV_BLOCK
    for j in range(start, -1, -_INV_BLOCK):
        jb = min(_INV_BLOCK, n - j)
        rest = n - j - jb
        if rest > 0:
            _triangular_times(np.uint8(_L), np.bool_(False), 1.0, a, j + jb, j + jb, a, j + jb, j, rest, jb,
                              np.bool_(False))
            _triangular_times(np.uint8(_R), np.bool_(True), -1.0, a, j, j, a, j + jb, j, rest, jb, np.bool_(False))
        nb[0] = jb
        at = a.ctypes.data + a.itemsize * (j + j * n)
        if a.itemsize == 4:
            _strtri_at(uplo.ctypes, diag.ctypes, nb.ctypes, at, ll.ctypes, info.ctypes)
        else:
            _dtrtri_at(uplo.ctypes, diag.ctypes, nb.ctypes, at, ll.ctypes, info.ctypes)
        if info[0] != 0:
            return info[0] + j
    return 0


@njit(nogil=True, cache=True)
def syrk_lower(alpha, a, beta, c, transpose):
    """c's lower triangle <- alpha op(a) op(a)^T + beta c, with op(a) = a (n, k) or, with
    ``transpose``, a^T for a (k, n) (BLAS dsyrk / ssyrk); a and c of one precision,
    Fortran-ordered; c's strict upper triangle is not written (nor read: with beta = 0 its
    lower triangle need not be initialised)."""
    _check_fortran(a)
    _check_fortran(c)
    if c.itemsize != a.itemsize:
        raise ValueError("syrk_lower: a and c must have the same precision")
    k, n = a.shape if transpose else (a.shape[1], a.shape[0])
    uplo = np.array([_L], np.uint8)
    trans = np.array([_T if transpose else _N], np.uint8)
    nn = np.array([n], np.int32)
    kk = np.array([k], np.int32)
    lda = np.array([max(a.shape[0], 1)], np.int32)
    ldc = np.array([max(n, 1)], np.int32)
    al = np.full(1, alpha, a.dtype)
    be = np.full(1, beta, a.dtype)
    if a.itemsize == 4:
        _ssyrk(uplo.ctypes, trans.ctypes, nn.ctypes, kk.ctypes, al.ctypes, a.ctypes, lda.ctypes,
               be.ctypes, c.ctypes, ldc.ctypes)
    else:
        _dsyrk(uplo.ctypes, trans.ctypes, nn.ctypes, kk.ctypes, al.ctypes, a.ctypes, lda.ctypes,
               be.ctypes, c.ctypes, ldc.ctypes)


@njit(nogil=True, cache=True)
def gemm(alpha, a, b, beta, c, transpose_b):
    """c <- alpha a op(b) + beta c, op(b) = b or b^T (BLAS dgemm / sgemm); a (m, k), c (m, n),
    all of one precision and Fortran-ordered."""
    _check_fortran(a)
    _check_fortran(b)
    _check_fortran(c)
    if a.itemsize != b.itemsize or a.itemsize != c.itemsize:
        raise ValueError("gemm: a, b and c must have the same precision")
    m, k = a.shape
    n = c.shape[1]
    if c.shape[0] != m or (b.shape[0] if transpose_b else b.shape[1]) != n or \
            (b.shape[1] if transpose_b else b.shape[0]) != k:
        raise ValueError("gemm: shapes do not match")
    ta = np.array([_N], np.uint8)
    tb = np.array([_T if transpose_b else _N], np.uint8)
    mm, nn, kk = np.array([m], np.int32), np.array([n], np.int32), np.array([k], np.int32)
    lda = np.array([max(m, 1)], np.int32)
    ldb = np.array([max(b.shape[0], 1)], np.int32)
    ldc = np.array([max(m, 1)], np.int32)
    al = np.full(1, alpha, a.dtype)
    be = np.full(1, beta, a.dtype)
    if a.itemsize == 4:
        _sgemm(ta.ctypes, tb.ctypes, mm.ctypes, nn.ctypes, kk.ctypes, al.ctypes, a.ctypes, lda.ctypes,
               b.ctypes, ldb.ctypes, be.ctypes, c.ctypes, ldc.ctypes)
    else:
        _dgemm(ta.ctypes, tb.ctypes, mm.ctypes, nn.ctypes, kk.ctypes, al.ctypes, a.ctypes, lda.ctypes,
               b.ctypes, ldb.ctypes, be.ctypes, c.ctypes, ldc.ctypes)
