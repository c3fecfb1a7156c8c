"""Prior structures: the linear algebra of the Gaussian q(f) for one form of the prior covariance.

EP and Laplace (``approximations``) are written once against this seam, as GPML 4's ``apx``
objects: they never touch the prior covariance K~ directly. The members a structure and its
posterior answer are the protocols of ``structures.base``.

``dense``: a dense n x n K, through B = I + W^1/2 K W^1/2 (through chol K for negative site
precisions). ``fitc``: the inducing-point prior Q + Lambda in O(n m^2). ``hsgp``: the
basis-function prior. ``multiclass``: c dense class GPs coupled through the likelihood;
``multiclass_fitc`` and ``multiclass_hsgp``: the same with each class's sparse prior.
``select`` chooses one of them for a (likelihood, approx) pair.
"""

from .dense import DensePrior
from .fitc import FITCGradient, FITCPrior, NonFiniteKernelError
from .multiclass_fitc import MulticlassFITCGradient, MulticlassFITCPrior


def is_structure(K):
    """Whether K is a prior structure object (not an array to be read as a dense K)."""
    return hasattr(K, "posterior") and hasattr(K, "matvec")


__all__ = ["DensePrior", "FITCPrior", "FITCGradient", "NonFiniteKernelError", "MulticlassFITCPrior",
           "MulticlassFITCGradient", "is_structure"]
