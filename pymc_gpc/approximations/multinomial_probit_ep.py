r"""Nested EP for multi-class GP classification with the multinomial probit.

Riihimaki, Jylanki & Vehtari (2013), JMLR 14, sec. 3-4. With an auxiliary u_i ~ N(0, 1),

.. math::

    p(y_i = k \mid f_i) = \int N(u_i; 0, 1) \prod_{j \ne k} \Phi(u_i + f_{ki} - f_{ji})\, du_i,

so the tilted distribution of site i is a Gaussian in w = (f_i, u_i) times c - 1 probit
factors Phi(b_j^T w), b_j = e_k - e_j + e_u. An inner EP approximates each factor by
exp(-tau_j t_j^2 / 2 + nu_j t_j), t_j = b_j^T w (sequential, warm-started from the last
outer sweep). The outer site is the u-integral of the inner sites:

.. math::

    \int N(u; 0, 1) \prod_j e^{-\tau_j t_j^2/2 + \nu_j t_j} du
      = (1 + s)^{-1/2} e^{(\sum\nu)^2 / (2(1+s))}
        \exp(-\tfrac12 f_i^T T_i f_i + h_i^T f_i),

with s = sum_j tau_j, T_i = diag(d_i) - d_i d_i^T / (1 + s), d_{ki} = 1 at the observed
class and tau_j elsewhere, h_{ki} = sum(nu)/(1 + s), h_{ji} = -nu_j + tau_j sum(nu)/(1 + s):
the softmax's block structure (``structures.multiclass.CoupledBlockPosterior``).

Outer updates are parallel, damped in the inner site parameters and Anderson-accelerated
on them (``ep.Anderson``; without it the damped map oscillates at large amplitudes).
``rough_sweeps`` runs the early sweeps on single-precision posteriors; the last ones are
exact.

The evidence is EP's free energy on the (f, u) model,

.. math::

    \log Z_{EP} = \log \int N(f; 0, K) \prod_i g_i(f_i)\, df
        + \sum_{i,j} [\log \hat Z_{ij} - \log \int q_{\setminus ij}(t)\, \tilde g_{ij}(t)\, dt],

stationary in the sites at the fixed point, so dlog Z/dK_k = (b_k b_k^T - R_kk) / 2 with
b = (K + T^{-1})^{-1} T^{-1} h, as for binary EP.
"""

import math
from dataclasses import dataclass

import numpy as np
from numba import njit

from ..likelihoods.multiclass import MulticlassLikelihood, MultinomialProbit
from ..numerics.special import inv_mills, log_ndtr
from ..structures import is_structure
from .ep import ANDERSON_MEMORY, Anderson
from .result import ApproximationResult, WarmStartMismatch
from .softmax_laplace import check_multiclass_inputs, coupled_posterior


# Early sweeps from single-precision posteriors (``rough_sweeps``) while the sites still move
# by more than this (relative; the rough map's changes stall at its rounding level).
_ROUGH_UNTIL = 1e-3
# ... or once this many rough sweeps in a row have not set a new smallest change.
_ROUGH_STALL = 2


@dataclass
class MultinomialProbitEPState:
    """Inner site parameters (n, c - 1) of the last fixed point: pass back in to warm-start."""

    tau: np.ndarray
    nu: np.ndarray

    def copy(self):
        return MultinomialProbitEPState(self.tau.copy(), self.nu.copy())


@njit(nogil=True, cache=True)
def _factor_marginal(Sw, mw, k, j, Sb):
    """The factor Phi(b^T w) with b = e_k - e_j + e_u (u last): Sw b into Sb (b is sparse,
    so O(c)), and the marginal of t = b^T w under N(mw, Sw): (its variance, its mean)."""
    u = Sw.shape[0] - 1
    for r in range(u + 1):
        Sb[r] = Sw[r, k] - Sw[r, j] + Sw[r, u]
    return Sb[k] - Sb[j] + Sb[u], mw[k] - mw[j] + mw[u]


@njit(nogil=True, cache=True)
def _rank_one(Sw, mw, Sb, dtau, dnu, v, mt):
    """Add the site change (dtau, dnu) on t = b^T w to N(mw, Sw), in place (Sherman-Morrison)."""
    den = 1.0 + dtau * v
    gain = (dnu - dtau * mt) / den
    scale = dtau / den
    for r in range(Sw.shape[0]):
        mw[r] += Sb[r] * gain
        for q in range(Sw.shape[0]):
            Sw[r, q] -= scale * Sb[r] * Sb[q]


@njit(nogil=True, cache=True)
def _inner_ep_site(m, C, k, tau, nu, tol, max_sweeps, Sw, mw, Sb):
    """Inner EP for one site: cavity N(m, C) over f_i, factors Phi(u + f_k - f_j).

    tau, nu (c - 1,) are updated in place; Sw (c + 1, c + 1), mw and Sb (c + 1,) are work
    buffers. Returns (sum_j [log Zhat_j - log int q_j g_j], sweeps, largest last change).
    """
    c = m.shape[0]
    Sw[:c, :c] = C  # posterior covariance of w = (f, u)
    Sw[:c, c] = 0.0
    Sw[c, :c] = 0.0
    Sw[c, c] = 1.0
    mw[:c] = m
    mw[c] = 0.0
    for jj in range(c - 1):  # start from the warm sites: rank-one updates
        j = jj + (jj >= k)  # the jj-th class other than k
        v, mt = _factor_marginal(Sw, mw, k, j, Sb)
        _rank_one(Sw, mw, Sb, tau[jj], nu[jj], v, mt)
    change = np.inf
    sweeps = 0
    while sweeps < max_sweeps and change > tol:
        sweeps += 1
        change = 0.0
        for jj in range(c - 1):
            j = jj + (jj >= k)
            v, mt = _factor_marginal(Sw, mw, k, j, Sb)
            vc = 1.0 / (1.0 / v - tau[jj])
            mc = vc * (mt / v - nu[jj])
            sq = math.sqrt(1.0 + vc)
            z = mc / sq
            r = inv_mills(z)
            mean = mc + vc * r / sq
            var = vc - vc * vc * r * (z + r) / (1.0 + vc)
            var = max(var, 1e-12 * vc)
            dtau = (1.0 / var - 1.0 / vc) - tau[jj]
            dnu = (mean / var - mc / vc) - nu[jj]
            _rank_one(Sw, mw, Sb, dtau, dnu, v, mt)
            tau[jj] += dtau
            nu[jj] += dnu
            change = max(change, abs(dtau) / (1.0 + abs(tau[jj])), abs(dnu) / (1.0 + abs(nu[jj])))
    terms = 0.0
    for jj in range(c - 1):  # at convergence: the normalisers' part of the evidence
        j = jj + (jj >= k)
        v, mt = _factor_marginal(Sw, mw, k, j, Sb)
        vc = 1.0 / (1.0 / v - tau[jj])
        mc = vc * (mt / v - nu[jj])
        log_zhat = log_ndtr(mc / math.sqrt(1.0 + vc))
        log_g = (-0.5 * math.log1p(vc * tau[jj]) - 0.5 * mc * mc / vc
                 + 0.5 * (mc / vc + nu[jj]) ** 2 / (1.0 / vc + tau[jj]))
        terms += log_zhat - log_g
    return terms, sweeps, change


@njit(nogil=True, cache=True)
def _inner_ep_all(mu, C, y, tau, nu, tol, max_sweeps):
    n, c = mu.shape
    terms = np.empty(n)
    worst = 0.0
    Sw, mw, Sb = np.empty((c + 1, c + 1)), np.empty(c + 1), np.empty(c + 1)
    for i in range(n):
        t, _, ch = _inner_ep_site(mu[i], C[i], y[i], tau[i], nu[i], tol, max_sweeps, Sw, mw, Sb)
        terms[i] = t
        worst = max(worst, ch)
    return terms, worst


def outer_sites(y, tau, nu):
    """d (c, n), h (c, n) and log constants (n,) of the outer sites (module docstring)."""
    n, cm1 = tau.shape
    c = cm1 + 1
    rows = np.arange(n)
    others = np.array([[j for j in range(c) if j != k] for k in range(c)])[y]  # (n, c-1)
    s1 = 1.0 + tau.sum(axis=1)
    snu = nu.sum(axis=1)
    d = np.zeros((c, n))
    d[y, rows] = 1.0
    d[others.T, rows[None, :]] = tau.T
    h = np.zeros((c, n))
    h[y, rows] = snu / s1
    h[others.T, rows[None, :]] = (-nu + tau * (snu / s1)[:, None]).T
    log_const = -0.5 * np.log(s1) + 0.5 * snu**2 / s1
    return d, h, log_const


def _cavities(mean, S, d, h):
    """Cavity means (n, c) and covariances (n, c, c): N(mean_i, S_i) / site_i."""
    c = d.shape[0]
    D, H = d.T, h.T
    s = D.sum(axis=1)
    T = np.einsum("ij,jk->ijk", D, np.eye(c)) - np.einsum("ij,ik->ijk", D, D) / s[:, None, None]
    A = np.eye(c) - S @ T
    C = np.linalg.solve(A, S)
    m = np.linalg.solve(A, mean.T[:, :, None] - S @ H[:, :, None])[:, :, 0]
    return m, 0.5 * (C + np.transpose(C, (0, 2, 1)))


def _loo_log_z(m, C, y, tau, nu):
    r"""log Zhat_i = log int q_{\i}(f_i) p(y_i | f_i) df_i by the converged inner EP (n,).

    The Gaussian part, int N(t; m_t, V) exp(-t^T T t / 2 + nu^T t) dt over t = B^T w,
    with A = I + T V: -log|A|/2 + nu^T V A^{-1} nu / 2 + m_t^T A^{-1} nu - m_t^T A^{-1} T m_t / 2
    (A is not symmetric: the cross term is m_t^T A^{-1} nu = nu^T A^{-T} m_t).
    """
    n, cm1 = tau.shape
    c = cm1 + 1
    B = np.zeros((n, c + 1, cm1))
    for i in range(n):
        for jj, j in enumerate(j for j in range(c) if j != y[i]):
            B[i, y[i], jj] += 1.0
            B[i, j, jj] -= 1.0
            B[i, c, jj] = 1.0
    Cw = np.zeros((n, c + 1, c + 1))
    Cw[:, :c, :c] = C
    Cw[:, c, c] = 1.0
    mw = np.concatenate([m, np.zeros((n, 1))], axis=1)
    V = np.transpose(B, (0, 2, 1)) @ Cw @ B
    mt = np.einsum("ijk,ij->ik", B, mw)
    A = np.eye(cm1) + tau[:, :, None] * V
    _, logdet = np.linalg.slogdet(A)
    x_nu = np.linalg.solve(A, nu[:, :, None])[:, :, 0]
    x_m = np.linalg.solve(np.transpose(A, (0, 2, 1)), mt[:, :, None])[:, :, 0]  # A^{-T} m_t
    x_tm = np.linalg.solve(A, (tau * mt)[:, :, None])[:, :, 0]
    quad = (0.5 * np.einsum("ij,ijk,ik->i", nu, V, x_nu) + np.sum(nu * x_m, axis=1)
            - 0.5 * np.sum(mt * x_tm, axis=1))
    return -0.5 * logdet + quad


def multinomial_probit_ep(K, y, likelihood=None, params=None, *, state=None, tol=1e-8, max_sweeps=100,
                          damping=0.8, inner_tol=1e-10, inner_max_sweeps=3, with_grad=True,
                          with_loo=True, rough_gradient=False, rough_sweeps=False):
    """Nested EP for the multinomial probit: evidence, its gradient in K and q(f).

    Parameters
    ----------
    K : (c, n, n) prior covariances (or one (n, n), shared by the c classes), or a prior
        structure such as ``structures.multiclass_fitc.MulticlassFITCPrior`` (``dlog_z_dK``
        is then a ``MulticlassFITCGradient``).
    y : (n,) class codes 0..c-1.
    likelihood : a ``MultinomialProbit`` (the default).
    params : must be empty.
    state : a ``MultinomialProbitEPState`` to warm-start from.
    tol : stop when the largest relative change of an inner site parameter in an outer
        sweep is below tol.
    damping : weight of the new inner sites in each outer sweep (1 = undamped).
    inner_tol, inner_max_sweeps : the inner EP's convergence within one outer sweep (warm-started,
        so a few sweeps suffice: the outer test is met only at the inner fixed point too).
    with_grad : compute dlog Z / dK (``dlog_z_dK``, (c, n, n)).
    with_loo : compute ``loo_log_p`` (None otherwise).
    rough_gradient : form every posterior's H_k = L_M^{-1} E_k in single precision
        (``CoupledBlockPosterior``'s ``rough_gradient``, honoured where L_M is well
        conditioned): the site covariances of every sweep and the gradient carry
        single-precision rounding; the factors, log-determinants and means stay double.
        For a sampler's tolerances.
    rough_sweeps : take the sweeps before the sites settle (relative change above
        ``_ROUGH_UNTIL``, while the rough map still makes progress) from single-precision
        posteriors (``CoupledBlockPosterior(rough=True, rough_covariances=True)``); the last
        sweeps, the evidence and the gradient stay exact (module docstring).

    Returns
    -------
    ApproximationResult with a = b (the posterior mean is K_k b_k), mean (c, n), var
    (n, c, c) the posterior covariance of each observation's c latent values, and
    loo_log_p = log Zhat_i (the tilted normalisers, Opper & Winther 2000).

    Examples
    --------
    >>> import numpy as np, pymc_gpc
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(60, 2))
    >>> y = np.digitize(X[:, 0], [-0.5, 0.5])
    >>> K = np.exp(-0.5 * ((X[:, None] - X[None]) ** 2).sum(-1))
    >>> res = pymc_gpc.multinomial_probit_ep(np.stack([2.0 * K] * 3), y)
    """
    likelihood = MultinomialProbit() if likelihood is None else likelihood
    if not isinstance(likelihood, MulticlassLikelihood) or "ep" not in likelihood.approximations:
        raise ValueError(f"multinomial_probit_ep needs a multi-class likelihood with an EP approximation "
                         f"(MultinomialProbit), got {likelihood!r}")
    if params is not None:
        likelihood.check_params(params)
    if not 0.0 < damping <= 1.0:
        raise ValueError(f"damping must be in (0, 1], got {damping}")
    K, y = check_multiclass_inputs(K, y, likelihood.n_classes)
    c, n = (K.c if is_structure(K) else K.shape[0]), y.size
    if state is None:
        tau, nu = np.zeros((n, c - 1)), np.zeros((n, c - 1))
    else:
        tau, nu = np.array(state.tau, dtype=float), np.array(state.nu, dtype=float)
        if tau.shape != (n, c - 1) or nu.shape != (n, c - 1):
            raise WarmStartMismatch(f"warm-start state has shape {tau.shape}, data needs {(n, c - 1)}")
    change, sweeps, post = np.inf, 0, None
    rough = rough_sweeps and not is_structure(K)
    best, stalled = np.inf, 0  # the rough sweeps' smallest change, and sweeps since it fell
    aa = Anderson(ANDERSON_MEMORY)
    while sweeps < max_sweeps:
        sweeps += 1
        post, b, mean, S, d, h = _posterior(K, y, tau, nu, rough_gradient, rough)
        rough = rough and post.rough
        m, C = _cavities(mean, S, d, h)
        new_tau, new_nu = tau.copy(), nu.copy()
        _inner_ep_all(m, C, y, new_tau, new_nu, inner_tol, inner_max_sweeps)
        new_tau = damping * new_tau + (1.0 - damping) * tau
        new_nu = damping * new_nu + (1.0 - damping) * nu
        change = float(max(np.max(np.abs(new_tau - tau) / (1.0 + np.abs(new_tau))),
                           np.max(np.abs(new_nu - nu) / (1.0 + np.abs(new_nu)))))
        if change <= tol and not rough:
            break  # converged: the posterior in hand, at the sites (tau, nu) it was built from, is returned
        if rough:
            if not np.isfinite(change):
                rough = False  # redo this sweep exactly
                continue
            best, stalled = (change, 0) if change < best else (best, stalled + 1)
            rough = change > _ROUGH_UNTIL and stalled < _ROUGH_STALL  # else the remaining sweeps exact
        if not np.isfinite(change) or sweeps == max_sweeps:
            tau, nu = new_tau, new_nu  # the map's value, not an extrapolation
            post = None
            break
        g = np.concatenate([new_tau.ravel(), new_nu.ravel()])
        x = aa.step(g, g - np.concatenate([tau.ravel(), nu.ravel()]))
        tau, nu = x[:tau.size].reshape(tau.shape), x[tau.size:].reshape(nu.shape)
        if np.min(tau) < 0.0 <= np.min(new_tau) or not np.all(np.isfinite(x)):
            aa.reset()  # the extrapolation left the map's domain: take the map's value
            tau, nu = new_tau, new_nu
    if post is None:
        post, b, mean, S, d, h = _posterior(K, y, tau, nu, rough_gradient)
        m, C = _cavities(mean, S, d, h)
    # the site terms at the returned sites (those the posterior was built from)
    terms, _ = _inner_ep_all(m, C, y, tau.copy(), nu.copy(), np.inf, 0)
    log_const = outer_sites(y, tau, nu)[2]
    log_z = float(-post.half_logdet_B() + 0.5 * np.sum(h * mean) + np.sum(log_const) + np.sum(terms))
    dK = None
    if with_grad:
        dK = post.kernel_gradient([(b, b, 0.5)], -0.5)
    return ApproximationResult(
        method="ep-multinomial-probit",
        log_z=log_z,
        dlog_z_dK=dK,
        dlog_z_dparams=np.zeros(0) if with_grad else None,
        a=b,
        posterior=post,
        mean=mean,
        var=S,
        state=MultinomialProbitEPState(tau, nu),
        n_iter=sweeps,
        converged=change <= tol,
        max_change=change,
        loo_log_p=_loo_log_z(m, C, y, tau, nu) + terms if with_loo else None,
    )


def _posterior(K, y, tau, nu, rough_gradient=False, rough=False):
    """q(f) from the inner sites: (posterior, b, mean (c, n), site covariances, d, h); with
    ``rough``, from single-precision factors where they can be had (``post.rough``)."""
    d, h, _ = outer_sites(y, tau, nu)
    options = {"rough": True, "rough_covariances": True} if rough else {}
    post = coupled_posterior(K, d, rough_gradient=rough_gradient, **options)
    b = post.weights(h)
    mean = post.K_times(b)
    return post, b, mean, post.site_covariances(), d, h
