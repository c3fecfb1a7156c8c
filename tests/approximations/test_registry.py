"""The registry of approximations: one entry per approximation with a solver per likelihood
family, and ``registry.check``, the one validator of a combination.

The expected solvers, schedules and messages are written out by hand (the papers' pairings:
softmax with Laplace, Williams & Barber 1998; the multinomial probit with nested EP,
Riihimaki et al. 2013), not read back from the registry.
"""

import numpy as np
import pymc as pm
import pytest

import pymc_gpc
from pymc_gpc import likelihoods as L
from pymc_gpc.approximations import registry
from pymc_gpc.approximations.adf import adf
from pymc_gpc.approximations.ep import ep
from pymc_gpc.approximations.laplace import laplace
from pymc_gpc.approximations.meanfield import meanfield
from pymc_gpc.approximations.multinomial_probit_ep import multinomial_probit_ep
from pymc_gpc.approximations.softmax_laplace import softmax_laplace

# (approximation, likelihood) -> the engine function that integrates it out
SOLVES = {
    ("ep", L.Probit()): ep, ("ep", L.OrderedProbit([-0.5, 0.5])): ep, ("ep", L.MultinomialProbit()): multinomial_probit_ep,
    ("laplace", L.Logistic()): laplace, ("laplace", L.OrderedLogit([-0.5, 0.5])): laplace,
    ("laplace", L.Softmax()): softmax_laplace, ("meanfield", L.Probit()): meanfield, ("adf", L.Probit()): adf,
}


@pytest.mark.parametrize("name, lik", list(SOLVES), ids=lambda v: type(v).__name__ if not isinstance(v, str) else v)
def test_each_family_has_its_solver(name, lik):
    assert registry.solver_for(name, lik).solve is SOLVES[name, lik]
    assert registry.solver_for(name, type(lik)).solve is SOLVES[name, lik]  # the Ops ask with the type
    assert registry.check(name, lik, "dense-multiclass" if registry.family(lik) == "multiclass" else "dense") \
        is registry.solver_for(name, lik)


def test_an_entry_runs_the_solver_of_the_likelihood_family():
    """``SOLVERS["laplace"]`` (what ``approximations.solve`` calls) gives softmax Laplace's evidence
    for a softmax and binary Laplace's for a logistic likelihood: the engines called directly."""
    rng = np.random.default_rng(3)
    X = rng.normal(size=(12, 2))
    K = np.exp(-0.5 * ((X[:, None] - X[None]) ** 2).sum(-1)) + 1e-6 * np.eye(12)
    codes = np.arange(12) % 3
    signed = np.where(X[:, 0] > 0, 1.0, -1.0)
    several = registry.SOLVERS["laplace"](np.stack([K] * 3), codes.astype(float), L.Softmax(), np.zeros(0))
    assert several.log_z == pytest.approx(softmax_laplace(np.stack([K] * 3), codes).log_z, abs=1e-10)
    binary = registry.SOLVERS["laplace"](K, signed, L.Logistic(), np.zeros(0))
    assert binary.log_z == pytest.approx(laplace(K, signed, L.Logistic()).log_z, abs=1e-10)


def test_schedules_and_tolerances_are_those_of_the_family():
    """Dense multi-class EP retries damped nested EP (no sequential schedule); the sampler's and
    the fit's tolerances differ by family; the Ops read their family's."""
    from pymc_gpc.ops import ApproxMarginalOp
    from pymc_gpc.structures.select import DENSE_MULTICLASS

    nested = [{"damping": 0.5, "max_sweeps": 200}]
    assert registry.get("ep").retry_schedule({}, "dense-multiclass") == nested
    assert ApproxMarginalOp("ep", L.MultinomialProbit, structure=DENSE_MULTICLASS).retry_schedule({}) == nested
    assert ApproxMarginalOp("ep", L.Probit).retry_schedule({})[1]["method"] == "sequential"
    assert registry.solver_for("ep", L.Probit).sampling_defaults == {"tol": 1e-2}
    assert registry.solver_for("ep", L.MultinomialProbit).sampling_defaults == {"tol": 1e-4, "rough_gradient": True}
    assert registry.solver_for("laplace", L.Softmax).sampling_defaults == {"rough_gradient": True}
    assert registry.solver_for("ep", L.MultinomialProbit).coarse_fit_defaults == {"tol": 1e-4}
    assert registry.solver_for("ep", L.Probit).prediction_defaults == {"tol": 1e-3}
    assert ApproxMarginalOp("ep", L.MultinomialProbit, sampling=True, structure=DENSE_MULTICLASS).solver_options()["tol"] == 1e-4
    assert ApproxMarginalOp("ep", L.Probit, sampling=True).solver_options()["tol"] == 1e-2


# (approximation, likelihood, structure) -> the start of the message that names what works
REFUSED = [
    ("meanfield", L.Softmax(), "dense-multiclass",
     "MarginalMeanField cannot integrate out the multi-class likelihood Softmax.*use "
     r"MarginalLaplace\(likelihood=Softmax\(\)\) or MarginalEP\(likelihood=MultinomialProbit\(\)\)"),
    ("ep", L.Softmax(), "dense-multiclass", "MarginalEP cannot integrate out the multi-class likelihood Softmax"),
    ("laplace", L.MultinomialProbit(), "fitc-multiclass", "MarginalLaplace cannot integrate out"),
    ("adf", L.OrderedProbit([0.0, 1.0]), "dense",
     "MarginalADF does not integrate out the ordinal likelihood OrderedProbit; use MarginalEP or MarginalLaplace"),
    ("meanfield", L.Probit(), "fitc", "approx='FITC' is available for MarginalEP and MarginalLaplace, not 'meanfield'"),
    ("laplace", L.StepLabelNoise(0.1), "dense", "StepLabelNoise has no Laplace approximation"),
    ("ep", L.Probit, "dense", "likelihood must be a pymc_gpc.likelihoods.Likelihood instance"),
    ("laplace-multiclass", L.Softmax(), "dense-multiclass", "'laplace-multiclass' is now 'laplace'"),
]


@pytest.mark.parametrize("name, lik, structure, message", REFUSED, ids=[r[3][:40] for r in REFUSED])
def test_check_refuses_naming_what_works(name, lik, structure, message):
    with pytest.raises(ValueError, match=message):
        registry.check(name, lik, structure)


def test_check_refuses_a_backend_without_the_approximation():
    with pytest.raises(NotImplementedError, match="the JAX backend implements EP and Laplace"):
        registry.check("meanfield", L.Probit(), "dense", backend="jax")
    assert registry.check("laplace", L.Softmax(), "fitc-multiclass", backend="jax").solve is softmax_laplace


def test_approximation_and_approx_in_each_others_place_are_clear_errors():
    """``approx`` is the prior's sparse approximation, ``approximation`` the class's: one given
    where the other goes says so, before any model is built."""
    cov = pm.gp.cov.ExpQuad(1, ls=1.0)
    with pytest.raises(ValueError, match="approx is the sparse approximation of the prior.*MarginalLaplace"):
        pymc_gpc.MarginalEP(cov_func=cov, likelihood=L.Probit(), approx="laplace")
    with pytest.raises(ValueError, match="'ep-multiclass'.*chosen by the class \\(MarginalEP\\)"):
        pymc_gpc.MarginalEP(cov_func=cov, likelihood=L.MultinomialProbit(), approx="ep-multiclass")
    with pytest.raises(ValueError, match="approximation= is not an option of MarginalEP"):
        pymc_gpc.MarginalEP(cov_func=cov, likelihood=L.Probit(), approximation="laplace")
    with pytest.raises(ValueError, match="inducing=.*not approx="):
        pymc_gpc.ard_classifier(np.zeros((4, 1)), [0, 1, 0, 1], approx="FITC")
    assert pymc_gpc.MarginalEP(cov_func=cov, likelihood=L.Probit(), approx="fitc").approx == "FITC"
