"""Gaussian CDF and logistic functions in the log domain, compiled with numba.

Every likelihood goes through these few functions, so that no finite argument can
produce NaN or an overflow anywhere in the package (DESIGN.md, "Numerics that matter";
the role of ``util/logphi.m`` in GPML).

* ``log_ndtr(z) = log Phi(z)`` is exact to rounding for z >= -37 (``erfc`` keeps full
  relative accuracy there) and uses the asymptotic series
  ``log Phi(z) = -z^2/2 - log(-z) - log(2 pi)/2 + log(1 - 1/z^2 + 3/z^4 - ...)``
  below, where the series is exact to rounding (1/z^2 < 7.3e-4).
* ``inv_mills(z) = N(z) / Phi(z)`` is computed without forming either tiny factor;
  below z = -5 by a continued fraction; for z -> -inf it tends to -z.
* ``exp_inplace(a)``: a <- exp(a), within 1 ulp, as a loop the compiler vectorises
  (numba's ``np.exp`` calls the C library once per element, much slower than NumPy's
  vectorised exp; ``docs/design/engine_notes.md``): the kernel's exponential
  runs without leaving compiled code.
"""

import math

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

LOG_2PI = math.log(2.0 * math.pi)
_SQRT2 = math.sqrt(2.0)
_ASYMPTOTIC_BELOW = -37.0


@njit(nogil=True, cache=True)
def _mills_series(z):
    """1 - 1/z^2 + 3/z^4 - 15/z^6 + 105/z^8 - 945/z^10, the asymptotic factor of Phi."""
    w = 1.0 / (z * z)
    return 1.0 - w * (1.0 - w * (3.0 - w * (15.0 - w * (105.0 - w * 945.0))))


@njit(nogil=True, cache=True)
def log_ndtr(z):
    """log Phi(z), accurate for every finite z."""
    if z >= _ASYMPTOTIC_BELOW:
        if z > 0.0:
            # Phi(z) = 1 - Phi(-z): log1p keeps the tiny complement.
            return math.log1p(-0.5 * math.erfc(z / _SQRT2))
        return math.log(0.5 * math.erfc(-z / _SQRT2))
    return -0.5 * z * z - math.log(-z) - 0.5 * LOG_2PI + math.log(_mills_series(z))


@njit(nogil=True, cache=True)
def log_npdf(z):
    """log N(z; 0, 1)."""
    return -0.5 * z * z - 0.5 * LOG_2PI


@njit(nogil=True, cache=True)
def inv_mills(z):
    """N(z) / Phi(z), the derivative of log Phi(z); finite for every finite z.

    For z < -5 Laplace's continued fraction
    N(z)/Phi(z) = x + 1/(x + 2/(x + 3/(x + ...))), x = -z (A&S 26.2.14)
    keeps full relative precision, which ``exp(log N - log Phi)`` would lose to the
    cancellation of two numbers of size z^2/2.
    """
    if z >= -5.0:
        return math.exp(log_npdf(z) - log_ndtr(z))
    x = -z
    t = x
    for k in range(80, 0, -1):
        t = x + k / t
    return t


@njit(nogil=True, cache=True)
def log_sigmoid(x):
    """log(1 / (1 + exp(-x))) without overflow."""
    if x >= 0.0:
        return -math.log1p(math.exp(-x))
    return x - math.log1p(math.exp(x))


@njit(nogil=True, cache=True)
def sigmoid(x):
    """1 / (1 + exp(-x)) without overflow."""
    if x >= 0.0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


@njit(nogil=True, cache=True)
def log_add_exp(a, b):
    """log(exp(a) + exp(b)), with -inf allowed in either argument."""
    if a == -math.inf:
        return b
    if b == -math.inf:
        return a
    m = max(a, b)
    return m + math.log1p(math.exp(-abs(a - b)))


@njit(nogil=True, cache=True)
def log_ndtr_array(z):
    """``log_ndtr`` elementwise over a 1-D array."""
    out = np.empty(z.shape[0])
    for i in range(z.shape[0]):
        out[i] = log_ndtr(z[i])
    return out


@intrinsic
def _float_bits(typingctx, x):
    """The IEEE bits of a float64 as an int64 (a bit cast, no conversion)."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(64))
    return types.int64(types.float64), codegen


@intrinsic
def _bits_float(typingctx, i):
    """The float64 whose IEEE bits are the int64 i (a bit cast)."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.DoubleType())
    return types.float64(types.int64), codegen


_LOG2E = 1.4426950408889634
_LN2_HI = 6.93147180369123816490e-01  # ln 2 in two parts (Cody & Waite): k ln2_hi is exact
_LN2_LO = 1.90821492927058770002e-10
_ROUND = 6755399441055744.0  # 1.5 * 2^52: x + _ROUND rounds x to an integer, held in the low bits
_ROUND_BITS = int(np.float64(_ROUND).view(np.int64))
_EXP_MIN, _EXP_MAX = -708.0, 709.78  # below: 0 (subnormals are flushed); above: inf


@njit(nogil=True, cache=True, inline="always")
def _exp(x):
    """exp(x) = 2^k exp(r), k = round(x / ln 2), |r| <= ln2 / 2 (Cody-Waite reduction);
    exp(r) by its Taylor polynomial of degree 13 (remainder below 4e-18 relative), 2^k
    written into the exponent bits. Below -708 it gives 0 (NumPy: subnormals down to
    -745), above 709.78 inf. Branch-free, so a loop over it vectorises."""
    xc = x if x > _EXP_MIN else _EXP_MIN
    xc = xc if xc < _EXP_MAX else _EXP_MAX
    t = xc * _LOG2E + _ROUND
    k = t - _ROUND
    r = (xc - k * _LN2_HI) - k * _LN2_LO
    p = 1.0 / 6227020800.0
    p = p * r + 1.0 / 479001600.0
    p = p * r + 1.0 / 39916800.0
    p = p * r + 1.0 / 3628800.0
    p = p * r + 1.0 / 362880.0
    p = p * r + 1.0 / 40320.0
    p = p * r + 1.0 / 5040.0
    p = p * r + 1.0 / 720.0
    p = p * r + 1.0 / 120.0
    p = p * r + 1.0 / 24.0
    p = p * r + 1.0 / 6.0
    p = p * r + 0.5
    p = p * r + 1.0
    p = p * r + 1.0
    # 2^(k-1) (a normal number for -1021 <= k <= 1024) times 2: exact
    e = (p * _bits_float((_float_bits(t) - _ROUND_BITS + 1022) << 52)) * 2.0
    e = e if x <= _EXP_MAX else np.inf
    e = e if x >= _EXP_MIN else 0.0
    return e if x == x else x  # NaN stays NaN


@njit(nogil=True, cache=True, fastmath={"contract", "nsz"})
def exp_inplace(a):
    """a <- exp(a) elementwise (any C-contiguous float64 array), within 1 ulp of NumPy's."""
    flat = a.reshape(-1)
    for i in range(flat.size):
        flat[i] = _exp(flat[i])
