r"""Prior structures: the linear algebra of the Gaussian q(f) for one form of the prior covariance.

EP and Laplace (``approximations``) are written once against this seam, as GPML 4's
``apx`` objects: they never touch the prior covariance K~ directly. A *prior structure*
answers

* ``n``; ``diag()``: the prior variances diag K~; ``matvec(v)``: K~ v;
* ``posterior(w, rough=False)``: q(f) at site precisions w (EP's tau, Laplace's W),
  raising ``dense.NotPositiveDefiniteError`` when K~^{-1} + W is not positive definite;
  ``rough=True`` allows a cheaper posterior whose marginal variances carry
  single-precision rounding and which has no gradient, for EP sweeps that do not end
  the iteration (FITC: the m^2 n products in single precision; dense: B factorised and
  inverted in single precision);
* ``sequential``: whether sequential (rank-one) EP sweeps are available;

and its posterior answers

* ``half_logdet_B()``: (1/2) log|I + W^{1/2} K~ W^{1/2}|;
* ``weights(v)``: (I + W K~)^{-1} v (EP's b = weights(nu~); Newton's next a);
  ``mean_and_weights(v)``: (K~ b, b) for b = weights(v) (EP's mean and b, in as few
  passes over the prior's factors as the structure allows);
* ``var_diag()``: diag (K~^{-1} + W)^{-1};
* ``R_times(v)``, ``sigma_times(v)``: (K~ + W^{-1})^{-1} v and (K~^{-1} + W)^{-1} v;
* ``kernel_gradient(outer, scale_R)``: given the gradient of an evidence in K~ as
  G = sum_k c_k (x_k y_k^T + y_k x_k^T)/2 + scale_R (K~ + W^{-1})^{-1}, its gradient in
  the structure's own inputs (dense: G itself; FITC: K_uu, K_uf, diag K_ff);
  ``ep_gradient(b, rough=False)`` is the EP case (b b^T - R)/2, ``rough`` allowing
  single-precision products where the structure offers them (FITC's m^2 n ones; dense
  forms it exactly), for solves at the sampler's tolerances;
* ``predict(a, cross, star_diag)``: the latent predictive at new inputs, given the
  structure's cross-covariances (dense: K(X, X*); FITC: K(Xu, X*)).

``dense``: a dense n x n kernel matrix K, through B = I + W^1/2 K W^1/2 (and through
chol K for negative site precisions); its compiled parallel-EP loop
(``approximations.ep._parallel_compiled``) is a dense specialisation of the same
iteration. ``fitc``: the inducing-point prior Q + Lambda in O(n m^2). ``multiclass``: c
dense class GPs coupled through the likelihood; ``multiclass_fitc``: the same with each
class's FITC prior, O(c^2 m^2 n). ``select`` chooses one of them for a (likelihood,
approx) pair. A new structure (HSGP bases) is a new module here answering the same questions.
"""

from .dense import DensePrior
from .fitc import FITCGradient, FITCPrior, NonFiniteKernelError
from .multiclass_fitc import MulticlassFITCGradient, MulticlassFITCPrior


def is_structure(K):
    """Whether K is a prior structure object (not an array to be read as a dense K)."""
    return hasattr(K, "posterior") and hasattr(K, "matvec")


__all__ = ["DensePrior", "FITCPrior", "FITCGradient", "NonFiniteKernelError", "MulticlassFITCPrior",
           "MulticlassFITCGradient", "is_structure"]
