"""pymc-gpc: Gaussian-process classification for PyMC.

The latent function is integrated out by Expectation Propagation, Laplace's method,
mean-field methods or the online ADF approximation (Csato et al. 2000),
giving an approximate marginal likelihood with an exact gradient (ADF: no gradient).
"""

from . import kernels, likelihoods
from .ep import EPState, ep
from .adf import adf
from .gp import MarginalADF, MarginalEP, MarginalLaplace, MarginalMeanField
from .point_estimates import FitResult, fit
from .idata import add_log_likelihood, sample
from .models import ard_classifier
from .laplace import LaplaceState, laplace
from .meanfield import MeanFieldState, meanfield
from .result import ApproximationResult

__all__ = [
    "likelihoods",
    "kernels",
    "MarginalEP",
    "MarginalLaplace",
    "MarginalMeanField",
    "MarginalADF",
    "ard_classifier",
    "sample",
    "fit",
    "FitResult",
    "add_log_likelihood",
    "ep",
    "laplace",
    "meanfield",
    "adf",
    "EPState",
    "LaplaceState",
    "MeanFieldState",
    "ApproximationResult",
]
__version__ = "0.1.0"
