r"""The sequential online approximation, ADF (Csato et al. 2000, sec. 5, eq. 10-12).

After t examples the posterior process is the Gaussian process

.. math::

    \langle a(x) \rangle_t = \sum_j K(x, x_j)\, \alpha_j, \qquad
    K_t(x, x') = K(x, x') + \sum_{ij} K(x, x_i)\, C_{ij}\, K(x_j, x'),

from alpha = 0, C = 0. Including example t+1 with k = K[:, t+1], cavity N(mu, s^2),
mu = k^T alpha, s^2 = K_{t+1,t+1} + k^T C k, Z = <p(y_{t+1} | a)>_t, g = d log Z / d mu and
gamma = d^2 log Z / d mu^2 (eq. 11-12; the printed q^(2) is the second derivative):

.. math::

    s = C k + e_{t+1}, \qquad \alpha \leftarrow \alpha + g\, s, \qquad
    C \leftarrow C + \gamma\, s s^T.

The first pass costs about (2/3) n^3 flops; its evidence is log p(D) ~ sum_t log Z_t.

**Repeated sweeps** are sequential EP (Minka 2001): a revisit removes the example's site
(tau_i, nu_i) and re-includes it from the cavity. A site change (d tau, d nu), with
sigma^2 = K_ii + k^T C k, marginal mean mu_i and c = d tau / (1 + d tau sigma^2), is

.. math::

    \alpha \leftarrow \alpha + s\,[d\nu (1 - c \sigma^2) - c \mu_i], \qquad
    C \leftarrow C - c\, s s^T,

(eq. 12 for a first inclusion: c = -gamma). After more than one sweep log_z is EP's
(``ep.ep_log_z``).

**No gradient**: the online evidence is not stationary, and its adjoint would need third
and fourth derivatives of log Z_t that the likelihood contract does not provide. ``adf``
returns ``dlog_z_dK = dlog_z_dparams = None``, and ``ApproxMarginalOp``'s gradient raises
naming ADF.
"""

import numpy as np
from numba import njit

from .ep import (EPState, _cavities, _cavity_floor, _rank_one_site_update, _update_site,
                 checked_dense_inputs, ep_log_z)
from ..structures.dense import latent_posterior
from .result import ApproximationResult

@njit(nogil=True, fastmath=True, cache=True)
def _c_times_k(C, K, i, m, s):
    """s[:m] = C[:m, :m] K[i, :m] (K symmetric, read by rows); returns k^T C k (finite
    arithmetic only, so fastmath is safe).
    """
    quad = 0.0
    for j in range(m):
        acc = 0.0
        for l in range(m):
            acc += C[j, l] * K[i, l]
        s[j] = acc
        quad += K[i, j] * acc
    return quad


@njit(nogil=True, cache=True)
def _steps(kind, K, y, th, alpha, C, tau, nu, log_z, start, stop, first):
    """Include (first pass: C and alpha are zero outside the leading i x i block) or revisit
    sites start..stop-1 of likelihood ``kind``; returns the site change.
    """
    n = y.shape[0]
    change = 0.0
    s = np.empty(n)
    for i in range(start, stop):
        m = i + 1 if first else n
        s2 = K[i, i] + _c_times_k(C, K, i, m, s)
        mu = 0.0
        for j in range(m):
            mu += K[i, j] * alpha[j]
        s[i] += 1.0
        s2 = max(s2, 1e-300)
        floor = _cavity_floor(tau.min(), K[i, i], s2)
        tau_new, nu_new, d, _, _, log_z[i], _, _, _ = _update_site(kind, y[i], mu, s2, tau[i], nu[i], floor, th, 1.0)
        change = max(change, d)
        _rank_one_site_update(tau_new - tau[i], nu_new - nu[i], s2, mu, s, alpha, C, m)
        tau[i] = tau_new
        nu[i] = nu_new
    return change


class OnlineState:
    """The online posterior (alpha, C) and the sites (tau, nu) it is made of."""

    def __init__(self, n):
        self.alpha = np.zeros(n)
        self.C = np.zeros((n, n))
        self.tau = np.zeros(n)
        self.nu = np.zeros(n)
        self.log_z = np.zeros(n)


def adf(
    K,
    y,
    likelihood,
    params=None,
    *,
    sweeps=1,
    tol=1e-8,
    state=None,
    with_grad=False,
    with_loo=True,
):
    """One online pass through the data (ADF), optionally followed by EP revisits.

    Parameters
    ----------
    K, y, likelihood, params : as for ``pymc_gpc.ep``; examples are taken in order.
    sweeps : number of passes. 1 is the paper's online algorithm and its evidence
        sum_t log Z_t; with more, revisits remove the old site first (EP), they stop
        early once the site change is below ``tol``, and log_z is EP's log Z.
    state : ignored (accepted for the common interface): the online pass always
        starts from the prior, because its result depends on where it starts.
    with_grad : ignored; the result never carries a gradient (module docstring).
    with_loo : return ``loo_log_p`` (free here; None otherwise).

    Returns
    -------
    ApproximationResult
        With ``dlog_z_dK`` and ``dlog_z_dparams`` None.

    Examples
    --------
    >>> import numpy as np, pymc_gpc
    >>> from pymc_gpc.likelihoods import Probit
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(50, 2))
    >>> y = np.where(X[:, 0] > 0, 1, -1)
    >>> K = np.exp(-0.5 * ((X[:, None] - X[None]) ** 2).sum(-1))
    >>> online = pymc_gpc.adf(2.0 * K, y, Probit())            # one pass
    >>> revisited = pymc_gpc.adf(2.0 * K, y, Probit(), sweeps=20)  # converges to EP
    """
    if int(sweeps) != sweeps or sweeps < 1:
        raise ValueError(f"sweeps must be a positive integer, got {sweeps}")
    K, y, th = checked_dense_inputs(K, y, likelihood, params)
    kind = likelihood.kind
    n = y.shape[0]
    st = OnlineState(n)
    _steps(kind, K, y, th, st.alpha, st.C, st.tau, st.nu, st.log_z, 0, n, True)
    online_log_z = float(np.sum(st.log_z))
    done, change = 1, np.inf
    while done < sweeps:
        change = _steps(kind, K, y, th, st.alpha, st.C, st.tau, st.nu, st.log_z, 0, n, False)
        done += 1
        if change < tol:
            break
    post = latent_posterior(K, st.tau)
    var, mean, _, tau_c, nu_c = _cavities(post, st.tau, st.nu)
    tilted = likelihood.tilted(y, nu_c / tau_c, 1.0 / tau_c, th)
    if done == 1:
        log_z, method = online_log_z, "adf"
    else:
        log_z, method = ep_log_z(post, st.tau, st.nu, mean, tau_c, nu_c, tilted.log_z), "adf-ep"
    return ApproximationResult(
        method=method,
        log_z=log_z,
        dlog_z_dK=None,
        dlog_z_dparams=None,
        a=st.alpha,
        posterior=post,
        mean=K @ st.alpha,
        var=var,
        state=EPState(st.tau, st.nu),
        n_iter=done,
        converged=True if sweeps == 1 else bool(change < tol),
        max_change=float(change) if done > 1 else 0.0,
        loo_log_p=tilted.log_z if with_loo else None,
    )


def adf_path(K, y, likelihood, params=None, *, sweeps=1):
    """Yield (sweep, i, alpha) after every single update, for online learning curves.

    ``alpha`` is a copy of the representer weights after example i was included
    (sweep 0) or revisited (later sweeps); the predictive mean is K(x, X) alpha.
    """
    K, y, th = checked_dense_inputs(K, y, likelihood, params)
    kind = likelihood.kind
    n = y.shape[0]
    st = OnlineState(n)
    for sweep in range(sweeps):
        for i in range(n):
            _steps(kind, K, y, th, st.alpha, st.C, st.tau, st.nu, st.log_z, i, i + 1, sweep == 0)
            yield sweep, i, st.alpha.copy()
