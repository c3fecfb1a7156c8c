"""``ard_classifier(lengthscale_spread=tau)``: the hierarchical prior on per-class lengthscales."""

import numpy as np
import pytensor
import pytest
from scipy.stats import multivariate_normal, norm

import pymc_gpc

PRIOR = (-3.0, 3.0)


@pytest.fixture(scope="module")
def three_classes():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(30, 2))
    return X, np.arange(30) % 3


def test_spread_prior_is_the_hierarchical_normal_with_the_mean_integrated_out(three_classes):
    """The potential log_w_shrinkage turns the independent N(mean, sd^2) on each log w_kj into
    the hierarchical prior: each column N(mean 1, tau^2 I + sd^2 1 1^T) (dense scipy density)."""
    X, y = three_classes
    tau = 0.7
    model, _ = pymc_gpc.ard_classifier(X, y, approximation="laplace", lengthscale_spread=tau, prior=PRIOR)
    log_w = np.random.default_rng(1).normal(-3.0, 2.0, size=(3, 2))
    term = model.replace_rvs_by_values([model["log_w_shrinkage"]])[0]
    shrinkage = pytensor.function([model.rvs_to_values[model["log_w"]]], term)(log_w)
    cov = tau ** 2 * np.eye(3) + PRIOR[1] ** 2 * np.ones((3, 3))
    hierarchical = sum(multivariate_normal(np.full(3, PRIOR[0]), cov).logpdf(log_w[:, j]) for j in range(2))
    np.testing.assert_allclose(shrinkage, hierarchical - norm(*PRIOR).logpdf(log_w).sum(), rtol=1e-10)


def test_spread_draws_the_classes_lengthscales_together(three_classes):
    """The potential's gradient pulls each class's log w toward the column mean: at equal
    columns it vanishes (beyond the prior's pull to the mean), and it grows with tau^-2."""
    X, y = three_classes
    log_w = np.array([[-1.0, -3.0], [-3.0, -3.0], [-5.0, -3.0]])
    grads = []
    for tau in (0.5, 2.0):
        model, _ = pymc_gpc.ard_classifier(X, y, approximation="laplace", lengthscale_spread=tau, prior=PRIOR)
        value = model.rvs_to_values[model["log_w"]]
        logp = model.logp(vars=[model["log_w"], model["log_w_shrinkage"]], jacobian=False)
        grad = pytensor.function([value], pytensor.grad(logp, value))(log_w)
        # exact: -Sigma^-1 x per column minus the independent prior's -x / sd^2
        x = log_w - PRIOR[0]
        cov = tau ** 2 * np.eye(3) + PRIOR[1] ** 2 * np.ones((3, 3))
        expected = -np.linalg.solve(cov, x)
        np.testing.assert_allclose(grad, expected, rtol=1e-8, atol=1e-12)
        grads.append(grad)
    assert grads[0][0, 0] < grads[1][0, 0] < 0 < grads[1][2, 0] < grads[0][2, 0]


@pytest.mark.parametrize("spread, per_class, match", [
    (0.0, None, "finite number > 0"), (np.inf, None, "finite number > 0"), ("1", None, "finite number > 0"),
    (1.0, "amplitudes", "one ARD kernel per class"), (1.0, False, "one ARD kernel per class"),
])
def test_spread_bad_input(three_classes, spread, per_class, match):
    X, y = three_classes
    with pytest.raises(ValueError, match=match):
        pymc_gpc.ard_classifier(X, y, approximation="laplace", lengthscale_spread=spread, per_class=per_class)


def test_spread_needs_several_classes(three_classes):
    X, _ = three_classes
    with pytest.raises(ValueError, match="several classes"):
        pymc_gpc.ard_classifier(X, np.arange(30) % 2, lengthscale_spread=1.0)
