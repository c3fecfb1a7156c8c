r"""Sequential EP in JAX (``ep._sequential``): the last retry of the dense EP schedule.

Sites are updated one at a time in site order, each from the current posterior, which
moves along the column s = Sigma_{:, i} after every site (R&W Alg. 3.5; the rank-one form of
``ep._rank_one_site_update``):

.. math::

    c = \frac{\Delta\tau_i}{1 + \Delta\tau_i \Sigma_{ii}}, \qquad
    \mu \leftarrow \mu + s\,[\Delta\nu_i (1 - c\,\Sigma_{ii}) - c\,\mu_i], \qquad
    \Sigma \leftarrow \Sigma - c\, s s^T .

After every sweep Sigma is recomputed from the sites through the structure's factorisation
(halving the step towards the previous sites while K^-1 + S is indefinite, up to 20 times,
then clipping negative precisions to zero: ``ep._proper_posterior``). A sweep whose site
change is not finite is undone and ends the run (not converged), as in ``ep._sequential``.
The sweeps are a ``lax.while_loop`` and the sites of one sweep a ``lax.fori_loop``: O(n^2)
per site, O(n^3) per sweep, the same order as a parallel sweep.

The structure ``S`` is that of ``engine.py`` (``factor``, ``cov``, ``prior_var``).
"""

import jax
import jax.numpy as jnp

from . import likelihoods as lik
from .common import MIN_CAVITY_FRACTION, factor_ok

MAX_HALVINGS = 20  # ep._proper_posterior


def _site(kind, y, th, damping, prior_var, i, carry):
    """Update site i from (Sigma, mu) and move the posterior along Sigma_{:, i} (module docstring)."""
    Sigma, mu, tau, nu, change = carry
    s_ii = jnp.maximum(Sigma[i, i], 1e-300)
    floor = jnp.where(jnp.min(tau) >= 0.0, 1.0 / prior_var[i], MIN_CAVITY_FRACTION / s_ii)  # ep._cavity_floor
    tau_c = jnp.maximum(1.0 / s_ii - tau[i], floor)
    nu_c = mu[i] / s_ii - nu[i]
    t = lik.tilted(kind, y[i][None], (nu_c / tau_c)[None], (1.0 / tau_c)[None], th)
    alpha, gamma = t[1, 0], t[2, 0]
    denom = 1.0 + gamma / tau_c
    tau_new = damping * (-gamma / denom) + (1.0 - damping) * tau[i]
    nu_new = damping * ((alpha - gamma * nu_c / tau_c) / denom) + (1.0 - damping) * nu[i]
    d = jnp.maximum(jnp.abs(tau_new - tau[i]) * s_ii, jnp.abs(nu_new - nu[i]) * jnp.sqrt(s_ii))
    change = jnp.where(jnp.isfinite(d), jnp.maximum(change, d), jnp.inf)
    d_tau, d_nu = tau_new - tau[i], nu_new - nu[i]
    c = d_tau / (1.0 + d_tau * s_ii)
    s = Sigma[:, i]
    mu = mu + s * (d_nu * (1.0 - c * s_ii) - c * mu[i])
    Sigma = Sigma - c * jnp.outer(s, s)
    return Sigma, mu, tau.at[i].set(tau_new), nu.at[i].set(nu_new), change


def _proper_posterior(S, tau_old, nu_old, tau, nu):
    """The factorisation at the new sites, halving the step while it fails (``ep._proper_posterior``)."""

    def halve(c):
        t, v, _, k = c
        t, v = 0.5 * (tau_old + t), 0.5 * (nu_old + v)
        return t, v, S.factor(t), k + 1

    tau, nu, F, k = jax.lax.while_loop(lambda c: ~factor_ok(c[2]) & (c[3] < MAX_HALVINGS), halve,
                                       (tau, nu, S.factor(tau), jnp.array(0, jnp.int64)))
    clipped = jnp.maximum(tau, 0.0)
    return jax.lax.cond(factor_ok(F), lambda: (tau, nu, F), lambda: (clipped, nu, S.factor(clipped)))


def sequential_fixed_point(S, kind, y, th, *, tol, max_sweeps, damping):
    """Sequential EP from zero sites, at most ``max_sweeps`` sweeps (may be traced: 0 runs none).

    Returns (tau, nu, F, change, sweeps, failed): the sites, the factorisation there, the
    last sweep's site change (inf before the first sweep or after a non-finite one), the
    sweeps run and whether the factorisation failed.
    """
    n = y.shape[0]
    zeros = jnp.zeros(n, jnp.float64)
    prior_var = S.prior_var()
    damping = jnp.asarray(damping, jnp.float64)
    state = (zeros, zeros, S.factor(zeros), jnp.array(jnp.inf, jnp.float64), jnp.array(0, jnp.int64),
             jnp.array(False))

    def keep_going(s):
        _, _, F, change, sweeps, stop = s
        return ~(change < tol) & ~stop & factor_ok(F) & (sweeps < max_sweeps)

    def body(s):
        tau, nu, F, _, sweeps, _ = s
        Sigma = S.cov(F)
        carry = (Sigma, Sigma @ nu, tau, nu, jnp.array(0.0, jnp.float64))
        _, _, tau_n, nu_n, change = jax.lax.fori_loop(
            0, n, lambda i, c: _site(kind, y, th, damping, prior_var, i, c), carry)
        finite = jnp.isfinite(change)
        tau_n, nu_n, F_n = _proper_posterior(S, tau, nu, tau_n, nu_n)
        keep = jax.tree_util.tree_map(lambda new, old: jnp.where(finite, new, old), (tau_n, nu_n, F_n), (tau, nu, F))
        return (*keep, change, sweeps + 1, ~finite)

    tau, nu, F, change, sweeps, _ = jax.lax.while_loop(keep_going, body, state)
    return tau, nu, F, change, sweeps, ~factor_ok(F)
