r"""The inducing-point (FITC) prior: K ~ Q + Lambda in O(n m^2) time and O(n m) memory.

Snelson & Ghahramani (2006); for EP classification Naish-Guzman & Holden (2008) and
GPML's ``apxSparse`` / ``infFITC_EP``. With m inducing inputs Xu,

.. math::

    \tilde K = Q + \Lambda, \quad Q = K_{fu} K_{uu}^{-1} K_{uf} = V^T V, \quad
    V = L_{uu}^{-1} K_{uf}, \quad \Lambda = \mathrm{diag}(k_{ff} - \mathrm{diag}\, Q),

with K_uu = L_uu L_uu^T. No n x n matrix is ever formed. Generatively, f = V^T z + e
with z ~ N(0, I_m) and e ~ N(0, Lambda) independent, which gives every formula below:
given Gaussian sites of precision w (EP's tau, Laplace's W), f_i | z has precision
1/Lambda_i + w_i, and the sites act on z with the effective precisions

.. math::

    d_i = \frac{w_i}{1 + w_i \Lambda_i} = w_i g_i, \qquad
    A = I_m + V \mathrm{diag}(d) V^T = L_A L_A^T \quad (\text{posterior precision of } z),

so that (Woodbury, with D = Lambda + W^{-1}, D^{-1} = diag(d)):

* R = (K~ + W^{-1})^{-1} = diag(d) - diag(d) V^T A^{-1} V diag(d);
* Sigma = (K~^{-1} + W)^{-1} = diag(g Lambda) + diag(g) V^T A^{-1} V diag(g);
* |B| = |I + W^{1/2} K~ W^{1/2}| = prod_i (1 + w_i Lambda_i) |A|;
* (I + W K~)^{-1} v = g v - d V^T A^{-1} V (g v) (the EP/Newton weights).

These stay finite at w_i = 0, and hold for negative w_i (the step likelihood's EP sites)
as long as 1 + w_i Lambda_i > 0 and A is positive definite, which is exactly when
K~^{-1} + W is (the joint precision of (z, f) and its Schur complements).

Gradient. Given the gradient G = dlog Z / dK~ of an evidence in the FITC covariance
(EP: (b b^T - R)/2; Laplace: its implicit term added, see ``approximations.laplace``),
with Bu = K_uu^{-1} K_uf and G' = G - diag(diag G) (diag Q cancels in K~'s diagonal):

.. math::

    \frac{\partial}{\partial K_{uf}} = 2 B_u G', \qquad
    \frac{\partial}{\partial K_{uu}} = -B_u G' B_u^T, \qquad
    \frac{\partial}{\partial k_{ff}} = \mathrm{diag}\, G,

(differentiate tr(G' dQ) with dQ = dK_fu Bu + Bu^T dK_uf - Bu^T dK_uu Bu). G is
a sum of a few outer products and a multiple of R, so Bu G' costs O(n m^2). Where
Lambda_i is clipped at zero (k_ff,i < Q_ii by rounding), K~_ii = Q_ii and d/dk_ff,i = 0.

Ill-conditioned K_uu: the Cholesky factorisation is retried with a jitter of
1e-10, 1e-8, ..., 1e-2 times the mean of diag(K_uu) added to its diagonal (the
documented fallback; ``FITCPrior.jitter`` records what was added). A constant on the
diagonal does not change the gradient's form, so the gradient is exact for the
jittered K_uu. Beyond 1e-2 the factorisation error propagates (a ``LinAlgError``: the
Op turns it into -inf and status 2).
"""

from collections import namedtuple

import numpy as np
from scipy.linalg import cho_solve, solve_triangular
from scipy.linalg.blas import dgemm, dsyrk, dtrmm, dtrsm
from scipy.linalg.lapack import dtrtri

from .dense import NotPositiveDefiniteError, chol_lower

FITCGradient = namedtuple("FITCGradient", ["Kuu", "Kuf", "k_diag"])
FITCGradient.__doc__ = "d log Z / d(K_uu, K_uf, diag K_ff) of an evidence with the FITC prior."

# Relative jitters tried, in turn, when K_uu has no Cholesky factor.
_JITTER_FALLBACK = (0.0, 1e-10, 1e-8, 1e-6, 1e-4, 1e-2)


def _chol_with_jitter(Kuu):
    """(L_uu, jitter): the Cholesky factor of K_uu + jitter I, with the smallest jitter
    of ``_JITTER_FALLBACK`` (relative to mean diag K_uu) that works."""
    scale = max(float(np.mean(np.diag(Kuu))), 1e-300)
    for rel in _JITTER_FALLBACK:
        jitter = rel * scale
        try:
            return chol_lower(Kuu + jitter * np.eye(Kuu.shape[0])), jitter
        except NotPositiveDefiniteError:
            continue
    raise NotPositiveDefiniteError(
        f"K_uu has no Cholesky factor even with a jitter of {_JITTER_FALLBACK[-1]:g} x mean diag: "
        "check the inducing inputs (duplicates?) and the covariance function")


def _column_blocks(m, n):
    """Slices of about 1 MB of columns of an m x n array.

    The O(n m^2) products run over column blocks so that no m x n temporary is made:
    at n = 10^5 a fresh 80 MB array is served by a new mapping whose first touch cost
    up to 185 ms on the benchmark machine, more than the arithmetic of a product.
    """
    step = max(256, (1 << 17) // max(m, 1))
    return [slice(j, min(j + step, n)) for j in range(0, n, step)]


def _inducing_precision(V, d):
    """A = I + V diag(d) V^T (lower triangle, Fortran-ordered), accumulated over column
    blocks (dsyrk where d >= 0, else a product with the signed weights)."""
    m, n = V.shape
    A = np.asfortranarray(np.eye(m))
    for cols in _column_blocks(m, n):
        Vb, db = V[:, cols], d[cols]
        if np.min(db, initial=0.0) >= 0.0:
            A = dsyrk(1.0, Vb * np.sqrt(db), beta=1.0, c=A, lower=1, overwrite_c=1)
        else:
            A = dgemm(1.0, Vb * db, Vb, beta=1.0, c=A, trans_b=1, overwrite_c=1)
    return A


class FITCPrior:
    r"""The FITC prior covariance K~ = Q + Lambda (module docstring), never formed.

    Parameters
    ----------
    Kuu : (m, m) covariance of the inducing values (any jitter already added).
    Kuf : (m, n) cross-covariance between inducing and training inputs.
    k_diag : (n,) prior variances diag K_ff.
    """

    sequential = False  # no rank-one sequential EP sweeps (they need the dense Sigma)

    def __init__(self, Kuu, Kuf, k_diag):
        Kuu, Kuf, k_diag = (np.asarray(a, dtype=float) for a in (Kuu, Kuf, k_diag))
        m, n = Kuf.shape
        if Kuu.shape != (m, m) or k_diag.shape != (n,):
            raise ValueError(f"FITC shapes do not match: Kuu {Kuu.shape}, Kuf {Kuf.shape}, k_diag {k_diag.shape}")
        for name, arr in (("Kuu", Kuu), ("Kuf", Kuf), ("k_diag", k_diag)):
            if not np.all(np.isfinite(arr)):
                raise ValueError(f"{name} contains NaN or inf")
        if n and np.min(k_diag) < 0.0:
            raise ValueError(f"k_diag has a negative entry ({np.min(k_diag):.3g}): not a covariance")
        self.n, self.m = n, m
        self.L_uu, self.jitter = _chol_with_jitter(0.5 * (Kuu + Kuu.T))
        self.V = solve_triangular(self.L_uu, Kuf, lower=True, check_finite=False)
        q_diag = np.einsum("ij,ij->j", self.V, self.V)
        self.unclipped = k_diag > q_diag
        self.lam = np.where(self.unclipped, k_diag - q_diag, 0.0)
        self._diag = self.lam + q_diag

    def diag(self):
        """diag K~ (the prior variances)."""
        return self._diag

    def matvec(self, v):
        """K~ v."""
        return self.lam * v + self.V.T @ (self.V @ v)

    def posterior(self, w):
        """q(f) at site precisions w (``FITCPosterior``)."""
        return FITCPosterior(self, w)

    def dense(self):
        """K~ as an n x n matrix (for tests and small problems only)."""
        return self.V.T @ self.V + np.diag(self.lam)

    def cross(self, Kus):
        """V_* = L_uu^{-1} K_u* for new inputs (prediction)."""
        return solve_triangular(self.L_uu, np.asarray(Kus, dtype=float), lower=True, check_finite=False)

    def inducing_weights(self, M):
        """Bu-type products: K_uu^{-1} K_uf = L_uu^{-T} V (or L_uu^{-T} M for any M)."""
        return solve_triangular(self.L_uu, M, lower=True, trans="T", check_finite=False)


class FITCPosterior:
    r"""q(f) = N(K~ a, (K~^{-1} + diag(w))^{-1}) for the FITC prior, through A = I + V diag(d) V^T.

    The same questions as ``structures.dense.LatentPosterior`` (module docstring for
    the formulas): O(n m^2) for the factorisation, O(n m) per solve.
    """

    def __init__(self, prior, w):
        self.prior = prior
        self.w = np.asarray(w, dtype=float)
        denom = 1.0 + self.w * prior.lam
        if np.min(denom, initial=1.0) <= 0.0:
            raise NotPositiveDefiniteError("K~^-1 + W is not positive definite (1 + w_i Lambda_i <= 0)")
        self.g = 1.0 / denom
        self.d = self.w * self.g
        self._log_denom = np.log(denom)
        self.L_A = chol_lower(_inducing_precision(prior.V, self.d), overwrite=True)
        # (NotPositiveDefiniteError exactly when K~^-1 + W is indefinite)
        self._L_A_inv = None
        self._C = self._c_sq_cached = None

    def _L_A_inv_times(self, B, trans=0):
        """L_A^{-1} B (L_A^{-T} B with trans=1); B is overwritten where it is Fortran-ordered.

        Where every site precision is >= 0, A = I + V D V^T has every eigenvalue >= 1, so
        cond(L_A) = sqrt(cond A) stays moderate and L_A^{-1} is formed once (m^3/3 flops)
        and applied as a product (dtrmm, about 1.3x faster here than dtrsm's solve).
        Negative sites (the step likelihood's EP) may bring A close to singular: there it
        is a triangular solve."""
        if np.min(self.d, initial=0.0) < 0.0:
            return dtrsm(1.0, self.L_A, B, lower=1, trans_a=trans, overwrite_b=1)
        if self._L_A_inv is None:
            inv, info = dtrtri(self.L_A, lower=1)
            if info != 0:
                raise NotPositiveDefiniteError(f"L_A is singular (dtrtri info {info})")
            self._L_A_inv = inv
        return dtrmm(1.0, self._L_A_inv, B, lower=1, trans_a=trans, overwrite_b=1)

    def _factor_columns(self):
        """C = L_A^{-1} V and ||C_i||^2, in one pass over column blocks (each block's
        norms are taken while it is still in cache)."""
        V = self.prior.V
        self._C = np.empty(V.shape, order="F")
        self._c_sq_cached = np.empty(V.shape[1])
        for cols in _column_blocks(*V.shape):
            self._C[:, cols] = V[:, cols]
            Cb = self._L_A_inv_times(self._C[:, cols])  # in place (an F-contiguous block)
            if not np.may_share_memory(Cb, self._C):
                self._C[:, cols] = Cb
            self._c_sq_cached[cols] = np.einsum("ij,ij->j", Cb, Cb)

    @property
    def C(self):
        """L_A^{-1} V (m, n), computed once on demand (marginal variances, gradients)."""
        if self._C is None:
            self._factor_columns()
        return self._C

    def _A_solve(self, x):
        return cho_solve((self.L_A, True), x, check_finite=False)

    def _low_rank(self, s, v):
        """diag(s) V^T A^{-1} V diag(s) v."""
        V = self.prior.V
        return s * (V.T @ self._A_solve(V @ (s * v)))

    def half_logdet_B(self):
        """(1/2) log|I + W^{1/2} K~ W^{1/2}| = (1/2) sum log(1 + w Lambda) + sum log diag L_A."""
        return float(0.5 * np.sum(self._log_denom) + np.sum(np.log(np.diag(self.L_A))))

    def weights(self, v):
        """(I + W K~)^{-1} v = g v - d V^T A^{-1} V (g v); the mean is K~ times this."""
        return self.mean_and_weights(v)[1]

    def mean_and_weights(self, v):
        """(K~ b, b) for b = ``weights(v)`` in two products with V instead of four: with
        u = V (g v) and z = A^{-1} u, b = g v - d V^T z, and V b = u - (A - I) z = z (as
        V D V^T = A - I), so K~ b = Lambda b + V^T z."""
        V = self.prior.V
        gv = self.g * np.asarray(v, dtype=float)
        Vt_z = V.T @ self._A_solve(V @ gv)
        b = gv - self.d * Vt_z
        return self.prior.lam * b + Vt_z, b

    def R_times(self, v):
        """(K~ + W^{-1})^{-1} v."""
        return self.d * v - self._low_rank(self.d, v)

    def sigma_times(self, v):
        """(K~^{-1} + W)^{-1} v."""
        return self.g * self.prior.lam * v + self._low_rank(self.g, v)

    def _c_sq(self):
        """||L_A^{-1} V_i||^2 for every i (computed once)."""
        if self._c_sq_cached is None:
            self._factor_columns()
        return self._c_sq_cached

    def var_diag(self):
        """diag Sigma = g Lambda + g^2 ||L_A^{-1} V_i||^2, floored at a tiny positive value."""
        var = self.g * self.prior.lam + self.g**2 * self._c_sq()
        return np.maximum(var, 1e-14 * np.maximum(self.prior.diag(), 1e-300))

    def R_diag(self):
        return self.d - self.d**2 * self._c_sq()

    def kernel_gradient(self, outer, scale_R):
        r"""d/d(K_uu, K_uf, k_diag) of an evidence whose gradient in K~ is
        G = sum_k c_k (x_k y_k^T + y_k x_k^T)/2 + scale_R R (module docstring).

        outer : sequence of (x, y, c).

        With Bu = L_uu^{-T} V, the module docstring's Bu G' is L_uu^{-T} P for

        .. math::

            P = s A^{-1} V D + \sum_k \tfrac{c_k}{2} (V x_k y_k^T + V y_k x_k^T) - V \mathrm{diag}(g'),

        (s = scale_R, D = diag(d), g' = diag G where Lambda is unclipped, else 0), since
        Bu R = L_uu^{-T} A^{-1} V D (V D V^T = A - I). A^{-1} V D = L_A^{-T} (C D) reuses
        C = L_A^{-1} V from the marginal variances, and P V^T needs a product over the n
        points only for its last term, as A^{-1} V D V^T = I - A^{-1}:

        .. math::

            P V^T = s (I - A^{-1}) + \sum_k \tfrac{c_k}{2} (V x_k (V y_k)^T + V y_k (V x_k)^T)
                    - V \mathrm{diag}(g') V^T,

        so dK_uu = -L_uu^{-T} (P V^T) L_uu^{-1}. About 3 m^2 n flops (a product with
        L_A^{-T} and a solve with L_uu^T, each with n right-hand sides, and V diag(g') V^T
        as two dsyrk, one per sign of g'), column block by column block
        (``_column_blocks``): the only m x n array made is dK_uf itself. (It was 5 m^2 n with three m x n temporaries: at n = 10^4, m =
        200 the gradient took 58 ms, now 38 ms; at n = 10^5, m = 100, 282 ms, now 133 ms.)
        """
        prior = self.prior
        V, d, m = prior.V, self.d, prior.m
        diag_G = scale_R * self.R_diag()
        for x, y, c in outer:
            diag_G += c * x * y
        diag_G = np.where(prior.unclipped, diag_G, 0.0)
        # the rank-2 terms of P, as Vxy @ xy[:, cols]: sum_k c_k/2 (V x_k y_k^T + V y_k x_k^T)
        # (one product with V per distinct vector: EP's outer term is (b, b))
        Vx = [V @ x for x, y, c in outer]
        Vy = [vx if y is x else V @ y for (x, y, c), vx in zip(outer, Vx)]
        Vxy = np.column_stack([0.5 * c * v for (x, y, c), vx, vy in zip(outer, Vx, Vy) for v in (vx, vy)]
                              or [np.zeros(m)])
        xy = np.vstack([v for x, y, c in outer for v in (y, x)] or [np.zeros(prior.n)])
        C, C_d = self.C, scale_R * d
        dKuf = np.empty((m, prior.n), order="F")
        root_G = np.sqrt(np.abs(diag_G))
        S = np.zeros((m, m), order="F")  # V diag(g') V^T, lower triangle
        for cols in _column_blocks(m, prior.n):
            Vb, gb = V[:, cols], diag_G[cols]
            P = self._L_A_inv_times(np.asfortranarray(C[:, cols] * C_d[cols]), trans=1)
            P -= Vb * gb
            P = dgemm(1.0, Vxy, xy[:, cols], beta=1.0, c=P, overwrite_c=1)
            dKuf[:, cols] = dtrsm(2.0, prior.L_uu, P, lower=1, trans_a=1, overwrite_b=1)  # 2 L_uu^{-T} P
            for sign, part in ((1.0, gb > 0.0), (-1.0, gb < 0.0)):  # dsyrk needs one sign
                S = dsyrk(sign, Vb[:, part] * root_G[cols][part], beta=1.0, c=S, lower=1, overwrite_c=1)
        PVt = -(S + np.tril(S, -1).T)
        for (x, y, c), vx, vy in zip(outer, Vx, Vy):  # sum_k c_k/2 (V x_k (V y_k)^T + V y_k (V x_k)^T)
            PVt += 0.5 * c * (np.outer(vx, vy) + np.outer(vy, vx))
        if scale_R != 0.0:
            PVt += scale_R * (np.eye(m) - cho_solve((self.L_A, True), np.eye(m), check_finite=False))
        dKuu = -prior.inducing_weights(prior.inducing_weights(PVt).T)  # -L_uu^{-T} (P V^T) L_uu^{-1}
        return FITCGradient(0.5 * (dKuu + dKuu.T), dKuf, diag_G)

    def ep_gradient(self, b):
        """dlog Z_EP / d(K_uu, K_uf, k_diag), from dlog Z_EP / dK~ = (b b^T - R)/2."""
        return self.kernel_gradient([(b, b, 0.5)], -0.5)

    def predict(self, a, Kus, k_diag_star):
        r"""Latent predictive mean and variance at new inputs, O(n_* m) memory.

        f_* = V_*^T z + e_*: mean Q_*f a = V_*^T (V a); variance
        k_** - ||V_*||^2 + ||L_A^{-1} V_*||^2 (Cov(z | y) = A^{-1}).

        Kus : (m, n_*) covariances between inducing and new inputs.
        k_diag_star : (n_*,) prior variances at the new inputs.
        """
        Vs = self.prior.cross(Kus)
        mean = Vs.T @ (self.prior.V @ a)
        Cs = solve_triangular(self.L_A, Vs, lower=True, check_finite=False)
        var = k_diag_star - np.einsum("ij,ij->j", Vs, Vs) + np.einsum("ij,ij->j", Cs, Cs)
        return mean, np.maximum(var, 0.0)

    def predict_cov(self, a, Kus, K_star):
        """Mean and full covariance K_** - V_*^T (I - A^{-1}) V_* at new inputs."""
        Vs = self.prior.cross(Kus)
        Cs = solve_triangular(self.L_A, Vs, lower=True, check_finite=False)
        cov = K_star - Vs.T @ Vs + Cs.T @ Cs
        return Vs.T @ (self.prior.V @ a), 0.5 * (cov + cov.T)
