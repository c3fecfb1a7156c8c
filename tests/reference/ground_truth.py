"""Independent references for the leave-one-out and prediction tests (binary models).

Nothing here calls package code: Gaussians are formed from dense n x n matrices with
numpy, likelihoods come from ``conftest.reference_lik`` (scipy), and one-dimensional
expectations are adaptive quadrature. The multi-class references are in
``multiclass_reference``.

What each approximation's leave-one-out term means (derived here, checked in
``test_loo_ground_truth``):

* EP, ADF and EP-style cavities: the approximate posterior is N(0, K) times one Gaussian
  site per observation. Leaving observation i out of the *approximation* removes its
  site: the cavity q_-i(f_i) is the f_i-marginal of N(0, K) prod_{j != i} t_j, and the
  LOO term is log int p(y_i | f) q_-i(f) df (Opper & Winther 2000). At EP's fixed point
  the posterior marginal of f_i equals the moments of q_-i(f_i) p(y_i | f_i).
* Laplace (LA-LOO, Vehtari et al. 2016): the Laplace posterior is the same product with
  sites of precision W_i = -d^2 log p / df^2 and natural location W_i f^_i + d log p / df
  at the mode f^ (the Gaussian whose log has the likelihood's gradient and curvature
  there). The LOO term is the likelihood averaged over the cavity without site i.
* Mean field I (ensemble): q(f) = prod_i q_i, q_i(f_i) proportional to p(y_i | f_i) times
  the prior's conditional of f_i given f_-i = E_q f_-i (Csato et al. 2000, eq. 5); that
  conditional is the cavity, and the LOO term averages the likelihood over it.
* Mean field II (naive): the cavity of f_i is N(sum_{j != i} K_ij alpha_j, K_ii) with
  alpha_j = d log Z_j / d c_j at every site (eq. 9).
* n = 1: every cavity above is the prior N(0, K_11), so every LOO term is the exact
  log p(y_1) = log int p(y_1 | f) N(f; 0, K_11) df.
"""

import numpy as np
from scipy import integrate, special

from ..conftest import reference_lik


def gaussian_with_sites(K, tau, nu, drop=None):
    """Mean and covariance of N(0, K) prod_j exp(-tau_j f_j^2 / 2 + nu_j f_j), site ``drop``
    left out: Sigma = (K^-1 + T)^-1 = (I + K T)^-1 K, mean = Sigma nu."""
    tau, nu = np.array(tau, float), np.array(nu, float)
    if drop is not None:
        tau[drop] = nu[drop] = 0.0
    n = len(tau)
    Sigma = np.linalg.solve(np.eye(n) + K * tau[None, :], K)
    Sigma = 0.5 * (Sigma + Sigma.T)
    return Sigma @ nu, Sigma


def cavity(K, tau, nu, i):
    """(mean, variance) of f_i under N(0, K) times every site but i's."""
    mean, Sigma = gaussian_with_sites(K, tau, nu, drop=i)
    return mean[i], Sigma[i, i]


def _breakpoints(lik, m, sd):
    """Where the likelihood has its step or steepest change, in the standardised variable."""
    centre = -lik.params[0] if type(lik).__name__ == "ProbitBias" else 0.0
    return [(centre - m) / sd]


def tilted(lik, y, m, v):
    """log Z, mean and variance of p(y | f) N(f; m, v) by adaptive quadrature in t = (f - m) / sd."""
    p, sd = reference_lik(lik), np.sqrt(v)
    pts = _breakpoints(lik, m, sd)

    def moment(k):
        return integrate.quad(lambda t: p(y, m + sd * t) * (m + sd * t) ** k * np.exp(-0.5 * t * t),
                              -40, 40, points=pts, epsabs=0, epsrel=1e-12, limit=500)[0] / np.sqrt(2 * np.pi)

    z = moment(0)
    mean = moment(1) / z
    return np.log(z), mean, moment(2) / z - mean**2


def log_expected_lik(lik, y, m, v):
    """log int p(y | f) N(f; m, v) df (the LOO term at a cavity N(m, v))."""
    return tilted(lik, y, m, v)[0]


def loo_from_sites(K, y, lik, tau, nu):
    """The LOO term of every observation from Gaussian sites (EP, ADF, LA-LOO)."""
    return np.array([log_expected_lik(lik, y[i], *cavity(K, tau, nu, i)) for i in range(len(y))])


def fitc_dense(Kuu, Kuf, k_diag):
    """The FITC prior covariance Q + diag(k - diag Q), Q = Kfu Kuu^-1 Kuf, formed densely."""
    Q = Kuf.T @ np.linalg.solve(Kuu, Kuf)
    return Q + np.diag(k_diag - np.diag(Q))


# ---------------------------------------------------------------------------------------
# Laplace, written out densely
# ---------------------------------------------------------------------------------------


def log_lik_derivatives(lik, y, f):
    """d log p / df and d^2 log p / df^2 for the smooth likelihoods (standard formulas:
    log Phi(u) has d/du = r and d^2/du^2 = -r (u + r), r = N(u) / Phi(u); log sigmoid(y f)
    has d/df = y sigmoid(-y f) and d^2/df^2 = -sigmoid(f) sigmoid(-f))."""
    name = type(lik).__name__
    if name == "Logistic":
        return y * special.expit(-y * f), -special.expit(f) * special.expit(-f)
    b = lik.params[0] if name == "ProbitBias" else 0.0
    c = lik.params[0] if name == "ProbitNoise" else 1.0
    u = y * (f + b) / c
    r = np.exp(-0.5 * u * u - 0.5 * np.log(2 * np.pi) - special.log_ndtr(u))
    return y * r / c, -r * (u + r) / c**2


def laplace_mode(K, y, lik, iters=200):
    """The mode of log p(y | f) - f^T K^-1 f / 2 by damped Newton on dense matrices, and
    W = -d^2 log p / df^2 and d log p / df there."""
    n = len(y)
    log_p = lambda f: np.sum(np.log(reference_lik(lik)(y, f)))
    psi = lambda f: log_p(f) - 0.5 * f @ np.linalg.solve(K, f)
    f = np.zeros(n)
    for _ in range(iters):
        d1, d2 = log_lik_derivatives(lik, y, f)
        W = -d2
        new = np.linalg.solve(np.eye(n) + K * W[None, :], K @ (W * f + d1))
        step = 1.0
        while psi(f + step * (new - f)) < psi(f) - 1e-14 and step > 1e-6:
            step *= 0.5
        done = np.max(np.abs(new - f)) < 1e-13
        f = f + step * (new - f)
        if done:
            break
    d1, d2 = log_lik_derivatives(lik, y, f)
    return f, -d2, d1


def laplace_loo(K, y, lik):
    """LA-LOO from the dense mode: sites (W, W f^ + g), the likelihood over each cavity."""
    f, W, g = laplace_mode(K, y, lik)
    return loo_from_sites(K, y, lik, W, W * f + g)


# ---------------------------------------------------------------------------------------
# ADF (one online pass, Csato et al. 2000 sec. 5), written as moment matching
# ---------------------------------------------------------------------------------------


def adf_sites(K, y, lik):
    """Include the observations in order: the marginal of f_t under the prior times the
    sites so far is the cavity; the new site makes the Gaussian match the tilted mean and
    variance. Returns (tau, nu, log Z_t)."""
    n = len(y)
    tau, nu, log_z = np.zeros(n), np.zeros(n), np.zeros(n)
    for t in range(n):
        mean, Sigma = gaussian_with_sites(K, tau, nu)
        m, v = mean[t], Sigma[t, t]
        log_z[t], mt, vt = tilted(lik, y[t], m, v)
        tau[t] = 1.0 / vt - 1.0 / v
        nu[t] = mt / vt - m / v
    return tau, nu, log_z
