"""The habits of PyMC and ArviZ users (issue 44): honest fit results, the engine's accuracy for
third-party consumers of logp / dlogp, PyMC's log-likelihood routes, ArviZ's default calls,
pm.Data, and the smaller conventions. Every call is written the way a user writes it."""

import warnings

import arviz as az
import matplotlib
import numpy as np
import pandas as pd
import pymc as pm
import pytensor.tensor as pt
import pytest
import xarray as xr
from pymc.blocking import DictToArrayBijection

import pymc_gpc
from pymc_gpc.datasets import load_pima
from pymc_gpc.likelihoods import Probit, Softmax

matplotlib.use("Agg")

SAMPLE = dict(draws=20, tune=20, chains=2, cores=1, random_seed=3, progressbar=False,
              compute_convergence_checks=False)


def _data(n=24, d=2, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = (X[:, 0] + 0.5 * rng.normal(size=n) > 0).astype(int)
    return X, y


def _binary(kind="dense", X=None, y=None):
    if X is None:
        X, y = _data()
    with pm.Model() as model:
        log_ls = pm.Normal("log_ls", 0.0, 1.0)
        log_amp = pm.Normal("log_amp", 0.0, 1.0)
        cov = pt.exp(2 * log_amp) * pm.gp.cov.ExpQuad(X.shape[1], ls=pt.exp(log_ls))
        if kind == "fitc":
            gp = pymc_gpc.MarginalEP(cov_func=cov, likelihood=Probit(), approx="FITC")
            gp.marginal_likelihood("y", X=X, y=y, Xu=X[:6])
        else:
            gp = pymc_gpc.MarginalEP(cov_func=cov, likelihood=Probit())
            gp.marginal_likelihood("y", X=X, y=y)
    return model, gp


def _multiclass(X=None, labels=None):
    if X is None:
        X, _ = _data(n=24)
        labels = np.array(list("abc") * 8)
    with pm.Model() as model:
        log_ls = pm.Normal("log_ls", 0.0, 1.0)
        cov = pm.gp.cov.ExpQuad(X.shape[1], ls=pt.exp(log_ls))
        gp = pymc_gpc.MarginalLaplace(cov_func=cov, likelihood=Softmax())
        gp.marginal_likelihood("y", X=X, y=labels)
    return model, gp


MODELS = {"binary": lambda: _binary(), "multiclass": lambda: _multiclass(), "fitc": lambda: _binary("fitc")}


# -- 1. fit on a start where the objective is -inf -----------------------------------------


def _invalid_start(kind):
    X, y = _data()
    with pm.Model() as model:
        ls = pm.Normal("ls", 0.0, 1.0)  # used directly as a lengthscale: 0 at the initial point
        cov = pm.gp.cov.ExpQuad(2, ls=ls)
        if kind == "multiclass":
            gp = pymc_gpc.MarginalLaplace(cov_func=cov, likelihood=Softmax())
            gp.marginal_likelihood("y", X=X, y=np.array(list("abc") * 8))
        elif kind == "fitc":
            gp = pymc_gpc.MarginalEP(cov_func=cov, likelihood=Probit(), approx="FITC")
            gp.marginal_likelihood("y", X=X, y=y, Xu=X[:5])
        else:
            gp = pymc_gpc.MarginalEP(cov_func=cov, likelihood=Probit())
            gp.marginal_likelihood("y", X=X, y=y)
    return model


@pytest.mark.parametrize("kind", ["binary", "multiclass", "fitc"])
@pytest.mark.parametrize("method", ["map", "type2"])
def test_fit_from_an_invalid_start_says_so(kind, method):
    model = _invalid_start(kind)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no bare NumPy warning instead of the error
        with pytest.raises(pymc_gpc.FitStartError, match=r"cannot start.*ls=0\.0.*log evidence is -inf"):
            pymc_gpc.fit(model, method=method, progressbar=False)
    assert issubclass(pymc_gpc.FitStartError, ValueError)


# -- 2. the engine's accuracy for every consumer of logp / dlogp but the package's sampler ---


def _raveled(model):
    point = model.initial_point()
    x0 = DictToArrayBijection.map(point)
    return point, x0, lambda x: DictToArrayBijection.rmap(x0._replace(data=np.asarray(x, float)), point)


def _breast_cancer(n=120):
    from sklearn.datasets import load_breast_cancer

    data = load_breast_cancer()
    X = (data.data - data.data.mean(axis=0)) / data.data.std(axis=0)
    return X[:n], data.target[:n]


@pytest.mark.parametrize("dataset", ["pima", "breast_cancer"])
def test_compile_dlogp_matches_finite_differences(dataset):
    if dataset == "pima":
        split = load_pima()
        X, y = split.X_train, split.y_train
    else:
        X, y = _breast_cancer()
    model, _ = pymc_gpc.ard_classifier(X, y)
    logp, dlogp = model.compile_logp(), model.compile_dlogp()
    _, x0, point = _raveled(model)
    x = x0.data + 0.3 * np.random.default_rng(1).standard_normal(x0.data.size)
    grad = dlogp(point(x))
    h = 1e-4
    fd = np.array([(logp(point(x + h * e)) - logp(point(x - h * e))) / (2 * h) for e in np.eye(x.size)])
    # the sampler's tolerance (EP tol 1e-2) gave about 5e-3 here
    assert np.max(np.abs(grad - fd)) <= 1e-6 * np.max(np.abs(fd))


def test_only_the_package_sampler_gets_the_loose_tolerance():
    from pymc_gpc.ops.marginal import ApproxMarginalOp
    from pymc_gpc.ops.rewrites import sampling_tolerance

    def ops(fn):
        return [nd.op for nd in fn.maker.fgraph.toposort() if isinstance(nd.op, ApproxMarginalOp)]

    model, _ = _binary()
    plain = model.compile_fn(model.logp(), inputs=model.value_vars, point_fn=False, mode="FAST_COMPILE")
    with sampling_tolerance():
        sampler = model.compile_fn(model.logp(), inputs=model.value_vars, point_fn=False, mode="FAST_COMPILE")
    assert [op.sampling for op in ops(plain)] == [False]
    assert [op.sampling for op in ops(sampler)] == [True]


def test_hessian_from_the_gradient_matches_a_tight_solve():
    """A Laplace approximation of the hyperparameter posterior (as pymc-extras' fit_laplace
    builds it) from finite differences of ``compile_dlogp``: as at EP tol 1e-9."""
    split = load_pima()
    hessians = []
    for options in ({}, {"tol": 1e-9}):
        model, _ = pymc_gpc.ard_classifier(split.X_train, split.y_train, **options)
        dlogp = model.compile_dlogp()
        _, x0, point = _raveled(model)
        h = 1e-4
        H = np.array([(dlogp(point(x0.data + h * e)) - dlogp(point(x0.data - h * e))) / (2 * h)
                      for e in np.eye(x0.data.size)])
        hessians.append(0.5 * (H + H.T))
    default, tight = hessians
    assert np.max(np.abs(default - tight)) <= 1e-4 * np.max(np.abs(tight))
    sd_default = np.sqrt(np.diag(np.linalg.inv(-default)))
    sd_tight = np.sqrt(np.diag(np.linalg.inv(-tight)))
    np.testing.assert_allclose(sd_default, sd_tight, rtol=1e-3)


# -- 3, 4. ArviZ's layout and PyMC's log-likelihood routes -----------------------------------


@pytest.fixture(scope="module", params=list(MODELS))
def sampled(request):
    model, gp = MODELS[request.param]()
    idata = pymc_gpc.sample(model=model, **SAMPLE)
    return request.param, model, gp, idata


def test_arviz_defaults_see_the_hyperparameters_only(sampled):
    kind, model, _, idata = sampled
    hyper = sorted(rv.name for rv in model.free_RVs)
    assert sorted(idata["posterior"].data_vars) == hyper
    summary = az.summary(idata)
    assert sorted(summary.index) == hyper
    assert idata["log_likelihood"]["y"].shape == (2, 20, 24)
    for stat in ("y_n_iter", "y_status"):
        assert idata["sample_stats"][stat].shape == (2, 20)
    az.plot_trace(idata)
    az.plot_forest(idata)
    az.plot_rank(idata)
    matplotlib.pyplot.close("all")
    loo = az.loo(idata)
    assert np.isfinite(float(loo.elpd))
    comparison = az.compare({"a": idata, "b": idata})
    assert len(comparison) == 2


def test_compute_log_likelihood_gives_the_loo_terms(sampled):
    kind, model, _, idata = sampled
    bare = xr.DataTree.from_dict({"posterior": idata["posterior"].to_dataset()})
    with model:
        pm.compute_log_likelihood(bare, progressbar=False)
    terms = bare["log_likelihood"]["y"]
    assert terms.shape == (2, 20, 24)
    # at the engine's accuracy here, at the sampler's (EP tol 1e-2: up to 2.5e-2 seen) in pymc_gpc.sample's draws
    np.testing.assert_allclose(terms.values, idata["log_likelihood"]["y"].values, atol=5e-2)
    assert np.isfinite(float(az.loo(bare).elpd))


def test_plain_pm_sample_log_likelihood_route():
    model, _ = _binary()
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # PyMC's deprecation of idata_kwargs log_likelihood
        warnings.simplefilter("ignore", DeprecationWarning)
        idata = pm.sample(draws=30, tune=10, chains=1, random_seed=1, progressbar=False,
                          compute_convergence_checks=False, idata_kwargs={"log_likelihood": True})
    assert idata["log_likelihood"]["y"].shape == (1, 30, 24)
    assert np.isfinite(float(az.loo(idata).elpd))
    pymc_gpc.add_log_likelihood(idata, model)  # the posterior tidied after plain pm.sample
    assert sorted(az.summary(idata).index) == ["log_amp", "log_ls"]


def test_fit_result_inference_data_layout():
    model, _ = _binary()
    result = pymc_gpc.fit(model, method="map", progressbar=False)
    tree = result.to_inference_data()
    assert sorted(tree["posterior"].data_vars) == ["log_amp", "log_ls"]
    assert tree["log_likelihood"]["y"].shape == (1, 1, 24)


# -- 5. pm.Data ------------------------------------------------------------------------------


def test_pm_data_round_trip_predicts_as_predict():
    X, y = _data()
    rng = np.random.default_rng(5)
    X_test, X_other = rng.normal(size=(4, 2)), rng.normal(size=(6, 2))
    with pm.Model() as model:
        X_data = pm.Data("X", X)
        y_data = pm.Data("labels", y)
        log_ls = pm.Normal("log_ls", 0.0, 1.0)
        gp = pymc_gpc.MarginalEP(cov_func=pm.gp.cov.ExpQuad(2, ls=pt.exp(log_ls)), likelihood=Probit())
        gp.marginal_likelihood("y", X=X_data, y=y_data)
    np.testing.assert_array_equal(gp.classes, [0, 1])
    result = pymc_gpc.fit(model, method="map", progressbar=False)
    with model:
        X_new = pm.Data("X_new", X_test)
        gp.conditional("f", X_new)
    S = 400
    idata = xr.DataTree.from_dict({"posterior": xr.Dataset(
        {"log_ls": (("chain", "draw"), np.full((1, S), result.point["log_ls"]))})})
    with model:
        pm.set_data({"X_new": X_other})
        pp = pymc_gpc.sample_posterior_predictive(idata, var_names=["f"], random_seed=2, progressbar=False)
    draws = pp["posterior_predictive"]["f"].values.reshape(S, 6)
    _, mean, var = gp.predict(X_other, point=result.point, return_latent=True)
    np.testing.assert_allclose(draws.mean(axis=0), mean, atol=5 * np.sqrt(var.max() / S))
    np.testing.assert_allclose(draws.var(axis=0), var, rtol=0.3)
    # the validation still runs on the container's values, before any solve
    with pm.Model():
        bad = pm.Data("X", np.vstack([X[:-1], [np.inf, 0.0]]))
        gp2 = pymc_gpc.MarginalEP(cov_func=pm.gp.cov.ExpQuad(2, ls=1.0), likelihood=Probit())
        with pytest.raises(ValueError, match="X contains NaN"):
            gp2.marginal_likelihood("y", X=bad, y=y)


# -- 6. the smaller conventions ----------------------------------------------------------------


def test_bare_categorical_labels():
    X, _ = _data(n=9, d=1)
    labels = pd.Categorical(list("abc") * 3, categories=["c", "b", "a"])
    _, gp = _multiclass(X, labels)
    assert list(gp.classes) == ["c", "b", "a"]


def test_binary_classes_and_which_probability_predict_gives():
    X = np.linspace(-2, 2, 20)[:, None]
    labels = np.where(X[:, 0] > 0, "yes", "no")
    with pm.Model() as model:
        gp = pymc_gpc.MarginalEP(cov_func=4.0 * pm.gp.cov.ExpQuad(1, ls=1.0), likelihood=Probit())
        gp.marginal_likelihood("y", X=X, y=labels)
    assert list(gp.classes) == ["no", "yes"]
    p = gp.predict(np.array([[-1.5], [1.5]]), point=model.initial_point())
    assert p[0] < 0.5 < p[1]  # the probability of gp.classes[1], "yes"
    assert "gp.classes[1]" in type(gp).predict.__doc__


def test_to_netcdf_works(tmp_path):
    model, _ = _binary()
    tree = pymc_gpc.fit(model, method="map", progressbar=False).to_inference_data()
    tree.to_netcdf(tmp_path / "fit.nc")
    assert (tmp_path / "fit.nc").stat().st_size > 0


def test_multiclass_latents_feed_categorical_and_no_potential_warning():
    model, gp = _multiclass()
    X_new = np.random.default_rng(2).normal(size=(5, 2))
    with model:
        f = gp.conditional("f", X_new)
        pm.Categorical("y_new", p=pm.math.softmax(f, axis=-1))
    assert tuple(f.shape.eval()) == (5, 3)
    idata = xr.DataTree.from_dict({"posterior": xr.Dataset({"log_ls": (("chain", "draw"), np.zeros((1, 3)))})})
    with model, warnings.catch_warnings():
        warnings.filterwarnings("error", message="The effect of Potentials")
        pp = pymc_gpc.sample_posterior_predictive(idata, var_names=["f", "y_new"], random_seed=1,
                                                  progressbar=False)
    assert pp["posterior_predictive"]["y_new"].shape == (1, 3, 5)


@pytest.mark.parametrize("kind", ["multiclass", "fitc"])
def test_pm_data_inputs_predict_as_arrays(kind):
    X, y = _data()
    X_new = np.random.default_rng(7).normal(size=(3, 2))
    probabilities = []
    for as_data in (False, True):
        with pm.Model() as model:
            inputs = pm.Data("X", X) if as_data else X
            log_ls = pm.Normal("log_ls", 0.0, 1.0)
            cov = pm.gp.cov.ExpQuad(2, ls=pt.exp(log_ls))
            if kind == "multiclass":
                gp = pymc_gpc.MarginalLaplace(cov_func=cov, likelihood=Softmax())
                gp.marginal_likelihood("y", X=inputs, y=np.array(list("abc") * 8))
            else:
                gp = pymc_gpc.MarginalEP(cov_func=cov, likelihood=Probit(), approx="FITC")
                gp.marginal_likelihood("y", X=inputs, y=y, Xu=X[:6])
        probabilities.append(gp.predict(X_new, point=model.initial_point()))
    np.testing.assert_allclose(probabilities[1], probabilities[0], rtol=1e-10)


# -- 7. review fixes -------------------------------------------------------------------------


def test_sample_posterior_predictive_takes_the_model_positionally():
    model, gp = _binary()
    with model:
        gp.conditional("f", np.zeros((2, 2)))
    idata = xr.DataTree.from_dict({"posterior": xr.Dataset(
        {"log_ls": (("chain", "draw"), np.zeros((1, 3))), "log_amp": (("chain", "draw"), np.zeros((1, 3)))})})
    pp = pymc_gpc.sample_posterior_predictive(idata, model, var_names=["f"], random_seed=1, progressbar=False)
    assert pp["posterior_predictive"]["f"].shape == (1, 3, 2)


def _data_model(X, y):
    with pm.Model() as model:
        X_data = pm.Data("X", X)
        log_ls = pm.Normal("log_ls", 0.0, 1.0)
        gp = pymc_gpc.MarginalEP(cov_func=pm.gp.cov.ExpQuad(2, ls=pt.exp(log_ls)), likelihood=Probit())
        gp.marginal_likelihood("y", X=X_data, y=y)
        gp.conditional("f", np.zeros((3, 2)))
    return model, gp


@pytest.mark.parametrize("rows", [24, 30])
def test_changing_the_training_container_is_refused(rows):
    X, y = _data()
    model, gp = _data_model(X, y)
    idata = xr.DataTree.from_dict({"posterior": xr.Dataset({"log_ls": (("chain", "draw"), np.zeros((1, 3)))})})
    X_other = np.random.default_rng(9).normal(size=(rows, 2))
    with model:
        pm.set_data({"X": X_other})
        with pytest.raises(ValueError, match=r"training inputs.*'X'.*separate pm.Data container"):
            pymc_gpc.sample_posterior_predictive(idata, var_names=["f"], random_seed=1, progressbar=False)
        with pytest.raises(ValueError, match=r"training inputs.*'X'.*separate pm.Data container"):
            gp.conditional("f2", np.zeros((3, 2)))
    with pytest.raises(ValueError, match=r"training inputs.*'X'.*separate pm.Data container"):
        gp.predict(np.zeros((3, 2)), point=model.initial_point())
    with model:
        pm.set_data({"X": X})  # back to the training inputs: predictions work again
        pp = pymc_gpc.sample_posterior_predictive(idata, var_names=["f"], random_seed=1, progressbar=False)
    assert np.all(np.isfinite(pp["posterior_predictive"]["f"].values))


def test_latent_predictive_op_refuses_mismatched_sizes():
    from pymc_gpc.ops import LatentPredictiveOp

    op = LatentPredictiveOp("ep", Probit)
    K = np.eye(5)
    mean, var = op(K, np.zeros(0), np.ones(4), np.zeros((5, 2)), np.ones(2))
    with pytest.raises(ValueError, match="training"):
        mean.eval()


def test_labels_container_keeps_its_coding():
    X, y = _data()
    with pm.Model() as model:
        labels = pm.Data("labels", y)
        log_ls = pm.Normal("log_ls", 0.0, 1.0)
        gp = pymc_gpc.MarginalEP(cov_func=pm.gp.cov.ExpQuad(2, ls=pt.exp(log_ls)), likelihood=Probit())
        gp.marginal_likelihood("y", X=X, y=labels)
    logp = model.compile_logp()
    point = model.initial_point()
    assert np.isfinite(logp(point))
    with model:
        pm.set_data({"labels": 1 - y})  # the same coding: accepted
    assert np.isfinite(logp(point))
    gp.predict(np.zeros((2, 2)), point=point)
    with model:
        pm.set_data({"labels": y + 1})  # {1, 2}: every label would be coded +1
    with pytest.raises(ValueError, match=r"'labels' holds values other than the two classes 0 and 1"):
        logp(point)
    with pytest.raises(ValueError, match=r"'labels' holds values other than the two classes 0 and 1"):
        gp.predict(np.zeros((2, 2)), point=point)


def test_add_log_likelihood_keeps_the_other_observed_variables():
    X, y = _data()
    with pm.Model() as model:
        log_ls = pm.Normal("log_ls", 0.0, 1.0)
        gp = pymc_gpc.MarginalEP(cov_func=pm.gp.cov.ExpQuad(2, ls=pt.exp(log_ls)), likelihood=Probit())
        gp.marginal_likelihood("y", X=X, y=y)
        pm.Normal("obs", mu=log_ls, sigma=1.0, observed=np.array([0.1, -0.3, 0.5]))
    idata = pymc_gpc.sample(model=model, draws=10, tune=10, chains=1, random_seed=1, progressbar=False,
                            compute_convergence_checks=False)
    assert sorted(idata["log_likelihood"].data_vars) == ["obs", "y"]
    assert idata["log_likelihood"]["obs"].shape == (1, 10, 3)
    post = idata["posterior"]["log_ls"].values
    expected = -0.5 * (np.array([0.1, -0.3, 0.5]) - post[..., None]) ** 2 - 0.5 * np.log(2 * np.pi)
    np.testing.assert_allclose(idata["log_likelihood"]["obs"].values, expected, rtol=1e-6)


def test_fitc_shape_error_surfaces_as_itself():
    class WrongDiag(pm.gp.cov.ExpQuad):  # a user's covariance whose diagonal has the wrong length
        def diag(self, X):
            return pt.ones((X.shape[0] - 1,))

    X, y = _data()
    with pm.Model() as model:
        log_ls = pm.Normal("log_ls", 0.0, 1.0)
        gp = pymc_gpc.MarginalEP(cov_func=WrongDiag(2, ls=pt.exp(log_ls)), likelihood=Probit(), approx="FITC")
        gp.marginal_likelihood("y", X=X, y=y, Xu=X[:5])
    with pytest.raises(ValueError, match="FITC shapes do not match") as info:
        pymc_gpc.fit(model, method="type2", progressbar=False)
    assert not isinstance(info.value, pymc_gpc.FitStartError)


def test_package_sampler_solves_at_the_sampling_tolerance(monkeypatch):
    from pymc_gpc.approximations.registry import APPROXIMATIONS
    from pymc_gpc.ops.marginal import ApproxMarginalOp

    original, tols, cold_tols = ApproxMarginalOp.solver_options, [], []

    def recording(self, cold=False):
        options = original(self, cold=cold)
        (cold_tols if cold else tols).append(options["tol"])
        return options

    monkeypatch.setattr(ApproxMarginalOp, "solver_options", recording)
    model, _ = _binary()
    pymc_gpc.sample(model=model, draws=5, tune=5, chains=1, cores=1, nuts_sampler="pymc", random_seed=1,
                    progressbar=False, compute_convergence_checks=False)
    # the default Laplace start (estimation.sampling.laplace_start) runs MAP-II and the Hessian
    # first, at the engine's tolerance; every solve of the sampler's own graphs follows it
    sampling_tol = APPROXIMATIONS["ep"].sampling_defaults["tol"]
    assert sampling_tol == 1e-2 and sampling_tol in tols
    first = tols.index(sampling_tol)
    assert set(tols[first:]) == {sampling_tol}
    assert set(tols[:first]) <= {APPROXIMATIONS["ep"].engine_defaults["tol"]}
    # a solve from no warm start (a chain's first) runs to the engine's tolerance
    assert set(cold_tols) == {APPROXIMATIONS["ep"].engine_defaults["tol"]}
    tols.clear()
    cold_tols.clear()
    model.compile_dlogp()(model.initial_point())
    assert tols + cold_tols and set(tols + cold_tols) == {APPROXIMATIONS["ep"].engine_defaults["tol"]}
