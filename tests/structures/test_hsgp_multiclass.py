"""approx="HSGP" with several classes (issue 62): one HSGP prior per class
(``structures.multiclass_hsgp``) under softmax Laplace and nested EP, against

* the dense multi-class solvers on the same approximate kernels Phi diag(S_k) Phi^T,
  formed explicitly (evidence, gradient in S, LOO terms, predictive);
* central finite differences of that dense evidence (every hyperparameter, through the GP);
* the dense model with the exact kernels, as m grows (1-D);

and the periodic expansion (``pm.gp.HSGPPeriodic``) through the GP classes against the
dense computation on its basis covariance and on scale^2 times the periodic kernel.
"""

import pickle

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
import pytest

import pymc_gpc
from pymc_gpc import likelihoods as L
from pymc_gpc.approximations import registry
from pymc_gpc.structures.hsgp import LaplacianBasis, PeriodicBasis
from pymc_gpc.structures.multiclass_hsgp import MulticlassHSGPGradient, MulticlassHSGPPrior
from pymc_gpc.structures.select import HSGP_MULTICLASS, HSGPBinary, select_structure

SOLVERS = {"laplace": (pymc_gpc.softmax_laplace, L.Softmax, {}),
           "ep": (pymc_gpc.multinomial_probit_ep, L.MultinomialProbit, {"tol": 1e-11})}
CLASSES = {"laplace": pymc_gpc.MarginalLaplace, "ep": pymc_gpc.MarginalEP}
N, M, BOX = 36, 40, 2.0
POINT = {"log_ls": np.array([-0.4, 0.0, 0.3]), "log_eta": np.array([0.3, 0.0, -0.2])}


def _data(n=N, seed=0):
    rng = np.random.default_rng(seed)
    X = np.sort(rng.uniform(-2.0, 2.0, n))[:, None]
    y = np.digitize(np.sin(1.5 * X[:, 0]) + 0.4 * rng.normal(size=n), [-0.4, 0.4])
    return X, y


def _kernel(log_ls, log_eta):
    return pt.exp(2.0 * log_eta) * pm.gp.cov.ExpQuad(1, ls=pt.exp(log_ls))


def _solve(approx, prior, y, **kw):
    solver, lik, opts = SOLVERS[approx]
    return solver(prior, y, lik(), **{**opts, **kw})


def _basis_and_S(X, point, m=M, c=BOX):
    basis = LaplacianBasis(X, [m], c=c)
    S = np.stack([basis.variances(_kernel(a, b)).eval() for a, b in zip(point["log_ls"], point["log_eta"])])
    return basis, S


def _dense_approximate(X, point, m=M):
    """The (c, n, n) stack Phi diag(S_k) Phi^T, formed."""
    basis, S = _basis_and_S(X, point, m)
    Phi = basis(X)
    return np.array([(Phi * S_k) @ Phi.T for S_k in S])


# --- the structure against the dense solvers ----------------------------------------------

@pytest.mark.parametrize("approx", list(SOLVERS))
def test_evidence_gradient_and_loo_equal_the_dense_solver_on_the_basis_covariance(approx):
    X, y = _data()
    basis, S = _basis_and_S(X, POINT)
    Phi = basis(X)
    hsgp = _solve(approx, MulticlassHSGPPrior(Phi, S), y)
    dense = _solve(approx, np.array([(Phi * S_k) @ Phi.T for S_k in S]), y)
    assert hsgp.converged and dense.converged
    assert hsgp.log_z == pytest.approx(dense.log_z, abs=1e-8)
    assert isinstance(hsgp.dlog_z_dK, MulticlassHSGPGradient)
    # d log Z / dS_kj = phi_j^T (d log Z / dK_k) phi_j
    reference = np.einsum("ij,kil,lj->kj", Phi, dense.dlog_z_dK, Phi)
    np.testing.assert_allclose(hsgp.dlog_z_dK.S, reference, rtol=0, atol=1e-8 * np.max(np.abs(reference)))
    np.testing.assert_allclose(hsgp.loo_log_p, dense.loo_log_p, atol=1e-8)


def test_gradient_is_accurate_where_S_is_tiny_and_where_the_data_dominate():
    """High frequencies (S_kj down to 1e-30) and large amplitudes take the two forms of
    (Phi_k^T R_kk Phi_k)_jj; both against the dense gradient projected on the basis."""
    X, y = _data(seed=3)
    point = {"log_ls": np.array([-0.2, 0.4, 0.1]), "log_eta": np.array([1.5, -0.5, 2.0])}
    basis, S = _basis_and_S(X, point, m=30)
    Phi = basis(X)
    assert S.min() < 1e-25 and S.max() * N > 1e2
    for approx in SOLVERS:
        hsgp = _solve(approx, MulticlassHSGPPrior(Phi, S), y)
        dense = _solve(approx, np.array([(Phi * S_k) @ Phi.T for S_k in S]), y)
        reference = np.einsum("ij,kil,lj->kj", Phi, dense.dlog_z_dK, Phi)
        np.testing.assert_allclose(hsgp.dlog_z_dK.S, reference, rtol=1e-6, atol=1e-9 * np.max(np.abs(reference)))


@pytest.mark.parametrize("approx", list(SOLVERS))
def test_evidence_converges_to_the_exact_kernels_as_m_grows(approx):
    X, y = _data(n=50, seed=1)
    covs = [_kernel(a, b) for a, b in zip(POINT["log_ls"], POINT["log_eta"])]
    exact = _solve(approx, np.array([f(X).eval() + 1e-10 * np.eye(len(X)) for f in covs]), y).log_z
    errors = []
    for m in (8, 12, 16, 22, 30, 44):
        basis = LaplacianBasis(X, [m], c=4.0)
        S = np.stack([basis.variances(f).eval() for f in covs])
        errors.append(abs(_solve(approx, MulticlassHSGPPrior(basis(X), S), y).log_z - exact))
    assert all(b < a for a, b in zip(errors, errors[1:])), errors
    assert errors[0] > 1e-3 and errors[-1] < 1e-6, errors


def test_per_class_bases_equal_the_dense_solver():
    """A (c, n, M) stack of bases (a Laplacian and a periodic one of the same size)."""
    X, y = _data(seed=2)
    lap = LaplacianBasis(X, [11], c=1.5)
    per = PeriodicBasis(X, 6, pm.gp.cov.Periodic(1, period=3.0, ls=0.7))
    Phi = np.stack([lap(X), per(X), lap(X)])
    S = np.stack([lap.variances(_kernel(-0.3, 0.2)).eval(), per.variances(1.3).eval(),
                  lap.variances(_kernel(0.2, -0.1)).eval()])
    for approx in SOLVERS:
        hsgp = _solve(approx, MulticlassHSGPPrior(Phi, S), y)
        dense = _solve(approx, np.array([(P * S_k) @ P.T for P, S_k in zip(Phi, S)]), y)
        assert hsgp.log_z == pytest.approx(dense.log_z, abs=1e-8)
        reference = np.einsum("kij,kil,klj->kj", Phi, dense.dlog_z_dK, Phi)
        np.testing.assert_allclose(hsgp.dlog_z_dK.S, reference, atol=1e-8 * np.max(np.abs(reference)))


def test_prior_inputs_are_checked():
    Phi, S = np.ones((5, 3)), np.ones((2, 3))
    with pytest.raises(ValueError, match="c >= 2"):
        MulticlassHSGPPrior(Phi, S[:1])
    with pytest.raises(ValueError, match="shapes do not match"):
        MulticlassHSGPPrior(Phi[:, :2], S)
    with pytest.raises(ValueError, match="negative entry"):
        MulticlassHSGPPrior(Phi, -S)
    with pytest.raises(ValueError, match="Phi contains NaN"):
        MulticlassHSGPPrior(np.full((5, 3), np.nan), S)


# --- through the GP classes ----------------------------------------------------------------

def _model(approx, X, y, **options):
    with pm.Model() as model:
        log_ls = pm.Normal("log_ls", 0, 1, shape=3)
        log_eta = pm.Normal("log_eta", 0, 1, shape=3)
        covs = [_kernel(log_ls[k], log_eta[k]) for k in range(3)]
        gp = CLASSES[approx](cov_func=covs, likelihood=SOLVERS[approx][1](), approx="HSGP", m=[M], c=BOX,
                             **SOLVERS[approx][2], **options)
        gp.marginal_likelihood("y", X=X, y=y)
    return model, gp


def _log_prior(point):
    return sum(float(np.sum(pm.logp(pm.Normal.dist(0.0, 1.0), v).eval())) for v in point.values())


@pytest.fixture(scope="module", params=list(SOLVERS))
def fitted(request):
    """(approx, model, gp, X, y): one model per approximation, shared by the tests below."""
    X, y = _data()
    return (request.param, *_model(request.param, X, y), X, y)


def test_logp_and_gradient_in_every_hyperparameter_match_the_dense_computation(fitted):
    approx, model, gp, X, y = fitted
    assert gp.structure.name == "hsgp-multiclass"
    logp = model.compile_logp(jacobian=False)
    dlogp = model.compile_dlogp(jacobian=False)

    def dense(point):
        return _solve(approx, _dense_approximate(X, point), y).log_z

    assert logp(POINT) - _log_prior(POINT) == pytest.approx(dense(POINT), abs=1e-8)
    h, fd = 1e-5, []
    for name in [v.name for v in model.value_vars]:
        for k in range(3):
            up = {n: v.copy() for n, v in POINT.items()}
            down = {n: v.copy() for n, v in POINT.items()}
            up[name][k] += h
            down[name][k] -= h
            fd.append((dense(up) - dense(down)) / (2 * h) - POINT[name][k])
    np.testing.assert_allclose(dlogp(POINT), fd, atol=1e-5)


def test_predict_and_conditional_match_the_dense_predictive(fitted):
    approx, model, gp, X, y = fitted
    Xs = np.linspace(-2.4, 2.4, 7)[:, None]
    p, mean, cov = gp.predict(Xs, point=POINT, return_latent=True)
    basis, S = _basis_and_S(X, POINT)
    Phi, Phi_s = basis(X), basis(Xs)
    res = _solve(approx, np.array([(Phi * S_k) @ Phi.T for S_k in S]), y)
    cross = np.array([(Phi * S_k) @ Phi_s.T for S_k in S])
    star = np.array([np.einsum("ij,ij,j->i", Phi_s, Phi_s, S_k) for S_k in S])
    m_ref, c_ref = res.posterior.predict(res.a, cross, star)
    np.testing.assert_allclose(mean, m_ref, atol=1e-8)
    np.testing.assert_allclose(cov, c_ref, atol=1e-8)
    np.testing.assert_allclose(p, gp.likelihood.predict(m_ref.T, c_ref), atol=1e-8)
    np.testing.assert_allclose(p.sum(axis=1), 1.0, atol=1e-12)
    with model:
        gp.conditional(f"f_star_{approx}", Xs)
    mu, cov_full = model[f"f_star_{approx}_stacked"].owner.inputs[-2:]
    fn = model.compile_fn([mu, cov_full], inputs=[model["log_ls"], model["log_eta"]], point_fn=False)
    mu_v, cov_v = fn(POINT["log_ls"], POINT["log_eta"])
    star_full = np.array([(Phi_s * S_k) @ Phi_s.T for S_k in S])
    m_full, c_full = res.posterior.predict(res.a, cross, star_full, full_cov=True)
    np.testing.assert_allclose(mu_v, m_full.ravel(), atol=1e-8)
    np.testing.assert_allclose(cov_v, c_full + 1e-6 * np.eye(21), atol=1e-8)


def test_loo_terms_and_a_map_fit_through_the_gp():
    X, y = _data(seed=6)
    model, gp = _model("laplace", X, y)
    loo = model.compile_fn(model["y_loo"], point_fn=False, inputs=[model["log_ls"], model["log_eta"]])
    dense = _solve("laplace", _dense_approximate(X, POINT), y)
    np.testing.assert_allclose(loo(POINT["log_ls"], POINT["log_eta"]), dense.loo_log_p, atol=1e-8)
    result = pymc_gpc.fit(model, method="map", start=POINT, progressbar=False)
    logp = model.compile_logp()
    fitted = {name: result.point[name] for name in POINT}
    assert logp(fitted) > logp(POINT)
    p = gp.predict(X[:5], point=result)
    assert p.shape == (5, 3) and np.allclose(p.sum(axis=1), 1.0)


def test_one_shared_kernel_equals_its_per_class_copies():
    X, y = _data(seed=7)
    with pm.Model() as model:
        log_ls = pm.Normal("log_ls", 0, 1)
        gp = pymc_gpc.MarginalEP(cov_func=pm.gp.cov.ExpQuad(1, ls=pt.exp(log_ls)), likelihood=L.MultinomialProbit(),
                                 approx="HSGP", m=30, tol=1e-11)
        gp.marginal_likelihood("y", X=X, y=y)
    value = model.compile_logp(jacobian=False)({"log_ls": 0.1}) - float(pm.logp(pm.Normal.dist(0, 1), 0.1).eval())
    basis = LaplacianBasis(X, [30], c=1.5)
    S = basis.variances(pm.gp.cov.ExpQuad(1, ls=np.exp(0.1))).eval()
    Phi = basis(X)
    assert value == pytest.approx(_solve("ep", np.array([(Phi * S) @ Phi.T] * 3), y).log_z, abs=1e-8)


# --- the periodic expansion through the GP classes --------------------------------------------

def _periodic_model(cls, likelihood, X, y, m):
    with pm.Model() as model:
        log_ls = pm.Normal("log_ls", 0, 1)
        log_scale = pm.Normal("log_scale", 0, 1)
        cov = pm.gp.cov.Periodic(1, period=1.3, ls=pt.exp(log_ls))
        gp = cls(cov_func=cov, likelihood=likelihood, approx="HSGP", m=m, scale=pt.exp(log_scale))
        gp.marginal_likelihood("y", X=X, y=y)
    return model, gp


def test_periodic_kernel_equals_the_dense_periodic_model_and_its_gradient_finite_differences():
    X = np.linspace(0.0, 4.0, 40)[:, None]
    y = np.where(np.sin(2 * np.pi * X[:, 0] / 1.3) + 0.3 * np.random.default_rng(0).normal(size=40) > 0, 1, -1)
    model, gp = _periodic_model(pymc_gpc.MarginalEP, L.Probit(), X, y, m=25)
    point = {"log_ls": -0.2, "log_scale": 0.3}
    logp, dlogp = model.compile_logp(jacobian=False), model.compile_dlogp(jacobian=False)
    prior = sum(float(pm.logp(pm.Normal.dist(0, 1), v).eval()) for v in point.values())

    def dense(pt_):
        K = np.exp(2 * pt_["log_scale"]) * pm.gp.cov.Periodic(1, period=1.3, ls=np.exp(pt_["log_ls"]))(X).eval()
        return pymc_gpc.ep(K + 1e-12 * np.eye(40), y, L.Probit()).log_z

    assert logp(point) - prior == pytest.approx(dense(point), abs=1e-7)
    h, fd = 1e-5, []
    for name in [v.name for v in model.value_vars]:
        up, down = dict(point), dict(point)
        up[name] += h
        down[name] -= h
        fd.append((dense(up) - dense(down)) / (2 * h) - point[name])
    np.testing.assert_allclose(dlogp(point), fd, atol=1e-5)
    p = gp.predict(np.linspace(0, 4, 9)[:, None], point=point)
    assert np.all((p > 0) & (p < 1))


def test_periodic_kernels_per_class_equal_the_dense_solver_on_their_basis():
    X, y = _data(seed=8)
    with pm.Model() as model:
        log_ls = pm.Normal("log_ls", 0, 1, shape=3)
        covs = [pm.gp.cov.Periodic(1, period=2.5, ls=pt.exp(log_ls[k])) for k in range(3)]
        gp = pymc_gpc.MarginalLaplace(cov_func=covs, likelihood=L.Softmax(), approx="HSGP", m=12, scale=1.5)
        gp.marginal_likelihood("y", X=X, y=y)
    ls = np.array([-0.3, 0.0, 0.4])
    value = model.compile_logp(jacobian=False)({"log_ls": ls}) - float(np.sum(pm.logp(pm.Normal.dist(0, 1), ls).eval()))
    basis = PeriodicBasis(X, 12, covs[0])
    Phi = basis(X)
    S = [basis.variances(1.5, pm.gp.cov.Periodic(1, period=2.5, ls=np.exp(v))).eval() for v in ls]
    assert value == pytest.approx(_solve("laplace", np.array([(Phi * S_k) @ Phi.T for S_k in S]), y).log_z, abs=1e-8)


@pytest.mark.parametrize("cov, kwargs, match", [
    (pm.gp.cov.Periodic(1, period=1.0, ls=1.0), dict(m=10, c=1.5), "c: options of pm.gp.HSGP's Laplacian basis"),
    (pm.gp.cov.Periodic(1, period=1.0, ls=1.0), dict(m=10, L=[2.0]), "L: options of"),
    (pm.gp.cov.Periodic(1, period=1.0, ls=1.0), dict(m=10, drop_first=True), "drop_first: options of"),
    (pm.gp.cov.Periodic(1, period=1.0, ls=1.0), dict(m=[10]), "positive integer for the periodic expansion"),
    (pm.gp.cov.Periodic(1, period=pt.scalar("T"), ls=1.0), dict(m=10), "period of the periodic kernel must be a number"),
    (2.0 * pm.gp.cov.Periodic(1, period=1.0, ls=1.0), dict(m=[10]), "Prod has no power_spectral_density.*scale="),
    (pm.gp.cov.ExpQuad(1, ls=1.0), dict(m=[10], scale=2.0), "scale is for a periodic kernel"),
    (pm.gp.cov.ExpQuad(1, ls=1.0), dict(m=[10], c=-1.0), "c must be positive and finite"),
    (pm.gp.cov.ExpQuad(1, ls=1.0), dict(m=[10], c=np.nan), "c must be positive and finite"),
    (pm.gp.cov.ExpQuad(1, ls=1.0), dict(m=[10], c="wide"), "c must be positive and finite"),
    (pm.gp.cov.ExpQuad(1, ls=1.0), dict(m=[10], L=[0.0]), "L must be positive and finite"),
    (pm.gp.cov.ExpQuad(2, ls=1.0), dict(m=[10, 10], L=[1.0, 2.0, 3.0]), "L must be positive and finite .* one per active dimension"),
    (pm.gp.cov.ExpQuad(1, ls=1.0), dict(m=[0]), "one positive integer per active dimension"),
    (pm.gp.cov.ExpQuad(1, ls=1.0), dict(m=[10], boundary="periodic"), "boundary must be one of"),
])
def test_bad_hsgp_options_are_value_errors_at_construction(cov, kwargs, match):
    with pytest.raises(ValueError, match=match):
        pymc_gpc.MarginalEP(cov_func=cov, likelihood=L.Probit(), approx="HSGP", **kwargs)


def test_per_class_kernels_must_share_one_basis():
    with pytest.raises(ValueError, match="share their input columns"):
        pymc_gpc.MarginalLaplace(cov_func=[pm.gp.cov.ExpQuad(2, ls=1.0, active_dims=[0]),
                                           pm.gp.cov.ExpQuad(2, ls=1.0, active_dims=[1])],
                                 likelihood=L.Softmax(), approx="HSGP", m=[10])
    with pytest.raises(ValueError, match="periodic .* or none"):
        pymc_gpc.MarginalLaplace(cov_func=[pm.gp.cov.ExpQuad(1, ls=1.0), pm.gp.cov.Periodic(1, period=1.0, ls=1.0)],
                                 likelihood=L.Softmax(), approx="HSGP", m=10)
    with pytest.raises(ValueError, match="share one period"):
        pymc_gpc.MarginalLaplace(cov_func=[pm.gp.cov.Periodic(1, period=1.0, ls=1.0),
                                           pm.gp.cov.Periodic(1, period=2.0, ls=1.0)],
                                 likelihood=L.Softmax(), approx="HSGP", m=10)


def test_boundary_condition_is_passed_to_the_basis():
    X, y = _data(seed=9)
    with pm.Model() as model:
        gp = pymc_gpc.MarginalLaplace(cov_func=pm.gp.cov.ExpQuad(1, ls=0.8), likelihood=L.Softmax(), approx="HSGP",
                                      m=[25], L=[3.0], boundary="neumann", drop_first=True)
        gp.marginal_likelihood("y", X=X, y=y)
    basis = LaplacianBasis(X, [25], L=[3.0], boundary="neumann", drop_first=True)
    S = basis.variances(pm.gp.cov.ExpQuad(1, ls=0.8)).eval()
    Phi = basis(X)
    assert basis.M == 24
    value = model.compile_logp(jacobian=False)({})
    assert value == pytest.approx(_solve("laplace", np.array([(Phi * S) @ Phi.T] * 3), y).log_z, abs=1e-8)


# --- registration ----------------------------------------------------------------------------

def test_registry_lists_the_structure_with_fitc_retries_on_both_backends():
    """Both backends serve it (JAX: ``backends/jax/multiclass_hsgp.py``, tested in
    ``tests/backends/test_jax_hsgp.py``)."""
    for approx, lik in (("laplace", L.Softmax()), ("ep", L.MultinomialProbit())):
        for backend in ("numba", "jax"):
            solver = registry.check(approx, lik, "hsgp-multiclass", backend=backend)
            assert solver.retry_schedule({}, "hsgp-multiclass") == solver.retry_schedule({}, "fitc-multiclass")
        assert select_structure(lik, "HSGP") is HSGP_MULTICLASS


def test_structure_is_compared_hashed_and_pickled_by_its_basis():
    X, y = _data()
    _, gp = _model("laplace", X, y)
    s = gp.structure
    assert s != HSGP_MULTICLASS and s.name == HSGP_MULTICLASS.name
    assert pickle.loads(pickle.dumps(s)) == s and hash(pickle.loads(pickle.dumps(s))) == hash(s)
    assert s != HSGPBinary(s.box, s.columns)
