"""The scikit-learn estimators (``pymc_gpc.sklearn``): scikit-learn's own estimator checks,
pipelines with grid search and cross-validation on a real data set, equality with the
package's model built by hand at the same hyperparameters, label types and bad input."""

import numpy as np
import pandas as pd
import pymc as pm
import pytensor.tensor as pt
import pytest

pytest.importorskip("sklearn")

from sklearn.base import clone  # noqa: E402
from sklearn.model_selection import GridSearchCV, StratifiedKFold, cross_val_score  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import StandardScaler  # noqa: E402
from sklearn.utils.estimator_checks import parametrize_with_checks  # noqa: E402

import pymc_gpc  # noqa: E402
from pymc_gpc.datasets import load  # noqa: E402
from pymc_gpc.sklearn import GaussianProcessClassifier, GaussianProcessOrdinalClassifier  # noqa: E402


# at most 5 optimiser iterations, as scikit-learn checks its own iterative estimators (max_iter=5
# in sklearn.utils._test_common): the checks are of the estimator's contract, not of the fit
@parametrize_with_checks([GaussianProcessClassifier(method="map", maxiter=5),
                          GaussianProcessOrdinalClassifier(method="map", maxiter=5)])
def test_sklearn_estimator_checks(estimator, check):
    check(estimator)


def _data(n=30, d=2, classes=2, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    edges = np.quantile(X[:, 0] + 0.5 * X[:, 1], np.linspace(0, 1, classes + 1)[1:-1])
    return X, np.digitize(X[:, 0] + 0.5 * X[:, 1], edges)


def test_pipeline_grid_search_and_cross_validation_on_crabs():
    crabs = load("crabs", standardise=False)  # 80 crabs, sex from 5 measurements in mm
    X, y = crabs.X_train, np.where(crabs.y_train > 0, "male", "female")
    pipe = make_pipeline(StandardScaler(), GaussianProcessClassifier())
    cv = StratifiedKFold(3, shuffle=True, random_state=0)
    search = GridSearchCV(pipe, {"gaussianprocessclassifier__approximation": ["ep", "laplace"]},
                          scoring="neg_log_loss", cv=cv).fit(X, y)
    assert search.best_params_["gaussianprocessclassifier__approximation"] in ("ep", "laplace")
    scores = cross_val_score(pipe, X, y, scoring="neg_log_loss", cv=cv)
    # the class prior alone scores -log 2 = -0.693; the GP separates the sexes well
    assert np.all(np.isfinite(scores)) and scores.mean() > -0.35
    assert np.all(search.cv_results_["mean_test_score"] > -0.35)
    p = search.predict_proba(crabs.X_test)
    assert search.classes_.tolist() == ["female", "male"]
    assert np.mean(search.predict(crabs.X_test) == np.where(crabs.y_test > 0, "male", "female")) > 0.85
    np.testing.assert_allclose(p.sum(axis=1), 1.0)


def _ard(d, log_w, log_v0, log_v1):
    """v0 ExpQuad(ls = w^-1/2) + v1: ard_classifier's kernel written with pm.gp.cov."""
    return pt.exp(log_v0) * pm.gp.cov.ExpQuad(d, ls=pt.exp(-0.5 * log_w)) + pm.gp.cov.Constant(pt.exp(log_v1))


def _by_hand_binary(X, codes, approximation, likelihood):
    with pm.Model():
        log_w, log_v0, log_v1 = (pm.Normal(v, -3, 3, shape=s) for v, s in (("log_w", X.shape[1]), ("log_v0", ()),
                                                                           ("log_v1", ())))
        gp = {"ep": pymc_gpc.MarginalEP, "laplace": pymc_gpc.MarginalLaplace}[approximation](
            cov_func=_ard(X.shape[1], log_w, log_v0, log_v1), likelihood=likelihood)
        gp.marginal_likelihood("y", X=X, y=codes)
    return gp


def _by_hand_multiclass(X, codes, approximation):
    c = int(codes.max()) + 1
    with pm.Model():
        log_w = pm.Normal("log_w", -3, 3, shape=(c, X.shape[1]))
        log_v0, log_v1 = pm.Normal("log_v0", -3, 3, shape=c), pm.Normal("log_v1", -3, 3, shape=c)
        covs = [_ard(X.shape[1], log_w[k], log_v0[k], log_v1[k]) for k in range(c)]
        lik = pymc_gpc.likelihoods.Softmax() if approximation == "laplace" else pymc_gpc.likelihoods.MultinomialProbit()
        gp = {"ep": pymc_gpc.MarginalEP, "laplace": pymc_gpc.MarginalLaplace}[approximation](cov_func=covs,
                                                                                              likelihood=lik)
        gp.marginal_likelihood("y", X=X, y=codes)
    return gp


def _by_hand_ordinal(X, codes, approximation):
    with pm.Model():
        log_w, log_v0, log_v1 = (pm.Normal(v, -3, 3, shape=s) for v, s in (("log_w", X.shape[1]), ("log_v0", ()),
                                                                           ("log_v1", ())))
        cut = pm.Normal("cutpoints", 0, 3, shape=2, transform=pm.distributions.transforms.ordered,
                        initval=[-1.0, 1.0])
        gp = {"ep": pymc_gpc.MarginalEP, "laplace": pymc_gpc.MarginalLaplace}[approximation](
            cov_func=_ard(X.shape[1], log_w, log_v0, log_v1), likelihood=pymc_gpc.OrderedProbit(cut))
        gp.marginal_likelihood("y", X=X, y=codes)
    return gp


@pytest.mark.parametrize("case", ["binary-ep", "binary-laplace-logistic", "multiclass-laplace", "ordinal-ep"])
def test_predict_proba_equals_the_model_built_by_hand(case):
    kind, approximation, *lik = case.split("-")
    X, codes = _data(n=30, classes=2 if kind == "binary" else 3, seed=1)
    Xnew = np.random.default_rng(2).normal(size=(7, 2))
    if kind == "ordinal":
        est = GaussianProcessOrdinalClassifier(approximation=approximation).fit(X, codes)
        p = _by_hand_ordinal(X, codes, approximation).predict(Xnew, point=est.point_, progressbar=False)
    elif kind == "multiclass":
        est = GaussianProcessClassifier(approximation=approximation).fit(X, codes)
        p = _by_hand_multiclass(X, codes, approximation).predict(Xnew, point=est.point_, progressbar=False)
    else:
        est = GaussianProcessClassifier(approximation=approximation, likelihood=(lik or ["probit"])[0]).fit(X, codes)
        likelihood = pymc_gpc.likelihoods.Logistic() if lik else pymc_gpc.likelihoods.Probit()
        p1 = _by_hand_binary(X, codes, approximation, likelihood).predict(Xnew, point=est.point_, progressbar=False)
        p = np.column_stack([1 - p1, p1])
    assert est.fit_result_.converged
    np.testing.assert_allclose(est.predict_proba(Xnew), p, rtol=0, atol=1e-10)
    assert np.any((p > 0.05) & (p < 0.95))  # not a saturated prediction only


def test_callable_kernel_and_fitted_attributes():
    X, y = _data(n=24, classes=3, seed=3)

    def kernel(d):
        return pm.gp.cov.ExpQuad(d, ls=pm.LogNormal("ls", 0.0, 1.0))

    est = GaussianProcessClassifier(kernel=kernel, approximation="laplace").fit(X, y)
    assert sorted(v.name for v in est.model_.free_RVs) == ["class0::ls", "class1::ls", "class2::ls"]
    shared = GaussianProcessClassifier(kernel=kernel, approximation="laplace", per_class_kernels=False).fit(X, y)
    assert [v.name for v in shared.model_.free_RVs] == ["ls"]
    with pm.Model():
        covs = [pm.gp.cov.ExpQuad(2, ls=pm.LogNormal(f"class{k}::ls", 0.0, 1.0)) for k in range(3)]
        gp = pymc_gpc.MarginalLaplace(cov_func=covs, likelihood=pymc_gpc.likelihoods.Softmax())
        gp.marginal_likelihood("y", X=X, y=y)
    np.testing.assert_allclose(est.predict_proba(X), gp.predict(X, point=est.point_, progressbar=False),
                               rtol=0, atol=1e-10)
    assert est.gp_.predict(X[:3], point=est.fit_result_, progressbar=False).shape == (3, 3)
    assert est.fit_result_.method == "map" and est.idata_ is None and est.n_features_in_ == 2


@pytest.mark.parametrize("labels", [
    lambda c: c,
    lambda c: c.astype(bool),
    lambda c: np.where(c == 1, "yes", "no"),
    lambda c: np.where(c == 1, 7, -3),
    lambda c: pd.Series(pd.Categorical(np.where(c == 1, "yes", "no"))),
], ids=["int01", "bool", "str", "int", "categorical"])
def test_label_types_give_the_same_probabilities(labels):
    X, codes = _data(n=24, seed=4)
    reference = GaussianProcessClassifier().fit(X, codes).predict_proba(X)
    y = labels(codes)
    est = GaussianProcessClassifier().fit(X, y)
    np.testing.assert_array_equal(est.predict_proba(X), reference)
    assert est.classes_.tolist() == sorted(set(np.asarray(y).tolist()))
    assert set(est.predict(X).tolist()) <= set(est.classes_.tolist())


def test_ordinal_class_order():
    X, codes = _data(n=30, classes=3, seed=5)
    names = np.array(["low", "medium", "high"])
    reference = GaussianProcessOrdinalClassifier().fit(X, codes).predict_proba(X)
    cat = pd.Series(pd.Categorical(names[codes], categories=names, ordered=True))
    est = GaussianProcessOrdinalClassifier().fit(X, cat)
    assert est.classes_.tolist() == names.tolist()
    np.testing.assert_array_equal(est.predict_proba(X), reference)
    est = GaussianProcessOrdinalClassifier(classes=names.tolist()).fit(X, names[codes])
    np.testing.assert_array_equal(est.predict_proba(X), reference)
    # a level that does not occur keeps its column (its probability mass lies between its neighbours)
    four = GaussianProcessOrdinalClassifier(classes=["low", "medium", "high", "top"]).fit(X, names[codes])
    assert four.predict_proba(X).shape == (30, 4)
    with pytest.raises(ValueError, match="not among classes"):
        GaussianProcessOrdinalClassifier(classes=["low", "high"]).fit(X, names[codes])


@pytest.mark.parametrize("params, match", [
    ({"method": "vi"}, "method must be one of"),
    ({"approximation": "meanfield"}, "approximation must be one of"),
    ({"kernel": "rbf"}, "kernel must be one of"),
    ({"likelihood": "step"}, "likelihood must be one of"),
    ({"inducing": 0}, "inducing must be None or a positive integer"),
    ({"draws": 0}, "draws must be a positive integer"),
    ({"max_draws": 2.5}, "max_draws must be None or a positive integer"),
])
def test_bad_parameters_raise_before_fitting(params, match):
    X, y = _data(n=10)
    with pytest.raises(ValueError, match=match):
        GaussianProcessClassifier(**params).fit(X, y)


def test_elbo_method_fits_the_bound_of_several_classes():
    """method="elbo": the estimator's point is pymc_gpc.fit(method="elbo")'s on the model it builds (the
    bound recomputed there from the model's kernel arrays), not MAP-II's; predictions from that point,
    also after pickling. Configurations the bound does not serve raise ValueError before fitting."""
    import pickle

    from pymc_gpc.estimation.objective import objective_for, other_terms

    X, y = _data(n=60, classes=3, seed=4)
    est = GaussianProcessClassifier(approximation="laplace", inducing=8, method="elbo").fit(X, y)
    assert est.fit_result_.method == "elbo" and est.fit_result_.converged
    objective = objective_for(est.model_, other_terms(est.model_, include_priors=True),
                              est.model_.continuous_value_vars, bound=True)
    _, bound, _ = objective.evidence_and_grad({**est.model_.initial_point(), **est.point_})
    assert bound == pytest.approx(est.fit_result_.log_evidence, rel=1e-8)
    map_ii = GaussianProcessClassifier(approximation="laplace", inducing=8, method="map").fit(X, y)
    assert np.max(np.abs(est.point_["log_v0"] - map_ii.point_["log_v0"])) > 1e-3
    p = est.predict_proba(X)
    np.testing.assert_allclose(p, est.gp_.predict(X, point=est.point_, progressbar=False), rtol=0, atol=1e-10)
    np.testing.assert_allclose(pickle.loads(pickle.dumps(est)).predict_proba(X), p, rtol=0, atol=1e-10)
    for params, data, match in [({"approximation": "ep", "inducing": 8}, (X, y), "approximation='laplace'"),
                                ({"approximation": "laplace"}, (X, y), "inducing=m"),
                                ({"approximation": "laplace", "inducing": 8}, _data(n=20), "several classes")]:
        with pytest.raises(ValueError, match=match):
            GaussianProcessClassifier(method="elbo", **params).fit(*data)
    with pytest.raises(ValueError, match="method must be one of"):
        GaussianProcessOrdinalClassifier(approximation="laplace", inducing=8, method="elbo").fit(X, y)


def test_bad_data_raise():
    X, y = _data(n=12, classes=3)
    with pytest.raises(ValueError, match="link must be one of"):
        GaussianProcessOrdinalClassifier(link="cloglog").fit(X, y)
    with pytest.raises(ValueError, match="names a binary likelihood"):
        GaussianProcessClassifier(likelihood="logistic").fit(X, y)
    with pytest.raises(ValueError, match="serves two classes"):
        GaussianProcessClassifier(kernel="matern52").fit(X, y)
    with pytest.raises(ValueError, match="at least two classes"):
        GaussianProcessClassifier().fit(X, np.zeros(12))
    with pytest.raises(ValueError, match="Unknown label type"):
        GaussianProcessClassifier().fit(X, np.linspace(0, 1, 12))
    with pytest.raises(ValueError, match="NaN"):
        GaussianProcessClassifier().fit(np.where(X > 1, np.nan, X), y)
    est = GaussianProcessClassifier().fit(X, y)
    with pytest.raises(ValueError, match="features"):
        est.predict(np.zeros((3, 5)))


def test_nuts_tiny_run_is_reproducible():
    X, y = _data(n=16, seed=6)
    est = GaussianProcessClassifier(method="nuts", draws=20, tune=20, chains=1, max_draws=10, random_state=3)
    est.fit(X, y)
    again = clone(est).fit(X, y)
    np.testing.assert_array_equal(est.idata_.posterior["log_w"].values, again.idata_.posterior["log_w"].values)
    assert est.idata_.posterior["log_w"].shape == (1, 20, 2) and est.fit_result_ is None
    p = est.predict_proba(X)
    np.testing.assert_allclose(p, again.predict_proba(X), rtol=0, atol=1e-12)
    np.testing.assert_allclose(p.sum(axis=1), 1.0)
    assert est.__sklearn_tags__().non_deterministic


@pytest.mark.parametrize("method", ["ccd", "grid"])
def test_deterministic_integration_averages_with_the_design_weights(method):
    # one lengthscale and one amplitude (a callable kernel), so the grid (d <= 3) applies too
    X, y = _data(n=24, d=2, seed=2)
    kernel = lambda d: pm.gp.cov.ExpQuad(d, ls=pt.exp(pm.Normal("log_ls", 0, 1)))  # noqa: E731
    est = GaussianProcessClassifier(kernel=kernel, method=method, draws=50, chains=2, random_state=0).fit(X, y)
    group = est.idata_["integration"]
    w = np.asarray(group["weight"]).ravel()
    assert est.idata_.posterior["log_ls"].shape == (2, 50) and est.fit_result_ is None
    np.testing.assert_allclose(w.sum(), 1.0, atol=1e-12)
    # predict_proba is the weighted sum of the predictions at each design point (solved one
    # by one here at the engine's tolerance; the estimator chains warm solves at the
    # prediction tolerance: estimation.integration.predict, within 1e-4), not their plain mean
    ls = np.asarray(group["log_ls"]).ravel()
    by_point = np.stack([est.gp_.predict(X, point={"log_ls": v}, model=est.model_) for v in ls])
    p = est.predict_proba(X)
    np.testing.assert_allclose(p[:, 1], w @ by_point, rtol=0, atol=1e-4)
    assert np.max(np.abs(p[:, 1] - by_point.mean(axis=0))) > 1e-3
    np.testing.assert_allclose(p.sum(axis=1), 1.0)
    assert np.mean(est.predict(X) == y) > 0.8


def test_missing_scikit_learn_names_the_extra(monkeypatch):
    import importlib
    import sys

    for name in [m for m in sys.modules if m == "sklearn" or m.startswith("sklearn.")]:
        monkeypatch.setitem(sys.modules, name, None)  # importing it now fails
    monkeypatch.delitem(sys.modules, "pymc_gpc.sklearn")
    with pytest.raises(ImportError, match=r"pymc-gpc\[sklearn\]"):
        importlib.import_module("pymc_gpc.sklearn")
