"""PyTensor Ops over (K, likelihood parameters, y): the approximate log marginal
likelihood with its exact pullback, and the latent predictive (``marginal``: numba
registration, warm starts, recent results, failure handling; ``multiclass``: the same
for c latent GPs, K a (c, n, n) stack)."""

from .marginal import (
    STATUS_FAILED,
    ApproximationFailedWarning,
    ApproxMarginalOp,
    LatentPredictiveOp,
    reset_warm_starts,
)
from .multiclass import MulticlassMarginalOp, MulticlassPredictiveOp
from . import jax_registration

jax_registration.install()  # the JAX implementations, once PyTensor's JAX backend is imported

__all__ = ["ApproxMarginalOp", "LatentPredictiveOp", "ApproximationFailedWarning", "STATUS_FAILED", "reset_warm_starts",
           "MulticlassMarginalOp", "MulticlassPredictiveOp"]
