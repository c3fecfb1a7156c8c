r"""The multi-class HSGP Ops under JAX: softmax Laplace and nested EP with each class's
basis-function prior.

The JAX backend of the evidence and predictive Ops on the "hsgp-multiclass" structure
(``ops.ApproxMarginalOp``, ``ops.LatentPredictiveOp``; ``structures.select.HSGPMulticlass``):
the prior, posterior and gradient of ``structures.multiclass_hsgp`` (its module docstring
derives them), solved by the multi-class JAX solvers of ``multiclass.py`` (the numba path's
Newton and nested-EP loops, so its fixed points). Class k has the prior
K~_k = Phi diag(S_k) Phi^T on the basis Phi (n, M) shared by the classes, which is the
multi-class FITC prior of ``multiclass_fitc.py`` with Lambda = 0 and V_k = diag(s_k) Phi^T,
s_k = sqrt(S_k): its posterior (``multiclass_fitc.MulticlassFITCPosterior``: A = I + P^T W P =
L_A L_A^T, the Woodbury solves, the site covariances) serves unchanged. What differs:

* the gradient, in S_k rather than in V_k: with H_lk = Phi^T diag(W_lk) Phi (the diagonal
  blocks from W_kk = d_k (sum_{j != k} d_j) / sum d, without cancellation) and
  Y_k = [s_l H_lk]_l (c M x M),

  .. math::

      \frac{\partial \log Z}{\partial S_{kj}} = \sum_t c_t (\Phi^T x_{tk})_j (\Phi^T y_{tk})_j
      + r\, (Q_k)_{jj}, \qquad (Q_k)_{jj} = (H_{kk})_{jj} - \|L_A^{-1} Y_k e_j\|^2
      \ \text{or}\ \frac{1 - (A^{-1})_{kj,kj}}{S_{kj}},

  the second form where S_kj |(H_kk)_jj| > 1 (``MulticlassHSGPPosterior.R_projected_diag``);
  no division by s_k, so S_kj = 0 is served;
* the predictive: f*_k = Phi*_k s_k z_k, mean Phi*_k S_k Phi^T a_k and covariances
  B*_k (A^{-1})_kl B*_l^T with B*_k = Phi*_k diag(s_k); k_** is not used.

The basis is formed at the training inputs by ``hsgp.basis_function`` (the same PyTensor
graph of the eigenfunctions as the binary HSGP Ops); the inputs X are data (cotangent 0).
Cost O(c^2 n M^2 + (c M)^3) per factorised posterior, O(c n M) memory. Failure semantics and
statuses as ``multiclass.py``; a non-finite or negative S is a failure (status 2). Every
call starts cold.
"""

import jax
import jax.numpy as jnp
from jax.scipy.linalg import solve_triangular

from ...ops import ApproxMarginalOp, LatentPredictiveOp
from .common import evidence_with_vjp
from .dispatch import check_supported, implements, op_options
from .multiclass import codes, predict_from, solver
from .multiclass_fitc import MulticlassFITCPosterior

jax.config.update("jax_enable_x64", True)

STRUCTURE = "hsgp-multiclass"


@jax.tree_util.register_pytree_node_class
class MulticlassHSGPPosterior(MulticlassFITCPosterior):
    """q(f) at coupled weights d (c, n) under c HSGP priors on one basis Phi (n, M) with
    variances S (c, M): ``MulticlassFITCPosterior`` at Lambda = 0, V_k = diag(s_k) Phi^T, with
    the gradient in S and the predictive from the basis (module docstring;
    ``structures.multiclass_hsgp.MulticlassHSGPPosterior``)."""

    FIELDS = (*MulticlassFITCPosterior.FIELDS, "Phi", "S", "s")

    def __init__(self, Phi, S, d):
        self.Phi, self.S = Phi, S
        self.s = jnp.sqrt(jnp.maximum(S, 0.0))
        V = self.s[:, :, None] * Phi.T[None]
        super().__init__(V, jnp.zeros_like(d), d)

    def ok(self):
        return super().ok() & jnp.all(jnp.isfinite(self.S)) & jnp.all(self.S >= 0.0)

    def site_covariances(self):
        """Sigma_i (n, c, c) = P_i A^-1 P_i^T (Lambda = 0), and nothing for the gradient to reuse."""
        S, _ = self._column_pass(self._Wt())
        return S, None

    def _gram_blocks(self):
        """H (c, c, M, M), H_lk = Phi^T diag(W_lk) Phi; W_kk = d_k (sum_{j != k} d_j) / sum d
        summed without cancellation (``structures.multiclass_fitc.own_weights``)."""
        c = self.d.shape[0]
        d, total = self.delta, self.total
        others = jnp.einsum("kj,ji->ki", 1.0 - jnp.eye(c, dtype=d.dtype), d)
        W = -d[:, None, :] * d[None, :, :] / total
        W = jnp.where(jnp.eye(c, dtype=bool)[:, :, None], (d * others / total)[:, None, :], W)
        return jnp.einsum("ia,lki,ib->lkab", self.Phi, W, self.Phi)

    def R_projected_diag(self):
        """(Q_k)_jj = (Phi^T R_kk Phi)_jj (c, M), each by the more accurate of its two forms
        (module docstring)."""
        c, M = self.S.shape
        H = self._gram_blocks()
        h = jnp.einsum("kkaa->ka", H)
        Y = jnp.transpose(self.s[:, None, :, None] * H, (1, 0, 2, 3)).reshape(c, c * M, M)  # Y[k] = [s_l H_lk]_l
        C = jax.vmap(lambda Yk: solve_triangular(self.L_A, Yk, lower=True))(Y)
        direct = h - jnp.sum(C * C, axis=1)
        by_identity = self.S * jnp.abs(h) > 1.0
        a_inv_diag = jnp.diag(self._A_inv()).reshape(c, M)
        identity = (1.0 - a_inv_diag) / jnp.where(by_identity, self.S, 1.0)
        return jnp.where(by_identity, identity, direct)

    def kernel_gradient(self, outer, scale_R, reuse=None):
        """d log Z / dS (c, M) for d log Z / dK~_k = sum_t c_t (x_tk y_tk^T + y_tk x_tk^T)/2 +
        scale_R R_kk (module docstring); ``outer`` = [(x_t, y_t, c_t)], x_t and y_t (c, n)."""
        dS = scale_R * self.R_projected_diag()
        for x, y, ct in outer:
            dS = dS + ct * jnp.einsum("ia,ki->ka", self.Phi, x) * jnp.einsum("ia,ki->ka", self.Phi, y)
        return dS

    def predict(self, a, Phi_star, k_star, full_cov):
        """Latent predictive at n* new inputs from the basis there, Phi_star (c, n*, M): mean (c, n*)
        and covariance (n*, c, c), or (c n*, c n*) class-major with ``full_cov`` (module docstring;
        ``k_star`` is not used)."""
        c, M, _ = self.V.shape
        Vs = self.s[:, :, None] * jnp.transpose(Phi_star, (0, 2, 1))  # (c, M, n*): diag(s_k) Phi*_k^T
        mean = jnp.einsum("kaj,ka->kj", Vs, jnp.einsum("kai,ki->ka", self.V, a))
        F = jnp.einsum("kalb,lbj->kalj", self._A_inv().reshape(c, M, c, M), Vs)  # (A^-1)_kl V*_l
        if not full_cov:
            return mean, jnp.einsum("kaj,kalj->jkl", Vs, F)
        ns = Vs.shape[2]
        cov = jnp.einsum("kaj,kalp->kjlp", Vs, F).reshape(c * ns, c * ns)
        return mean, 0.5 * (cov + cov.T)


class MulticlassHSGPStack:
    """c HSGP priors on one basis Phi (n, M) with variances S (c, M): what the multi-class
    solvers ask of a prior (``multiclass.DenseStack``); the posterior's gradient is already the
    Op's (in S)."""

    def __init__(self, S, Phi):
        self.S, self.Phi = S, Phi
        self.c, self.dtype = S.shape[0], Phi.dtype

    def matvec(self, v):
        """K~ v = (Phi (S_k * Phi^T v_k))_k, v (c, n)."""
        return jnp.einsum("ia,ka->ki", self.Phi, self.S * jnp.einsum("ia,ki->ka", self.Phi, v))

    def posterior(self, d):
        return MulticlassHSGPPosterior(self.Phi, self.S, d)

    @staticmethod
    def pull_back(g):
        return g


def _basis_function(basis):
    """``hsgp.basis_function``, imported when first used: ``hsgp`` imports PyTensor's JAX
    dispatch, whose import hook (``registration``) imports this module."""
    from .hsgp import basis_function

    return basis_function(basis)


def marginal_fn(approximation, basis, **options):
    """(S (c, M), X (n, D), theta (0,), y codes) -> (log_z, dS, dX (zero), dtheta (0,), loo, n_iter,
    status), the outputs of ``ApproxMarginalOp`` on this structure for the basis ``basis``
    (``structures.hsgp.LaplacianBasis``), with a ``custom_vjp`` (``common.evidence_with_vjp``)."""
    solve = solver(approximation, **options)
    phi = _basis_function(basis)

    def outputs(S, X, th, y):
        r = solve(MulticlassHSGPStack(S, phi(X)), codes(y))
        return (r["log_z"], r["dK"], jnp.zeros_like(X), jnp.zeros_like(th), r["loo"], r["n_iter"], r["status"])

    return evidence_with_vjp(outputs, 2)


def predictive_fn(approximation, basis, full_cov=False, **options):
    """(S, X, y, Phi_* (c, n*, M), k_**) -> mean (c, n*) and covariance (n*, c, c) or
    (c n*, c n*) (``LatentPredictiveOp``); NaN where the approximation failed."""
    solve = solver(approximation, **options)
    phi = _basis_function(basis)

    def predict(S, X, y, Phi_star, K_star):
        return predict_from(solve(MulticlassHSGPStack(S, phi(X)), codes(y)), Phi_star, K_star, full_cov)

    return predict


# ---------------------------------------------------------------------------------
# Registration (imported by ``registration`` once PyTensor's JAX dispatch is loaded)
# ---------------------------------------------------------------------------------


@implements(ApproxMarginalOp, STRUCTURE)
def hsgp_multiclass_marginal(op, node=None, **kwargs):
    check_supported(op)
    marginal = marginal_fn(op.approximation, op.structure.basis, **op_options(op, sampling=op.sampling))

    def multiclass_hsgp_marginal(S, X, params, y, hyper=None):
        return marginal(S, X, params, y)

    return multiclass_hsgp_marginal


@implements(LatentPredictiveOp, STRUCTURE)
def hsgp_multiclass_predictive(op, node=None, **kwargs):
    check_supported(op)
    predict = predictive_fn(op.approximation, op.structure.basis, op.full_cov, **op_options(op, sampling=False))

    def multiclass_hsgp_predictive(S, X, y, Phi_star, K_star):
        return predict(S, X, y, Phi_star, K_star)

    return multiclass_hsgp_predictive


__all__ = ["MulticlassHSGPPosterior", "MulticlassHSGPStack", "marginal_fn", "predictive_fn"]
