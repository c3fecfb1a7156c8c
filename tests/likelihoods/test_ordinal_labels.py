"""The ordinal likelihoods' label check (issue 58's surviving fault: ``y <= k - 1`` loosened to
``y <= k`` let the label K through, a class that does not exist): labels 0..K-1 pass,
K, -1 and 0.5 are refused with a ValueError naming them."""

import numpy as np
import pytest

import pymc_gpc


@pytest.mark.parametrize("lik", [pymc_gpc.OrderedLogit([-1.0, 1.0]), pymc_gpc.OrderedProbit([-1.0, 1.0])],
                         ids=lambda lik: type(lik).__name__)
def test_labels_zero_to_k_minus_one(lik):
    np.testing.assert_array_equal(lik.check_labels([0, 1, 2, 2]), [0.0, 1.0, 2.0, 2.0])
    for bad in (3, -1, 0.5):
        with pytest.raises(ValueError, match=r"integers 0\.\.2 \(K = 3 classes\)"):
            lik.check_labels([0, bad])
