"""The scikit-learn estimators' ``prior``: a pair for every log-hyperparameter or a dict by
group (``ard_classifier``'s), checked against scipy's Normal densities; a callable kernel's
priors are its own, so any other ``prior`` beside one is a ValueError before the fit."""

import numpy as np
import pytest
from scipy import stats
from sklearn.base import clone

from pymc_gpc.sklearn import GaussianProcessClassifier, GaussianProcessOrdinalClassifier


def _data(n=40, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    return X, (X[:, 0] + 0.3 * rng.normal(size=n) > 0).astype(int)


def _model(clf, X, y):
    """The model ``fit`` would build and fit (``_build`` after ``fit``'s parameter check):
    the priors without the cost of a fit."""
    clf._check_params()
    return clf._build(X, clf._encode_labels(y, None))[0]


def _prior_logp(model, name, value):
    rv = model[name]
    return float(model.compile_logp(vars=[rv], sum=True)({**model.initial_point(), rv.name: value}))


def test_a_dict_prior_sets_its_group_and_leaves_the_others_at_the_default():
    X, y = _data()
    clf = GaussianProcessClassifier(prior={"log_v0": (0.5, 0.25)})
    model = _model(clf, X, y)
    value = np.float64(0.9)
    assert _prior_logp(model, "log_v0", value) == pytest.approx(stats.norm(0.5, 0.25).logpdf(value), rel=1e-10)
    w = np.array([0.3, -1.2])
    assert _prior_logp(model, "log_w", w) == pytest.approx(stats.norm(-3.0, 3.0).logpdf(w).sum(), rel=1e-10)
    assert clone(clf).get_params()["prior"] == {"log_v0": (0.5, 0.25)}


def test_a_pair_sets_every_group():
    X, y = _data()
    model = _model(GaussianProcessClassifier(prior=(-1.0, 2.0)), X, y)
    for name, value in (("log_v0", np.float64(0.2)), ("log_v1", np.float64(-0.7)), ("log_w", np.array([1.0, 0.0]))):
        assert _prior_logp(model, name, value) == pytest.approx(stats.norm(-1.0, 2.0).logpdf(value).sum(), rel=1e-10)


def test_an_unknown_group_is_a_value_error():
    X, y = _data()
    with pytest.raises(ValueError, match="log_vx"):
        GaussianProcessClassifier(prior={"log_vx": (0.0, 1.0)}).fit(X, y)
    with pytest.raises(ValueError, match="sd"):
        GaussianProcessOrdinalClassifier(prior=(0.0, -1.0)).fit(X, y)


def test_a_callable_kernel_refuses_a_prior_it_would_ignore():
    import pymc as pm

    built = []

    def kernel(d):
        built.append(d)
        ls = pm.LogNormal("ls", 0.0, 1.0, shape=d)
        return pm.gp.cov.ExpQuad(d, ls=ls)

    X, y = _data()
    for prior in ({"log_v0": (0.0, 1.0)}, (0.0, 1.0)):
        with pytest.raises(ValueError, match="callable kernel"):
            GaussianProcessClassifier(kernel=kernel, prior=prior).fit(X, y)
    assert built == []  # refused before any model was built
    model = _model(GaussianProcessClassifier(kernel=kernel, prior=[-3, 3]), X, y)  # the default, as a list
    assert built == [2] and "ls" in model.named_vars
