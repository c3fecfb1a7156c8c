r"""Observation models p(y | f, theta) for binary GP classification, y in {-1, +1}.

Each class names its compiled one-site kernels in ``site_kernels`` (the contract:
``likelihoods.base``) and has at most one parameter, carried as a length-0 or length-1
array; ``predict`` is p(y* = +1) = \int p(+1 | f) N(f; mu, s2) df (Tan, eq. 13).
"""

import math

import numpy as np
from numba import njit

from ..numerics.logit_tilted import GL_NODES, GL_WEIGHTS, GRADE, N_SD, bracketed_newton_step
from ..numerics.special import inv_mills, log_add_exp, log_ndtr, log_ndtr_array, log_npdf, log_sigmoid, sigmoid
from .base import Likelihood, SiteKernels

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


# ---------------------------------------------------------------------------------
# Logistic: p(y | f) = 1 / (1 + exp(-y f))  (Barber & Williams, eq. 1).
# ---------------------------------------------------------------------------------


# The composite Gauss-Legendre rule of the logistic tilted moments (``_logistic_tilted``).
# the rule's panel ends graded at f = +-2^j (``GRADE``) around sigma's poles' real part 0
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
        m, lo, hi, done = bracketed_newton_step(m, y * p - (m - mu) / s2, -p * (1.0 - p) - 1.0 / s2, lo, hi, s2)
        if done:
            break
    return m


@njit(nogil=True, cache=True)
def _logistic_breakpoints(m, s):
    """Sorted panel ends as offsets t = f - m over [-9 s, 9 s]: steps of 3 s (the Gaussian's
    scale) and ends at f = 0 and f = +-2^j, j = -1..20 (sigma's scale is 1 and its poles lie at
    Im f = +-pi: a panel at distance d >= 1/2 from 0 is at most d wide, so its Bernstein
    ellipse clears the poles and 12 Gauss-Legendre nodes reach ~1e-16), clipped to the range
    (empty panels). Offsets, not abscissae, so that a narrow cavity far from 0 loses no digits."""
    n_g = GRADE.shape[0]
    n_sd = 2 * _LOGISTIC_SD_PANELS + 1
    pts = np.empty(n_sd + 2 * n_g + 1)
    for k in range(n_sd):
        pts[k] = (k - _LOGISTIC_SD_PANELS) * (N_SD / _LOGISTIC_SD_PANELS) * s
    pts[n_sd] = -m
    for i in range(n_g):
        pts[n_sd + 1 + 2 * i] = -m - GRADE[i]
        pts[n_sd + 2 + 2 * i] = -m + GRADE[i]
    for i in range(pts.shape[0]):
        pts[i] = min(max(pts[i], -N_SD * s), N_SD * s)
    return np.sort(pts)


@njit(nogil=True, cache=True)
def _logistic_tilted(y, mu, s2, th):
    """Tilted moments of sigma(y f) N(f; mu, s2) by a composite Gauss-Legendre rule around the
    mode m of the log-integrand g (``_logistic_mode``; as the ordered logit's,
    ``_ordered_logit_tilted_local``).

    g'' <= -1/s2, so m +- 9 sqrt(s2) holds all but e^-40 of the mass; the panels
    (``_logistic_breakpoints``) resolve both the Gaussian's scale sqrt(s2) and the logistic's
    scale 1 (about 1e-13 for cavity means within +-50 and variances from 1e-6 to 1e6). The
    integrand is written in the offset t and dm = m - mu, so that no digits are lost where
    s << |mu|. d log Z / d mu = (E f - mu) / s2, d^2 log Z / d mu^2 = (Var f - s2) / s2^2.
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
        for q in range(GL_NODES.shape[0]):
            t = mid + half * GL_NODES[q]
            w = half * GL_WEIGHTS[q] * math.exp(log_sigmoid(y * (m + t)) - 0.5 * (dm + t) ** 2 / s2 - g_m)
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


@njit(nogil=True, cache=True)
def _positive_param(th, n_params):
    """ProbitNoise's range: sigma > 0."""
    return th.shape[0] == n_params and th[0] > 0.0


@njit(nogil=True, cache=True)
def _flip_probability(th, n_params):
    """StepLabelNoise's range: 0 <= epsilon < 1/2."""
    return th.shape[0] == n_params and 0.0 <= th[0] < 0.5


# ---------------------------------------------------------------------------------
# The likelihood classes
# ---------------------------------------------------------------------------------


class Probit(Likelihood):
    r"""Probit likelihood, :math:`p(y \mid f) = \Phi(y f)` (Tan eq. 5).

    Examples
    --------
    >>> import pymc as pm, pymc_gpc
    >>> lik = pymc_gpc.likelihoods.Probit()
    >>> gp = pymc_gpc.MarginalEP(cov_func=pm.gp.cov.ExpQuad(2, ls=1.0), likelihood=lik)
    """

    site_kernels = SiteKernels(_probit_tilted, _probit_log_lik)

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
    site_kernels = SiteKernels(_probit_bias_tilted, _probit_bias_log_lik)

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
    site_kernels = SiteKernels(_probit_noise_tilted, _probit_noise_log_lik, params_valid=_positive_param)

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
    # not log-concave: EP's sites may be negative and EP may have several fixed points, among
    # which every backend picks by one rule (``approximations.solve.solve_with_retries``)
    log_concave = False
    site_kernels = SiteKernels(_step_tilted, params_valid=_flip_probability)

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

    site_kernels = SiteKernels(_logistic_tilted, _logistic_log_lik)

    def __init__(self):
        super().__init__()


LIKELIHOODS = (Probit, ProbitBias, ProbitNoise, StepLabelNoise, Logistic)

