"""PyTensor Ops over (prior, likelihood parameters, y): the approximate log marginal
likelihood with its exact pullback (``marginal``), and the latent predictive
(``predictive``), one Op class each, with the prior structure (``structures.select``:
dense, FITC, several classes, several classes with FITC) among their props;
``warm_start``: what the evidence Op keeps between evaluations; ``rewrites``: its graph
rewrites, registered on import. The backends register their implementations of these
Ops themselves (``pymc_gpc/__init__``): this package imports none."""

from .marginal import (
    STATUS_FAILED,
    ApproximationFailedWarning,
    ApproxMarginalOp,
    reset_warm_starts,
)
from .predictive import LatentPredictiveOp
from .rewrites import register_rewrites

register_rewrites()  # the sampling-tolerance and deferred-LOO graph rewrites

__all__ = ["ApproxMarginalOp", "LatentPredictiveOp", "ApproximationFailedWarning", "STATUS_FAILED",
           "reset_warm_starts"]
