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


def test_exp_inplace_matches_numpy_within_one_ulp():
    """The compiled exponential (the ARD kernel's) against NumPy's: relative error at most
    about one ulp over the normal range, 0 below -708, inf above 709.78, NaN kept."""
    from pymc_gpc.numerics.special import exp_inplace

    rng = np.random.default_rng(3)
    x = np.concatenate([np.linspace(-708.0, 709.78, 200001), rng.normal(0.0, 30.0, 5000), -rng.exponential(3.0, 5000)])
    y = x.copy()
    exp_inplace(y)
    ref = np.exp(x)
    assert np.max(np.abs(y - ref) / ref) < 2.5e-16
    special = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, -720.0, 710.0, -1e300, 1e300])
    out = special.copy()
    exp_inplace(out)
    np.testing.assert_array_equal(out, [np.nan, np.inf, 0.0, 1.0, 1.0, 0.0, np.inf, 0.0, np.inf])
    M = rng.normal(size=(7, 5))
    E = M.copy()
    exp_inplace(E)  # a matrix, in place
    np.testing.assert_allclose(E, np.exp(M), rtol=3e-16)
