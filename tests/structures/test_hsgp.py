"""The basis-function (HSGP) prior structure under EP and Laplace, against ground truth.

* the basis and sqrt S against ``pm.gp.HSGP.prior_linearized`` (every boundary condition,
  drop_first, c and L), the periodic basis against ``pm.gp.HSGPPeriodic``'s and its
  covariance against the periodic kernel itself;
* the weight-space evidence and gradient against the package's dense computation on the
  kernel matrix Phi diag(S) Phi^T (1e-8), binary and ordinal likelihoods, EP and Laplace;
* as m grows, the evidence converges (monotonically) to the dense model's with the exact
  kernel, on a 1-D and a 2-D problem;
* gradients in every kernel hyperparameter (through PyTensor's graph of S) and likelihood
  parameter against central finite differences;
* predictions against the dense predictive with the basis cross-covariance;
* a kernel without a spectral density, and bad bases, are ValueErrors naming the problem;
* all S = 0 (the spectral density underflowed): the evidence, LOO terms and Laplace's gradient
  of the prior f = 0 in closed form, on the Ops' path (``solve_with_retries``);
* the structure an evidence Op asks (``HSGPStructure``): its S graph and cotangent give the
  finite-difference gradient in hyperparameters that are PyTensor variables.
"""

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
import pytest

from pymc_gpc import ep, laplace
from pymc_gpc.approximations import registry
from pymc_gpc.approximations.solve import solve_with_retries
from pymc_gpc.likelihoods import Logistic, OrderedLogit, OrderedProbit, Probit, ProbitBias, StepLabelNoise
from pymc_gpc.structures.dense import LatentPosterior
from pymc_gpc.structures import NonFiniteKernelError
from pymc_gpc.structures.dense import chol_lower
from pymc_gpc.structures.hsgp import (BOUNDARIES, DenseBasis, HSGPPrior, HSGPStructure, LaplacianBasis,
                                      PeriodicBasis, spectral_variances)

RUNS = {
    "ep": lambda K, y, lik, p=None: ep(K, y, lik, p, tol=1e-12),
    "laplace": lambda K, y, lik, p=None: laplace(K, y, lik, p, tol=1e-13),
}
LIKELIHOODS = [Probit(), ProbitBias(0.4), Logistic(), StepLabelNoise(0.1),
               OrderedProbit([-0.6, 0.5]), OrderedLogit([-0.8, 0.7])]
CASES = [(lik, name) for lik in LIKELIHOODS for name in RUNS if lik.supports_laplace or name != "laplace"]
IDS = [f"{type(lik).__name__}-{name}" for lik, name in CASES]


def labels(lik, X, rng):
    """Labels of a smooth latent function with noise: {-1, 1}, or 0..K-1 for an ordinal likelihood."""
    f = np.sin(2.5 * X[:, 0]) + (0.5 * np.cos(2.0 * X[:, 1]) if X.shape[1] > 1 else 0.0)
    f = f + 0.4 * rng.normal(size=len(X))
    if hasattr(lik, "n_classes"):
        return np.digitize(f, [-0.4, 0.4])
    return np.where(f > 0, 1, -1)


def problem(lik, n, d, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1.0, 1.0, size=(n, d))
    return X, labels(lik, X, rng)


def kernel(d, eta=1.3, ls=0.5):
    return eta**2 * pm.gp.cov.ExpQuad(d, ls=[ls] * d)


def basis_prior(X, m, cov, c=2.0, product_to_sum=True):
    """(prior, Phi, S): the prior on the basis operator (``LaplacianBasis.at``) or on the array Phi."""
    basis = LaplacianBasis(X, m=[m] * X.shape[1], c=c)
    Phi = basis(X)
    S = basis.variances(cov).eval()
    return HSGPPrior(basis.at(X) if product_to_sum else Phi, S), Phi, S


# --- the basis ---------------------------------------------------------------------------

@pytest.mark.parametrize("d, m, kw", [
    (1, [17], dict(c=1.5)),
    (1, [12], dict(L=[2.5], drop_first=True)),
    (2, [6, 5], dict(c=1.3)),
    (2, [4, 7], dict(c=1.8, boundary=("neumann", "dirichlet-neumann"))),
    (1, [9], dict(c=1.6, boundary="neumann-dirichlet")),
    (2, [5, 5], dict(c=1.4, boundary="neumann", drop_first=True)),
])
def test_basis_and_sqrt_psd_equal_pymc_prior_linearized(d, m, kw):
    rng = np.random.default_rng(3)
    X = rng.normal(size=(40, d)) * [1.0, 2.0][:d] + [0.5, -1.0][:d]
    cov = kernel(d, eta=0.8, ls=0.7)
    with pytest.warns(DeprecationWarning) if kw.get("drop_first") else _no_warning():
        gp = pm.gp.HSGP(m=m, cov_func=cov, **kw)
    phi, sqrt_psd = gp.prior_linearized(pt.as_tensor(X))
    basis = LaplacianBasis(X, m=m, **kw)
    np.testing.assert_allclose(basis(X), phi.eval(), rtol=0, atol=1e-14)
    np.testing.assert_allclose(np.sqrt(basis.variances(cov).eval()), sqrt_psd.eval(), rtol=1e-14, atol=0)
    np.testing.assert_array_equal(basis.L, gp.L.eval())


@pytest.mark.parametrize("d, m, kw", [
    (1, [9], dict(c=1.5)),
    (2, [5, 4], dict(c=1.3, drop_first=True)),
    (2, [4, 6], dict(c=1.6, boundary=("neumann", "dirichlet-neumann"))),
    (3, [3, 4, 2], dict(c=1.5, boundary="neumann-dirichlet")),
])
def test_product_to_sum_operator_equals_the_dense_products(d, m, kw):
    """``CosineProductBasis`` (numerics.product_to_sum) against the same products on the array Phi,
    signed weights included (the step likelihood's negative EP sites)."""
    rng = np.random.default_rng(11)
    X = rng.normal(size=(300, d))
    basis = LaplacianBasis(X, m=m, **kw)
    op, dense = basis.at(X), DenseBasis(basis(X))
    np.testing.assert_allclose(op.dense(), dense.Phi, rtol=0, atol=1e-14)
    w, v, z = rng.normal(size=300), rng.normal(size=300), rng.normal(size=basis.M)
    np.testing.assert_allclose(op.gram(w), dense.gram(w), rtol=0, atol=1e-13 * np.sum(np.abs(w)))
    np.testing.assert_allclose(op.rmatvec(v), dense.rmatvec(v), rtol=0, atol=1e-13)
    np.testing.assert_allclose(op.matvec(z), dense.matvec(z), rtol=0, atol=1e-13)
    S = rng.uniform(0.1, 1.0, basis.M)
    s = np.sqrt(S)
    L_A = chol_lower(np.eye(basis.M) + s[:, None] * dense.gram(50.0 * np.abs(w)) * s)
    np.testing.assert_allclose(op.quad_diag(L_A, s), dense.quad_diag(L_A, s), rtol=1e-10)
    np.testing.assert_allclose(op.sq_diag(S), dense.sq_diag(S), rtol=1e-12)


class _no_warning:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_periodic_basis_equals_pymc_expansion_and_its_covariance_the_periodic_kernel():
    X = np.linspace(-1.0, 3.0, 50)[:, None]
    cov = pm.gp.cov.Periodic(1, period=1.7, ls=0.9)
    gp = pm.gp.HSGPPeriodic(m=12, scale=1.0, cov_func=cov)
    (phi_cos, phi_sin), _ = gp.prior_linearized(pt.as_tensor(X))
    basis = PeriodicBasis(X, 12, cov)
    Phi = basis(X)
    np.testing.assert_allclose(Phi[:, :12], phi_cos.eval(), rtol=0, atol=1e-14)
    np.testing.assert_allclose(Phi[:, 12:], phi_sin.eval()[:, 1:], rtol=0, atol=1e-14)
    S = basis.variances(scale=1.5).eval()
    K = 1.5**2 * cov(X).eval()
    np.testing.assert_allclose(Phi @ np.diag(S) @ Phi.T, K, rtol=0, atol=1e-12)


def test_periodic_basis_needs_a_constant_period():
    cov = pm.gp.cov.Periodic(1, period=pt.scalar("period"), ls=0.9)
    with pytest.raises(ValueError, match="period"):
        PeriodicBasis(np.zeros((3, 1)) + [[0.0], [1.0], [2.0]], 5, cov)


@pytest.mark.parametrize("cov", [pm.gp.cov.Linear(1, c=0.0), pm.gp.cov.Periodic(1, period=1.0, ls=1.0),
                                 pm.gp.cov.ExpQuad(1, ls=1.0) * pm.gp.cov.Matern52(1, ls=1.0)],
                         ids=["Linear", "Periodic", "Prod"])
def test_kernel_without_spectral_density_is_a_value_error_naming_it(cov):
    basis = LaplacianBasis(np.linspace(0, 1, 5)[:, None], m=[4], c=1.5)
    with pytest.raises(ValueError, match=f"{type(cov).__name__} has no power_spectral_density"):
        basis.variances(cov)
    with pytest.raises(ValueError, match="power_spectral_density"):
        spectral_variances(cov, basis.omega)


@pytest.mark.parametrize("kw, match", [
    (dict(m=[5]), "exactly one of L"),
    (dict(m=[5], c=1.5, L=[2.0]), "exactly one of L"),
    (dict(m=[5, 5], c=1.5), "one positive integer per active dimension"),
    (dict(m=[0], c=1.5), "one positive integer"),
    (dict(m=[5], L=[-1.0]), "positive and finite"),
    (dict(m=[5], c=1.5, boundary="periodic"), "boundary must be one of"),
])
def test_bad_basis_arguments_are_value_errors(kw, match):
    with pytest.raises(ValueError, match=match):
        LaplacianBasis(np.linspace(0, 1, 5)[:, None], **kw)


def test_constant_input_column_is_a_value_error():
    with pytest.raises(ValueError, match="constant input column"):
        LaplacianBasis(np.ones((5, 1)), m=[5], c=1.5)


def test_prior_inputs_are_checked():
    with pytest.raises(ValueError, match="shapes do not match"):
        HSGPPrior(np.ones((4, 3)), np.ones(2))
    with pytest.raises(ValueError, match="negative entry"):
        HSGPPrior(np.ones((4, 2)), [1.0, -1.0])
    with pytest.raises(NonFiniteKernelError, match="NaN or inf"):
        HSGPPrior(np.ones((4, 2)), [1.0, np.nan])
    with pytest.raises(ValueError, match="2 points"):
        ep(HSGPPrior(np.ones((2, 2)), [1.0, 1.0]), np.array([1, -1, 1]), Probit())


# --- against the dense computation on Phi diag(S) Phi^T ----------------------------------

def dense_S_gradient(dK, Phi):
    """d log Z / dS_j = phi_j^T (d log Z / dK) phi_j, from a dense gradient."""
    return np.einsum("ij,ik,kj->j", Phi, dK, Phi)


@pytest.mark.parametrize("product_to_sum", [True, False], ids=["operator", "array"])
@pytest.mark.parametrize("d, n, m", [(1, 50, 24), (2, 60, 9)], ids=["1d", "2d"])
@pytest.mark.parametrize("lik, approx", CASES, ids=IDS)
def test_evidence_and_gradient_equal_dense_computation_on_basis_covariance(lik, approx, d, n, m, product_to_sum):
    X, y = problem(lik, n, d)
    prior, Phi, S = basis_prior(X, m, kernel(d), product_to_sum=product_to_sum)
    K = Phi @ np.diag(S) @ Phi.T
    if isinstance(lik, StepLabelNoise):
        # negative sites: the dense route factors K (with a jitter of 1e-10 mean diag K), so K
        # gets a nugget of 1e-6 mean diag K, and the basis n columns sqrt(nugget) e_i (an array
        # basis: the operator's signed products are tested in test_product_to_sum_operator...)
        nugget = 1e-6 * np.mean(np.diag(K))
        K = K + nugget * np.eye(n)
        Phi = np.hstack([Phi, np.sqrt(nugget) * np.eye(n)])
        prior = HSGPPrior(Phi, np.concatenate([S, np.ones(n)]))
    hs, dense = RUNS[approx](prior, y, lik), RUNS[approx](K, y, lik)
    assert hs.converged and dense.converged
    tol = 1e-6 if isinstance(lik, StepLabelNoise) else 1e-8
    assert abs(hs.log_z - dense.log_z) <= tol * max(1.0, abs(dense.log_z))
    dS = dense_S_gradient(dense.dlog_z_dK, Phi)
    np.testing.assert_allclose(hs.dlog_z_dK.S, dS, rtol=tol, atol=tol * np.max(np.abs(dS)))
    np.testing.assert_allclose(hs.dlog_z_dparams, dense.dlog_z_dparams, rtol=tol, atol=tol)
    np.testing.assert_allclose(hs.mean, dense.mean, rtol=0, atol=tol)
    np.testing.assert_allclose(hs.var, dense.var, rtol=tol, atol=0)


@pytest.mark.parametrize("product_to_sum", [True, False], ids=["operator", "array"])
def test_gradient_in_S_is_accurate_where_the_data_dominate_and_where_S_is_tiny(product_to_sum):
    """Q_jj's two forms (module docstring) against the dense gradient, with S spanning
    1e-200 to 1e3 and site precisions large enough that S_j H_jj >> 1 for some j."""
    rng = np.random.default_rng(5)
    X = rng.uniform(-1, 1, size=(80, 1))
    y = labels(Probit(), X, rng)
    basis = LaplacianBasis(X, m=[30], c=1.5)
    Phi = basis(X)
    S = np.logspace(3, -200, 30)
    res = ep(HSGPPrior(basis.at(X) if product_to_sum else Phi, S), y, Probit(), tol=1e-12)
    assert np.max(S * np.diag(res.posterior.H)) > 10.0 and np.min(S * np.diag(res.posterior.H)) < 1e-100
    dense = ep(Phi @ np.diag(S) @ Phi.T, y, Probit(), tol=1e-12)
    dS = dense_S_gradient(dense.dlog_z_dK, Phi)
    big = S * np.diag(res.posterior.H) > 1.0
    np.testing.assert_allclose(res.dlog_z_dK.S[big], dS[big], rtol=1e-7)  # |dS| ~ 1/S there
    np.testing.assert_allclose(res.dlog_z_dK.S[~big], dS[~big], rtol=1e-7, atol=1e-8 * np.max(np.abs(dS[~big])))
    assert np.all(np.isfinite(res.dlog_z_dK.S))


ZERO_S_CASES = [(lik, name) for lik, name in CASES if not isinstance(lik, StepLabelNoise)]


def zero_prior_closed_form(lik, y, Phi):
    """With S = 0 the prior is f = 0: log Z = sum_i log p(y_i | 0), the LOO terms log p(y_i | 0),
    and, since log Z = log p(y | 0) + (1/2) g^T K~ g + (1/2) sum_i h_i K~_ii + O(K~^2) (g, h the
    first two f-derivatives of log p at 0), d log Z / dS_j = ((Phi^T g)_j^2 + (Phi^2)^T h)_j / 2."""
    y_signed = np.asarray(y, float) if hasattr(lik, "n_classes") else np.where(np.asarray(y) > 0, 1.0, -1.0)
    d = lik.log_lik(y_signed, np.zeros(len(y)))
    return np.sum(d.lp), d.lp, 0.5 * ((Phi.T @ d.d1) ** 2 + (Phi ** 2).T @ d.d2)


@pytest.mark.parametrize("lik, approx", ZERO_S_CASES, ids=[f"{type(lik).__name__}-{a}" for lik, a in ZERO_S_CASES])
def test_all_S_zero_gives_the_evidence_of_the_zero_prior(lik, approx):
    """Extreme hyperparameters underflow the spectral density to S = 0 everywhere: K~ = 0,
    which EP's cavity floor and LA-LOO divide by. On the Ops' path (``solve_with_retries``
    with the "hsgp" schedule) the evidence and the LOO terms are the closed form of f = 0
    (``zero_prior_closed_form``), converged; Laplace's gradient in S too (EP stops at its
    first sweep, which its scale-free test calls converged at a vanishing variance; the
    gradient in the hyperparameters is zero there either way, dS/dtheta being 0 where S
    underflowed). The step likelihood is left out: log p(y | f) has no value at f = 0."""
    X, y = problem(lik, 40, 2)
    basis = LaplacianBasis(X, m=[6, 5], c=1.5)
    options = {**registry.APPROXIMATIONS[approx].engine_defaults}
    res, _ = solve_with_retries(approx, HSGPPrior(basis.at(X), np.zeros(basis.M)), y, lik, lik.resolve_params(None),
                                None, options, retry_options=registry.get(approx).retry_schedule(options, "hsgp"))
    log_z, loo, dS = zero_prior_closed_form(lik, y, basis(X))
    assert res.converged
    np.testing.assert_allclose(res.log_z, log_z, rtol=1e-12)
    np.testing.assert_allclose(res.loo_log_p, loo, rtol=1e-12)
    if approx == "laplace":
        np.testing.assert_allclose(res.dlog_z_dK.S, dS, rtol=1e-10, atol=1e-12 * np.max(np.abs(dS)))
    assert np.all(np.isfinite(res.dlog_z_dK.S))
    # the predictive at new inputs: f* = 0, so p(y* | 0) for every class (a zero variance would
    # have the likelihoods' predictive divide by it: the variances are floored, ``predict``)
    mean, var = res.posterior.predict(res.a, basis.at(np.random.default_rng(1).uniform(-1, 1, size=(5, 2))))
    assert np.all(mean == 0.0) and np.all(var > 0.0)
    p = np.asarray(lik.predict(mean, var))
    classes = np.arange(p.shape[1]) if p.ndim > 1 else np.array([1.0])
    want = np.exp([lik.log_lik(np.full(5, float(k)), np.zeros(5)).lp for k in classes]).T
    np.testing.assert_allclose(p.reshape(want.shape), want, rtol=1e-12)


@pytest.mark.parametrize("approx", list(RUNS))
def test_prediction_matches_dense_predictive_with_basis_cross_covariance(approx):
    X, y = problem(Probit(), 60, 2, seed=2)
    basis = LaplacianBasis(X, m=[8, 8], c=2.0)
    Phi, S = basis(X), basis.variances(kernel(2)).eval()
    lik = Probit() if approx == "ep" else Logistic()
    res = RUNS[approx](HSGPPrior(Phi, S), y, lik)
    Xs = np.random.default_rng(9).uniform(-1.0, 1.0, size=(25, 2))
    Phis = basis(Xs)
    mean, var = res.posterior.predict(res.a, Phis)
    K = Phi @ np.diag(S) @ Phi.T
    dense = RUNS[approx](K, y, lik)
    mean_d, var_d = dense.posterior.predict(dense.a, Phi @ np.diag(S) @ Phis.T, np.einsum("ij,ij,j->i", Phis, Phis, S))
    np.testing.assert_allclose(mean, mean_d, rtol=0, atol=1e-8)
    np.testing.assert_allclose(var, var_d, rtol=1e-8, atol=1e-12)
    assert isinstance(dense.posterior, LatentPosterior)


# --- convergence to the exact kernel -----------------------------------------------------

@pytest.mark.parametrize("d, n, c, ms", [(1, 80, 4.0, [10, 14, 18, 24, 32]), (2, 70, 3.0, [6, 8, 11, 14, 18])],
                         ids=["1d", "2d"])
@pytest.mark.parametrize("approx", list(RUNS))
def test_evidence_converges_to_the_exact_kernel_as_m_grows(approx, d, n, c, ms):
    lik = Probit() if approx == "ep" else Logistic()
    X, y = problem(lik, n, d, seed=4)
    cov = kernel(d, eta=1.0, ls=0.6)
    K = cov(X).eval()  # positive semi-definite: B = I + W^1/2 K W^1/2 needs no jitter
    exact = RUNS[approx](K, y, lik).log_z
    # the box reaches 2 (c = 3) or 3 (c = 4) half-ranges beyond the data: the boundary's
    # reflections of the kernel, k(2 (L - |x|)), are below 3e-10 (1e-21); what remains is
    # the spectral truncation, exp(-ell^2 omega_max^2 / 2) with omega_max = pi m / (2 L)
    errors = [abs(RUNS[approx](basis_prior(X, m, cov, c=c)[0], y, lik).log_z - exact) for m in ms]
    assert all(b < a for a, b in zip(errors, errors[1:])), errors
    assert errors[0] > 1e-3 and errors[-1] < 1e-8, errors


# --- finite differences ------------------------------------------------------------------

def hyper_graph(d, matern=False):
    """(theta, S(theta) function, dS/dtheta function) for eta^2 k(ls_1..ls_d), k ExpQuad or Matern52."""
    theta = pt.vector("theta")
    base = pm.gp.cov.Matern52 if matern else pm.gp.cov.ExpQuad
    cov = theta[0] ** 2 * base(d, ls=theta[1:1 + d])
    return theta, cov


@pytest.mark.parametrize("matern", [False, True], ids=["ExpQuad", "Matern52"])
@pytest.mark.parametrize("lik, approx", [(Probit(), "ep"), (OrderedProbit([-0.5, 0.6]), "ep"),
                                         (ProbitBias(0.3), "laplace"), (OrderedLogit([-0.7, 0.4]), "laplace")],
                         ids=["Probit-ep", "OrderedProbit-ep", "ProbitBias-laplace", "OrderedLogit-laplace"])
def test_gradients_in_every_hyperparameter_match_finite_differences(lik, approx, matern):
    d = 2
    X, y = problem(lik, 70, d, seed=6)
    basis = LaplacianBasis(X, m=[9, 9], c=2.0)
    Phi = basis(X)
    theta, cov = hyper_graph(d, matern)
    S_graph = basis.variances(cov)
    S_of = pytensor.function([theta], S_graph)
    # vectorize=True: the rows of the Jacobian as one vectorised graph, not a Scan (whose inner
    # function PyTensor links with C thunks even under FAST_COMPILE: some 40 C modules to
    # compile, 16 CPU-s of g++ on an empty compiledir)
    J_of = pytensor.function([theta], pytensor.gradient.jacobian(S_graph, theta, vectorize=True))
    params0 = np.asarray(lik.params, float)

    def log_z(th, p):
        return RUNS[approx](HSGPPrior(Phi, S_of(th)), y, lik, p).log_z

    th0 = np.array([1.2, 0.55, 0.8])
    res = RUNS[approx](HSGPPrior(Phi, S_of(th0)), y, lik, params0)
    grad_theta = res.dlog_z_dK.S @ J_of(th0)
    h = 1e-5
    for k in range(th0.size):
        e = np.zeros_like(th0)
        e[k] = h
        fd = (log_z(th0 + e, params0) - log_z(th0 - e, params0)) / (2 * h)
        assert grad_theta[k] == pytest.approx(fd, rel=1e-5, abs=1e-6), (k, grad_theta[k], fd)
    for k in range(params0.size):
        e = np.zeros_like(params0)
        e[k] = h
        fd = (log_z(th0, params0 + e) - log_z(th0, params0 - e)) / (2 * h)
        assert res.dlog_z_dparams[k] == pytest.approx(fd, rel=1e-5, abs=1e-6), (k, res.dlog_z_dparams[k], fd)


def test_every_boundary_condition_runs_ep_equal_to_dense():
    lik = Probit()
    X, y = problem(lik, 40, 1, seed=8)
    for boundary in BOUNDARIES:
        basis = LaplacianBasis(X, m=[15], c=1.7, boundary=boundary)
        Phi, S = basis(X), basis.variances(kernel(1)).eval()
        hs, dense = RUNS["ep"](HSGPPrior(Phi, S), y, lik), RUNS["ep"](Phi @ np.diag(S) @ Phi.T, y, lik)
        assert hs.log_z == pytest.approx(dense.log_z, rel=1e-10), boundary


# --- the structure an evidence Op asks -----------------------------------------------------

@pytest.mark.parametrize("approx", list(RUNS))
def test_structure_cotangent_through_the_S_graph_matches_finite_differences(approx):
    lik = Probit() if approx == "ep" else Logistic()
    X, y = problem(lik, 60, 2, seed=12)
    eta, ls = pt.dscalar("eta"), pt.dvector("ls")
    cov = eta**2 * pm.gp.cov.Matern32(3, ls=ls, active_dims=[0, 2])
    X3 = np.column_stack([X[:, 0], np.zeros(len(X)), X[:, 1]])  # the kernel reads columns 0 and 2
    X3[0, 1] = 5.0  # a column the kernel does not read moves the centre only
    structure = HSGPStructure(m=[10, 9], c=2.0)
    [S] = structure.kernel_inputs(cov, pt.as_tensor(X3))
    cot = pt.dvector("cot")
    S_of = pytensor.function([eta, ls], S)
    pull = pytensor.function([eta, ls, cot], pytensor.grad(pt.sum(S * cot), [eta, ls]))

    def log_z(e, l):
        return RUNS[approx](structure.prior_from(S_of(e, l)), y, lik).log_z

    e0, l0 = 0.9, np.array([0.5, 0.7])
    res = RUNS[approx](structure.prior_from(S_of(e0, l0)), y, lik)
    (dS,) = structure.kernel_cotangents(res)
    g_eta, g_ls = pull(e0, l0, dS)
    h = 1e-5
    assert g_eta == pytest.approx((log_z(e0 + h, l0) - log_z(e0 - h, l0)) / (2 * h), rel=1e-5)
    for k in range(2):
        e = np.eye(2)[k] * h
        assert g_ls[k] == pytest.approx((log_z(e0, l0 + e) - log_z(e0, l0 - e)) / (2 * h), rel=1e-5)
    mean, var = res.posterior.predict(res.a, structure.cross_covariances(X3[:7]))
    np.testing.assert_allclose(mean, res.mean[:7], rtol=0, atol=1e-10)
    np.testing.assert_allclose(var, res.posterior.var_diag()[:7], rtol=1e-10)


def test_structure_takes_the_periodic_expansion_for_a_periodic_kernel():
    X = np.linspace(0.0, 4.0, 50)[:, None]
    y = np.where(np.sin(2 * np.pi * X[:, 0] / 1.3) > 0, 1, -1)
    structure = HSGPStructure(m=15, scale=1.4)
    cov = pm.gp.cov.Periodic(1, period=1.3, ls=0.8)
    [S] = structure.kernel_inputs(cov, X)
    res = RUNS["ep"](structure.prior_from(S.eval()), y, Probit())
    dense = RUNS["ep"](1.4**2 * cov(X).eval(), y, Probit())
    assert res.log_z == pytest.approx(dense.log_z, rel=1e-8)
    assert structure.operator.M == 29


def test_structure_arguments_and_kernels_are_checked():
    X = np.linspace(0.0, 1.0, 10)[:, None]
    with pytest.raises(ValueError, match="at most one of L"):
        HSGPStructure(m=[5], L=[1.0], c=1.5)
    with pytest.raises(ValueError, match="Linear has no power_spectral_density"):
        HSGPStructure(m=[5], c=1.5).kernel_inputs(pm.gp.cov.Linear(1, c=0.0), X)
    with pytest.raises(ValueError, match="scale is for a periodic kernel"):
        HSGPStructure(m=[5], c=1.5, scale=2.0).kernel_inputs(pm.gp.cov.ExpQuad(1, ls=1.0), X)
    with pytest.raises(ValueError, match="exactly one of L"):
        HSGPStructure(m=[5]).kernel_inputs(pm.gp.cov.ExpQuad(1, ls=1.0), X)
    with pytest.raises(RuntimeError, match="kernel_inputs"):
        HSGPStructure(m=[5], c=1.5).prior_from(np.ones(5))
