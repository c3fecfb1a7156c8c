r"""The multi-class Ops under JAX: softmax Laplace and nested EP for the multinomial probit.

The JAX backend of ``approximations.softmax_laplace`` and
``approximations.multinomial_probit_ep`` with the dense (c, n, n) prior of
``structures.multiclass`` (same iterations, same fixed points, same evidence, gradient
and LOO terms), registered with PyTensor's ``jax_funcify`` for the evidence and predictive Ops on the
"dense-multiclass" structure (``ops.ApproxMarginalOp``, ``ops.LatentPredictiveOp``), so that a multi-class model runs
under PyMC's JAX samplers (numpyro, blackjax) and ``pytensor.function(..., mode="JAX")``.

* **Softmax Laplace** (Rasmussen & Williams 2006, Alg. 3.3, generalised to c classes;
  gradient: Alg. 5.2's implicit term in the adjoint form of Margossian et al. 2020):
  Newton on a = K^-1 f with the backtracking line search of the numba path, at most
  ``4 * max_iter`` steps (the numba path's retry). LA-LOO (Vehtari et al. 2016) with the
  same quasi-random draws as ``likelihoods.multiclass.Softmax.expected_prob``.
* **Nested EP** (Riihimaki, Jylanki & Vehtari 2013, JMLR 14, sec. 3-4): parallel outer
  sweeps, damped, Anderson-accelerated on the inner sites (``backends.jax.engine``'s
  Anderson step); the inner EP of each site (c - 1 probit factors, sequential rank-one
  updates) vectorised over the sites. Without convergence in ``max_sweeps``, a second run
  from zero sites with damping 0.5 and twice the sweeps (the numba path's retry). LOO:
  the tilted normalisers (Opper & Winther 2000).

The solvers take the prior as a structure (``DenseStack`` here, ``multiclass_fitc.
MulticlassFITCStack`` for each class's inducing-point prior): ``c``, ``dtype``,
``matvec(v)``, ``posterior(d)`` and ``pull_back(g)`` (the Op's kernel gradient from the
posterior's). The dense posterior at coupled site weights d (c, n) is ``CoupledPosterior``,
the block form of ``structures.multiclass.CoupledBlockPosterior`` (module docstring there):
c Cholesky factors of B_k = I + D_k^1/2 K_k D_k^1/2 (``backends.jax.engine``'s dense
factor) and one of M = sum_k E_k; no cn x cn matrix.

Both solvers are pure functions wrapped in ``jax.custom_vjp`` whose backward pass is the
cotangent times the gradient computed with the value at the fixed point, never automatic
differentiation through the loops. Every call starts cold (a pure function keeps no warm
starts). Status as ``backends.jax.engine``: 0 converged, 1 not converged (value used),
2 failed (a non-finite value or gradient): log_z = -inf, zero gradient, loo = -inf.

The FITC structure's ("fitc-multiclass") Ops are
registered in ``multiclass_fitc.py`` with these solvers.
"""

from functools import partial

import jax
import jax.numpy as jnp
from jax.scipy.linalg import cho_solve, solve_triangular
from jax.scipy.special import log_ndtr, logsumexp

from ...approximations.multinomial_probit_ep import multinomial_probit_ep
from ...approximations.softmax_laplace import LOO_DRAWS, softmax_laplace
from ...likelihoods.multiclass import standard_draws
from ...ops import ApproxMarginalOp, LatentPredictiveOp
from .common import (JaxSolver, evidence_with_vjp, checked_options, solver_table, ANDERSON_MEMORY, STATUS_CONVERGED, STATUS_FAILED, STATUS_NOT_CONVERGED, anderson_mix, empty_history,
                     push_history, reset_history)
from .engine import DenseLatent
from .likelihoods import inv_mills

# Newton's rounding floor (``approximations.laplace.newton_converged``): a change below this
# times (1 + max|f|) that no longer halves is converged.
_ROUNDING_LEVEL = 1e-6
_COV_JITTER = 1e-12  # ``likelihoods.multiclass._cov_factor``'s relative jitter


# ---------------------------------------------------------------------------------
# q(f) for the (c, n, n) stack at coupled weights d (structures/multiclass.py)
# ---------------------------------------------------------------------------------


def stack_times(A, v):
    """A_k v_k for a stack A (c, n, p) and v (c, p): (c, n)."""
    return jnp.einsum("kij,kj->ki", A, v)


def _class_block(Kk, dk):
    """One class's factor of B_k = I + D_k^1/2 K_k D_k^1/2 (``engine.DenseLatent``): half log|B_k|,
    L_k^-1, D_k^1/2 and E_k = D_k^1/2 B_k^-1 D_k^1/2."""
    S = DenseLatent(Kk)
    F = S.factor(dk)
    return F["half_logdet"], F["M"], F["sw"], S.R(F)


def _class_var(Kk, dk, Li, sw):
    """The marginal variances of class k's own posterior (K_k^-1 + D_k)^-1 from L_k^-1
    (``engine.DenseLatent.var``: O(n^2), stable where d K is small)."""
    return DenseLatent(Kk).var({"w": dk, "M": Li, "sw": sw})


class LoopCarried:
    """A pytree of the arrays named in ``FIELDS``, so that a ``lax.while_loop``'s state can
    carry a posterior (subclasses are registered with ``jax.tree_util.register_pytree_node_class``)."""

    FIELDS = ()

    def tree_flatten(self):
        return tuple(getattr(self, f) for f in self.FIELDS), None

    @classmethod
    def tree_unflatten(cls, aux, children):
        post = object.__new__(cls)
        for f, v in zip(cls.FIELDS, children):
            setattr(post, f, v)
        return post


class DenseStack:
    """The dense prior of c classes, K (c, n, n): what the solvers ask of a multi-class prior.

    ``c``; ``matvec(v)`` (K v for v (c, n)); ``posterior(d)`` (q(f) at coupled weights d,
    a ``LoopCarried``); ``pull_back(g)``: the Op's kernel gradient from the posterior's
    ``kernel_gradient`` (here the (c, n, n) stack itself)."""

    def __init__(self, K):
        self.K, self.c, self.dtype = K, K.shape[0], K.dtype

    def matvec(self, v):
        return stack_times(self.K, v)

    def posterior(self, d):
        return CoupledPosterior(self.K, d)

    @staticmethod
    def pull_back(g):
        return g


@jax.tree_util.register_pytree_node_class
class CoupledPosterior(LoopCarried):
    r"""q(f) = N(K a, (K^{-1} + W)^{-1}), W_i = diag(d_i) - d_i d_i^T / s_i
    (``structures.multiclass.CoupledBlockPosterior``): R = (K + W^{-1})^{-1} = E - E R M^{-1} R^T E,
    \tfrac12 \log|I + K W| = \sum_k \tfrac12 \log|B_k| + \log|L_M| - \tfrac12 \sum_i \log s_i.

    The interface every multi-class posterior gives the solvers (``multiclass_fitc``'s too):
    ``half_logdet_B``, ``ok``, ``K_times``, ``R_times``, ``weights``, ``site_covariances``
    (-> the c x c covariances (n, c, c) and what the gradient reuses), ``kernel_gradient``
    and ``predict``."""

    FIELDS = ("K", "d", "half_logdets", "Li", "sw", "E", "LM", "s")

    def __init__(self, K, d):
        self.K, self.d = K, d
        self.half_logdets, self.Li, self.sw, self.E = jax.vmap(_class_block)(K, d)
        self.LM = jnp.linalg.cholesky(jnp.sum(self.E, axis=0))
        self.s = jnp.sum(d, axis=0)

    def half_logdet_B(self):
        return (jnp.sum(self.half_logdets) + jnp.sum(jnp.log(jnp.diag(self.LM)))
                - 0.5 * jnp.sum(jnp.log(self.s)))

    def ok(self):
        return jnp.isfinite(self.half_logdet_B()) & jnp.all(jnp.isfinite(self.LM)) & jnp.all(jnp.isfinite(self.E))

    def K_times(self, v):
        return stack_times(self.K, v)

    def R_times(self, u):
        """(K + W^-1)^-1 u for u (c, n)."""
        Eu = stack_times(self.E, u)
        t = cho_solve((self.LM, True), jnp.sum(Eu, axis=0))
        return Eu - jnp.einsum("kij,j->ki", self.E, t)

    def weights(self, v):
        """(I - (K + W^-1)^-1 K) v: Newton's a from v = W f + g (Alg. 3.3); EP's b from h."""
        return v - self.R_times(stack_times(self.K, v))

    def _left_LM_inv(self, A):
        """L_M^-1 A_k for a stack A (c, n, p): (c, n, p), one triangular solve."""
        c, n, p = A.shape
        X = solve_triangular(self.LM, jnp.transpose(A, (1, 0, 2)).reshape(n, c * p), lower=True)
        return jnp.transpose(X.reshape(n, c, p), (1, 0, 2))

    def site_covariances(self):
        r"""The c x c posterior covariances Sigma_i (n, c, c): diagonal blocks
        (K_k^{-1} + D_k)^{-1}, plus G_k^T G_l with G_k = H_k K_k, H_k = L_M^{-1} E_k
        (``CoupledBlockPosterior.site_covariances``); and H (c, n, n), which the gradient reuses."""
        H = self._left_LM_inv(self.E)
        G = jnp.einsum("kmj,kji->kmi", H, self.K)
        S = jnp.einsum("kmi,lmi->ikl", G, G)
        c = self.d.shape[0]
        own_var = jax.vmap(_class_var)(self.K, self.d, self.Li, self.sw)
        return S + jnp.eye(c, dtype=S.dtype)[None] * own_var.T[:, :, None], H

    def kernel_gradient(self, outer, scale_R, H):
        """d log Z / dK_k = sum_t c_t (x_tk y_tk^T + y_tk x_tk^T) / 2 + scale_R R_kk (c, n, n) for
        ``outer`` = [(x_t, y_t, c_t)], R_kk = E_k - H_k^T H_k (``site_covariances``' H)."""
        g = scale_R * (self.E - jnp.einsum("kmi,kmj->kij", H, H))
        for x, y, ct in outer:
            g = g + 0.5 * ct * (jnp.einsum("ki,kj->kij", x, y) + jnp.einsum("ki,kj->kij", y, x))
        return g

    def predict(self, a, K_cross, K_star, full_cov):
        """Latent predictive at m new points (R&W Alg. 3.4; ``CoupledBlockPosterior.predict``):
        mean (c, m) and covariance (m, c, c), or (c m, c m) class-major with ``full_cov``."""
        c, _, m = K_cross.shape
        mean = jnp.einsum("kim,ki->km", K_cross, a)
        P = jnp.einsum("kij,kjm->kim", self.E, K_cross)
        Q = self._left_LM_inv(P)
        if not full_cov:
            cov = jnp.einsum("kjm,ljm->mkl", Q, Q)
            own = K_star - jnp.einsum("kim,kim->km", K_cross, P)
            return mean, cov + jnp.eye(c, dtype=cov.dtype)[None] * own.T[:, :, None]
        cov = jnp.einsum("kjm,ljp->kmlp", Q, Q)
        own = K_star - jnp.einsum("kim,kip->kmp", K_cross, P)
        cov = cov + jnp.eye(c, dtype=cov.dtype)[:, None, :, None] * own[:, :, None, :]
        cov = cov.reshape(c * m, c * m)
        return mean, 0.5 * (cov + cov.T)


def finish_outputs(log_z, dK, loo, n_iter, converged, ok, extra):
    """Status and the failure convention: -inf value, zero gradient, -inf loo. A NaN LOO term
    (a cavity without a Cholesky factor, where the numba path raises) is a failure too. ``dK``:
    an array or a tuple of arrays (FITC's three kernel inputs)."""
    grads = jax.tree_util.tree_leaves(dK)
    ok = (ok & jnp.isfinite(log_z) & jnp.all(jnp.asarray([jnp.all(jnp.isfinite(g)) for g in grads]))
          & ~jnp.any(jnp.isnan(loo)))
    status = jnp.where(ok, jnp.where(converged, STATUS_CONVERGED, STATUS_NOT_CONVERGED), STATUS_FAILED)
    return {"log_z": jnp.where(ok, log_z, -jnp.inf), "dK": jax.tree_util.tree_map(lambda g: jnp.where(ok, g, 0.0), dK),
            "loo": jnp.where(ok, loo, -jnp.inf), "n_iter": n_iter.astype(jnp.int64),
            "status": status.astype(jnp.int64), **extra}


def _one_hot(y, c, dtype):
    """(c, n): 1 at each observation's class."""
    return (jnp.arange(c)[:, None] == y[None, :]).astype(dtype)


# ---------------------------------------------------------------------------------
# Softmax Laplace (approximations/softmax_laplace.py)
# ---------------------------------------------------------------------------------


def _softmax_log_lik(Y, F):
    """log pi_{y_i}(f_i) (n,) and pi (c, n) (``likelihoods.multiclass._softmax_log_lik``)."""
    lse = logsumexp(F, axis=0)
    return jnp.sum(Y * F, axis=0) - lse, jnp.exp(F - lse[None])


def _mode_sensitivity(pi, S):
    r"""s_{ik} = -\tfrac12 \sum_{jl} \Sigma^{(i)}_{jl} \partial W^{(i)}_{jl} / \partial f_{ik}
    (``softmax_laplace._mode_sensitivity``): pi_k (v_k - pi . v), v_j = S_jj - 2 (S pi)_j."""
    P = pi.T
    v = jnp.einsum("ijj->ij", S) - 2.0 * jnp.einsum("ijl,il->ij", S, P)
    return (-0.5 * P * (v - jnp.sum(P * v, axis=1, keepdims=True))).T


def _softmax_loo(y, Y, f, pi, S):
    """LA-LOO log q(y_i | y_-i) with c-variate cavities (``softmax_laplace._loo_log_p``), the
    softmax averaged over the fixed draws of ``Softmax.expected_prob``."""
    c = pi.shape[0]
    P, F, G = pi.T, f.T, (Y - pi).T
    eye = jnp.eye(c, dtype=f.dtype)
    W = P[:, :, None] * eye[None] - P[:, :, None] * P[:, None, :]
    A = eye[None] - S @ W
    C = jnp.linalg.solve(A, S)
    m = jnp.linalg.solve(A, F[:, :, None] - S @ (W @ F[:, :, None] + G[:, :, None]))[:, :, 0]
    C = 0.5 * (C + jnp.transpose(C, (0, 2, 1)))
    return jnp.log(_expected_softmax(y, m, C))


def _expected_softmax(y, mean, cov):
    """E[pi_{y_i}(f_i)] under N(mean_i, cov_i) over the fixed quasi-random draws (m,)."""
    c = mean.shape[1]
    Z = jnp.asarray(standard_draws(c, LOO_DRAWS))
    jitter = _COV_JITTER * jnp.maximum(jnp.trace(cov, axis1=1, axis2=2) / c, 1e-300)
    L = jnp.linalg.cholesky(cov + jitter[:, None, None] * jnp.eye(c, dtype=cov.dtype))
    Fd = mean[:, None, :] + jnp.einsum("ikj,sj->isk", L, Z)  # (m, draws, c)
    lse = logsumexp(Fd, axis=2)
    own = jnp.take_along_axis(Fd, y[:, None, None], axis=2)[:, :, 0]
    return jnp.mean(jnp.exp(own - lse), axis=1)


def softmax_laplace_solve(prior, y, *, tol=1e-10, max_iter=100):
    """Newton to the mode, then Laplace's evidence, its gradient in the prior's kernel inputs
    (the mode's movement included, ``softmax_laplace._gradient``) and LA-LOO. ``prior``: a
    ``DenseStack`` or ``multiclass_fitc.MulticlassFITCStack``; y int codes."""
    c, n, dtype = prior.c, y.shape[0], prior.dtype
    Y = _one_hot(y, c, dtype)

    def psi(a, f, lp):
        return jnp.sum(lp) - 0.5 * jnp.sum(a * f)

    a0 = jnp.zeros((c, n), dtype)
    lp0, pi0 = _softmax_log_lik(Y, a0)
    inf = jnp.array(jnp.inf, dtype)
    post0 = jax.tree_util.tree_map(jnp.zeros_like, jax.eval_shape(prior.posterior, pi0))
    state = {"a": a0, "f": a0, "pi": pi0, "psi": psi(a0, a0, lp0), "it": jnp.array(0, jnp.int64),
             "change": inf, "converged": jnp.array(False), "post": post0, "done": jnp.array(False)}

    def body(s):
        """A Newton step from q(f) at the current pi; on the last pass (converged, out of
        steps or a non-finite Psi) only that posterior, for the evidence (traced once)."""
        a, f, pi = s["a"], s["f"], s["pi"]
        last = s["converged"] | (s["it"] >= 4 * max_iter) | ~jnp.isfinite(s["psi"])
        post = prior.posterior(pi)
        v = pi * f - pi * jnp.sum(pi * f, axis=0) + Y - pi
        da = post.weights(v) - a

        def trial(step):
            a_try = a + step * da
            f_try = prior.matvec(a_try)
            lp_try, pi_try = _softmax_log_lik(Y, f_try)
            return a_try, f_try, pi_try, psi(a_try, f_try, lp_try)

        def shorten(t):
            step, k = 0.5 * t[0], t[1] + 1
            return (step, k, *trial(step))

        def worse(t):
            return ~last & (t[5] < s["psi"] - 1e-12 * jnp.abs(s["psi"])) & (t[1] < 39)

        one = jnp.asarray(1.0, dtype)
        _, _, a_new, f_new, pi_new, psi_new = jax.lax.while_loop(
            worse, shorten, (one, jnp.array(0, jnp.int64), *trial(one)))
        change = jnp.max(jnp.abs(f_new - f))
        change = jnp.where(jnp.isfinite(change), change, jnp.inf)
        scale = 1.0 + jnp.max(jnp.abs(f_new))
        converged = (change <= tol * scale) | ((change <= _ROUNDING_LEVEL * scale) & (change >= 0.5 * s["change"]))
        new = {"a": a_new, "f": f_new, "pi": pi_new, "psi": psi_new, "it": s["it"] + 1, "change": change,
               "converged": converged}
        kept = {k: jnp.where(last, s[k], new[k]) for k in new}
        return {**kept, "post": post, "done": last}

    s = jax.lax.while_loop(lambda s: ~s["done"], body, state)
    a, f, pi, post = s["a"], s["f"], s["pi"], s["post"]
    log_z = s["psi"] - post.half_logdet_B()
    S, reuse = post.site_covariances()
    sens = _mode_sensitivity(pi, S)
    u = sens - post.R_times(prior.matvec(sens))
    dK = prior.pull_back(post.kernel_gradient([(a, a, 0.5), (u, a, 1.0)], -0.5, reuse))
    loo = _softmax_loo(y, Y, f, pi, S)
    return finish_outputs(log_z, dK, loo, s["it"], s["converged"], post.ok(), {"a": a, "post": post})


# ---------------------------------------------------------------------------------
# Nested EP for the multinomial probit (approximations/multinomial_probit_ep.py)
# ---------------------------------------------------------------------------------


def _others(y, c):
    """(n, c - 1): the classes other than y_i, in order."""
    jj = jnp.arange(c - 1)
    return jj[None, :] + (jj[None, :] >= y[:, None])


def _outer_sites(y, tau, nu, c):
    """d (c, n), h (c, n) and log constants (n,) of the outer sites (``multinomial_probit_ep.outer_sites``)."""
    O = (_others(y, c)[:, :, None] == jnp.arange(c)[None, None, :]).astype(tau.dtype)  # (n, c-1, c)
    Yh = _one_hot(y, c, tau.dtype).T
    s1 = 1.0 + jnp.sum(tau, axis=1)
    snu = jnp.sum(nu, axis=1)
    r = snu / s1
    d = Yh + jnp.einsum("ij,ijk->ik", tau, O)
    h = Yh * r[:, None] + jnp.einsum("ij,ijk->ik", -nu + tau * r[:, None], O)
    return d.T, h.T, -0.5 * jnp.log(s1) + 0.5 * snu * snu / s1


def _ep_posterior(prior, y, tau, nu):
    """q(f) at the inner sites: (posterior, b, mean (c, n), d, h, log constants)."""
    d, h, log_const = _outer_sites(y, tau, nu, prior.c)
    post = prior.posterior(d)
    b = post.weights(h)
    return post, b, prior.matvec(b), d, h, log_const


def _cavities(mean, S, d, h):
    """Cavity means (n, c) and covariances (n, c, c): N(mean_i, S_i) / site_i (``multinomial_probit_ep._cavities``)."""
    c = d.shape[0]
    D, H = d.T, h.T
    s = jnp.sum(D, axis=1)
    eye = jnp.eye(c, dtype=S.dtype)
    T = D[:, :, None] * eye[None] - D[:, :, None] * D[:, None, :] / s[:, None, None]
    A = eye[None] - S @ T
    C = jnp.linalg.solve(A, S)
    m = jnp.linalg.solve(A, mean.T[:, :, None] - S @ H[:, :, None])[:, :, 0]
    return m, 0.5 * (C + jnp.transpose(C, (0, 2, 1)))


def _factor_vectors(k, c, dtype):
    """b_j = e_k - e_j + e_u (u last) for the c - 1 classes j != k: (c - 1, c + 1)."""
    j = jnp.arange(c - 1) + (jnp.arange(c - 1) >= k)
    cols = jnp.arange(c + 1)
    return ((cols[None] == k).astype(dtype) - (cols[None] == j[:, None]).astype(dtype)
            + (cols[None] == c).astype(dtype))


def _site_terms(Bv, Sw, mw, tau, nu):
    """sum_j [log Zhat_j - log int q_{-j} g_j] for one site's factors at the posterior N(mw, Sw)
    that includes its inner sites (tau, nu) (``multinomial_probit_ep._inner_ep_site``, end)."""
    v = jnp.einsum("ja,ab,jb->j", Bv, Sw, Bv)
    mt = Bv @ mw
    vc = 1.0 / (1.0 / v - tau)
    mc = vc * (mt / v - nu)
    log_zhat = log_ndtr(mc / jnp.sqrt(1.0 + vc))
    log_g = -0.5 * jnp.log1p(vc * tau) - 0.5 * mc * mc / vc + 0.5 * (mc / vc + nu) ** 2 / (1.0 / vc + tau)
    return jnp.sum(log_zhat - log_g)


def _inner_site(m, C, k, tau, nu, tol, max_sweeps):
    """Inner EP for one site (``multinomial_probit_ep._inner_ep_site``): cavity N(m, C) over f_i,
    factors Phi(u + f_k - f_j), sequential rank-one updates from the sites (tau, nu). Returns
    the new (tau, nu) and the site's evidence terms (``_site_terms``) at the sites given."""
    c = m.shape[0]
    Bv = _factor_vectors(k, c, m.dtype)
    Sw = jnp.zeros((c + 1, c + 1), m.dtype).at[:c, :c].set(C).at[c, c].set(1.0)
    mw = jnp.concatenate([m, jnp.zeros(1, m.dtype)])

    def rank_one(Sw, mw, Sb, dtau, dnu, v, mt):
        den = 1.0 + dtau * v
        return Sw - (dtau / den) * jnp.outer(Sb, Sb), mw + Sb * ((dnu - dtau * mt) / den)

    def warm(jj, carry):
        Sw, mw = carry
        Sb = Sw @ Bv[jj]
        return rank_one(Sw, mw, Sb, tau[jj], nu[jj], Bv[jj] @ Sb, Bv[jj] @ mw)

    Sw, mw = jax.lax.fori_loop(0, c - 1, warm, (Sw, mw))
    terms = _site_terms(Bv, Sw, mw, tau, nu)

    def update(jj, carry):
        Sw, mw, tau, nu, change = carry
        Sb = Sw @ Bv[jj]
        v, mt = Bv[jj] @ Sb, Bv[jj] @ mw
        vc = 1.0 / (1.0 / v - tau[jj])
        mc = vc * (mt / v - nu[jj])
        sq = jnp.sqrt(1.0 + vc)
        z = mc / sq
        r = inv_mills(z)
        mean = mc + vc * r / sq
        var = jnp.maximum(vc - vc * vc * r * (z + r) / (1.0 + vc), 1e-12 * vc)
        dtau = (1.0 / var - 1.0 / vc) - tau[jj]
        dnu = (mean / var - mc / vc) - nu[jj]
        Sw, mw = rank_one(Sw, mw, Sb, dtau, dnu, v, mt)
        tau, nu = tau.at[jj].add(dtau), nu.at[jj].add(dnu)
        change = jnp.maximum(change, jnp.maximum(jnp.abs(dtau) / (1.0 + jnp.abs(tau[jj])),
                                                 jnp.abs(dnu) / (1.0 + jnp.abs(nu[jj]))))
        return Sw, mw, tau, nu, change

    def sweep(carry):
        Sw, mw, tau, nu, _, sweeps = carry
        Sw, mw, tau, nu, change = jax.lax.fori_loop(0, c - 1, update, (Sw, mw, tau, nu, jnp.zeros((), m.dtype)))
        return Sw, mw, tau, nu, change, sweeps + 1

    def more(carry):
        return (carry[5] < max_sweeps) & ~(carry[4] <= tol)

    _, _, tau, nu, _, _ = jax.lax.while_loop(
        more, sweep, (Sw, mw, tau, nu, jnp.array(jnp.inf, m.dtype), jnp.array(0, jnp.int64)))
    return tau, nu, terms


def _loo_log_z(m, C, y, tau, nu):
    r"""The Gaussian part of log Zhat_i by the converged inner sites (``multinomial_probit_ep._loo_log_z``):
    -log|A|/2 + nu^T V A^{-1} nu / 2 + m_t^T A^{-1} nu - m_t^T A^{-1} T m_t / 2, A = I + T V."""
    n, cm1 = tau.shape
    c = cm1 + 1
    B = jnp.transpose(jax.vmap(lambda k: _factor_vectors(k, c, m.dtype))(y), (0, 2, 1))  # (n, c+1, c-1)
    Cw = jnp.zeros((n, c + 1, c + 1), m.dtype).at[:, :c, :c].set(C).at[:, c, c].set(1.0)
    mw = jnp.concatenate([m, jnp.zeros((n, 1), m.dtype)], axis=1)
    V = jnp.transpose(B, (0, 2, 1)) @ Cw @ B
    mt = jnp.einsum("ijk,ij->ik", B, mw)
    A = jnp.eye(cm1, dtype=m.dtype)[None] + tau[:, :, None] * V
    _, logdet = jnp.linalg.slogdet(A)
    x_nu = jnp.linalg.solve(A, nu[:, :, None])[:, :, 0]
    x_m = jnp.linalg.solve(jnp.transpose(A, (0, 2, 1)), mt[:, :, None])[:, :, 0]
    x_tm = jnp.linalg.solve(A, (tau * mt)[:, :, None])[:, :, 0]
    quad = (0.5 * jnp.einsum("ij,ijk,ik->i", nu, V, x_nu) + jnp.sum(nu * x_m, axis=1)
            - 0.5 * jnp.sum(mt * x_tm, axis=1))
    return -0.5 * logdet + quad


def _ep_evaluate(prior, y, tau, nu, damping, inner_tol, inner_max_sweeps):
    """Everything at the inner sites (tau, nu): q(f), its evidence, the cavities, and the
    damped EP map's new sites with the largest relative change (one outer sweep)."""
    post, b, mean, d, h, log_const = _ep_posterior(prior, y, tau, nu)
    S, reuse = post.site_covariances()
    m, C = _cavities(mean, S, d, h)
    new_tau, new_nu, terms = jax.vmap(_inner_site, in_axes=(0, 0, 0, 0, 0, None, None))(
        m, C, y, tau, nu, inner_tol, inner_max_sweeps)
    new_tau = damping * new_tau + (1.0 - damping) * tau
    new_nu = damping * new_nu + (1.0 - damping) * nu
    change = jnp.maximum(jnp.max(jnp.abs(new_tau - tau) / (1.0 + jnp.abs(new_tau))),
                         jnp.max(jnp.abs(new_nu - nu) / (1.0 + jnp.abs(new_nu))))
    log_z = -post.half_logdet_B() + 0.5 * jnp.sum(h * mean) + jnp.sum(log_const) + jnp.sum(terms)
    return {"log_z": log_z, "ok": post.ok(), "post": post, "reuse": reuse, "b": b, "m": m, "C": C, "terms": terms,
            "new_tau": new_tau, "new_nu": new_nu, "change": jnp.where(jnp.isfinite(change), change, jnp.inf)}


def nested_ep_solve(prior, y, *, tol=1e-8, max_sweeps=100, damping=0.8, inner_tol=1e-10, inner_max_sweeps=3):
    """Nested EP to convergence, then EP's evidence, its gradient (b_k b_k^T - R_kk) / 2 in K~_k
    (pulled back to the prior's kernel inputs) and the LOO terms log Zhat_i. ``prior``: a
    ``DenseStack`` or ``multiclass_fitc.MulticlassFITCStack``; y int codes.

    One ``lax.while_loop``; each pass evaluates everything at its sites (``_ep_evaluate``,
    traced once) and stops where the EP map moves no site by more than tol, so the
    posterior in hand is at the returned sites. Otherwise the next sites are Anderson's
    extrapolation (the map's value where it leaves the map's domain). After ``max_sweeps``
    without convergence, a second phase restarts from zero sites with damping 0.5 for
    ``2 * max_sweeps`` (the numba path's retry)."""
    c, n, dtype = prior.c, y.shape[0], prior.dtype
    N = n * (c - 1)
    zeros = jnp.zeros((n, c - 1), dtype)
    evaluate = partial(_ep_evaluate, prior, y, inner_tol=inner_tol, inner_max_sweeps=inner_max_sweeps)
    ev0 = jax.tree_util.tree_map(jnp.zeros_like, jax.eval_shape(evaluate, zeros, zeros, 1.0))
    state = {"tau": zeros, "nu": zeros, "ev": ev0, "hist": empty_history(N, ANDERSON_MEMORY, dtype),
             "sweeps": jnp.array(0, jnp.int64), "phase_sweeps": jnp.array(0, jnp.int64),
             "phase": jnp.array(0, jnp.int64), "converged": jnp.array(False), "done": jnp.array(False)}

    def body(s):
        tau, nu = s["tau"], s["nu"]
        damp = jnp.where(s["phase"] == 0, damping, 0.5)
        ev = evaluate(tau, nu, damp)
        phase_sweeps = s["phase_sweeps"] + 1
        converged = ev["change"] <= tol
        exhausted = ~jnp.isfinite(ev["change"]) | (phase_sweeps >= jnp.where(s["phase"] == 0, 1, 2) * max_sweeps)
        restart = exhausted & ~converged & (s["phase"] == 0)
        x_old = jnp.concatenate([tau.ravel(), nu.ravel()])
        g = jnp.concatenate([ev["new_tau"].ravel(), ev["new_nu"].ravel()])
        hist = push_history(s["hist"], g - x_old, g, ANDERSON_MEMORY)
        x = anderson_mix(hist, g - x_old, g, ANDERSON_MEMORY)
        astray = ((jnp.min(x[:N]) < 0.0) & (jnp.min(ev["new_tau"]) >= 0.0)) | ~jnp.all(jnp.isfinite(x))
        hist = jax.lax.cond(astray | restart, reset_history, lambda v: v, hist)
        x = jnp.where(astray, g, x)
        x = jnp.where(restart, 0.0, jnp.where(converged | exhausted, x_old, x))
        return {"tau": x[:N].reshape(n, c - 1), "nu": x[N:].reshape(n, c - 1), "ev": ev, "hist": hist,
                "sweeps": s["sweeps"] + 1, "phase_sweeps": jnp.where(restart, 0, phase_sweeps),
                "phase": jnp.where(restart, 1, s["phase"]), "converged": converged,
                "done": converged | (exhausted & ~restart)}

    s = jax.lax.while_loop(lambda s: ~s["done"], body, state)
    ev, tau, nu = s["ev"], s["tau"], s["nu"]
    dK = prior.pull_back(ev["post"].kernel_gradient([(ev["b"], ev["b"], 0.5)], -0.5, ev["reuse"]))
    loo = _loo_log_z(ev["m"], ev["C"], y, tau, nu) + ev["terms"]
    return finish_outputs(ev["log_z"], dK, loo, s["sweeps"], s["converged"], ev["ok"], {"a": ev["b"], "post": ev["post"]})


# ---------------------------------------------------------------------------------
# The pure functions the Ops call
# ---------------------------------------------------------------------------------

SOLVERS = solver_table({
    softmax_laplace: JaxSolver(softmax_laplace_solve, ("tol", "max_iter")),
    multinomial_probit_ep: JaxSolver(nested_ep_solve, ("tol", "max_sweeps", "damping", "inner_tol", "inner_max_sweeps")),
})
# options of the numba solvers with no meaning here (single-precision products, LOO on demand)
_IGNORED = ("rough_gradient", "with_grad", "with_loo")


def solver(approximation, **options):
    """The solver (prior, y codes) -> dict for ``approximation`` (the registry's "laplace" or
    "ep", multi-class), options bound; ValueError for an option it does not take. The prior is
    a ``DenseStack`` or a ``multiclass_fitc.MulticlassFITCStack``."""
    options = {k: v for k, v in options.items() if k not in _IGNORED}
    twin, options = checked_options(SOLVERS, approximation, options, approximation)
    if "damping" in options and not 0.0 < options["damping"] <= 1.0:
        raise ValueError(f"damping must be in (0, 1], got {options['damping']}")
    return partial(twin.solve, **options)


def codes(y):
    """Class codes (given as floats by the Ops) as int32."""
    return jnp.asarray(y).astype(jnp.int32)


def marginal_fn(approximation, **options):
    """(K (c, n, n), theta (0,), y codes) -> (log_z, dlog_z/dK, dlog_z/dtheta (0,), loo,
    n_iter, status) with a ``custom_vjp`` (``evidence_with_vjp``)."""
    solve = solver(approximation, **options)

    def outputs(K, th, y):
        r = solve(DenseStack(K), codes(y))
        return r["log_z"], r["dK"], jnp.zeros_like(th), r["loo"], r["n_iter"], r["status"]

    return evidence_with_vjp(outputs, 1)


def predictive_fn(approximation, full_cov=False, **options):
    """(K, y, K_cross (c, n, m), K_star (c, m) or (c, m, m)) -> mean (c, m) and covariance
    (m, c, c) or (c m, c m) under q (``ops.LatentPredictiveOp``); NaN where
    the approximation failed."""
    solve = solver(approximation, **options)

    def predict(K, y, K_cross, K_star):
        return predict_from(solve(DenseStack(K), codes(y)), K_cross, K_star, full_cov)

    return predict


def predict_from(r, K_cross, K_star, full_cov):
    """The predictive mean and covariance of a solver's result ``r`` (its posterior ``post``
    and weights ``a``) at K_cross, K_star; NaN where the approximation failed."""
    mean, cov = r["post"].predict(r["a"], K_cross, K_star, full_cov)
    bad = r["status"] == STATUS_FAILED
    return jnp.where(bad, jnp.nan, mean), jnp.where(bad, jnp.nan, cov)


# ---------------------------------------------------------------------------------
# Registration (imported by ``registration`` once PyTensor's JAX dispatch is loaded)
# ---------------------------------------------------------------------------------


from .dispatch import check_supported, implements, op_options  # noqa: E402  (registers the binary Ops)


@implements(ApproxMarginalOp, "dense-multiclass")
def dense_multiclass_marginal(op, node=None, **kwargs):
    check_supported(op)
    marginal = marginal_fn(op.approximation, **op_options(op, sampling=op.sampling))

    def multiclass_marginal(K, params, y, hyper=None):
        return marginal(K, params, y)

    return multiclass_marginal


@implements(LatentPredictiveOp, "dense-multiclass")
def dense_multiclass_predictive(op, node=None, **kwargs):
    check_supported(op)
    predict = predictive_fn(op.approximation, op.full_cov, **op_options(op, sampling=False))

    def multiclass_predictive(K, y, K_cross, K_star):
        return predict(K, y, K_cross, K_star)

    return multiclass_predictive


__all__ = ["CoupledPosterior", "DenseStack", "LoopCarried", "check_supported", "codes",
           "marginal_fn", "nested_ep_solve", "predict_from", "predictive_fn", "softmax_laplace_solve", "solver",
           "stack_times"]
