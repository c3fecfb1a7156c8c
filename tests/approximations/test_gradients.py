"""Every gradient against central finite differences: likelihood x approximation.

Kernel hyperparameters enter through K (chain rule with the analytic dK/dtheta of the
ARD kernel in conftest); likelihood parameters directly. Relative error < 1e-5.
"""

import numpy as np
import pytest

from pymc_gpc import ep, laplace

from ..conftest import LIKELIHOOD_CASES, ard_kernel, lik_id, random_problem

APPROXIMATIONS = {
    "ep-parallel": lambda K, y, lik, p: ep(K, y, lik, p, tol=1e-12),
    "ep-sequential": lambda K, y, lik, p: ep(K, y, lik, p, method="sequential", tol=1e-12),
    "laplace": lambda K, y, lik, p: laplace(K, y, lik, p, tol=1e-13),
}
CASES = [
    (lik, name)
    for lik in LIKELIHOOD_CASES
    for name in APPROXIMATIONS
    if lik.supports_laplace or name != "laplace"
]


def rel_err(a, b):
    return np.abs(a - b) / np.maximum(np.abs(b), 1e-3)


@pytest.mark.parametrize("lik, approx", CASES, ids=lambda c: c if isinstance(c, str) else lik_id(c))
@pytest.mark.parametrize("seed", [0, 1])
def test_gradient_matches_finite_differences(lik, approx, seed):
    rng = np.random.default_rng(seed)
    X, y = random_problem(rng, 14, d=2)
    theta = np.array([np.log(0.9), np.log(1.4), np.log(2.5)])  # log ls_1, log ls_2, log amp
    run = APPROXIMATIONS[approx]
    p0 = lik.params

    def log_z(th, p=p0):
        K, _ = ard_kernel(X, th[:2], th[2])
        return run(K, y, lik, p).log_z

    K, dK = ard_kernel(X, theta[:2], theta[2])
    res = run(K, y, lik, p0)
    assert res.converged
    grad = np.array([np.sum(res.dlog_z_dK * dk) for dk in dK])
    h = 1e-5
    fd = np.array([(log_z(theta + h * e) - log_z(theta - h * e)) / (2 * h) for e in np.eye(3)])
    assert np.all(rel_err(grad, fd) < 1e-5), (grad, fd)
    if lik.n_params:
        fdp = (log_z(theta, p0 + h) - log_z(theta, p0 - h)) / (2 * h)
        assert rel_err(res.dlog_z_dparams[0], fdp) < 1e-5, (res.dlog_z_dparams, fdp)


def test_gradient_with_negative_site_precisions():
    """The step likelihood produces tau_i < 0; the gradient must stay exact there."""
    lik = LIKELIHOOD_CASES[3]
    rng = np.random.default_rng(1)
    X = rng.normal(size=(8, 2))
    y = np.where(rng.normal(size=8) + X[:, 0] > 0, 1.0, -1.0)
    K, dK = ard_kernel(X, np.log([1.3, 1.3]), np.log(2.0))
    res = ep(K, y, lik, method="sequential", tol=1e-12)
    assert np.min(res.state.tau) < 0  # the indefinite branch is exercised
    grad = np.sum(res.dlog_z_dK * dK[0])
    h = 1e-5
    up = ep(ard_kernel(X, np.log([1.3, 1.3]) + [h, 0], np.log(2.0))[0], y, lik, method="sequential", tol=1e-12)
    dn = ep(ard_kernel(X, np.log([1.3, 1.3]) - [h, 0], np.log(2.0))[0], y, lik, method="sequential", tol=1e-12)
    assert rel_err(grad, (up.log_z - dn.log_z) / (2 * h)) < 1e-5
