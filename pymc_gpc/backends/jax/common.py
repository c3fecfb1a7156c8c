r"""The structure-free parts of the JAX EP and Laplace solvers, shared by the dense engine
(``engine.py``) and the FITC one (``fitc.py``).

The EP sweep (cavities, tilted moments, damped sites: ``ep.parallel_site_update``), the EP
evidence (``ep.stable_log_z``, GPML infEP's stable form of R&W eq. 3.65), Anderson acceleration
(``ep.anderson_step``, Walker & Ni 2011 eq. 1.3), the parallel-EP loop with its restart
phase, the Laplace Newton loop with backtracking (R&W Alg. 3.1), and the failure
convention (``finish_outputs``). They talk to the prior only through a *structure* ``S``:

``S.factor(w)``
    the posterior q(f) at site precisions w, as a dict with at least ``half_logdet``
    (log|B|/2) and ``M`` (the factor whose finiteness says the factorisation worked);
``S.var(F)``
    diag Sigma;
``S.mean_weights(F, v)``
    (K~ b, b) with b = (I + W K~)^{-1} v (the EP/Newton weights);
``S.matvec(v)``, ``S.prior_var()``
    K~ v and diag K~;
``S.nonneg_sites``
    whether the representation needs site precisions >= 0 (negative iterates are clipped).
"""

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from types import MappingProxyType

import jax
import jax.numpy as jnp

from ...approximations import registry
from ...likelihoods.base import laplace_unsupported_message
from . import likelihoods as lik

jax.config.update("jax_enable_x64", True)

STATUS_CONVERGED, STATUS_NOT_CONVERGED, STATUS_FAILED = 0, 1, 2
ANDERSON_MEMORY = 5
MIN_RELATIVE_VAR = 1e-14
MIN_CAVITY_FRACTION = 1e-10


def factor_ok(F):
    return jnp.isfinite(F["half_logdet"]) & jnp.all(jnp.isfinite(F["M"]))


def ep_update(kind, y, th, S, F, tau, nu, damping):
    """Cavities, tilted moments and damped new sites from the posterior F at sites (tau, nu)
    (``ep.parallel_site_update``). Returns a dict with the map's value (tau_g, nu_g), the
    scale-free change, and what the evidence needs at (tau, nu)."""
    var = S.var(F)
    mean, b = S.mean_weights(F, nu)
    prior_var = S.prior_var()
    floor = jnp.where(jnp.min(tau) >= 0.0, 1.0 / prior_var, MIN_CAVITY_FRACTION / var)
    tau_c = jnp.maximum(1.0 / var - tau, floor)
    nu_c = mean / var - nu
    t = lik.tilted(kind, y, nu_c / tau_c, 1.0 / tau_c, th)
    alpha, gamma = t[1], t[2]
    denom = 1.0 + gamma / tau_c
    tau_g = damping * (-gamma / denom) + (1.0 - damping) * tau
    nu_g = damping * ((alpha - gamma * nu_c / tau_c) / denom) + (1.0 - damping) * nu
    d = jnp.maximum(jnp.abs(tau_g - tau) * var, jnp.abs(nu_g - nu) * jnp.sqrt(var))
    change = jnp.where(jnp.all(jnp.isfinite(d)), jnp.max(d), jnp.nan)
    return {"tau_g": tau_g, "nu_g": nu_g, "change": change, "var": var, "b": b, "mean": mean,
            "tau_c": tau_c, "nu_c": nu_c, "tilted": t}


def ep_log_z(half_logdet, tau, nu, u):
    """log Z_EP in GPML infEP's stable form (``ep.stable_log_z``)."""
    tau_c, nu_c, mean = u["tau_c"], u["nu_c"], u["mean"]
    s = tau + tau_c
    terms = (u["tilted"][0] + 0.5 * nu * mean + 0.5 * nu_c * (tau / tau_c * nu_c - 2.0 * nu) / s
             - 0.5 * nu ** 2 / s + 0.5 * jnp.log1p(tau / tau_c))
    return jnp.sum(terms) - half_logdet


def anderson_mix(hist, f, g, memory):
    """Anderson (type II) step g - dG^T gamma, gamma = argmin |f - dF^T gamma| over the
    stored differences (``ep.anderson_step``); unused rows are zero (cut by lstsq)."""
    dF, dG, count = hist["dF"], hist["dG"], hist["count"]
    rcond = jnp.finfo(f.dtype).eps * f.shape[0]
    gamma = jnp.linalg.lstsq(dF.T, f, rcond=rcond)[0]
    return jnp.where(count > 0, g - gamma @ dG, g)


def push_history(hist, f, g, memory):
    """Store f - f_prev and g - g_prev in the ring buffer (nothing on the first step)."""
    slot = hist["count"] % memory
    add = hist["have_prev"]
    dF = jnp.where(add, hist["dF"].at[slot].set(f - hist["f_prev"]), hist["dF"])
    dG = jnp.where(add, hist["dG"].at[slot].set(g - hist["g_prev"]), hist["dG"])
    return {"dF": dF, "dG": dG, "count": hist["count"] + add.astype(hist["count"].dtype),
            "f_prev": f, "g_prev": g, "have_prev": jnp.array(True)}


def empty_history(n, memory, dtype):
    z = jnp.zeros((memory, 2 * n), dtype)
    return {"dF": z, "dG": z, "count": jnp.array(0, jnp.int64), "f_prev": jnp.zeros(2 * n, dtype),
            "g_prev": jnp.zeros(2 * n, dtype), "have_prev": jnp.array(False)}


def reset_history(hist):
    return {**hist, "dF": jnp.zeros_like(hist["dF"]), "dG": jnp.zeros_like(hist["dG"]),
            "count": jnp.zeros_like(hist["count"]), "have_prev": jnp.array(False)}


def ep_fixed_point(S, kind, y, th, *, tol, max_sweeps, damping, memory, tau0=None, nu0=None, restart=True):
    """Parallel EP on structure ``S`` to convergence (``engine`` module docstring: Anderson
    acceleration, restarts, the damped second phase from zero sites, step halving while
    K~^-1 + S is indefinite). Starts from sites (tau0, nu0) (default zero). ``restart=False``:
    no second phase (stop after ``max_sweeps``, fail on a non-finite change; the caller
    runs its own retries, ``engine.ep_solve``).

    Returns the final state: ``tau``, ``nu``, ``F`` (the posterior there), ``u`` (the EP map
    and the cavities there, ``ep_update``), ``sweeps``, ``failed``.
    """
    n = y.shape[0]
    zeros = jnp.zeros(n, jnp.float64)
    tau0 = zeros if tau0 is None else tau0
    nu0 = zeros if nu0 is None else nu0
    F0 = S.factor(tau0)
    state = {"tau": tau0, "nu": nu0, "F": F0, "u": ep_update(kind, y, th, S, F0, tau0, nu0, damping),
             "hist": empty_history(n, memory, jnp.float64), "best": jnp.array(jnp.inf, jnp.float64),
             "sweeps": jnp.array(1, jnp.int64), "phase": jnp.array(0, jnp.int64),
             "phase_sweeps": jnp.array(1, jnp.int64), "damping": jnp.array(damping, jnp.float64),
             "failed": ~factor_ok(F0)}

    restart_ok = restart

    def keep_going(s):
        limit = jnp.where(s["phase"] == 0, max_sweeps, 2 * max_sweeps)
        more = ((s["phase"] == 0) & restart) | (s["phase_sweeps"] < limit)
        return ~(s["u"]["change"] < tol) & ~s["failed"] & more

    def body(s):
        """One sweep: the next sites (Anderson; zero sites when phase 0 is exhausted or gave a
        non-finite change: phase 1, damped), their posterior, and the EP map there."""
        u, tau, nu = s["u"], s["tau"], s["nu"]
        restart = (s["phase"] == 0) & ((s["phase_sweeps"] >= max_sweeps) | ~jnp.isfinite(u["change"])) & restart_ok
        grew = restart | (u["change"] > 1e3 * s["best"])  # residual grew 1000-fold: restart Anderson
        h = jax.lax.cond(grew, reset_history, lambda x: x, s["hist"])
        g = jnp.concatenate([u["tau_g"], u["nu_g"]])
        f = jnp.concatenate([u["var"], jnp.sqrt(u["var"])]) * (g - jnp.concatenate([tau, nu]))
        h = push_history(h, f, g, memory)
        x = anderson_mix(h, f, g, memory) if memory > 0 else g
        astray = ~jnp.all(jnp.isfinite(x)) | ((jnp.min(x[:n]) < 0.0) & (jnp.min(u["tau_g"]) >= 0.0))
        h = jax.lax.cond(astray | restart, reset_history, lambda x: x, h)
        x = jnp.where(restart, 0.0, jnp.where(astray, g, x))
        tau_x, nu_x = x[:n], x[n:]
        if S.nonneg_sites:
            tau_x = jnp.maximum(tau_x, 0.0)
        F = S.factor(tau_x)
        # K^-1 + S indefinite at the new sites (ep._parallel): restart Anderson, and from the
        # plain map's sites halve the step (ep._proper_posterior), clipping after 20 halvings
        indefinite = ~factor_ok(F) & ~restart
        h = jax.lax.cond(indefinite, reset_history, lambda x: x, h)
        tau_x, nu_x = jnp.where(indefinite, u["tau_g"], tau_x), jnp.where(indefinite, u["nu_g"], nu_x)
        F = jax.lax.cond(indefinite, S.factor, lambda t: F, tau_x)

        def halve(c):
            tx, nx, _, k = c
            tx, nx = 0.5 * (tau + tx), 0.5 * (nu + nx)
            return tx, nx, S.factor(tx), k + 1

        tau_x, nu_x, F, _ = jax.lax.while_loop(lambda c: ~factor_ok(c[2]) & (c[3] < 20), halve,
                                               (tau_x, nu_x, F, jnp.array(0, jnp.int64)))
        tau_x = jnp.where(factor_ok(F), tau_x, jnp.maximum(tau_x, 0.0))
        F = jax.lax.cond(factor_ok(F), lambda t: F, S.factor, tau_x)
        damping_x = jnp.where(restart, jnp.asarray(0.5, jnp.float64), s["damping"])
        u_new = ep_update(kind, y, th, S, F, tau_x, nu_x, damping_x)
        phase = jnp.where(restart, 1, s["phase"])
        return {"tau": tau_x, "nu": nu_x, "F": F, "u": u_new, "hist": h,
                "best": jnp.where(restart, jnp.inf, jnp.minimum(s["best"], u["change"])),
                "sweeps": s["sweeps"] + 1, "phase": phase,
                "phase_sweeps": jnp.where(restart, 1, s["phase_sweeps"] + 1), "damping": damping_x,
                "failed": ~factor_ok(F) | (((phase == 1) | (not restart_ok)) & ~jnp.isfinite(u_new["change"]))}

    return jax.lax.while_loop(keep_going, body, state)


def highest_converged(runs):
    """``approximations.solve.highest_converged`` over the dicts ``runs`` (the same keys, arrays
    only; ``good``: converged with a value that passed): of the good runs the one with the
    highest ``log_z``, the first of equals, else the first run (``good`` False: the caller
    reports status 2). Traced: every run has been computed."""
    best = runs[0]
    for r in runs[1:]:
        take = r["good"] & (~best["good"] | (r["log_z"] > best["log_z"]))
        best = jax.tree_util.tree_map(lambda a, b: jnp.where(take, a, b), r, best)
    return best


def newton_mode(S, kind, y, th, *, tol, max_iter, a0=None):
    """Newton on a = K~^-1 f with a backtracking line search (Psi must not decrease; 40
    halvings at most), ``4 * max_iter`` iterations at most, from a0 (default 0).

    Returns the final state: ``a``, ``f`` (K~ a), ``out`` (``lik.log_lik`` at f), ``psi``,
    ``it``, ``converged``.
    """
    n = y.shape[0]

    def psi(a, f, out):
        return jnp.sum(out[0]) - 0.5 * a @ f

    a0 = jnp.zeros(n, jnp.float64) if a0 is None else a0
    f0 = S.matvec(a0)
    out0 = lik.log_lik(kind, y, f0, th)
    state = {"a": a0, "f": f0, "out": out0, "psi": psi(a0, f0, out0), "it": jnp.array(0, jnp.int64),
             "change": jnp.array(jnp.inf, jnp.float64)}

    def converged(s):
        return s["change"] <= tol * (1.0 + jnp.max(jnp.abs(s["f"])))

    def keep_going(s):
        return ~converged(s) & (s["it"] < 4 * max_iter) & jnp.isfinite(s["psi"])

    def body(s):
        a, f, out = s["a"], s["f"], s["out"]
        w = jnp.maximum(-out[2], 0.0)
        F = S.factor(w)
        da = S.mean_weights(F, w * f + out[1])[1] - a

        def trial(step):
            a_try = a + step * da
            f_try = S.matvec(a_try)
            out_try = lik.log_lik(kind, y, f_try, th)
            return a_try, f_try, out_try, psi(a_try, f_try, out_try)

        def shorten(c):
            step, k, *_ = c
            step = 0.5 * step
            return (step, k + 1, *trial(step))

        def worse(c):
            return (c[5] < s["psi"] - 1e-12 * jnp.abs(s["psi"])) & (c[1] < 39)

        one = jnp.asarray(1.0, jnp.float64)
        c = jax.lax.while_loop(worse, shorten, (one, jnp.array(0, jnp.int64), *trial(one)))
        _, _, a_try, f_try, out_try, psi_try = c
        change = jnp.max(jnp.abs(f_try - f))
        change = jnp.where(jnp.isfinite(change), change, jnp.inf)
        return {"a": a_try, "f": f_try, "out": out_try, "psi": psi_try, "it": s["it"] + 1, "change": change}

    s = jax.lax.while_loop(keep_going, body, state)
    return {**s, "converged": converged(s)}


def laplace_loo(kind, y, th, f, var, w, d1, prior_var):
    """LA-LOO (``laplace._loo_log_p``, Vehtari et al. 2016): the cavity of site i of the
    Newton fixed point, the likelihood averaged over it."""
    nu = w * f + d1
    tau_c = jnp.maximum(1.0 / var - w, 1.0 / prior_var)
    mu_c = (f / var - nu) / tau_c
    return lik.tilted(kind, y, mu_c, 1.0 / tau_c, th)[0]


def finish_outputs(log_z, dK, dth, loo, n_iter, converged, failed, th, kind, extra):
    """Status and the failure convention: -inf value, zero gradient, -inf loo. ``dK`` is an
    array or a tuple of arrays (FITC's three kernel inputs)."""
    dKs = dK if isinstance(dK, tuple) else (dK,)
    # log_z <= 0: p(y) <= 1 for discrete labels (``Likelihood.max_log_evidence``)
    ok = (~failed & lik.params_valid(kind, th) & jnp.isfinite(log_z) & (log_z <= 0.0)
          & jnp.all(jnp.asarray([jnp.all(jnp.isfinite(g)) for g in dKs])) & jnp.all(jnp.isfinite(dth)))
    status = jnp.where(ok, jnp.where(converged, STATUS_CONVERGED, STATUS_NOT_CONVERGED), STATUS_FAILED)
    zeroed = tuple(jnp.where(ok, g, 0.0) for g in dKs)
    return {
        "log_z": jnp.where(ok, log_z, -jnp.inf),
        "dK": zeroed if isinstance(dK, tuple) else zeroed[0],
        "dth": jnp.where(ok, dth, 0.0),
        "loo": jnp.where(ok, loo, -jnp.inf),
        "n_iter": n_iter.astype(jnp.int64),
        "status": status.astype(jnp.int64),
        **extra,
    }


@dataclass(frozen=True)
class JaxSolver:
    """The JAX twin of one of the registry's solvers: ``solve`` and the options it takes.
    ``needs_log_lik``: it calls the likelihood's ``log_lik`` (Laplace's Newton steps)."""

    solve: Callable
    options: tuple
    needs_log_lik: bool = False


def solver_table(twins):
    """{approximation name: JaxSolver} from the registry: each entry that lists the JAX
    backend and whose solver for some likelihood family (``Solver.solve``, the numba one) has a
    twin in ``twins`` (a table serves one family: the binary, ordinal or multi-class engine)."""
    return MappingProxyType({a.name: twins[s.solve] for a in registry.APPROXIMATIONS.values()
                             if "jax" in a.backends for s in a.solvers.values() if s.solve in twins})


def checked_options(solvers, approximation, options, label):
    """``solvers[approximation]`` and ``options``, or ValueError for an approximation the table
    lacks or an option outside its ``JaxSolver.options``."""
    if approximation not in solvers:
        raise ValueError(f"the JAX backend's solvers here are {sorted(solvers)}, got {approximation!r}")
    unknown = set(options) - set(solvers[approximation].options)
    if unknown:
        raise ValueError(f"the JAX backend's {label} does not take options {sorted(unknown)}")
    return solvers[approximation], options


def bind_solver(solvers, approximation, kind, options, label, **bound):
    """``solvers[approximation].solve`` (a ``solver_table``) with likelihood ``kind``, ``bound``
    and ``options`` bound.

    ValueError for a likelihood without ``log_lik`` under a solver that needs it (the step
    likelihood under Laplace) and for options the solver does not take; EP's ``method`` is
    accepted and dropped (the JAX EP is parallel, with the same fixed point as the
    sequential schedule).
    """
    twin, options = checked_options(solvers, approximation, options, label)
    if twin.needs_log_lik and not lik.supports_laplace(kind):
        raise ValueError(laplace_unsupported_message(lik.KINDS[kind]()))
    options = {k: v for k, v in options.items() if k != "method"}
    return partial(twin.solve, kind=kind, **bound, **options)


def evidence_with_vjp(outputs, n_kernels):
    """``outputs(*kernels, th, y)`` -> (log_z, *d log_z/d kernels, d log_z/d th, loo, n_iter,
    status) wrapped in a ``custom_vjp``: the cotangent of log_z times the returned gradient
    (the other outputs are treated as constants), never differentiation through the loops."""

    @jax.custom_vjp
    def marginal(*args):
        return outputs(*args)

    def fwd(*args):
        out = outputs(*args)
        return out, (out[1:2 + n_kernels], args[-1])

    def bwd(res, cts):
        grads, y = res
        return (*(cts[0] * g for g in grads), jnp.zeros_like(y))

    marginal.defvjp(fwd, bwd)
    return marginal
