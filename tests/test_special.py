import numpy as np
import pytest
from scipy import special

from pymc_gpc.numerics.special import inv_mills, log_ndtr, log_sigmoid, sigmoid

Z = np.concatenate([-np.logspace(-3, 3.5, 200), [0.0], np.logspace(-3, 1.6, 100)])


def test_log_ndtr_matches_scipy_over_the_whole_range():
    got = np.array([log_ndtr(z) for z in Z])
    want = special.log_ndtr(Z)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-300)


def test_inv_mills_matches_scipy_and_is_finite_far_in_the_tail():
    got = np.array([inv_mills(z) for z in Z])
    want = np.sqrt(2 / np.pi) / special.erfcx(-Z / np.sqrt(2))  # N/Phi via erfcx
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(got, want, rtol=1e-10)
    assert inv_mills(-1e6) == pytest.approx(1e6 + 1e-6, rel=1e-15)  # -z - 1/z + ...


@pytest.mark.parametrize("x", [-800.0, -40.0, -1.0, 0.0, 2.0, 40.0, 800.0])
def test_logistic_helpers(x):
    assert log_sigmoid(x) == pytest.approx(-np.logaddexp(0.0, -x), rel=1e-14, abs=1e-300)
    assert sigmoid(x) == pytest.approx(special.expit(x), rel=1e-14, abs=1e-300)
