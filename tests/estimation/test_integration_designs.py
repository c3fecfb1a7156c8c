"""``estimation.designs`` and ``hyper_posterior.find_mode`` / ``hessian`` on log densities
known in closed form: the CCD's fractional factorials are of resolution V, the CCD gives
a Gaussian's mean and covariance exactly (from the mode and Hessian found numerically),
the per-half-axis scales recover a split normal's scales, and the grid integrates a
Gaussian to its truncation error."""

import itertools

import numpy as np
import pytest

from pymc_gpc.estimation import designs
from pymc_gpc.estimation.hyper_posterior import find_mode, hessian


class Gaussian:
    """A ``LogPosterior`` stand-in: log N(x; mean, cov) up to a constant, with its gradient."""

    def __init__(self, mean, cov):
        self.mean, self.precision = np.asarray(mean, float), np.linalg.inv(cov)
        self.n_evaluations = 0

    def value(self, x):
        r = np.asarray(x) - self.mean
        return -0.5 * r @ self.precision @ r

    def value_and_grad(self, x):
        return self.value(x), -self.precision @ (np.asarray(x) - self.mean)


def _random_gaussian(d, seed):
    rng = np.random.default_rng(seed)
    A = rng.normal(size=(d, d))
    return rng.normal(size=d), A @ A.T / d + 0.3 * np.eye(d)


@pytest.mark.parametrize("d", range(1, designs.CCD_MAX_DIM + 1))
def test_factorial_designs_have_resolution_five(d):
    """No defining word of length <= 4: the XOR of any one to four of the Walsh indices
    used is nonzero (main effects and two-factor interactions all distinct), and the
    columns are balanced and orthogonal."""
    walsh = designs.WALSH_INDICES[:d]
    for k in range(1, min(d, 4) + 1):
        for combo in itertools.combinations(walsh, k):
            word = 0
            for w in combo:
                word ^= w
            assert word != 0, combo
    F = designs.factorial_design(d)
    assert set(np.unique(F)) <= {-1.0, 1.0}
    np.testing.assert_array_equal(F.T @ F, F.shape[0] * np.eye(d))
    np.testing.assert_array_equal(F.sum(axis=0), 0)


def test_factorial_run_counts_match_the_published_table():
    """2^(d-p) runs: 16 for five factors (a half fraction), 128 for nine to eleven (the
    run counts of GPstuff's gp_ia, Sanchez & Sanchez 2005)."""
    runs = {d: designs.factorial_design(d).shape[0] for d in (2, 3, 4, 5, 6, 7, 8, 9, 11, 12, 17)}
    assert runs == {2: 4, 3: 8, 4: 16, 5: 16, 6: 32, 7: 64, 8: 64, 9: 128, 11: 128, 12: 256, 17: 256}


@pytest.mark.parametrize("d", [1, 2, 3, 5, 7])
def test_ccd_is_exact_for_a_gaussian(d):
    """Mode and Hessian found numerically (L-BFGS-B, Newton, central differences of the
    gradient), then the CCD: its weighted mean and covariance equal the Gaussian's to 1e-6,
    and all scales are 1 (the log density falls by exactly 1 at sqrt 2)."""
    mean, cov = _random_gaussian(d, seed=d)
    target = Gaussian(mean, cov)
    mode, log_p0, H = find_mode(target, np.zeros(d))
    out = designs.ccd(designs.Standardisation(mode, -H), target.value, log_p0)
    assert out["x"].shape[0] == 1 + 2 * d + (designs.factorial_design(d).shape[0] if d > 1 else 0)
    np.testing.assert_allclose(out["scales"], 1.0, atol=1e-6)
    m, c = designs.weighted_moments(out["x"], out["weight"])
    np.testing.assert_allclose(m, mean, atol=1e-6)
    np.testing.assert_allclose(c, cov, atol=1e-6)


def test_ccd_is_not_exact_for_a_gaussian_with_a_wrong_hessian():
    """The check above can fail: a precision 20 % too large everywhere is seen by the axis
    scales (sqrt 1.2 on every half-axis), which then repair it exactly; an error that is not
    along the axes of the design leaves the covariance off."""
    mean, cov = _random_gaussian(3, seed=3)
    target = Gaussian(mean, cov)
    standard = designs.Standardisation(mean, 1.2 * target.precision)
    out = designs.ccd(standard, target.value, target.value(mean))
    np.testing.assert_allclose(out["scales"], np.sqrt(1.2), rtol=1e-9)  # the scales see the error ...
    m, c = designs.weighted_moments(out["x"], out["weight"])
    np.testing.assert_allclose(c, cov, atol=1e-6)  # ... and, the error being isotropic in z, repair it
    u = np.array([1.0, 1.0, 0.0])  # an error not along the eigenvectors
    wrong = designs.Standardisation(mean, target.precision + 0.5 * np.outer(u, u))
    out = designs.ccd(wrong, target.value, target.value(mean))
    m, c = designs.weighted_moments(out["x"], out["weight"])
    assert np.max(np.abs(c - cov)) > 1e-3


def test_axis_scales_recover_a_split_normal():
    """Along each axis a split normal with scales (s+, s-) in z falls by z^2 / (2 s^2):
    the half-axis scales are s+ and s- (clipped to [1/3, 3])."""
    s_plus, s_minus = np.array([1.5, 0.6, 5.0]), np.array([0.8, 1.0, 0.2])

    def log_density(x):
        s = np.where(x >= 0, s_plus, s_minus)
        return -0.5 * np.sum((x / s) ** 2)

    standard = designs.Standardisation(np.zeros(3), np.eye(3))
    scales, _ = designs.axis_scales(standard, log_density, 0.0)
    np.testing.assert_allclose(scales[:, 0], [1.5, 0.6, 3.0])
    np.testing.assert_allclose(scales[:, 1], [0.8, 1.0, 1 / 3])


@pytest.mark.parametrize("d", [1, 2])
def test_grid_integrates_a_gaussian(d):
    mean, cov = _random_gaussian(d, seed=10 + d)
    target = Gaussian(mean, cov)
    out = designs.grid(designs.Standardisation(mean, target.precision), target.value, 0.0)
    m, c = designs.weighted_moments(out["x"], out["weight"])
    np.testing.assert_allclose(m, mean, atol=1e-6)
    np.testing.assert_allclose(c, cov, rtol=2e-4, atol=1e-6)


def test_bad_input():
    standard = designs.Standardisation(np.zeros(2), np.eye(2))
    with pytest.raises(ValueError, match="f0"):
        designs.ccd(standard, lambda x: 0.0, 0.0, f0=1.0)
    with pytest.raises(ValueError, match="not concave"):
        designs.Standardisation(np.zeros(2), np.diag([1.0, -1.0]))
    with pytest.raises(ValueError, match="at most 3"):
        designs.grid(designs.Standardisation(np.zeros(4), np.eye(4)), lambda x: 0.0, 0.0)
    with pytest.raises(ValueError, match="max_points"):
        designs.grid(standard, lambda x: 0.0, 0.0, max_points=50)  # a flat density never stops
    with pytest.raises(ValueError, match="step"):
        designs.grid(standard, lambda x: 0.0, 0.0, step=-1)
    with pytest.raises(ValueError, match="1 to"):
        designs.factorial_design(designs.CCD_MAX_DIM + 1)


def test_hessian_by_differences_of_the_gradient():
    mean, cov = _random_gaussian(4, seed=4)
    target = Gaussian(mean, cov)
    np.testing.assert_allclose(hessian(target, np.ones(4)), -target.precision, atol=1e-8)


def test_stretched_weights_give_a_split_normals_second_moment():
    """One dimension, a split normal with scales (1.5, 0.6): the three-point CCD with the
    stretch's volume factor in its weights gives E z^2 = (s+^3 + s-^3) / (s+ + s-) exactly
    and the mean (s+ - s-) / f0 (the true mean is sqrt(2 / pi) (s+ - s-)); without the
    factor the mean would be (s+ - s-) / (2 f0) and E z^2 = (s+^2 + s-^2) / 2."""
    sp, sm, f0 = 1.5, 0.6, 1.1

    def log_density(x):
        return -0.5 * (x[0] / (sp if x[0] >= 0 else sm)) ** 2

    out = designs.ccd(designs.Standardisation(np.zeros(1), np.eye(1)), log_density, 0.0, f0=f0)
    z = out["x"][:, 0]
    np.testing.assert_allclose(out["weight"] @ z ** 2, (sp ** 3 + sm ** 3) / (sp + sm), rtol=1e-12)
    np.testing.assert_allclose(out["weight"] @ z, (sp - sm) / f0, rtol=1e-12)
