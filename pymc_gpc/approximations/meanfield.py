r"""Mean-field approximations for binary GP classification (Csato et al. 2000, sec. 3-4).

Both methods reduce the posterior to one-dimensional tilted integrals

.. math::

    Z_i = \int p(y_i \mid a)\, N(a;\ c_i,\ s_i^2)\, da,
    \qquad \alpha_i = \partial \log Z_i / \partial c_i,

which every likelihood provides (``Likelihood.tilted``), so both serve every binary
likelihood. The posterior mean is <a(x)> = sum_j K(x, x_j) alpha_j (eq. 3; the paper's
alpha_j y_j is our alpha_j).

**Ensemble learning (mean field I).** q(a) = prod_i q_i(a_i) minimises KL(q || p); the
optimal factor (eq. 5) has Lambda_i = [K^{-1}]_ii, s_i^2 = 1/Lambda_i and, at the fixed
point m = K alpha, c = K alpha - alpha / Lambda (eq. 6). The free energy (eq. 7,
re-derived: the printed one is garbled), with m_i = c_i + s_i^2 alpha_i,

.. math::

    -F = \sum_i \log Z_i - \tfrac12 \sum_i \log \Lambda_i - \tfrac12 \log|K|
         - \tfrac12 m^T K^{-1} m + \tfrac12 \sum_i \Lambda_i (m_i - c_i)^2
    \le \log p(D),

is a lower bound for any c. It holds -KL0, KL0 = KL(prod_i N(0, 1/Lambda_i) || N(0, K)),
which depends on K alone and grows without bound as K nears singularity: K must be
strictly positive definite, and with a nearly singular K the bound is valid but loose.
As s_i^2 -> 0 the fixed point becomes Laplace's mode.

The fixed point alpha = alpha(c), c = (K - diag(s^2)) alpha, is the naive equations (9)
with K_ii replaced by 1/Lambda_i; both variants are solved by Newton's method on alpha
(``_newton``). F is stationary in q there, so its gradient is the explicit one, with
S = <a a^T>_q = m m^T + diag(v):

.. math::

    \frac{\partial (-F)}{\partial K} = \tfrac12 K^{-1} S K^{-1} - \tfrac12 K^{-1},
    \qquad \frac{\partial (-F)}{\partial \theta}
      = \sum_i \frac{\partial \log Z_i}{\partial \theta}\Big|_{c, s^2}.

**Naive mean field (mean field II).** Eq. (9): s_i^2 = K_ii, c_i = sum_{j != i} K_ij alpha_j,
and the approximate log evidence (eq. 10, its sign re-derived), not a bound:

.. math::

    G(\alpha) = \sum_i \log Z_i(c_i, K_{ii}) - \tfrac12 \alpha^T (K - D) \alpha,
    \qquad D = \mathrm{diag}(K).

dG/dalpha vanishes at the fixed point; with gamma_i = d^2 log Z_i / dc_i^2 and
d log Z / d s^2 = (gamma + alpha^2) / 2,

.. math::

    \frac{\partial G}{\partial K_{ij}} = \tfrac12 \alpha_i \alpha_j \ (i \ne j), \qquad
    \frac{\partial G}{\partial K_{ii}} = \tfrac12 (\gamma_i + \alpha_i^2), \qquad
    \frac{\partial G}{\partial \theta} = \sum_i \frac{\partial \log Z_i}{\partial\theta}.

**Predictive variance** (this package's heuristic; the paper gives means only): the
Gaussian N(K alpha, (K^{-1} + W)^{-1}) with w_i = -gamma_i / (1 + gamma_i s_i^2), clipped at
0. ``var`` in the result is the variance of the tilted marginal q_i.
"""

from dataclasses import dataclass

import numpy as np
import scipy.optimize
from ..numerics import lapack
from ..structures.dense import chol_lower, inv_lower, latent_posterior
from .ep import checked_dense_inputs
from .result import ApproximationResult, WarmStartMismatch

VARIANTS = ("ensemble", "naive")
# ``_newton`` accepts a residual above ``tol`` at its rounding floor only below FLOOR_CAP tol:
# where the floor is larger still (|gamma| near 1/eps) the fixed point means nothing in double
# precision. The largest accepted in the fuzz (``benchmarks/results/fuzz.md``) was 2e5 tol.
FLOOR_CAP = 1e6


@dataclass
class MeanFieldState:
    """The fixed-point variables alpha (both variants): pass back in to warm-start.

    Examples
    --------
    >>> res = pymc_gpc.meanfield(K, y, Probit())                    # doctest: +SKIP
    >>> res2 = pymc_gpc.meanfield(K2, y, Probit(), state=res.state)  # doctest: +SKIP
    """

    alpha: np.ndarray

    def copy(self):
        return MeanFieldState(self.alpha.copy())


def _newton(K, s2, y, likelihood, th, alpha, tol, max_iter):
    """Solve alpha = alpha(c), c = (K - diag(s2)) alpha, by Newton's method.

    s2 = 1/[K^{-1}]_ii (ensemble) or K_ii (naive). With A = K - diag(s2) the residual
    R = alpha(A alpha) - alpha has Jacobian diag(gamma) A - I. A backtracking line search
    halves the step until the 2-norm or the max-norm of R * sqrt(diag K) decreases; where the
    Newton direction fails (likelihoods that are not log-concave) the plain step d = R is
    tried. Converged when every |R_i| sqrt(K_ii) is below ``tol`` or below its rounding floor
    at alpha (``_rounding_floor``; this never accepts a residual of ``FLOOR_CAP`` tol or
    more); returns (alpha, steps, max_i |R_i| sqrt(K_ii), converged).
    """
    A = K - np.diag(s2)
    abs_A = np.abs(A)
    scale = np.sqrt(np.diag(K))

    def residual(a):
        t = likelihood.tilted(y, A @ a, s2, th)
        r = t.dlog_z - a
        return t, r, (float(np.linalg.norm(r * scale)), float(np.max(np.abs(r) * scale)))

    def converged(a, t, r, change):
        if change < tol:
            return True
        if not change < FLOOR_CAP * tol:
            return False
        return bool(np.all(np.abs(r) * scale < np.maximum(tol, _rounding_floor(abs_A, a, t.d2log_z, scale))))

    t, r, merit = residual(alpha)
    change = merit[1]
    it = 0
    while it < max_iter and not converged(alpha, t, r, change):
        it += 1
        J = -t.d2log_z[:, None] * A
        J[np.diag_indices_from(J)] += 1.0
        try:
            directions = [np.linalg.solve(J, r), r]
        except np.linalg.LinAlgError:
            directions = [r]
        for d in directions:
            step = 1.0
            for _ in range(40):
                t_try, r_try, m_try = residual(alpha + step * d)
                if m_try[0] < merit[0] or m_try[1] < merit[1]:
                    break
                step *= 0.5
            else:
                continue
            break
        else:
            break  # no decrease along either direction: report non-convergence
        alpha, t, r, merit = alpha + step * d, t_try, r_try, m_try
        change = merit[1]
    return alpha, it, change, converged(alpha, t, r, change)


def _rounding_floor(abs_A, alpha, gamma, scale):
    """Per site i, the change in |R_i| sqrt(K_ii) that a relative change of eps (machine
    epsilon, twice the unit roundoff) in the entries of alpha makes, to first order: it moves
    c = A alpha by up to eps (|A| |alpha|) and so R_i = alpha_i(c) - alpha_i by up to
    eps (|gamma_i| (|A| |alpha|)_i + |alpha_i|), gamma = d alpha / dc. No iterate in double
    precision resolves R_i below this (the rounding of the n-term sums in c adds errors of
    the same order, and up to n times more at worst). Above ``tol`` where K is
    ill-conditioned or large and the likelihood steep at small s2 (the step likelihood near a
    step: |gamma| of 1e4 and more); there Newton's iterates wander at this level. ``abs_A``
    is |A|."""
    eps = np.finfo(float).eps
    return eps * scale * (np.abs(gamma) * (abs_A @ np.abs(alpha)) + np.abs(alpha))


def _free_energy_ascent(Kinv, s2, y, likelihood, th, c, max_iter):
    """alpha(c) at a maximum of -F over the cavity means c, by L-BFGS-B from ``c`` (at most
    10 ``max_iter`` iterations): for a likelihood that is not log-concave, where ``_newton``
    stalls at a local minimum of its residual's norm rather than a root (the step likelihood
    with label noise near epsilon = 0.5), the fixed point is a stationary point of
    -F (eq. 7), which is bounded above by log p(D). With m = c + s2 alpha(c) and
    gamma = d alpha / dc, the c-dependent part of -F (module docstring, Lambda s2^2 = s2) is
    sum_i log Z_i - m^T K^{-1} m / 2 + sum_i s2_i alpha_i^2 / 2, with gradient
    (1 + s2 gamma) (alpha - K^{-1} m): zero where m = K alpha, the fixed point (where
    1 + s2_i gamma_i != 0). The caller's Newton iteration then polishes alpha(c)."""
    def negative(c):
        t = likelihood.tilted(y, c, s2, th)
        m = c + s2 * t.dlog_z
        r = Kinv @ m
        value = np.sum(t.log_z) - 0.5 * m @ r + 0.5 * np.sum(s2 * t.dlog_z ** 2)
        grad = (1.0 + s2 * t.d2log_z) * (t.dlog_z - r)
        if not (np.isfinite(value) and np.all(np.isfinite(grad))):
            return np.inf, np.zeros_like(c)
        return -value, -grad

    res = scipy.optimize.minimize(negative, c, jac=True, method="L-BFGS-B",
                                  options={"maxiter": 10 * max_iter, "ftol": 1e-15, "gtol": 1e-12})
    return likelihood.tilted(y, res.x, s2, th).dlog_z


def _inverse_and_logdet(K):
    """K^{-1} (dpotrf, the blocked triangular inverse, dlauum) and log|K|."""
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
    tol=1e-10,
    max_iter=100,
    with_grad=True,
    with_loo=True,
):
    """Solve the mean-field equations and return the free energy, its gradient, posterior.

    Parameters
    ----------
    K, y, likelihood, params : as for ``pymc_gpc.ep``.
    variant : "ensemble" (mean field I, eq. 5-7: log_z is a lower bound on log p(D))
        or "naive" (mean field II, eq. 9-10: an approximation, not a bound).
    state : a ``MeanFieldState`` to warm-start from (either variant's alpha).
    tol : convergence threshold on ``max_i |alpha_i(c) - alpha_i| sqrt(K_ii)``; where the
        rounding of double precision alone keeps that residual above ``tol`` (an
        ill-conditioned K with a steep likelihood), the residual's rounding floor instead
        (``_rounding_floor``; ``max_change`` reports the residual reached).
    max_iter : Newton iteration limit; if reached, ``converged=False``.
    with_grad : compute ``dlog_z_dK`` and ``dlog_z_dparams``.
    with_loo : return ``loo_log_p`` (free here; None otherwise).

    Returns
    -------
    ApproximationResult
        With ``log_z`` minus the free energy, -F (eq. 7) or -F_naive (eq. 10), its exact
        gradient, the posterior and the ``MeanFieldState``.

    Examples
    --------
    >>> import numpy as np, pymc_gpc
    >>> from pymc_gpc.likelihoods import Probit
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(50, 2))
    >>> y = np.where(X[:, 0] > 0, 1, -1)
    >>> K = np.exp(-0.5 * ((X[:, None] - X[None]) ** 2).sum(-1))
    >>> res = pymc_gpc.meanfield(2.0 * K, y, Probit(), variant="ensemble")
    >>> bool(res.log_z <= pymc_gpc.ep(2.0 * K, y, Probit()).log_z + 1e-9)  # a lower bound, below EP here
    True
    """
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    K, y, th = checked_dense_inputs(K, y, likelihood, params)
    n = y.shape[0]
    alpha = np.zeros(n) if state is None else np.array(state.alpha, dtype=float)
    if alpha.shape != (n,):
        raise WarmStartMismatch(f"warm-start state has {alpha.shape[0]} entries, data has {n}")
    solve = _ensemble if variant == "ensemble" else _naive
    result = solve(K, y, likelihood, th, alpha, tol, max_iter, with_grad)
    if not with_loo:
        result.loo_log_p = None
    return result


def _ensemble(K, y, likelihood, th, alpha, tol, max_iter, with_grad):
    Kinv, logdet_K = _inverse_and_logdet(K)
    lam = np.diag(Kinv).copy()
    s2 = 1.0 / lam
    alpha, sweeps, change, converged = _newton(K, s2, y, likelihood, th, alpha, tol, max_iter)
    if not converged and max_iter > 0 and not likelihood.log_concave:
        # Newton stalled on a likelihood that is not log-concave (its non-converged runs are rejected)
        alpha = _free_energy_ascent(Kinv, s2, y, likelihood, th, K @ alpha - s2 * alpha, max_iter)
        alpha, more, change, converged = _newton(K, s2, y, likelihood, th, alpha, tol, max_iter)
        sweeps += more

    c = K @ alpha - s2 * alpha
    t = likelihood.tilted(y, c, s2, th)
    # q is eq. (5) at these cavities, whatever alpha: -F below is exact for this q.
    # Its mean m = c + s2 alpha(c) = K alpha + s2 (alpha(c) - alpha); K^{-1} m without
    # the rounding of K^{-1} K alpha:
    m = c + s2 * t.dlog_z
    r = alpha + Kinv @ (s2 * (t.dlog_z - alpha))
    v = s2 + s2 * s2 * t.d2log_z
    log_z = float(
        np.sum(t.log_z) - 0.5 * np.sum(np.log(lam)) - 0.5 * logdet_K
        - 0.5 * m @ r + 0.5 * np.sum(lam * (m - c) ** 2)
    )
    dK = dth = None
    if with_grad:
        dK = 0.5 * np.outer(r, r) + 0.5 * (Kinv * v[None, :]) @ Kinv - 0.5 * Kinv
        dK = 0.5 * (dK + dK.T)
        dth = t.dlog_z_dparams.sum(axis=0)
    return _result("meanfield-ensemble", K, t, s2, m, v, log_z, dK, dth, sweeps, change, converged,
                   MeanFieldState(alpha.copy()))


def _naive(K, y, likelihood, th, alpha, tol, max_iter, with_grad):
    kd = np.diag(K).copy()
    alpha, sweeps, change, converged = _newton(K, kd, y, likelihood, th, alpha, tol, max_iter)

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
    state = MeanFieldState(alpha.copy())
    return _result("meanfield-naive", K, t, kd, K @ t.dlog_z, v, log_z, dK, dth, sweeps, change, converged,
                   state)


def _result(method, K, tilted, s2, mean, var, log_z, dK, dth, sweeps, change, converged, state):
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
        converged=bool(converged),
        max_change=float(change),
        loo_log_p=tilted.log_z.copy(),
    )
