"""pymc-gpc: Gaussian-process classification for PyMC.

The latent function is integrated out by Expectation Propagation, Laplace's method,
mean-field methods or the online ADF approximation (Csato et al. 2000),
giving an approximate marginal likelihood with an exact gradient (ADF: no gradient).
"""

from . import _numba_cache

_numba_cache.install()  # before any cached numba function is defined

from . import kernels, likelihoods  # noqa: E402
from .likelihoods import OrderedLogit, OrderedProbit  # noqa: E402
from .approximations.ep import EPState, ep  # noqa: E402
from .approximations.adf import adf  # noqa: E402
from .gp.marginal import MarginalADF, MarginalEP, MarginalLaplace, MarginalMeanField  # noqa: E402
from .estimation.point_estimates import FitResult, FitStartError, RunawayHyperparameterWarning, fit  # noqa: E402
from .idata import add_log_likelihood, sample_posterior_predictive  # noqa: E402
from .estimation.sampling import sample  # noqa: E402
from .ops import reset_warm_starts  # noqa: E402
from .gp.models import ard_classifier  # noqa: E402
from .validation import SingleMemberClassWarning  # noqa: E402
from .approximations.laplace import LaplaceState, laplace  # noqa: E402
from .approximations.meanfield import MeanFieldState, meanfield  # noqa: E402
from .approximations.result import ApproximationResult  # noqa: E402
from .approximations.softmax_laplace import softmax_laplace  # noqa: E402
from .approximations.multinomial_probit_ep import multinomial_probit_ep  # noqa: E402

__all__ = [
    "likelihoods",
    "kernels",
    "OrderedProbit",
    "OrderedLogit",
    "MarginalEP",
    "MarginalLaplace",
    "MarginalMeanField",
    "MarginalADF",
    "ard_classifier",
    "sample",
    "fit",
    "FitResult",
    "FitStartError",
    "SingleMemberClassWarning",
    "sample_posterior_predictive",
    "RunawayHyperparameterWarning",
    "add_log_likelihood",
    "reset_warm_starts",
    "ep",
    "laplace",
    "meanfield",
    "adf",
    "EPState",
    "LaplaceState",
    "MeanFieldState",
    "ApproximationResult",
    "softmax_laplace",
    "multinomial_probit_ep",
]
__version__ = "0.1.0"
