"""``ard_classifier(prior=...)``: one (mean, sd) for every log-hyperparameter, or a dict with a
Normal per variable (the names not given the default N(-3, 3^2)). Ground truth: the model's
log prior at a point against scipy's Normal log densities summed by hand."""

import numpy as np
import pymc as pm
import pytensor
import pytest
from scipy.stats import multivariate_normal, norm

import pymc_gpc
from pymc_gpc.gp import models

DEFAULT = (-3.0, 3.0)


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 2))
    return X, (X[:, 0] > 0).astype(int), np.arange(40) % 3


def _builds(data):
    """name -> (build(prior), the model's log-hyperparameter names): binary dense (with the
    linear term), binary HSGP, ordinal, several classes dense / FITC / shared lengthscales /
    spread, binary without the bias."""
    X, yb, yc = data
    return {
        "binary-linear": (lambda p: pymc_gpc.ard_classifier(X, yb, prior=p, linear=True),
                          ("log_w", "log_v0", "log_v1", "log_a")),
        "binary-hsgp": (lambda p: pymc_gpc.ard_classifier(X, yb, prior=p, hsgp=(5, 1.5)), ("log_w", "log_v0")),
        "binary-no-bias": (lambda p: pymc_gpc.ard_classifier(X, yb, prior=p, bias=False), ("log_w", "log_v0")),
        "ordinal": (lambda p: pymc_gpc.ard_classifier(X, yc, prior=p, likelihood=pymc_gpc.OrderedProbit),
                    ("log_w", "log_v0", "log_v1")),
        "classes-dense": (lambda p: pymc_gpc.ard_classifier(X, yc, prior=p, approximation="laplace", inducing=None),
                          ("log_w", "log_v0", "log_v1")),
        "classes-fitc": (lambda p: pymc_gpc.ard_classifier(X, yc, prior=p, approximation="laplace", inducing=6),
                         ("log_w", "log_v0", "log_v1")),
        "classes-amplitudes": (lambda p: pymc_gpc.ard_classifier(X, yc, prior=p, approximation="laplace",
                                                                 per_class="amplitudes"),
                               ("log_w", "log_v0", "log_v1")),
        "classes-shared": (lambda p: pymc_gpc.ard_classifier(X, yc, prior=p, approximation="ep", per_class=False,
                                                             bias=False), ("log_w", "log_v0")),
    }


def _log_prior(model, names, seed=1):
    """The model's log density of ``names`` (no Jacobian: they are untransformed) at a random
    point, and that point."""
    rng = np.random.default_rng(seed)
    point = {k: rng.normal(-1.0, 2.0, size=np.shape(v)) for k, v in model.initial_point().items() if k in names}
    return float(_logp_function(model, names, names)(*(point[k] for k in names))), point


def _logp_function(model, names, terms):
    """The log density of the model's variables (or potentials) ``terms`` as a function of the
    values of ``names`` (no Jacobian)."""
    logp = model.logp(vars=[model[k] for k in terms], jacobian=False)
    return pytensor.function([model.rvs_to_values[model[k]] for k in names], logp)


GROUPS = {"log_w": (-1.0, 2.0), "log_v0": (0.0, 1.0), "log_v1": (1.0, 0.5), "log_a": (-2.0, 1.5)}


@pytest.mark.parametrize("case", list(_builds((np.zeros((40, 2)), np.zeros(40), np.zeros(40))).keys()))
@pytest.mark.parametrize("form", ["dict", "partial", "pair"])
def test_log_prior_is_the_stated_normals(data, case, form):
    """Each variable's prior is the Normal the dict gives it (the default for the names left out),
    or the pair's for all: the model's log prior equals the sum of scipy's log densities."""
    build, names = _builds(data)[case]
    if form == "dict":
        prior, want = {k: GROUPS[k] for k in names}, {k: GROUPS[k] for k in names}
    elif form == "partial":  # the amplitudes alone, the others the default
        prior, want = {"log_v0": (0.5, 0.25)}, {k: (0.5, 0.25) if k == "log_v0" else DEFAULT for k in names}
    else:
        prior, want = (-2.0, 1.5), {k: (-2.0, 1.5) for k in names}
    model, _ = build(prior)
    assert sorted(v.name for v in model.free_RVs if v.name.startswith("log_")) == sorted(names)
    log_p, point = _log_prior(model, names)
    expected = sum(norm(*want[k]).logpdf(point[k]).sum() for k in names)
    np.testing.assert_allclose(log_p, expected, rtol=1e-10)


def test_amplitude_start_is_within_one_sd_of_its_own_prior(data):
    """log v0 starts at 0 clipped to within one sd of ITS prior's mean (the docstring's rule)."""
    X, yb, yc = data
    model, _ = pymc_gpc.ard_classifier(X, yb, prior={"log_v0": (2.0, 0.5)})
    assert float(model.initial_point()["log_v0"]) == 1.5
    model, _ = pymc_gpc.ard_classifier(X, yc, approximation="laplace", prior={"log_v0": (-1.0, 2.0)})
    np.testing.assert_array_equal(model.initial_point()["log_v0"], np.zeros(3))
    model, _ = pymc_gpc.ard_classifier(X, yc, approximation="laplace", prior={"log_w": (5.0, 1.0)})
    np.testing.assert_array_equal(model.initial_point()["log_v0"], np.zeros(3))  # the default N(-3, 3^2): 0 inside


def test_spread_uses_the_lengthscales_prior(data):
    """With ``lengthscale_spread``, log w's pair is mu_j's prior: log w_.j ~ N(mean 1, tau^2 I +
    sd^2 1 1^T) (dense scipy density), whatever the other groups' pairs."""
    X, _, yc = data
    tau, (mean, sd) = 0.7, GROUPS["log_w"]
    model, _ = pymc_gpc.ard_classifier(X, yc, approximation="laplace", lengthscale_spread=tau,
                                       prior={"log_w": (mean, sd), "log_v0": (0.0, 1.0)})
    log_w = np.random.default_rng(2).normal(-1.0, 2.0, size=(3, 2))
    f = _logp_function(model, ["log_w"], ["log_w", "log_w_shrinkage"])
    cov = tau ** 2 * np.eye(3) + sd ** 2 * np.ones((3, 3))
    expected = sum(multivariate_normal(np.full(3, mean), cov).logpdf(log_w[:, j]) for j in range(2))
    np.testing.assert_allclose(float(f(log_w)), expected, rtol=1e-10)


def test_ard_kernels_takes_the_dict(data):
    with pm.Model() as model:
        pymc_gpc.kernels.ard_kernels(2, 3, prior={"log_v1": (1.0, 0.5)})
    log_p, point = _log_prior(model, ("log_w", "log_v0", "log_v1"))
    expected = sum(norm(*((1.0, 0.5) if k == "log_v1" else DEFAULT)).logpdf(point[k]).sum() for k in point)
    np.testing.assert_allclose(log_p, expected, rtol=1e-10)


@pytest.mark.parametrize("prior, options, match", [
    ({"log_v2": (0.0, 1.0)}, {}, r"'log_v2'"),
    ({"log_v0": (0.0, 1.0), "lengthscale": (0.0, 1.0)}, {}, r"'lengthscale'"),
    ({"log_a": (0.0, 1.0)}, {}, r"'log_a'"),  # no linear term
    ({"log_v1": (0.0, 1.0)}, {"bias": False}, r"'log_v1'"),
    ({"log_v0": (0.0,)}, {}, r"prior\['log_v0'\] must be a pair"),
    ({"log_v0": 1.0}, {}, r"prior\['log_v0'\] must be a pair"),
    ({"log_v0": "01"}, {}, r"prior\['log_v0'\] must be a pair"),
    ({"log_w": (0.0, 0.0)}, {}, r"prior\['log_w'\] needs a finite mean and a finite sd > 0"),
    ({"log_w": (np.nan, 1.0)}, {}, r"prior\['log_w'\] needs a finite mean"),
    ((0.0, -1.0), {}, r"prior needs a finite mean and a finite sd > 0"),
    ((0.0, 1.0, 2.0), {}, r"prior must be a pair"),
])
def test_bad_prior_raises_naming_it(data, monkeypatch, prior, options, match):
    """A ValueError naming the unknown name or the bad pair, before the inducing inputs are placed."""
    X, _, yc = data

    def no_kmeans(*args, **kwargs):
        raise AssertionError("k-means ran before the prior was checked")
    monkeypatch.setattr(models, "kmeans_centres", no_kmeans)
    with pytest.raises(ValueError, match=match):
        pymc_gpc.ard_classifier(X, yc, approximation="laplace", inducing=6, prior=prior, **options)
