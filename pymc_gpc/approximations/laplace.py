r"""Laplace's approximation for binary GP classification (R&W Alg. 3.1 and 5.1).

Newton's method finds the mode f^ = K a of
Psi(f) = log p(y|f) - f^T K^{-1} f / 2, with a backtracking line search, from
``a = 0`` or a warm start; near the mode it continues with chord steps, which reuse the
last factorisation while they converge fast (``_newton_update``, ``CHORD_MAX_RATE``), and
B is factorised once more at the mode for the evidence and gradient. A warm start after a
small move of the hyperparameters thus costs two factorisations of B, one at the last
mode and one at the new, where Newton steps to convergence took three to five. With W = -d^2 log p / df^2 (diagonal, >= 0 for the
log-concave likelihoods here) and B = I + W^{1/2} K W^{1/2}:

.. math::

    \log q(y) = \log p(y|\hat f) - \tfrac12 a^T \hat f - \tfrac12 \log|B|.

Gradient (derived in the docstring of ``_gradient``): the mode moves with K and with
theta, and that implicit term is included, in the adjoint form (one vector u), so the
cost is O(n^3) once, whatever the number of kernel hyperparameters; autodiff then
carries d log q / dK into them (Margossian et al. 2020).

The iteration talks to the prior only through a prior structure
(``pymc_gpc.structures``): K~ v products, the posterior at W, and the structure's
gradient pieces, so the same Newton loop and gradient serve a dense K (O(n^3)) and the
FITC prior (O(n m^2)).
"""

import functools
from dataclasses import dataclass

import numpy as np

from .ep import cavity_precision, checked_inputs
from ..likelihoods.base import laplace_unsupported_message
from .result import ApproximationResult, WarmStartMismatch, loo_outputs


@dataclass
class LaplaceState:
    """The last mode, to warm-start from: its representer weights a (f^ = K a) and,
    optionally, its latent values f^. With f^, the next solve's first Newton step is
    linearised there, not at K a for the new K (``laplace``; the reasoning is in
    ``softmax_laplace._WARM_START``, the figures in ``docs/design/engine_notes.md``).

    Examples
    --------
    >>> res = pymc_gpc.laplace(K, y, Logistic())                    # doctest: +SKIP
    >>> res2 = pymc_gpc.laplace(K2, y, Logistic(), state=res.state)  # doctest: +SKIP
    """

    a: np.ndarray
    f: np.ndarray = None

    def copy(self):
        return LaplaceState(self.a.copy(), None if self.f is None else self.f.copy())


def _psi(a, f, lik_out):
    return float(np.sum(lik_out.lp) - 0.5 * a @ f)


# Newton changes in f below this (relative to 1 + max|f|) are at the level where rounding
# can stop them from shrinking further (``newton_converged``).
_ROUNDING_LEVEL = 1e-6


def newton_converged(change, previous, f, tol, full_step=True):
    """Whether Newton has converged: the largest change in f is below ``tol (1 + max|f|)``,
    or the next one is predicted to be, or it has stopped shrinking at the rounding level.

    The prediction. The iterate's error is about the next change d_{k+1}. Converging
    quadratically, d_{k+1} ~ C d_k^2 and d_k ~ C d_{k-1}^2, so
    d_{k+1} ~ d_k r (C d_{k-1}) with r = d_k / d_{k-1}: below d_k r once C d_{k-1} < 1;
    converging linearly at rate r (an inexact Newton step), about d_k r. So after a full
    step (no backtracking: a line search shortens the change, which then predicts
    nothing) with d_k r <= tol (1 + max|f|), the iterate already meets the tolerance, and
    the step that would only confirm it, a factorisation or a CG solve, is not taken.

    Near the mode Newton's changes shrink quadratically until rounding in the solves sets
    a floor; with a large kernel amplitude that floor can lie above ``tol``, and the
    iteration would then run to its limit, and the retry's, for a mode found long before
    (observed on Forensic Glass: ``docs/design/engine_notes.md``). A change
    below 1e-6 (1 + max|f|) that is no smaller than half the previous one is that floor.
    """
    scale = 1.0 + np.max(np.abs(f))
    if full_step and np.isfinite(previous) and change < previous and change * (change / previous) <= tol * scale:
        return True
    return change <= tol * scale or (change <= _ROUNDING_LEVEL * scale and change >= 0.5 * previous)


# A chord step (``_newton_update``) is followed by another while each shrinks the change
# in f by at least this factor; otherwise the next step refactorises at the current f. Ten
# chord steps at this rate gain what one or two Newton steps gain, at O(n^2) each against a
# factorisation's O(n^3).
CHORD_MAX_RATE = 0.1


def _newton_update(post, w0, f, out):
    r"""The next representer weights, :math:`a' = (I + W_0 K)^{-1} (W_0 f + g)`,
    g = ``out.d1``, ``post`` factorised at W_0 = diag(``w0``): ``post.weights(W_0 f + g)``.

    It solves the stationarity condition a' = g(f') with f' = K a' and g linearised at f
    with the curvature W_0: g(f') ~ g(f) - W_0 (f' - f). With W_0 = W(f) this is Newton's
    step (R&W Alg. 3.1); with W_0 the curvature of an earlier iterate, the chord (simplified
    Newton) step: still an ascent direction of Psi where f = K a (its matrix
    (K^{-1} + W_0)^{-1} is positive definite), converging linearly at a rate of order
    |W - W_0|, small near the mode, and costing a solve with the existing factor (O(n^2)
    for a dense K) instead of a new factorisation. f need not equal K a: the warm start's
    first step is linearised at the last mode's f.
    """
    return post.weights(w0 * f + out.d1)


def laplace(
    K,
    y,
    likelihood,
    params=None,
    *,
    state=None,
    tol=1e-10,
    max_iter=100,
    with_grad=True,
    with_loo=True,
):
    """Find the posterior mode and return Laplace's evidence, gradient and posterior.

    Parameters are as for ``pymc_gpc.ep.ep`` (K a dense matrix or a prior structure such
    as ``FITCPrior``); ``state`` is a ``LaplaceState``.
    Convergence: the largest Newton change in f is below ``tol * (1 + max|f|)``, or it
    stops shrinking at the rounding level (``newton_converged``).
    ``with_loo``: compute ``loo_log_p`` (LA-LOO, ``_loo_log_p``); None otherwise; "deferred":
    return, as ``loo_later``, a function that computes it (``ops.marginal``'s ``defer_loo``).

    Returns
    -------
    ApproximationResult
        ``log_z`` = -a^T f / 2 + log p(y | f) - log|B| / 2 at the mode f (R&W eq. 3.32),
        its gradient in K including the mode's implicit dependence (R&W Alg. 5.1, adjoint
        form), the posterior, the LA-LOO terms and the ``LaplaceState``.

    Raises
    ------
    ValueError
        For the step likelihood (no Laplace approximation) or bad inputs.

    Examples
    --------
    >>> import numpy as np, pymc_gpc
    >>> from pymc_gpc.likelihoods import Logistic
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(50, 2))
    >>> y = np.where(X[:, 0] > 0, 1, -1)
    >>> K = np.exp(-0.5 * ((X[:, None] - X[None]) ** 2).sum(-1))
    >>> res = pymc_gpc.laplace(2.0 * K, y, Logistic())
    >>> res.converged
    True
    """
    if not likelihood.supports_laplace:
        raise ValueError(laplace_unsupported_message(likelihood))
    prior, y, th = checked_inputs(K, y, likelihood, params)
    n = y.shape[0]
    a = np.zeros(n) if state is None else np.array(state.a, dtype=float)
    if a.shape != (n,):
        raise WarmStartMismatch(f"warm-start state has {a.shape[0]} weights, data has {n}")
    from_f = state is not None and state.f is not None
    if from_f:  # the first step linearised at the last mode's f, taken in full, checked below
        f = np.array(state.f, dtype=float)
        if f.shape != (n,):
            raise WarmStartMismatch(f"warm-start state has {f.shape[0]} latent values, data has {n}")
        out, psi = likelihood.log_lik(y, f, th), -np.inf
    else:
        f = prior.matvec(a)
        out = likelihood.log_lik(y, f, th)
        psi = _psi(a, f, out)
    change, it, converged = np.inf, 0, False
    post, chord, rate = None, False, np.inf  # the factorisation in use; whether the last step was a chord step
    while it < max_iter:
        it += 1
        if post is None or (chord and rate > CHORD_MAX_RATE):
            w0 = np.maximum(-out.d2, 0.0)
            post, chord = prior.posterior(w0), False  # a Newton step
        else:
            chord = True  # a chord step: the factorisation of an earlier iterate (``_newton_update``)
        da = _newton_update(post, w0, f, out) - a
        step = 1.0
        for _ in range(40):  # backtracking: Psi must not decrease
            a_try = a + step * da
            f_try = prior.matvec(a_try)
            out_try = likelihood.log_lik(y, f_try, th)
            psi_try = _psi(a_try, f_try, out_try)
            if psi_try >= psi - 1e-12 * abs(psi):
                break
            step *= 0.5
        change, previous = float(np.max(np.abs(f_try - f))), change
        rate = change / previous if step == 1.0 else np.inf
        a, f, out, psi = a_try, f_try, out_try, psi_try
        if from_f:
            from_f = False
            a0, f0 = np.zeros(n), np.zeros(n)
            out0 = likelihood.log_lik(y, f0, th)
            psi0 = _psi(a0, f0, out0)
            if not psi >= psi0:  # the step from the last mode's f is worse than a = 0
                a, f, out, psi, change, post = a0, f0, out0, psi0, np.inf, None
                continue
        if step != 1.0:
            post = None  # far from the mode: the next step is Newton's, at f
        converged = newton_converged(change, previous, f, tol, full_step=step == 1.0)
        if converged:
            break

    w = np.maximum(-out.d2, 0.0)
    post = prior.posterior(w)  # at the mode: the factorisation the evidence and gradient need
    log_z = psi - post.half_logdet_B()
    var = post.var_diag()
    dK = dth = None
    if with_grad:
        dK, dth = _gradient(prior, post, a, var, out)
    # its own copies: y and th may be views of the caller's (an Op's input) storage
    loo = functools.partial(_loo_log_p, y.copy(), likelihood, np.array(th), prior.diag(), f, var, w, out.d1)
    loo_log_p, loo_later = loo_outputs(loo, with_loo)
    return ApproximationResult(
        method="laplace",
        log_z=log_z,
        dlog_z_dK=dK,
        dlog_z_dparams=dth,
        a=a,
        posterior=post,
        mean=f,
        var=var,
        state=LaplaceState(a, f),
        n_iter=it,
        converged=converged,
        max_change=change,
        loo_log_p=loo_log_p,
        loo_later=loo_later,
    )


def _loo_log_p(y, likelihood, th, k_diag, f, var, w, d1):
    """Laplace leave-one-out predictive log q(y_i | y_-i) (Vehtari et al. 2016, LA-LOO).

    The Laplace posterior is the prior times Gaussian sites with precision W_i and
    natural location W_i f^_i + d1_i (the Newton fixed point); removing site i gives
    the cavity, and the likelihood is averaged over it, exactly as for EP.
    """
    nu = w * f + d1
    tau_c = cavity_precision(var, w, k_diag)
    mu_c = (f / var - nu) / tau_c
    return likelihood.tilted(y, mu_c, 1.0 / tau_c, th).log_z


def _gradient(prior, post, a, var, out):
    r"""Total derivative of log q(y) in K and theta, the mode's movement included.

    With Sigma = (K^{-1} + W)^{-1}, R = (K + W^{-1})^{-1}, g = d log p/df = a at the mode:

    * explicit: d(-a^T f^/2) gives a a^T / 2; d(-log|B|/2) gives -R/2 in K and
      -(1/2) sum_i Sigma_ii dW_ii/dtheta in theta;
    * the mode: f^ = K g(f^) gives df^ = (I + K W)^{-1} (dK g + K dg/dtheta); only
      log|B| depends on f^ (Psi is stationary), through dW_ii/df_i = -d3_i, so
      d log q / d f^ = s2 with s2_i = Sigma_ii d3_i / 2 (R&W eq. 5.23).
    * adjoint: s2^T (I + K W)^{-1} dK g = u^T dK a with u = (I + W K)^{-1} s2 = s2 - R K s2,
      and s2^T (I + K W)^{-1} K v = s2^T Sigma v.

    Result (symmetrised in K):
    d/dK = a a^T / 2 - R / 2 + (u a^T + a u^T) / 2,
    d/dtheta = sum_i [dlp_i + Sigma_ii d(d2_i)/2] + s2^T Sigma d(d1)/dtheta.

    K is the prior structure's covariance K~ throughout (the derivation never uses its
    form); ``kernel_gradient`` carries d/dK~ to the structure's own inputs (FITC: K_uu,
    K_uf, diag K_ff, ``structures.fitc``).
    """
    s2 = 0.5 * var * out.d3
    u = s2 - post.R_times(prior.matvec(s2))
    dK = post.kernel_gradient([(a, a, 0.5), (u, a, 1.0)], -0.5)
    sigma_s2 = post.sigma_times(s2)  # Sigma s2 (Sigma is symmetric)
    dth = (
        out.lp_dparams.sum(axis=0)
        + 0.5 * var @ out.d2_dparams
        + sigma_s2 @ out.d1_dparams
    )
    return dK, dth
