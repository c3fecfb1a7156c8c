r"""Observation models p(y | f, theta) for binary GP classification, y in {-1, +1}.

Every likelihood answers one numeric contract (the GPML ``lik/`` convention), so that
any likelihood works with any approximation:

``tilted(y, mu, s2, params)``
    EP: log Z_i = log \int p(y_i | f) N(f; mu_i, s2_i) df and its first two derivatives
    with respect to the cavity mean mu_i, plus d log Z_i / d theta at fixed cavity.
    (The derivative in the cavity variance is not needed: for any likelihood
    d^2 Z / d mu^2 = 2 dZ / d s2, the heat equation.)
``log_lik(y, f, params)``
    Laplace: log p(y_i | f_i) and its derivatives in f up to third order, plus the
    theta-derivatives of the first three of those.
``predict(mu, s2, params)``
    p(y* = +1) = \int p(+1 | f) N(f; mu, s2) df (Tan, eq. 13).

The compiled kernels work on one site; ``tilted_map`` / ``log_lik_map`` map them over arrays.
Each binary likelihood has at most one parameter, carried as a length-0 or length-1 array; the
ordinal kinds (section "Ordinal", classes in ``ordinal.py``) carry their cutpoints and sigma.
"""

import math

import numpy as np
from numba import njit

from ..numerics.special import inv_mills, log_add_exp, log_ndtr, log_ndtr_array, log_npdf, log_sigmoid, sigmoid

# Gauss-Hermite rule for expectations of log p(y | f) under a Gaussian (``expected_log_lik``).
_GH_NODES, _GH_WEIGHTS = np.polynomial.hermite.hermgauss(128)

# ---------------------------------------------------------------------------------
# Probit family: p(y | f) = Phi(y (f + b) / c).  Probit (b=0, c=1), ProbitBias (c=1),
# ProbitNoise (b=0, c=sigma) share these two kernels.
# ---------------------------------------------------------------------------------


@njit(nogil=True, cache=True)
def _probit_family_tilted(y, mu, s2, b, c2):
    """Z = Phi(z), z = y (mu + b) / sqrt(c^2 + s2) (Tan, Appendix A, with b added).

    Returns log Z, d/dmu, d^2/dmu^2, d/db, d/dc^2 (all at fixed cavity).
    """
    v = c2 + s2
    sv = math.sqrt(v)
    z = y * (mu + b) / sv
    r = inv_mills(z)
    dmu = y * r / sv
    d2mu = -r * (z + r) / v
    dc2 = -0.5 * r * z / v
    return log_ndtr(z), dmu, d2mu, dmu, dc2


@njit(nogil=True, cache=True)
def _probit_family_log_lik(y, f, b, c):
    """log Phi(u), u = y (f + b) / c, its f-derivatives to third order and d/dc of each.

    With r = N(u)/Phi(u): dr/du = -r (u + r), so
    d1 = y r / c, d2 = -r (u + r) / c^2, d3 = y r ((u + r)(u + 2r) - 1) / c^3.
    Derivatives in b equal those in f.
    """
    u = y * (f + b) / c
    r = inv_mills(u)
    q = u + r
    lp = log_ndtr(u)
    d1 = y * r / c
    d2 = -r * q / (c * c)
    d3 = y * r * (q * (u + 2.0 * r) - 1.0) / (c * c * c)
    lp_c = -r * u / c
    d1_c = y * r * (u * q - 1.0) / (c * c)
    d2_c = (-u * r * (q * (u + 2.0 * r) - 1.0) + 2.0 * r * q) / (c * c * c)
    return lp, d1, d2, d3, lp_c, d1_c, d2_c


@njit(nogil=True, cache=True)
def _probit_tilted(y, mu, s2, th):
    lz, d1, d2, _, _ = _probit_family_tilted(y, mu, s2, 0.0, 1.0)
    return lz, d1, d2, 0.0


@njit(nogil=True, cache=True)
def _probit_log_lik(y, f, th):
    lp, d1, d2, d3, _, _, _ = _probit_family_log_lik(y, f, 0.0, 1.0)
    return lp, d1, d2, d3, 0.0, 0.0, 0.0


@njit(nogil=True, cache=True)
def _probit_bias_tilted(y, mu, s2, th):
    lz, d1, d2, db, _ = _probit_family_tilted(y, mu, s2, th[0], 1.0)
    return lz, d1, d2, db


@njit(nogil=True, cache=True)
def _probit_bias_log_lik(y, f, th):
    lp, d1, d2, d3, _, _, _ = _probit_family_log_lik(y, f, th[0], 1.0)
    # d/db of (lp, d1, d2) equals (d1, d2, d3)
    return lp, d1, d2, d3, d1, d2, d3


@njit(nogil=True, cache=True)
def _probit_noise_tilted(y, mu, s2, th):
    sigma = th[0]
    lz, d1, d2, _, dc2 = _probit_family_tilted(y, mu, s2, 0.0, sigma * sigma)
    return lz, d1, d2, 2.0 * sigma * dc2


@njit(nogil=True, cache=True)
def _probit_noise_log_lik(y, f, th):
    return _probit_family_log_lik(y, f, 0.0, th[0])


# ---------------------------------------------------------------------------------
# Step function with label noise: p(y | f) = eps + (1 - 2 eps) H(y f)
# (Kim & Ghahramani, EM-EP eq. 2; Tan eq. 4).
# ---------------------------------------------------------------------------------


@njit(nogil=True, cache=True)
def _step_tilted(y, mu, s2, th):
    """Z = eps + (1 - 2 eps) Phi(z), z = y mu / sqrt(s2).

    alpha = d log Z / d mu = y (1 - 2 eps) N(z) / (sqrt(s2) Z),
    d^2 log Z / d mu^2 = -alpha (alpha + y z / sqrt(s2)),
    d log Z / d eps = (1 - 2 Phi(z)) / Z.
    """
    eps = th[0]
    s = math.sqrt(s2)
    z = y * mu / s
    log_phi = log_ndtr(z)
    log_eps = math.log(eps) if eps > 0.0 else -math.inf
    log_hit = math.log1p(-2.0 * eps) + log_phi
    lz = log_add_exp(log_eps, log_hit)
    alpha = y * math.exp(math.log1p(-2.0 * eps) + log_npdf(z) - lz) / s
    d2 = -alpha * (alpha + y * z / s)
    # 1 - 2 Phi(z) = Phi(-z) - Phi(z), formed from the smaller tail for accuracy
    one_minus_2phi = math.exp(log_ndtr(-z)) - math.exp(log_phi)
    deps = one_minus_2phi * math.exp(-lz)
    return lz, alpha, d2, deps


@njit(nogil=True, cache=True)
def _no_log_lik(y, f, th):
    return math.nan, math.nan, math.nan, math.nan, math.nan, math.nan, math.nan


# ---------------------------------------------------------------------------------
# Logistic: p(y | f) = 1 / (1 + exp(-y f))  (Barber & Williams, eq. 1).
# ---------------------------------------------------------------------------------


# The composite Gauss-Legendre rule of the logistic tilted moments (``_logistic_tilted``).
_LOGISTIC_GL_NODES, _LOGISTIC_GL_WEIGHTS = np.polynomial.legendre.leggauss(12)
_LOGISTIC_GRADE = 2.0 ** np.arange(-1, 21)  # panel ends at f = +-2^j around sigma's poles' real part 0
_LOGISTIC_N_SD = 9  # the rule covers mode +- 9 sd: the log-integrand has fallen by more than 40 there
_LOGISTIC_SD_PANELS = 3  # panels of 3 sd on each side (12 nodes resolve a Gaussian over 3 sd to ~1e-15)


@njit(nogil=True, cache=True)
def _logistic_mode(y, mu, s2):
    """The mode of g(f) = log sigma(y f) - (f - mu)^2 / (2 s2) by Newton guarded with a bracket.

    g is strictly concave and g'(f) = y sigma(-y f) - (f - mu) / s2 has the sign of y at mu and
    of -y at mu + y s2, so the mode lies between them; the bracket shrinks at every iterate and
    a Newton step leaving it is replaced by bisection (plain Newton stalls in the flat tails,
    where g'' is close to -1/s2: mu = -91, s2 = 100).
    """
    lo, hi = min(mu, mu + y * s2), max(mu, mu + y * s2)
    m = mu
    for _ in range(300):
        p = sigmoid(-y * m)
        g1 = y * p - (m - mu) / s2
        if g1 > 0.0:
            lo = m
        else:
            hi = m
        m_new = m - g1 / (-p * (1.0 - p) - 1.0 / s2)
        if not (lo < m_new < hi):
            m_new = 0.5 * (lo + hi)
        tol = 1e-13 * (1.0 + abs(m_new)) + 1e-9 * math.sqrt(s2)
        if abs(m_new - m) <= tol or hi - lo <= tol:
            return m_new
        m = m_new
    return m


@njit(nogil=True, cache=True)
def _logistic_breakpoints(m, s):
    """Sorted panel ends as offsets t = f - m over [-9 s, 9 s]: steps of 3 s (the Gaussian's
    scale) and ends at f = 0 and f = +-2^j, j = -1..20 (sigma's scale is 1 and its poles lie at
    Im f = +-pi: a panel at distance d >= 1/2 from 0 is at most d wide, so its Bernstein
    ellipse clears the poles and 12 Gauss-Legendre nodes reach ~1e-16), clipped to the range
    (empty panels). Offsets, not abscissae, so that a narrow cavity far from 0 loses no digits."""
    n_g = _LOGISTIC_GRADE.shape[0]
    n_sd = 2 * _LOGISTIC_SD_PANELS + 1
    pts = np.empty(n_sd + 2 * n_g + 1)
    for k in range(n_sd):
        pts[k] = (k - _LOGISTIC_SD_PANELS) * (_LOGISTIC_N_SD / _LOGISTIC_SD_PANELS) * s
    pts[n_sd] = -m
    for i in range(n_g):
        pts[n_sd + 1 + 2 * i] = -m - _LOGISTIC_GRADE[i]
        pts[n_sd + 2 + 2 * i] = -m + _LOGISTIC_GRADE[i]
    for i in range(pts.shape[0]):
        pts[i] = min(max(pts[i], -_LOGISTIC_N_SD * s), _LOGISTIC_N_SD * s)
    return np.sort(pts)


@njit(nogil=True, cache=True)
def _logistic_tilted(y, mu, s2, th):
    """Tilted moments of sigma(y f) N(f; mu, s2) by a composite Gauss-Legendre rule around the
    mode m of the log-integrand g (``_logistic_mode``; the rule of the ordered logit,
    ``_ordered_logit_tilted_local``, with sigma's one transition at f = 0).

    g'' <= -1/s2, so g(m + t) <= g(m) - t^2 / (2 s2): m +- 9 sqrt(s2) holds all but e^-40 of
    the mass; the panels (``_logistic_breakpoints``) resolve both the Gaussian's scale
    sqrt(s2) and the logistic's scale 1 at any cavity variance (accurate to about 1e-13 for
    cavity means within +-50 and variances from 1e-6 to 1e6,
    ``tests/likelihoods/test_logistic_extremes.py``). The integrand is written in the offset
    t and dm = m - mu, never f - mu, so that no digits are lost where s << |mu|. With E, Var
    under the tilted distribution:
    d log Z / d mu = (E f - mu) / s2,  d^2 log Z / d mu^2 = (Var f - s2) / s2^2.
    """
    s = math.sqrt(s2)
    m = _logistic_mode(y, mu, s2)
    dm = m - mu
    g_m = log_sigmoid(y * m) - 0.5 * dm * dm / s2
    pts = _logistic_breakpoints(m, s)
    w_sum = w_t = w_tt = 0.0
    for p in range(pts.shape[0] - 1):
        half = 0.5 * (pts[p + 1] - pts[p])
        if half <= 0.0:
            continue
        mid = 0.5 * (pts[p + 1] + pts[p])
        for q in range(_LOGISTIC_GL_NODES.shape[0]):
            t = mid + half * _LOGISTIC_GL_NODES[q]
            w = half * _LOGISTIC_GL_WEIGHTS[q] * math.exp(log_sigmoid(y * (m + t)) - 0.5 * (dm + t) ** 2 / s2 - g_m)
            w_sum += w
            w_t += w * t
            w_tt += w * t * t
    mean_t = w_t / w_sum
    var = max(w_tt / w_sum - mean_t * mean_t, 0.0)
    lz = min(g_m + math.log(w_sum) - 0.5 * math.log(2.0 * math.pi * s2), 0.0)  # Z <= 1: sigma <= 1
    return lz, (dm + mean_t) / s2, (var - s2) / (s2 * s2), 0.0


@njit(nogil=True, cache=True)
def _logistic_log_lik(y, f, th):
    p = sigmoid(f)
    q = sigmoid(-f)
    d1 = y * sigmoid(-y * f)
    d2 = -p * q
    d3 = -p * q * (q - p)
    return log_sigmoid(y * f), d1, d2, d3, 0.0, 0.0, 0.0


# ---------------------------------------------------------------------------------
# Ordinal: p(y = k | f) = F((b_{k+1} - f)/s) - F((b_k - f)/s) (Chu & Ghahramani 2005,
# eq. 4), the kernels of ``ordinal.OrderedProbit`` / ``OrderedLogit``. Every derivative
# comes from the partials of g(u_1, u_2) = log(F(u_1) - F(u_2)) at u_1 = (b_hi - f)/s,
# u_2 = (b_lo - f)/s, written with the ratios a_j = F'(u_j) / D, D = F(u_1) - F(u_2).
# ---------------------------------------------------------------------------------

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
def _layout(kind, th):
    """(logit, number of cutpoints, scale s) of the parameter vector th."""
    if kind == ORDERED_LOGIT:
        return True, th.shape[0], 1.0
    return False, th.shape[0] - 1, th[th.shape[0] - 1]


# ---------------------------------------------------------------------------------
# Laplace: log p(y | f), its f-derivatives and their derivatives in (b_hi, b_lo, s)
# ---------------------------------------------------------------------------------


@njit(nogil=True, cache=True)
def ordinal_log_lik_local(kind, y, f, th):
    """log p(y | f) with u_j = (b_j - f)/s (d/df = -(d/du_1 + d/du_2)/s) and d/db_j = (d/du_j)/s:

    d1 = -S1/s, d2 = S2/s^2, d3 = -S3/s^3 with S1 = g1 + g2, S2 = g11 + 2 g12 + g22,
    S3 = g111 + 3 g112 + 3 g122 + g222; d/ds through du_j/ds = -u_j/s.

    Returns (lp, d1, d2, d3, then (d/db_hi, d/db_lo, d/ds) of lp, of d1 and of d2): 13 values.
    """
    logit, n_cut, s = _layout(kind, th)
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
_GL_NODES, _GL_WEIGHTS = np.polynomial.legendre.leggauss(12)
_GRADE = 2.0 ** np.arange(-1, 21)  # offsets from a cutpoint of the graded panels' ends
_N_SD = 9  # the rule covers mode +- 9 sd: the log-integrand has fallen by more than 40 there


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
        r = ordinal_log_lik_local(ORDERED_LOGIT, y, m, th)
        g1 = r[1] - (m - mu) / s2
        if g1 > 0.0:
            lo = m
        else:
            hi = m
        m_new = m - g1 / (r[2] - 1.0 / s2)
        if not (lo < m_new < hi):
            m_new = 0.5 * (lo + hi)
        tol = 1e-13 * (1.0 + abs(m_new)) + 1e-9 * math.sqrt(s2)
        if abs(m_new - m) <= tol or hi - lo <= tol:
            return m_new
        m = m_new
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
    n_g = _GRADE.shape[0]
    n_sd = 2 * _N_SD + 1
    pts = np.empty(n_sd + 2 * (2 * n_g + 1))
    for k in range(n_sd):
        pts[k] = (k - _N_SD) * s
    j = n_sd
    for c, has in ((b1, has1), (b2, has2)):
        d = c - m if has else 0.0
        pts[j] = d
        for i in range(n_g):
            pts[j + 1 + 2 * i] = d - _GRADE[i] if has else 0.0
            pts[j + 2 + 2 * i] = d + _GRADE[i] if has else 0.0
        j += 2 * n_g + 1
    for i in range(pts.shape[0]):
        pts[i] = min(max(pts[i], -_N_SD * s), _N_SD * s)
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
    g_m = ordinal_log_lik_local(ORDERED_LOGIT, y, m, th)[0] - 0.5 * dm ** 2 / s2
    pts = _ordered_logit_breakpoints(m, s, has1, b1, has2, b2)
    w_sum = w_t = w_tt = w_hi = w_lo = 0.0
    for p in range(pts.shape[0] - 1):
        half = 0.5 * (pts[p + 1] - pts[p])
        if half <= 0.0:
            continue
        mid = 0.5 * (pts[p + 1] + pts[p])
        for q in range(_GL_NODES.shape[0]):
            t = mid + half * _GL_NODES[q]
            f = m + t
            lp, a1, a2 = _logit_interval(b1 - f, has1, b2 - f, has2)
            w = half * _GL_WEIGHTS[q] * math.exp(lp - 0.5 * (dm + t) ** 2 / s2 - g_m)
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
def ordinal_tilted_local(kind, y, mu, s2, th):
    """(log Z, d/dmu, d^2/dmu^2, d/db_hi, d/db_lo, d/dsigma) at one site."""
    if kind == ORDERED_LOGIT:
        return _ordered_logit_tilted_local(y, mu, s2, th)
    return _ordered_probit_tilted_local(y, mu, s2, th)


@njit(nogil=True, cache=True)
def ordinal_tilted(kind, y, mu, s2, th):
    """The ordinal kinds' entry of ``binary.tilted_site`` (the parameter slot is 0: the
    parameter gradient is ``ordinal_tilted_dparams``'s)."""
    r = ordinal_tilted_local(kind, y, mu, s2, th)
    return r[0], r[1], r[2], 0.0


@njit(nogil=True, cache=True)
def ordinal_log_lik(kind, y, f, th):
    """The ordinal kinds' entry of ``binary.log_lik_site`` (parameter slots 0, see above)."""
    r = ordinal_log_lik_local(kind, y, f, th)
    return r[0], r[1], r[2], r[3], 0.0, 0.0, 0.0


# ---------------------------------------------------------------------------------
# Parameter gradients: the local derivatives scattered into th's positions
# ---------------------------------------------------------------------------------


@njit(nogil=True, cache=True)
def _scatter(kind, y, th, row, d_hi, d_lo, d_s):
    """row[th index] += the derivatives in the site's upper and lower cutpoints and in sigma."""
    logit, n_cut, _ = _layout(kind, th)
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
def ordinal_tilted_dparams(kind, y, mu, s2, th):
    """d log Z_i / d th at fixed cavities N(mu_i, s2_i): an (n, p) array."""
    n, p = y.shape[0], th.shape[0]
    out = np.zeros((n, p))
    for i in range(n):
        r = ordinal_tilted_local(kind, y[i], mu[i], s2[i], th)
        _scatter(kind, y[i], th, out[i], r[3], r[4], r[5])
    return out


@njit(nogil=True, cache=True)
def ordinal_tilted_dparams_sum(kind, y, mu, s2, th, dth):
    """dth[:] = sum_i d log Z_i / d th (the compiled EP's parameter gradient)."""
    dth[:] = 0.0
    for i in range(y.shape[0]):
        r = ordinal_tilted_local(kind, y[i], mu[i], s2[i], th)
        _scatter(kind, y[i], th, dth, r[3], r[4], r[5])


@njit(nogil=True, cache=True)
def ordinal_log_lik_dparams(kind, y, f, th):
    """d/d th of (log p, d1, d2) at each site: a (3, n, p) array."""
    n, p = y.shape[0], th.shape[0]
    out = np.zeros((3, n, p))
    for i in range(n):
        r = ordinal_log_lik_local(kind, y[i], f[i], th)
        for j in range(3):
            _scatter(kind, y[i], th, out[j, i], r[4 + 3 * j], r[5 + 3 * j], r[6 + 3 * j])
    return out


# ---------------------------------------------------------------------------------
# Array maps over sites
# ---------------------------------------------------------------------------------


# Index of each likelihood in the dispatch below (``Likelihood.kind``). One compiled
# function serves every likelihood, so that numba can cache it on disk (closures over
# per-likelihood kernels cannot be cached) and compiled loops elsewhere (sequential EP,
# ADF, parallel EP) take the likelihood as an integer argument.
PROBIT, PROBIT_BIAS, PROBIT_NOISE, STEP_LABEL_NOISE, LOGISTIC, ORDERED_PROBIT, ORDERED_LOGIT = range(7)


@njit(nogil=True, cache=True)
def tilted_site(kind, y, mu, s2, th):
    """The tilted kernel of likelihood ``kind`` at one site: log Z, d/dmu, d^2/dmu^2, d/dtheta."""
    if kind == PROBIT:
        return _probit_tilted(y, mu, s2, th)
    if kind == PROBIT_BIAS:
        return _probit_bias_tilted(y, mu, s2, th)
    if kind == PROBIT_NOISE:
        return _probit_noise_tilted(y, mu, s2, th)
    if kind == STEP_LABEL_NOISE:
        return _step_tilted(y, mu, s2, th)
    if kind == LOGISTIC:
        return _logistic_tilted(y, mu, s2, th)
    if kind == ORDERED_PROBIT or kind == ORDERED_LOGIT:
        return ordinal_tilted(kind, y, mu, s2, th)
    return np.nan, np.nan, np.nan, np.nan  # unreachable: Likelihood.__init_subclass__ checks kind


@njit(nogil=True, cache=True)
def log_lik_site(kind, y, f, th):
    """The log-likelihood kernel of likelihood ``kind`` at one site (7 values, see below)."""
    if kind == PROBIT:
        return _probit_log_lik(y, f, th)
    if kind == PROBIT_BIAS:
        return _probit_bias_log_lik(y, f, th)
    if kind == PROBIT_NOISE:
        return _probit_noise_log_lik(y, f, th)
    if kind == STEP_LABEL_NOISE:
        return _no_log_lik(y, f, th)
    if kind == LOGISTIC:
        return _logistic_log_lik(y, f, th)
    if kind == ORDERED_PROBIT or kind == ORDERED_LOGIT:
        return ordinal_log_lik(kind, y, f, th)
    return np.nan, np.nan, np.nan, np.nan, np.nan, np.nan, np.nan  # unreachable (kind checked)


@njit(nogil=True, cache=True)
def tilted_map(kind, y, mu, s2, th):
    """``tilted_site`` over all sites: rows log Z, d/dmu, d^2/dmu^2, d/dtheta."""
    n = y.shape[0]
    out = np.empty((4, n))
    for i in range(n):
        a, b, c, d = tilted_site(kind, y[i], mu[i], s2[i], th)
        out[0, i] = a
        out[1, i] = b
        out[2, i] = c
        out[3, i] = d
    return out


@njit(nogil=True, cache=True)
def log_lik_map(kind, y, f, th):
    """``log_lik_site`` over all sites (7 rows)."""
    n = y.shape[0]
    out = np.empty((7, n))
    for i in range(n):
        r = log_lik_site(kind, y[i], f[i], th)
        for k in range(7):
            out[k, i] = r[k]
    return out


@njit(nogil=True, cache=True)
def tilted_dparams_sum(kind, y, mu, s2, th, row, dth):
    """dth[:] = sum_i d log Z_i / d theta at the cavities N(mu_i, s2_i); ``row`` holds the
    single-parameter kinds' per-site derivatives (``tilted_map``'s last row)."""
    if kind == ORDERED_PROBIT or kind == ORDERED_LOGIT:
        ordinal_tilted_dparams_sum(kind, y, mu, s2, th, dth)
    elif dth.shape[0] > 0:
        dth[0] = row.sum()


class TiltedMoments:
    """Per-site EP quantities at given cavities: log Z_i, d/dmu, d^2/dmu^2, d/dtheta.

    ``dparams``: the (n, p) derivatives in theta where they are not ``out``'s last row
    (likelihoods with several parameters, ``ordinal``)."""

    __slots__ = ("log_z", "dlog_z", "d2log_z", "dlog_z_dparams")

    def __init__(self, out, n_params, dparams=None):
        self.log_z, self.dlog_z, self.d2log_z = out[0], out[1], out[2]
        self.dlog_z_dparams = out[3:4].T[:, :n_params] if dparams is None else dparams


class LogLikDerivatives:
    """log p(y_i | f_i), its f-derivatives d1..d3, and d/dtheta of (log p, d1, d2)."""

    __slots__ = ("lp", "d1", "d2", "d3", "lp_dparams", "d1_dparams", "d2_dparams")

    def __init__(self, out, n_params, dparams=None):
        """``dparams``: a (3, n, p) array of the theta-derivatives of (log p, d1, d2) where
        they are not ``out``'s last three rows (``ordinal``)."""
        self.lp, self.d1, self.d2, self.d3 = out[0], out[1], out[2], out[3]
        if dparams is None:
            dparams = out[4:7, :, None][:, :, :n_params]
        self.lp_dparams, self.d1_dparams, self.d2_dparams = dparams


class Likelihood:
    r"""Base class: a binary observation model with at most one parameter.

    Subclasses set ``param_names``, ``kind`` (their index in the compiled dispatch
    ``tilted_site`` / ``log_lik_site``) and extend ``check_params``.

    Every approximation talks to a likelihood only through its numeric contract: the EP
    tilted moments (:math:`\log Z_i` and its derivatives in the cavity mean and variance and
    in the parameter), :math:`\log p(y \mid f)` and its derivatives in :math:`f` (Laplace),
    expected log-likelihoods under a Gaussian (mean field, EM-EP's bound) and the
    predictive :math:`p(y_* = 1 \mid \mu_*, s^2_*)`.

    Examples
    --------
    >>> import pymc_gpc
    >>> lik = pymc_gpc.likelihoods.ProbitNoise(sigma=2.0)
    >>> isinstance(lik, pymc_gpc.likelihoods.Likelihood), lik.param_names
    (True, ('sigma',))
    """

    param_names: tuple = ()
    supports_laplace = True
    kind = None  # PROBIT, ..., ORDERED_LOGIT
    # p(y | f) <= 1 for discrete labels, so log p(y) <= 0: an approximate log evidence above
    # this is a broken solve, not a value (``approximations.solve.solve_with_retries``)
    max_log_evidence = 0.0

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.__dict__.get("_abstract", False):  # an intermediate base (``ordinal.OrdinalLikelihood``)
            return
        if cls.kind not in range(ORDERED_LOGIT + 1):
            raise TypeError(f"{cls.__name__}.kind must name a compiled kernel (PROBIT ... ORDERED_LOGIT), "
                            f"got {cls.kind!r}")

    def __init__(self, *values):
        self._values = values
        if any(_is_symbolic(v) for v in values):
            self._params = None  # random variables: values arrive at evaluation time
        else:
            self._params = self.check_params(values)

    def params_tensor(self):
        """The parameters as a PyTensor vector (of length ``n_params``)."""
        import pytensor.tensor as pt

        if not self._values:
            return pt.zeros((0,), dtype="float64")
        return pt.stack([pt.as_tensor_variable(v).astype("float64") for v in self._values])

    @property
    def n_params(self):
        return len(self.param_names)

    @property
    def params(self):
        """The likelihood's fixed parameter values (length ``n_params``)."""
        if self._params is None:
            raise ValueError(f"{type(self).__name__} has symbolic parameters; their values are not fixed")
        return self._params.copy()

    def check_params(self, params):
        """Return ``params`` as a float array, or raise ValueError naming the problem."""
        try:
            params = np.asarray(params, dtype=float).reshape(-1)
        except (TypeError, ValueError):
            raise ValueError(
                f"{type(self).__name__} parameters {self.param_names} must be numbers or "
                f"PyTensor/PyMC variables, got {params!r}"
            ) from None
        if params.shape != (self.n_params,):
            raise ValueError(
                f"{type(self).__name__} takes {self.n_params} parameter(s) "
                f"{self.param_names}, got {params.size}"
            )
        if not np.all(np.isfinite(params)):
            raise ValueError(f"{type(self).__name__} parameters must be finite, got {params}")
        return params

    def resolve_params(self, params):
        if params is None:
            return self.params
        return np.asarray(params, dtype=float).reshape(-1)

    def check_labels(self, y, params=None):
        """The solvers' labels as floats: here -1.0 / +1.0 (``validation.as_signed_labels``)."""
        from ..validation import as_signed_labels

        return as_signed_labels(y, require_both=False)

    def tilted_moments(self, out, y, mu, s2, th):
        """``TiltedMoments`` of ``tilted_map``'s rows ``out`` (computed at cavities N(mu, s2))."""
        return TiltedMoments(out, self.n_params)

    def tilted(self, y, mu, s2, params=None):
        r"""EP tilted moments at cavities :math:`N(\mu_i, s^2_i)`; see the module docstring."""
        out = tilted_map(self.kind, y, np.asarray(mu, float), np.asarray(s2, float), self.resolve_params(params))
        return TiltedMoments(out, self.n_params)

    def log_lik(self, y, f, params=None):
        r""":math:`\log p(y_i \mid f_i)` with its f-derivatives to third order (Laplace)."""
        if not self.supports_laplace:
            raise ValueError(laplace_unsupported_message(self))
        out = log_lik_map(self.kind, y, np.asarray(f, float), self.resolve_params(params))
        return LogLikDerivatives(out, self.n_params)

    def expected_log_lik(self, y, mu, s2, params=None):
        r""":math:`E_q[\log p(y_i \mid f_i)]` under :math:`q(f_i) = N(\mu_i, s^2_i)`, and its :math:`\theta`-gradient.

        The data term of the variational bound (Kim & Ghahramani eq. 15, first integral;
        Tan eq. 17, first sum), by Gauss-Hermite quadrature of ``log_lik``. Returns
        per-site values (n,) and :math:`\partial / \partial \theta` (n, p).
        """
        mu = np.asarray(mu, float).reshape(-1)
        s2 = np.asarray(s2, float).reshape(-1)
        f = mu[:, None] + np.sqrt(2.0 * s2)[:, None] * _GH_NODES[None, :]
        y_rep = np.repeat(np.asarray(y, float), _GH_NODES.size)
        d = self.log_lik(y_rep, f.reshape(-1), params)
        w = _GH_WEIGHTS / np.sqrt(np.pi)
        value = d.lp.reshape(mu.size, -1) @ w
        grad = np.einsum("ikp,k->ip", d.lp_dparams.reshape(mu.size, _GH_NODES.size, self.n_params), w)
        return value, grad

    def predict(self, mu, s2, params=None):
        r""":math:`p(y_* = +1 \mid \mu_*, s^2_*)`: the likelihood averaged over :math:`N(\mu_*, s^2_*)` (Tan eq. 13)."""
        mu = np.asarray(mu, dtype=float).reshape(-1)
        s2 = np.asarray(s2, dtype=float).reshape(-1)
        return np.exp(self.tilted(np.ones_like(mu), mu, s2, params).log_z)

    def __repr__(self):
        vals = self._values if self._params is None else [f"{v:g}" for v in self._params]
        args = ", ".join(f"{k}={v}" for k, v in zip(self.param_names, vals))
        return f"{type(self).__name__}({args})"


def _is_symbolic(value):
    try:
        from pytensor.graph.basic import Variable
    except ImportError:  # pragma: no cover
        return False
    return isinstance(value, Variable)


def laplace_unsupported_message(lik):
    return (
        f"{type(lik).__name__} has no Laplace approximation: its log-likelihood is "
        "piecewise constant in f, so the mode and Hessian that Laplace's method needs do "
        "not exist. Use Expectation Propagation (MarginalEP / ep) instead."
    )


class Probit(Likelihood):
    r"""Probit likelihood, :math:`p(y \mid f) = \Phi(y f)` (Tan eq. 5).

    Examples
    --------
    >>> import pymc as pm, pymc_gpc
    >>> lik = pymc_gpc.likelihoods.Probit()
    >>> gp = pymc_gpc.MarginalEP(cov_func=pm.gp.cov.ExpQuad(2, ls=1.0), likelihood=lik)
    """

    kind = PROBIT

    def __init__(self):
        super().__init__()


class ProbitBias(Likelihood):
    r"""Probit likelihood with a bias, :math:`p(y \mid f) = \Phi(y (f + b))` (Tan eq. 6).

    Parameters
    ----------
    bias : float or PyMC variable
        The shift :math:`b` (default 0).

    Examples
    --------
    >>> import pymc as pm, pymc_gpc
    >>> lik = pymc_gpc.likelihoods.ProbitBias(bias=0.5)
    >>> with pm.Model():
    ...     lik = pymc_gpc.likelihoods.ProbitBias(bias=pm.Normal("b", 0, 1))  # learned
    """

    param_names = ("bias",)
    kind = PROBIT_BIAS

    def __init__(self, bias=0.0):
        super().__init__(bias)


class ProbitNoise(Likelihood):
    r"""Probit likelihood with latent Gaussian noise, :math:`p(y \mid f) = \Phi(y f / \sigma)` (Tan eq. 7).

    Parameters
    ----------
    sigma : float or PyMC variable
        The latent noise's standard deviation :math:`\sigma > 0` (default 1).

    Examples
    --------
    >>> import pymc as pm, pymc_gpc
    >>> lik = pymc_gpc.likelihoods.ProbitNoise(sigma=2.0)
    >>> with pm.Model():
    ...     lik = pymc_gpc.likelihoods.ProbitNoise(sigma=pm.HalfNormal("sigma", 1))
    """

    param_names = ("sigma",)
    kind = PROBIT_NOISE

    def __init__(self, sigma=1.0):
        super().__init__(sigma)

    def check_params(self, params):
        params = super().check_params(params)
        if not params[0] > 0.0:
            raise ValueError(f"ProbitNoise needs sigma > 0, got sigma={params[0]:g}")
        return params


class StepLabelNoise(Likelihood):
    r"""Step likelihood with label noise (Kim & Ghahramani; Tan eq. 4).

    :math:`p(y \mid f) = \epsilon + (1 - 2\epsilon) H(y f)`, with :math:`H` the step function.

    ``epsilon`` is the probability that a label is flipped; EP only.

    Parameters
    ----------
    epsilon : float or PyMC variable
        The label-flip probability, in [0, 0.5) (default 0).

    Examples
    --------
    >>> import pymc as pm, pymc_gpc
    >>> lik = pymc_gpc.likelihoods.StepLabelNoise(epsilon=0.05)
    >>> with pm.Model():
    ...     lik = pymc_gpc.likelihoods.StepLabelNoise(epsilon=pm.Beta("eps", 1, 20))
    """

    param_names = ("epsilon",)
    supports_laplace = False
    kind = STEP_LABEL_NOISE

    def __init__(self, epsilon=0.0):
        super().__init__(epsilon)

    def expected_log_lik(self, y, mu, s2, params=None):
        r"""Closed form of :math:`E_q[\log p(y_i \mid f_i)]` (Kim & Ghahramani 2003, outlier paper sec. 4).

        With :math:`\omega_i = q(y_i f_i > 0) = \Phi(y_i \mu_i / s_i)`,
        :math:`E_q[\log p] = \omega_i \log(1 - \epsilon) + (1 - \omega_i) \log \epsilon`,
        maximised over :math:`\epsilon` by :math:`\epsilon^* = \operatorname{mean}_i(1 - \omega_i)`
        (``fit``'s "omega" rule).
        """
        eps = self.resolve_params(params)[0]
        omega = np.exp(self.log_prob_correct(y, mu, s2))
        miss = np.exp(self.log_prob_correct(-np.asarray(y, float), mu, s2))
        with np.errstate(divide="ignore", invalid="ignore"):
            value = omega * np.log1p(-eps) + np.where(miss > 0.0, miss * np.log(eps), 0.0)
            grad = -omega / (1.0 - eps) + np.where(miss > 0.0, miss / eps, 0.0)
        return value, grad[:, None]

    @staticmethod
    def log_prob_correct(y, mu, s2):
        r""":math:`\log \omega_i = \log q(y_i f_i > 0) = \log \Phi(y_i \mu_i / s_i)` under :math:`N(\mu_i, s^2_i)`."""
        z = np.asarray(y, float) * np.asarray(mu, float) / np.sqrt(np.asarray(s2, float))
        return log_ndtr_array(np.ascontiguousarray(z, dtype=float).reshape(-1))

    def check_params(self, params):
        params = super().check_params(params)
        if not 0.0 <= params[0] < 0.5:
            raise ValueError(f"StepLabelNoise needs 0 <= epsilon < 0.5, got epsilon={params[0]:g}")
        return params


class Logistic(Likelihood):
    r"""Logistic likelihood, :math:`p(y \mid f) = 1 / (1 + e^{-y f})` (Barber & Williams eq. 1).

    Under EP its tilted moments come from a composite Gauss-Legendre rule accurate to
    about 1e-13 at any cavity (see ``_logistic_tilted``).

    Examples
    --------
    >>> import pymc as pm, pymc_gpc
    >>> lik = pymc_gpc.likelihoods.Logistic()
    >>> gp = pymc_gpc.MarginalLaplace(cov_func=pm.gp.cov.ExpQuad(2, ls=1.0), likelihood=lik)
    """

    kind = LOGISTIC

    def __init__(self):
        super().__init__()


LIKELIHOODS = (Probit, ProbitBias, ProbitNoise, StepLabelNoise, Logistic)

