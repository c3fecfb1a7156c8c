r"""EP and Laplace with the basis-function (HSGP) prior in JAX: the evidence and its exact
gradient in the spectral variances S and the likelihood's parameters, O(n M^2 + M^3) time
and O(n M) memory.

The JAX backend of the evidence and predictive Ops on the "hsgp" structure
(``ops.ApproxMarginalOp``, ``ops.LatentPredictiveOp``; ``structures.select.HSGPBinary``):
the prior, posterior and gradient of ``structures.hsgp`` (Solin & Sarkka 2020;
Riutort-Mayol et al. 2023), solved by the loops the dense and FITC JAX engines share
(``common.py``: Anderson-accelerated parallel EP, Newton with backtracking), so the fixed
points of the numba path. With K~ = Phi diag(S) Phi^T, s = sqrt(S) and site precisions w,
H = Phi^T diag(w) Phi and A = I + diag(s) H diag(s) = L_A L_A^T (``structures.hsgp``
module docstring):

* half log|B| = sum log diag L_A;
* diag Sigma_ii = ||L_A^{-1} s Phi_i||^2 (floored at 1e-14 diag K~_ii, as the numba path);
* K~ b = Phi s A^{-1} s Phi^T v and b = v - w K~ b for b = (I + W K~)^{-1} v;
* R v = (K~ + W^{-1})^{-1} v = w v - w Phi s A^{-1} s Phi^T (w v).

Gradient. For d log Z / dK~ = G = sum_k c_k (x_k y_k^T + y_k x_k^T)/2 + r R (EP:
(b b^T - R)/2; Laplace: its implicit term added, ``approximations.laplace._gradient``),
d log Z / dS_j = sum_k c_k (Phi^T x_k)_j (Phi^T y_k)_j + r Q_jj with Q = Phi^T R Phi, each
Q_jj by the more accurate of its two forms (H_jj - ||L_A^{-1} s H_j||^2 where
S_j |H_jj| <= 1, else (1 - (A^{-1})_jj) / S_j; ``HSGPPosterior.R_projected_diag``). The
training inputs X are data: their cotangent is zero. The function's ``jax.custom_vjp``
returns cotangent x that gradient, never automatic differentiation through the loops;
PyTensor's JAX graph carries d log Z / dS into the kernel's hyperparameters through the
graph of the spectral density (``structures.hsgp.spectral_variances``).

The basis. Phi (n, M) is formed at the training inputs from the structure's basis by the
same PyTensor graph the numba path's predictive uses (``LaplacianBasis.tensor``), turned
into JAX code by PyTensor's ``jax_funcify`` (``basis_function``): one definition of the
eigenfunctions; it serves the O(n M) products (Phi v, Phi^T v, the prior variances). H and
the marginal variances, the O(n M^2) part, go through the product-to-sum identity as on the
numba path (``LaplacianBasis.at``): ``ProductToSum``, O(n P) with P ~ 2^d M, from the cosine
tables at X and the pairs' positions of ``numerics.product_to_sum`` (at n = 5,000, m = 20 x 20
an EP evaluation took 0.39 s of CPU against 1.58 s with the two dense n M^2 products, and
the numba path's 0.19 s). The periodic expansion has no such operator: its H and variances
are the dense products.

Schedules, as the numba path's for this structure (``registry``'s "hsgp" retries, read from
the registry): EP runs parallel sweeps at ``damping``; if they do not converge in
``max_sweeps``, parallel EP from zero sites with damping 0.5 and twice the sweeps, then
damping 0.25 and four times the sweeps, a retry replacing the result when it is finite (or
the result is not), as ``solve.solve_with_retries``; a retry that is not needed runs no
sweep. The step likelihood (not log-concave) runs all three, cold, and keeps the converged
one with the highest evidence, status 2 where none converged (``solve.highest_converged``). Laplace: Newton to at most ``4 * max_iter`` steps (the numba path's retry).

Likelihoods (binary and ordinal) and failure semantics as ``engine``: status 0 converged,
1 not converged (value used), 2 failed (a non-finite or negative S, a non-finite value or
gradient, a likelihood parameter out of range): -inf, zero gradient, loo -inf. Every call
starts cold.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytensor.tensor as pt
from jax.scipy.linalg import cho_solve
from pytensor.graph.fg import FunctionGraph
from pytensor.link.jax.dispatch import jax_funcify

from ...approximations import registry
from ...approximations.ep import ep
from ...approximations.laplace import laplace
from ...ops import ApproxMarginalOp, LatentPredictiveOp
from ...structures.hsgp import PRIOR_VARIANCE_FLOOR, LaplacianBasis
from . import likelihoods as lik
from .common import (ANDERSON_MEMORY, evidence_with_vjp, MIN_RELATIVE_VAR, STATUS_FAILED, JaxSolver, bind_solver, ep_fixed_point,
                     ep_log_z, factor_ok, finish_outputs, highest_converged, laplace_loo, newton_mode, solver_table)
from .dispatch import check_supported, implements, op_options
from .fitc import tri_inverse

jax.config.update("jax_enable_x64", True)

STRUCTURE = "hsgp"


def basis_function(basis):
    """X (n, D) -> Phi (n, M) as a JAX function: ``basis.tensor``'s PyTensor graph (the
    eigenfunctions of ``structures.hsgp.LaplacianBasis``) through PyTensor's ``jax_funcify``."""
    X = pt.dmatrix("X")
    graph = jax_funcify(FunctionGraph([X], [basis.tensor(X)], clone=True))

    def phi(X):
        return graph(X)[0]

    return phi


class ProductToSum:
    """H = Phi^T diag(w) Phi and the quadratic forms phi(x_i)^T Sigma phi(x_i) of a Laplacian basis
    in O(n P) through the product-to-sum identity (``numerics.product_to_sum``, whose
    ``CosineProductBasis.pair_tables`` gives the pairs' positions and prefactors): the JAX
    form of ``LaplacianBasis.at``, with the cosine tables c_p(u_ik) formed from X.

    ``ProductToSum(basis)`` holds the basis' constants; ``tables(X)`` the tables at X, the
    argument of ``gram`` and ``quad_diag``.
    """

    def __init__(self, basis):
        self.center, self.L, self.active = basis.center, basis.L, list(basis.active_dims)
        self.P, self.pairs, self.pref = basis.at(basis.center[None, :]).pair_tables()
        self.M = self.pref.shape[0]
        self.T_shape = (int(np.prod(self.P[:-1])), self.P[-1])

    def tables(self, X):
        """(the row-wise Kronecker product of the tables of every dimension but the last
        (n, prod P_<d), the last one's (n, P_d)): c_p(u_k) = cos(p u_k), u = pi (x + L) / (2 L)."""
        u = jnp.pi * ((X - self.center)[:, self.active] + self.L) / (2.0 * self.L)
        cos = [jnp.cos(u[:, k:k + 1] * jnp.arange(P, dtype=u.dtype)) for k, P in enumerate(self.P)]
        first = jnp.ones((X.shape[0], 1), dtype=u.dtype)
        for C in cos[:-1]:
            first = (first[:, :, None] * C[:, None, :]).reshape(X.shape[0], -1)
        return first, cos[-1]

    def gram(self, tables, w):
        """H = Phi^T diag(w) Phi (``CosineProductBasis.gram``)."""
        first, last = tables
        T = (first.T @ (w[:, None] * last)).reshape(-1)
        H = sum(sign * T[flat] for flat, sign in self.pairs)
        return self.pref * H.reshape(self.M, self.M)

    def quad_diag(self, tables, Sigma):
        """phi(x_i)^T Sigma phi(x_i) for every i (``CosineProductBasis.quad_diag_matrix``)."""
        first, last = tables
        weights = (self.pref * Sigma).reshape(-1)
        size = self.T_shape[0] * self.T_shape[1]
        G = sum(sign * jnp.zeros(size, dtype=weights.dtype).at[flat].add(weights) for flat, sign in self.pairs)
        return jnp.sum((first @ G.reshape(self.T_shape)) * last, axis=1)


def product_to_sum(basis):
    """``ProductToSum`` for a Laplacian basis; None for the periodic expansion (dense Phi)."""
    return ProductToSum(basis) if isinstance(basis, LaplacianBasis) else None


class HSGPLatent:
    """q(f) under the HSGP prior at site precisions w: the structure ``common.py``'s loops ask
    (``structures.hsgp.HSGPPosterior``). Site precisions of either sign (K~^-1 + W is positive
    definite exactly when A is). With ``pts`` (a ``ProductToSum`` and its tables at the
    training inputs) H and the marginal variances take O(n P) through it, else two dense
    n M^2 products."""

    nonneg_sites = False

    def __init__(self, Phi, S, pts=None):
        self.Phi, self.S, self.pts = Phi, S, pts
        self.s = jnp.sqrt(jnp.maximum(S, 0.0))
        self.diag = jnp.maximum((Phi * Phi) @ S, PRIOR_VARIANCE_FLOOR)  # structures.hsgp's floor

    def factor(self, w):
        Phi, s = self.Phi, self.s
        H = Phi.T @ (w[:, None] * Phi) if self.pts is None else self.pts[0].gram(self.pts[1], w)
        H = 0.5 * (H + H.T)
        A = jnp.eye(s.shape[0], dtype=Phi.dtype) + s[:, None] * H * s[None, :]
        L_A = jnp.linalg.cholesky(A)
        L_A_inv = tri_inverse(L_A)
        if self.pts is None:
            C = L_A_inv @ (s[:, None] * Phi.T)  # (M, n): L_A^{-1} s Phi^T
            c_sq = jnp.sum(C * C, axis=0)
        else:  # diag(Phi s A^{-1} s Phi^T)
            c_sq = self.pts[0].quad_diag(self.pts[1], s[:, None] * (L_A_inv.T @ L_A_inv) * s[None, :])
        return {"half_logdet": jnp.sum(jnp.log(jnp.diag(L_A))), "M": L_A, "M_inv": L_A_inv, "H": H, "w": w,
                "c_sq": c_sq}

    def var(self, F):
        return jnp.maximum(F["c_sq"], MIN_RELATIVE_VAR * self.diag)

    def _sigma_beta_times(self, F, u):
        """diag(s) A^{-1} diag(s) u: the posterior covariance of the weights times u."""
        return self.s * cho_solve((F["M"], True), self.s * u)

    def sigma_times(self, F, v):
        """(K~^-1 + W)^-1 v = Phi s A^{-1} s Phi^T v."""
        return self.Phi @ self._sigma_beta_times(F, self.Phi.T @ v)

    def mean_weights(self, F, v):
        """(K~ b, b), b = (I + W K~)^{-1} v (``HSGPPosterior.mean_and_weights``)."""
        mean = self.sigma_times(F, v)
        return mean, v - F["w"] * mean

    def R_times(self, F, v):
        """(K~ + W^-1)^-1 v."""
        wv = F["w"] * v
        return wv - F["w"] * self.sigma_times(F, wv)

    def matvec(self, v):
        return self.Phi @ (self.S * (self.Phi.T @ v))

    def prior_var(self):
        return self.diag

    def R_projected_diag(self, F):
        """Q_jj = (Phi^T R Phi)_jj by the more accurate of its two forms (module docstring)."""
        H, S, L_inv = F["H"], self.S, F["M_inv"]
        h = jnp.diag(H)
        C = L_inv @ (self.s[:, None] * H)
        direct = h - jnp.sum(C * C, axis=0)
        by_identity = S * jnp.abs(h) > 1.0
        identity = (1.0 - jnp.sum(L_inv * L_inv, axis=0)) / jnp.where(by_identity, S, 1.0)
        return jnp.where(by_identity, identity, direct)

    def gradient(self, F, outer, scale_R):
        """d log Z / dS for G = sum_k c_k (x_k y_k^T + y_k x_k^T)/2 + scale_R R (module docstring)."""
        dS = scale_R * self.R_projected_diag(F)
        for x, y, c in outer:
            dS = dS + c * (self.Phi.T @ x) * (self.Phi.T @ y)
        return dS

    def valid(self):
        """S finite and non-negative (``structures.hsgp.HSGPPrior``'s checks)."""
        return jnp.all(jnp.isfinite(self.S)) & jnp.all(self.S >= 0.0)


def _ep_attempt(P, kind, y, th, *, tol, max_sweeps, damping, memory):
    """One parallel EP run from zero sites (no restart phase), its evidence and gradient, and
    whether they pass ``finish_outputs``' test (``ok``)."""
    s = ep_fixed_point(P, kind, y, th, tol=tol, max_sweeps=max_sweeps, damping=damping, memory=memory,
                       restart=False)
    u, F = s["u"], s["F"]
    log_z = ep_log_z(F["half_logdet"], s["tau"], s["nu"], u)
    dS = P.gradient(F, [(u["b"], u["b"], 0.5)], -0.5)
    dth = jnp.sum(lik.tilted_dparams(kind, y, th, u["tilted"]), axis=0)
    ok = (~s["failed"] & jnp.isfinite(log_z) & (log_z <= 0.0) & jnp.all(jnp.isfinite(dS))
          & jnp.all(jnp.isfinite(dth)))
    return {"log_z": log_z, "dS": dS, "dth": dth, "loo": u["tilted"][0], "converged": u["change"] < tol,
            "ok": ok, "sweeps": s["sweeps"], "a": u["b"], "F": F}


def _take_retry(result, attempt, needed):
    """``solve.solve_with_retries``' choice: a retry that was needed replaces the result if it
    passed (or the result did not); the sweeps add up."""
    take = needed & (attempt["ok"] | ~result["ok"])
    chosen = jax.tree_util.tree_map(lambda a, r: jnp.where(take, a, r), attempt, result)
    return {**chosen, "sweeps": result["sweeps"] + jnp.where(needed, attempt["sweeps"], 0)}


def _prior(S, X, phi, pts=None):
    return HSGPLatent(phi(X), S, None if pts is None else (pts, pts.tables(X)))


def ep_solve(S, X, th, y, *, kind, phi, pts=None, tol=1e-8, max_sweeps=300, damping=1.0, memory=ANDERSON_MEMORY):
    """HSGP EP (``approximations.ep`` with an ``HSGPPrior``) with the registry's retries for
    this structure (module docstring); for a likelihood that is not log-concave (the step
    likelihood) every run of the schedule, cold, and the converged one with the highest
    evidence, status 2 where none converged (``solve.highest_converged``, as the dense and
    FITC engines). Returns a dict: log_z, dK (dS, dX = 0), dth, loo,
    n_iter, status, and what prediction needs."""
    P = _prior(S, X, phi, pts)
    schedule = registry.get("ep").retry_schedule({"max_sweeps": max_sweeps, "damping": damping}, STRUCTURE)
    result = _ep_attempt(P, kind, y, th, tol=tol, max_sweeps=max_sweeps, damping=damping, memory=memory)
    if lik.negative_sites(kind):  # not log-concave: every run made, the highest converged one
        runs = [result] + [_ep_attempt(P, kind, y, th, tol=tol, max_sweeps=retry["max_sweeps"],
                                       damping=retry["damping"], memory=memory) for retry in schedule]
        best = highest_converged([{**a, "good": a["ok"] & a["converged"]} for a in runs])
        result = {**best, "ok": best["good"], "sweeps": sum(a["sweeps"] for a in runs)}
        schedule = []
    for retry in schedule:
        needed = ~result["converged"]
        attempt = _ep_attempt(P, kind, y, th, tol=tol, max_sweeps=jnp.where(needed, retry["max_sweeps"], 0),
                              damping=retry["damping"], memory=memory)
        result = _take_retry(result, attempt, needed)
    r = result
    return finish_outputs(r["log_z"], (r["dS"], jnp.zeros_like(X)), r["dth"], r["loo"], r["sweeps"], r["converged"],
                          ~r["ok"] | ~P.valid(), th, kind, extra={"a": r["a"], "P": P, "F": r["F"]})


def laplace_solve(S, X, th, y, *, kind, phi, pts=None, tol=1e-10, max_iter=100):
    """HSGP Laplace (``approximations.laplace`` with an ``HSGPPrior``), the gradient with the
    mode's movement (``laplace._gradient``). Returns the dict of ``ep_solve``."""
    P = _prior(S, X, phi, pts)
    s = newton_mode(P, kind, y, th, tol=tol, max_iter=max_iter)
    a, f, out = s["a"], s["f"], s["out"]
    w = jnp.maximum(-out[2], 0.0)
    F = P.factor(w)
    var = P.var(F)
    log_z = s["psi"] - F["half_logdet"]
    s2 = 0.5 * var * out[3]
    u = s2 - P.R_times(F, P.matvec(s2))
    dS = P.gradient(F, [(a, a, 0.5), (u, a, 1.0)], -0.5)
    sigma_s2 = P.sigma_times(F, s2)
    lp_th, d1_th, d2_th = lik.log_lik_dparams(kind, y, th, out)
    dth = jnp.sum(lp_th, axis=0) + 0.5 * var @ d2_th + sigma_s2 @ d1_th
    loo = laplace_loo(kind, y, th, f, var, w, out[1], P.diag)
    return finish_outputs(log_z, (dS, jnp.zeros_like(X)), dth, loo, s["it"], s["converged"],
                          ~factor_ok(F) | ~P.valid(), th, kind, extra={"a": a, "P": P, "F": F})


SOLVERS = solver_table({ep: JaxSolver(ep_solve, ("tol", "max_sweeps", "damping", "method")),
                        laplace: JaxSolver(laplace_solve, ("tol", "max_iter"), needs_log_lik=True)})


def solver(approximation, kind, basis, **options):
    """The HSGP solver (S, X, th, y) -> dict for the basis ``basis`` (a
    ``structures.hsgp.LaplacianBasis``), options bound (EP's ``method`` is ignored: the
    HSGP EP is parallel)."""
    registry.check_backend(approximation, STRUCTURE, "jax", "ApproxMarginalOp")
    return bind_solver(SOLVERS, approximation, kind, options, f"HSGP {approximation}", phi=basis_function(basis),
                       pts=product_to_sum(basis))


def marginal_fn(approximation, kind, basis, **options):
    """(S, X, th, y) -> (log_z, dS, dX, dth, loo, n_iter, status), the outputs of
    ``ApproxMarginalOp`` on the HSGP structure, with a ``custom_vjp``: the cotangent of log_z
    times the returned gradient (dX is zero: the inputs are data; the other outputs are
    treated as constants)."""
    solve = solver(approximation, kind, basis, **options)

    def outputs(S, X, th, y):
        r = solve(S, X, th, lik.labels(kind, y))
        return (r["log_z"], *r["dK"], r["dth"], r["loo"], r["n_iter"], r["status"])

    return evidence_with_vjp(outputs, 2)


def predictive_fn(approximation, kind, basis, full_cov=False, **options):
    """(S, X, th, y, Phi_*, k_**) -> latent predictive mean and variance (or covariance) under
    q (``HSGPPosterior.predict``: f_* = Phi_* beta, mean Phi_* S Phi^T a, Cov(beta | y) =
    s A^{-1} s, the variances floored as there); k_** is not used (the basis defines the prior).
    NaN where the approximation failed."""
    solve = solver(approximation, kind, basis, **options)

    def predict(S, X, th, y, Phi_star, K_star):
        r = solve(S, X, th, lik.labels(kind, y))
        P, F = r["P"], r["F"]
        mean = Phi_star @ (P.S * (P.Phi.T @ r["a"]))
        C = F["M_inv"] @ (P.s[:, None] * Phi_star.T)
        floor = MIN_RELATIVE_VAR * jnp.maximum((Phi_star * Phi_star) @ P.S, PRIOR_VARIANCE_FLOOR)
        second = C.T @ C if full_cov else jnp.maximum(jnp.sum(C * C, axis=0), floor)  # HSGPPosterior.predict
        bad = r["status"] == STATUS_FAILED
        return jnp.where(bad, jnp.nan, mean), jnp.where(bad, jnp.nan, second)

    return predict


@implements(ApproxMarginalOp, STRUCTURE)
def hsgp_marginal(op, node=None, **kwargs):
    check_supported(op)
    marginal = marginal_fn(op.approximation, op.likelihood.kind, op.structure.basis,
                           **op_options(op, sampling=op.sampling))

    def hsgp_approx_marginal(S, X, params, y, hyper=None):
        return marginal(S, X, params, y)

    return hsgp_approx_marginal


@implements(LatentPredictiveOp, STRUCTURE)
def hsgp_predictive(op, node=None, **kwargs):
    check_supported(op)
    predict = predictive_fn(op.approximation, op.likelihood.kind, op.structure.basis, op.full_cov,
                            **op_options(op, sampling=False))

    def hsgp_latent_predictive(S, X, params, y, Phi_star, K_star):
        return predict(S, X, params, y, Phi_star, K_star)

    return hsgp_latent_predictive
