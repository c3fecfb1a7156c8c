r"""Mean-field approximations for binary GP classification (Csato et al. 2000, sec. 3-4).

Both methods reduce the posterior to one-dimensional "tilted" integrals

.. math::

    Z_i = \int p(y_i \mid a)\, N(a;\ c_i,\ s_i^2)\, da,
    \qquad \alpha_i = \partial \log Z_i / \partial c_i,

which every likelihood provides (``Likelihood.tilted``), so both work with every
likelihood of the package: the paper's noise-free step (``StepLabelNoise(0)``), the
step with label noise, probit, probit with bias or latent noise, and logistic. The
posterior mean of the field is <a(x)> = sum_j K(x, x_j) alpha_j (eq. 3; the paper's
alpha_j y_j is our alpha_j).

**Ensemble learning (mean field I).** q(a) = prod_i q_i(a_i) minimises KL(q || p).
The optimal factor is the likelihood times a Gaussian (eq. 5) with
Lambda_i = [K^{-1}]_ii, s_i^2 = 1/Lambda_i and c_i = m_i - [K^{-1} m]_i / Lambda_i,
m = <a>_q. At the fixed point K^{-1} m = alpha, i.e. m = K alpha and
c = K alpha - alpha / Lambda (eq. 6). The free energy F = E_q log q - E_q log[pi p(D|a)]
evaluated at any q of the form (5) is (eq. 7, re-derived: the printed eq. 7 is garbled)

.. math::

    -F = \sum_i \log Z_i - \tfrac12 \sum_i \log \Lambda_i - \tfrac12 \log|K|
         - \tfrac12 m^T K^{-1} m + \tfrac12 \sum_i \Lambda_i (m_i - c_i)^2
    \le \log p(D),

with m_i = c_i + s_i^2 alpha_i the mean of q_i. It is a lower bound on the log
evidence for any c, converged or not. q is found by coordinate ascent on the
factors (one factor at a time, each an exact minimisation of KL, so F never
increases). F is stationary in q at the fixed point, so its gradient is the explicit
one at fixed q, with S = <a a^T>_q = m m^T + diag(v), v_i the variance of q_i:

.. math::

    \frac{\partial (-F)}{\partial K} = \tfrac12 K^{-1} S K^{-1} - \tfrac12 K^{-1},
    \qquad \frac{\partial (-F)}{\partial \theta} = \sum_i E_{q_i}\Big[
        \frac{\partial \log p(y_i|a_i)}{\partial\theta}\Big]
      = \sum_i \frac{\partial \log Z_i}{\partial \theta}\Big|_{c, s^2}.

**Naive mean field (mean field II).** Eq. (9): the same equations with
s_i^2 = K_ii and c_i = sum_{j != i} K_ij alpha_j. The approximate log evidence,
eq. (10) with its sign re-derived (it must match log p(D) to first order in the
off-diagonal K_ij, which fixes it), is

.. math::

    G(\alpha) = \sum_i \log Z_i(c_i, K_{ii}) - \tfrac12 \alpha^T (K - D) \alpha,
    \qquad D = \mathrm{diag}(K),

not a bound. dG/dalpha = (K - D)(alpha(c) - alpha) vanishes at the fixed point, so
again only explicit derivatives remain: with gamma_i = d^2 log Z_i / dc_i^2 and the
heat equation d log Z / d s^2 = (gamma + alpha^2) / 2,

.. math::

    \frac{\partial G}{\partial K_{ij}} = \tfrac12 \alpha_i \alpha_j \ (i \ne j), \qquad
    \frac{\partial G}{\partial K_{ii}} = \tfrac12 (\gamma_i + \alpha_i^2), \qquad
    \frac{\partial G}{\partial \theta} = \sum_i \frac{\partial \log Z_i}{\partial\theta}.

**Predictive variance.** The paper gives predictive means only. For class
probabilities the result carries the Gaussian N(K alpha, (K^{-1} + W)^{-1}) with
site precisions w_i = -gamma_i / (1 + gamma_i s_i^2) (the precision that turns the
mean-field cavity into the tilted variance, as in EP), clipped at 0 for
non-log-concave likelihoods. This is a heuristic of this package, not of the paper.
``var`` in the result is the variance of the tilted marginal q_i.
"""

from dataclasses import dataclass

import numpy as np
from numba import njit

from . import lapack
from .ep import _Anderson
from .posterior import chol_lower, inv_lower, latent_posterior
from .result import ApproximationResult
from .validation import as_signed_labels, check_kernel_matrix

VARIANTS = ("ensemble", "naive")


@dataclass
class MeanFieldState:
    """The fixed-point variables: m = <a>_q (ensemble) or alpha (naive)."""

    variant: str
    x: np.ndarray

    def copy(self):
        return MeanFieldState(self.variant, self.x.copy())


_sweeps = {}


def _sweeps_for(tilted_kernel):
    """Compile (once per likelihood) the coordinate sweeps of both variants."""
    if tilted_kernel in _sweeps:
        return _sweeps[tilted_kernel]

    @njit(nogil=True)
    def ensemble_sweep(Kinv, m, r, y, th, damping):
        """One pass of eq. (5)-(6) over the factors; r = K^{-1} m is kept up to date."""
        n = y.shape[0]
        change = 0.0
        for i in range(n):
            s2 = 1.0 / Kinv[i, i]
            c = m[i] - r[i] * s2
            _, alpha, _, _ = tilted_kernel(y[i], c, s2, th)
            d = damping * (c + s2 * alpha - m[i])
            change = max(change, abs(d) / np.sqrt(s2))
            for j in range(n):
                r[j] += Kinv[j, i] * d
            m[i] += d
        return change

    @njit(nogil=True)
    def naive_sweep(K, alpha, c, y, th, damping):
        """One pass of eq. (9); c_j = sum_{i != j} K_ji alpha_i is kept up to date."""
        n = y.shape[0]
        change = 0.0
        for i in range(n):
            s2 = K[i, i]
            _, g, _, _ = tilted_kernel(y[i], c[i], s2, th)
            d = damping * (g - alpha[i])
            change = max(change, abs(d) * np.sqrt(s2))
            for j in range(n):
                c[j] += K[j, i] * d
            c[i] -= s2 * d
            alpha[i] += d
        return change

    _sweeps[tilted_kernel] = (ensemble_sweep, naive_sweep)
    return _sweeps[tilted_kernel]


def _inverse_and_logdet(K):
    """K^{-1} (dpotrf, dtrtri, dlauum) and log|K|."""
    L = chol_lower(K)
    Kinv = inv_lower(L)
    info = lapack.lauum_lower(Kinv)  # K^{-1} = L^{-T} L^{-1}
    if info != 0:
        raise ValueError(f"dlauum failed (LAPACK info={info})")
    return np.ascontiguousarray(Kinv), 2.0 * float(np.sum(np.log(np.diag(L))))


def _site_precisions(gamma, s2):
    """w_i = -gamma_i / (1 + gamma_i s2_i), clipped at 0 (module docstring)."""
    w = -gamma / np.maximum(1.0 + gamma * s2, 1e-300)
    return np.maximum(w, 0.0)


def meanfield(
    K,
    y,
    likelihood,
    params=None,
    *,
    variant="ensemble",
    state=None,
    damping=1.0,
    tol=1e-10,
    max_sweeps=2000,
    with_grad=True,
):
    """Solve the mean-field equations and return the free energy, its gradient, posterior.

    Parameters
    ----------
    K, y, likelihood, params : as for ``pymc_gpc.ep``.
    variant : "ensemble" (mean field I, eq. 5-7: log_z is a lower bound on log p(D))
        or "naive" (mean field II, eq. 9-10: an approximation, not a bound).
    state : a ``MeanFieldState`` of the same variant to warm-start from.
    damping : step fraction in (0, 1] of each coordinate update.
    tol : convergence threshold on the largest scaled change in a sweep.
    max_sweeps : sweep limit; if reached, ``converged=False``.
    with_grad : compute ``dlog_z_dK`` and ``dlog_z_dparams``.

    ``log_z`` is minus the free energy, -F (eq. 7) or -F_naive (eq. 10).
    """
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    if not 0.0 < damping <= 1.0:
        raise ValueError(f"damping must be in (0, 1], got {damping}")
    y = as_signed_labels(y, require_both=False)
    n = y.shape[0]
    K = np.ascontiguousarray(check_kernel_matrix(K, n))
    th = likelihood.check_params(likelihood._th(params))
    x = np.zeros(n)
    if state is not None and state.variant == variant:
        x = np.array(state.x, dtype=float)
        if x.shape != (n,):
            raise ValueError(f"warm-start state has {x.shape[0]} entries, data has {n}")
    solve = _ensemble if variant == "ensemble" else _naive
    return solve(K, y, likelihood, th, x, damping, tol, max_sweeps, with_grad)


def _iterate(sweep, x, aux, coupling, recompute, y, th, damping, tol, max_sweeps, memory=5):
    """Coordinate sweeps x <- G(x), Anderson-accelerated (``ep._Anderson``).

    ``aux`` (K^{-1} m or (K - D) alpha) is updated by the sweep and
    recomputed (``recompute(x)``) after an extrapolated step. The acceleration restarts when the change
    grows 1000-fold; it does not move the fixed point.
    """
    aa = _Anderson(memory)
    change, best, sweeps = np.inf, np.inf, 0
    while sweeps < max_sweeps:
        x_old = x.copy()
        change = sweep(coupling, x, aux, y, th, damping)
        sweeps += 1
        if not change >= tol:  # converged, or NaN (reported as not converged)
            break
        if change > 1e3 * best:
            aa.reset()
        best = min(best, change)
        x[:] = aa.step(x.copy(), x - x_old)
        aux[:] = recompute(x)
    return sweeps, change


def _ensemble(K, y, likelihood, th, m, damping, tol, max_sweeps, with_grad):
    Kinv, logdet_K = _inverse_and_logdet(K)
    r = Kinv @ m
    sweep = _sweeps_for(likelihood._kernels[0])[0]
    sweeps, change = _iterate(sweep, m, r, Kinv, lambda x: Kinv @ x, y, th, damping, tol, max_sweeps)

    lam = np.diag(Kinv).copy()
    s2 = 1.0 / lam
    r = Kinv @ m
    c = m - r * s2
    t = likelihood.tilted(y, c, s2, th)
    m = c + s2 * t.dlog_z  # the mean of q_i at these cavities: -F below is exact for this q
    v = s2 + s2 * s2 * t.d2log_z
    r = Kinv @ m
    log_z = float(
        np.sum(t.log_z) - 0.5 * np.sum(np.log(lam)) - 0.5 * logdet_K
        - 0.5 * m @ r + 0.5 * np.sum(lam * (m - c) ** 2)
    )
    dK = dth = None
    if with_grad:
        dK = 0.5 * np.outer(r, r) + 0.5 * (Kinv * v[None, :]) @ Kinv - 0.5 * Kinv
        dK = 0.5 * (dK + dK.T)
        dth = t.dlog_z_dparams.sum(axis=0)
    return _result("meanfield-ensemble", K, t, s2, m, v, log_z, dK, dth, sweeps, change, tol,
                   MeanFieldState("ensemble", m.copy()))


def _naive(K, y, likelihood, th, alpha, damping, tol, max_sweeps, with_grad):
    kd = np.diag(K).copy()
    c = K @ alpha - kd * alpha
    sweep = _sweeps_for(likelihood._kernels[0])[1]
    sweeps, change = _iterate(sweep, alpha, c, K, lambda x: K @ x - kd * x, y, th, damping, tol, max_sweeps)

    c = K @ alpha - kd * alpha
    t = likelihood.tilted(y, c, kd, th)
    log_z = float(np.sum(t.log_z) - 0.5 * alpha @ c)
    dK = dth = None
    if with_grad:
        g = t.dlog_z
        dK = 0.5 * (np.outer(g, alpha) + np.outer(alpha, g) - np.outer(alpha, alpha))
        dK[np.diag_indices(len(g))] = 0.5 * (t.d2log_z + g * g)
        dth = t.dlog_z_dparams.sum(axis=0)
    v = kd + kd * kd * t.d2log_z
    state = MeanFieldState("naive", alpha.copy())
    return _result("meanfield-naive", K, t, kd, K @ t.dlog_z, v, log_z, dK, dth, sweeps, change, tol,
                   state)


def _result(method, K, tilted, s2, mean, var, log_z, dK, dth, sweeps, change, tol, state):
    post = latent_posterior(K, _site_precisions(tilted.d2log_z, s2))
    return ApproximationResult(
        method=method,
        log_z=log_z,
        dlog_z_dK=dK,
        dlog_z_dparams=dth,
        a=tilted.dlog_z.copy(),
        posterior=post,
        mean=mean,
        var=var,
        state=state,
        n_iter=sweeps,
        converged=bool(change < tol),
        max_change=float(change),
        loo_log_p=tilted.log_z.copy(),
    )
