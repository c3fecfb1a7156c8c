r"""The K-dependent part of Kim & Ghahramani's EM-EP bound (eq. 16-17), per prior structure.

With q(f) = N(h, A) fixed, the M-step of EM-EP (``point_estimates``) maximises

.. math::

    F_K = -\tfrac12 \log|K| - \tfrac12 h^T K^{-1} h - \tfrac12 \operatorname{tr}(K^{-1} A)

over the covariance hyperparameters: ``covariance_bound`` for a dense K (O(n^3)),
``fitc_covariance_bound`` for the FITC prior K~ = Q + Lambda (O(n m^2), with A held as
``FITCCovariance``). ``structures.select`` picks one per prior structure.
"""

import functools
from collections import namedtuple

import numpy as np
import pytensor.tensor as pt
from pymc.pytensorf import compile as compile_fn

from .dense import NotPositiveDefiniteError, chol_lower, inv_lower

__all__ = ["covariance_bound", "fitc_covariance_bound", "FITCCovariance", "FITC_BOUND_FLOOR"]

def covariance_bound(K, h, A):
    r"""The K-dependent part of the bound and its gradient in K (Kim & Ghahramani eq. 16-17).

    .. math::

        F_K = -\tfrac12 \log|K| - \tfrac12 h^T K^{-1} h - \tfrac12 \operatorname{tr}(K^{-1} A),
        \qquad
        \frac{\partial F_K}{\partial K} = \tfrac12 \big(K^{-1} (h h^T + A) K^{-1} - K^{-1}\big).

    Raises ``NotPositiveDefiniteError`` if K has no Cholesky factor.
    """
    L = chol_lower(K)
    Li = np.tril(inv_lower(np.tril(L)))
    K_inv = Li.T @ Li
    b = K_inv @ h
    P = K_inv @ A
    value = -np.sum(np.log(np.diag(L))) - 0.5 * h @ b - 0.5 * np.trace(P)
    grad = 0.5 * (np.outer(b, b) + P @ K_inv - K_inv)
    return float(value), 0.5 * (grad + grad.T)


class FITCCovariance(namedtuple("FITCCovariance", ["diag", "U"])):
    """A = diag(diag) + U U^T (U: n x m): q(f)'s covariance under a FITC prior
    (``structures.fitc.FITCPosterior.covariance_factors``), never formed."""

    def marginal_variances(self):
        return self.diag + np.einsum("ij,ij->i", self.U, self.U)


# The FITC bound's Lambda is floored at this fraction of diag K_ff (where inducing inputs
# coincide with data points Lambda_i is zero up to K_uu's jitter, and the bound needs
# Lambda^-1); a floored entry has no gradient, as a clipped one in ``FITCPrior``.
FITC_BOUND_FLOOR = 1e-10


@functools.cache
def _fitc_bound_fn():
    r"""The compiled F_K of ``fitc_covariance_bound`` and its gradient (PyTensor autodiff of
    an O(n m^2) graph): (Kuu, Kuf, k_diag, h, a0, U) -> (F_K, log|K~|, dKuu, dKuf, dk_diag)."""
    Kuu, Kuf, U = pt.dmatrix("Kuu"), pt.dmatrix("Kuf"), pt.dmatrix("U")
    k_diag, h, a0 = pt.dvector("k_diag"), pt.dvector("h"), pt.dvector("a0")
    L = pt.linalg.cholesky(Kuu, lower=True)
    V = pt.linalg.solve_triangular(L, Kuf, lower=True)
    lam = pt.maximum(k_diag - (V**2).sum(axis=0), FITC_BOUND_FLOOR * k_diag)
    C = pt.eye(Kuu.shape[0]) + (V / lam) @ V.T
    Lc = pt.linalg.cholesky(C, lower=True)
    logdet = pt.log(lam).sum() + 2.0 * pt.log(pt.diagonal(Lc)).sum()
    # h^T K~^-1 h + tr(K~^-1 U U^T) = sum_i |Z_i|^2 / lam_i - |L_C^-1 V Lambda^-1 Z|_F^2, Z = [h U]
    Z = pt.concatenate([h[:, None], U], axis=1)
    quad = ((Z**2).sum(axis=1) / lam).sum() - (pt.linalg.solve_triangular(Lc, (V / lam) @ Z, lower=True) ** 2).sum()
    # tr(K~^-1 diag(a0)) = sum a0 / lam - |L_C^-1 V diag(sqrt(a0) / lam)|_F^2
    trace = (a0 / lam).sum() - (pt.linalg.solve_triangular(Lc, V * (pt.sqrt(a0) / lam), lower=True) ** 2).sum()
    value = -0.5 * logdet - 0.5 * quad - 0.5 * trace
    grads = pt.grad(value, [Kuu, Kuf, k_diag])
    # numba, unlike the model's graphs (``FIT_MODE``): this graph is the same for every model, and
    # its O(n m) elementwise work runs faster so (docs/design/engine_notes.md, "Fit's compile modes")
    return compile_fn([Kuu, Kuf, k_diag, h, a0, U], [value, logdet, *grads], mode="NUMBA")


def fitc_covariance_bound(Kuu, Kuf, k_diag, h, A):
    r"""``covariance_bound`` for the FITC prior K~ = Q + Lambda, in O(n m^2) (Woodbury, with
    C = I + V Lambda^-1 V^T):

    .. math::

        \log|\tilde K| = \sum_i \log \Lambda_i + \log|C|, \qquad
        \tilde K^{-1} = \Lambda^{-1} - \Lambda^{-1} V^T C^{-1} V \Lambda^{-1},

    with A = diag(a0) + U U^T (``FITCCovariance``) and Lambda floored at
    ``FITC_BOUND_FLOOR`` diag K_ff. Returns (F_K, (dF/dK_uu, dF/dK_uf, dF/d diag K_ff)),
    the gradient by PyTensor's autodiff of that graph, and ``log|K~|`` as a third value."""
    value, logdet, *grads = _fitc_bound_fn()(Kuu, Kuf, k_diag, h, A.diag, A.U)
    if not np.isfinite(value):
        raise NotPositiveDefiniteError("the FITC bound is not finite (an indefinite K_uu or C)")
    return float(value), tuple(grads), float(logdet)
