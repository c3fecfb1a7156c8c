r"""The multi-class FITC Ops under JAX: softmax Laplace and nested EP with each class's
inducing-point prior.

The JAX backend of the evidence and predictive Ops on the "fitc-multiclass" structure
(``ops.ApproxMarginalOp``, ``ops.LatentPredictiveOp``): the prior, posterior and gradient of
``structures.multiclass_fitc`` (its module docstring derives them), solved by the
multi-class JAX solvers of ``multiclass.py`` (the same Newton and nested-EP loops as for
the dense prior, so the same fixed points as the numba path). Each class k has the FITC
prior of ``fitc.prior_factors`` (Snelson & Ghahramani 2006; its jitter fallback),
K~_k = V_k^T V_k + Lambda_k, V_k = L_uu,k^-1 K_uf,k. At coupled weights d (c, n)
(W_i = diag(d_i) - d_i d_i^T / s_i), with delta = d / (1 + lambda d):

* the effective precision W~_i = (W_i^-1 + Lambda_i)^-1 = diag(delta_i) - delta_i delta_i^T / sum delta_i;
* A = I_cm + P^T W~ P = L_A L_A^T, the (c m) x (c m) posterior precision of the inducing
  values (``_precision``: one (c m) x n product for the blocks off the diagonal, the
  diagonal blocks V_k diag(delta_k sum_{j != k} delta_j / sum delta) V_k^T without cancellation);
* 1/2 log|I + K~ W| = 1/2 sum_i log|I + Lambda_i W_i| + log|L_A|,
  log|I + Lambda_i W_i| = sum_k log(1 + lambda_ik d_ik) + log(sum_k delta_ik / s_i);
* R = (K~ + W^-1)^-1 = W~ - W~ P A^-1 P^T W~; (I + W K~)^-1 v = v - W~ (Lambda v + P y),
  y = A^-1 P^T (v - W~ Lambda v) (``structures.multiclass_fitc._newton_weights``);
* the site covariances Sigma_i = T_i Lambda_i + T_i S_i T_i^T, T_i = I - Lambda_i W~_i,
  S_i = P_i A^-1 P_i^T, and R's diagonal R_ii = W~_i - W~_i S_i W~_i.

Gradient. For dlog Z / dK~_k = G_k = sum_t c_t (x_t y_t^T + y_t x_t^T)/2 + scale_R R_kk, the
cotangents d tr(G K~) / d(V_k, Lambda_k) are 2 V_k G_k and diag G_k, where the only
n x n piece, V_k R_kk = sum_l (A^-1)_kl V_l diag(W~_lk), comes with the S_i from one pass
over the classes l of the products (A^-1)_{:,l} V_l (``_column_pass``, a ``lax.scan``: memory
O(c m n)). Those cotangents are pulled back through each class's
(K_uu, K_uf, diag K_ff) -> (V, Lambda) by ``jax.vjp`` of ``fitc.prior_factors`` (the chain
rule of ``structures.multiclass_fitc``'s dK_uu, dK_uf, dk_ff), so PyTensor's JAX graph
carries it into every class's hyperparameters and into shared or per-class inducing inputs.

Cost: O(c^2 m^2 n) time per factorised posterior and O(c m n) memory; never a cn x cn or
n x n matrix. Failure semantics and statuses as ``multiclass.py`` (-inf with a zero
gradient, status 2; a K_uu without a Cholesky factor at any jitter of the fallback, or
negative coupled weights, is such a failure). Every call starts cold.
"""

import jax
import jax.numpy as jnp
from jax.scipy.linalg import cho_solve

from ...ops import ApproxMarginalOp, LatentPredictiveOp
from .fitc import prior_factors, tri_inverse
from .dispatch import check_supported, implements, op_options
from .common import evidence_with_vjp
from .multiclass import LoopCarried, codes, predict_from, solver

jax.config.update("jax_enable_x64", True)


def _precision(V, delta, total):
    """A = I + P^T W~ P (c m, c m) for W~_i = diag(delta_i) - delta_i delta_i^T / total_i (module
    docstring): the blocks off the diagonal -(V_k diag(q_k))(V_l diag(q_l))^T, q = delta /
    sqrt(total); the diagonal blocks V_k diag(delta_k others_k / total) V_k^T (``structures.
    multiclass_fitc._precision``)."""
    c, m, n = V.shape
    Q = (V * (delta / jnp.sqrt(total))[:, None, :]).reshape(c * m, n)
    off = -(Q @ Q.T).reshape(c, m, c, m)
    others = jnp.einsum("kj,ji->ki", 1.0 - jnp.eye(c, dtype=delta.dtype), delta)
    own = jnp.einsum("kai,kbi->kab", V * (delta * others / total)[:, None, :], V)
    A = jnp.where(jnp.eye(c, dtype=bool)[:, None, :, None], own[:, :, None, :], off)
    return A.reshape(c * m, c * m) + jnp.eye(c * m, dtype=V.dtype)


@jax.tree_util.register_pytree_node_class
class MulticlassFITCPosterior(LoopCarried):
    """q(f) at coupled weights d (c, n) under c FITC priors (V (c, m, n), Lambda (c, n)): the
    interface of ``multiclass.CoupledPosterior`` (``structures.multiclass_fitc.MulticlassFITCPosterior``)."""

    FIELDS = ("V", "lam", "d", "delta", "total", "half_logdet_sites", "L_A")

    def __init__(self, V, lam, d):
        self.V, self.lam, self.d = V, lam, d
        E = 1.0 + lam * d
        self.delta = d / E
        self.total = jnp.sum(self.delta, axis=0)
        self.half_logdet_sites = 0.5 * (jnp.sum(jnp.log(E)) + jnp.sum(jnp.log(self.total / jnp.sum(d, axis=0))))
        self.L_A = jnp.linalg.cholesky(_precision(V, self.delta, self.total))

    def half_logdet_B(self):
        r"""\tfrac12 \log|I + \tilde K W| (module docstring)."""
        return self.half_logdet_sites + jnp.sum(jnp.log(jnp.diag(self.L_A)))

    def ok(self):
        return jnp.all(self.d >= 0.0) & jnp.isfinite(self.half_logdet_B()) & jnp.all(jnp.isfinite(self.L_A))

    def _Wt_times(self, v):
        """W~ v per observation, v (c, n)."""
        return self.delta * v - self.delta * (jnp.sum(self.delta * v, axis=0) / self.total)

    def _Wt(self):
        """W~_i (n, c, c)."""
        D, c = self.delta.T, self.delta.shape[0]
        return D[:, :, None] * jnp.eye(c, dtype=D.dtype) - D[:, :, None] * D[:, None, :] / self.total[:, None, None]

    def _Pt(self, u):
        """P^T u = (V_k u_k)_k stacked (c m,)."""
        return jnp.einsum("kai,ki->ka", self.V, u).reshape(-1)

    def _P(self, z):
        """P z = (V_k^T z_k)_k, (c, n)."""
        c, m, _ = self.V.shape
        return jnp.einsum("kai,ka->ki", self.V, z.reshape(c, m))

    def _A_solve(self, x):
        return cho_solve((self.L_A, True), x)

    def _A_inv(self):
        Ai = self._A_solve(jnp.eye(self.L_A.shape[0], dtype=self.L_A.dtype))
        return 0.5 * (Ai + Ai.T)

    def K_times(self, v):
        return self.lam * v + self._P(self._Pt(v))

    def R_times(self, v):
        """(K~ + W^-1)^-1 v = W~ v - W~ P A^-1 P^T W~ v, v (c, n)."""
        wv = self._Wt_times(v)
        return wv - self._Wt_times(self._P(self._A_solve(self._Pt(wv))))

    def weights(self, v):
        """(I + W K~)^-1 v = v - W~ (Lambda v + P y), y = A^-1 P^T (v - W~ Lambda v): Newton's a from
        v = W f + g, EP's b from h (module docstring)."""
        lv = self.lam * v
        y = self._A_solve(self._Pt(v - self._Wt_times(lv)))
        return v - self._Wt_times(lv + self._P(y))

    def _column_pass(self, Wt):
        """S_i = P_i A^-1 P_i^T (n, c, c) and V_k R_kk (c, m, n): a scan over the classes l of
        G = (A^-1)_{:,l} V_l (c m x n at a time), S_{i,kl} = <V_k[:, i], G_k[:, i]> and
        V_k R_kk += G_k diag(W~_lk) (``structures.multiclass_fitc.MulticlassFITCPosterior._column_pass``)."""
        V = self.V
        c, m, n = V.shape
        cols = jnp.transpose(self._A_inv().reshape(c * m, c, m), (1, 0, 2))  # cols[l] = (A^-1)_{:,l}
        WtT = jnp.transpose(Wt, (1, 2, 0))  # WtT[l, k, i] = W~_i[l, k]

        def step(VR, xs):
            Al, Vl, Wl = xs
            G = (Al @ Vl).reshape(c, m, n)
            return VR + G * Wl[:, None, :], jnp.einsum("kai,kai->ki", V, G)

        VR, S_cols = jax.lax.scan(step, jnp.zeros_like(V), (cols, V, WtT))
        S = jnp.transpose(S_cols, (2, 1, 0))
        return 0.5 * (S + jnp.transpose(S, (0, 2, 1))), VR

    def site_covariances(self):
        """The c x c posterior covariances Sigma_i (n, c, c) (module docstring), and what the
        gradient reuses: (V_k R_kk (c, m, n), diag R_kk (c, n))."""
        Wt = self._Wt()
        S, VR = self._column_pass(Wt)
        c = self.d.shape[0]
        Lam = self.lam.T
        T = jnp.eye(c, dtype=S.dtype)[None] - Lam[:, :, None] * Wt
        Sigma = T * Lam[:, None, :] + T @ S @ jnp.transpose(T, (0, 2, 1))
        R_diag = jnp.einsum("ikk->ki", Wt - Wt @ S @ Wt)
        return 0.5 * (Sigma + jnp.transpose(Sigma, (0, 2, 1))), (VR, R_diag)

    def kernel_gradient(self, outer, scale_R, reuse):
        """d tr(G K~) / d(V, Lambda) = (2 V_k G_k, diag G_k) for G_k = sum_t c_t (x_tk y_tk^T +
        y_tk x_tk^T)/2 + scale_R R_kk (module docstring); ``reuse`` from ``site_covariances``."""
        VR, R_diag = reuse
        dV, dlam = 2.0 * scale_R * VR, scale_R * R_diag
        for x, y, ct in outer:
            Vx, Vy = jnp.einsum("kai,ki->ka", self.V, x), jnp.einsum("kai,ki->ka", self.V, y)
            dV = dV + ct * (Vx[:, :, None] * y[:, None, :] + Vy[:, :, None] * x[:, None, :])
            dlam = dlam + ct * x * y
        return dV, dlam

    def predict(self, a, Vs, k_star, full_cov):
        """Latent predictive at n* new inputs from V_*k = L_uu,k^-1 K_u*,k (c, m, n*)
        (``structures.multiclass_fitc.MulticlassFITCPosterior.predict``): mean_k = V_*k^T V_k a_k,
        covariance diag(k_**,k - |V_*k|^2) + P_* A^-1 P_*^T per point (n*, c, c), or the
        class-major (c n*, c n*) with ``full_cov`` (k_star then (c, n*, n*))."""
        c, m, ns = Vs.shape
        mean = jnp.einsum("kaj,ka->kj", Vs, jnp.einsum("kai,ki->ka", self.V, a))
        F = jnp.einsum("kalb,lbj->kalj", self._A_inv().reshape(c, m, c, m), Vs)  # (A^-1)_kl V_*l
        eye = jnp.eye(c, dtype=Vs.dtype)
        if not full_cov:
            own = k_star - jnp.sum(Vs * Vs, axis=1)
            return mean, jnp.einsum("kaj,kalj->jkl", Vs, F) + eye[None] * own.T[:, :, None]
        own = k_star - jnp.einsum("kaj,kap->kjp", Vs, Vs)
        cov = jnp.einsum("kaj,kalp->kjlp", Vs, F) + eye[:, None, :, None] * own[:, :, None, :]
        cov = cov.reshape(c * ns, c * ns)
        return mean, 0.5 * (cov + cov.T)


class MulticlassFITCStack:
    """c FITC priors from (K_uu (c, m, m), K_uf (c, m, n), diag K_ff (c, n)): what the
    multi-class solvers ask of a prior (``multiclass.DenseStack``), its factors (L_uu, V,
    Lambda) by ``fitc.prior_factors`` for each class, with their ``jax.vjp``."""

    def __init__(self, Kuu, Kuf, k_diag):
        (self.L, self.V, self.lam), self._pullback = jax.vjp(jax.vmap(prior_factors), Kuu, Kuf, k_diag)
        self.c = self.V.shape[0]
        self.dtype = self.V.dtype

    def matvec(self, v):
        """K~ v = (Lambda_k v_k + V_k^T V_k v_k)_k, v (c, n)."""
        return self.lam * v + jnp.einsum("kai,ka->ki", self.V, jnp.einsum("kai,ki->ka", self.V, v))

    def posterior(self, d):
        return MulticlassFITCPosterior(self.V, self.lam, d)

    def pull_back(self, g):
        """The cotangents in (V, Lambda) as d log Z / d(K_uu, K_uf, diag K_ff)."""
        dV, dlam = g
        return self._pullback((jnp.zeros_like(self.L), dV, dlam))

    def cross(self, Kus):
        """V_*k = L_uu,k^-1 K_u*,k for Kus (c, m, n*)."""
        return jax.vmap(lambda L, K: tri_inverse(L) @ K)(self.L, Kus)


def marginal_fn(approximation, **options):
    """(K_uu (c, m, m), K_uf (c, m, n), k_ff (c, n), theta (0,), y codes) -> (log_z, dK_uu,
    dK_uf, dk_ff, dtheta (0,), loo, n_iter, status), the outputs of
    ``ApproxMarginalOp`` on this structure, with a ``custom_vjp`` (``common.evidence_with_vjp``)."""
    solve = solver(approximation, **options)

    def outputs(Kuu, Kuf, k_diag, th, y):
        r = solve(MulticlassFITCStack(Kuu, Kuf, k_diag), codes(y))
        return (r["log_z"], *r["dK"], jnp.zeros_like(th), r["loo"], r["n_iter"], r["status"])

    return evidence_with_vjp(outputs, 3)


def predictive_fn(approximation, full_cov=False, **options):
    """(K_uu, K_uf, k_ff, y, K_u* (c, m, n*), k_** (c, n*) or K_** (c, n*, n*)) -> mean (c, n*) and
    covariance (n*, c, c) or (c n*, c n*) (``LatentPredictiveOp``); NaN where the
    approximation failed."""
    solve = solver(approximation, **options)

    def predict(Kuu, Kuf, k_diag, y, Kus, K_star):
        prior = MulticlassFITCStack(Kuu, Kuf, k_diag)
        return predict_from(solve(prior, codes(y)), prior.cross(Kus), K_star, full_cov)

    return predict


# ---------------------------------------------------------------------------------
# Registration (imported by ``registration`` once PyTensor's JAX dispatch is loaded)
# ---------------------------------------------------------------------------------


@implements(ApproxMarginalOp, "fitc-multiclass")
def fitc_multiclass_marginal(op, node=None, **kwargs):
    check_supported(op)
    marginal = marginal_fn(op.approximation, **op_options(op, sampling=op.sampling))

    def multiclass_sparse_marginal(Kuu, Kuf, k_diag, params, y, hyper=None):
        return marginal(Kuu, Kuf, k_diag, params, y)

    return multiclass_sparse_marginal


@implements(LatentPredictiveOp, "fitc-multiclass")
def fitc_multiclass_predictive(op, node=None, **kwargs):
    check_supported(op)
    predict = predictive_fn(op.approximation, op.full_cov, **op_options(op, sampling=False))

    def multiclass_sparse_predictive(Kuu, Kuf, k_diag, y, Kus, K_star):
        return predict(Kuu, Kuf, k_diag, y, Kus, K_star)

    return multiclass_sparse_predictive


__all__ = ["MulticlassFITCPosterior", "MulticlassFITCStack", "marginal_fn", "predictive_fn"]
