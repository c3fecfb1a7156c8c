r"""Laplace's approximation for binary GP classification (R&W Alg. 3.1 and 5.1).

Newton's method, with a backtracking line search, finds the mode f^ = K a of
Psi(f) = log p(y|f) - f^T K^{-1} f / 2; near the mode it takes chord steps that reuse the
last factorisation (``_newton_update``). With W = -d^2 log p / df^2 and
B = I + W^{1/2} K W^{1/2} (R&W eq. 3.32):

.. math::

    \log q(y) = \log p(y|\hat f) - \tfrac12 a^T \hat f - \tfrac12 \log|B|.

The gradient includes the mode's implicit dependence on K and theta in adjoint form
(``_gradient``; Margossian et al. 2020). The loop sees the prior only through a prior
structure (``pymc_gpc.structures``), so it serves a dense K and FITC alike.
"""

import functools
from dataclasses import dataclass

import numpy as np

from .ep import cavity_precision, checked_inputs
from ..likelihoods.base import laplace_unsupported_message
from .result import ApproximationResult, WarmStartMismatch, loo_outputs


@dataclass
class LaplaceState:
    """The last mode, to warm-start from: its representer weights a (f^ = K a) and, optionally,
    its latent values f^, at which the next solve's first Newton step is then linearised
    (see ``softmax_laplace``'s ``_WARM_START``).

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
    """Whether Newton has converged: the largest change in f is below ``tol (1 + max|f|)``, or
    the next one is predicted to be, or it has stopped shrinking at the rounding level.

    Prediction: after a full step (no backtracking), converging quadratically or linearly at
    rate r = d_k / d_{k-1}, the next change is about d_k r; where d_k r <= tol (1 + max|f|)
    the confirming step is not taken. Rounding floor: a change below ``_ROUNDING_LEVEL``
    (1 + max|f|) no smaller than half the previous one (with a large kernel amplitude the
    floor can lie above ``tol``).
    """
    scale = 1.0 + np.max(np.abs(f))
    if full_step and np.isfinite(previous) and change < previous and change * (change / previous) <= tol * scale:
        return True
    return change <= tol * scale or (change <= _ROUNDING_LEVEL * scale and change >= 0.5 * previous)


# A chord step (``_newton_update``) is followed by another while each shrinks the change
# in f by at least this factor; otherwise the next step refactorises at the current f.
CHORD_MAX_RATE = 0.1


def _newton_update(post, w0, f, out):
    """The next representer weights, :math:`a' = (I + W_0 K)^{-1} (W_0 f + g)`,
    g = ``out.d1``, ``post`` factorised at W_0 = diag(``w0``).

    With W_0 = W(f) this is Newton's step (R&W Alg. 3.1); with the curvature of an earlier
    iterate, the chord step: an ascent direction of Psi, converging linearly at a rate of
    order |W - W_0|, for a solve with the existing factor. f need not equal K a (a warm
    start's first step is linearised at the last mode's f).
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
    """Laplace leave-one-out log q(y_i | y_-i) (Vehtari et al. 2016, LA-LOO): site i has
    precision W_i and location W_i f^_i + d1_i; the likelihood is averaged over the cavity, as
    for EP.
    """
    nu = w * f + d1
    tau_c = cavity_precision(var, w, k_diag)
    mu_c = (f / var - nu) / tau_c
    return likelihood.tilted(y, mu_c, 1.0 / tau_c, th).log_z


def _gradient(prior, post, a, var, out):
    """Total derivative of log q(y) in K and theta, the mode's movement included.

    With Sigma = (K^{-1} + W)^{-1}, R = (K + W^{-1})^{-1}, s2_i = Sigma_ii d3_i / 2
    (d log q / d f^, R&W eq. 5.23) and the adjoint u = (I + W K)^{-1} s2 = s2 - R K s2:

    d/dK = a a^T / 2 - R / 2 + (u a^T + a u^T) / 2,
    d/dtheta = sum_i [dlp_i + Sigma_ii d(d2_i)/2] + s2^T Sigma d(d1)/dtheta.

    K is the structure's K~ throughout; ``kernel_gradient`` carries d/dK~ to its inputs.
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
