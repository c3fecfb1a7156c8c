"""The combination matrix a user can write, cell by cell (CPU backend).

classifier (EP, Laplace, mean field, ADF) x likelihood (every binary, multi-class and ordinal one)
x prior (dense, FITC, HSGP) x verb (log p, its gradient, ``fit``, ``predict``). Each cell either
works (finite log p and gradient, ``fit`` returns, ``predict`` gives probabilities) or is a
``ValueError`` at construction whose message names what works. The expected table below is
written out by hand, not read from the registry: a new likelihood, classifier or prior
structure fails ``test_the_table_covers_every_combination`` until its cells are added.
"""

import itertools
import warnings

import numpy as np
import pymc as pm
import pytest
from pytensor.gradient import NullTypeGradError

import pymc_gpc
from pymc_gpc import likelihoods as L
from pymc_gpc.approximations import registry
from pymc_gpc.structures.select import STRUCTURES

BINARY = ("Probit", "ProbitBias", "ProbitNoise", "StepLabelNoise", "Logistic")
MULTICLASS = ("Softmax", "MultinomialProbit")
ORDINAL = ("OrderedProbit", "OrderedLogit")
CLASSIFIERS = {"MarginalEP": pymc_gpc.MarginalEP, "MarginalLaplace": pymc_gpc.MarginalLaplace,
               "MarginalMeanField": pymc_gpc.MarginalMeanField, "MarginalADF": pymc_gpc.MarginalADF}
LIKELIHOODS = {"Probit": L.Probit, "ProbitBias": lambda: L.ProbitBias(0.2), "ProbitNoise": lambda: L.ProbitNoise(0.7),
               "StepLabelNoise": lambda: L.StepLabelNoise(0.1), "Logistic": L.Logistic, "Softmax": L.Softmax,
               "MultinomialProbit": L.MultinomialProbit, "OrderedProbit": lambda: L.OrderedProbit([-0.5, 0.5], sigma=0.8),
               "OrderedLogit": lambda: L.OrderedLogit([-0.5, 0.5])}
PRIORS = (None, "FITC", "HSGP")

ALL = "logp grad fit predict"
NO_GRADIENT = "logp predict"  # ADF: no gradient (a NullTypeGradError), fit(map) a ValueError naming em-ep


def _expected():
    """(classifier, likelihood, approx) -> the verbs that work, or the start of the ValueError."""
    table = {}
    for lik in BINARY:
        for approx in PRIORS:
            table["MarginalEP", lik, approx] = ALL
            table["MarginalLaplace", lik, approx] = (
                "StepLabelNoise has no Laplace approximation" if lik == "StepLabelNoise" else ALL)
        table["MarginalMeanField", lik, None] = ALL
        table["MarginalADF", lik, None] = NO_GRADIENT
        for approx in ("FITC", "HSGP"):
            table["MarginalMeanField", lik, approx] = table["MarginalADF", lik, approx] = (
                f"approx='{approx}' is available for MarginalEP and MarginalLaplace")
    for lik, approx in itertools.product(MULTICLASS, PRIORS):
        for name in CLASSIFIERS:
            works = (name, lik) in (("MarginalLaplace", "Softmax"), ("MarginalEP", "MultinomialProbit"))
            table[name, lik, approx] = f"{name} cannot integrate out the multi-class likelihood" if not works else ALL
    for lik, approx in itertools.product(ORDINAL, PRIORS):
        table["MarginalEP", lik, approx] = table["MarginalLaplace", lik, approx] = ALL
        for name in ("MarginalMeanField", "MarginalADF"):  # the likelihood is checked before the prior
            table[name, lik, approx] = f"{name} does not integrate out the ordinal likelihood"
    return table


EXPECTED = _expected()


def test_the_table_covers_every_combination():
    """Every likelihood the package exports, every classifier the registry names and every
    prior structure (dense or FITC, binary or several classes) has its cells."""
    exported = {name for name in L.__all__ if isinstance(getattr(L, name), type)
                and issubclass(getattr(L, name), (L.Likelihood, L.MulticlassLikelihood))
                and name not in ("Likelihood", "MulticlassLikelihood", "OrdinalLikelihood")}
    assert exported == set(LIKELIHOODS), "add the new likelihood's cells to EXPECTED"
    assert {a.classifier for a in registry.APPROXIMATIONS.values()} == set(CLASSIFIERS)
    assert {s.name for s in STRUCTURES} == {"dense", "fitc", "dense-multiclass", "fitc-multiclass", "hsgp",
                                          "hsgp-multiclass"}, \
        "a new prior structure: add its approx value to PRIORS and its cells to EXPECTED"
    assert set(EXPECTED) == set(itertools.product(CLASSIFIERS, LIKELIHOODS, PRIORS))


rng = np.random.default_rng(0)
X = rng.normal(size=(14, 2))
Y_BINARY = (X[:, 0] + 0.3 * rng.normal(size=14) > 0).astype(int)
Y_MULTI = np.argmax(X @ np.array([[2.0, -2.0, 0.0], [0.0, 1.0, -2.0]]) + 0.3 * rng.normal(size=(14, 3)), axis=1)
Y_ORDINAL = np.digitize(X[:, 0] + 0.3 * rng.normal(size=14), [-0.4, 0.4])
XU = X[::3]


def _build(classifier, lik, approx):
    with pm.Model() as model:
        ls = pm.LogNormal("ls", 0.0, 0.5)
        gp = CLASSIFIERS[classifier](cov_func=pm.gp.cov.ExpQuad(2, ls=ls), likelihood=LIKELIHOODS[lik](),
                                     approx=approx, **({"m": [5, 5]} if approx == "HSGP" else {}))
        y = Y_MULTI if lik in MULTICLASS else Y_ORDINAL if lik in ORDINAL else Y_BINARY
        gp.marginal_likelihood("y", X=X, y=y, **({"Xu": XU} if approx == "FITC" else {}))
    return model, gp


@pytest.mark.parametrize("classifier,lik,approx", sorted(EXPECTED, key=str), ids=lambda v: str(v))
def test_cell(classifier, lik, approx):
    expected = EXPECTED[classifier, lik, approx]
    if expected not in (ALL, NO_GRADIENT):
        with pytest.raises(ValueError, match=expected):
            _build(classifier, lik, approx)
        return
    model, gp = _build(classifier, lik, approx)
    start = model.initial_point()
    if expected == ALL:  # one function of both, as PyMC's samplers compile them (one compilation)
        logp, dlogp = model.compile_fn([model.logp(), model.dlogp()])(start)
        assert np.isfinite(logp) and np.all(np.isfinite(dlogp))
    else:
        assert np.isfinite(model.compile_fn(model.logp())(start))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # few iterations: fit may say it stopped early
        if expected == ALL:
            point = pymc_gpc.fit(model, method="map", maxiter=5, progressbar=False).point
        else:
            with pytest.raises(NullTypeGradError):
                model.compile_fn(model.dlogp())
            with pytest.raises(ValueError, match="em-ep"):
                pymc_gpc.fit(model, method="map", progressbar=False)
            point = {"ls": 1.0}
    p = gp.predict(X[:3], point=point, progressbar=False)
    assert np.all(np.isfinite(p)) and np.all((p >= 0) & (p <= 1))
    if lik in MULTICLASS or lik in ORDINAL:
        assert p.shape == (3, 3) and np.allclose(p.sum(axis=1), 1.0)
    else:
        assert p.shape == (3,)
