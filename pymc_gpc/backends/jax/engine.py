r"""EP and Laplace in JAX: the approximate marginal likelihood with its exact gradient.

The JAX backend of ``ep.py`` and ``laplace.py`` (same iterations, same fixed points, same
gradients), for PyMC's JAX samplers (numpyro, blackjax), ``pytensor.function(...,
mode="JAX")`` and accelerators. Imports only jax and numpy (and the likelihoods'
``backends.jax.likelihoods``), so it runs on a machine without PyMC. Float64 throughout: importing
this module sets ``jax_enable_x64`` (PyTensor's JAX backend does the same for floatX
float64).

``marginal_fn(approximation, kind, n_params, **options)`` returns a pure function
(K, theta, y) -> (log_z, dlog_z_dK, dlog_z_dtheta, loo, n_iter, status) wrapped in
``jax.custom_vjp``: its backward pass is cotangent x the gradient computed with the
value at the fixed point (``ep.py`` and ``laplace._gradient`` derive it), never
automatic differentiation through the EP or Newton loop. ``jax.jit``, ``jax.vmap``
(vectorised chains) and ``jax.grad`` all apply.

``kind`` is a likelihood of ``backends.jax.likelihoods``: a binary one (labels -1/+1, any
label above 0 counting as +1) or an ordinal one (labels 0..K-1, theta the K-1 cutpoints and,
for the ordered probit, sigma; the gradient in each of them is the sum of the sites'
derivatives in their two cutpoints and sigma, ``likelihoods.tilted_dparams`` /
``log_lik_dparams``).

Loops are ``lax.while_loop`` with a sweep limit:

* **EP**, parallel updates (all sites from one posterior, then one Cholesky of
  B = I + S^1/2 K S^1/2), Anderson-accelerated as ``ep._parallel_compiled`` (memory 5,
  restarts on a 1000-fold residual growth or an iterate with negative or non-finite
  sites; an iterate that makes K^-1 + S indefinite restarts it and the plain map's step is
  halved, up to 20 times, as ``ep._parallel``), with the numba path's retry schedule
  (``registry.ep_dense_retries``): if ``max_sweeps`` pass without convergence, parallel EP
  from zero sites with damping 0.5 and twice the sweeps, then sequential EP
  (``sequential_ep``) with damping 0.7 and twice the sweeps; a retry replaces the result
  when it is finite (``ep_solve``). The step likelihood, whose sites may be negative, uses
  the representation through chol(K) of ``structures.dense.IndefiniteSitePosterior``
  (K + 1e-10 mean(diag K) I, as there) throughout, as numba's ``ep.IndefiniteSitePrior``.
  That likelihood is not log-concave, and on duplicated inputs with conflicting labels EP
  can have several fixed points, or none that a run reaches: every run of the schedule is
  made and the converged one with the highest evidence kept, status 2 where none converged
  (``_highest_converged_solve``, numba's ``solve.highest_converged``). Runs that wander for
  hundreds of sweeps before converging can still end apart from numba's (rounding decides:
  ``scripts/fuzz.py``'s ``rounding_spread``).
* **Laplace**: Newton on a = K^-1 f with a backtracking line search (Psi must not
  decrease; 40 halvings at most), ``4 * max_iter`` iterations at most (the numba path's
  retry limit).

Every call starts cold (zero sites, a = 0): a pure function cannot keep the numba path's
per-thread warm starts. Anderson acceleration keeps cold EP to few sweeps on
Pima-sized problems (``benchmarks/results/jax_backend.md``: EP sweeps per draw;
``docs/design/engine_notes.md``).

Status: 0 converged, 1 not converged (value used), 2 failed (a non-finite value, a
likelihood parameter out of range, a kernel without a Cholesky factor): log_z = -inf,
zero gradient, loo = -inf, so a sampler rejects the point and its gradient stays finite.
"""


import jax
import jax.numpy as jnp
from jax.scipy.linalg import cho_solve, solve_triangular

from ...approximations import registry
from . import likelihoods as lik
from ...approximations.ep import ep
from ...approximations.laplace import laplace
from .common import (JaxSolver, evidence_with_vjp, solver_table, ANDERSON_MEMORY, MIN_RELATIVE_VAR, STATUS_FAILED, bind_solver, ep_fixed_point,
                     ep_log_z, ep_update, factor_ok, finish_outputs, highest_converged, laplace_loo, newton_mode)
from .sequential_ep import sequential_fixed_point

jax.config.update("jax_enable_x64", True)

IDENTITY_MIN = 1e-4  # structures.dense: below this w_i K_ii, Sigma_ii directly
_DIRECT_COLUMNS = 128  # at most this many sites per sweep get the direct formula (_var_nonneg)
_INDEFINITE_JITTER = 1e-10
RETRY_DAMPING = (0.5, 0.7)  # registry.ep_dense_retries: the damped parallel, then the sequential retry


# ---------------------------------------------------------------------------------
# q(f) = N(K b, (K^-1 + diag(w))^-1) for given site precisions w (structures/dense.py)
# ---------------------------------------------------------------------------------


def _factor_nonneg(K, w):
    """w >= 0: B = I + W^1/2 K W^1/2 = L L^T. Returns (half log|B|, Li = L^-1, sw); NaN if it fails."""
    sw = jnp.sqrt(jnp.maximum(w, 0.0))
    n = K.shape[0]
    L = jnp.linalg.cholesky(jnp.eye(n, dtype=K.dtype) + sw[:, None] * K * sw[None, :])
    Li = solve_triangular(L, jnp.eye(n, dtype=K.dtype), lower=True)
    return jnp.sum(jnp.log(jnp.diag(L))), Li, sw


def _var_nonneg(K, w, Li, sw):
    """diag(Sigma) from L^-1: (1 - (B^-1)_jj) / w_j, except at sites with 0 < w_j K_jj < 1e-4,
    where that subtraction would lose digits and K_jj - |L^-1 W^1/2 K_:j|^2 is used
    (structures.dense.marginal_variances), and w_j = 0, where Sigma_jj = K_jj.

    Static shapes: the direct formula is computed for the ``_DIRECT_COLUMNS`` sites with the
    smallest w_j K_jj (one triangular product with that many columns, O(n^2) each), not for
    all n (a full n x n product, as expensive as the factorisation). Beyond that many such
    sites, the others keep the identity, with a relative error of about 1e-16 / (w_j K_jj)
    in their variance.
    """
    kd = jnp.diag(K)
    wk = w * kd
    binv = jnp.sum(Li * Li, axis=0)
    var = jnp.where(w > 0.0, (1.0 - binv) / jnp.where(w > 0.0, w, 1.0), kd)
    k = min(_DIRECT_COLUMNS, K.shape[0])
    small = (wk > 0.0) & (wk < IDENTITY_MIN)

    def direct(var):
        idx = jax.lax.top_k(-jnp.where(small, wk, jnp.inf), k)[1]
        V = Li @ (sw[:, None] * K[:, idx])
        fix = small[idx]
        return var.at[idx].set(jnp.where(fix, kd[idx] - jnp.sum(V * V, axis=0), var[idx]))

    var = jax.lax.cond(jnp.any(small), direct, lambda v: v, var)
    return jnp.maximum(var, MIN_RELATIVE_VAR * jnp.maximum(kd, 1e-300))


class _DenseKernel:
    """What both dense representations of q(f) share: products with the prior K."""

    def mean_weights(self, F, v):
        b = self.weights(F, v)
        return self.K @ b, b

    def matvec(self, v):
        return self.K @ v

    def prior_var(self):
        return jnp.diag(self.K)


class DenseLatent(_DenseKernel):
    """The linear algebra of q(f) through B (all w >= 0), as ``structures.dense.LatentPosterior``."""

    nonneg_sites = True

    def __init__(self, K):
        self.K = K

    def factor(self, w):
        half_logdet, Li, sw = _factor_nonneg(self.K, w)
        return {"half_logdet": half_logdet, "M": Li, "sw": sw, "w": w}

    def var(self, F):
        return _var_nonneg(self.K, F["w"], F["M"], F["sw"])

    def weights(self, F, v):
        """(K + W^-1)^-1 W^-1 v = v - W^1/2 B^-1 W^1/2 K v."""
        sw, Li = F["sw"], F["M"]
        return v - sw * (Li.T @ (Li @ (sw * (self.K @ v))))

    def cov(self, F):
        """Sigma = K - K W^1/2 B^-1 W^1/2 K (``LatentPosterior.full_cov``)."""
        V = F["M"] @ (F["sw"][:, None] * self.K)
        return self.K - V.T @ V

    def R(self, F):
        """(K + W^-1)^-1 = W^1/2 L^-T L^-1 W^1/2."""
        sw, Li = F["sw"], F["M"]
        return sw[:, None] * (Li.T @ Li) * sw[None, :]


class _DenseIndefinite(_DenseKernel):
    """q(f) through chol(K) for site precisions of either sign (``IndefiniteSitePosterior``):
    C = I + L_K^T S L_K = L_C L_C^T, Sigma = M M^T with M = L_K L_C^-T, |B| = |C|."""

    nonneg_sites = False

    def __init__(self, K):
        self.K = K
        n = K.shape[0]
        jitter = _INDEFINITE_JITTER * jnp.maximum(jnp.mean(jnp.diag(K)), 1e-300)
        self.LK = jnp.linalg.cholesky(K + jitter * jnp.eye(n, dtype=K.dtype))

    def factor(self, w):
        n = self.K.shape[0]
        C = jnp.eye(n, dtype=self.K.dtype) + self.LK.T @ (w[:, None] * self.LK)
        LC = jnp.linalg.cholesky(C)
        M = solve_triangular(LC, self.LK.T, lower=True).T
        return {"half_logdet": jnp.sum(jnp.log(jnp.diag(LC))), "M": M, "sw": w, "w": w}

    def var(self, F):
        var = jnp.sum(F["M"] ** 2, axis=1)
        return jnp.maximum(var, MIN_RELATIVE_VAR * jnp.maximum(jnp.diag(self.K), 1e-300))

    def weights(self, F, v):
        M = F["M"]
        return v - F["w"] * (M @ (M.T @ v))

    def cov(self, F):
        """Sigma = M M^T (``IndefiniteSitePosterior.full_cov``)."""
        return F["M"] @ F["M"].T

    def R(self, F):
        w, M = F["w"], F["M"]
        return jnp.diag(w) - w[:, None] * (M @ M.T) * w[None, :]


def _structure(K, kind):
    """The representation EP needs: through chol(K) where sites may be negative (step likelihood)."""
    return _DenseIndefinite(K) if lik.negative_sites(kind) else DenseLatent(K)


# ---------------------------------------------------------------------------------
# EP (ep.py)
# ---------------------------------------------------------------------------------


def _ep_attempt(S, kind, y, th, tau, nu, F, u, change, sweeps, failed, tol):
    """The evidence, its gradient and the posterior at EP sites (tau, nu) with factorisation F
    and cavities u (``common.ep_update``), and whether they pass ``common.finish_outputs``'
    test (``ok``; the likelihood parameters' range is checked there, once)."""
    log_z = ep_log_z(F["half_logdet"], tau, nu, u)
    R = S.R(F)
    dK = 0.5 * (jnp.outer(u["b"], u["b"]) - R)
    dth = jnp.sum(lik.tilted_dparams(kind, y, th, u["tilted"]), axis=0)
    ok = (~failed & jnp.isfinite(log_z) & (log_z <= 0.0) & jnp.all(jnp.isfinite(dK)) & jnp.all(jnp.isfinite(dth)))
    return {"log_z": log_z, "dK": dK, "dth": dth, "loo": u["tilted"][0], "converged": change < tol, "ok": ok,
            "sweeps": sweeps, "a": u["b"], "R": R, "mean": u["mean"], "var": u["var"]}


def _parallel_attempt(S, kind, y, th, *, tol, max_sweeps, damping, memory):
    s = ep_fixed_point(S, kind, y, th, tol=tol, max_sweeps=max_sweeps, damping=damping, memory=memory,
                       restart=False)
    return _ep_attempt(S, kind, y, th, s["tau"], s["nu"], s["F"], s["u"], s["u"]["change"], s["sweeps"],
                       s["failed"], tol)


def _sequential_attempt(S, kind, y, th, *, tol, max_sweeps, damping):
    tau, nu, F, change, sweeps, failed = sequential_fixed_point(S, kind, y, th, tol=tol, max_sweeps=max_sweeps,
                                                                damping=damping)
    u = ep_update(kind, y, th, S, F, tau, nu, damping)
    return _ep_attempt(S, kind, y, th, tau, nu, F, u, change, sweeps, failed, tol)


def _retry(result, attempt, needed):
    """``approximations.solve.solve_with_retries``' choice: a retry that was needed replaces the
    result if it passed (or the result did not); the sweeps add up."""
    take = needed & (attempt["ok"] | ~result["ok"])
    chosen = jax.tree_util.tree_map(lambda a, r: jnp.where(take, a, r), attempt, result)
    return {**chosen, "sweeps": result["sweeps"] + jnp.where(needed, attempt["sweeps"], 0)}


def _highest_converged_solve(S, kind, y, th, *, tol, max_sweeps, damping, memory):
    """``solve.highest_converged`` with the dense schedule (``registry.ep_dense_retries``): the
    three runs all made (cold), the converged one with the highest evidence chosen; status 2
    where none converged. For likelihoods that are not log-concave (``lik.negative_sites``)."""
    runs = [_parallel_attempt(S, kind, y, th, tol=tol, max_sweeps=max_sweeps, damping=damping, memory=memory),
            _parallel_attempt(S, kind, y, th, tol=tol, max_sweeps=2 * max_sweeps, damping=RETRY_DAMPING[0],
                              memory=memory),
            _sequential_attempt(S, kind, y, th, tol=tol, max_sweeps=2 * max_sweeps, damping=RETRY_DAMPING[1])]
    r = highest_converged([{**a, "good": a["ok"] & a["converged"]} for a in runs])
    return {**r, "ok": r["good"], "sweeps": sum(a["sweeps"] for a in runs)}


def ep_solve(K, th, y, *, kind, tol=1e-8, max_sweeps=300, damping=1.0, memory=ANDERSON_MEMORY):
    """EP to convergence with the numba path's retry schedule (``registry.ep_dense_retries``):
    parallel EP (Anderson-accelerated) at ``damping``; if it does not converge, parallel EP
    from zero sites with damping 0.5 and ``2 * max_sweeps``; if neither converged, sequential
    EP (``sequential_ep``) with damping 0.7 and ``2 * max_sweeps``. A retry replaces the result
    when it is finite (or the result is not), as ``solve.solve_with_retries``. A retry that is
    not needed runs no sweep (its sweep limit is 0), so under ``jax.vmap`` a converged chain
    costs no retry. Returns a dict: log_z, dK, dth, loo, n_iter (all sweeps), status, and the
    posterior (a, R, mean, var) for prediction. ``kind`` is static. A likelihood that is not
    log-concave runs every run of the schedule and keeps the converged one with the highest
    evidence (``_highest_converged_solve``, ``solve.highest_converged``)."""
    S = _structure(K, kind)
    if lik.negative_sites(kind):
        r = _highest_converged_solve(S, kind, y, th, tol=tol, max_sweeps=max_sweeps, damping=damping, memory=memory)
        return finish_outputs(r["log_z"], r["dK"], r["dth"], r["loo"], r["sweeps"], r["converged"], ~r["ok"], th,
                              kind, extra={k: r[k] for k in ("a", "R", "mean", "var")})
    result = _parallel_attempt(S, kind, y, th, tol=tol, max_sweeps=max_sweeps, damping=damping, memory=memory)
    needed = ~result["converged"]
    damped = _parallel_attempt(S, kind, y, th, tol=tol, max_sweeps=jnp.where(needed, 2 * max_sweeps, 0),
                               damping=RETRY_DAMPING[0], memory=memory)
    result = _retry(result, damped, needed)
    needed = ~result["converged"]
    sequential = _sequential_attempt(S, kind, y, th, tol=tol, max_sweeps=jnp.where(needed, 2 * max_sweeps, 0),
                                     damping=RETRY_DAMPING[1])
    r = _retry(result, sequential, needed)
    return finish_outputs(r["log_z"], r["dK"], r["dth"], r["loo"], r["sweeps"], r["converged"], ~r["ok"], th, kind,
                          extra={k: r[k] for k in ("a", "R", "mean", "var")})


# ---------------------------------------------------------------------------------
# Laplace (laplace.py)
# ---------------------------------------------------------------------------------


def laplace_solve(K, th, y, *, kind, tol=1e-10, max_iter=100):
    """Newton with backtracking to the mode, then Laplace's evidence and its total gradient
    (``laplace._gradient``: the mode's movement included in adjoint form). ``kind`` is static."""
    S = DenseLatent(K)
    s = newton_mode(S, kind, y, th, tol=tol, max_iter=max_iter)
    a, f, out = s["a"], s["f"], s["out"]
    w = jnp.maximum(-out[2], 0.0)
    F = S.factor(w)
    var = S.var(F)
    R = S.R(F)
    log_z = s["psi"] - F["half_logdet"]
    s2 = 0.5 * var * out[3]
    u = s2 - R @ (K @ s2)
    dK = 0.5 * jnp.outer(a, a) - 0.5 * R + 0.5 * (jnp.outer(u, a) + jnp.outer(a, u))
    Ks2 = K @ s2
    sigma_s2 = Ks2 - K @ (R @ Ks2)
    lp_th, d1_th, d2_th = lik.log_lik_dparams(kind, y, th, out)
    dth = jnp.sum(lp_th, axis=0) + 0.5 * var @ d2_th + sigma_s2 @ d1_th
    loo = laplace_loo(kind, y, th, f, var, w, out[1], jnp.diag(K))
    return finish_outputs(log_z, dK, dth, loo, s["it"], s["converged"], ~factor_ok(F), th, kind,
                   extra={"a": a, "R": R, "mean": f, "var": var})


# ---------------------------------------------------------------------------------
# The pure functions the Ops call
# ---------------------------------------------------------------------------------

SOLVERS = solver_table({ep: JaxSolver(ep_solve, ("tol", "max_sweeps", "damping", "method")),
                        laplace: JaxSolver(laplace_solve, ("tol", "max_iter"), needs_log_lik=True)})


def solver(approximation, kind, **options):
    """The solver (K, th, y) -> dict for ``approximation`` and likelihood ``kind``, options bound.

    EP's ``method="sequential"`` runs the parallel schedule here (the same fixed point).
    """
    registry.check_backend(approximation, "dense", "jax", "ApproxMarginalOp")
    return bind_solver(SOLVERS, approximation, kind, options, approximation)


def marginal_fn(approximation, kind, **options):
    """(K, th, y) -> (log_z, dlog_z/dK, dlog_z/dth, loo, n_iter, status) with a ``custom_vjp``:
    the cotangent of log_z times the returned gradient (the other outputs are treated as
    constants: no second derivatives)."""
    solve = solver(approximation, kind, **options)

    def outputs(K, th, y):
        r = solve(K, th, lik.labels(kind, y))
        return r["log_z"], r["dK"], r["dth"], r["loo"], r["n_iter"], r["status"]

    return evidence_with_vjp(outputs, 1)


def predictive_fn(approximation, kind, full_cov=False, **options):
    """(K, th, y, K_cross, K_star) -> latent predictive mean and variance (or covariance)
    under q (``ops.marginal.LatentPredictiveOp``); NaN where the approximation failed."""
    solve = solver(approximation, kind, **options)

    def predict(K, th, y, K_cross, K_star):
        r = solve(K, th, lik.labels(kind, y))
        mean = K_cross.T @ r["a"]
        RKc = r["R"] @ K_cross
        if full_cov:
            cov = K_star - K_cross.T @ RKc
            second = 0.5 * (cov + cov.T)
        else:
            second = jnp.maximum(K_star - jnp.sum(K_cross * RKc, axis=0), 0.0)
        bad = r["status"] == STATUS_FAILED
        return jnp.where(bad, jnp.nan, mean), jnp.where(bad, jnp.nan, second)

    return predict
