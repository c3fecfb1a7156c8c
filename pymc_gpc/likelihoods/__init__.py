"""Observation models p(y | f), one class each, behind one numeric contract.

``base``: the contract (``Likelihood``, its result holders), the registry of likelihood
kinds and the compiled dispatch generated from it (``SiteKernels``).

``binary``: one latent value per observation, labels y in {-1, +1} (probit, its bias and
noise variants, the step likelihood with label noise, logistic). Every approximation talks
to a likelihood only through that contract (tilted moments for EP, log p and its
f-derivatives for Laplace, expected log-likelihoods for mean field, the predictive).

``multiclass``: c >= 2 classes, one latent value per class and observation, labels coded
0..c-1 (softmax for Laplace, multinomial probit for nested EP), with its own contract.

``ordinal``: K >= 3 ordered classes from one latent value per observation, labels coded
0..K-1 (ordered probit, ordered logit): the binary contract, with the cutpoints (and the
probit's noise scale) as parameters.
"""

from .base import Likelihood, SiteKernels
from .binary import (
    LIKELIHOODS,
    Logistic,
    Probit,
    ProbitBias,
    ProbitNoise,
    StepLabelNoise,
)
from .multiclass import MULTICLASS_LIKELIHOODS, MulticlassLikelihood, MultinomialProbit, Softmax
from .ordinal import ORDINAL_LIKELIHOODS, OrderedLogit, OrderedProbit, OrdinalLikelihood

__all__ = ["Likelihood", "SiteKernels", "Probit", "ProbitBias", "ProbitNoise", "StepLabelNoise", "Logistic", "LIKELIHOODS",
           "MulticlassLikelihood", "Softmax", "MultinomialProbit", "MULTICLASS_LIKELIHOODS",
           "OrdinalLikelihood", "OrderedProbit", "OrderedLogit", "ORDINAL_LIKELIHOODS"]
