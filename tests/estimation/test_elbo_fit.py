"""``pymc_gpc.fit(model, method="elbo")``: MAP of the SVGP-type bound (``solvers.softmax_dtc_bound``)
in place of the evidence, for several classes under softmax Laplace with the FITC prior.

Ground truth: central differences of the objective (the bound through the model's kernel graph
plus its hyperprior) for the gradient the optimiser follows; each method's optimum against the
other's under its own objective; the bound recomputed from the model's kernel arrays at the
returned point.
"""

import numpy as np
import pytest

import pymc_gpc
from pymc_gpc.estimation.objective import objective_for, other_terms, ravel, unravel
from pymc_gpc.solvers import softmax_dtc_bound


def _model(n=150, m=10, approximation="laplace", inducing=True, classes=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    score = X[:, 0] + 0.5 * np.sin(3 * X[:, 1]) + 0.3 * rng.normal(size=n)
    y = np.digitize(score, np.quantile(score, np.linspace(0, 1, classes + 1)[1:-1]))
    return pymc_gpc.ard_classifier(X, y, approximation=approximation, inducing=m if inducing else None)


def _objective(model, bound):
    return objective_for(model, other_terms(model, include_priors=True), model.continuous_value_vars, bound=bound)


@pytest.fixture(scope="module")
def fits():
    model, gp = _model()
    elbo = pymc_gpc.fit(model, method="elbo", progressbar=False)
    map_ii = pymc_gpc.fit(model, method="map", progressbar=False)
    return model, gp, elbo, map_ii


def test_the_objectives_gradient_equals_central_differences():
    """The bound's cotangents in (K_uu, K_uf, diag K_ff) pulled back through the model's kernel graph,
    with the hyperprior's gradient, at a point away from the optimum."""
    model, _ = _model(n=80, m=8)
    objective = _objective(model, True)
    start = model.initial_point()
    layout = ravel(start, objective.free)
    x = layout.data + 0.3 * np.random.default_rng(1).normal(size=layout.data.size)
    value, _, grad = objective.evidence_and_grad(unravel(x, layout, start))
    h, fd = 1e-5, []
    for e in np.eye(len(x)):
        fd.append((objective.evidence_and_grad(unravel(x + h * e, layout, start))[0]
                   - objective.evidence_and_grad(unravel(x - h * e, layout, start))[0]) / (2 * h))
    np.testing.assert_allclose(grad, fd, rtol=1e-5, atol=1e-5 * max(1.0, np.max(np.abs(fd))))


def test_each_method_ends_at_its_own_objectives_optimum(fits):
    """The elbo point scores higher than the MAP-II point under bound + hyperprior, and lower under
    evidence + hyperprior: the methods maximise different objectives, each its own."""
    model, _, elbo, map_ii = fits
    assert elbo.method == "elbo" and elbo.converged and map_ii.converged
    bound_obj, evidence_obj = _objective(model, True), _objective(model, False)

    def value(objective, result):
        start = model.initial_point()
        layout = ravel(start, objective.free)
        return objective.evidence_and_grad(unravel(ravel(result.point, objective.free).data, layout, start))[0]

    # what the fit climbed is the bound plus the hyperprior (its last iterate's objective)
    assert elbo.history["objective"][-1] == pytest.approx(value(bound_obj, elbo), abs=1e-6)
    assert value(bound_obj, elbo) > value(bound_obj, map_ii) + 1e-3
    assert value(evidence_obj, map_ii) > value(evidence_obj, elbo) + 1e-3
    assert not np.allclose(elbo.point["log_w"], map_ii.point["log_w"], atol=1e-2)


def test_the_reported_value_is_the_bound_at_the_point_and_predict_uses_it(fits):
    model, gp, elbo, _ = fits
    objective = _objective(model, True)
    (arrays, _), = objective.kernel_inputs(elbo.point)[0]
    cold = softmax_dtc_bound(*arrays, objective.labels[0].astype(int), draws=256, with_grad=False)
    assert elbo.log_evidence == pytest.approx(cold.value, abs=1e-6)
    X = np.random.default_rng(5).normal(size=(4, 2))
    p = gp.predict(X, point=elbo)
    np.testing.assert_allclose(p.sum(axis=1), 1.0)
    np.testing.assert_allclose(p, gp.predict(X, point=elbo.point), atol=1e-8)


@pytest.mark.parametrize("kind", ["binary", "dense multi-class", "nested EP"])
def test_other_models_are_a_value_error_naming_the_supported_one(kind):
    options = {"binary": dict(classes=2), "dense multi-class": dict(inducing=False),
               "nested EP": dict(approximation="ep")}[kind]
    model, _ = _model(n=40, m=5, **options)
    with pytest.raises(ValueError, match=r"fit\(method='elbo'\) takes several classes with the softmax's Laplace"):
        pymc_gpc.fit(model, method="elbo", progressbar=False)
