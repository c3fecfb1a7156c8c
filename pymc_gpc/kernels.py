r"""The covariance function of the papers, as a ``pm.gp.cov.Covariance``.

Kim & Ghahramani (2003), eq. 10 (Tan, eq. 1):

.. math::

    c(x_i, x_j) = v_0 \exp\Big(-\tfrac12 \sum_m l_m\, d_m(x_i^m, x_j^m)\Big) + v_1 + v_2\, \delta(i, j),

with d_m = (x_i^m - x_j^m)^2 on a continuous column and d_m = 1 - delta(x_i^m, x_j^m)
(Hamming) on a discrete one; l_m is an inverse squared lengthscale, v_1 a bias
variance and v_2 a latent noise variance ("soft" boundary; v_2 -> 0 is "hard").
With no discrete column and v_2 = 0 it is Barber & Williams' ARD kernel (their eq. 2),
i.e. ``v0 * pm.gp.cov.ExpQuad(d, ls=l**-0.5) + pm.gp.cov.Constant(v1)``.

The kernel is one PyTensor Op (``ARDKernelOp``) and so is its pullback
(``ARDKernelPullbackOp``): with E = exp(-D/2), D = sum_m l_m d_m, and a cotangent G of K,

.. math::

    \bar v_0 = \langle G, E\rangle, \quad \bar v_1 = \textstyle\sum_{ij} G_{ij}, \quad
    \bar v_2 = \operatorname{tr} G, \quad
    \bar l_m = -\tfrac12 v_0 \langle G \circ E, d_m\rangle,

each an O(n^2 d) pass in numba's nopython mode without n x n x d temporaries (the gradient
in the continuous columns of X too; the Hamming distance has none). From
``PRODUCT_MIN_COLUMNS`` continuous columns on both go through BLAS products,
D = q 1^T + 1 r^T - 2 X diag(l) Xs^T and
<A, d_m> = sum_i X_im^2 (A 1)_i + sum_j Xs_jm^2 (A^T 1)_j - 2 (X^T A Xs)_mm for A = G o E.
Large outputs come from the pool of large arrays (``_kernel_outputs``). The pullback has no
gradient itself: for Hessian-based tools build the kernel from ``pm.gp.cov``.

Several classes: ``ard_kernels(d, classes)`` creates one ARD kernel per class (its
hyperparameters with a leading ``class`` dimension), ``per_class(factory, *hyperparameters)``
any kernel built from (c, ...) variables.
"""

import numba
import numpy as np
import pytensor.tensor as pt
from numba import carray, njit
from pymc.gp.cov import Covariance
from pytensor.gradient import DisconnectedType, grad_not_implemented
from pytensor.graph.basic import Apply
from pytensor.graph.op import Op

from ._numba_cache import cache_key
from .numerics import lapack, plain
from .numerics.special import exp_inplace
from .numerics.symbols import register_cfuncs
from .numerics.workspace import POOL


# From this many continuous columns on, their distances and pullback go through one BLAS
# product each (``_product_distance``, ``_product_pullback``) instead of O(n^2 d) loops
# (level below that: benchmarks/results/kernel_products.md).
PRODUCT_MIN_COLUMNS = 8

# Entries of a row that the fused passes (``ard_kernel``, ``distance_pullback``) take at a
# time: a block's distances and accumulators (a few times 4 kB) stay in L1 cache while the
# n x m arrays are each read or written once.
BLOCK = 512
# Rows of a tile of the pullback's pass (``distance_pullback``): TILE_ROWS x BLOCK entries of
# G and of E stay in L2 cache, whichever way G is ordered.
TILE_ROWS = 32


@njit(nogil=True, cache=True)
def _split_columns(discrete, min_columns, n, m):
    """(product, loop): indices of the columns the BLAS-product forms take (every continuous
    column, where there are at least ``min_columns`` of them and neither set of points is
    empty) and of the columns left to the loops."""
    continuous = np.nonzero(~discrete)[0]
    if continuous.shape[0] >= min_columns and n > 0 and m > 0:
        return continuous, np.nonzero(discrete)[0]
    return continuous[:0], np.arange(discrete.shape[0])


@njit(nogil=True, cache=True)
def _same_points(X, Xs):
    """Whether Xs holds the same rows as X (then the distances are made exactly symmetric)."""
    if X.shape != Xs.shape:
        return False
    for i in range(X.shape[0]):
        for c in range(X.shape[1]):
            if X[i, c] != Xs[i, c]:
                return False
    return True


@njit(nogil=True, cache=True)
def _centred(P, shift, cols):
    """The columns ``cols`` of P minus ``shift``, Fortran-ordered (rows of P, len(cols))."""
    out = np.empty((cols.shape[0], P.shape[0])).T
    for c in range(cols.shape[0]):
        for i in range(P.shape[0]):
            out[i, c] = P[i, cols[c]] - shift[c]
    return out


@njit(nogil=True, cache=True)
def _centred_columns(X, Xs, cols):
    """The columns ``cols`` of X and of Xs, both minus X's column means (``_centred``):
    distances do not change, and the rounding of the product forms' differences is then
    relative to the data's spread, not its offset."""
    shift = np.empty(cols.shape[0])
    for c in range(cols.shape[0]):
        shift[c] = X[:, cols[c]].mean()
    return _centred(X, shift, cols), _centred(Xs, shift, cols)


@njit(nogil=True, cache=True)
def _product_distance(X, Xs, l, cols, symmetric, out):
    r"""sum_{m in cols} l_m (X_im - Xs_jm)^2 = q_i + r_j - 2 (X diag(l) Xs^T)_ij, with
    q_i = sum_m l_m X_im^2 and r_j likewise, by one BLAS product (``lapack.gemm``) on the
    centred columns (``_centred_columns``), C-ordered (n, m). ``symmetric`` (Xs is X): the
    lower triangle is mirrored and the diagonal is zero, so the result is exactly symmetric,
    as the loop's is. Where all l_m have one sign the result is clipped to that sign
    (rounding can leave a tiny distance of the other). Written into ``out`` and returned."""
    n, m, k = X.shape[0], Xs.shape[0], cols.shape[0]
    A, B = _centred_columns(X, Xs, cols)
    lc = l[cols]
    q, r = np.zeros(n), np.zeros(m)
    for c in range(k):
        for i in range(n):
            q[i] += lc[c] * A[i, c] * A[i, c]
            A[i, c] *= lc[c]
        for j in range(m):
            r[j] += lc[c] * B[j, c] * B[j, c]
    P = out.T  # Fortran (m, n): P^T = B (diag(l) A)^T, so P.T is C-ordered (n, m)
    lapack.gemm(1.0, B, A, 0.0, P, np.bool_(True))  # typed, not a literal: one compilation of gemm
    D = P.T
    lo, hi = min(lc.min(), 0.0), max(lc.max(), 0.0)
    for i in range(n):
        for j in range(i if symmetric else m):
            d = q[i] + r[j] - 2.0 * D[i, j]
            D[i, j] = min(d, 0.0) if hi <= 0.0 else (max(d, 0.0) if lo >= 0.0 else d)
    if symmetric:
        for i in range(n):
            D[i, i] = 0.0
            for j in range(i + 1, n):
                D[i, j] = D[j, i]
    return D


@njit(nogil=True, cache=True)
def _add_loop_distances(out, X, XsT, h, discrete, loop_cols, i, j0):
    """out[k] += sum_{c in loop_cols} h_c d_c(X_i^c, Xs_{j0+k}^c) for k < len(out): the column
    loops' share of one block of row i (``XsT`` is Xs transposed, C-ordered)."""
    w = out.shape[0]
    for c in loop_cols:
        xi, hc, col = X[i, c], h[c], XsT[c, j0:j0 + w]
        if discrete[c]:
            for k in range(w):
                if col[k] != xi:
                    out[k] += hc
        else:
            for k in range(w):
                t = col[k] - xi
                out[k] += hc * t * t


@njit(nogil=True, cache=True)
def _check_kernel_shapes(n, m, d, d_s, d_l, d_mask, symmetric):
    """The input checks of the kernels (``ard_kernel``, ``matern52_into``, ``weighted_distance``),
    also made by the compiled Ops before they call the kernels' C-callable forms (which cannot
    raise): n, m rows of X and Xs; d, d_s, d_l, d_mask columns of X and Xs and lengths of l
    and the discrete mask."""
    if symmetric and n != m:
        raise ValueError("ARD kernel: a symmetric kernel needs Xs = X")
    if d_s != d or d_l != d or d_mask != d:
        raise ValueError("ARD kernel: X, Xs, l and the discrete mask must agree on the number of columns")


@njit(nogil=True, cache=True)
def _check_pullback_shapes(G, E, X, Xs, discrete):
    """``distance_pullback``'s input checks, also made by the compiled Op before it calls the
    C-callable form."""
    n, m, d = X.shape[0], Xs.shape[0], X.shape[1]
    if G.shape != (n, m) or E.shape != (n, m) or Xs.shape[1] != d or discrete.shape[0] != d:
        raise ValueError("ARD kernel pullback: G, E, X and Xs do not match")


@njit(nogil=True, cache=True)
def _distance_start(X, Xs, h, discrete, min_columns, out):
    """(product, loop_cols, XsT): whether the product form took some columns (then ``out``,
    C-ordered (n, m), holds their share of sum_m h_m d_m: ``_product_distance``), the columns
    left to the loops, and Xs transposed for them."""
    n, m, d = X.shape[0], Xs.shape[0], X.shape[1]
    _check_kernel_shapes(n, m, d, Xs.shape[1], h.shape[0], discrete.shape[0], False)
    cols, loop_cols = _split_columns(discrete, min_columns, n, m)
    if cols.shape[0]:
        _product_distance(X, Xs, h, cols, _same_points(X, Xs), out)
    return cols.shape[0] > 0, loop_cols, np.ascontiguousarray(Xs.T)


@njit(nogil=True, cache=True)
def weighted_distance(X, Xs, l, discrete, min_columns=PRODUCT_MIN_COLUMNS):
    """D_ij = sum_m l_m d_m(X_i^m, Xs_j^m) (module docstring); exactly symmetric when Xs is X.

    The continuous columns go through one BLAS product where there are at least
    ``min_columns`` of them (``_product_distance``), the rest through a loop (per block of
    ``BLOCK`` entries of a row, vectorised over them: ``_add_loop_distances``)."""
    D = np.empty((X.shape[0], Xs.shape[0]))
    weighted_distance_into(D, X, Xs, l, discrete, min_columns)
    return D


@njit(nogil=True, cache=True)
def weighted_distance_into(D, X, Xs, l, discrete, min_columns=PRODUCT_MIN_COLUMNS):
    """``weighted_distance`` written into D, C-ordered (len(X), len(Xs))."""
    n, m = X.shape[0], Xs.shape[0]
    if D.shape != (n, m):
        raise ValueError("ARD kernel: the output D must have shape (len(X), len(Xs))")
    product, loop_cols, XsT = _distance_start(X, Xs, l, discrete, min_columns, D)
    if not product:
        D[:] = 0.0
    for i in range(n):
        for j0 in range(0, m, BLOCK):
            _add_loop_distances(D[i, j0:min(j0 + BLOCK, m)], X, XsT, l, discrete, loop_cols, i, j0)


@njit(nogil=True, cache=True)
def ard_kernel(K, E, X, Xs, l, v0, v1, v2, discrete, symmetric, min_columns=PRODUCT_MIN_COLUMNS):
    """K <- v0 E + v1 (+ v2 I when ``symmetric``) and E <- exp(-D/2) (eq. 10), both C-ordered
    (n, m), in one pass: per block of ``BLOCK`` entries of a row, the distances
    (``weighted_distance``'s, with l scaled by -1/2), their exponential (``exp_inplace``)
    and both outputs, so that no n x m array is read back between the steps."""
    n, m = X.shape[0], Xs.shape[0]
    _check_kernel_shapes(n, m, X.shape[1], Xs.shape[1], l.shape[0], discrete.shape[0], symmetric)
    if K.shape != (n, m) or E.shape != (n, m):
        raise ValueError("ARD kernel: the outputs K and E must have shape (len(X), len(Xs))")
    h = -0.5 * l
    product, loop_cols, XsT = _distance_start(X, Xs, h, discrete, min_columns, E)
    buf = np.empty(BLOCK)
    for i in range(n):
        for j0 in range(0, m, BLOCK):
            w = min(BLOCK, m - j0)
            b, e, k = buf[:w], E[i, j0:j0 + w], K[i, j0:j0 + w]
            for t in range(w):
                b[t] = e[t] if product else 0.0
            _add_loop_distances(b, X, XsT, h, discrete, loop_cols, i, j0)  # -D/2
            exp_inplace(b)
            for t in range(w):
                e[t] = b[t]
                k[t] = v0 * b[t] + v1
        if symmetric:
            K[i, i] += v2


@njit(nogil=True, cache=True)
def _product_pullback(A, X, Xs, cols, row_sums, col_sums):
    r"""s_m = sum_ij A_ij (X_im - Xs_jm)^2 for m in ``cols``, as
    sum_i X_im^2 rowsum(A)_i + sum_j Xs_jm^2 colsum(A)_j - 2 sum_j Xs_jm (A^T X)_jm, with
    one BLAS product for A^T X, on the centred columns (``_centred_columns``)."""
    k = cols.shape[0]
    Xc, Xsc = _centred_columns(X, Xs, cols)
    N = np.empty((k, Xs.shape[0])).T  # Fortran (m, k)
    lapack.gemm(1.0, A.T, Xc, 0.0, N, np.bool_(False))  # A.T of the C-ordered A is Fortran-ordered
    s = np.zeros(k)
    for c in range(k):
        acc = 0.0
        for i in range(X.shape[0]):
            acc += Xc[i, c] * Xc[i, c] * row_sums[i]
        for j in range(Xs.shape[0]):
            acc += Xsc[j, c] * (Xsc[j, c] * col_sums[j] - 2.0 * N[j, c])
        s[c] = acc
    return s


@njit(nogil=True, cache=True)
def _pullback_row(g, e, X, XsT, discrete, loop_cols, i, j0, a, acc_ge, acc_g, acc):
    """One block of row i of the pullback: a <- g o e, acc_ge += a, acc_g += g and
    acc[c] += a o d_c(X_i, Xs_{j0:}) for the loop columns c."""
    w = a.shape[0]
    for k in range(w):
        a[k] = g[k] * e[k]
        acc_ge[k] += a[k]
        acc_g[k] += g[k]
    for c in loop_cols:
        xi, col, out = X[i, c], XsT[c, j0:j0 + w], acc[c]
        if discrete[c]:
            for k in range(w):
                if col[k] != xi:
                    out[k] += a[k]
        else:
            for k in range(w):
                t = col[k] - xi
                out[k] += a[k] * t * t


@njit(nogil=True, cache=True)
def distance_pullback(G, E, X, Xs, discrete, min_columns=PRODUCT_MIN_COLUMNS):
    """(s, <G, E>, sum G, tr G) with s_m = <G o E, d_m> (module docstring).

    One pass over G and E in tiles of ``TILE_ROWS`` rows by ``BLOCK`` columns (in cache
    whether G is C- or Fortran-ordered: the FITC gradient in K_uf is Fortran), per row of a
    tile: G o E, its sums and the loop columns' weighted distances accumulate in
    per-position accumulators of one block's length (vectorised), summed at the end. The
    continuous columns go through BLAS products where ``weighted_distance`` uses them
    (``_product_pullback``, on G o E kept whole).
    """
    n, m, d = X.shape[0], Xs.shape[0], X.shape[1]
    _check_pullback_shapes(G, E, X, Xs, discrete)
    cols, loop_cols = _split_columns(discrete, min_columns, n, m)
    product = cols.shape[0] > 0
    GE = np.empty((n if product else 0, m))  # G o E whole for the products only
    acc_ge, acc_g, acc = np.zeros(BLOCK), np.zeros(BLOCK), np.zeros((d, BLOCK))
    a = np.empty(BLOCK)
    tr_g = 0.0
    XsT = np.ascontiguousarray(Xs.T)
    for i0 in range(0, n, TILE_ROWS):
        for j0 in range(0, m, BLOCK):
            w = min(BLOCK, m - j0)
            for i in range(i0, min(i0 + TILE_ROWS, n)):
                _pullback_row(G[i, j0:j0 + w], E[i, j0:j0 + w], X, XsT, discrete, loop_cols, i, j0, a[:w],
                              acc_ge[:w], acc_g[:w], acc)
                if product:
                    GE[i, j0:j0 + w] = a[:w]
    for i in range(min(n, m)):
        tr_g += G[i, i]
    s = np.empty(d)
    for c in range(d):
        s[c] = acc[c].sum()
    if product:
        s[cols] = _product_pullback(GE, X, Xs, cols, np.dot(GE, np.ones(m)), np.dot(np.ones(n), GE))
    return s, acc_ge.sum(), acc_g.sum(), tr_g


# C-callable forms of ``ard_kernel``, ``distance_pullback`` and ``matern52_into`` for compiled graphs
# (``_register_numba``). A graph's numba function that called the two through their
# dispatchers linked their code into its own, and numba optimised it again in every graph
# (about 1 s each, measured on a warm cache); the graph calls these fixed symbols instead, as
# the compiled EP engine's callers do (``backends/numba/compiled_ep.py``). Arrays are passed
# as pointers to C-contiguous data; the caller allocates the outputs and checks the shapes
# (a cfunc cannot raise).
EXTERNAL_SYMBOLS = ("pymc_gpc_ard_kernel", "pymc_gpc_distance_pullback", "pymc_gpc_matern52_kernel")
_FP = numba.types.CPointer(numba.types.float64)
_BP = numba.types.CPointer(numba.types.boolean)
_I64 = numba.types.int64
# ard_kernel: n, m, d, v0, v1, v2, symmetric (0 or 1); K (n, m), E (n, m), X (n, d), Xs (m, d), l (d,), discrete (d,)
# matern52_into: the same scalars; K, F, P (n, m), X, Xs, l, discrete
_ARD_SCALARS = (_I64, _I64, _I64, numba.types.float64, numba.types.float64, numba.types.float64, _I64)
# distance_pullback: n, m, d; G (n, m), E (n, m), X (n, d), Xs (m, d), discrete (d,), s (d,), sums (3,)
_PULLBACK_SCALARS = (_I64, _I64, _I64)
_EXTERNAL = []  # the cfuncs, once registered
EXTERNAL_DONE = 1


def _ard_kernel_at(n, m, d, v0, v1, v2, symmetric, K_, E_, X_, Xs_, l_, discrete_):
    """``ard_kernel`` on C-contiguous arrays given by pointer."""
    ard_kernel(carray(K_, (n, m)), carray(E_, (n, m)), carray(X_, (n, d)), carray(Xs_, (m, d)), carray(l_, (d,)),
               v0, v1, v2, carray(discrete_, (d,)), symmetric)
    return EXTERNAL_DONE


def _distance_pullback_at(n, m, d, G_, E_, X_, Xs_, discrete_, s_, sums_):
    """``distance_pullback`` on C-contiguous arrays given by pointer: s into ``s_``, and
    (<G, E>, sum G, tr G) into ``sums_``."""
    s, s_ge, s_g, tr_g = distance_pullback(carray(G_, (n, m)), carray(E_, (n, m)), carray(X_, (n, d)),
                                           carray(Xs_, (m, d)), carray(discrete_, (d,)))
    out, sums = carray(s_, (d,)), carray(sums_, (3,))
    out[:] = s
    sums[0], sums[1], sums[2] = s_ge, s_g, tr_g
    return EXTERNAL_DONE


def _matern52_at(n, m, d, v0, v1, v2, symmetric, K_, F_, P_, X_, Xs_, l_, discrete_):
    """``matern52_into`` on C-contiguous arrays given by pointer."""
    matern52_into(carray(K_, (n, m)), carray(F_, (n, m)), carray(P_, (n, m)), carray(X_, (n, d)),
                  carray(Xs_, (m, d)), carray(l_, (d,)), v0, v1, v2, carray(discrete_, (d,)), symmetric)
    return EXTERNAL_DONE


def external_kernels():
    """(ard_kernel_at, distance_pullback_at, matern52_at) as numba external functions
    (``numerics.symbols.register_cfuncs``). Arrays are passed as ``arr.ctypes``; each returns
    ``EXTERNAL_DONE``, or 0 where its code raised (numba prints the exception; in practice
    an allocation that failed)."""
    signatures = (_I64(*_ARD_SCALARS, _FP, _FP, _FP, _FP, _FP, _BP),
                  _I64(*_PULLBACK_SCALARS, _FP, _FP, _FP, _FP, _BP, _FP, _FP),
                  _I64(*_ARD_SCALARS, _FP, _FP, _FP, _FP, _FP, _FP, _BP))
    functions = (_ard_kernel_at, _distance_pullback_at, _matern52_at)
    return register_cfuncs(_EXTERNAL, list(zip(EXTERNAL_SYMBOLS, signatures, functions)))


def _kernel_outputs(n, m):
    """Two C-ordered (n, m) arrays for K and E, from the package's pool of large arrays
    (``numerics.workspace.POOL``): an n x m kernel between the inducing and the training
    inputs is fresh pages at every evaluation otherwise (numba's allocations are not backed
    by huge pages), whose faults cost more than the kernel's arithmetic."""
    return POOL.empty((n, m), order="C"), POOL.empty((n, m), order="C")


def _ard_inputs(X, Xs, l, v0, v1, v2):
    """The ARD kernel Ops' inputs as float64 tensors, each checked for its number of dimensions."""
    ins = [pt.as_tensor_variable(v).astype("float64") for v in (X, Xs, l, v0, v1, v2)]
    for name, v, ndim in zip(("X", "Xs", "l", "v0", "v1", "v2"), ins, (2, 2, 1, 0, 0, 0)):
        if v.ndim != ndim:
            raise ValueError(f"ARD kernel: {name} must have {ndim} dimension(s), got {v.ndim}")
    return ins


class ARDKernelOp(Op):
    """(K, E) from (X, Xs, l, v0, v1, v2): Kim & Ghahramani's eq. 10 and E = exp(-D/2).

    ``symmetric``: Xs is X and v2 delta(i, j) is added; ``discrete``: a tuple of bools,
    one per column. E is an output so that the pullback need not recompute it.
    """

    __props__ = ("discrete", "symmetric")

    def __init__(self, discrete, symmetric):
        self.discrete = tuple(bool(v) for v in discrete)
        self.symmetric = bool(symmetric)

    def make_node(self, X, Xs, l, v0, v1, v2):
        return Apply(self, _ard_inputs(X, Xs, l, v0, v1, v2), [pt.dmatrix(), pt.dmatrix()])

    def perform(self, node, inputs, output_storage):
        X, Xs, l, v0, v1, v2 = inputs
        K, E = _kernel_outputs(X.shape[0], Xs.shape[0])
        ard_kernel(K, E, plain(X), plain(Xs), plain(l), float(v0), float(v1), float(v2), np.array(self.discrete),
                   self.symmetric)
        output_storage[0][0] = K
        output_storage[1][0] = E

    def pullback(self, inputs, outputs, cotangents):
        """The module docstring's sums for l, v0, v1, v2 (one ``ARDKernelPullbackOp`` per
        connected cotangent), and for the continuous columns of X and Xs, with
        A = (v0 G_K + G_E) o E: X_bar = -l (X rowsum(A) - A Xs), Xs_bar = l (A^T X - Xs colsum(A))."""
        X, Xs, l, v0, v1, v2 = inputs
        E = outputs[1]
        g_K, g_E = (None if isinstance(g.type, DisconnectedType) else g for g in cotangents)
        pull = ARDKernelPullbackOp(self.discrete)
        d_l, d_v0, d_v1, d_v2 = pt.zeros_like(l), pt.zeros_like(v0), pt.zeros_like(v1), pt.zeros_like(v2)
        A = pt.zeros_like(E)
        if g_K is not None:
            s, d_v0, d_v1, trace = pull(g_K, E, X, Xs)
            d_l = -0.5 * v0 * s
            if self.symmetric:
                d_v2 = trace
            A = A + v0 * g_K * E
        if g_E is not None:  # E = exp(-D/2) depends on l and X only
            d_l = d_l - 0.5 * pull(g_E, E, X, Xs)[0]
            A = A + g_E * E
        lc = l * (1.0 - np.array(self.discrete, dtype=float))  # Hamming columns: zero gradient
        d_X = -lc * (X * A.sum(axis=1)[:, None] - A @ Xs)
        d_Xs = lc * (A.T @ X - Xs * A.sum(axis=0)[:, None])
        return [d_X, d_Xs, d_l, d_v0, d_v1, d_v2]


class ARDKernelPullbackOp(Op):
    """(s, <G, E>, sum G, tr G) from (G, E, X, Xs): ``distance_pullback``. No gradient."""

    __props__ = ("discrete",)

    def __init__(self, discrete):
        self.discrete = tuple(bool(v) for v in discrete)

    def make_node(self, G, E, X, Xs):
        ins = [pt.as_tensor_variable(v).astype("float64") for v in (G, E, X, Xs)]
        return Apply(self, ins, [pt.dvector(), pt.dscalar(), pt.dscalar(), pt.dscalar()])

    def perform(self, node, inputs, output_storage):
        G, E, X, Xs = inputs
        G = G if G.flags.f_contiguous and G.flags.writeable else plain(G)  # read in either order: no copy
        s, s_ge, s_g, tr_g = distance_pullback(G, plain(E), plain(X), plain(Xs), np.array(self.discrete))
        output_storage[0][0] = s
        for k, v in enumerate((s_ge, s_g, tr_g), start=1):
            output_storage[k][0] = np.asarray(v)

    def pullback(self, inputs, outputs, cotangents):
        return [grad_not_implemented(self, i, v, "second derivatives of the kernel") for i, v in enumerate(inputs)]


@njit(nogil=True, cache=True)
def matern52_kernel(X, Xs, l, v0, v1, v2, discrete, symmetric):
    r"""(K, F, P) of the ARD Matern 5/2 form: with r^2 = D = sum_m l_m d_m and s = sqrt(5 D),
    F = (1 + s + s^2/3) e^{-s}, K = v0 F + v1 (+ v2 I when ``symmetric``) and
    P = (1 + s) e^{-s}, so that dF/dD = -(5/6) P (the pullback's weight)."""
    n, m = X.shape[0], Xs.shape[0]
    K, F, P = np.empty((n, m)), np.empty((n, m)), np.empty((n, m))
    matern52_into(K, F, P, X, Xs, l, v0, v1, v2, discrete, symmetric)
    return K, F, P


@njit(nogil=True, cache=True)
def matern52_into(K, F, P, X, Xs, l, v0, v1, v2, discrete, symmetric):
    """``matern52_kernel`` written into K, F and P, C-ordered (len(X), len(Xs))."""
    _check_kernel_shapes(X.shape[0], Xs.shape[0], X.shape[1], Xs.shape[1], l.shape[0], discrete.shape[0], symmetric)
    shape = (X.shape[0], Xs.shape[0])
    if K.shape != shape or F.shape != shape or P.shape != shape:
        raise ValueError("ARD kernel: the outputs K, F and P must have shape (len(X), len(Xs))")
    weighted_distance_into(F, X, Xs, 5.0 * l, discrete)  # s^2
    n, m = F.shape
    for i in range(n):
        f, p, k = F[i], P[i], K[i]
        for j in range(m):
            f[j] = np.sqrt(max(f[j], 0.0))  # s
            p[j] = -f[j]
        exp_inplace(p)  # e^{-s}
        for j in range(m):
            sj, e = f[j], p[j]
            f[j] = (1.0 + sj + sj * sj / 3.0) * e
            p[j] = (1.0 + sj) * e
            k[j] = v0 * f[j] + v1
        if symmetric:
            K[i, i] += v2


class ARDMatern52Op(Op):
    r"""(K, F, P) from (X, Xs, l, v0, v1, v2): the ARD Matern 5/2 kernel
    :math:`v_0 (1 + s + s^2/3) e^{-s} + v_1 + v_2 \delta(i, j)`, :math:`s^2 = 5 \sum_m l_m d_m`
    (``matern52_kernel``; Rasmussen & Williams eq. 4.17 with ARD lengthscales l_m^{-1/2}),
    the Matern counterpart of ``ARDKernelOp``. Only K has a gradient; its pullback is
    ``ARDKernelPullbackOp``'s sums with P in E's place: with G a cotangent of K,
    :math:`\bar l_m = -\tfrac56 v_0 \langle G \circ P, d_m\rangle`, :math:`\bar v_0 = \langle G, F\rangle`.
    """

    __props__ = ("discrete", "symmetric")

    def __init__(self, discrete, symmetric):
        self.discrete = tuple(bool(v) for v in discrete)
        self.symmetric = bool(symmetric)

    def make_node(self, X, Xs, l, v0, v1, v2):
        return Apply(self, _ard_inputs(X, Xs, l, v0, v1, v2), [pt.dmatrix(), pt.dmatrix(), pt.dmatrix()])

    def perform(self, node, inputs, output_storage):
        X, Xs, l, v0, v1, v2 = inputs
        outs = matern52_kernel(plain(X), plain(Xs), plain(l), float(v0), float(v1), float(v2), np.array(self.discrete),
                               self.symmetric)
        for k, v in enumerate(outs):
            output_storage[k][0] = v

    def pullback(self, inputs, outputs, cotangents):
        """The class docstring's sums for l, v0, v1, v2, and for the continuous columns of X
        and Xs, with A = v0 G o P: X_bar = -(5/3) l (X rowsum(A) - A Xs),
        Xs_bar = (5/3) l (A^T X - Xs colsum(A))."""
        X, Xs, l, v0, v1, v2 = inputs
        F, P = outputs[1], outputs[2]
        g_K, g_F, g_P = (None if isinstance(g.type, DisconnectedType) else g for g in cotangents)
        if g_F is not None or g_P is not None:
            return [grad_not_implemented(self, i, v, "the gradient of the Matern kernel's F and P outputs")
                    for i, v in enumerate(inputs)]
        if g_K is None:
            return [pt.zeros_like(v) for v in inputs]
        s, _, d_v1, trace = ARDKernelPullbackOp(self.discrete)(g_K, P, X, Xs)
        d_v2 = trace if self.symmetric else pt.zeros_like(v2)
        A = v0 * g_K * P
        lc = l * (1.0 - np.array(self.discrete, dtype=float))  # Hamming columns: zero gradient
        d_X = -(5.0 / 3.0) * lc * (X * A.sum(axis=1)[:, None] - A @ Xs)
        d_Xs = (5.0 / 3.0) * lc * (A.T @ X - Xs * A.sum(axis=0)[:, None])
        return [d_X, d_Xs, -(5.0 / 6.0) * v0 * s, pt.sum(g_K * F), d_v1, d_v2]


def _register_numba():
    """Compiled versions of the three Ops, in nopython mode (no Python, no GIL, per call) but
    for the allocation of an ARD kernel's outputs of at least the pool's ``min_bytes`` each
    (``_kernel_outputs``, one object-mode call). They call the kernels' C-callable forms
    (``external_kernels``) on C-contiguous copies where the inputs are not, so that a graph
    links no kernel code, and each kernel is compiled once, for the argument types
    ``perform`` hands it (C-contiguous, writable arrays, ``numerics.plain``; a plain bool)."""
    try:
        from pytensor.link.numba.dispatch.basic import numba_njit, register_funcify_and_cache_key
    except ImportError:  # pragma: no cover - numba backend unavailable
        return

    @register_funcify_and_cache_key(ARDKernelOp)
    def funcify_kernel(op, node, **kwargs):
        discrete, symmetric = np.array(op.discrete, dtype=np.bool_), np.int64(op.symmetric)
        pooled = POOL.min_bytes // 8  # entries from which the outputs come from the pool
        kernel_at = external_kernels()[0]

        @numba_njit
        def ard_kernel_op(X, Xs, l, v0, v1, v2):
            n, m, d = X.shape[0], Xs.shape[0], X.shape[1]
            _check_kernel_shapes(n, m, d, Xs.shape[1], l.shape[0], discrete.shape[0], symmetric)
            if n * m >= pooled:
                with numba.objmode(K="float64[:, ::1]", E="float64[:, ::1]"):
                    K, E = _kernel_outputs(n, m)
            else:  # small: numba's allocator, without entering Python
                K, E = np.empty((n, m)), np.empty((n, m))
            Xc, Xsc, lc = np.ascontiguousarray(X), np.ascontiguousarray(Xs), np.ascontiguousarray(l)
            mask = discrete.copy()
            if kernel_at(n, m, d, v0[()], v1[()], v2[()], symmetric, K.ctypes, E.ctypes, Xc.ctypes, Xsc.ctypes,
                         lc.ctypes, mask.ctypes) != EXTERNAL_DONE:
                raise RuntimeError("ARD kernel: the compiled kernel failed (numba printed why)")
            return K, E

        return ard_kernel_op, cache_key("ARDKernelOp", op.discrete, op.symmetric, pooled, EXTERNAL_SYMBOLS[0])

    @register_funcify_and_cache_key(ARDKernelPullbackOp)
    def funcify_pullback(op, node, **kwargs):
        discrete = np.array(op.discrete, dtype=np.bool_)
        pullback_at = external_kernels()[1]

        @numba_njit
        def ard_kernel_pullback(G, E, X, Xs):
            n, m, d = X.shape[0], Xs.shape[0], X.shape[1]
            _check_pullback_shapes(G, E, X, Xs, discrete)
            Gc, Ec, Xc, Xsc, mask = (np.ascontiguousarray(G), np.ascontiguousarray(E), np.ascontiguousarray(X),
                                     np.ascontiguousarray(Xs), discrete.copy())
            s, sums = np.empty(d), np.empty(3)
            if pullback_at(n, m, d, Gc.ctypes, Ec.ctypes, Xc.ctypes, Xsc.ctypes, mask.ctypes, s.ctypes,
                           sums.ctypes) != EXTERNAL_DONE:
                raise RuntimeError("ARD kernel pullback: the compiled pullback failed (numba printed why)")
            return s, np.asarray(sums[0]), np.asarray(sums[1]), np.asarray(sums[2])

        return ard_kernel_pullback, cache_key("ARDKernelPullbackOp", op.discrete, EXTERNAL_SYMBOLS[1])

    @register_funcify_and_cache_key(ARDMatern52Op)
    def funcify_matern52(op, node, **kwargs):
        discrete, symmetric = np.array(op.discrete, dtype=np.bool_), np.int64(op.symmetric)
        matern52_at = external_kernels()[2]

        @numba_njit
        def ard_matern52(X, Xs, l, v0, v1, v2):
            n, m, d = X.shape[0], Xs.shape[0], X.shape[1]
            _check_kernel_shapes(n, m, d, Xs.shape[1], l.shape[0], discrete.shape[0], symmetric)
            K, F, P = np.empty((n, m)), np.empty((n, m)), np.empty((n, m))
            Xc, Xsc, lc = np.ascontiguousarray(X), np.ascontiguousarray(Xs), np.ascontiguousarray(l)
            mask = discrete.copy()
            if matern52_at(n, m, d, v0[()], v1[()], v2[()], symmetric, K.ctypes, F.ctypes, P.ctypes, Xc.ctypes,
                           Xsc.ctypes, lc.ctypes, mask.ctypes) != EXTERNAL_DONE:
                raise RuntimeError("ARD kernel: the compiled Matern kernel failed (numba printed why)")
            return K, F, P

        return ard_matern52, cache_key("ARDMatern52Op", op.discrete, op.symmetric, EXTERNAL_SYMBOLS[2])


_register_numba()


class MixedARD(Covariance):
    r"""Kim & Ghahramani's kernel with continuous and discrete (Hamming) columns.

    Parameters
    ----------
    input_dim : number of input columns.
    v0, v1, v2 : signal variance, bias variance, latent noise variance (scalars,
        numbers or PyTensor/PyMC variables).
    l : inverse squared lengthscales, one per column (length ``input_dim``) or one shared.
    discrete : indices (or a boolean mask) of the discrete columns; the rest are continuous.
    active_dims : as for every ``pm.gp.cov`` kernel.
    form : "se" (the default: the exponential below, ``ARDKernelOp``) or "matern52", the
        Matern 5/2 form v0 (1 + s + s^2/3) exp(-s) + v1 + v2 delta(x, x') with
        s^2 = 5 sum_m l_m d_m (``ARDMatern52Op``; with no discrete column and v2 = 0 it is
        ``v0 * pm.gp.cov.Matern52(d, ls=l**-0.5) + v1``, as one Op instead of PyTensor's
        elementwise graph).

    Notes
    -----
    The covariance is Kim & Ghahramani's eq. 10,

    .. math::

        k(x, x') = v_0 \exp\Big(-\tfrac12 \sum_m l_m\, d_m(x_m, x'_m)\Big) + v_1 + v_2\, \delta(x, x'),

    with :math:`d_m` the squared difference on continuous columns and the Hamming distance
    (0 or 1) on discrete ones.

    Examples
    --------
    >>> import pymc as pm, pytensor.tensor as pt, pymc_gpc
    >>> with pm.Model():
    ...     log_l = pm.Normal("log_l", -3, 3, shape=4)
    ...     log_v0 = pm.Normal("log_v0", -3, 3)
    ...     cov = pymc_gpc.kernels.MixedARD(4, v0=pt.exp(log_v0), l=pt.exp(log_l), discrete=[3])
    """

    FORMS = ("se", "matern52")

    def __init__(self, input_dim, *, v0, l, v1=0.0, v2=0.0, discrete=(), active_dims=None, form="se"):
        if form not in self.FORMS:
            raise ValueError(f"form must be one of {self.FORMS}, got {form!r}")
        super().__init__(input_dim, active_dims)
        self.form = form
        mask = np.zeros(self.n_dims, dtype=bool)
        disc = np.asarray(discrete)
        if disc.dtype == bool:
            if disc.shape != (self.n_dims,):
                raise ValueError(f"discrete mask must have {self.n_dims} entries, got {disc.shape}")
            mask = disc
        elif disc.size:
            if disc.min() < 0 or disc.max() >= self.n_dims:
                raise ValueError(f"discrete column indices must be in [0, {self.n_dims}), got {disc.tolist()}")
            mask[disc.astype(int)] = True
        self.discrete = mask
        self.v0, self.v1, self.v2 = v0, v1, v2
        self.l = pt.as_tensor_variable(l)

    def full(self, X, Xs=None):
        X, Xs_ = self._slice(X, Xs)
        same = Xs_ is None
        l = pt.broadcast_to(self.l, (self.n_dims,)) if self.l.ndim == 0 else self.l
        op = (ARDKernelOp if self.form == "se" else ARDMatern52Op)(self.discrete, symmetric=same)
        return op(X, X if same else Xs_, l, self.v0, self.v1, self.v2)[0]

    def diag(self, X):
        X, _ = self._slice(X, None)
        return pt.alloc(self.v0 + self.v1 + self.v2, X.shape[0])


def per_class(factory, *hyperparameters):
    """One kernel per class from hyperparameters with a leading class dimension.

    Returns ``[factory(h1[k], h2[k], ...) for k in range(c)]``: the list of c covariance
    functions that the multi-class classifiers take as ``cov_func``, class k's built from
    row k of every hyperparameter. c is the leading length of the hyperparameters, which
    must be known when the model is built (give the variables ``shape`` or ``dims``).

    Examples
    --------
    >>> import pymc as pm, pytensor.tensor as pt, pymc_gpc
    >>> with pm.Model(coords={"class": ["a", "b", "c"], "feature": ["x0", "x1"]}):
    ...     log_ls = pm.Normal("log_ls", 0, 1, dims=("class", "feature"))
    ...     log_amp = pm.Normal("log_amp", 0, 3, dims="class")
    ...     covs = pymc_gpc.kernels.per_class(
    ...         lambda ls, amp: pt.exp(amp) * pm.gp.cov.ExpQuad(2, ls=pt.exp(ls)), log_ls, log_amp)
    >>> len(covs)
    3
    """
    if not hyperparameters:
        raise ValueError("per_class needs at least one hyperparameter with a leading class dimension")
    tensors = [pt.as_tensor_variable(h) for h in hyperparameters]
    lengths = set()
    for k, t in enumerate(tensors):
        if t.ndim == 0:
            raise ValueError(f"hyperparameter {k} is a scalar: per_class needs a leading class dimension "
                             "(shape (c,) or (c, ...))")
        c = t.type.shape[0]
        if c is None:
            try:
                c = int(t.shape[0].eval())
            except Exception:  # noqa: BLE001 - a symbolic length cannot be evaluated here
                raise ValueError(f"hyperparameter {k} has no known leading length; give it shape= or dims=") from None
        lengths.add(int(c))
    if len(lengths) != 1:
        raise ValueError(f"the hyperparameters' leading (class) lengths differ: {sorted(lengths)}")
    c = lengths.pop()
    if c < 2:
        raise ValueError(f"per_class needs c >= 2 classes, got a leading length of {c}")
    return [factory(*(t[k] for t in tensors)) for k in range(c)]


# The default Normal on a log-hyperparameter (Barber & Williams, sec. 5): ``ard_kernels``'s
# and ``pymc_gpc.ard_classifier``'s ``prior`` for each name a dict leaves out.
DEFAULT_PRIOR = (-3.0, 3.0)


def prior_pairs(prior, names, default=DEFAULT_PRIOR):
    """``prior`` as {name: (mean, sd)} for the model's log-hyperparameters ``names``: one
    (mean, sd) pair for all of them, or a dict from some of ``names`` to pairs (the others
    ``default``). ValueError, naming the culprit, for a name not in ``names`` or a pair that
    is not two finite numbers with sd > 0."""
    if isinstance(prior, dict):
        unknown = [k for k in prior if k not in names]
        if unknown:
            raise ValueError(f"prior names {unknown!r}, which this model does not have: its log-hyperparameters "
                             f"are {list(names)!r}")
        return {k: _prior_pair(prior.get(k, default), f"prior[{k!r}]") for k in names}
    pair = _prior_pair(prior, "prior")
    return {k: pair for k in names}


def _prior_pair(pair, what):
    """(mean, sd) as two float64s: ValueError naming ``what`` unless two finite numbers, sd > 0."""
    if isinstance(pair, (str, bytes)):
        raise ValueError(f"{what} must be a pair (mean, sd) of numbers, got {pair!r}")
    try:
        mu, sd = (float(v) for v in pair)
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be a pair (mean, sd) of numbers, got {pair!r}") from None
    if not (np.isfinite(mu) and np.isfinite(sd) and sd > 0):
        raise ValueError(f"{what} needs a finite mean and a finite sd > 0, got (mean, sd) = ({mu}, {sd})")
    # float64 scalars: PyTensor makes a Python float that float32 holds exactly (2.0, 1.5) a
    # float32 constant, and the Normal's log sd is then rounded to float32 (1e-8 in the log prior)
    return np.float64(mu), np.float64(sd)


def ard_kernels(input_dim, classes, *, prior=(-3.0, 3.0), bias=True, shared=False,
                feature_names=None, log_v0_start=0.0):
    r"""Barber & Williams' ARD kernel for several classes: one per class (default) or shared.

    Creates, in the current ``pm.Model``, the random variables

    - ``log_w`` (dims ``("class", "feature")``): log inverse squared lengthscales,
    - ``log_v0`` (dims ``"class"``): log amplitudes,
    - ``log_v1`` (dims ``"class"``, with ``bias``): log bias variances,

    each Normal(``*prior``), and returns the c kernels
    :math:`k_k(x, x') = v_{0k} \exp(-\tfrac12 \sum_m w_{km} (x_m - x'_m)^2) + v_{1k}`
    (``MixedARD``), a list that ``MarginalLaplace(likelihood=Softmax())`` and
    ``MarginalEP(likelihood=MultinomialProbit())`` take as ``cov_func``. With
    ``shared=True`` the variables have no class dimension and one kernel is returned,
    which all classes share (the form to compare against: see the user guide's
    "several classes"). With ``shared="lengthscales"`` the classes share ``log_w`` (dims
    ``"feature"``) and keep their own ``log_v0`` and ``log_v1``: c kernels
    :math:`v_{0k} \exp(-\tfrac12 \sum_m w_m (x_m - x'_m)^2) + v_{1k}`, d + 2c
    hyperparameters instead of c (d + 2).

    Parameters
    ----------
    input_dim : number of input columns d.
    classes : the number of classes c, or the class labels in column order (e.g.
        ``gp.classes`` or ``np.unique(y)``; they become the ``class`` coordinate).
    prior : (mean, sd) of the Normal prior on every log-hyperparameter, or a dict from
        variable names (``"log_w"``, ``"log_v0"``, ``"log_v1"``) to (mean, sd) pairs, the
        names not given N(-3, 3^2) (``prior_pairs``).
    bias : include the bias variance v1.
    shared : False (one kernel per class), True (one kernel for all classes) or
        ``"lengthscales"`` (the inverse squared lengthscales shared, amplitudes and bias
        variances per class).
    feature_names : the ``feature`` coordinate (default x0, x1, ...).
    log_v0_start : where log v0 starts (clipped to within one prior sd of the prior mean),
        as in ``pymc_gpc.ard_classifier``.

    Returns
    -------
    A list of c covariance functions, or one with ``shared=True``.

    Raises
    ------
    ValueError
        For a ``prior`` that is not a finite (mean, sd > 0) pair, fewer than two classes
        (unless ``shared=True``), ``feature_names`` of the wrong length, or a ``shared``
        other than True, False or "lengthscales".

    Examples
    --------
    >>> import numpy as np, pymc as pm, pymc_gpc
    >>> from pymc_gpc.datasets import load_fgl
    >>> glass = load_fgl()
    >>> X = (glass.X - glass.X.mean(0)) / glass.X.std(0)
    >>> with pm.Model() as model:
    ...     covs = pymc_gpc.kernels.ard_kernels(X.shape[1], np.unique(glass.y))  # 6 kernels
    >>> len(covs), model["log_w"].shape.eval().tolist()
    (6, [6, 9])
    >>> with model:
    ...     gp = pymc_gpc.MarginalLaplace(cov_func=covs, likelihood=pymc_gpc.likelihoods.Softmax())
    ...     gp.marginal_likelihood("glass", X=X, y=glass.y)  # doctest: +SKIP
    """
    import pymc as pm

    pairs = prior_pairs(prior, ("log_w", "log_v0", "log_v1") if bias else ("log_w", "log_v0"))
    if not (shared is True or shared is False or shared == "lengthscales"):
        raise ValueError(f"shared must be True, False or 'lengthscales', got {shared!r}")
    one_kernel = shared is True
    d = int(input_dim)
    labels = [f"class{k}" for k in range(int(classes))] if np.ndim(classes) == 0 else [str(v) for v in classes]
    c = len(labels)
    if c < 2 and not one_kernel:
        raise ValueError(f"ard_kernels needs c >= 2 classes, got {c}")
    features = list(feature_names) if feature_names is not None else [f"x{m}" for m in range(d)]
    if len(features) != d:
        raise ValueError(f"feature_names has {len(features)} names for {d} input columns")
    model = pm.modelcontext(None)
    for dim, values in (("feature", features), ("class", labels)):
        if dim == "class" and one_kernel:
            continue
        if dim not in model.coords:
            model.add_coord(dim, values)
        elif len(model.coords[dim]) != len(values):
            raise ValueError(f"the model's {dim!r} coordinate has {len(model.coords[dim])} values, "
                             f"not the {len(values)} given")
    mu0, sd0 = pairs["log_v0"]
    start = float(np.clip(log_v0_start, mu0 - sd0, mu0 + sd0))
    if one_kernel:
        log_w = pm.Normal("log_w", *pairs["log_w"], dims="feature")
        log_v0 = pm.Normal("log_v0", mu0, sd0, initval=start)
        v1 = pt.exp(pm.Normal("log_v1", *pairs["log_v1"])) if bias else 0.0
        return MixedARD(d, v0=pt.exp(log_v0), l=pt.exp(log_w), v1=v1)
    if shared == "lengthscales":
        w = pt.exp(pm.Normal("log_w", *pairs["log_w"], dims="feature"))
        log_v0 = pm.Normal("log_v0", mu0, sd0, dims="class", initval=np.full(c, start))
        if bias:
            log_v1 = pm.Normal("log_v1", *pairs["log_v1"], dims="class")
            return per_class(lambda v0, v1: MixedARD(d, v0=pt.exp(v0), l=w, v1=pt.exp(v1)), log_v0, log_v1)
        return per_class(lambda v0: MixedARD(d, v0=pt.exp(v0), l=w), log_v0)
    log_w = pm.Normal("log_w", *pairs["log_w"], dims=("class", "feature"))
    log_v0 = pm.Normal("log_v0", mu0, sd0, dims="class", initval=np.full(c, start))
    if bias:
        log_v1 = pm.Normal("log_v1", *pairs["log_v1"], dims="class")
        return per_class(lambda w, v0, v1: MixedARD(d, v0=pt.exp(v0), l=pt.exp(w), v1=pt.exp(v1)),
                         log_w, log_v0, log_v1)
    return per_class(lambda w, v0: MixedARD(d, v0=pt.exp(v0), l=pt.exp(w)), log_w, log_v0)
