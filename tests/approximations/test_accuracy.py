"""Evidence of EP and Laplace against exact integration on tiny problems.

Documented error bounds (README, "Accuracy"), for n <= 4 and kernel amplitudes
0.5-4: |log Z_EP - log Z| <= 0.03 for the smooth likelihoods and <= 0.25 for the
step likelihood; |log Z_Laplace - log Z| <= 0.6; on probit, EP is at least as close
as Laplace in every case.
"""

import numpy as np
import pytest

from pymc_gpc import ep, laplace
from pymc_gpc import likelihoods as L

from ..conftest import LIKELIHOOD_CASES, ard_kernel, brute_force_log_z, lik_id

EP_BOUND = {"StepLabelNoise": 0.25}
EP_BOUND_SMOOTH = 0.03
LAPLACE_BOUND = 0.6


def tiny_problem(seed, n):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    y = rng.choice([-1.0, 1.0], size=n)
    K, _ = ard_kernel(X, np.log([1.0, 1.5]), np.log(rng.uniform(0.5, 4.0)))
    return K, y


@pytest.mark.parametrize("lik", LIKELIHOOD_CASES, ids=lik_id)
@pytest.mark.parametrize("y", [1.0, -1.0])
@pytest.mark.parametrize("k", [0.05, 2.3, 40.0])
def test_single_point_ep_is_exact(lik, y, k):
    """n = 1: EP's evidence is the one-dimensional integral itself."""
    K = np.array([[k]])
    got = ep(K, np.array([y]), lik).log_z
    assert got == pytest.approx(brute_force_log_z(lik, K, np.array([y])), abs=1e-8)


def test_single_point_with_bias_is_not_trivial():
    """Guard against the symmetric cases above passing by symmetry (log 1/2)."""
    K = np.array([[1.7]])
    got = ep(K, np.array([-1.0]), L.ProbitBias(0.8)).log_z
    assert abs(got - np.log(0.5)) > 0.1
    assert got == pytest.approx(brute_force_log_z(L.ProbitBias(0.8), K, np.array([-1.0])), abs=1e-10)


# The step likelihood's ground truth sums 2^n orthant probabilities: n <= 3 keeps it fast.
BRUTE_FORCE_CASES = [
    (lik, n) for lik in LIKELIHOOD_CASES for n in (2, 3, 4)
    if not (type(lik).__name__ == "StepLabelNoise" and n == 4)
]


@pytest.mark.parametrize("lik, n", BRUTE_FORCE_CASES, ids=lambda v: lik_id(v) if not isinstance(v, int) else f"n{v}")
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_evidence_against_brute_force(lik, n, seed):
    name = type(lik).__name__
    K, y = tiny_problem(seed, n)
    exact = brute_force_log_z(lik, K, y)
    ep_err = abs(ep(K, y, lik).log_z - exact)
    assert ep_err <= EP_BOUND.get(name, EP_BOUND_SMOOTH)
    if lik.supports_laplace:
        lap_err = abs(laplace(K, y, lik).log_z - exact)
        assert lap_err <= LAPLACE_BOUND
        if name == "Probit":
            assert ep_err <= lap_err


def test_brute_force_itself_agrees_across_methods():
    """The Gauss-Hermite integrator against the orthant probability it must equal.

    For probit, prod Phi(y_i f_i) integrates to P(y_i (f_i + e_i) > 0), e ~ N(0, I).
    """
    from scipy import stats

    K, y = tiny_problem(7, 3)
    D = np.diag(y)
    orthant = stats.multivariate_normal.cdf(
        np.zeros(3), mean=np.zeros(3), cov=D @ (K + np.eye(3)) @ D, abseps=1e-11, releps=1e-11,
        maxpts=10_000_000, rng=np.random.default_rng(0),
    )
    assert brute_force_log_z(L.Probit(), K, y) == pytest.approx(np.log(orthant), abs=1e-7)
