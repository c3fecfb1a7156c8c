"""``gp.predict(Xnew, point=result)`` after ``pymc_gpc.fit``: the fit's result carries the solver
state converged at its point (``FitResult.solver_states``), and the prediction starts there.

Checked against ground truth: the recorded state is the approximation's fixed point at the
returned hyperparameters (EP: every site's tilted moments equal the posterior marginal,
by quadrature on dense matrices; Laplace: the mode from an independent dense Newton), and
the warm prediction equals the cold one. That the state is used is checked by the
solver's iteration count and by the state object handed to it.
"""

import numpy as np
import pymc as pm
import pytest
from pymc.gp.util import JITTER_DEFAULT

import pymc_gpc
import pymc_gpc.gp.prediction as prediction
from pymc_gpc import likelihoods as L
from pymc_gpc.approximations.ep import EPState
from pymc_gpc.approximations.solve import solve_with_retries

from ..conftest import nested_gp, random_problem, se_kernel
from ..reference.ground_truth import cavity, fitc_dense, gaussian_with_sites, laplace_mode, tilted

N, N_INDUCING = 30, 8
CASES = {  # name: (class, likelihood, approx)
    "ep-dense": (pymc_gpc.MarginalEP, L.Probit(), None),
    "laplace-dense": (pymc_gpc.MarginalLaplace, L.Logistic(), None),
    "ep-fitc": (pymc_gpc.MarginalEP, L.Probit(), "FITC"),
    "laplace-fitc": (pymc_gpc.MarginalLaplace, L.Logistic(), "FITC"),
}


def _build(X, y, cls, likelihood, approx, name="y", model_name=""):
    with pm.Model(name=model_name) as model:
        ls = pm.LogNormal("ls", 0.0, 1.0)
        amp = pm.LogNormal("amp", 0.0, 1.0)
        gp = cls(cov_func=amp * pm.gp.cov.ExpQuad(X.shape[1], ls=ls), likelihood=likelihood, approx=approx)
        gp.marginal_likelihood(name, X=X, y=y, **({"Xu": X[:N_INDUCING]} if approx else {}))
    return model, gp


class _Spy:
    """Wraps ``prediction.solve_with_retries``: records the state each solve starts from and
    the iterations (EP sweeps, Newton steps) it takes."""

    def __init__(self, monkeypatch):
        self.calls = []
        self._solve = solve_with_retries
        monkeypatch.setattr(prediction, "solve_with_retries", self)

    def __call__(self, approximation, K, y, lik, params, state, options, retry_options=None):
        result, retries = self._solve(approximation, K, y, lik, params, state, options, retry_options)
        self.calls.append((state, result.n_iter))
        return result, retries


@pytest.fixture(scope="module")
def problem():
    X, y = random_problem(np.random.default_rng(4), N)
    return X, y, np.random.default_rng(5).normal(size=(12, 2))


@pytest.fixture(scope="module", params=list(CASES))
def fitted(request, problem):
    """A MAP-II fit stopped after a few iterations: its point is not the optimum, so the
    states of the evaluations before the last differ from the state at the point."""
    X, y, _ = problem
    model, gp = _build(X, y, *CASES[request.param])
    result = pymc_gpc.fit(model, method="map", maxiter=4, progressbar=False)
    return request.param, model, gp, result


def _prior_at(result, X, approx):
    """The dense prior covariance at the fitted point, written out with numpy (FITC: Q + Lambda)."""
    ls, amp = float(result.point["ls"]), float(result.point["amp"])
    if approx is None:
        return se_kernel(X, X, ls, amp) + JITTER_DEFAULT * np.eye(len(X))
    Xu = X[:N_INDUCING]
    K_uu = se_kernel(Xu, Xu, ls, amp) + JITTER_DEFAULT * np.eye(N_INDUCING)
    return fitc_dense(K_uu, se_kernel(Xu, X, ls, amp), np.full(len(X), amp + JITTER_DEFAULT))


def test_fit_records_the_fixed_point_at_its_returned_point(fitted, problem):
    name, _, gp, result = fitted
    X, y, _ = problem
    _, likelihood, approx = CASES[name]
    state = result.solver_state("y")
    assert set(result.solver_states) == {"y"}
    K = _prior_at(result, X, approx)
    if name.startswith("ep"):
        mean, Sigma = gaussian_with_sites(K, state.tau, state.nu)
        moments = np.array([tilted(likelihood, y[i], *cavity(K, state.tau, state.nu, i))[1:] for i in range(N)])
        np.testing.assert_allclose(mean, moments[:, 0], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(np.diag(Sigma), moments[:, 1], rtol=1e-5, atol=1e-6)
    else:
        f, _, _ = laplace_mode(K, y, likelihood)
        np.testing.assert_allclose(state.f, f, rtol=1e-6, atol=1e-7)


def test_warm_prediction_equals_the_cold_one_and_starts_from_the_fit(fitted, problem, monkeypatch):
    _, _, gp, result = fitted
    _, _, Xnew = problem
    spy = _Spy(monkeypatch)
    p_cold, m_cold, v_cold = gp.predict(Xnew, point=result.point, return_latent=True)
    p_warm, m_warm, v_warm = gp.predict(Xnew, point=result, return_latent=True)
    np.testing.assert_allclose(m_warm, m_cold, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(v_warm, v_cold, rtol=1e-6)
    np.testing.assert_allclose(p_warm, p_cold, rtol=1e-6)
    (cold_state, cold_iter), (warm_state, warm_iter) = spy.calls
    assert cold_state is None and warm_state is result.solver_state("y")
    assert warm_iter <= 2 < cold_iter  # a converged start: one sweep (Newton step) to confirm it


def test_states_found_by_name_in_a_named_model_with_two_terms(problem, monkeypatch):
    """Two evidence terms of different sizes: each GP gets its own term's state (the Op
    nodes are not in the potentials' order), under the model's name prefix."""
    X, y, Xnew = problem
    with pm.Model(name="outer") as model:
        ls = pm.LogNormal("ls", 0.0, 1.0)
        gps = {}
        for name, rows in (("a", slice(None)), ("b", slice(0, 20))):
            gps[name] = pymc_gpc.MarginalLaplace(cov_func=pm.gp.cov.ExpQuad(2, ls=ls), likelihood=L.Logistic())
            gps[name].marginal_likelihood(name, X=X[rows], y=y[rows])
    result = pymc_gpc.fit(model, method="map", maxiter=3, progressbar=False)
    assert {k: v.a.shape for k, v in result.solver_states.items()} == {"outer::a": (N,), "outer::b": (20,)}
    spy = _Spy(monkeypatch)
    for name in ("a", "b"):
        gps[name].predict(Xnew, point=result)
    assert [state for state, _ in spy.calls] == [result.solver_state("outer::a"), result.solver_state("outer::b")]


def test_a_gp_in_a_nested_model_finds_the_state_of_a_fit_of_the_outer_model(problem, monkeypatch):
    X, y, Xnew = problem
    outer, gp = nested_gp(X, y, pymc_gpc.MarginalLaplace, L.Logistic())
    result = pymc_gpc.fit(outer, method="map", maxiter=3, progressbar=False)
    spy = _Spy(monkeypatch)
    gp.predict(Xnew, point=result)  # predicted from the GP's own model, the inner one
    gp.predict(Xnew, point=result, model=outer)
    assert [state for state, _ in spy.calls] == [result.solver_state("sub::y")] * 2
    assert result.solver_state("sub::y") is not None


def test_a_result_of_another_model_starts_cold(problem, monkeypatch):
    X, y, Xnew = problem
    model, _ = _build(X[:20], y[:20], pymc_gpc.MarginalEP, L.Probit(), None)
    other = pymc_gpc.fit(model, method="map", maxiter=2, progressbar=False)
    _, gp = _build(X, y, pymc_gpc.MarginalEP, L.Probit(), None)
    spy = _Spy(monkeypatch)
    p = gp.predict(Xnew, point=other)
    assert spy.calls[0][0] is None
    np.testing.assert_allclose(p, gp.predict(Xnew, point=other.point), rtol=1e-12)


def test_a_warm_start_of_another_size_is_replaced_by_a_cold_start(problem):
    X, y, _ = problem
    K = se_kernel(X, X, 1.0, 1.0) + JITTER_DEFAULT * np.eye(N)
    stale = EPState(np.ones(N + 3), np.zeros(N + 3))
    warm, retries = solve_with_retries("ep", K, y, L.Probit(), None, stale, {"with_grad": False})
    cold, _ = solve_with_retries("ep", K, y, L.Probit(), None, None, {"with_grad": False})
    assert retries == 1 and warm.log_z == pytest.approx(cold.log_z, rel=1e-12)


def test_multiclass_prediction_starts_from_the_fit(problem, monkeypatch):
    """The same seam serves several classes (softmax Laplace, FITC prior)."""
    X, _, Xnew = problem
    y = np.digitize(X[:, 0] + 0.3 * X[:, 1], [-0.4, 0.4])  # three classes
    with pm.Model() as model:
        ls = pm.LogNormal("ls", 0.0, 1.0)
        gp = pymc_gpc.MarginalLaplace(cov_func=pm.gp.cov.ExpQuad(2, ls=ls), likelihood=L.Softmax(), approx="FITC")
        gp.marginal_likelihood("y", X=X, y=y, Xu=X[:N_INDUCING])
    result = pymc_gpc.fit(model, method="map", maxiter=2, progressbar=False)
    spy = _Spy(monkeypatch)
    p_cold, m_cold, c_cold = gp.predict(Xnew, point=result.point, return_latent=True)
    p_warm, m_warm, c_warm = gp.predict(Xnew, point=result, return_latent=True)
    np.testing.assert_allclose(m_warm, m_cold, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(c_warm, c_cold, rtol=1e-6, atol=1e-12)
    np.testing.assert_allclose(p_warm, p_cold, rtol=1e-6)
    (cold_state, cold_iter), (warm_state, warm_iter) = spy.calls
    assert cold_state is None and warm_state is result.solver_state("y")
    assert warm_iter <= 2 < cold_iter


def test_em_ep_result_carries_the_fixed_point_and_predict_starts_from_it(problem, monkeypatch):
    """EM-EP (``estimation.em_ep``) records the state of its final E-step, at its returned point."""
    X, y, Xnew = problem
    model, gp = _build(X, y, pymc_gpc.MarginalEP, L.Probit(), None)
    result = pymc_gpc.fit(model, method="em-ep", maxiter=3, progressbar=False)
    state = result.solver_state("y")
    K = _prior_at(result, X, None)
    mean, Sigma = gaussian_with_sites(K, state.tau, state.nu)
    moments = np.array([tilted(L.Probit(), y[i], *cavity(K, state.tau, state.nu, i))[1:] for i in range(N)])
    np.testing.assert_allclose(mean, moments[:, 0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.diag(Sigma), moments[:, 1], rtol=1e-5, atol=1e-6)
    spy = _Spy(monkeypatch)
    p_cold = gp.predict(Xnew, point=result.point)
    p_warm = gp.predict(Xnew, point=result)
    np.testing.assert_allclose(p_warm, p_cold, rtol=1e-6)
    (cold_state, cold_iter), (warm_state, warm_iter) = spy.calls
    assert cold_state is None and warm_state is state and warm_iter <= 2 < cold_iter
