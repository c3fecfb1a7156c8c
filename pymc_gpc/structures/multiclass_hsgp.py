r"""Several classes with basis-function (HSGP) priors: q(f) through the basis weights.

Each class k has its own HSGP prior (``structures.hsgp``) on M basis functions,

.. math::

    \tilde K_k = \Phi_k \,\mathrm{diag}(S_k)\, \Phi_k^T = V_k^T V_k, \qquad
    V_k = \mathrm{diag}(s_k) \Phi_k^T, \quad s_k = \sqrt{S_k},

so f = P z with z ~ N(0, I_{cM}), P = blockdiag(V_1^T, ..., V_c^T): the multi-class FITC
prior of ``structures.multiclass_fitc`` with Lambda = 0, which answers the Woodbury solves,
site covariances and CG Newton steps. What differs:

* the capacitance A = I + P^T W P has blocks s_l H_lk s_k, H_lk = Phi_l^T diag(W_lk) Phi_k
  (kept for the gradient);
* the gradient is in S_k: with G_k the diagonal block of dlog Z/dK~,

  .. math::

      \frac{\partial \log Z}{\partial S_{kj}} = \phi_{kj}^T G_k \phi_{kj}
      = \sum_t c_t (\Phi_k^T x_{tk})_j (\Phi_k^T y_{tk})_j + r\, (Q_k)_{jj}, \qquad
      Q_k = \Phi_k^T R_{kk} \Phi_k,

  (Q_k)_jj = H_kk,jj - ||L_A^{-1} Y_k e_j||^2 (Y_k = [s_l H_lk]_l) where S_kj |H_kk,jj| <= 1,
  else (1 - (A^{-1})_{kj,kj}) / S_kj, the two forms of ``structures.hsgp``;
* the predictive: mean Phi*_k S_k Phi_k^T a_k, covariances B*_i A^{-1} B*_i^T with B*_i's
  block k s_k Phi*_k,i.

Cost: the H_lk in c (c + 1) n M^2 / 2 flops with one shared basis (c^2 n M^2 otherwise),
A's factor (cM)^3 / 3; memory O(c n M). The members are ``multiclass_fitc``'s, with
``kernel_gradient`` returning a ``MulticlassHSGPGradient``.
"""

from collections import namedtuple

import numpy as np
from scipy.linalg import solve_triangular

from .fitc import NonFiniteKernelError
from .hsgp import DenseBasis, row_blocks
from .multiclass_fitc import MulticlassFITCPosterior, own_weights

MulticlassHSGPGradient = namedtuple("MulticlassHSGPGradient", ["S"])
MulticlassHSGPGradient.__doc__ = """d log Z / dS (c, M) of an evidence with one HSGP prior per class:
what ``softmax_laplace`` and ``multinomial_probit_ep`` return as ``dlog_z_dK`` for a
``MulticlassHSGPPrior``."""


def _weighted_gram(P, Q, w):
    """P^T diag(w) Q (M x M) over row blocks, for P, Q (n, M) C-ordered."""
    n, M = P.shape
    out = np.zeros((M, M))
    for rows in row_blocks(n, M):
        out += P[rows].T @ (Q[rows] * w[rows, None])
    return out


def _gram_blocks(Phi, W, own, shared=None):
    r"""H (c, c, M, M), H_lk = Phi_l^T diag(W_lk) Phi_k, for W (n, c, c) the W_i and own (c, n)
    their diagonal entries W_kk = delta_k (sum_{j != k} delta_j) / sum delta >= 0 summed
    without cancellation (``multiclass_fitc.own_weights``); H_kl = H_lk^T. With one basis
    shared by the classes (``shared``, a ``structures.hsgp.DenseBasis``) every block is a
    rank-n update (dsyrk, n M^2 flops), since W_lk = -q_l q_k <= 0 for l != k; otherwise the
    blocks off the diagonal are general products (2 n M^2)."""
    c, M = len(Phi), Phi[0].shape[1]
    H = np.empty((c, c, M, M))
    for k in range(c):
        H[k, k] = shared.gram(own[k]) if shared is not None else _weighted_gram(Phi[k], Phi[k], own[k])
        for l in range(k):
            w = np.ascontiguousarray(W[:, l, k])
            H[l, k] = -shared.gram(-w) if shared is not None else _weighted_gram(Phi[l], Phi[k], w)
            H[k, l] = H[l, k].T
    return H


class MulticlassHSGPPrior:
    r"""c independent HSGP priors :math:`\tilde K_k = \Phi_k \mathrm{diag}(S_k) \Phi_k^T`, one
    per class (module docstring).

    Parameters
    ----------
    Phi : (n, M) basis functions at the training inputs, shared by the classes, or a
        (c, n, M) stack of one basis per class (``structures.hsgp.LaplacianBasis``,
        ``PeriodicBasis``).
    S : (c, M) non-negative prior variances of each class's weights
        (``structures.hsgp.spectral_variances`` of each class's kernel).

    Examples
    --------
    >>> import numpy as np, pymc as pm, pymc_gpc
    >>> from pymc_gpc.structures.hsgp import LaplacianBasis
    >>> X = np.linspace(-2, 2, 60)[:, None]
    >>> basis = LaplacianBasis(X, m=[20], c=1.5)
    >>> S = np.stack([basis.variances(pm.gp.cov.ExpQuad(1, ls=ls)).eval() for ls in (0.5, 0.8, 1.1)])
    >>> prior = MulticlassHSGPPrior(basis(X), S)
    >>> res = pymc_gpc.softmax_laplace(prior, np.arange(60) % 3, pymc_gpc.likelihoods.Softmax())
    >>> res.dlog_z_dK.S.shape
    (3, 20)
    """

    sequential = False

    def __init__(self, Phi, S):
        S = np.asarray(S, dtype=float)
        Phi = np.asarray(Phi, dtype=float)
        if S.ndim != 2 or Phi.ndim not in (2, 3):
            raise ValueError(f"multi-class HSGP needs Phi (n, M) or (c, n, M) and S (c, M); got {Phi.shape}, {S.shape}")
        c, M = S.shape
        if c < 2:
            raise ValueError(f"a multi-class model needs c >= 2 latent functions, got {c}")
        stack = [Phi] * c if Phi.ndim == 2 else list(Phi)
        if len(stack) != c or any(P.shape[1] != M or P.shape[0] != stack[0].shape[0] for P in stack):
            raise ValueError(f"multi-class HSGP shapes do not match: Phi {Phi.shape}, S {S.shape}")
        if not np.all(np.isfinite(Phi)):
            raise ValueError("Phi contains NaN or inf")
        if not np.all(np.isfinite(S)):
            raise NonFiniteKernelError("S (the spectral density at the basis frequencies) contains NaN or inf")
        if np.min(S) < 0.0:
            raise ValueError(f"S (the spectral density at the basis frequencies) has a negative entry ({np.min(S):.3g})")
        self.c, self.m, self.n = c, M, stack[0].shape[0]
        self.Phi = [np.ascontiguousarray(P) for P in stack]
        self.shared = DenseBasis(self.Phi[0]) if Phi.ndim == 2 else None  # one basis for every class
        if self.shared is not None:
            self.Phi = [self.shared.Phi] * c
        self.S, self.s = S, np.sqrt(S)
        self.V = [np.asfortranarray((P * s).T) for P, s in zip(self.Phi, self.s)]  # (M, n) each
        self.lam = np.zeros((c, self.n))
        self.unclipped = np.ones((c, self.n), dtype=bool)
        self.jitter = [0.0] * c
        self._diag = np.array([np.square(P) @ S_k for P, S_k in zip(self.Phi, S)])

    def diag(self):
        """diag K~_k for every class, (c, n)."""
        return self._diag

    def matvec(self, v):
        r""":math:`\tilde K v = (\Phi_k (S_k \circ \Phi_k^\top v_k))_k` for v (c, n)."""
        v = np.asarray(v, dtype=float)
        return np.array([P @ (S_k * (P.T @ v_k)) for P, S_k, v_k in zip(self.Phi, self.S, v)])

    __call__ = matvec

    def posterior(self, d, rough=False, rough_gradient=False):
        """q(f) at the coupled weights d (c, n) (``MulticlassHSGPPosterior``); the rough flags
        are accepted for the solvers' sake and ignored (always exact)."""
        return MulticlassHSGPPosterior(self, d)

    def dense(self):
        """The (c, n, n) stack of K~_k (tests and small problems only)."""
        return np.array([(P * S_k) @ P.T for P, S_k in zip(self.Phi, self.S)])


class MulticlassHSGPPosterior(MulticlassFITCPosterior):
    """q(f) = N(K~ a, (K~^{-1} + W)^{-1}) for the multi-class HSGP prior (module docstring):
    ``MulticlassFITCPosterior``'s algebra with Lambda = 0 (W~ = W, log|I + Lambda W| = 0),
    A formed from the H_lk, the gradient in S and the predictive from the basis at the new
    inputs. Raises ``NotPositiveDefiniteError`` for weights that are negative or sum to 0.

    Parameters
    ----------
    prior : a ``MulticlassHSGPPrior``.
    d : (c, n) non-negative weights, every column with a positive sum.
    """

    def _capacitance(self, delta):
        """A = I + P^T W P from the blocks H_lk (``_gram_blocks``), which are kept for the gradient."""
        prior = self.prior
        c, M = prior.c, prior.m
        self.H = _gram_blocks(prior.Phi, self.Wt, own_weights(delta), prior.shared)
        s = prior.s.reshape(-1)
        A = (s[:, None] * self.H.transpose(0, 2, 1, 3).reshape(c * M, c * M)) * s[None, :]
        A[np.diag_indices_from(A)] += 1.0
        return A

    def expect_gradient(self):
        """The gradient needs no pass over the observations beyond the site covariances'."""

    def R_projected_diag(self):
        """(Q_k)_jj = (Phi_k^T R_kk Phi_k)_jj (c, M), each by the more accurate of its two forms
        (module docstring)."""
        prior = self.prior
        c, M = prior.c, prior.m
        Q = np.empty((c, M))
        a_inv_diag = None
        for k in range(c):
            h = np.diag(self.H[k, k])
            by_identity = prior.S[k] * np.abs(h) > 1.0
            direct = ~by_identity
            if np.any(direct):
                Y = np.concatenate([prior.s[l][:, None] * self.H[l, k][:, direct] for l in range(c)])
                C = solve_triangular(self.L_A, Y, lower=True, check_finite=False)
                Q[k, direct] = h[direct] - np.einsum("ij,ij->j", C, C)
            if np.any(by_identity):
                if a_inv_diag is None:
                    a_inv_diag = np.diag(self.A_inv).reshape(c, M)
                Q[k, by_identity] = (1.0 - a_inv_diag[k, by_identity]) / prior.S[k, by_identity]
        return Q

    def kernel_gradient(self, outer, scale_R):
        r"""d/dS (c, M) of an evidence whose gradient in K~_k is
        G_k = sum_t c_t (x_tk y_tk^T + y_tk x_tk^T)/2 + scale_R R_kk (module docstring).

        outer : sequence of (x, y, c_t), x and y (c, n). Returns a ``MulticlassHSGPGradient``.
        """
        prior = self.prior
        dS = scale_R * self.R_projected_diag() if scale_R != 0.0 else np.zeros((prior.c, prior.m))
        for x, y, ct in outer:
            x, y_ = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
            for k, P in enumerate(prior.Phi):
                px = P.T @ x[k]
                py = px if y is x else P.T @ y_[k]
                dS[k] += ct * px * py
        return MulticlassHSGPGradient(dS)

    def predict(self, a, Phi_star, k_star=None, full_cov=False):
        """Latent predictive at n* new inputs (module docstring), O(n* c M) memory.

        Phi_star : (n*, M) the basis at the new inputs, or a (c, n*, M) stack (one per class).
        k_star : not used (the basis defines the prior).
        Returns mean (c, n*) and covariances (n*, c, c), or (c n*, c n*) class-major with
        ``full_cov``.
        """
        prior = self.prior
        c, M = prior.c, prior.m
        Phi_star = np.asarray(Phi_star, dtype=float)
        stars = [Phi_star] * c if Phi_star.ndim == 2 else list(Phi_star)
        if len(stars) != c or any(P.shape[1] != M for P in stars):
            raise ValueError(f"the basis at the new inputs has shape {Phi_star.shape}; the prior has c = {c}, M = {M}")
        a = np.asarray(a, dtype=float)
        mean = np.array([P_s @ (S_k * (P.T @ a_k)) for P_s, P, S_k, a_k in zip(stars, prior.Phi, prior.S, a)])
        B = [P_s * s_k for P_s, s_k in zip(stars, prior.s)]  # (n*, M) each
        Ai = self.A_inv
        ns = stars[0].shape[0]
        if full_cov:
            cov = np.empty((c * ns, c * ns))
            for k in range(c):
                for l in range(c):
                    cov[k * ns:(k + 1) * ns, l * ns:(l + 1) * ns] = B[k] @ Ai[k * M:(k + 1) * M, l * M:(l + 1) * M] @ B[l].T
            return mean, 0.5 * (cov + cov.T)
        cov = np.empty((ns, c, c))
        for rows in row_blocks(ns, c * M):
            for l in range(c):
                T = B[l][rows] @ Ai[l * M:(l + 1) * M]  # (b, c M)
                for k in range(l + 1):
                    cov[rows, k, l] = np.einsum("bj,bj->b", B[k][rows], T[:, k * M:(k + 1) * M])
                    cov[rows, l, k] = cov[rows, k, l]
        return mean, cov


__all__ = ["MulticlassHSGPPrior", "MulticlassHSGPPosterior", "MulticlassHSGPGradient"]
