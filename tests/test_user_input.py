"""What a user meets first: the classifiers' signatures, the names they add to a model, and
clear ValueErrors (not -inf, NaN or a misleading message) for inputs and containers that
cannot give a number: overflowing inputs, label or input containers changed by
``pm.set_data``, and predictions at cutpoints that are not increasing (issues 58 and 64)."""

import inspect

import numpy as np
import pymc as pm
import pytensor.tensor as pt
import pytest

import pymc_gpc
from pymc_gpc import likelihoods as L

N = 12
RNG = np.random.default_rng(0)
X = RNG.normal(size=(N, 2))
Y = (X[:, 0] + 0.3 * RNG.normal(size=N) > 0).astype(float)
POINT = {"log_ls": 0.0}


def build(X_in=None, y_in=None, coords=None, **gp_options):
    """A small binary EP model; ``X_in`` / ``y_in`` (default the arrays) may be containers made
    inside the model by a callable."""
    with pm.Model(coords=coords) as model:
        Xd = X_in() if callable(X_in) else (X if X_in is None else X_in)
        yd = y_in() if callable(y_in) else Y
        log_ls = pm.Normal("log_ls", 0, 1)
        cov = pm.gp.cov.ExpQuad(2, ls=pt.exp(log_ls))
        gp = pymc_gpc.MarginalEP(cov_func=cov, likelihood=L.Probit(), tol=1e-10, **gp_options)
        gp.marginal_likelihood("y", X=Xd, y=yd, **({"Xu": X[:4]} if gp_options.get("approx") else {}))
    return model, gp


@pytest.mark.parametrize("cls, extra", [(pymc_gpc.MarginalEP, "approx"), (pymc_gpc.MarginalLaplace, "approx"),
                                        (pymc_gpc.MarginalMeanField, "variant"), (pymc_gpc.MarginalADF, "sweeps")])
def test_the_classifiers_show_their_parameters(cls, extra):
    """inspect.signature (IDEs, the API pages) shows the keyword-only parameters of ``__init__``
    (no ``__new__`` or ``__signature__`` in between)."""
    params = inspect.signature(cls).parameters
    assert {"cov_func", "likelihood", "jitter"} <= set(params)
    assert all(p.kind in (p.KEYWORD_ONLY, p.VAR_KEYWORD) for p in params.values())
    assert extra is None or extra in params


def test_a_label_container_named_y_obs_and_its_dims():
    """pm.Data("y_obs", y) beside an evidence named "y" builds (the package added a "y_obs"
    dimension); the pointwise terms take the label container's dims, and nothing else is added
    to the model's coordinates."""
    model, _ = build(y_in=lambda: pm.Data("y_obs", Y))
    assert "y_obs" in model.named_vars and "y_loo" in model.named_vars
    assert dict(model.coords) == {}
    model, _ = build(y_in=lambda: pm.Data("labels", Y, dims="obs_id"), coords={"obs_id": np.arange(N)})
    assert model.named_vars_to_dims["y_loo"] == ("obs_id",)
    assert set(model.coords) == {"obs_id"}


@pytest.mark.parametrize("approx", [None, "FITC"])
def test_inputs_whose_kernel_overflows(approx):
    """1e300 in X: the squared distances overflow (dense: logp -inf, NaN gradient, NaN
    predictions; FITC: NonFiniteKernelError); a ValueError names the row before any work."""
    big = X.copy()
    big[3, 1] = 1e300
    with pytest.raises(ValueError, match=r"too large for a covariance function \(1e\+300 in row 3, column 1"):
        build(X_in=big, **({"approx": approx} if approx else {}))
    model, gp = build(**({"approx": approx} if approx else {}))
    with pytest.raises(ValueError, match="Xnew holds values too large"):
        gp.predict(big, point=POINT)
    ok = X.copy()
    ok[3, 1] = 1e6  # large but harmless: accepted, finite
    model, gp = build(X_in=ok, **({"approx": approx} if approx else {}))
    assert np.isfinite(model.compile_logp()(POINT))


def test_a_label_container_shortened_by_set_data():
    """pm.set_data shortening the labels: logp and predict raise a ValueError naming the
    container (were -inf and NaN)."""
    model, gp = build(y_in=lambda: pm.Data("y_obs", Y))
    with model:
        pm.set_data({"y_obs": Y[:-2]})
    with pytest.raises(ValueError, match="'y_obs' no longer holds one label per row"):
        model.compile_logp()(POINT)
    with pytest.raises(ValueError, match="'y_obs' no longer holds one label per row"):
        gp.predict(X[:3], point=POINT)


def test_an_input_container_given_another_column():
    """pm.set_data giving the training X an extra column: logp raises (it kept the old value,
    the kernel reading the first columns) and predict names the shapes (it said "'X' has 12
    rows, not the 12")."""
    model, gp = build(X_in=lambda: pm.Data("X", X))
    with model:
        pm.set_data({"X": np.c_[X, X[:, 0]]})
    with pytest.raises(ValueError, match="'X' no longer has the 2 columns"):
        model.compile_logp()(POINT)
    with pytest.raises(ValueError, match=r"has shape \(12, 3\), not the shape \(12, 2\)"):
        gp.predict(X[:3], point=POINT)


def test_an_input_container_set_to_overflowing_values():
    model, _ = build(X_in=lambda: pm.Data("X", X))
    big = X.copy()
    big[0, 0] = -1e300
    with model:
        pm.set_data({"X": big})
    with pytest.raises(ValueError, match="'X' holds NaN, inf or values above 1e\\+140"):
        model.compile_logp()(POINT)


def test_predict_at_cutpoints_that_are_not_increasing():
    """Ordinal predict at non-increasing cutpoints: a ValueError (was all-NaN, silently); at
    increasing ones rows sum to one."""
    y = np.digitize(X[:, 0], [-0.5, 0.5])
    with pm.Model():
        cut = pm.Normal("cut", 0, 3, shape=2, transform=pm.distributions.transforms.ordered, initval=[-1.0, 1.0])
        gp = pymc_gpc.MarginalEP(cov_func=pm.gp.cov.ExpQuad(2, ls=1.0), likelihood=L.OrderedProbit(cut))
        gp.marginal_likelihood("y", X=X, y=y)
    p = gp.predict(X[:2], point={"cut": np.array([-1.0, 1.0])})
    np.testing.assert_allclose(p.sum(axis=1), 1.0, atol=1e-9)
    with pytest.raises(ValueError, match=r"at the point given: OrderedProbit cutpoints must be strictly increasing"):
        gp.predict(X[:2], point={"cut": np.array([1.0, -1.0])})
