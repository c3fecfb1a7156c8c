r"""EP and Laplace with the FITC prior in JAX: the evidence and its exact gradient in
(K_uu, K_uf, diag K_ff, theta), O(n m^2) time and O(n m) memory.

The JAX backend of the evidence and predictive Ops on the "fitc" structure (``ops.ApproxMarginalOp``, ``ops.LatentPredictiveOp``): the
same prior, posterior and gradient as ``structures.fitc`` (Snelson & Ghahramani 2006;
Naish-Guzman & Holden 2008), the same EP sweep and Newton loop as the dense JAX engine
(``common.py``: Anderson-accelerated parallel EP, Laplace with backtracking), so the same
fixed points as the numba path. With V = L_uu^-1 K_uf and Lambda = diag(k_ff - diag V^T V)
(clipped at 0), K~ = V^T V + Lambda; at site precisions w, d = w / (1 + w Lambda),
A = I + V diag(d) V^T = L_A L_A^T, and every quantity EP and Newton need is an m x n
product (``structures.fitc`` module docstring):

* half log|B| = (1/2) sum log(1 + w Lambda) + sum log diag L_A;
* diag Sigma = g Lambda + g^2 ||L_A^-1 V_i||^2 with g = 1 / (1 + w Lambda);
* (I + W K~)^-1 v = g v - d V^T A^-1 V (g v).

Gradient. With G = dlog Z / dK~ (EP: (b b^T - R)/2, R = (K~ + W^-1)^-1; Laplace: its
implicit term added, ``laplace._gradient``), d/dV tr(G K~) = 2 V G and d/dLambda = diag G,
where V G needs only V R = A^-1 V diag(d) (as V D V^T = A - I). Those two cotangents are
pulled back through the prior's construction (K_uu, K_uf, k_ff) -> (V, Lambda) by
``jax.vjp`` (the triangular solve, the Cholesky factor of K_uu, the clipping of Lambda):
the chain rule of ``structures.fitc``'s dK_uu = -Bu G' Bu^T, dK_uf = 2 Bu G', dk_ff = diag G
without forming G. The function's ``jax.custom_vjp`` returns cotangent x that gradient,
never automatic differentiation through the EP or Newton loop.

K_uu: symmetrised, and factorised with the smallest jitter of 0, 1e-10, ..., 1e-2 x its
mean diagonal that gives a finite factor (``structures.fitc._chol_with_jitter``); the
gradient is that of K_uu + jitter I. None: status 2.

Likelihoods (binary and ordinal) and failure semantics as ``engine``: status 0 converged,
1 not converged (value used), 2 failed (-inf, zero gradient, loo -inf). EP's retry for a
log-concave likelihood differs from the numba Op's (damping 0.5 then 0.25): one damped phase
from zero sites (damping 0.5, twice the sweeps), as the dense engine. For one that is not
(the step likelihood), the numba schedule itself, every run made: ``_highest_converged_run``.

``constrain``: an optional function applied to every array with one axis over the n
training points (``sharding.py``: a ``with_sharding_constraint`` that splits that axis
over a device mesh; XLA then turns the m x m reductions over the points into collective
sums).
"""

from functools import partial

import jax
import jax.numpy as jnp
from jax.scipy.linalg import cho_solve, solve_triangular

from ...approximations import registry
from . import likelihoods as lik
from ...approximations.ep import ep
from ...approximations.laplace import laplace
from .common import (JaxSolver, evidence_with_vjp, solver_table, bind_solver, ANDERSON_MEMORY, MIN_RELATIVE_VAR, STATUS_FAILED, ep_log_z, factor_ok, finish_outputs,
                     ep_fixed_point, highest_converged, laplace_loo, newton_mode)

jax.config.update("jax_enable_x64", True)

_JITTER_FALLBACK = (0.0, 1e-10, 1e-8, 1e-6, 1e-4, 1e-2)  # structures.fitc
RETRY_SCHEDULE = ((0.5, 2), (0.25, 4))  # registry.ep_fitc_retries: (damping, sweeps / max_sweeps)


def _no_constraint(x, rows_axis):
    return x


def _jitter(Kuu):
    """The smallest jitter of ``_JITTER_FALLBACK`` (times mean diag K_uu) that gives K_uu a
    finite Cholesky factor (the last one if none does: the factor is then NaN)."""
    m = Kuu.shape[0]
    scale = jnp.maximum(jnp.mean(jnp.diag(Kuu)), 1e-300)
    rel = jnp.asarray(_JITTER_FALLBACK)

    def fails(k):
        L = jnp.linalg.cholesky(Kuu + rel[k] * scale * jnp.eye(m, dtype=Kuu.dtype))
        return ~jnp.all(jnp.isfinite(L)) & (k < len(_JITTER_FALLBACK) - 1)

    k = jax.lax.while_loop(fails, lambda k: k + 1, jnp.array(0, jnp.int64))
    return jax.lax.stop_gradient(rel[k] * scale)


def tri_inverse(L):
    """L^-1 of a lower-triangular m x m factor. The m x n products of FITC multiply by it
    (one matrix product) instead of solving with L: a triangular solve with n right-hand
    sides runs far below the matrix product's rate on a GPU (``benchmarks/gpu_scale.py``)."""
    return solve_triangular(L, jnp.eye(L.shape[0], dtype=L.dtype), lower=True)


def prior_factors(Kuu, Kuf, k_diag, constrain=_no_constraint):
    """(L_uu, V, Lambda) of the FITC prior (module docstring), differentiable in the inputs."""
    Kuu = 0.5 * (Kuu + Kuu.T)
    m = Kuu.shape[0]
    L = jnp.linalg.cholesky(Kuu + _jitter(Kuu) * jnp.eye(m, dtype=Kuu.dtype))
    V = constrain(tri_inverse(L) @ Kuf, 1)
    q = jnp.sum(V * V, axis=0)
    lam = jnp.where(k_diag > q, k_diag - q, 0.0)
    return L, V, lam


class FITCStructure:
    """q(f) under the FITC prior at site precisions w: the structure ``common.py``'s loops
    ask (``structures.fitc.FITCPosterior``). Site precisions of either sign (K~^-1 + W is
    positive definite exactly when 1 + w Lambda > 0 and A is)."""

    nonneg_sites = False

    def __init__(self, V, lam, constrain=_no_constraint):
        self.V, self.lam, self.c = V, lam, constrain
        self.diag = lam + jnp.sum(V * V, axis=0)

    def factor(self, w):
        V, c = self.V, self.c
        denom = 1.0 + w * self.lam
        g = 1.0 / denom
        d = w * g
        m = V.shape[0]
        L_A = jnp.linalg.cholesky(jnp.eye(m, dtype=V.dtype) + (V * d) @ V.T)
        L_A_inv = tri_inverse(L_A)
        C = c(L_A_inv @ V, 1)
        half_logdet = 0.5 * jnp.sum(jnp.log(denom)) + jnp.sum(jnp.log(jnp.diag(L_A)))
        return {"half_logdet": half_logdet, "M": L_A, "M_inv": L_A_inv, "g": g, "d": d, "C": C,
                "c_sq": jnp.sum(C * C, axis=0)}

    def var(self, F):
        var = F["g"] * self.lam + F["g"] ** 2 * F["c_sq"]
        return jnp.maximum(var, MIN_RELATIVE_VAR * jnp.maximum(self.diag, 1e-300))

    def _A_solve(self, F, x):
        return cho_solve((F["M"], True), x)

    def low_rank(self, F, s, v):
        """diag(s) V^T A^-1 V diag(s) v."""
        return s * (self.V.T @ self._A_solve(F, self.V @ (s * v)))

    def mean_weights(self, F, v):
        """(K~ b, b), b = g v - d V^T A^-1 V (g v) (``FITCPosterior.mean_and_weights``)."""
        gv = F["g"] * v
        Vt_z = self.V.T @ self._A_solve(F, self.V @ gv)
        b = gv - F["d"] * Vt_z
        return self.lam * b + Vt_z, b

    def matvec(self, v):
        return self.lam * v + self.V.T @ (self.V @ v)

    def prior_var(self):
        return self.diag

    def R_times(self, F, v):
        """(K~ + W^-1)^-1 v."""
        return F["d"] * v - self.low_rank(F, F["d"], v)

    def sigma_times(self, F, v):
        """(K~^-1 + W)^-1 v."""
        return F["g"] * self.lam * v + self.low_rank(F, F["g"], v)

    def cotangents(self, F, outer, scale_R):
        """d tr(G K~) / d(V, Lambda) for G = sum_k c_k (x_k y_k^T + y_k x_k^T)/2 + scale_R R
        (module docstring): 2 V G and diag G."""
        V = self.V
        AVD = F["M_inv"].T @ (F["C"] * F["d"])  # A^-1 V D = V R
        dV = 2.0 * scale_R * AVD
        dlam = scale_R * (F["d"] - F["d"] ** 2 * F["c_sq"])
        for x, y, c in outer:
            dV = dV + c * (jnp.outer(V @ x, y) + jnp.outer(V @ y, x))
            dlam = dlam + c * x * y
        return self.c(dV, 1), dlam


def _kernel_gradient(pullback, S, F, outer, scale_R):
    """d log Z / d(K_uu, K_uf, k_ff): the cotangents in (V, Lambda) pulled back."""
    dV, dlam = S.cotangents(F, outer, scale_R)
    m = S.V.shape[0]
    return pullback((jnp.zeros((m, m), S.V.dtype), dV, dlam))


def _prior(Kuu, Kuf, k_diag, constrain):
    (L, V, lam), pullback = jax.vjp(partial(prior_factors, constrain=constrain), Kuu, Kuf, k_diag)
    return L, FITCStructure(V, lam, constrain), pullback


def _highest_converged_run(S, kind, y, th, *, tol, max_sweeps, damping, memory):
    """``solve.highest_converged`` with the FITC schedule (``registry.ep_fitc_retries``): cold
    parallel runs at ``damping``, at 0.5 with twice the sweeps and at 0.25 with four times,
    all made; the converged one with the highest evidence, marked ``failed`` where none
    converged (status 2). For likelihoods that are not log-concave (``lik.negative_sites``)."""
    runs = []
    for d, k in ((damping, 1), *RETRY_SCHEDULE):
        s = ep_fixed_point(S, kind, y, th, tol=tol, max_sweeps=k * max_sweeps, damping=d, memory=memory,
                           restart=False)
        log_z = ep_log_z(s["F"]["half_logdet"], s["tau"], s["nu"], s["u"])
        good = ~s["failed"] & (s["u"]["change"] < tol) & jnp.isfinite(log_z) & (log_z <= 0.0)
        runs.append({k_: s[k_] for k_ in ("tau", "nu", "F", "u", "failed")} | {"log_z": log_z, "good": good,
                                                                             "sweeps": s["sweeps"]})
    best = highest_converged(runs)
    return {**best, "failed": ~best["good"], "sweeps": sum(r["sweeps"] for r in runs)}


def ep_solve(Kuu, Kuf, k_diag, th, y, *, kind, tol=1e-8, max_sweeps=300, damping=1.0,
             memory=ANDERSON_MEMORY, constrain=_no_constraint):
    """FITC EP (``approximations.ep`` with a ``FITCPrior``). Returns a dict: log_z, dK
    (dKuu, dKuf, dk_diag), dth, loo, n_iter, status, and what prediction needs."""
    y = constrain(y, 0)
    L, S, pullback = _prior(Kuu, Kuf, k_diag, constrain)
    if lik.negative_sites(kind):
        s = _highest_converged_run(S, kind, y, th, tol=tol, max_sweeps=max_sweeps, damping=damping, memory=memory)
    else:
        s = ep_fixed_point(S, kind, y, th, tol=tol, max_sweeps=max_sweeps, damping=damping, memory=memory)
    u, F = s["u"], s["F"]
    log_z = ep_log_z(F["half_logdet"], s["tau"], s["nu"], u)
    dK = _kernel_gradient(pullback, S, F, [(u["b"], u["b"], 0.5)], -0.5)
    dth = jnp.sum(lik.tilted_dparams(kind, y, th, u["tilted"]), axis=0)
    converged = u["change"] < tol
    return finish_outputs(log_z, tuple(dK), dth, u["tilted"][0], s["sweeps"], converged, s["failed"], th, kind,
                   extra={"a": u["b"], "L_uu": L, "S": S, "F": F, "tau": s["tau"], "nu": s["nu"]})


def laplace_solve(Kuu, Kuf, k_diag, th, y, *, kind, tol=1e-10, max_iter=100, constrain=_no_constraint):
    """FITC Laplace (``approximations.laplace`` with a ``FITCPrior``), the gradient with the
    mode's movement (``laplace._gradient``). Returns the dict of ``ep_solve``."""
    y = constrain(y, 0)
    L, S, pullback = _prior(Kuu, Kuf, k_diag, constrain)
    s = newton_mode(S, kind, y, th, tol=tol, max_iter=max_iter)
    a, f, out = s["a"], s["f"], s["out"]
    w = jnp.maximum(-out[2], 0.0)
    F = S.factor(w)
    var = S.var(F)
    log_z = s["psi"] - F["half_logdet"]
    s2 = 0.5 * var * out[3]
    u = s2 - S.R_times(F, S.matvec(s2))
    dK = _kernel_gradient(pullback, S, F, [(a, a, 0.5), (u, a, 1.0)], -0.5)
    sigma_s2 = S.sigma_times(F, s2)
    lp_th, d1_th, d2_th = lik.log_lik_dparams(kind, y, th, out)
    dth = jnp.sum(lp_th, axis=0) + 0.5 * var @ d2_th + sigma_s2 @ d1_th
    loo = laplace_loo(kind, y, th, f, var, w, out[1], S.diag)
    return finish_outputs(log_z, tuple(dK), dth, loo, s["it"], s["converged"], ~factor_ok(F), th, kind,
                   extra={"a": a, "L_uu": L, "S": S, "F": F})


SOLVERS = solver_table({ep: JaxSolver(ep_solve, ("tol", "max_sweeps", "damping", "method")),
                        laplace: JaxSolver(laplace_solve, ("tol", "max_iter"), needs_log_lik=True)})


def solver(approximation, kind, constrain=None, **options):
    """The FITC solver (K_uu, K_uf, k_ff, th, y) -> dict, options bound (EP's
    ``method`` is ignored: FITC's EP is parallel)."""
    registry.check_backend(approximation, "fitc", "jax", "ApproxMarginalOp")
    return bind_solver(SOLVERS, approximation, kind, options, f"FITC {approximation}",
                       constrain=constrain or _no_constraint)


def marginal_fn(approximation, kind, constrain=None, **options):
    """(K_uu, K_uf, k_ff, th, y) -> (log_z, dKuu, dKuf, dk_ff, dth, loo, n_iter, status), the
    outputs of ``ApproxMarginalOp`` on the FITC structure, with a ``custom_vjp``: the cotangent of log_z times the
    returned gradient (the other outputs are treated as constants)."""
    solve = solver(approximation, kind, constrain, **options)

    def outputs(Kuu, Kuf, k_diag, th, y):
        r = solve(Kuu, Kuf, k_diag, th, lik.labels(kind, y))
        return (r["log_z"], *r["dK"], r["dth"], r["loo"], r["n_iter"], r["status"])

    return evidence_with_vjp(outputs, 3)


def predictive_fn(approximation, kind, full_cov=False, constrain=None, **options):
    """(K_uu, K_uf, k_ff, th, y, K_u*, k_** or K_**) -> latent predictive mean and variance
    (or covariance) under q (``FITCPosterior.predict``: f_* = V_*^T z + e_*, Cov(z | y) =
    A^-1); NaN where the approximation failed."""
    solve = solver(approximation, kind, constrain, **options)

    def predict(Kuu, Kuf, k_diag, th, y, Kus, K_star):
        r = solve(Kuu, Kuf, k_diag, th, lik.labels(kind, y))
        S, F = r["S"], r["F"]
        Vs = tri_inverse(r["L_uu"]) @ Kus
        mean = Vs.T @ (S.V @ r["a"])
        Cs = F["M_inv"] @ Vs
        if full_cov:
            cov = K_star - Vs.T @ Vs + Cs.T @ Cs
            second = 0.5 * (cov + cov.T)
        else:
            second = jnp.maximum(K_star - jnp.sum(Vs * Vs, axis=0) + jnp.sum(Cs * Cs, axis=0), 0.0)
        bad = r["status"] == STATUS_FAILED
        return jnp.where(bad, jnp.nan, mean), jnp.where(bad, jnp.nan, second)

    return predict
