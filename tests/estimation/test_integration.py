"""``pymc_gpc.sample(method="ccd" | "grid")`` on models: against brute-force quadrature of
the log posterior of one hyperparameter (PyMC's own compiled logp with the Jacobian, on a
fine grid), exact on a model whose log posterior is Gaussian, the returned InferenceData
with ArviZ and ``predict``, every likelihood family and prior structure, bad input."""

import warnings

import arviz as az
import matplotlib
import numpy as np
import pymc as pm
import pytensor.tensor as pt
import pytest

import pymc_gpc
from pymc_gpc import likelihoods as L
from pymc_gpc.estimation import integration

matplotlib.use("Agg")

rng = np.random.default_rng(3)
X = rng.normal(size=(24, 2))
Y = (X[:, 0] - 0.5 * X[:, 1] + 0.6 * rng.normal(size=24) > 0).astype(int)
# the one-hyperparameter problem: its log posterior in log ls is unimodal (on the data
# above it has two modes, which no CCD represents; the grid does)
_r = np.random.default_rng(1)
X1 = _r.normal(size=(40, 2))
Y1 = (np.sin(1.5 * X1[:, 0]) + 0.5 * X1[:, 1] + 0.5 * _r.normal(size=40) > 0).astype(int)
XNEW = np.array([[0.0, 0.0], [1.0, -1.0], [-1.5, 0.5], [2.0, 2.0]])


def _one_hyper_model():
    with pm.Model() as model:
        ls = pm.LogNormal("ls", 0.0, 0.7)
        gp = pymc_gpc.MarginalEP(cov_func=4.0 * pm.gp.cov.ExpQuad(2, ls=ls), likelihood=L.Probit())
        gp.marginal_likelihood("y", X=X1, y=Y1)
    return model, gp


@pytest.fixture(scope="module")
def one_hyper():
    """The model, its GP, and brute-force moments of u = log ls and ls and the averaged
    predictive at XNEW: the log posterior (PyMC's compiled logp, the Jacobian of the log
    transform included) on 301 points over u +- 7 sd, trapezoidal rule; predictions where
    the density is above 1e-12 of its peak."""
    model, gp = _one_hyper_model()
    logp = model.compile_logp(jacobian=True)
    u0, sd0 = 0.0, 1.0
    for size in (61, 301):  # a coarse pass finds where the mass is
        u = np.linspace(u0 - 7 * sd0, u0 + 7 * sd0, size)
        lp = np.array([logp({"ls_log__": v}) for v in u])
        w = np.exp(lp - lp.max())
        w /= np.trapezoid(w, u)
        u0 = np.trapezoid(w * u, u)
        sd0 = np.sqrt(np.trapezoid(w * (u - u0) ** 2, u))
    ls_mean = np.trapezoid(w * np.exp(u), u)
    ls_sd = np.sqrt(np.trapezoid(w * (np.exp(u) - ls_mean) ** 2, u))
    probs = np.array([gp.predict(XNEW, point={"ls": np.exp(v)}, progressbar=False) if wv > 1e-12 * w.max()
                      else np.zeros(len(XNEW)) for v, wv in zip(u, w)])
    p_mean = np.trapezoid(w[:, None] * probs, u, axis=0)
    return model, gp, dict(u=(u0, sd0), ls=(ls_mean, ls_sd), p=p_mean)


def _weighted(idata, name, fn=lambda v: v):
    group = idata["integration"]
    w = np.asarray(group["weight"])
    v = fn(np.asarray(group[name]))
    mean = w @ v
    return mean, np.sqrt(w @ (v - mean) ** 2)


def test_grid_matches_brute_force_quadrature(one_hyper):
    model, gp, ref = one_hyper
    idata = pymc_gpc.sample(model=model, method="grid", random_seed=1, progressbar=False)
    for name, fn in (("u", np.log), ("ls", lambda v: v)):
        mean, sd = _weighted(idata, "ls", fn)
        assert abs(mean - ref[name][0]) < 1e-3 and abs(sd - ref[name][1]) < 1e-3, (name, mean, sd, ref[name])
    np.testing.assert_allclose(integration.predict(gp, XNEW, idata), ref["p"], atol=1e-3)


def test_grid_from_a_map_estimate_matches_brute_force_quadrature(one_hyper):
    """``map_estimate``: the design from a MAP-II result at hand (its point and solver states)
    skips the search and still matches the quadrature as the grid above does; a MAP-II point
    (a dict) serves as well, and gives the same design to the solver's accuracy."""
    model, gp, ref = one_hyper
    result = pymc_gpc.fit(model, method="map", progressbar=False)
    idata = pymc_gpc.sample(model=model, method="grid", map_estimate=result, random_seed=1, progressbar=False)
    for name, fn in (("u", np.log), ("ls", lambda v: v)):
        mean, sd = _weighted(idata, "ls", fn)
        assert abs(mean - ref[name][0]) < 1e-3 and abs(sd - ref[name][1]) < 1e-3, (name, mean, sd, ref[name])
    np.testing.assert_allclose(integration.predict(gp, XNEW, idata), ref["p"], atol=1e-3)
    from_point = pymc_gpc.sample(model=model, method="grid", map_estimate=dict(result.point), random_seed=1,
                                 progressbar=False)
    np.testing.assert_allclose(np.asarray(from_point["integration"]["ls"]), np.asarray(idata["integration"]["ls"]),
                               rtol=1e-6)
    np.testing.assert_allclose(np.asarray(from_point["integration"]["weight"]),
                               np.asarray(idata["integration"]["weight"]), atol=1e-6)


def test_ccd_close_to_brute_force_quadrature(one_hyper):
    """With one hyperparameter the CCD has three points (the mode and the two scaled axial
    points), which cannot place a skewed posterior's mass: measured, the mean of log ls is
    off by 0.015 posterior sd and its sd by 0.04 sd, the averaged predictive by 3.6e-3
    (the grid: 1e-5 and 2.5e-6). Tolerances: 0.1 sd and 5e-3."""
    model, gp, ref = one_hyper
    idata = pymc_gpc.sample(model=model, method="ccd", random_seed=1, progressbar=False)
    assert idata["integration"].sizes["point"] == 3
    mean, sd = _weighted(idata, "ls", np.log)
    assert abs(mean - ref["u"][0]) < 0.1 * ref["u"][1] and abs(sd - ref["u"][1]) < 0.1 * ref["u"][1]
    np.testing.assert_allclose(integration.predict(gp, XNEW, idata), ref["p"], atol=5e-3)


def test_ccd_is_exact_when_the_log_posterior_is_gaussian():
    """A GP term with fixed hyperparameters (a constant evidence) and a free MvNormal b: the
    log posterior in b is exactly N(mu, cov); the CCD's weighted mean and covariance of b
    are mu and cov to 1e-6."""
    mu = np.array([0.3, -1.2, 2.0])
    A = np.array([[1.0, 0.4, 0.0], [0.0, 0.7, -0.3], [0.2, 0.0, 0.5]])
    cov = A @ A.T
    with pm.Model() as model:
        b = pm.MvNormal("b", mu=mu, cov=cov)
        pm.Deterministic("b_sum", b.sum())
        gp = pymc_gpc.MarginalLaplace(cov_func=pm.gp.cov.ExpQuad(2, ls=1.0), likelihood=L.Logistic())
        gp.marginal_likelihood("y", X=X, y=Y)
    idata = pymc_gpc.sample(model=model, method="ccd", random_seed=0, progressbar=False)
    group = idata["integration"]
    w, v = np.asarray(group["weight"]), np.asarray(group["b"])
    assert v.shape == (1 + 8 + 6, 3)
    mean = w @ v
    np.testing.assert_allclose(mean, mu, atol=1e-6)
    np.testing.assert_allclose(((v - mean).T * w) @ (v - mean), cov, atol=1e-6)
    np.testing.assert_allclose(np.asarray(group["b_sum"]), v.sum(axis=1))


@pytest.fixture(scope="module")
def three_hyper():
    with pm.Model() as model:
        log_ls = pm.Normal("log_ls", 0.0, 1.0, shape=2)
        amp = pm.HalfNormal("amp", 2.0)
        gp = pymc_gpc.MarginalEP(cov_func=amp ** 2 * pm.gp.cov.ExpQuad(2, ls=pt.exp(log_ls)), likelihood=L.Probit())
        gp.marginal_likelihood("y", X=X, y=Y)
    idata = pymc_gpc.sample(model=model, method="ccd", draws=300, chains=3, random_seed=5, progressbar=False)
    return model, gp, idata


def test_the_inference_data_works_with_arviz_and_predict(three_hyper):
    model, gp, idata = three_hyper
    post = idata["posterior"]
    assert (post.sizes["chain"], post.sizes["draw"]) == (3, 300)
    assert set(post.data_vars) == {"log_ls", "amp"}
    group = idata["integration"]
    assert group.sizes["point"] == 1 + 8 + 6 and group.attrs["method"] == "ccd"
    np.testing.assert_allclose(float(group["weight"].sum()), 1.0)
    summary = az.summary(idata)
    assert {"log_ls[0]", "log_ls[1]", "amp"} <= set(summary.index)
    # the resampled draws' mean is the weighted mean up to Monte-Carlo error
    w = np.asarray(group["weight"])
    exact = w @ np.asarray(group["amp"])
    sd = np.sqrt(w @ (np.asarray(group["amp"]) - exact) ** 2)
    assert abs(float(post["amp"].mean()) - exact) < 4 * sd / np.sqrt(900)
    az.plot_dist(idata)  # ArviZ 1.x's posterior plot (plot_posterior in ArviZ 0.x)
    loo = az.loo(idata, pointwise=True)
    ll = np.asarray(idata["log_likelihood"]["y"]).reshape(-1, X.shape[0])
    assert np.isfinite(loo.elpd) and ll.shape == (900, 24)
    p_draws = gp.predict(XNEW, idata=idata, progressbar=False)
    p_exact = integration.predict(gp, XNEW, idata)
    assert np.all((p_exact > 0) & (p_exact < 1))
    np.testing.assert_allclose(p_draws, p_exact, atol=0.02)
    # the weighted sum, one warm-chained call at the prediction tolerance, against a solve
    # from a cold start at the engine's tolerance at each point
    names = ("log_ls", "amp")
    p_points = np.array([gp.predict(XNEW, point={n: np.asarray(group[n][k]) for n in names}, progressbar=False)
                         for k in range(w.size)])
    np.testing.assert_allclose(p_exact, w @ p_points, atol=1e-4)
    with pytest.raises(ValueError, match="one non-negative weight per draw"):
        gp.predict(XNEW, idata=idata, weights=np.ones(3))
    with pytest.raises(ValueError, match="weights needs idata"):
        gp.predict(XNEW, point={n: np.asarray(group[n][0]) for n in names}, weights=np.ones(1))


def test_the_design_path_visits_each_point_once_nearest_first():
    z = np.array([[3.0, 0.0], [0.1, 0.0], [-1.0, 0.0], [2.0, 0.0], [-3.0, 0.0]])
    np.testing.assert_array_equal(integration.design_path(z), [1, 2, 4, 3, 0])


def test_resampling_is_reproducible(three_hyper):
    model, _, idata = three_hyper
    again = integration.to_inference_data(
        integration.integrate(model, "ccd"), model, draws=300, chains=3, random_seed=5)
    np.testing.assert_allclose(np.asarray(again["posterior"]["amp"]), np.asarray(idata["posterior"]["amp"]),
                               rtol=1e-6)
    other = integration.resample(np.full(4, 0.25), 400, random_seed=6)
    assert np.bincount(other).tolist() == [100] * 4  # systematic: each point its share exactly


def _cell(classifier, lik, approx, y):
    with pm.Model() as model:
        ls = pm.LogNormal("ls", 0.0, 0.5)
        amp = pm.LogNormal("amp", 0.0, 0.5)
        gp = classifier(cov_func=amp * pm.gp.cov.ExpQuad(2, ls=ls), likelihood=lik, approx=approx)
        gp.marginal_likelihood("y", X=X, y=y, **({"Xu": X[::3]} if approx else {}))
    return model, gp


Y_MULTI = np.argmax(X @ np.array([[2.0, -2.0, 0.0], [0.0, 1.0, -2.0]]) + 0.3 * rng.normal(size=(24, 3)), axis=1)
Y_ORDINAL = np.digitize(X[:, 0] + 0.3 * rng.normal(size=24), [-0.4, 0.4])


@pytest.mark.parametrize("classifier,lik,approx,y", [
    (pymc_gpc.MarginalLaplace, L.Logistic(), None, Y),
    (pymc_gpc.MarginalEP, L.Probit(), "FITC", Y),
    (pymc_gpc.MarginalLaplace, L.Softmax(), None, Y_MULTI),
    (pymc_gpc.MarginalEP, L.MultinomialProbit(), "FITC", Y_MULTI),
    (pymc_gpc.MarginalEP, L.OrderedProbit([-0.5, 0.5], sigma=0.8), None, Y_ORDINAL),
], ids=["laplace-logistic", "ep-fitc", "softmax", "mnp-fitc", "ordinal"])
def test_every_likelihood_family_and_structure(classifier, lik, approx, y):
    """Two hyperparameters: the CCD's 9 points (4 factorial, 4 axial, the centre) with
    finite log densities, weights summing to one, the mode the heaviest; predictions
    averaged over the design are probabilities (rows summing to one for several classes)
    and near the resampled draws' average."""
    model, gp = _cell(classifier, lik, approx, y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        idata = pymc_gpc.sample(model=model, method="ccd", random_seed=2, progressbar=False)
    group = idata["integration"]
    w = np.asarray(group["weight"])
    assert w.size == 9 and np.all(np.isfinite(np.asarray(group["log_density"])))
    assert abs(w.sum() - 1) < 1e-12 and np.argmax(np.asarray(group["log_density"])) == 0
    p = integration.predict(gp, XNEW, idata)
    assert np.all((p >= 0) & (p <= 1))
    if p.ndim == 2:
        np.testing.assert_allclose(p.sum(axis=1), 1.0, atol=1e-8)
    np.testing.assert_allclose(gp.predict(XNEW, idata=idata, max_draws=60, progressbar=False), p, atol=0.05)


def test_bad_input(one_hyper):
    model = one_hyper[0]
    with pytest.raises(ValueError, match="'ccd' or 'grid'"):
        pymc_gpc.sample(model=model, method="laplace")
    with pytest.raises(ValueError, match="tune"):
        pymc_gpc.sample(model=model, method="ccd", tune=100)
    with pytest.raises(ValueError, match="keyword"):
        pymc_gpc.sample(100, model=model, method="ccd")
    with pytest.raises(ValueError, match="positive"):
        pymc_gpc.sample(model=model, method="ccd", draws=0)
    with pytest.raises(ValueError, match="f0"):
        pymc_gpc.sample(model=model, method="ccd", f0=0.9, progressbar=False)
    with pytest.raises(ValueError, match="not both"):
        pymc_gpc.sample(model=model, method="ccd", start={"ls": 1.0}, map_estimate={"ls_log__": 0.0})
    with pytest.raises(ValueError, match="lacks the free value variables"):
        pymc_gpc.sample(model=model, method="ccd", map_estimate={"ls": 1.0}, progressbar=False)
    with pytest.raises(ValueError, match="finite"):
        pymc_gpc.sample(model=model, method="ccd", map_estimate={"ls_log__": np.nan}, progressbar=False)
    with pytest.raises(ValueError, match="map_estimate must be"):
        pymc_gpc.sample(model=model, method="ccd", map_estimate=[0.0], progressbar=False)
    with pm.Model() as clash:
        weight = pm.LogNormal("weight", 0.0, 0.5)
        pymc_gpc.MarginalEP(cov_func=pm.gp.cov.ExpQuad(2, ls=weight), likelihood=L.Probit()).marginal_likelihood(
            "y", X=X, y=Y)
    with pytest.raises(ValueError, match="rename"):
        pymc_gpc.sample(model=clash, method="ccd")
    with pytest.raises(ValueError, match="integration"):
        integration.predict(one_hyper[1], XNEW, az.from_dict({"posterior": {"ls": np.ones((1, 2))}}))
    with pm.Model() as wide:
        v = pm.Normal("v", 0.0, 1.0, shape=4)
        gp = pymc_gpc.MarginalEP(cov_func=pm.gp.cov.ExpQuad(2, ls=pt.exp(v[:2])) * pt.exp(v[2] + v[3]),
                                 likelihood=L.Probit())
        gp.marginal_likelihood("y", X=X, y=Y)
    with pytest.raises(ValueError, match="at most 3"):
        pymc_gpc.sample(model=wide, method="grid")
    with pm.Model() as adf:
        ls = pm.LogNormal("ls", 0.0, 0.5)
        pymc_gpc.MarginalADF(cov_func=pm.gp.cov.ExpQuad(2, ls=ls), likelihood=L.Probit()).marginal_likelihood(
            "y", X=X, y=Y)
    with pytest.raises(ValueError, match="gradient"):
        pymc_gpc.sample(model=adf, method="ccd")
