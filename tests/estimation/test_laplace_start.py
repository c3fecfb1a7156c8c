"""``pymc_gpc.sample``'s NUTS start from the Laplace approximation (``sampling.laplace_start``):
on a model whose log posterior is exactly Gaussian its mass matrix starts at the
Gaussian's covariance and its chains start at distinct points; the default route uses it
and the routes it does not serve are left to PyMC's initialisation."""

import numpy as np
import pymc as pm
import pytest

import pymc_gpc
from pymc_gpc import likelihoods as L
from pymc_gpc.estimation import sampling

rng = np.random.default_rng(3)
X = rng.normal(size=(24, 2))
Y = (X[:, 0] - 0.5 * X[:, 1] + 0.6 * rng.normal(size=24) > 0).astype(int)
MU = np.array([0.3, -1.2, 2.0])
A = np.array([[1.0, 0.4, 0.0], [0.0, 0.7, -0.3], [0.2, 0.0, 0.5]])
COV = A @ A.T


@pytest.fixture(scope="module")
def gaussian_model():
    """A GP term with fixed hyperparameters (a constant evidence) and a free MvNormal b:
    the log posterior in b is exactly N(MU, COV)."""
    with pm.Model() as model:
        pm.MvNormal("b", mu=MU, cov=COV)
        gp = pymc_gpc.MarginalLaplace(cov_func=pm.gp.cov.ExpQuad(2, ls=1.0), likelihood=L.Logistic())
        gp.marginal_likelihood("y", X=X, y=Y)
    return model


def test_the_mass_matrix_starts_at_the_posterior_covariance(gaussian_model):
    start = sampling.laplace_start(gaussian_model, chains=3, random_seed=0)
    potential = start["step"].potential
    np.testing.assert_allclose(potential._initial_cov, COV, atol=1e-6)
    np.testing.assert_allclose(potential._initial_mean, MU, atol=1e-6)
    assert potential._initial_weight == sampling.LAPLACE_WEIGHT
    assert start["step"].target_accept == sampling.LAPLACE_TARGET_ACCEPT == 0.65  # not PyMC's 0.8
    points = np.array([p["b"] for p in start["initvals"]])
    assert points.shape == (3, 3) and len({tuple(p) for p in points}) == 3
    # draws from N(MU, COV): each within 5 sd of the mean in the Mahalanobis metric
    z = np.linalg.solve(np.linalg.cholesky(COV), (points - MU).T)
    assert np.all(np.sum(z ** 2, axis=0) < 25)


def test_a_map_estimate_at_hand_is_searched_from(gaussian_model):
    """``map_estimate``: the mode search starts at the given point (here 1 away from the mode,
    no MAP-II run) and still finds the Gaussian's mean and covariance; a point lacking the
    free variable is a ValueError before any search, not a silent fallback to PyMC's start."""
    start = sampling.laplace_start(gaussian_model, chains=2, random_seed=0, map_estimate={"b": MU + 1.0})
    potential = start["step"].potential
    np.testing.assert_allclose(potential._initial_cov, COV, atol=1e-6)
    np.testing.assert_allclose(potential._initial_mean, MU, atol=1e-6)
    with pytest.raises(ValueError, match="lacks the free value variables"):
        sampling.laplace_start(gaussian_model, chains=2, map_estimate={"c": MU})


def test_a_start_near_the_mode_takes_one_newton_step(gaussian_model, monkeypatch):
    """``start_scale``: from a point within ``START_WITHIN`` posterior sds of the mode (MAP-II's
    point), the centre is one Newton step away, with the Hessian there: exact for a Gaussian,
    in 2d + 1 gradients and no mode search. From 1 away on each axis the search runs, and at
    once for a model with a transformed variable."""
    from pymc_gpc.estimation import hyper_posterior as hp

    searches = []
    find_mode = hp.find_mode
    monkeypatch.setattr(hp, "find_mode", lambda *a, **k: searches.append(a[1]) or find_mode(*a, **k))
    target = hp.LogPosterior(gaussian_model, gaussian_model.initial_point())
    near = MU + 0.05 * np.linalg.cholesky(COV) @ np.ones(3) / np.sqrt(3)  # 0.05 sd from the mode
    centre, H = hp.start_scale(target, near)
    np.testing.assert_allclose(centre, MU, atol=1e-6)
    np.testing.assert_allclose(np.linalg.inv(-H), COV, atol=1e-6)
    assert searches == [] and target.n_evaluations == 2 * 3 + 1
    centre, H = hp.start_scale(target, MU + 1.0)
    assert len(searches) == 1
    np.testing.assert_allclose(centre, MU, atol=1e-6)
    # a transformed variable: MAP-II's point lacks the log Jacobian, so the search runs at once
    with pm.Model() as transformed:
        pm.LogNormal("s", 0.0, 1.0)
        gp = pymc_gpc.MarginalLaplace(cov_func=pm.gp.cov.ExpQuad(2, ls=1.0), likelihood=L.Logistic())
        gp.marginal_likelihood("y", X=X, y=Y)
    other = hp.LogPosterior(transformed, transformed.initial_point())
    assert other.transformed and not target.transformed
    centre, _ = hp.start_scale(other, np.array([0.01]))
    assert len(searches) == 2 and other.n_evaluations < 2 * 1 + 1 + 30
    np.testing.assert_allclose(centre, [0.0], atol=1e-5)  # log s ~ N(0, 1) with the Jacobian


def test_the_start_is_reproducible(gaussian_model):
    a = sampling.laplace_start(gaussian_model, chains=2, random_seed=4)["initvals"]
    b = sampling.laplace_start(gaussian_model, chains=2, random_seed=4)["initvals"]
    np.testing.assert_array_equal([p["b"] for p in a], [p["b"] for p in b])


def test_which_routes_use_it(gaussian_model):
    assert sampling._laplace_applies(gaussian_model, {})
    for given in ({"init": "adapt_diag"}, {"initvals": {"b": MU}}, {"step": object()}, {"nuts_sampler": "nutpie"}):
        assert not sampling._laplace_applies(gaussian_model, given), given


def test_no_start_without_a_gradient():
    """ADF's evidence has no gradient: no Laplace start, PyMC's own initialisation."""
    with pm.Model() as model:
        ls = pm.LogNormal("ls", 0.0, 0.7)
        gp = pymc_gpc.MarginalADF(cov_func=pm.gp.cov.ExpQuad(2, ls=ls), likelihood=L.Probit())
        gp.marginal_likelihood("y", X=X, y=Y)
    assert sampling.laplace_start(model, chains=2) == {}


def test_nuts_options_are_taken_out_of_pm_samples_arguments():
    """``target_accept`` and the rest of ``NUTS_OPTIONS``, at the top level or in ``nuts``,
    go to the step; given twice they are a ValueError, as ``pm.sample`` makes them."""
    rest, options = sampling.nuts_options({"draws": 10, "target_accept": 0.9, "nuts": {"max_treedepth": 5}})
    assert rest == {"draws": 10} and options == {"target_accept": 0.9, "max_treedepth": 5}
    assert sampling.nuts_options({"tune": 3}) == ({"tune": 3}, {})
    with pytest.raises(ValueError, match="'target_accept' was given twice"):
        sampling.nuts_options({"target_accept": 0.9, "nuts": {"target_accept": 0.95}})


def test_nuts_options_reach_the_laplace_step(gaussian_model):
    """``pymc_gpc.sample(target_accept=...)``, the remedy PyMC's divergence warning names:
    ``pm.sample`` rejected it beside the Laplace start's step (``Invalid key found in
    step_kwargs: {'nuts'}``). Now it reaches the step: the step size adapts to a higher
    acceptance at 0.99 than at 0.6, and no tree grows past ``max_treedepth``."""
    step = sampling.laplace_start(gaussian_model, chains=1, random_seed=0, target_accept=0.93, max_treedepth=4)["step"]
    assert step.target_accept == 0.93 and step.max_treedepth == 4
    accept, size = {}, {}
    for target in (0.6, 0.99):
        with gaussian_model:
            idata = pymc_gpc.sample(draws=60, tune=100, chains=1, cores=1, random_seed=2, progressbar=False,
                                    target_accept=target, nuts={"max_treedepth": 3})
        stats = idata["sample_stats"]
        assert int(np.max(stats["tree_depth"])) <= 3
        accept[target], size[target] = float(np.mean(stats["acceptance_rate"])), float(np.mean(stats["step_size"]))
    assert accept[0.99] > 0.9 > 0.8 > accept[0.6] and size[0.99] < 0.5 * size[0.6]


def test_the_trajectory_cache_answers_a_position_once_evaluated():
    """``TrajectoryCache``: a position evaluated before is looked up (NUTS's iteration start,
    a point of its last trajectory), as copies; the oldest beyond ``size`` is dropped."""
    calls = []

    def func(q, info):
        calls.append(q.copy())
        return np.array(-0.5 * q @ q), -q

    cache = sampling.TrajectoryCache(func, size=2)
    a, b, c = np.array([1.0, 2.0]), np.array([0.5, 0.0]), np.array([3.0, 1.0])
    first, again = cache(a, None), cache(a, None)
    assert len(calls) == 1 and float(again[0]) == float(first[0]) == -2.5
    again[1][:] = 9.0  # a copy: the cached gradient is untouched
    np.testing.assert_array_equal(cache(a, None)[1], -a)
    cache(b, None), cache(c, None), cache(a, None)  # a, the oldest of three, was dropped
    assert len(calls) == 4


def test_a_nuts_iteration_solves_the_evidence_once_a_leapfrog_step(monkeypatch):
    """From the Laplace start, the evidence is solved at the leapfrog steps alone: the
    iteration's start is the step's ``TrajectoryCache``'s, and the draw's evaluation for
    the trace (the Op's LOO terms and diagnostics) is answered by the trajectory's result,
    which the sampler's copy of the Op shares with the trace's (``ops.marginal``'s lineage
    state). Before, each iteration solved both once more: about 2 in 9 solves."""
    from pymc_gpc.ops.marginal import ApproxMarginalOp

    solves = []
    evaluate = ApproxMarginalOp.evaluate

    def counted(self, inputs, guess, output_storage):
        solves.append(1)
        return evaluate(self, inputs, guess, output_storage)

    model, _ = pymc_gpc.ard_classifier(X, Y, inducing=6)  # FITC: the Op's Python path
    start = sampling.laplace_start(model, chains=1, random_seed=0)
    assert isinstance(start["step"].integrator._logp_dlogp_func, sampling.TrajectoryCache)
    monkeypatch.setattr(ApproxMarginalOp, "evaluate", counted)
    pm_sample = pm.sample

    def sample_counted(*args, **kwargs):  # the solves of pm.sample, not the Laplace start's mode search
        solves.clear()
        return pm_sample(*args, **kwargs)

    monkeypatch.setattr(pm, "sample", sample_counted)
    with model:
        idata = pymc_gpc.sample(draws=30, tune=30, chains=1, cores=1, random_seed=1, progressbar=False,
                                discard_tuned_samples=False)
    steps = int(idata["sample_stats"]["n_steps"].sum() + idata["warmup_sample_stats"]["n_steps"].sum())
    assert steps <= len(solves) <= steps + 6  # without the shared state: 589 solves for 536 steps
