"""pymc-gpc: Gaussian-process classification for PyMC.

The latent function is integrated out by Expectation Propagation, Laplace's method,
mean-field methods or the online ADF approximation (Csato et al. 2000),
giving an approximate marginal likelihood with an exact gradient (ADF: no gradient).

``__all__`` holds what a PyMC user writes: the GP classes, the likelihoods, ``fit`` and
``sample``, the kernel helpers, data sets and plots. The solvers that run on a kernel
matrix without a model (``ep``, ``laplace``, ...) are ``pymc_gpc.solvers``; the PyTensor Ops
are ``pymc_gpc.ops``.
"""

from . import _numba_cache

_numba_cache.install()  # before any cached numba function is defined

from . import datasets, kernels, likelihoods, plots, solvers  # noqa: E402
from .likelihoods import (  # noqa: E402
    Logistic,
    MultinomialProbit,
    OrderedLogit,
    OrderedProbit,
    Probit,
    ProbitBias,
    ProbitNoise,
    Softmax,
    StepLabelNoise,
)
from .kernels import MixedARD, ard_kernels, per_class  # noqa: E402
from .gp.marginal import MarginalADF, MarginalEP, MarginalLaplace, MarginalMeanField  # noqa: E402
from .estimation.point_estimates import FitResult, FitStartError, RunawayHyperparameterWarning, fit  # noqa: E402
from .idata import add_log_likelihood, sample_posterior_predictive  # noqa: E402
from .estimation.sampling import sample  # noqa: E402
from .ops import reset_warm_starts  # noqa: E402
from .backends.numba.dispatch import register_numba  # noqa: E402
from .backends.jax import registration as _jax_registration  # noqa: E402

register_numba()  # the numba implementations of the evidence and predictive Ops
_jax_registration.install()  # the JAX ones, once PyTensor's JAX backend is imported
from .gp.models import ard_classifier  # noqa: E402
from .validation import SingleMemberClassWarning  # noqa: E402
# The solver layer's names, kept importable here for existing callers; their place is
# ``pymc_gpc.solvers`` (not in ``__all__``).
from .solvers import (  # noqa: E402,F401
    ApproximationResult,
    EPState,
    LaplaceState,
    MeanFieldState,
    adf,
    ep,
    laplace,
    meanfield,
    multinomial_probit_ep,
    softmax_laplace,
)

__all__ = [
    # the GP classifiers
    "MarginalEP",
    "MarginalLaplace",
    "MarginalMeanField",
    "MarginalADF",
    "ard_classifier",
    # likelihoods
    "likelihoods",
    "Probit",
    "ProbitBias",
    "ProbitNoise",
    "StepLabelNoise",
    "Logistic",
    "OrderedProbit",
    "OrderedLogit",
    "Softmax",
    "MultinomialProbit",
    # kernels
    "kernels",
    "MixedARD",
    "ard_kernels",
    "per_class",
    # inference
    "fit",
    "FitResult",
    "FitStartError",
    "RunawayHyperparameterWarning",
    "SingleMemberClassWarning",
    "sample",
    "sample_posterior_predictive",
    "add_log_likelihood",
    "reset_warm_starts",
    # data sets, plots, the solver layer
    "datasets",
    "plots",
    "solvers",
]
__version__ = "0.1.0"
