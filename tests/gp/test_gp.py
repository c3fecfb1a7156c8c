"""MarginalEP / MarginalLaplace inside pm.Model: logp, MAP, prediction, sampling, errors."""

import arviz as az
import numpy as np
import pandas as pd
import pymc as pm
import pytensor.tensor as pt
import pytest
from pytensor.graph import ancestors
from scipy import stats

import pymc_gpc
from pymc_gpc import ep, laplace
from pymc_gpc import likelihoods as L

from ..conftest import random_problem
from ..conftest import se_kernel as rbf


def build(X, y, cls=pymc_gpc.MarginalEP, likelihood=None, sigma_prior=False, **options):
    with pm.Model() as model:
        log_ls = pm.Normal("log_ls", 0, 1, shape=X.shape[1])
        log_amp = pm.Normal("log_amp", 0, 1)
        cov = pt.exp(log_amp) * pm.gp.cov.ExpQuad(X.shape[1], ls=pt.exp(log_ls))
        if sigma_prior:
            likelihood = L.ProbitNoise(pm.HalfNormal("sigma", 1.0))
        gp = cls(cov_func=cov, likelihood=likelihood or L.Probit(), **options)
        gp.marginal_likelihood("y", X=X, y=y)
    return model, gp


@pytest.mark.parametrize("cls, approx", [(pymc_gpc.MarginalEP, ep), (pymc_gpc.MarginalLaplace, laplace)])
def test_model_logp_is_prior_plus_evidence(cls, approx):
    rng = np.random.default_rng(0)
    X, y = random_problem(rng, 30)
    # EP at a tight tolerance: the sampler's default (1e-2) leaves up to ~6e-4 in the evidence
    model, _ = build(X, y, cls, **({"tol": 1e-10} if cls is pymc_gpc.MarginalEP else {}))
    point = {"log_ls": np.array([0.2, -0.1]), "log_amp": np.array(0.5)}
    got = model.compile_logp()(point)
    K = rbf(X, X, np.exp(point["log_ls"]), np.exp(0.5)) + 1e-6 * np.eye(30)
    prior = stats.norm.logpdf(point["log_ls"]).sum() + stats.norm.logpdf(0.5)
    assert got == pytest.approx(prior + approx(K, y, L.Probit()).log_z, abs=1e-7)


def test_likelihood_parameter_as_random_variable_and_find_map():
    rng = np.random.default_rng(1)
    X, y = random_problem(rng, 40)
    # a tight EP tolerance: at the sampler's 1e-2 a cold start leaves ~1e-2 in the gradient
    model, gp = build(X, y, sigma_prior=True, tol=1e-8)
    with model:
        point = pm.find_MAP(progressbar=False, jitter=False, return_inferencedata=False)
    # at the MAP the gradient of the log posterior vanishes (checked in the free space)
    dlogp = model.compile_dlogp(jacobian=False)  # find_MAP maximises without the Jacobian
    ip = {k: v for k, v in point.items() if k in {v.name for v in model.value_vars}}
    assert np.max(np.abs(dlogp(ip))) < 1e-3
    p = gp.predict(X[:5], point=point, model=model)
    assert p.shape == (5,) and np.all((p > 0) & (p < 1))


def test_predict_matches_the_engine_at_a_point():
    rng = np.random.default_rng(2)
    X, y = random_problem(rng, 30)
    Xs = rng.normal(size=(6, 2))
    model, gp = build(X, y)
    point = {"log_ls": np.array([0.1, 0.3]), "log_amp": np.array(0.2)}
    p, mean, var = gp.predict(Xs, point=point, model=model, return_latent=True)
    ls, amp = np.exp(point["log_ls"]), np.exp(0.2)
    res = ep(rbf(X, X, ls, amp) + 1e-6 * np.eye(30), y, L.Probit())
    m, v = res.predict_latent(rbf(X, Xs, ls, amp), np.full(6, amp))
    np.testing.assert_allclose(mean, m, atol=1e-8)
    np.testing.assert_allclose(var, v, atol=1e-8)
    np.testing.assert_allclose(p, stats.norm.cdf(m / np.sqrt(1 + v)), atol=1e-8)


def test_short_sampling_run_gives_arviz_results_with_loo():
    rng = np.random.default_rng(3)
    X, y = random_problem(rng, 40)
    model, gp = build(X, y)
    with model:
        idata = pymc_gpc.sample(draws=60, tune=60, chains=1, random_seed=4, progressbar=False,
                                nuts_sampler="pymc", compute_convergence_checks=False)
    assert "log_likelihood" in idata.children
    assert idata["log_likelihood"]["y"].shape == (1, 60, 40)
    assert np.all(np.asarray(idata["sample_stats"]["y_status"]) == 0)  # diagnostics: sample_stats
    loo = az.loo(idata)
    assert np.isfinite(float(loo.elpd))
    p = gp.predict(X, idata=idata, model=model, max_draws=10)
    assert np.mean((p > 0.5) == (y > 0)) > 0.6  # better than chance on its own training data
    with model:
        f_star = gp.conditional("f_star", X[:4])
        pp = pm.sample_posterior_predictive(idata, var_names=["f_star"], progressbar=False, random_seed=5)
    assert pp["posterior_predictive"]["f_star"].shape == (1, 60, 4)


def test_sample_defaults_to_a_dense_mass_matrix_for_few_hyperparameters(monkeypatch):
    """pymc_gpc.sample: PyMC's NUTS with adapt_full up to DENSE_MASS_MAX values, PyMC's
    default above; an explicit init / step or another sampler is left alone."""
    from pymc_gpc import idata as idata_mod

    rng = np.random.default_rng(3)
    X, y = random_problem(rng, 20)
    model, _ = build(X, y)
    assert idata_mod.default_init(model) == "jitter+adapt_full"
    with pm.Model() as big:
        pm.Normal("z", shape=idata_mod.DENSE_MASS_MAX + 1)
    assert idata_mod.default_init(big) == "jitter+adapt_diag"
    with pm.Model() as edge:
        pm.Normal("z", shape=idata_mod.DENSE_MASS_MAX)
    assert idata_mod.default_init(edge) == "jitter+adapt_full"
    with pm.Model() as mixed:  # discrete values do not count (PyMC's NUTS never sees them)
        pm.Normal("z", shape=3)
        pm.Poisson("k", 3.0, shape=idata_mod.DENSE_MASS_MAX + 10)
    assert idata_mod.default_init(mixed) == "jitter+adapt_full"
    assert idata_mod.DENSE_MASS_MAX == 50  # the README states it

    seen = []

    def fake_sample(*args, **kwargs):
        seen.append(kwargs)
        raise RuntimeError("stop")

    monkeypatch.setattr(idata_mod.pm, "sample", fake_sample)
    # nothing given: the Laplace start (a NUTS step with the dense mass matrix, estimation.sampling.laplace_start)
    for kwargs, init in [({}, None), ({"init": "adapt_diag"}, "adapt_diag"),
                         ({"nuts_sampler": "nutpie"}, None), ({"step": object()}, None),
                         ({"init": None, "step": None, "nuts_sampler": None}, None)]:
        with pytest.raises(RuntimeError, match="stop"):
            pymc_gpc.sample(model=model, **kwargs)
        assert seen[-1].get("init") == init
        assert seen[-1]["nuts_sampler"] == (kwargs.get("nuts_sampler") or "pymc")
        laplace = not any(kwargs.values())
        assert isinstance(seen[-1].get("step"), pm.NUTS) == laplace and ("initvals" in seen[-1]) == laplace


def test_sample_picks_nutpie_for_many_hyperparameters(monkeypatch):
    """pymc_gpc.sample's default sampler: PyMC's NUTS up to PYMC_NUTS_MAX sampled values,
    nutpie above (PyMC's where nutpie is not installed); init only for PyMC's NUTS."""
    import sys

    from pymc_gpc import idata as idata_mod

    with pm.Model() as edge:
        pm.Normal("z", shape=idata_mod.PYMC_NUTS_MAX)
    with pm.Model() as many:
        pm.Normal("z", shape=idata_mod.PYMC_NUTS_MAX + 1)
        pm.Poisson("k", 3.0, shape=50)  # discrete values do not count
    assert idata_mod.default_sampler(edge) == "pymc"
    assert idata_mod.default_sampler(many) == "nutpie"  # nutpie is in the test extras
    seen = []

    def fake_sample(*args, **kwargs):
        seen.append(kwargs)
        raise RuntimeError("stop")

    monkeypatch.setattr(idata_mod.pm, "sample", fake_sample)
    with pytest.raises(RuntimeError, match="stop"):
        pymc_gpc.sample(model=many)
    assert seen[-1]["nuts_sampler"] == "nutpie" and "init" not in seen[-1]
    monkeypatch.setitem(sys.modules, "nutpie", None)  # as if not installed: import fails
    assert idata_mod.default_sampler(many) == "pymc"


def test_sample_hides_only_the_dense_adaptation_warning(monkeypatch):
    import warnings

    from pymc_gpc import idata as idata_mod

    def fake_sample(*args, **kwargs):  # what pm.sample emits with init="jitter+adapt_full", and another
        warnings.warn("QuadPotentialFullAdapt is an experimental feature", UserWarning)
        warnings.warn("another warning", UserWarning)
        raise RuntimeError("stop")

    monkeypatch.setattr(idata_mod.pm, "sample", fake_sample)
    rng = np.random.default_rng(3)
    model, _ = build(*random_problem(rng, 20))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(RuntimeError, match="stop"):
            pymc_gpc.sample(model=model)
    assert [str(w.message) for w in caught] == ["another warning"]


@pytest.mark.slow  # a sampling run: CI only, not the between-edits tier
def test_nutpie_samples_the_same_model():
    """nutpie (numba backend, chains as threads) runs the Op with per-thread warm starts."""
    rng = np.random.default_rng(10)
    X, y = random_problem(rng, 30)
    model, _ = build(X, y, tol=1e-2)  # the sampler's tolerance (plain pm.sample: the engine's 1e-8)
    with model:
        idata = pm.sample(draws=50, tune=50, chains=2, random_seed=11, progressbar=False,
                          nuts_sampler="nutpie", compute_convergence_checks=False)
    assert np.asarray(idata["posterior"]["log_amp"]).shape == (2, 50)
    assert np.all(np.asarray(idata["posterior"]["y_status"]) == 0)
    assert np.all(np.isfinite(np.asarray(idata["posterior"]["y_loo"])))


def test_nutpie_threads_keep_their_warm_starts(monkeypatch):
    """nutpie's Rust threads enter Python afresh at every evaluation (a new Python thread
    state each time): the warm starts must survive that (they did not with threading.local)."""
    from pymc_gpc.backends.numba import dispatch as numba_dispatch
    from pymc_gpc.ops import marginal as ops

    rng = np.random.default_rng(12)
    X, y = random_problem(rng, 30)
    model, _ = build(X, y, tol=1e-2)  # warm starts do not depend on the tolerance; 1e-2 is cheaper
    starts = []
    solve = ops.ep_warm  # the Op's hot path (ep() only for what it declines)

    def recording(K, y, lik, th, state, **kwargs):
        starts.append(state is None)
        return solve(K, y, lik, th, state, **kwargs)

    monkeypatch.setattr(ops, "ep_warm", recording)
    monkeypatch.setattr(numba_dispatch, "COMPILED_EP", False)  # the object-mode Op (``compiled_ep``: the test below)
    with model:
        pm.sample(draws=30, tune=30, chains=1, random_seed=3, progressbar=False,
                  nuts_sampler="nutpie", compute_convergence_checks=False)
    assert len(starts) > 100
    assert np.mean(starts) < 0.05  # cold starts: the first evaluation of each function only


def test_nutpie_threads_keep_their_warm_starts_compiled(compiled_ep):
    """nutpie runs the compiled logp on its Rust threads: each thread keeps its warm starts
    in compiled memory (``backends.numba.thread_state``), so only a thread's first evaluation starts
    cold (under threading.local in Python each evaluation had started cold), and the
    evaluations run on the compiled path (``backends.numba.compiled_ep``), not in Python."""
    from pymc_gpc.backends.numba import thread_state
    from pymc_gpc.ops import ApproxMarginalOp

    rng = np.random.default_rng(12)
    X, y = random_problem(rng, 30)
    model, _ = build(X, y, tol=1e-2)  # warm starts do not depend on the tolerance; 1e-2 is cheaper
    with model:
        pm.sample(draws=30, tune=30, chains=2, cores=2, random_seed=3, progressbar=False,
                  nuts_sampler="nutpie", compute_convergence_checks=False)
    (op,) = {v.owner.op for v in ancestors(model.potentials) if v.owner
             and isinstance(v.owner.op, ApproxMarginalOp)}
    keys = op.backend_state_keys
    solves = sum(thread_state.evaluations(k) for k in keys)
    cold = sum(thread_state.evaluations(k, cold=True) for k in keys)
    assert solves > 200 and op._counts["evaluations"] < 0.02 * solves  # the Python path: rare
    assert cold < 0.02 * solves  # the first evaluation of each thread and function, and few more


@pytest.mark.parametrize("sampler", ["pymc", "nutpie"])
def test_a_seeded_run_repeats_itself_whatever_ran_before(sampler):
    """The same random_seed gives the same draws in one process, also after other runs
    and evaluations of the model (whose warm starts would otherwise carry over and move
    every solution within the solver's tolerance)."""
    rng = np.random.default_rng(16)
    X, y = random_problem(rng, 30)
    model, _ = build(X, y)

    def run():
        with model:
            idata = pm.sample(draws=15, tune=15, chains=1, cores=1, random_seed=7, progressbar=False,
                              nuts_sampler=sampler, compute_convergence_checks=False)
        return idata["posterior"]

    first = run()
    logp = model.compile_logp()
    logp({"log_ls": np.array([1.5, -1.0]), "log_amp": np.array(2.0)})  # a far point in between
    again = run()
    assert set(again.data_vars) == {"log_ls", "log_amp", "y_loo", "y_n_iter", "y_status"}
    for name in first.data_vars:  # the draws and the recorded diagnostics
        np.testing.assert_array_equal(again[name], first[name])


def test_ard_classifier_starts_the_amplitude_at_unit_scale():
    """log v0 starts at 0 (an informative latent scale), the other log-hyperparameters at the prior mean."""
    rng = np.random.default_rng(3)
    X, y = random_problem(rng, 20)
    model, _ = pymc_gpc.ard_classifier(X, y, prior=(-2.0, 3.0))
    point = model.initial_point()
    assert point["log_v0"] == 0.0
    np.testing.assert_array_equal(point["log_w"], [-2.0, -2.0])
    assert point["log_v1"] == -2.0
    model, _ = pymc_gpc.ard_classifier(X, y, prior=(5.0, 0.1))  # 0 is 50 sds away: clipped
    assert model.initial_point()["log_v0"] == pytest.approx(4.9)


def test_label_and_input_containers_give_the_arrays_numbers():
    """pm.Data containers of X and of {0, 1} labels give the logp and predictions of the same
    arrays: the container's coding (values above 0 positive) and the checks wrapped around the
    containers change no number (coding 0 as positive, pt.ge for pt.gt, makes every label +1)."""
    rng = np.random.default_rng(3)
    X, y = random_problem(rng, 14)
    y01 = (y > 0).astype(float)
    point = {"log_ls": np.array([0.1, -0.2]), "log_amp": np.array(0.3)}
    arrays, gp_a = build(X, y01, tol=1e-10)
    with pm.Model() as containers:
        Xd, yd = pm.Data("X", X), pm.Data("y_obs", y01)
        log_ls = pm.Normal("log_ls", 0, 1, shape=X.shape[1])
        log_amp = pm.Normal("log_amp", 0, 1)
        cov = pt.exp(log_amp) * pm.gp.cov.ExpQuad(X.shape[1], ls=pt.exp(log_ls))
        gp_c = pymc_gpc.MarginalEP(cov_func=cov, likelihood=L.Probit(), tol=1e-10)
        gp_c.marginal_likelihood("y", X=Xd, y=yd)
    assert containers.compile_logp()(point) == pytest.approx(arrays.compile_logp()(point), abs=1e-9)
    np.testing.assert_allclose(gp_c.predict(X[:4], point=point), gp_a.predict(X[:4], point=point), atol=1e-9)
