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
"""

import math

import numpy as np

from numba import njit

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
