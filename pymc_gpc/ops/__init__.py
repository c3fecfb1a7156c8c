"""PyTensor Ops over (K, likelihood parameters, y): the approximate log marginal
likelihood with its exact pullback, and the latent predictive (``marginal``: the Ops,
failure handling; ``sparse``: the same for the FITC prior; ``multiclass``: for c latent
GPs, K a (c, n, n) stack; ``warm_start``: what an Op keeps between evaluations;
``rewrites``: their graph rewrites). Importing the package registers the numba
implementations (``backends.numba.dispatch``), the rewrites and the lazy JAX registration."""

from .marginal import (
    STATUS_FAILED,
    ApproximationFailedWarning,
    ApproxMarginalOp,
    LatentPredictiveOp,
    reset_warm_starts,
)
from .multiclass import (
    MulticlassMarginalOp,
    MulticlassPredictiveOp,
    MulticlassSparseMarginalOp,
    MulticlassSparsePredictiveOp,
)
from .rewrites import register_rewrites
from ..backends.jax import registration as jax_registration
from ..backends.numba.dispatch import register_numba

register_numba()  # the numba implementations of ApproxMarginalOp, LatentPredictiveOp and their subclasses
register_rewrites()  # the sampling-tolerance and deferred-LOO graph rewrites
jax_registration.install()  # the JAX implementations, once PyTensor's JAX backend is imported

__all__ = ["ApproxMarginalOp", "LatentPredictiveOp", "ApproximationFailedWarning", "STATUS_FAILED", "reset_warm_starts",
           "MulticlassMarginalOp", "MulticlassPredictiveOp", "MulticlassSparseMarginalOp",
           "MulticlassSparsePredictiveOp"]
