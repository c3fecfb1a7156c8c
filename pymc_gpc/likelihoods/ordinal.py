r"""Ordinal observation models: K ordered classes from one latent value per observation.

.. math::

    p(y = k \mid f) = F\Big(\frac{b_{k+1} - f}{s}\Big) - F\Big(\frac{b_k - f}{s}\Big),
    \qquad k = 0, \dots, K-1, \quad b_0 = -\infty,\ b_K = +\infty,

with ordered cutpoints b_1 < ... < b_{K-1} (Chu & Ghahramani 2005, "Gaussian processes for
ordinal regression", JMLR 6, eq. 4): F = Phi with a noise scale s = sigma (``OrderedProbit``,
their eq. 4 with Gaussian noise), or F the logistic function with s = 1 (``OrderedLogit``).
Labels are coded 0..K-1 (``validation.as_ordinal_codes``).

They join the binary likelihoods' contract (``base.py``): one latent value per site, their
kernels in the compiled dispatch (``site_kernels``), and the parameters
th = (b_1, ..., b_{K-1}[, sigma]). A site's likelihood depends on at most three of them (its
two cutpoints and sigma): the kernels return the derivatives in those, and
``ordinal_tilted_dparams`` / ``ordinal_log_lik_dparams`` scatter them into the (n, p)
gradients the approximations sum. The kernels take ``logit`` (ordered logit, else ordered
probit) where the two share code.

Every derivative comes from the partial derivatives of
g(u_1, u_2) = log(F(u_1) - F(u_2)) at u_1 = (b_hi - f)/s, u_2 = (b_lo - f)/s, written
with the ratios a_j = F'(u_j) / D, D = F(u_1) - F(u_2) (``_interval_partials``).
"""

import math

import numpy as np
from numba import njit

from ..numerics import plain
from ..numerics.logit_tilted import GL_NODES, GL_WEIGHTS, GRADE, N_SD, bracketed_newton_step
from ..numerics.special import inv_mills, log_ndtr, log_sigmoid, sigmoid
from .base import PREDICT_VARIANCE_FLOOR, Likelihood, LogLikDerivatives, SiteKernels, TiltedMoments, _is_symbolic, log_lik_map, tilted_map

_LN2 = math.log(2.0)


# ---------------------------------------------------------------------------------
# The interval probability D = F(u_1) - F(u_2) and the partials of g = log D
# ---------------------------------------------------------------------------------


@njit(nogil=True, cache=True)
def _log1mexp(x):
    """log(1 - e^x) for x <= 0 (Maechler 2012: the branch at -log 2 keeps full precision)."""
    if x > -_LN2:
        return math.log(-math.expm1(x))
    return math.log1p(-math.exp(x))


@njit(nogil=True, cache=True)
def _probit_two_sided(u1, u2):
    """log(Phi(u1) - Phi(u2)) and N(u_j) / (Phi(u1) - Phi(u2)) for u1 > u2, from the lower
    tail: D = Phi(u1) (1 - e^delta), delta = log Phi(u2) - log Phi(u1)."""
    lp1 = log_ndtr(u1)
    delta = log_ndtr(u2) - lp1
    em = -math.expm1(delta)
    return lp1 + math.log(em), inv_mills(u1) / em, inv_mills(u2) * math.exp(delta) / em


@njit(nogil=True, cache=True)
def _probit_interval(u1, has1, u2, has2):
    """(log D, N(u1)/D, N(u2)/D) for D = Phi(u1) - Phi(u2) (a missing bound is +-inf).

    An interval in the upper tail is reflected (Phi(u1) - Phi(u2) = Phi(-u2) - Phi(-u1)),
    so that the difference is always formed where Phi is small and exact in logs."""
    if not has2:
        return log_ndtr(u1), inv_mills(u1), 0.0
    if not has1:
        return log_ndtr(-u2), 0.0, inv_mills(-u2)
    if u1 + u2 > 0.0:
        log_d, r_lo, r_hi = _probit_two_sided(-u2, -u1)
        return log_d, r_hi, r_lo
    return _probit_two_sided(u1, u2)


@njit(nogil=True, cache=True)
def _logit_interval(u1, has1, u2, has2):
    """(log D, F'(u1)/D, F'(u2)/D) for D = sigma(u1) - sigma(u2), F' = sigma (1 - sigma),
    from sigma(u1) - sigma(u2) = sigma(u1) sigma(-u2) (1 - e^(u2 - u1))."""
    if not has2:
        return log_sigmoid(u1), sigmoid(-u1), 0.0
    if not has1:
        return log_sigmoid(-u2), 0.0, sigmoid(u2)
    l1me = _log1mexp(u2 - u1)
    log_d = log_sigmoid(u1) + log_sigmoid(-u2) + l1me
    a1 = math.exp(log_sigmoid(-u1) - log_sigmoid(-u2) - l1me)
    a2 = math.exp(log_sigmoid(u2) - log_sigmoid(u1) - l1me)
    return log_d, a1, a2


@njit(nogil=True, cache=True)
def _interval_partials(logit, u1, has1, u2, has2):
    """g = log(F(u1) - F(u2)) and its partial derivatives to third order.

    Returns (g, g1, g2, g11, g12, g22, g111, g112, g122, g222). With a_j = F'(u_j)/D,
    b_j = F''(u_j)/D, c_j = F'''(u_j)/D (F''/F' = -u, F'''/F' = u^2 - 1 for Phi;
    1 - 2 sigma and 1 - 6 sigma (1 - sigma) for the logistic):
    g1 = a1, g2 = -a2, g11 = b1 - a1^2, g12 = a1 a2, g22 = -b2 - a2^2,
    g111 = c1 - 3 a1 b1 + 2 a1^3, g112 = a2 b1 - 2 a1^2 a2, g122 = a1 b2 + 2 a1 a2^2,
    g222 = -c2 - 3 a2 b2 - 2 a2^3. A missing bound contributes nothing (a_j = 0).
    """
    if logit:
        g, a1, a2 = _logit_interval(u1, has1, u2, has2)
        s1, s2 = sigmoid(u1), sigmoid(u2)
        rb1, rb2 = 1.0 - 2.0 * s1, 1.0 - 2.0 * s2
        rc1, rc2 = 1.0 - 6.0 * s1 * (1.0 - s1), 1.0 - 6.0 * s2 * (1.0 - s2)
    else:
        g, a1, a2 = _probit_interval(u1, has1, u2, has2)
        rb1, rb2 = -u1, -u2
        rc1, rc2 = u1 * u1 - 1.0, u2 * u2 - 1.0
    b1, c1 = a1 * rb1, a1 * rc1
    b2, c2 = a2 * rb2, a2 * rc2
    return (g, a1, -a2, b1 - a1 * a1, a1 * a2, -b2 - a2 * a2,
            c1 - 3.0 * a1 * b1 + 2.0 * a1 ** 3, a2 * b1 - 2.0 * a1 * a1 * a2,
            a1 * b2 + 2.0 * a1 * a2 * a2, -c2 - 3.0 * a2 * b2 - 2.0 * a2 ** 3)


@njit(nogil=True, cache=True)
def _site_bounds(y, n_cut, th):
    """(valid, has_hi, b_hi, has_lo, b_lo): the cutpoints around class y in 0..n_cut.
    A label that is not one of those integers is not valid (its log-likelihood is -inf)."""
    k = int(y) if abs(y) < 1e9 else -1
    if k != y or k < 0 or k > n_cut:
        return False, False, 0.0, False, 0.0
    has_hi, has_lo = k < n_cut, k > 0
    return True, has_hi, th[k] if has_hi else 0.0, has_lo, th[k - 1] if has_lo else 0.0


@njit(nogil=True, cache=True)
def _layout(logit, th):
    """(logit, number of cutpoints, scale s) of the parameter vector th (the ordered logit's
    holds the cutpoints only, the ordered probit's then sigma)."""
    if logit:
        return True, th.shape[0], 1.0
    return False, th.shape[0] - 1, th[th.shape[0] - 1]


# ---------------------------------------------------------------------------------
# Laplace: log p(y | f), its f-derivatives and their derivatives in (b_hi, b_lo, s)
# ---------------------------------------------------------------------------------


@njit(nogil=True, cache=True)
def ordinal_log_lik_local(logit, y, f, th):
    """log p(y | f) with u_j = (b_j - f)/s (d/df = -(d/du_1 + d/du_2)/s) and d/db_j = (d/du_j)/s:

    d1 = -S1/s, d2 = S2/s^2, d3 = -S3/s^3 with S1 = g1 + g2, S2 = g11 + 2 g12 + g22,
    S3 = g111 + 3 g112 + 3 g122 + g222; d/ds through du_j/ds = -u_j/s.

    Returns (lp, d1, d2, d3, then (d/db_hi, d/db_lo, d/ds) of lp, of d1 and of d2): 13 values.
    """
    logit, n_cut, s = _layout(logit, th)
    valid, has1, b1, has2, b2 = _site_bounds(y, n_cut, th)
    if not valid:
        return (-math.inf, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    u1 = (b1 - f) / s if has1 else 0.0
    u2 = (b2 - f) / s if has2 else 0.0
    g, g1, g2, g11, g12, g22, g111, g112, g122, g222 = _interval_partials(logit, u1, has1, u2, has2)
    s1, s2_ = g1 + g2, g11 + 2.0 * g12 + g22
    t1, t2 = g111 + 2.0 * g112 + g122, g112 + 2.0 * g122 + g222  # d S2 / du_1, d S2 / du_2
    ss = s * s
    lp_s = -(u1 * g1 + u2 * g2) / s
    d1_s = (s1 + u1 * (g11 + g12) + u2 * (g12 + g22)) / ss
    d2_s = -(2.0 * s2_ + u1 * t1 + u2 * t2) / (ss * s)
    if logit:
        lp_s = d1_s = d2_s = 0.0
    return (g, -s1 / s, s2_ / ss, -(g111 + 3.0 * g112 + 3.0 * g122 + g222) / (ss * s),
            g1 / s, g2 / s, lp_s,
            -(g11 + g12) / ss, -(g12 + g22) / ss, d1_s,
            t1 / (ss * s), t2 / (ss * s), d2_s)


# ---------------------------------------------------------------------------------
# EP: tilted moments
# ---------------------------------------------------------------------------------


@njit(nogil=True, cache=True)
def _ordered_probit_tilted_local(y, mu, s2, th):
    """Z = Phi(z_1) - Phi(z_2), z_j = (b_j - mu) / sqrt(sigma^2 + s2) (Chu & Ghahramani 2005,
    sec. 3.2): log Z = g(z_1, z_2), so with v = sigma^2 + s2
    d/dmu = -S1/sqrt(v), d^2/dmu^2 = S2/v, d/db_j = g_j/sqrt(v),
    d/dsigma = 2 sigma d/dv = -sigma (z_1 g1 + z_2 g2) / v.

    Returns (log Z, d/dmu, d^2/dmu^2, d/db_hi, d/db_lo, d/dsigma)."""
    n_cut = th.shape[0] - 1
    sigma = th[n_cut]
    valid, has1, b1, has2, b2 = _site_bounds(y, n_cut, th)
    if not valid:
        return -math.inf, 0.0, 0.0, 0.0, 0.0, 0.0
    v = sigma * sigma + s2
    sv = math.sqrt(v)
    z1 = (b1 - mu) / sv if has1 else 0.0
    z2 = (b2 - mu) / sv if has2 else 0.0
    g, g1, g2, g11, g12, g22, _, _, _, _ = _interval_partials(False, z1, has1, z2, has2)
    return g, -(g1 + g2) / sv, (g11 + 2.0 * g12 + g22) / v, g1 / sv, g2 / sv, -sigma * (z1 * g1 + z2 * g2) / v


# Composite Gauss-Legendre rule of the ordered-logit tilted moments (``_ordered_logit_tilted_local``;
# the JAX twin in ``backends/jax/likelihoods.py`` uses the same breakpoints and nodes).


@njit(nogil=True, cache=True)
def _ordered_logit_mode(y, mu, s2, th):
    """The mode of g(f) = log p(y | f) - (f - mu)^2 / (2 s2) by Newton guarded with a bracket.

    g is strictly concave (g'' <= -1/s2) and |d log p / df| < 1 for the logit, so
    g'(mu - s2 - 50) > 0 > g'(mu + s2 + 50): the bracket [lo, hi] keeps the mode, shrinks
    at every iterate, and a Newton step that leaves it is replaced by bisection (plain
    Newton diverges in the flat tails, where g'' is close to -1/s2: mu = 5, s2 = 100 for the
    middle class of cutpoints (-1, 1)).
    """
    lo, hi = mu - s2 - 50.0, mu + s2 + 50.0
    m = mu
    for _ in range(300):
        r = ordinal_log_lik_local(True, y, m, th)
        m, lo, hi, done = bracketed_newton_step(m, r[1] - (m - mu) / s2, r[2] - 1.0 / s2, lo, hi, s2)
        if done:
            break
    return m


@njit(nogil=True, cache=True)
def _ordered_logit_breakpoints(m, s, has1, b1, has2, b2):
    """Sorted panel ends of the composite rule as offsets t = f - m over [-9 s, 9 s]: steps
    of s (the Gaussian factor's scale s) and, around each cutpoint of the site, ends at
    offsets +-2^j, j = -1..20 from it (the logistic factor's scale is 1 and its poles lie at
    Im f = +-pi: a panel at distance d >= 1/2 from a cutpoint is at most d wide, so its
    Bernstein ellipse clears the poles and 12 Gauss-Legendre nodes reach ~1e-16). Ends
    outside the range are clipped to it (empty panels). Offsets, not abscissae, so that a
    narrow cavity far from 0 loses no digits."""
    n_g = GRADE.shape[0]
    n_sd = 2 * N_SD + 1
    pts = np.empty(n_sd + 2 * (2 * n_g + 1))
    for k in range(n_sd):
        pts[k] = (k - N_SD) * s
    j = n_sd
    for c, has in ((b1, has1), (b2, has2)):
        d = c - m if has else 0.0
        pts[j] = d
        for i in range(n_g):
            pts[j + 1 + 2 * i] = d - GRADE[i] if has else 0.0
            pts[j + 2 + 2 * i] = d + GRADE[i] if has else 0.0
        j += 2 * n_g + 1
    for i in range(pts.shape[0]):
        pts[i] = min(max(pts[i], -N_SD * s), N_SD * s)
    return np.sort(pts)


@njit(nogil=True, cache=True)
def _ordered_logit_tilted_local(y, mu, s2, th):
    """Tilted moments of p(y | f) N(f; mu, s2) for the ordered logit by a composite
    Gauss-Legendre rule around the mode m of the log-integrand g (``_ordered_logit_mode``).
    log p(y | f) is concave (the logistic density is log-concave), so g'' <= -1/s2 and
    g(m + t) <= g(m) - t^2 / (2 s2): m +- 9 sqrt(s2) holds all but e^-40 of the mass; the
    panels (``_ordered_logit_breakpoints``) resolve both the Gaussian's scale sqrt(s2) and the
    logistic's scale 1 at any cavity variance. With E, Var under the tilted distribution:
    d log Z / d mu = (E f - mu) / s2, d^2 log Z / d mu^2 = (Var f - s2) / s2^2,
    d log Z / d b_j = E[d log p / d b_j].

    Returns (log Z, d/dmu, d^2/dmu^2, d/db_hi, d/db_lo, 0)."""
    n_cut = th.shape[0]
    valid, has1, b1, has2, b2 = _site_bounds(y, n_cut, th)
    if not valid:
        return -math.inf, 0.0, 0.0, 0.0, 0.0, 0.0
    s = math.sqrt(s2)
    m = _ordered_logit_mode(y, mu, s2, th)
    dm = m - mu
    g_m = ordinal_log_lik_local(True, y, m, th)[0] - 0.5 * dm ** 2 / s2
    pts = _ordered_logit_breakpoints(m, s, has1, b1, has2, b2)
    w_sum = w_t = w_tt = w_hi = w_lo = 0.0
    for p in range(pts.shape[0] - 1):
        half = 0.5 * (pts[p + 1] - pts[p])
        if half <= 0.0:
            continue
        mid = 0.5 * (pts[p + 1] + pts[p])
        for q in range(GL_NODES.shape[0]):
            t = mid + half * GL_NODES[q]
            f = m + t
            lp, a1, a2 = _logit_interval(b1 - f, has1, b2 - f, has2)
            w = half * GL_WEIGHTS[q] * math.exp(lp - 0.5 * (dm + t) ** 2 / s2 - g_m)
            w_sum += w
            w_t += w * t
            w_tt += w * t * t
            w_hi += w * a1
            w_lo -= w * a2
    mean_t = w_t / w_sum
    var = max(w_tt / w_sum - mean_t * mean_t, 0.0)
    lz = g_m + math.log(w_sum) - 0.5 * math.log(2.0 * math.pi * s2)
    return lz, (dm + mean_t) / s2, (var - s2) / (s2 * s2), w_hi / w_sum, w_lo / w_sum, 0.0


@njit(nogil=True, cache=True)
def ordinal_tilted_local(logit, y, mu, s2, th):
    """(log Z, d/dmu, d^2/dmu^2, d/db_hi, d/db_lo, d/dsigma) at one site."""
    if logit:
        return _ordered_logit_tilted_local(y, mu, s2, th)
    return _ordered_probit_tilted_local(y, mu, s2, th)


# ---------------------------------------------------------------------------------
# The site kernels of the dispatch (``base.SiteKernels``): the parameter slots are 0, the
# parameter gradients are ``ordinal_tilted_dparams`` / ``ordinal_log_lik_dparams``'s
# ---------------------------------------------------------------------------------


@njit(nogil=True, cache=True)
def _ordered_probit_tilted(y, mu, s2, th):
    r = _ordered_probit_tilted_local(y, mu, s2, th)
    return r[0], r[1], r[2], 0.0


@njit(nogil=True, cache=True)
def _ordered_logit_tilted(y, mu, s2, th):
    r = _ordered_logit_tilted_local(y, mu, s2, th)
    return r[0], r[1], r[2], 0.0


@njit(nogil=True, cache=True)
def _ordered_probit_log_lik(y, f, th):
    r = ordinal_log_lik_local(False, y, f, th)
    return r[0], r[1], r[2], r[3], 0.0, 0.0, 0.0


@njit(nogil=True, cache=True)
def _ordered_logit_log_lik(y, f, th):
    r = ordinal_log_lik_local(True, y, f, th)
    return r[0], r[1], r[2], r[3], 0.0, 0.0, 0.0


@njit(nogil=True, cache=True)
def _cutpoints_valid(logit, th):
    """``OrdinalLikelihood.check_params`` as a yes / no (finite already checked): at least one
    cutpoint, strictly increasing, then sigma > 0 (ordered probit); any number of cutpoints."""
    n_cut = th.shape[0] - (0 if logit else 1)
    if n_cut < 1:
        return False
    for j in range(1, n_cut):
        if not th[j] > th[j - 1]:
            return False
    return logit or th[n_cut] > 0.0


@njit(nogil=True, cache=True)
def _ordered_probit_params_valid(th, n_params):
    return _cutpoints_valid(False, th)


@njit(nogil=True, cache=True)
def _ordered_logit_params_valid(th, n_params):
    return _cutpoints_valid(True, th)


@njit(nogil=True, cache=True)
def _class_codes(logit, y, th):
    """Labels 0..K-1, K - 1 the number of cutpoints in th."""
    top = th.shape[0] - (0 if logit else 1)
    for v in y:
        if not (v == np.floor(v) and 0.0 <= v <= top):
            return False
    return True


@njit(nogil=True, cache=True)
def _ordered_probit_labels(y, th):
    return _class_codes(False, y, th)


@njit(nogil=True, cache=True)
def _ordered_logit_labels(y, th):
    return _class_codes(True, y, th)


# ---------------------------------------------------------------------------------
# Parameter gradients: the local derivatives scattered into th's positions
# ---------------------------------------------------------------------------------


@njit(nogil=True, cache=True)
def _scatter(logit, y, th, row, d_hi, d_lo, d_s):
    """row[th index] += the derivatives in the site's upper and lower cutpoints and in sigma."""
    logit, n_cut, _ = _layout(logit, th)
    valid, has1, _, has2, _ = _site_bounds(y, n_cut, th)
    if not valid:
        return
    k = int(y)
    if has1:
        row[k] += d_hi
    if has2:
        row[k - 1] += d_lo
    if not logit:
        row[n_cut] += d_s


@njit(nogil=True, cache=True)
def ordinal_tilted_dparams(logit, y, mu, s2, th):
    """d log Z_i / d th at fixed cavities N(mu_i, s2_i): an (n, p) array."""
    n, p = y.shape[0], th.shape[0]
    out = np.zeros((n, p))
    for i in range(n):
        r = ordinal_tilted_local(logit, y[i], mu[i], s2[i], th)
        _scatter(logit, y[i], th, out[i], r[3], r[4], r[5])
    return out


@njit(nogil=True, cache=True)
def ordinal_tilted_dparams_sum(logit, y, mu, s2, th, dth):
    """dth[:] = sum_i d log Z_i / d th (the compiled EP's parameter gradient)."""
    dth[:] = 0.0
    for i in range(y.shape[0]):
        r = ordinal_tilted_local(logit, y[i], mu[i], s2[i], th)
        _scatter(logit, y[i], th, dth, r[3], r[4], r[5])


@njit(nogil=True, cache=True)
def _ordered_probit_dparams_sum(y, mu, s2, th, row, dth):
    ordinal_tilted_dparams_sum(False, y, mu, s2, th, dth)


@njit(nogil=True, cache=True)
def _ordered_logit_dparams_sum(y, mu, s2, th, row, dth):
    ordinal_tilted_dparams_sum(True, y, mu, s2, th, dth)


@njit(nogil=True, cache=True)
def ordinal_log_lik_dparams(logit, y, f, th):
    """d/d th of (log p, d1, d2) at each site: a (3, n, p) array."""
    n, p = y.shape[0], th.shape[0]
    out = np.zeros((3, n, p))
    for i in range(n):
        r = ordinal_log_lik_local(logit, y[i], f[i], th)
        for j in range(3):
            _scatter(logit, y[i], th, out[j, i], r[4 + 3 * j], r[5 + 3 * j], r[6 + 3 * j])
    return out



# ---------------------------------------------------------------------------------
# The likelihood classes
# ---------------------------------------------------------------------------------


class OrdinalLikelihood(Likelihood):
    """Base of the ordinal likelihoods: K ordered classes, labels coded 0, ..., K-1.

    Constructed with the K-1 cutpoints (fixed numbers, a list of numbers or PyMC
    variables, or one vector-valued PyMC variable, e.g. with
    ``transform=pm.distributions.transforms.ordered``). Without cutpoints it is the
    template the evidence Ops build from the class (``ops.marginal``): its parameter
    vector then arrives at evaluation time, any number of cutpoints.
    """

    _abstract = True
    has_sigma = False
    logit = False  # the kernels' flag: ordered logit, else ordered probit

    def __init__(self, cutpoints=None, sigma=None):
        self._cutpoints = None if cutpoints is None else _as_cutpoints(cutpoints, type(self).__name__)
        self._sigma = sigma
        if self._cutpoints is None:
            self.param_names = ()
            self._values, self._params = (), None
            return
        n_cut = _cutpoint_count(self._cutpoints)
        self.param_names = tuple(f"cutpoint_{j + 1}" for j in range(n_cut)) + (("sigma",) if self.has_sigma else ())
        values = (self._cutpoints,) + ((sigma,) if self.has_sigma else ())
        self._values = values
        if any(_is_symbolic(v) for v in values):
            self._params = None
        else:
            flat = np.concatenate([np.asarray(self._cutpoints, float).reshape(-1)]
                                  + ([np.atleast_1d(np.asarray(sigma, float))] if self.has_sigma else []))
            self._params = self.check_params(flat)

    @property
    def n_classes(self):
        """K, the number of ordered classes (None for the Ops' template)."""
        return None if self._cutpoints is None else len(self.param_names) - self.has_sigma + 1

    def n_classes_of(self, th):
        """K for the parameter vector ``th``."""
        return np.size(th) - self.has_sigma + 1

    def params_tensor(self):
        r"""The parameters :math:`(b_1, \dots, b_{K-1})`, then :math:`\sigma` where the class has
        it, as one PyTensor vector."""
        import pytensor.tensor as pt

        cut = self._cutpoints
        if isinstance(cut, (list, tuple)):
            cut = pt.stack([pt.as_tensor_variable(v).astype("float64") for v in cut])
        parts = [pt.flatten(pt.as_tensor_variable(cut)).astype("float64")]
        if self.has_sigma:
            parts.append(pt.reshape(pt.as_tensor_variable(self._sigma).astype("float64"), (1,)))
        return pt.concatenate(parts)

    def check_params(self, params):
        r"""``params`` as a float array, or ValueError: finite, at least one cutpoint, the
        cutpoints strictly increasing, :math:`\sigma > 0`."""
        name = type(self).__name__
        try:
            params = np.asarray(params, dtype=float).reshape(-1)
        except (TypeError, ValueError):
            raise ValueError(f"{name} parameters must be numbers or PyTensor/PyMC variables, got {params!r}") from None
        if self.param_names and params.size != len(self.param_names):
            raise ValueError(f"{name} takes {len(self.param_names)} parameters {self.param_names}, got {params.size}")
        cut = params[: params.size - self.has_sigma]
        if cut.size < 1:
            raise ValueError(f"{name} needs at least one cutpoint, got {params.size} parameter(s)")
        if not np.all(np.isfinite(params)):
            raise ValueError(f"{name} parameters must be finite, got {params}")
        if not np.all(np.diff(cut) > 0.0):
            raise ValueError(f"{name} cutpoints must be strictly increasing, got {cut}")
        if self.has_sigma and not params[-1] > 0.0:
            raise ValueError(f"{name} needs sigma > 0, got sigma={params[-1]:g}")
        return params

    def check_labels(self, y, params=None):
        """Labels as floats 0..K-1 (K from the parameters), or ValueError naming the first bad one."""
        y = np.asarray(y, dtype=float).reshape(-1)
        k = self.n_classes_of(self.resolve_params(params))
        bad = ~((y == np.round(y)) & (y >= 0) & (y <= k - 1))
        if np.any(bad):
            raise ValueError(f"{type(self).__name__} labels must be integers 0..{k - 1} (K = {k} classes), "
                             f"got {y[np.flatnonzero(bad)[:5]].tolist()}")
        return y

    def tilted(self, y, mu, s2, params=None):
        r"""EP tilted moments at cavities :math:`N(\mu_i, s^2_i)`, with
        :math:`\partial \log Z_i / \partial \theta` as an (n, p) array."""
        th = plain(self.resolve_params(params))
        y, mu, s2 = (plain(np.asarray(a, dtype=float).reshape(-1)) for a in (y, mu, s2))
        out = tilted_map(self.kind, y, mu, s2, th)
        return TiltedMoments(out, th.size, ordinal_tilted_dparams(self.logit, y, mu, s2, th))

    def tilted_moments(self, out, y, mu, s2, th):
        """``TiltedMoments`` of ``tilted_map``'s rows ``out`` at cavities N(mu, s2), with the
        (n, p) parameter derivatives the rows do not hold."""
        y, mu, s2 = (np.ascontiguousarray(a, dtype=float).reshape(-1) for a in (y, mu, s2))
        return TiltedMoments(out, th.size, ordinal_tilted_dparams(self.logit, y, mu, s2, np.asarray(th, float)))

    def log_lik(self, y, f, params=None):
        r""":math:`\log p(y_i \mid f_i)` with its f-derivatives to third order and the
        :math:`\theta`-derivatives of the first three (Laplace)."""
        th = plain(self.resolve_params(params))
        y, f = (plain(np.asarray(a, dtype=float).reshape(-1)) for a in (y, f))
        out = log_lik_map(self.kind, y, f, th)
        return LogLikDerivatives(out, th.size, ordinal_log_lik_dparams(self.logit, y, f, th))

    def predict(self, mu, s2, params=None):
        r"""(n*, K) class probabilities :math:`p(y_* = k \mid \mu_*, s^2_*) = Z_k`, the likelihood
        of class k averaged over :math:`N(\mu_*, s^2_*)` (Chu & Ghahramani 2005, eq. 20); rows
        sum to one."""
        th = plain(self.resolve_params(params))
        mu = plain(np.asarray(mu, dtype=float).reshape(-1))
        s2 = np.maximum(np.asarray(s2, dtype=float).reshape(-1), PREDICT_VARIANCE_FLOOR)
        k = self.n_classes_of(th)
        cols = [np.exp(tilted_map(self.kind, np.full(mu.size, float(c)), mu, s2, th)[0]) for c in range(k)]
        return np.column_stack(cols)

    def __repr__(self):
        if self._cutpoints is None:
            return f"{type(self).__name__}()"
        cut = self._cutpoints if self._params is None else self._params[: self._params.size - self.has_sigma]
        sig = f", sigma={self._sigma}" if self.has_sigma else ""
        return f"{type(self).__name__}(cutpoints={cut}{sig})"


def _as_cutpoints(cutpoints, name):
    """Cutpoints as given (symbolic vector or list of variables) or as a float array."""
    if _is_symbolic(cutpoints) or (isinstance(cutpoints, (list, tuple)) and any(_is_symbolic(v) for v in cutpoints)):
        return cutpoints if not isinstance(cutpoints, tuple) else list(cutpoints)
    try:
        arr = np.asarray(cutpoints, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(f"{name} cutpoints must be numbers or PyMC variables, got {cutpoints!r}") from None
    if arr.ndim > 1:
        raise ValueError(f"{name} cutpoints must be one-dimensional, got shape {arr.shape}")
    return arr.reshape(-1)


def _cutpoint_count(cutpoints):
    """The number of cutpoints (of a symbolic vector: its static length, else its shape's value)."""
    if isinstance(cutpoints, list):
        return len(cutpoints)
    if _is_symbolic(cutpoints):
        if cutpoints.type.ndim == 0:
            return 1
        if cutpoints.type.ndim != 1:
            raise ValueError(f"cutpoints must be a vector, got a {cutpoints.type.ndim}-D variable")
        length = cutpoints.type.shape[0]
        return int(length) if length is not None else int(cutpoints.shape[0].eval())
    return int(np.size(cutpoints))


class OrderedProbit(OrdinalLikelihood):
    r"""Ordered probit likelihood: K ordered classes from one latent value (Chu & Ghahramani 2005, eq. 4).

    .. math::

        p(y = k \mid f) = \Phi\Big(\frac{b_{k+1} - f}{\sigma}\Big) - \Phi\Big(\frac{b_k - f}{\sigma}\Big),
        \qquad b_0 = -\infty,\ b_K = +\infty.

    EP's tilted moments are in closed form (their sec. 3.2).

    Parameters
    ----------
    cutpoints : the K-1 strictly increasing cutpoints :math:`b_1 < \dots < b_{K-1}`:
        numbers, or PyMC variables (one vector, e.g.
        ``pm.Normal("c", 0, 3, shape=K-1, transform=pm.distributions.transforms.ordered)``,
        or a list of scalars).
    sigma : the latent noise scale :math:`\sigma > 0` (default 1); a number or a PyMC
        variable. The kernel amplitude, the cutpoints and sigma are only jointly
        identified: fix sigma or give it a prior.

    Examples
    --------
    >>> import pymc as pm, pymc_gpc
    >>> lik = pymc_gpc.OrderedProbit([-1.0, 1.0])          # three classes
    >>> lik.n_classes
    3
    >>> with pm.Model():
    ...     c = pm.Normal("c", 0, 3, shape=2, transform=pm.distributions.transforms.ordered,
    ...                   initval=[-1.0, 1.0])
    ...     lik = pymc_gpc.OrderedProbit(c, sigma=1.0)
    """

    site_kernels = SiteKernels(_ordered_probit_tilted, _ordered_probit_log_lik, _ordered_probit_params_valid,
                               _ordered_probit_labels, _ordered_probit_dparams_sum)
    has_sigma = True

    def __init__(self, cutpoints=None, sigma=1.0):
        super().__init__(cutpoints, sigma)


class OrderedLogit(OrdinalLikelihood):
    r"""Ordered logit likelihood: the proportional-odds model for K ordered classes.

    .. math::

        p(y = k \mid f) = \ell(b_{k+1} - f) - \ell(b_k - f), \qquad b_0 = -\infty,\ b_K = +\infty,

    with the logistic function :math:`\ell(u) = 1 / (1 + e^{-u})`. EP's tilted moments and the
    predictive by a composite Gauss-Legendre rule around the tilted mode, exact to about 1e-13
    at any latent variance up to 1e6 (``_ordered_logit_tilted_local``); Laplace in
    closed form.

    Parameters
    ----------
    cutpoints : the K-1 strictly increasing cutpoints, as for ``OrderedProbit``.

    Examples
    --------
    >>> import pymc_gpc
    >>> lik = pymc_gpc.OrderedLogit([-1.0, 0.0, 2.0])       # four classes
    >>> lik.predict([0.0], [1.0]).shape
    (1, 4)
    """

    site_kernels = SiteKernels(_ordered_logit_tilted, _ordered_logit_log_lik, _ordered_logit_params_valid,
                               _ordered_logit_labels, _ordered_logit_dparams_sum)
    logit = True

    def __init__(self, cutpoints=None):
        super().__init__(cutpoints)


ORDINAL_LIKELIHOODS = (OrderedProbit, OrderedLogit)
