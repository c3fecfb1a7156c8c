"""The fit's coarse first L-BFGS-B run (``estimation.type2._coarse_stage``): it solves at the
registry's ``coarse_fit_defaults``, the second run at the Op's own options, and
predictions over posterior draws never see the coarse options.

Ground truth: the optimum of the same MAP-II fit without a coarse run (the registry's
entry with ``coarse_fit_defaults`` emptied), whose solves are all at the engine's tolerance.
"""

import dataclasses
import inspect

import arviz as az
import numpy as np
import pymc as pm
import pytensor.tensor as pt
import pytest

import pymc_gpc
from pymc_gpc.gp import prediction
from pymc_gpc.approximations import registry
from pymc_gpc.estimation import objective as OBJ
from pymc_gpc.likelihoods import MultinomialProbit

NESTED_EP = "ep"  # with the multinomial probit: its multi-class solver (nested EP)


def _spy(monkeypatch, module):
    """Record the options of every solve that ``module`` runs through ``solve_with_retries``."""
    calls = []
    real = module.solve_with_retries

    def spy(approximation, K, y, lik, params, state, options, *rest):
        calls.append(dict(options))
        return real(approximation, K, y, lik, params, state, options, *rest)

    monkeypatch.setattr(module, "solve_with_retries", spy)
    return calls


@pytest.fixture(scope="module")
def nested_ep_model():
    """Nested EP with one SE kernel per class on 24 points, 3 classes, 1 input."""
    rng = np.random.default_rng(0)
    X = rng.uniform(-3, 3, (24, 1))
    y = np.digitize(X[:, 0] + 0.4 * rng.standard_normal(24), [-1.0, 1.0])
    with pm.Model() as model:
        log_ls = pm.Normal("log_ls", 0.0, 1.0, shape=3)
        log_amp = pm.Normal("log_amp", 0.0, 1.0, shape=3)
        covs = [pt.exp(log_amp[k]) * pm.gp.cov.ExpQuad(1, ls=pt.exp(log_ls[k])) for k in range(3)]
        gp = pymc_gpc.MarginalEP(cov_func=covs, likelihood=MultinomialProbit())
        gp.marginal_likelihood("y", X=X, y=y)
    return model, gp, X


def _hyper(result):
    return np.concatenate([result.point["log_ls"], result.point["log_amp"]])


def test_coarse_first_run_uses_the_registry_field_and_ends_at_the_exact_optimum(nested_ep_model, monkeypatch):
    model, _, _ = nested_ep_model
    coarse = dict(registry.solver_for(NESTED_EP, MultinomialProbit).coarse_fit_defaults)
    assert coarse.get("tol", 0.0) > 1e-8  # the field is set for nested EP: its first run is coarse
    calls = _spy(monkeypatch, OBJ)
    two_runs = pymc_gpc.fit(model, method="map", progressbar=False)
    tols = [c.get("tol") for c in calls[1:]]  # after the start's check (``_check_start``, exact)
    n_coarse = sum(t == coarse["tol"] for t in tols)
    assert n_coarse >= 3 and tols[:n_coarse] == [coarse["tol"]] * n_coarse  # the first run, all coarse
    assert len(tols) > n_coarse and all(t is None for t in tols[n_coarse:])  # then the Op's own tol

    entry = registry.APPROXIMATIONS[NESTED_EP]
    exact = dataclasses.replace(entry.solvers["multiclass"], coarse_fit_defaults={})
    monkeypatch.setitem(registry.APPROXIMATIONS, NESTED_EP,
                        dataclasses.replace(entry, solvers={**entry.solvers, "multiclass": exact}))
    calls.clear()
    one_run = pymc_gpc.fit(model, method="map", progressbar=False)
    assert all(c.get("tol") is None for c in calls)  # without the field: one run, exact solves
    assert two_runs.converged and one_run.converged
    # the same optimum, to the width of L-BFGS-B's stopping rule (the log evidence is not
    # stationary at the MAP-II point: the priors' gradient balances it)
    np.testing.assert_allclose(_hyper(two_runs), _hyper(one_run), atol=1e-3)
    assert abs(two_runs.log_evidence - one_run.log_evidence) < 1e-4


def test_predictions_over_draws_keep_their_own_tolerance(nested_ep_model, monkeypatch):
    model, gp, X = nested_ep_model
    calls = _spy(monkeypatch, prediction)
    walk = 0.05 * np.arange(2)[None, :, None] + np.zeros((1, 2, 3))
    idata = az.from_dict({"posterior": {"log_ls": walk, "log_amp": walk}})
    gp.predict(X[:3], idata=idata, model=model, progressbar=False)
    assert len(calls) == 2
    engine_tol = inspect.signature(pymc_gpc.multinomial_probit_ep).parameters["tol"].default
    # nested EP's predictions over draws are exact (test_multiclass_gp holds them to 1e-6 of
    # exact solves): neither the coarse fit's tol nor its rough gradient reaches them
    assert all(c.get("tol", engine_tol) == engine_tol and not c.get("rough_gradient") for c in calls)
