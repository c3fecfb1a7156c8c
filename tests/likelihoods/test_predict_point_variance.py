"""``predict`` at a latent variance of 0 (a point: the structures clip rounding below 0 to
0) gives the likelihood at the point, p(y | mu), from its closed form; it used to divide by
zero for the logistic, the step likelihood and the ordered logit."""

import numpy as np
import pytest
from scipy.special import expit
from scipy.stats import norm

import pymc_gpc
from pymc_gpc.likelihoods import binary, ordinal

MU = np.array([0.3, -1.0, 4.0, 0.0, -7.5])
CUTS = np.array([-1.0, 1.0])


def _ordinal_rows(cdf):
    """Class probabilities F(b_1 - mu), F(b_2 - mu) - F(b_1 - mu), 1 - F(b_2 - mu)."""
    lo = cdf(CUTS[0] - MU)
    hi = cdf(CUTS[1] - MU)
    return np.column_stack([lo, hi - lo, 1.0 - hi])


CASES = [
    (pymc_gpc.Probit(), norm.cdf(MU)),
    (pymc_gpc.Logistic(), expit(MU)),
    (binary.ProbitNoise(0.5), norm.cdf(MU / 0.5)),
    (binary.ProbitBias(0.3), norm.cdf(MU + 0.3)),
    (binary.StepLabelNoise(0.1), np.where(MU > 0, 0.9, np.where(MU < 0, 0.1, 0.5))),
    (ordinal.OrderedProbit(CUTS, 0.5), _ordinal_rows(lambda u: norm.cdf(u / 0.5))),
    (ordinal.OrderedLogit(CUTS), _ordinal_rows(expit)),
]


@pytest.mark.parametrize("s2", [0.0, 1e-300, 1e-25])
@pytest.mark.parametrize("lik, expected", CASES, ids=lambda c: type(c).__name__ if not isinstance(c, np.ndarray) else "")
def test_predict_at_a_point_is_the_likelihood_at_the_point(lik, expected, s2):
    p = lik.predict(MU, np.full(MU.size, s2))
    np.testing.assert_allclose(p, expected, rtol=1e-12, atol=1e-15)
