"""pymc-gpc: Gaussian-process classification for PyMC.

The latent function is integrated out by Expectation Propagation or Laplace's method,
giving an approximate marginal likelihood with an exact gradient.
"""

from . import kernels, likelihoods
from .ep import EPState, ep
from .point_estimates import FitResult, fit
from .gp import MarginalEP, MarginalLaplace
from .idata import add_log_likelihood, sample
from .models import ard_classifier
from .laplace import LaplaceState, laplace
from .result import ApproximationResult

__all__ = [
    "likelihoods",
    "kernels",
    "MarginalEP",
    "MarginalLaplace",
    "ard_classifier",
    "sample",
    "fit",
    "FitResult",
    "add_log_likelihood",
    "ep",
    "laplace",
    "EPState",
    "LaplaceState",
    "ApproximationResult",
]
__version__ = "0.1.0"
