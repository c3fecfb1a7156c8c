r"""The likelihoods' numeric contract in JAX (``likelihoods.base``, vectorised over sites).

The same formulas as the numba kernels of ``binary.py`` and ``ordinal.py``, in the same
order, for the JAX backend (``backends/jax/engine.py``): every function maps arrays of sites
at once and is traceable by ``jax.jit`` and ``jax.vmap``. Imports jax, numpy and the
likelihood classes (for their kinds).

``tilted(kind, y, mu, s2, th)``
    EP: rows log Z_i, d/dmu, d^2/dmu^2, d/dtheta at the cavities N(mu_i, s2_i).
``log_lik(kind, y, f, th)``
    Laplace: log p(y_i | f_i), d1, d2, d3 in f, and d/dtheta of (log p, d1, d2).
``tilted_dparams(kind, y, th, t)``, ``log_lik_dparams(kind, y, th, out)``
    The parameter derivatives of those rows as (n, p) arrays (one row for the binary
    kinds; the ordinal kinds' site-local derivatives scattered into th, ``ordinal_scatter``).
``params_valid(kind, th)``
    Whether the likelihood parameters are in range (ProbitNoise: sigma > 0; StepLabelNoise:
    0 <= epsilon < 0.5; the ordinal kinds: cutpoints strictly increasing, sigma > 0); out of
    range, the engine returns -inf with status "failed".
``labels(kind, y)``
    The labels as the kernels take them: -1/+1 for the binary kinds, 0..K-1 for the ordinal.

``kind`` is the likelihood class's ``kind`` (``likelihoods.base``), a static Python value;
each class's JAX kernels are registered at the end of this module (``register``), the
counterpart of its ``SiteKernels``.
The logistic and ordered-logit tilted moments use the composite Gauss-Legendre rules of
``binary._logistic_tilted`` and ``ordinal._ordered_logit_tilted_local`` (the same panels and
nodes: a fixed number, as JAX needs static shapes; empty panels weigh nothing).
"""

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import log_ndtr

from ...likelihoods.base import KINDS
from ...numerics.logit_tilted import GL_NODES, GL_WEIGHTS, GRADE, N_SD
from ...likelihoods.binary import Logistic, Probit, ProbitBias, ProbitNoise, StepLabelNoise
from ...likelihoods.ordinal import OrderedLogit, OrderedProbit

_LOG_2PI = math.log(2.0 * math.pi)


def log_npdf(z):
    """log N(z; 0, 1)."""
    return -0.5 * z * z - 0.5 * _LOG_2PI


def inv_mills(z):
    """N(z) / Phi(z) for every finite z (``numerics.special.inv_mills``): exp(log N - log Phi)
    for z >= -5, Laplace's continued fraction (A&S 26.2.14, 80 terms) below."""
    direct = jnp.exp(log_npdf(z) - log_ndtr(jnp.maximum(z, -5.0)))
    x = jnp.maximum(-z, 5.0)
    t = x
    for k in range(80, 0, -1):
        t = x + k / t
    return jnp.where(z >= -5.0, direct, t)


def _probit_family_tilted(y, mu, s2, b, c2):
    """``binary._probit_family_tilted``: log Z, d/dmu, d^2/dmu^2, d/db, d/dc^2."""
    v = c2 + s2
    sv = jnp.sqrt(v)
    z = y * (mu + b) / sv
    r = inv_mills(z)
    dmu = y * r / sv
    return log_ndtr(z), dmu, -r * (z + r) / v, dmu, -0.5 * r * z / v


def _probit_family_log_lik(y, f, b, c):
    """``binary._probit_family_log_lik``: log Phi(u), u = y (f + b) / c, d1..d3 and d/dc of (lp, d1, d2)."""
    u = y * (f + b) / c
    r = inv_mills(u)
    q = u + r
    d1 = y * r / c
    d2 = -r * q / (c * c)
    d3 = y * r * (q * (u + 2.0 * r) - 1.0) / (c * c * c)
    lp_c = -r * u / c
    d1_c = y * r * (u * q - 1.0) / (c * c)
    d2_c = (-u * r * (q * (u + 2.0 * r) - 1.0) + 2.0 * r * q) / (c * c * c)
    return log_ndtr(u), d1, d2, d3, lp_c, d1_c, d2_c


def _step_tilted(y, mu, s2, eps):
    """``binary._step_tilted``: Z = eps + (1 - 2 eps) Phi(y mu / s)."""
    s = jnp.sqrt(s2)
    z = y * mu / s
    log_phi = log_ndtr(z)
    log_eps = jnp.where(eps > 0.0, jnp.log(jnp.maximum(eps, 1e-300)), -jnp.inf)
    lz = jnp.logaddexp(log_eps, jnp.log1p(-2.0 * eps) + log_phi)
    alpha = y * jnp.exp(jnp.log1p(-2.0 * eps) + log_npdf(z) - lz) / s
    d2 = -alpha * (alpha + y * z / s)
    deps = (jnp.exp(log_ndtr(-z)) - jnp.exp(log_phi)) * jnp.exp(-lz)
    return lz, alpha, d2, deps


# binary._logistic_tilted's rule (numpy: cast at trace time)
_LOGISTIC_SD_PANELS = 3


def _logistic_mode(y, mu, s2):
    """The mode of g(f) = log sigma(y f) - (f - mu)^2 / (2 s2), strictly concave.

    g' is decreasing, positive times y at mu and negative times y at mu + y s2, so the mode
    lies between them: 60 bisections (a bracket of s2 2^-60), then two Newton steps (plain
    Newton from mu stalls far from the mode when s2 is large and mu is deep in a tail:
    mu = -91, s2 = 100; ``binary._logistic_mode`` guards it with the same bracket).
    """

    def slope(m):
        return y * jax.nn.sigmoid(-y * m) - (m - mu) / s2

    def bisect(_, bracket):
        lo, hi = bracket
        mid = 0.5 * (lo + hi)
        right = slope(mid) * y > 0.0  # the mode is beyond mid, in the direction of y
        return jnp.where(right, mid, lo), jnp.where(right, hi, mid)

    lo, hi = jax.lax.fori_loop(0, 60, bisect, (mu, mu + y * s2))
    m = 0.5 * (lo + hi)
    for _ in range(2):
        p = jax.nn.sigmoid(-y * m)
        m = m - slope(m) / (-p * (1.0 - p) - 1.0 / s2)
    return m


def _logistic_tilted(y, mu, s2):
    """``binary._logistic_tilted`` over sites: the same composite Gauss-Legendre rule (panel
    ends at every 3 sd over mode +- 9 sd and at f = 0, +-2^j, ``binary._logistic_breakpoints``;
    12 nodes each) in the offset t = f - m from the mode."""
    s = jnp.sqrt(s2)
    m = _logistic_mode(y, mu, s2)
    dm = m - mu
    steps = (jnp.arange(-_LOGISTIC_SD_PANELS, _LOGISTIC_SD_PANELS + 1, dtype=s.dtype)[:, None]
             * (N_SD / _LOGISTIC_SD_PANELS) * s[None, :])
    offs = np.concatenate([np.zeros(1), -GRADE, GRADE])[:, None]
    pts = jnp.concatenate([steps, -m[None, :] + offs], axis=0)
    pts = jnp.sort(jnp.clip(pts, -N_SD * s[None, :], N_SD * s[None, :]), axis=0)
    half = 0.5 * (pts[1:] - pts[:-1])  # (panels, n)
    mid = 0.5 * (pts[1:] + pts[:-1])
    t = (mid[:, None, :] + half[:, None, :] * GL_NODES[None, :, None]).reshape(-1, mu.shape[0])
    wq = (half[:, None, :] * GL_WEIGHTS[None, :, None]).reshape(-1, mu.shape[0])
    g_m = jax.nn.log_sigmoid(y * m) - 0.5 * dm ** 2 / s2
    lg = jax.nn.log_sigmoid(y * (m[None, :] + t)) - 0.5 * (dm[None, :] + t) ** 2 / s2[None, :] - g_m[None, :]
    w = wq * jnp.exp(jnp.where(wq > 0.0, lg, -jnp.inf))
    w_sum = w.sum(axis=0)
    mean_t = (w * t).sum(axis=0) / w_sum
    var = jnp.maximum((w * t * t).sum(axis=0) / w_sum - mean_t * mean_t, 0.0)
    lz = jnp.minimum(g_m + jnp.log(w_sum) - 0.5 * jnp.log(2.0 * jnp.pi * s2), 0.0)  # Z <= 1: sigma <= 1
    return lz, (dm + mean_t) / s2, (var - s2) / (s2 * s2), jnp.zeros_like(mu)


def _probit_rows(y, mu, s2, th):
    lz, d1, d2, _, _ = _probit_family_tilted(y, mu, s2, 0.0, 1.0)
    return jnp.stack((lz, d1, d2, jnp.zeros_like(mu)))


def _probit_log_lik_rows(y, f, th):
    lp, d1, d2, d3, _, _, _ = _probit_family_log_lik(y, f, 0.0, 1.0)
    zero = jnp.zeros_like(f)
    return jnp.stack((lp, d1, d2, d3, zero, zero, zero))


def _probit_bias_rows(y, mu, s2, th):
    lz, d1, d2, db, _ = _probit_family_tilted(y, mu, s2, th[0], 1.0)
    return jnp.stack((lz, d1, d2, db))


def _probit_bias_log_lik_rows(y, f, th):
    lp, d1, d2, d3, _, _, _ = _probit_family_log_lik(y, f, th[0], 1.0)
    return jnp.stack((lp, d1, d2, d3, d1, d2, d3))


def _probit_noise_rows(y, mu, s2, th):
    lz, d1, d2, _, dc2 = _probit_family_tilted(y, mu, s2, 0.0, th[0] * th[0])
    return jnp.stack((lz, d1, d2, 2.0 * th[0] * dc2))


def _probit_noise_log_lik_rows(y, f, th):
    return jnp.stack(_probit_family_log_lik(y, f, 0.0, th[0]))


def _step_rows(y, mu, s2, th):
    return jnp.stack(_step_tilted(y, mu, s2, th[0]))


def _logistic_rows(y, mu, s2, th):
    return jnp.stack(_logistic_tilted(y, mu, s2))


def _logistic_log_lik_rows(y, f, th):
    p, q = jax.nn.sigmoid(f), jax.nn.sigmoid(-f)
    zero = jnp.zeros_like(f)
    return jnp.stack((jax.nn.log_sigmoid(y * f), y * jax.nn.sigmoid(-y * f), -p * q, -p * q * (q - p), zero, zero, zero))


# ---------------------------------------------------------------------------------
# Ordinal likelihoods (``likelihoods/ordinal.py``): site-local rows
# ---------------------------------------------------------------------------------
# The same formulas as the numba kernels, as (rows, n) arrays: the derivatives in each
# site's upper and lower cutpoint and in sigma (``ordinal_scatter`` places them in the
# parameter vector; ``tilted_dparams`` / ``log_lik_dparams`` above call it).

# The ordered logit's composite Gauss-Legendre rule (as ``ordinal.py``'s)
# (``numerics.logit_tilted``'s GL_NODES, GL_WEIGHTS, GRADE, N_SD; numpy: cast at trace time)


def _log1mexp(x):
    """log(1 - e^x) for x <= 0 (``ordinal._log1mexp``)."""
    return jnp.where(x > -math.log(2.0), jnp.log(-jnp.expm1(jnp.minimum(x, -1e-300))),
                     jnp.log1p(-jnp.exp(jnp.minimum(x, -math.log(2.0)))))


def _ordinal_bounds(logit, y, th):
    """(n_cut, scale, has_hi, b_hi, has_lo, b_lo, valid) for labels y (0..n_cut)."""
    n_cut = th.shape[0] - (0 if logit else 1)
    scale = 1.0 if logit else th[n_cut]
    k = jnp.round(y).astype(jnp.int32)
    valid = (k == y) & (k >= 0) & (k <= n_cut)
    has_hi, has_lo = k < n_cut, k > 0
    cut = th[:n_cut]
    b_hi = jnp.where(has_hi, cut[jnp.clip(k, 0, n_cut - 1)], 0.0)
    b_lo = jnp.where(has_lo, cut[jnp.clip(k - 1, 0, n_cut - 1)], 0.0)
    return n_cut, scale, has_hi, b_hi, has_lo, b_lo, valid


def _probit_two_sided(u1, u2, two_sided):
    """``ordinal._probit_two_sided``: log(Phi(u1) - Phi(u2)), N(u1) / D, N(u2) / D; where
    ``two_sided`` is False, log Phi(u1), N(u1) / Phi(u1) and 0."""
    lp1 = log_ndtr(u1)
    delta = jnp.where(two_sided, jnp.minimum(log_ndtr(u2) - lp1, 0.0), -jnp.inf)
    em = -jnp.expm1(delta)
    r2 = jnp.where(two_sided, inv_mills(u2) * jnp.exp(delta) / em, 0.0)
    return lp1 + jnp.log(em), inv_mills(u1) / em, r2


def _interval_partials(logit, u1, has1, u2, has2):
    """``ordinal._interval_partials`` over arrays (a missing bound: its u is 0, has False)."""
    if logit:
        l1me = _log1mexp(jnp.minimum(u2 - u1, 0.0))
        ls = jax.nn.log_sigmoid
        g = jnp.where(has1 & has2, ls(u1) + ls(-u2) + l1me, jnp.where(has1, ls(u1), ls(-u2)))
        a1 = jnp.where(has2, jnp.exp(ls(-u1) - ls(-u2) - l1me), jax.nn.sigmoid(-u1))
        a2 = jnp.where(has1, jnp.exp(ls(u2) - ls(u1) - l1me), jax.nn.sigmoid(u2))
        s1, s2 = jax.nn.sigmoid(u1), jax.nn.sigmoid(u2)
        rb1, rb2, rc1, rc2 = 1.0 - 2.0 * s1, 1.0 - 2.0 * s2, 1.0 - 6.0 * s1 * (1 - s1), 1.0 - 6.0 * s2 * (1 - s2)
    else:
        # a two-sided interval in the upper tail is reflected: (u1, u2) -> (-u2, -u1), whose
        # ratios come back swapped; a one-sided one is the two-sided rule with its missing
        # bound's Phi at 0 (log Phi = -inf gives delta = -inf, em = 1)
        reflect = has1 & has2 & (u1 + u2 > 0.0)
        one_lo = ~has1  # only the lower bound: log Phi(-u2), ratio N(u2) / Phi(-u2)
        v1 = jnp.where(reflect | one_lo, -u2, u1)
        v2 = jnp.where(reflect, -u1, u2)
        ld, r1, r2 = _probit_two_sided(v1, v2, has1 & has2)
        g = ld
        a1 = jnp.where(reflect, r2, jnp.where(one_lo, 0.0, r1))
        a2 = jnp.where(reflect, r1, jnp.where(one_lo, r1, r2))
        rb1, rb2, rc1, rc2 = -u1, -u2, u1 * u1 - 1.0, u2 * u2 - 1.0
    a1, a2 = jnp.where(has1, a1, 0.0), jnp.where(has2, a2, 0.0)
    b1, c1, b2, c2 = a1 * rb1, a1 * rc1, a2 * rb2, a2 * rc2
    return (g, a1, -a2, b1 - a1 * a1, a1 * a2, -b2 - a2 * a2,
            c1 - 3.0 * a1 * b1 + 2.0 * a1 ** 3, a2 * b1 - 2.0 * a1 * a1 * a2,
            a1 * b2 + 2.0 * a1 * a2 * a2, -c2 - 3.0 * a2 * b2 - 2.0 * a2 ** 3)


def ordinal_log_lik(logit, y, f, th):
    """``ordinal.ordinal_log_lik_local`` at all sites: a (13, n) array (lp, d1, d2, d3, then
    (d/db_hi, d/db_lo, d/ds) of lp, d1 and d2)."""
    _, s, has1, b1, has2, b2, valid = _ordinal_bounds(logit, y, th)
    u1 = jnp.where(has1, (b1 - f) / s, 0.0)
    u2 = jnp.where(has2, (b2 - f) / s, 0.0)
    g, g1, g2, g11, g12, g22, g111, g112, g122, g222 = _interval_partials(logit, u1, has1, u2, has2)
    s1, s2_ = g1 + g2, g11 + 2.0 * g12 + g22
    t1, t2 = g111 + 2.0 * g112 + g122, g112 + 2.0 * g122 + g222
    ss = s * s
    zero = jnp.zeros_like(f)
    sig = not logit
    rows = [g, -s1 / s, s2_ / ss, -(g111 + 3.0 * g112 + 3.0 * g122 + g222) / (ss * s),
            g1 / s, g2 / s, -(u1 * g1 + u2 * g2) / s if sig else zero,
            -(g11 + g12) / ss, -(g12 + g22) / ss, (s1 + u1 * (g11 + g12) + u2 * (g12 + g22)) / ss if sig else zero,
            t1 / (ss * s), t2 / (ss * s), -(2.0 * s2_ + u1 * t1 + u2 * t2) / (ss * s) if sig else zero]
    rows = [jnp.where(valid, r, 0.0) for r in rows]
    rows[0] = jnp.where(valid, g, -jnp.inf)
    return jnp.stack(rows)


def _ordered_logit_mode(y, mu, s2, th):
    """The mode of the strictly concave g(f) = log p(y | f) - (f - mu)^2 / (2 s2) by 90
    bisections of [mu - s2 - 50, mu + s2 + 50] (|d log p / df| < 1 for the logit, so g' changes
    sign there), then one Newton step (``ordinal._ordered_logit_mode``)."""

    def slope(m):
        return ordinal_log_lik(True, y, m, th)[1] - (m - mu) / s2

    def bisect(_, bracket):
        lo, hi = bracket
        mid = 0.5 * (lo + hi)
        right = slope(mid) > 0.0
        return jnp.where(right, mid, lo), jnp.where(right, hi, mid)

    lo, hi = jax.lax.fori_loop(0, 90, bisect, (mu - s2 - 50.0, mu + s2 + 50.0))
    m = 0.5 * (lo + hi)
    r = ordinal_log_lik(True, y, m, th)
    m_new = m - (r[1] - (m - mu) / s2) / (r[2] - 1.0 / s2)
    return jnp.where((m_new > lo) & (m_new < hi), m_new, m)


def _ordered_logit_breakpoints(m, s, has1, b1, has2, b2):
    """``ordinal._ordered_logit_breakpoints`` over sites: a (109, n) array of sorted offsets
    from the mode, clipped to [-9 s, 9 s]."""
    steps = jnp.arange(-N_SD, N_SD + 1, dtype=s.dtype)[:, None] * s[None, :]
    offs = np.concatenate([np.zeros(1), -GRADE, GRADE])[:, None]
    parts = [steps]
    for c, has in ((b1, has1), (b2, has2)):
        parts.append(jnp.where(has[None, :], (c - m)[None, :] + offs, 0.0))
    pts = jnp.concatenate(parts, axis=0)
    return jnp.sort(jnp.clip(pts, -N_SD * s[None, :], N_SD * s[None, :]), axis=0)


def _ordered_logit_tilted(y, mu, s2, th):
    """``ordinal._ordered_logit_tilted_local`` over sites: the same composite Gauss-Legendre
    rule (the same panels and nodes) around the mode of the log-integrand."""
    _, _, has1, b1, has2, b2, _ = _ordinal_bounds(True, y, th)
    m = _ordered_logit_mode(y, mu, s2, th)
    dm = m - mu
    g_m = ordinal_log_lik(True, y, m, th)[0] - 0.5 * dm ** 2 / s2
    pts = _ordered_logit_breakpoints(m, jnp.sqrt(s2), has1, b1, has2, b2)
    half = 0.5 * (pts[1:] - pts[:-1])  # (panels, n)
    mid = 0.5 * (pts[1:] + pts[:-1])
    t = (mid[:, None, :] + half[:, None, :] * GL_NODES[None, :, None]).reshape(-1, mu.shape[0])
    wq = (half[:, None, :] * GL_WEIGHTS[None, :, None]).reshape(-1, mu.shape[0])
    f = m[None, :] + t
    u1 = jnp.where(has1[None, :], b1[None, :] - f, 0.0)
    u2 = jnp.where(has2[None, :], b2[None, :] - f, 0.0)
    lp, g1, g2, *_ = _interval_partials(True, u1, has1[None, :], u2, has2[None, :])
    w = wq * jnp.exp(jnp.where(wq > 0.0, lp - 0.5 * (dm[None, :] + t) ** 2 / s2[None, :] - g_m[None, :], -jnp.inf))
    w_sum = w.sum(axis=0)
    mean_t = (w * t).sum(axis=0) / w_sum
    var = jnp.maximum((w * t * t).sum(axis=0) / w_sum - mean_t * mean_t, 0.0)
    lz = g_m + jnp.log(w_sum) - 0.5 * jnp.log(2.0 * jnp.pi * s2)
    return (lz, (dm + mean_t) / s2, (var - s2) / (s2 * s2), (w * g1).sum(0) / w_sum,
            (w * g2).sum(0) / w_sum, jnp.zeros_like(mu))


def ordinal_tilted(logit, y, mu, s2, th):
    """``ordinal.ordinal_tilted_local`` at all sites: a (6, n) array (log Z, d/dmu, d^2/dmu^2,
    d/db_hi, d/db_lo, d/dsigma)."""
    _, sigma, has1, b1, has2, b2, valid = _ordinal_bounds(logit, y, th)
    if logit:
        rows = list(_ordered_logit_tilted(y, mu, s2, th))
    else:
        v = sigma * sigma + s2
        sv = jnp.sqrt(v)
        z1 = jnp.where(has1, (b1 - mu) / sv, 0.0)
        z2 = jnp.where(has2, (b2 - mu) / sv, 0.0)
        g, g1, g2, g11, g12, g22, *_ = _interval_partials(False, z1, has1, z2, has2)
        rows = [g, -(g1 + g2) / sv, (g11 + 2.0 * g12 + g22) / v, g1 / sv, g2 / sv, -sigma * (z1 * g1 + z2 * g2) / v]
    rows = [jnp.where(valid, r, 0.0) for r in rows]
    rows[0] = jnp.where(valid, rows[0], -jnp.inf)
    return jnp.stack(rows)


def ordinal_scatter(logit, y, th, d_hi, d_lo, d_sigma):
    """(n, p): each site's derivatives in its upper and lower cutpoint and in sigma placed at
    their positions in th (``ordinal._scatter``)."""
    n_cut, _, has1, _, has2, _, valid = _ordinal_bounds(logit, y, th)
    k = jnp.round(y).astype(jnp.int32)
    cols = jnp.arange(th.shape[0])[None, :]
    out = (jnp.where((cols == k[:, None]) & has1[:, None], d_hi[:, None], 0.0)
           + jnp.where((cols == k[:, None] - 1) & has2[:, None], d_lo[:, None], 0.0))
    if not logit:
        out = out + jnp.where(cols == n_cut, d_sigma[:, None], 0.0)
    return jnp.where(valid[:, None], out, 0.0)


# ---------------------------------------------------------------------------------
# The table of kinds: each likelihood class's JAX counterpart
# ---------------------------------------------------------------------------------


def _signed(y, th):
    return jnp.where(y > 0, 1.0, -1.0).astype(jnp.float64)


def _codes(y, th):
    return jnp.asarray(y, jnp.float64)


def _always(th):
    return jnp.asarray(True)


def _slot_dparams(y, th, t):
    return jnp.broadcast_to(t[3][:, None], (t.shape[1], th.shape[0]))  # p is 0 or 1


def _slot_log_lik_dparams(y, th, out):
    return tuple(jnp.broadcast_to(out[4 + j][:, None], (out.shape[1], th.shape[0])) for j in range(3))


@dataclass(frozen=True)
class JaxKernels:
    """One likelihood's rows in JAX (signatures as the module docstring's functions, without ``kind``).

    ``tilted`` -> (4, n) (or more rows, read by ``tilted_dparams``); ``log_lik`` -> (7, n) or
    more, None where the likelihood has no Laplace; ``params_valid(th)`` beyond finiteness;
    ``labels(y, th)``; ``tilted_dparams(y, th, t)`` -> (n, p); ``log_lik_dparams(y, th, out)``
    -> three (n, p); ``negative_sites``: EP's site precisions may be negative (the dense solve
    then needs the indefinite form, ``engine.py``).
    """

    tilted: Callable
    log_lik: Callable | None = None
    params_valid: Callable = _always
    labels: Callable = _signed
    tilted_dparams: Callable = _slot_dparams
    log_lik_dparams: Callable = _slot_log_lik_dparams
    negative_sites: bool = False


JAX_KERNELS = {}  # kind -> JaxKernels


def register(likelihood_class, kernels):
    """Make ``kernels`` the JAX counterpart of ``likelihood_class`` (its ``kind``)."""
    if likelihood_class.supports_laplace != (kernels.log_lik is not None):
        raise ValueError(f"{likelihood_class.__name__}: log_lik must be given exactly when it supports Laplace")
    JAX_KERNELS[likelihood_class.kind] = kernels


def kernels(kind):
    """The JAX kernels of ``kind``; ValueError naming the likelihood that has none."""
    if kind not in JAX_KERNELS:
        name = KINDS[kind].__name__ if 0 <= kind < len(KINDS) else repr(kind)
        raise ValueError(f"the likelihood {name} has no JAX implementation (backends/jax/likelihoods.py)")
    return JAX_KERNELS[kind]


def supports_laplace(kind):
    """Whether likelihood ``kind`` has a Laplace approximation."""
    return kernels(kind).log_lik is not None


def negative_sites(kind):
    """Whether EP's site precisions of likelihood ``kind`` may be negative."""
    return kernels(kind).negative_sites


def tilted(kind, y, mu, s2, th):
    """EP tilted moments of likelihood ``kind`` at all sites: rows log Z, d/dmu, d^2/dmu^2,
    then the parameter rows ``tilted_dparams`` reads: a (4, n) array (``base.tilted_map``),
    (6, n) for the ordinal kinds (``ordinal_tilted``)."""
    return kernels(kind).tilted(y, mu, s2, th)


def log_lik(kind, y, f, th):
    """log p(y|f), its f-derivatives to third order and theta-derivatives: a (7, n) array
    (``base.log_lik_map``), (13, n) for the ordinal kinds (``ordinal_log_lik``); rows 0-3
    are log p, d1, d2, d3 for every kind, the rest are read by ``log_lik_dparams``."""
    fn = kernels(kind).log_lik
    if fn is None:
        raise ValueError(f"likelihood {KINDS[kind].__name__} has no Laplace approximation (piecewise constant)")
    return fn(y, f, th)


def params_valid(kind, th):
    """Whether the parameter vector ``th`` is in the likelihood's range (a traced bool):
    ``Likelihood.check_params`` as a yes / no."""
    return jnp.all(jnp.isfinite(th)) & kernels(kind).params_valid(th)


def labels(kind, y, th=None):
    """The labels as the kernels take them: -1/+1 (values above 0 are +1) for the binary
    kinds, the class codes 0..K-1 as floats for the ordinal ones."""
    return kernels(kind).labels(y, th)


def tilted_dparams(kind, y, th, t):
    """d log Z_i / d th at the cavities of ``tilted``'s rows ``t``: an (n, p) array."""
    return kernels(kind).tilted_dparams(y, th, t)


def log_lik_dparams(kind, y, th, out):
    """d/d th of (log p, d1, d2) at each site from ``log_lik``'s rows ``out``: three (n, p) arrays."""
    return kernels(kind).log_lik_dparams(y, th, out)


def _cutpoints_valid(logit, th):
    """``OrdinalLikelihood.check_params``: at least one cutpoint, strictly increasing, sigma > 0."""
    n_cut = th.shape[0] - (0 if logit else 1)
    if n_cut < 1:
        return jnp.asarray(False)
    ok = jnp.all(jnp.diff(th[:n_cut]) > 0.0)
    return ok if logit else ok & (th[n_cut] > 0.0)


def _ordinal_kernels(logit):
    return JaxKernels(
        tilted=partial(ordinal_tilted, logit), log_lik=partial(ordinal_log_lik, logit),
        params_valid=partial(_cutpoints_valid, logit), labels=_codes,
        tilted_dparams=lambda y, th, t: ordinal_scatter(logit, y, th, t[3], t[4], t[5]),
        log_lik_dparams=lambda y, th, out: tuple(
            ordinal_scatter(logit, y, th, out[4 + 3 * j], out[5 + 3 * j], out[6 + 3 * j]) for j in range(3)))


register(Probit, JaxKernels(_probit_rows, _probit_log_lik_rows))
register(ProbitBias, JaxKernels(_probit_bias_rows, _probit_bias_log_lik_rows))
register(ProbitNoise, JaxKernels(_probit_noise_rows, _probit_noise_log_lik_rows, params_valid=lambda th: th[0] > 0.0))
register(StepLabelNoise, JaxKernels(_step_rows, params_valid=lambda th: (th[0] >= 0.0) & (th[0] < 0.5),
                                    negative_sites=True))
register(Logistic, JaxKernels(_logistic_rows, _logistic_log_lik_rows))
register(OrderedProbit, _ordinal_kernels(False))
register(OrderedLogit, _ordinal_kernels(True))
