r"""Expectation Propagation for binary GP classification (Minka 2001; R&W sec. 3.6).

Site i is a Gaussian factor with natural parameters (tau_i, nu_i); the posterior
is q(f) ∝ N(f; 0, K) prod_i exp(-tau_i f_i^2 / 2 + nu_i f_i). One update of site i
(R&W eqs. 3.56-3.59 in the form of GPML's infEP):

* cavity:  tau_-i = 1/Sigma_ii - tau_i,  nu_-i = mu_i/Sigma_ii - nu_i;
* tilted moments at the cavity from the likelihood: log Z_i, alpha = d log Z_i/d mu,
  gamma = d^2 log Z_i / d mu^2;
* new site:  tau_i = -gamma / (1 + gamma/tau_-i),
  nu_i = (alpha - gamma nu_-i/tau_-i) / (1 + gamma/tau_-i).

Negative site precisions (possible only for likelihoods that are not log-concave,
here the step likelihood with label noise) are kept, so the fixed point and the
gradient below stay exact; q(f) is then represented through chol(K)
(``structures.dense.IndefiniteSitePosterior``). If an update would make K^{-1} + S
indefinite, it is halved towards the previous sites, and after 20 halvings the
negative precisions are clipped to zero as in GPML.

Two schedules:

``parallel``: all sites from the same posterior, then the posterior is recomputed.
  One sweep costs one Cholesky and one triangular inverse (2n^3/3 flops, see
  ``structures/dense.py``); the iteration is Anderson-accelerated (``Anderson``).
``sequential``: sites one at a time with rank-one updates of Sigma (R&W Alg. 3.5),
  compiled with numba; Sigma is recomputed from scratch after every sweep.

At the fixed point, with b = (K + S~^{-1})^{-1} mu~ and R = (K + S~^{-1})^{-1}
(R&W eq. 5.27, Seeger 2005):

.. math::

    \frac{\partial \log Z_{EP}}{\partial K} = \tfrac12 (b b^T - R), \qquad
    \frac{\partial \log Z_{EP}}{\partial \theta} = \sum_i
        \frac{\partial \log Z_i}{\partial \theta}\Big|_{\text{cavity fixed}}.
"""

from dataclasses import dataclass, field

import numpy as np
from numba import njit

from ..likelihoods.base import tilted_dparams_sum, tilted_site
from ..numerics import plain
from ..structures import DensePrior, is_structure
from ..structures.dense import (
    IndefiniteSitePosterior,
    LatentPosterior,
    NotPositiveDefiniteError,
    factors,
    latent_posterior,
    marginal_variances,
    outer_minus_R,
    weights_from_inverse,
)
from .result import ApproximationResult, WarmStartMismatch
from ..validation import as_signed_labels, check_kernel_matrix

# Columns kept by the Anderson acceleration of parallel EP.
ANDERSON_MEMORY = 5
# Cavity precision floor, relative to the posterior precision 1/Sigma_ii, for sites
# of mixed sign (see ``cavity_precision``).
_MIN_CAVITY_FRACTION = 1e-10


def cavity_precision(var, tau, prior_var):
    """1/Sigma_ii - tau_i, kept away from zero where rounding would make it vanish.

    With all site precisions >= 0 the cavity is the prior times non-negative
    Gaussian factors, so its variance cannot exceed the prior variance K_ii: that
    bound is the floor. With negative sites only positivity is known.
    """
    floor = 1.0 / prior_var if np.min(tau) >= 0.0 else _MIN_CAVITY_FRACTION / var
    return np.maximum(1.0 / var - tau, floor)


@dataclass
class EPState:
    """Site natural parameters, the whole state of EP: pass back in to warm-start.

    A converged parallel solve's state holds the sites of its last sweep's map, one sweep
    nearer the fixed point than the sites of the returned posterior (within ``tol`` of them):
    the better warm start, as a trajectory's warm starts extrapolate the stored states and
    with them their error (``ops.warm_start.WarmStarts``).

    ``first_change``: the site change of the first sweep of the solve that produced the state
    (inf where unknown), a warm start's forecast of its own first sweep's change (``_rough_allowed``).

    Examples
    --------
    >>> res = pymc_gpc.ep(K, y, Probit())                    # doctest: +SKIP
    >>> res2 = pymc_gpc.ep(K2, y, Probit(), state=res.state)  # doctest: +SKIP
    """

    tau: np.ndarray
    nu: np.ndarray
    first_change: float = field(default=np.inf, metadata={"extrapolate": False})  # kept as is by warm starts

    def copy(self):
        return EPState(self.tau.copy(), self.nu.copy(), self.first_change)


@njit(nogil=True, cache=True)
def _cavity_floor(tau_min, prior_var_i, var_i):
    """The floor of ``cavity_precision`` at one site (tau_min: the smallest site precision)."""
    return 1.0 / prior_var_i if tau_min >= 0.0 else _MIN_CAVITY_FRACTION / var_i


@njit(nogil=True, cache=True)
def _update_site(kind, y_i, mean_i, var_i, tau_i, nu_i, floor, th, damping):
    """One site's cavity, tilted moments and damped new site (module docstring).

    Returns (tau_new, nu_new, change, tau_c, nu_c, log Z_i, d/dmu, d^2/dmu^2, d/dtheta),
    with the scale-free change max(|d tau| Sigma_ii, |d nu| sqrt(Sigma_ii)).
    """
    tau_c = max(1.0 / var_i - tau_i, floor)
    nu_c = mean_i / var_i - nu_i
    lz, alpha, gamma, dth = tilted_site(kind, y_i, nu_c / tau_c, 1.0 / tau_c, th)
    denom = 1.0 + gamma / tau_c
    tau_new = damping * (-gamma / denom) + (1.0 - damping) * tau_i
    nu_new = damping * ((alpha - gamma * nu_c / tau_c) / denom) + (1.0 - damping) * nu_i
    change = max(abs(tau_new - tau_i) * var_i, abs(nu_new - nu_i) * np.sqrt(var_i))
    return tau_new, nu_new, change, tau_c, nu_c, lz, alpha, gamma, dth


@njit(nogil=True, cache=True)
def parallel_site_update(kind, y, th, var, mean, tau, nu, prior_var, damping):
    """All sites updated from the same marginals (one parallel EP step).

    Returns (tau_g, nu_g, change, tau_c, nu_c, tilted), tilted with rows log Z,
    d/dmu, d^2/dmu^2, d/dtheta; change is NaN if any site's is not finite.
    """
    n = y.shape[0]
    tau_g, nu_g, tau_c, nu_c = np.empty(n), np.empty(n), np.empty(n), np.empty(n)
    tilted = np.empty((4, n))
    tau_min = tau.min()
    change, finite = 0.0, True
    for i in range(n):
        floor = _cavity_floor(tau_min, prior_var[i], var[i])
        (tau_g[i], nu_g[i], d, tau_c[i], nu_c[i],
         tilted[0, i], tilted[1, i], tilted[2, i], tilted[3, i]) = _update_site(
            kind, y[i], mean[i], var[i], tau[i], nu[i], floor, th, damping)
        finite = finite and np.isfinite(d)  # max() skips NaN
        change = max(change, d)
    return tau_g, nu_g, change if finite else np.nan, tau_c, nu_c, tilted


def _cavities(post, tau, nu, prior=None):
    """Posterior marginals and cavity natural parameters at every site (prior: the
    structure of ``post``; a dense ``post.K`` if not given)."""
    prior = DensePrior(post.K) if prior is None else prior
    var = post.var_diag()
    mean, b = post.mean_and_weights(nu)
    tau_c = cavity_precision(var, tau, prior.diag())
    nu_c = mean / var - nu
    return var, mean, b, tau_c, nu_c


def ep_log_z(post, tau, nu, mean, tau_c, nu_c, log_z_sites):
    """log Z_EP in the stable form of GPML infEP (R&W eq. 3.65 with B = L L^T)."""
    return float(stable_log_z(post.half_logdet_B(), tau, nu, mean, tau_c, nu_c, log_z_sites))


@njit(nogil=True, cache=True)
def _factored_log_z(L, tau, nu, mean, tau_c, nu_c, log_z_sites):
    """``ep_log_z`` with (1/2) log|B| = sum log L_ii from the lower Cholesky factor L of B."""
    half_logdet_B = 0.0
    for i in range(L.shape[0]):
        half_logdet_B += np.log(L[i, i])
    return stable_log_z(half_logdet_B, tau, nu, mean, tau_c, nu_c, log_z_sites)


@njit(nogil=True, cache=True)
def stable_log_z(half_logdet_B, tau, nu, mean, tau_c, nu_c, log_z_sites):
    """``ep_log_z`` given (1/2) log|B|: one compiled pass over the sites."""
    total = -half_logdet_B
    for i in range(tau.shape[0]):
        s = tau[i] + tau_c[i]
        total += (log_z_sites[i] + 0.5 * nu[i] * mean[i]
                  + 0.5 * nu_c[i] * (tau[i] / tau_c[i] * nu_c[i] - 2.0 * nu[i]) / s
                  - 0.5 * nu[i] ** 2 / s + 0.5 * np.log1p(tau[i] / tau_c[i]))
    return total


@njit(nogil=True, cache=True)
def _sequential_sweep(kind, Sigma, mu, tau, nu, y, th, damping, prior_var):
    """One sequential EP sweep over the sites of likelihood ``kind``, in place; returns the site change."""
    n = y.shape[0]
    change = 0.0
    for i in range(n):
        s_ii = max(Sigma[i, i], 1e-300)
        floor = _cavity_floor(tau.min(), prior_var[i], s_ii)
        tau_new, nu_new, d, _, _, _, _, _, _ = _update_site(
            kind, y[i], mu[i], s_ii, tau[i], nu[i], floor, th, damping)
        change = max(change, d) if np.isfinite(d) else np.inf  # max() would skip a NaN
        # s = Sigma[:, i]: the posterior moves along it (mu = Sigma nu)
        _rank_one_site_update(tau_new - tau[i], nu_new - nu[i], s_ii, mu[i], Sigma[:, i].copy(), mu, Sigma, n)
        tau[i] = tau_new
        nu[i] = nu_new
    return change


@njit(nogil=True, cache=True)
def _rank_one_site_update(d_tau, d_nu, var_i, mean_i, s, v, M, m):
    """The Gaussian after one site changes by (d tau, d nu), along s (``adf`` module docstring):

    v <- v + s [d nu (1 - c var_i) - c mean_i],  M <- M - c s s^T,  c = d tau / (1 + d tau var_i),

    over the leading m entries; (v, M) is (mu, Sigma) in sequential EP, (alpha, C) in ADF.
    """
    c = d_tau / (1.0 + d_tau * var_i)
    shift = d_nu * (1.0 - c * var_i) - c * mean_i
    for j in range(m):
        v[j] += s[j] * shift
        cj = c * s[j]
        for k in range(m):
            M[j, k] -= cj * s[k]


def ep(
    K,
    y,
    likelihood,
    params=None,
    *,
    state=None,
    method="parallel",
    damping=1.0,
    tol=1e-8,
    max_sweeps=300,
    with_grad=True,
    with_loo=True,
):
    """Run EP to convergence and return the evidence, its gradient and the posterior.

    Parameters
    ----------
    K : (n, n) symmetric positive semi-definite prior covariance of f, or a prior
        structure (``pymc_gpc.structures``, e.g. ``FITCPrior``): the same parallel EP
        then runs on it, and ``dlog_z_dK`` is the structure's gradient (for FITC a
        ``FITCGradient``, the derivatives in K_uu, K_uf and diag K_ff).
    y : (n,) labels: {-1, +1}, {0, 1}, booleans or two strings; for an ordinal likelihood
        integers 0..K-1 (checked: ``likelihood.check_labels``).
    likelihood : a ``pymc_gpc.likelihoods.Likelihood``.
    params : likelihood parameters overriding ``likelihood.params``.
    state : an ``EPState`` to warm-start from (e.g. the previous result's ``state``);
        it is not modified. A state whose sites make K^-1 + S indefinite at this K is
        ignored (cold start).
    method : "parallel" (default, fastest for n >~ 100) or "sequential" (dense K only).
    damping : initial damping in (0, 1]; 1 is undamped.
    tol : convergence threshold on the scale-free site change. At tol >= 1e-3 sweeps
        predicted not to be the last run in single precision (``_rough_allowed``); the result
        is exact but for a FITC gradient's rounded products (``FITCPosterior.kernel_gradient``).
    max_sweeps : sweep limit; if reached, the result has ``converged=False``.
    with_grad : compute ``dlog_z_dK`` and ``dlog_z_dparams``.
    with_loo : return ``loo_log_p`` (free here: the tilted normalisers; None otherwise,
        as every solver does).

    Returns
    -------
    ApproximationResult
        ``log_z`` (R&W eq. 3.65), ``dlog_z_dK`` = (b b^T - (K + S~^-1)^-1) / 2 with
        b = (K + S~^-1)^-1 mu~ (the gradient at the fixed point), ``dlog_z_dparams`` (the sum
        of d log Z_i / d theta at fixed cavities), the posterior, ``loo_log_p`` and the
        ``EPState`` for a warm start.

    Raises
    ------
    ValueError
        For bad inputs (non-finite or non-symmetric K, labels, mismatched sizes), an
        unknown ``method``, ``damping`` outside (0, 1], or a warm-start state of the wrong size.

    Examples
    --------
    >>> import numpy as np, pymc_gpc
    >>> from pymc_gpc.likelihoods import Probit
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(50, 2))
    >>> y = np.where(X[:, 0] > 0, 1, -1)
    >>> K = np.exp(-0.5 * ((X[:, None] - X[None]) ** 2).sum(-1))
    >>> res = pymc_gpc.ep(2.0 * K, y, Probit())
    >>> res.converged
    True
    >>> warm = pymc_gpc.ep(2.04 * K, y, Probit(), state=res.state)  # fewer sweeps
    """
    if method not in ("parallel", "sequential"):
        raise ValueError(f"method must be 'parallel' or 'sequential', got {method!r}")
    if not 0.0 < damping <= 1.0:
        raise ValueError(f"damping must be in (0, 1], got {damping}")
    prior, y, th = checked_inputs(K, y, likelihood, params)
    y, th = plain(y), plain(th)  # PyTensor's constants are read-only: one compiled specialisation
    n = y.shape[0]
    if method == "sequential" and not prior.sequential:
        raise ValueError(f"sequential EP needs a dense K; {type(prior).__name__} runs method='parallel'")
    if state is None:
        tau, nu = np.zeros(n), np.zeros(n)
    else:
        tau, nu = np.array(state.tau, dtype=float), np.array(state.nu, dtype=float)
        if tau.shape != (n,):
            raise WarmStartMismatch(f"warm-start state has {tau.shape[0]} sites, data has {n}")

    done, status, fixed, first_change = 0, _HANDED_BACK, None, np.inf
    warm = None  # the warm start's sites where not the returned ones (``_parallel``)
    forecast = np.inf if state is None else state.first_change
    dense = isinstance(prior, DensePrior)
    K = prior.K if dense else None
    concave = likelihood.log_concave
    if dense and not concave:
        prior = IndefiniteSitePrior(K)
    if dense and concave and method == "parallel" and np.min(tau, initial=0.0) >= 0.0:
        # the compiled loop; it hands back to _parallel only at steps it does not take
        status, done, change, tau, nu, L, Li, *fixed, first_change, warm_tau, warm_nu = _parallel_compiled_from(
            likelihood.kind, _contiguous(K), y, th, tau, nu, damping, tol, max_sweeps, ANDERSON_MEMORY, forecast,
            True, state is not None
        )
        if status != _HANDED_BACK:
            post, sweeps, warm = LatentPosterior(K, tau, L, Li), done, (warm_tau, warm_nu)
        if status != _DONE:
            fixed = None
    if status == _HANDED_BACK:
        compiled_first_change = first_change
        try:
            post = _posterior(prior, tau, method == "parallel" and _rough_allowed(tol, forecast), tol)
        except NotPositiveDefiniteError:
            if state is None:
                raise
            # sites fitted to another K (negative ones, from the step likelihood) can make
            # K^-1 + S indefinite here: the warm start is of no use, start from zero sites
            tau, nu = np.zeros(n), np.zeros(n)
            post = prior.posterior(tau)
        if method == "sequential":
            post, tau, nu, sweeps, change, first_change, warm = _sequential(
                prior, y, likelihood, th, post, tau, nu, damping, tol, max_sweeps - done)
        else:
            post, tau, nu, sweeps, change, first_change, warm = _parallel_from(
                prior, y, likelihood, th, post, tau, nu, damping, tol, max_sweeps - done,
                state is not None and not done)
        if done:  # the first sweep was the compiled loop's
            first_change = compiled_first_change
        sweeps += done
    if fixed is None:
        var, mean, b, tau_c, nu_c = _cavities(post, tau, nu, prior)
        tilted = likelihood.tilted(y, nu_c / tau_c, 1.0 / tau_c, th)
        log_z = ep_log_z(post, tau, nu, mean, tau_c, nu_c, tilted.log_z)
    else:  # the cavities of the last sweep are those of the returned sites
        var, mean, b, tau_c, nu_c, tilted_out = fixed
        tilted = likelihood.tilted_moments(tilted_out, y, nu_c / tau_c, 1.0 / tau_c, th)
        log_z = float(_factored_log_z(L, tau, nu, mean, tau_c, nu_c, tilted.log_z))  # as ep_warm
    dK = dth = None
    if with_grad:
        # at the sampler's tolerances a structure may round its gradient's products to single
        # precision (FITC: ``FITCPosterior.kernel_gradient``), well inside the tolerance's own error
        dK = post.ep_gradient(b, rough=tol >= ROUGH_TOL)
        dth = tilted.dlog_z_dparams.sum(axis=0)
    return ApproximationResult(
        method=f"ep-{method}",
        log_z=log_z,
        dlog_z_dK=dK,
        dlog_z_dparams=dth,
        a=b,
        posterior=post,
        mean=mean,
        var=var,
        state=EPState(*(warm or (tau, nu)), first_change),
        n_iter=sweeps,
        converged=change < tol,
        max_change=change,
        loo_log_p=tilted.log_z if with_loo else None,
    )


def ep_warm(K, y, likelihood, th, state, tol, max_sweeps=300, rough_ok=True):
    """The sampler's hot path: undamped parallel EP from a warm start, in compiled calls.

    For trusted inputs only (y as -1/+1 floats, th checked, ``state`` with non-negative sites
    or None). Returns (log_z, dlog_z_dK, dlog_z_dparams, loo, sweeps, EPState), the values
    ``ep`` would return, when the compiled loop converged with finite outputs; None otherwise
    (the caller then runs ``ep``). ``rough_ok=False``: no single-precision sweeps.
    """
    if not likelihood.log_concave:  # every run of the schedule: solve.highest_converged
        return None
    n = y.shape[0]
    tau, nu = (np.zeros(n), np.zeros(n)) if state is None else (state.tau.copy(), state.nu.copy())
    forecast = np.inf if state is None else state.first_change
    ok, log_z, dK, dth, loo, sweeps, tau, nu, first_change = ep_warm_compiled(
        likelihood.kind, _contiguous(K), plain(y), plain(th), tau, nu, forecast, tol, max_sweeps, th.shape[0],
        rough_ok, state is not None)
    if not ok:
        return None
    return log_z, dK, dth, loo, sweeps, EPState(tau, nu, first_change)


@njit(nogil=True, cache=True)
def ep_warm_compiled(kind, K, y, th, tau, nu, forecast, tol, max_sweeps, n_params, rough_ok=True, warm=False):
    """``ep_warm``'s work, callable from compiled code (``backends.numba.compiled_ep``); ``warm``:
    (tau, nu) are a warm start (``_parallel_compiled_from``).

    Returns (converged with finite outputs, log_z, dlog_z_dK (Fortran-ordered), dlog_z_dparams,
    the LOO terms, sweeps, the warm start's tau and nu, first change).
    """
    status, sweeps, _, tau, nu, L, Li, _, mean, b, tau_c, nu_c, tilted, first_change, warm_tau, warm_nu = (
        # np.int64: a constant would be typed Literal[int], a specialisation apart from ep()'s
        _parallel_compiled_from(kind, K, y, th, tau, nu, 1.0, tol, max_sweeps, np.int64(ANDERSON_MEMORY), forecast,
                                rough_ok, warm))
    dth = np.zeros(n_params)
    if status != _DONE:
        return False, np.nan, np.empty((0, 0)).T, dth, tilted[0].copy(), sweeps, tau, nu, first_change
    log_z = _factored_log_z(L, tau, nu, mean, tau_c, nu_c, tilted[0])
    dK = outer_minus_R(b, Li, np.sqrt(tau), 0.5)
    tilted_dparams_sum(kind, y, nu_c / tau_c, 1.0 / tau_c, th, tilted[3], dth)
    # log_z <= 0: every kind here has discrete labels (``Likelihood.max_log_evidence``)
    ok = np.isfinite(log_z) and log_z <= 0.0 and np.isfinite(dK.sum()) and np.all(np.isfinite(dth))
    return ok, log_z, dK, dth, tilted[0].copy(), sweeps, warm_tau, warm_nu, first_change


class IndefiniteSitePrior(DensePrior):
    """The dense prior with q(f) always represented through chol(K)
    (``structures.dense.IndefiniteSitePosterior``): ``ep``'s prior for a likelihood that is not
    log-concave, the representation the JAX engine uses too, so that both reach the same fixed
    point from the first sweep on.
    """

    def posterior(self, w, rough=False):
        return IndefiniteSitePosterior(self.K, w)


def checked_inputs(K, y, likelihood, params):
    """(prior structure, labels as ``likelihood.check_labels`` gives them, checked parameters) of a
    solver on a prior structure (``ep``, ``laplace``); ValueError naming the bad input.
    """
    th = likelihood.check_params(likelihood.resolve_params(params))
    y = likelihood.check_labels(y, th)
    return _prior_structure(K, y.shape[0]), y, th


def checked_dense_inputs(K, y, likelihood, params):
    """(K, y as -1.0 / +1.0 (one class allowed), checked parameters) of a solver on a dense K
    (``adf``, ``meanfield``), each C-contiguous and writable (``plain``: one compiled
    specialisation, where PyTensor's constants are read-only); ValueError naming the bad input.
    """
    y = as_signed_labels(y, require_both=False)
    K = check_kernel_matrix(K, y.shape[0])
    th = likelihood.check_params(likelihood.resolve_params(params))
    return plain(K), plain(y), plain(th)


def _prior_structure(K, n):
    """A prior structure for K: K itself if it is one (checked against n), else a checked dense K."""
    if is_structure(K):
        if K.n != n:
            raise ValueError(f"the prior structure has {K.n} points, y has {n} labels")
        return K
    return DensePrior(check_kernel_matrix(K, n))


def _proper_posterior(prior, tau_old, nu_old, tau_new, nu_new):
    """Posterior at the new sites, halving the step while K^{-1} + S is indefinite."""
    for _ in range(20):
        try:
            return prior.posterior(tau_new), tau_new, nu_new
        except NotPositiveDefiniteError:
            tau_new = 0.5 * (tau_old + tau_new)
            nu_new = 0.5 * (nu_old + nu_new)
    tau_new = np.maximum(tau_new, 0.0)
    return prior.posterior(tau_new), tau_new, nu_new


class Anderson:
    """Anderson acceleration (type II) of a fixed-point iteration x <- G(x).

    Keeps the last ``memory`` differences of the map values g = G(x) and of the
    scaled residuals f = W (g - x); the next iterate g - dG gamma uses the
    least-squares gamma = argmin ||f - dF gamma|| (Walker & Ni 2011, eq. 1.3).
    """

    def __init__(self, memory):
        self.memory = memory
        self.reset()

    def reset(self):
        self.dF, self.dG, self.f, self.g = [], [], None, None

    def step(self, g, f):
        if self.memory == 0:
            return g
        if self.f is not None:
            self.dF.append(f - self.f)
            self.dG.append(g - self.g)
            if len(self.dF) > self.memory:
                self.dF.pop(0)
                self.dG.pop(0)
        self.f, self.g = f, g
        if not self.dF:
            return g
        gamma = np.linalg.lstsq(np.column_stack(self.dF), f, rcond=None)[0]
        return g - np.column_stack(self.dG) @ gamma


def _contiguous(K):
    return K if (K.flags.c_contiguous or K.flags.f_contiguous) else np.ascontiguousarray(K)


def _parallel(prior, y, likelihood, th, post, tau, nu, damping, tol, max_sweeps, memory=ANDERSON_MEMORY, give_up=np.inf):
    """Parallel EP sweeps on any prior structure, Anderson-accelerated; returns
    (posterior, tau, nu, sweeps, change, first change).

    Acceleration does not move the fixed point; it restarts after an iterate that makes
    K^{-1} + S indefinite, introduces negative sites the plain map does not have, or follows a
    1000-fold growth of the residual. Sweeps predicted not to be the last may run on a rough
    (single-precision) posterior (``_rough_allowed``); a rough sweep never ends the iteration,
    so the returned posterior is exact. ``give_up``: stop, not converged, after a first sweep
    whose change exceeds it (a warm start worse than zero sites: ``WARM_GIVE_UP_CHANGE``).
    """
    n = tau.shape[0]
    aa = Anderson(memory)
    change, best, first_change = np.inf, np.inf, np.inf
    warm = None
    sweeps = 0
    while sweeps < max_sweeps:
        var = post.var_diag()
        mean = post.mean_and_weights(nu)[0]
        previous = change
        tau_g, nu_g, change, *_ = parallel_site_update(likelihood.kind, y, th, var, mean, tau, nu, prior.diag(), damping)
        sweeps += 1
        first_change = change if sweeps == 1 else first_change
        if sweeps == 1 and change > give_up:
            break
        if change < tol and not post.rough:
            # converged: the sites already factorised are within tol of the map's
            # value, so keep them rather than pay one more Cholesky and inverse; the map's
            # value, a sweep nearer the fixed point, is the warm start
            if np.min(tau_g) >= 0.0 or np.min(tau) < 0.0:
                warm = (tau_g, nu_g)
            break
        if not np.isfinite(change):
            post, tau, nu = _proper_posterior(prior, tau, nu, tau_g, nu_g)
            break
        if change > 1e3 * best:
            aa.reset()
        best = min(best, change)
        scale = np.concatenate([var, np.sqrt(var)])
        g = np.concatenate([tau_g, nu_g])
        x_next = aa.step(g, scale * (g - np.concatenate([tau, nu])))
        tau_x, nu_x = x_next[:n], x_next[n:]
        if np.min(tau_x) < 0.0 <= np.min(tau_g):
            aa.reset()
            tau_x, nu_x = tau_g, nu_g
        try:
            # the returned posterior (the sweep limit's included) is exact
            rough = sweeps < max_sweeps and _rough_allowed(tol, _next_change(change, previous), sweeps)
            post, tau, nu = _posterior(prior, tau_x, rough, tol), tau_x, nu_x
        except NotPositiveDefiniteError:
            aa.reset()
            post, tau, nu = _proper_posterior(prior, tau, nu, tau_g, nu_g)
    if post.rough:  # max_sweeps = 0 after a rough start
        post = _posterior(prior, tau, False, tol)
    return post, tau, nu, sweeps, change, first_change, warm or (tau, nu)


def _parallel_from(prior, y, likelihood, th, post, tau, nu, damping, tol, max_sweeps, warm):
    """``_parallel`` from sites (tau, nu) and their posterior ``post``; ``warm``: a warm start,
    abandoned for zero sites (``WARM_GIVE_UP_CHANGE``) where its first sweep shows it worse than
    them. Returns ``_parallel``'s tuple, the sweeps of both runs counted."""
    give_up = WARM_GIVE_UP_CHANGE if warm and max_sweeps > 1 else np.inf
    out = _parallel(prior, y, likelihood, th, post, tau, nu, damping, tol, max_sweeps, give_up=give_up)
    sweeps, first_change = out[3], out[5]
    if not (sweeps == 1 and first_change > give_up):
        return out
    zeros = np.zeros(tau.shape[0])
    post = _posterior(prior, zeros, _rough_allowed(tol, np.inf), tol)
    post, tau, nu, sweeps, change, first_change, warm = _parallel(prior, y, likelihood, th, post, zeros, zeros.copy(),
                                                                  damping, tol, max_sweeps - 1)
    return post, tau, nu, sweeps + 1, change, first_change, warm


def _posterior(prior, tau, rough, tol):
    """q(f) at sites tau: rough (single precision, never the last sweep's) where ``rough``,
    else exact; at the sampler's tolerances (tol >= ``ROUGH_TOL``) an exact posterior's
    products in single precision where the structure has them (``single_posteriors``: FITC),
    rounded as its gradient is (``post.ep_gradient(b, rough=True)``)."""
    if not rough and tol >= ROUGH_TOL and getattr(prior, "single_posteriors", False):
        return prior.posterior(tau, single=True)
    return prior.posterior(tau, rough=rough)


# A warm start whose first sweep changes a site by more than this (``_parallel``'s scale-free
# change) is abandoned for zero sites. From zero sites the first change measured 0.16 to 2.2
# (probit and logistic, amplitudes 0.1 to 1000, lengthscales 0.3 to 5): a larger one says the
# sites were fitted to a far point, as NUTS reaches in its early trajectories, from which
# Anderson-accelerated sweeps can take longer than a cold start or not converge at all (at
# n = 50,000 with FITC: 300 sweeps, 68 CPU s, then 37 from zero sites; docs/design/engine_notes.md).
WARM_GIVE_UP_CHANGE = 10.0

# Rough (single-precision) sweeps, gradients and priors (``FITCPrior``'s ``single``, asked for by
# the evidence Op): at tolerances this loose or looser; rough sweeps within the first
# _ROUGH_SWEEPS sweeps; _FIRST_RATE is the contraction assumed after a first sweep.
ROUGH_TOL = 1e-3
_ROUGH_SWEEPS = 10
_FIRST_RATE = 0.1


@njit(nogil=True, cache=True)
def _next_change(change, previous):
    """The next sweep's change, predicted as this one's times the last contraction
    change / previous (``_FIRST_RATE`` after a first sweep; 1 after a zero change)."""
    if not np.isfinite(previous):
        return change * _FIRST_RATE
    return change * min(change / previous, 1.0) if previous > 0.0 else change


@njit(nogil=True, cache=True)
def _rough_allowed(tol, predicted, sweeps=0):
    """Whether a sweep whose change is predicted as ``predicted`` may run on a rough posterior:
    tol >= ``ROUGH_TOL``, the sweep not predicted to be the last (a rough sweep that would have
    converged costs another), and fewer than ``_ROUGH_SWEEPS`` sweeps run.
    """
    return tol >= ROUGH_TOL and predicted > tol and sweeps < _ROUGH_SWEEPS


@njit(nogil=True, cache=True)
def anderson_update(dF, dG, count, have_prev, f_prev, g_prev, best, change, tau, nu, tau_g, nu_g, var):
    """``Anderson.step`` of the parallel EP map in arrays, with ``_parallel``'s restart after a
    1000-fold growth of the site change: the map's value g = (tau_g, nu_g), the residual
    f = (var, sqrt(var)) (g - (tau, nu)). Returns (next iterate, count, f, g, best change)."""
    if change > 1e3 * best:
        have_prev, count = False, 0
    best = min(best, change)
    g = np.concatenate((tau_g, nu_g))
    f = np.concatenate((var, np.sqrt(var))) * (g - np.concatenate((tau, nu)))
    if have_prev and dF.shape[0] > 0:
        count = anderson_record(dF, dG, count, f, g, f_prev, g_prev)
    return anderson_step(dF, dG, count, f, g), count, f, g, best


# Outcomes of ``_parallel_compiled``.
_DONE = 0  # converged; the fixed-point quantities returned are at the returned sites
_HANDED_BACK = 1  # a step the compiled loop does not take; _parallel continues from the returned sites
_SWEEP_LIMIT = 2  # max_sweeps reached; the returned cavities are not at the returned sites


@njit(nogil=True, cache=True)
def anderson_step(dF, dG, count, f, g):
    """g - gamma dG with gamma = argmin ||f - dF^T gamma|| over the first ``count`` rows of
    dF and dG, the stored differences (``Anderson``)."""
    if count == 0:
        return g.copy()
    rcond = np.finfo(np.float64).eps * dF.shape[1]  # NumPy's default cutoff, as in Anderson
    gamma = np.linalg.lstsq(dF[:count].T, f, rcond=rcond)[0]
    return g - gamma @ dG[:count]


@njit(nogil=True, cache=True)
def anderson_record(dF, dG, count, f, g, f_prev, g_prev):
    """Store the differences f - f_prev and g - g_prev as the next rows of Anderson's history
    (dF, dG), dropping the oldest row where all are in use; returns the new count
    (``Anderson.step``'s history, in arrays)."""
    if count == dF.shape[0]:
        dF[:-1] = dF[1:].copy()
        dG[:-1] = dG[1:].copy()
        count -= 1
    dF[count] = f - f_prev
    dG[count] = g - g_prev
    return count + 1


@njit(nogil=True, cache=True)
def _parallel_compiled(kind, K, y, th, tau, nu, damping, tol, max_sweeps, memory, forecast=np.inf, rough_ok=True,
                       give_up=np.inf):
    """``_parallel`` for non-negative sites on a dense K, compiled: whole sweeps without Python.

    A step ``_parallel`` handles in Python (negative sites, a failed factorisation, a non-finite
    change or iterate) ends the loop with status ``_HANDED_BACK`` at the last factorised sites,
    uncounted. Rough sweeps as in ``_parallel`` (``forecast``: the first sweep's predicted
    change); ``rough_ok=False`` runs every sweep exact; ``give_up`` as in ``_parallel`` (status
    ``_SWEEP_LIMIT`` after one sweep).

    Returns (status, sweeps, change, tau, nu, L, Li, var, mean, b, tau_c, nu_c, tilted,
    first_change, warm_tau, warm_nu); with status ``_DONE`` var ... tilted are at the returned
    sites, and the warm sites (the warm start for a later solve) are the map's value at them,
    a sweep nearer the fixed point (else the returned sites); L and Li are exact unless status
    is ``_HANDED_BACK`` (L may then be empty).
    """
    n = y.shape[0]
    prior_var = np.diag(K).copy()
    dF = np.zeros((memory, 2 * n))
    dG = np.zeros((memory, 2 * n))
    f_prev = np.zeros(2 * n)
    g_prev = np.zeros(2 * n)
    # np.bool_ / np.int64, not the constants: numba would type the first pass over the loop's
    # call of anderson_update with Literal[bool] / Literal[int] and compile it twice
    have_prev, count = np.bool_(False), np.int64(0)
    change, previous, best, sweeps, status = np.inf, np.inf, np.inf, 0, _SWEEP_LIMIT
    first_change = np.inf
    sw = np.sqrt(tau)
    L, Li, info, rough = factors(K, sw, rough_ok and _rough_allowed(tol, forecast))
    tilted = np.empty((4, n))
    tau_c, nu_c = np.empty(n), np.empty(n)
    var, b, mean = prior_var.copy(), np.zeros(n), np.zeros(n)
    if info != 0:
        return _HANDED_BACK, sweeps, change, tau, nu, L, Li, var, mean, b, tau_c, nu_c, tilted, first_change, tau, nu
    warm_tau, warm_nu = tau, nu
    while sweeps < max_sweeps:
        var = marginal_variances(K, tau, sw, Li)
        b = weights_from_inverse(K, sw, Li, nu)
        mean = K @ b
        previous = change
        tau_g, nu_g, change, tau_c, nu_c, tilted = parallel_site_update(kind, y, th, var, mean, tau, nu, prior_var, damping)
        sweeps += 1
        if sweeps == 1:
            first_change = change
            if change > give_up:
                break
        if not np.isfinite(change):
            status, sweeps, change = _HANDED_BACK, sweeps - 1, np.nan
            break
        if change < tol and not rough:
            status = _DONE
            if np.min(tau_g) >= 0.0:
                warm_tau, warm_nu = tau_g, nu_g
            break
        x, count, f_prev, g_prev, best = anderson_update(dF, dG, count, have_prev, f_prev, g_prev, best, change,
                                                         tau, nu, tau_g, nu_g, var)
        have_prev = True
        tau_x, nu_x = x[:n], x[n:]
        if np.min(tau_x) < 0.0 or not np.all(np.isfinite(x)):  # Anderson went astray
            have_prev, count = False, 0
            tau_x, nu_x = tau_g.copy(), nu_g.copy()
            if np.min(tau_x) < 0.0:  # negative sites of the map itself: _parallel's business
                status, sweeps = _HANDED_BACK, sweeps - 1
                break
        sw_x = np.sqrt(tau_x)
        last = sweeps == max_sweeps  # the returned factors: exact
        rough_x = rough_ok and not last and _rough_allowed(tol, _next_change(change, previous), sweeps)
        L_x, Li_x, info, rough_x = factors(K, sw_x, rough_x)
        if info != 0:
            status, sweeps = _HANDED_BACK, sweeps - 1
            break
        tau, nu, sw, L, Li, rough = tau_x.copy(), nu_x.copy(), sw_x, L_x, Li_x, rough_x
    if rough and status == _SWEEP_LIMIT:  # max_sweeps = 0 after a rough start
        L, Li, info, rough = factors(K, sw, False)
        if info != 0:
            status = _HANDED_BACK
    if status != _DONE:
        warm_tau, warm_nu = tau, nu
    return status, sweeps, change, tau, nu, L, Li, var, mean, b, tau_c, nu_c, tilted, first_change, warm_tau, warm_nu


@njit(nogil=True, cache=True)
def _parallel_compiled_from(kind, K, y, th, tau, nu, damping, tol, max_sweeps, memory, forecast, rough_ok, warm):
    """``_parallel_compiled`` from sites (tau, nu); ``warm``: a warm start, abandoned for zero
    sites (``WARM_GIVE_UP_CHANGE``) where its first sweep shows it worse than them. Returns
    ``_parallel_compiled``'s tuple, the sweeps of both runs counted."""
    give_up = WARM_GIVE_UP_CHANGE if warm and max_sweeps > 1 else np.inf
    (status, sweeps, change, tau, nu, L, Li, var, mean, b, tau_c, nu_c, tilted, first_change, warm_tau,
     warm_nu) = _parallel_compiled(kind, K, y, th, tau, nu, damping, tol, max_sweeps, memory, forecast, rough_ok,
                                   give_up)
    if status == _SWEEP_LIMIT and sweeps == 1 and first_change > give_up:
        n = y.shape[0]
        (status, sweeps, change, tau, nu, L, Li, var, mean, b, tau_c, nu_c, tilted, first_change, warm_tau,
         warm_nu) = _parallel_compiled(kind, K, y, th, np.zeros(n), np.zeros(n), damping, tol, max_sweeps - 1,
                                       memory, np.inf, rough_ok, np.inf)
        sweeps += 1
    return status, sweeps, change, tau, nu, L, Li, var, mean, b, tau_c, nu_c, tilted, first_change, warm_tau, warm_nu


def _sequential(prior, y, likelihood, th, post, tau, nu, damping, tol, max_sweeps):
    """Sequential EP sweeps in site order (reproducible), Sigma recomputed after each (dense prior)."""
    K = prior.K
    change = first_change = np.inf
    sweeps = 0
    while sweeps < max_sweeps:
        Sigma = np.ascontiguousarray(post.full_cov())
        mu = Sigma @ nu
        tau_old, nu_old = tau.copy(), nu.copy()
        change = _sequential_sweep(likelihood.kind, Sigma, mu, tau, nu, y, th, damping, np.diag(K).copy())
        sweeps += 1
        first_change = change if sweeps == 1 else first_change
        if not np.isfinite(change):  # a NaN site: not converged, whatever the other sites did
            tau, nu = tau_old, nu_old
            break
        post, tau, nu = _proper_posterior(prior, tau_old, nu_old, tau, nu)
        if change < tol:
            break
    return post, tau, nu, sweeps, change, first_change, (tau, nu)
