"""Observation models p(y | f), one class each, behind one numeric contract.

``binary``: one latent value per observation, labels y in {-1, +1} (probit, its bias and
noise variants, the step likelihood with label noise, logistic). Every approximation talks
to a likelihood only through that contract (tilted moments for EP, log p and its
f-derivatives for Laplace, expected log-likelihoods for mean field, the predictive).
"""

from .binary import (
    LIKELIHOODS,
    Likelihood,
    Logistic,
    Probit,
    ProbitBias,
    ProbitNoise,
    StepLabelNoise,
)

__all__ = ["Likelihood", "Probit", "ProbitBias", "ProbitNoise", "StepLabelNoise", "Logistic", "LIKELIHOODS"]
