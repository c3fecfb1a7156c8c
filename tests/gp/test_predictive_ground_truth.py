"""The PyMC-facing outputs against independent computations: the dense ``conditional``'s
mean and covariance (the joint Gaussian over training and new inputs with the training
sites, formed densely: ``ground_truth.gaussian_with_sites``), and the numbers that
``pymc_gpc.sample`` / ``add_log_likelihood`` put in the log-likelihood group (each draw's
LOO terms recomputed by the engine at that draw's kernel; ``test_loo_ground_truth``
checks the engine's terms against their definitions).
"""

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
import pytest

import pymc_gpc
from pymc_gpc import ep
from pymc_gpc import likelihoods as L

from ..conftest import random_problem
from ..conftest import se_kernel as _se
from ..reference.ground_truth import gaussian_with_sites, laplace_mode

JITTER = 1e-6  # pymc.gp.util.JITTER_DEFAULT: the GP's on K, and conditional's on the new block


def _model(cls, X, y, lik):
    with pm.Model() as model:
        log_ls = pm.Normal("log_ls", 0, 1, shape=X.shape[1])
        log_amp = pm.Normal("log_amp", 0, 1)
        cov = pt.exp(log_amp) * pm.gp.cov.ExpQuad(X.shape[1], ls=pt.exp(log_ls))
        gp = cls(cov_func=cov, likelihood=lik)
        gp.marginal_likelihood("y", X=X, y=y)
    return model, gp


@pytest.mark.parametrize("cls", [pymc_gpc.MarginalEP, pymc_gpc.MarginalLaplace], ids=["ep", "laplace"])
def test_conditional_mean_and_covariance_against_the_joint_gaussian(cls):
    """f* | y under q: the prior over (f, f*) jointly, times the training sites (EP's tau, nu
    from a tight solve; Laplace's W and W f^ + g at the dense mode, ``ground_truth``), its
    f*-block by dense linear algebra. The conditional adds its jitter to the diagonal."""
    rng = np.random.default_rng(21)
    X, y = random_problem(rng, 12)
    Xs = rng.normal(size=(5, 2))
    lik = L.Probit()
    model, gp = _model(cls, X, y, lik)
    with model:
        f_star = gp.conditional("f_star", Xs)
    mu, cov = f_star.owner.inputs[-2:]
    ins = [model.rvs_to_values[model[name]] for name in ("log_ls", "log_amp")]
    fn = pytensor.function(ins, model.replace_rvs_by_values([mu, cov]))
    log_ls, log_amp = np.log([0.9, 1.4]), np.log(2.5)
    mean, C = fn(log_ls, log_amp)
    ls, amp = np.exp(log_ls), np.exp(log_amp)
    Z = np.vstack([X, Xs])
    K_joint = _se(Z, Z, ls, amp) + JITTER * np.eye(17)
    K = K_joint[:12, :12]
    if cls is pymc_gpc.MarginalEP:
        st = ep(K, y, lik, tol=1e-12).state
        tau, nu = st.tau, st.nu
    else:
        f, W, g = laplace_mode(K, y, lik)
        tau, nu = W, W * f + g
    want_mean, Sigma = gaussian_with_sites(K_joint, np.append(tau, np.zeros(5)), np.append(nu, np.zeros(5)))
    np.testing.assert_allclose(mean, want_mean[12:], atol=1e-6)
    np.testing.assert_allclose(C, Sigma[12:, 12:] + JITTER * np.eye(5), atol=1e-6)


def test_log_likelihood_group_holds_each_draws_loo_terms():
    """Each draw's log-likelihood numbers (chain, draw, observation) are the engine's LOO
    terms at that draw's hyperparameters. The sampler solves EP at its loose tolerance
    (site change 1e-2), which moved a term by up to 7.8e-3 here (bound 0.02); the terms of
    the 15 observations range from -0.2 to -1.4, so a term of another observation, or of
    the wrong sign, is far outside it."""
    rng = np.random.default_rng(22)
    X, y = random_problem(rng, 15)
    model, _ = _model(pymc_gpc.MarginalEP, X, y, L.Probit())
    with model:
        idata = pymc_gpc.sample(draws=6, tune=6, chains=1, random_seed=3, progressbar=False,
                                nuts_sampler="pymc", compute_convergence_checks=False)
    terms = np.asarray(idata["log_likelihood"]["y"])
    post = idata["posterior"]
    assert terms.shape == (1, 6, 15)
    for d in range(6):
        ls = np.exp(np.asarray(post["log_ls"])[0, d])
        amp = np.exp(float(post["log_amp"][0, d]))
        want = ep(_se(X, X, ls, amp) + JITTER * np.eye(15), y, L.Probit(), tol=1e-12).loo_log_p
        np.testing.assert_allclose(terms[0, d], want, atol=0.02)
