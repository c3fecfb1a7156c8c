"""Laplace's warm start with chord steps (``approximations.laplace``): after a move of the
hyperparameters it matches a cold solve from a = 0 (evidence, gradient, mode) and factorises
B twice, at the warm start's point and at the mode."""

import numpy as np
import pytest

import pymc_gpc.structures.dense as dense
from pymc_gpc.approximations.laplace import laplace
from pymc_gpc.likelihoods import Logistic, Probit

rng = np.random.default_rng(5)
X = rng.normal(size=(150, 3))
Y = np.where(np.sin(2 * X[:, 0]) + X[:, 1] * X[:, 2] + 0.3 * rng.normal(size=150) > 0, 1, -1)


def _K(log_ls, log_v):
    Z = X / np.exp(log_ls)
    d2 = ((Z[:, None] - Z[None]) ** 2).sum(-1)
    return np.exp(log_v) * np.exp(-0.5 * d2) + 1e-8 * np.eye(len(X))


@pytest.fixture
def factorisations(monkeypatch):
    calls = []
    original = dense.factor_B

    def counted(K, sw):
        calls.append(1)
        return original(K, sw)

    monkeypatch.setattr(dense, "factor_B", counted)
    return calls


@pytest.mark.parametrize("likelihood", [Probit(), Logistic()], ids=["probit", "logistic"])
@pytest.mark.parametrize("step", [1e-3, 0.1, 0.5])
def test_warm_start_matches_a_cold_solve(likelihood, step, factorisations):
    theta = np.array([0.0, 0.3, -0.2, 1.0])
    state = laplace(_K(theta[:3], theta[3]), Y, likelihood).state
    walk = np.random.default_rng(1)
    counts = []
    for _ in range(4):
        theta = theta + step * walk.normal(size=4)
        K = _K(theta[:3], theta[3])
        factorisations.clear()
        warm = laplace(K, Y, likelihood, state=state, tol=1e-10)
        counts.append(len(factorisations))
        cold = laplace(K, Y, likelihood, tol=1e-13, max_iter=200)
        state = warm.state
        assert warm.converged and cold.converged
        assert abs(warm.log_z - cold.log_z) < 1e-8 * abs(cold.log_z)
        np.testing.assert_allclose(warm.mean, cold.mean, rtol=0, atol=1e-7)
        np.testing.assert_allclose(warm.dlog_z_dK, cold.dlog_z_dK, rtol=0, atol=1e-7)
    # a small move: one Newton step, chord steps, the mode; larger ones may need a second
    # Newton step (Newton steps to convergence and a factorisation at the mode took 3-5)
    assert max(counts) <= {1e-3: 2, 0.1: 3, 0.5: 4}[step], counts
