"""The contracts (Protocols next to what they describe, checked by
``pymc_gpc.contracts.conformance_gaps``): every concrete likelihood, prior, posterior, solve
result and prior structure satisfies its contract (members present, signatures callable as
the contract declares), and a planted class that breaks the contract is caught."""

import numpy as np
import pytest

import pymc_gpc
from pymc_gpc import likelihoods as L
from pymc_gpc.approximations.base import SolveResult
from pymc_gpc.contracts import conformance_gaps
from pymc_gpc.likelihoods.base import BinaryLikelihood
from pymc_gpc.approximations.multinomial_probit_ep import multinomial_probit_ep
from pymc_gpc.approximations.softmax_laplace import softmax_laplace
from pymc_gpc.structures import DensePrior, FITCPrior, MulticlassFITCPrior
from pymc_gpc.structures.multiclass import CoupledBlockPosterior
from pymc_gpc.structures.base import (BinarySolverPrior, DenseLatentPosterior, FITCLatentPosterior, LatentPosterior,
                                      MulticlassPosterior, SolverPrior)
from pymc_gpc.structures.select import STRUCTURES, PriorStructure

from .conftest import random_problem, se_kernel

N, M, CLASSES = 12, 4, 3


def _concrete(base):
    """Every concrete subclass of ``base`` defined in the package (recursively)."""
    out = []
    for sub in base.__subclasses__():
        if sub.__module__.startswith("pymc_gpc."):
            out.append(sub)
        out += _concrete(sub)
    return out


def _assert_conforms(obj, contract):
    assert conformance_gaps(obj, contract) == []
    assert isinstance(obj, contract)


@pytest.fixture(scope="module")
def problem():
    X, y = random_problem(np.random.default_rng(0), N)
    Xu = X[:M] + 0.1
    K = se_kernel(X, X, 1.0, 1.5) + 1e-6 * np.eye(N)
    fitc = (se_kernel(Xu, Xu, 1.0, 1.5) + 1e-6 * np.eye(M), se_kernel(Xu, X, 1.0, 1.5), np.full(N, 1.5 + 1e-6))
    codes = np.arange(N) % CLASSES
    return {"K": K, "y": y, "fitc": fitc, "codes": codes}


def test_every_binary_likelihood_and_the_ops_construction_of_it_conform():
    types = _concrete(L.Likelihood)
    assert {L.Probit, L.ProbitBias, L.ProbitNoise, L.StepLabelNoise, L.Logistic} <= set(types)
    for lik_type in types:
        _assert_conforms(lik_type(), BinaryLikelihood)  # the Ops build it with no arguments
        assert lik_type().n_params == len(lik_type.param_names)


def test_every_multiclass_likelihood_conforms():
    types = _concrete(L.MulticlassLikelihood)
    assert {L.Softmax, L.MultinomialProbit} <= set(types)
    for lik_type in types:
        _assert_conforms(lik_type(), L.MulticlassLikelihood)


def test_every_solver_prior_and_its_posteriors_conform(problem):
    K, fitc = problem["K"], problem["fitc"]
    w = np.linspace(0.1, 2.0, N)
    dense, sparse = DensePrior(K), FITCPrior(*fitc)
    for prior in (dense, sparse):
        _assert_conforms(prior, BinarySolverPrior)
    _assert_conforms(MulticlassFITCPrior(*(np.stack([a] * CLASSES) for a in fitc)), SolverPrior)
    dense_posts = [dense.posterior(w), dense.posterior(w - 0.5)]  # non-negative and indefinite sites
    assert {type(p).__name__ for p in dense_posts} == {"LatentPosterior", "IndefiniteSitePosterior"}
    for post in dense_posts:
        _assert_conforms(post, DenseLatentPosterior)
    _assert_conforms(sparse.posterior(w), FITCLatentPosterior)


def test_every_multiclass_posterior_conforms(problem):
    d = np.full((CLASSES, N), 0.2)
    K3 = np.stack([problem["K"]] * CLASSES)
    prior = MulticlassFITCPrior(*(np.stack([a] * CLASSES) for a in problem["fitc"]))
    for post in (CoupledBlockPosterior(K3, d), prior.posterior(d)):
        _assert_conforms(post, MulticlassPosterior)


def test_every_approximation_returns_a_solve_result(problem):
    K, y, codes = problem["K"], problem["y"], problem["codes"]
    K3 = np.stack([K] * CLASSES)
    results = [pymc_gpc.ep(K, y, L.Probit()), pymc_gpc.laplace(K, y, L.Logistic()),
               pymc_gpc.meanfield(K, y, L.Probit()), pymc_gpc.adf(K, y, L.Probit()),
               pymc_gpc.ep(FITCPrior(*problem["fitc"]), y, L.Probit()),
               softmax_laplace(K3, codes, L.Softmax()), multinomial_probit_ep(K3, codes, L.MultinomialProbit())]
    for res in results:
        _assert_conforms(res, SolveResult)
        assert np.isfinite(res.log_z)


def test_every_prior_structure_conforms():
    assert len(STRUCTURES) == 6
    for structure in STRUCTURES:
        _assert_conforms(structure, PriorStructure)


# Planted breakages: each must be reported, by name.

class _NoExpectation(L.Probit):
    expected_log_lik = None  # a likelihood that cannot serve EM-EP's M-step


class _TiltedWithoutVariance:
    """A duck-typed likelihood whose ``tilted`` drops the cavity variance."""

    kind, param_names, supports_laplace, log_concave, n_params, params = 0, (), True, True, 0, np.zeros(0)

    def params_tensor(self): ...
    def check_params(self, params): ...
    def tilted(self, y, mu, params=None): ...
    def log_lik(self, y, f, params=None): ...
    def expected_log_lik(self, y, mu, s2, params=None): ...
    def predict(self, mu, s2, params=None): ...


class _PredictWithoutCovariance(L.Softmax):
    def predict(self, mean, cov, size=None):  # no ``predictive`` keyword
        return super().predict(mean, cov, size)


def _posterior_requiring_rough(problem):
    post = DensePrior(problem["K"]).posterior(np.ones(N))

    class Broken(type(post)):
        def ep_gradient(self, b, rough):  # the contract's callers may leave ``rough`` out
            return super().ep_gradient(b, rough)

    post.__class__ = Broken
    return post


class _MissingMember:
    """A posterior with everything but ``var_diag``."""

    rough = False

    def half_logdet_B(self): ...
    def weights(self, v): ...
    def mean_and_weights(self, v): ...
    def R_times(self, v): ...
    def sigma_times(self, v): ...
    def kernel_gradient(self, outer, scale_R): ...
    def ep_gradient(self, b, rough=False): ...
    def predict(self, a, K_cross, k_diag): ...


def test_a_likelihood_without_a_method_is_caught():
    gaps = conformance_gaps(_NoExpectation(), BinaryLikelihood)
    assert gaps == ["_NoExpectation.expected_log_lik is not callable"]


def test_an_incompatible_signature_is_caught(problem):
    gaps = conformance_gaps(_TiltedWithoutVariance(), BinaryLikelihood)
    assert gaps == ["_TiltedWithoutVariance.tilted takes the contract's 's2' as its 'params'"]
    gaps = conformance_gaps(_PredictWithoutCovariance(), L.MulticlassLikelihood)
    assert gaps == ["_PredictWithoutCovariance.predict does not accept the keyword 'predictive'"]
    gaps = conformance_gaps(_posterior_requiring_rough(problem), LatentPosterior)
    assert gaps == ["Broken.ep_gradient requires ['rough'], which the contract does not pass"]


def test_a_missing_member_is_caught_by_gaps_and_isinstance():
    broken = _MissingMember()
    assert conformance_gaps(broken, LatentPosterior) == ["_MissingMember has no 'var_diag'"]
    assert not isinstance(broken, LatentPosterior)
    broken.var_diag = lambda: None
    assert isinstance(broken, LatentPosterior)
