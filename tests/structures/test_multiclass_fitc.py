"""Several classes with inducing points (FITC): ``structures.multiclass_fitc``, its Ops and the GP classes.

Ground truth: the dense multi-class solvers (``CoupledBlockPosterior``) run on the explicitly
formed K~_k = Q_k + Lambda_k, the dense model with Xu = X, and central finite differences.
"""

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
import pytest

import pymc_gpc
from pymc_gpc.approximations.multinomial_probit_ep import multinomial_probit_ep
from pymc_gpc.approximations.softmax_laplace import softmax_laplace
from pymc_gpc.likelihoods import MultinomialProbit, Softmax
from pymc_gpc.backends.python_vm import PYTHON_VM_MODE
from pymc_gpc.ops import ApproxMarginalOp
from pymc_gpc.structures.select import FITC_MULTICLASS
from pymc_gpc.structures.multiclass import CoupledBlockPosterior
from pymc_gpc.structures.multiclass_fitc import MulticlassFITCGradient, MulticlassFITCPrior

from ..conftest import se_kernel as rbf

JITTER = 1e-6
VM = PYTHON_VM_MODE  # fast compilation (the numba registration is the dense Ops', tested elsewhere)
SOLVERS = {"laplace": (softmax_laplace, {"tol": 1e-12}), "ep": (multinomial_probit_ep, {"tol": 1e-11})}
CLASSES = {"laplace": (pymc_gpc.MarginalLaplace, Softmax), "ep": (pymc_gpc.MarginalEP, MultinomialProbit)}
HYP = [(0.8, 2.0), (0.6, 1.5), (1.2, 3.0)]  # per class (lengthscale, variance)


def problem(seed=0, n=40, m=7, c=3):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    y = np.digitize(X[:, 0] + 0.3 * rng.normal(size=n), [-0.4, 0.4])[:n] % c
    Xu = np.array([X[rng.choice(n, m, replace=False)] + 0.2 * rng.normal(size=(m, 2)) for _ in range(c)])
    return X, y, Xu


def fitc_inputs(X, Xu, hyp=HYP, jitter=JITTER):
    """(K_uu (c, m, m), K_uf (c, m, n), diag K_ff (c, n)) for per-class inducing sets Xu (c, m, d)."""
    Kuu = np.array([rbf(Xu[k], Xu[k], *h) + jitter * np.eye(len(Xu[k])) for k, h in enumerate(hyp)])
    Kuf = np.array([rbf(Xu[k], X, *h) for k, h in enumerate(hyp)])
    kd = np.array([np.full(len(X), h[1] + jitter) for h in hyp])
    return Kuu, Kuf, kd


def solve(approx, K, y, **kw):
    fn, opts = SOLVERS[approx]
    return fn(K, y, **{**opts, **kw})


@pytest.mark.parametrize("approx", ["laplace", "ep"])
def test_equals_dense_solver_on_explicit_q_plus_lambda(approx):
    X, y, Xu = problem()
    prior = MulticlassFITCPrior(*fitc_inputs(X, Xu))
    Kd = prior.dense()
    fitc, dense = solve(approx, prior, y), solve(approx, Kd, y)
    assert fitc.converged and dense.converged
    assert fitc.log_z == pytest.approx(dense.log_z, rel=1e-8, abs=1e-8)
    np.testing.assert_allclose(fitc.mean, dense.mean, atol=1e-8)
    np.testing.assert_allclose(fitc.var, dense.var, atol=1e-8)
    np.testing.assert_allclose(fitc.loo_log_p, dense.loo_log_p, atol=1e-6)
    assert isinstance(fitc.dlog_z_dK, MulticlassFITCGradient)
    # the FITC gradient is the dense one pulled back through Q + Lambda (here: in diag K_ff,
    # where d K~_k = diag(dk) exactly wherever Lambda is not clipped)
    np.testing.assert_allclose(fitc.dlog_z_dK.k_diag, np.einsum("kii->ki", dense.dlog_z_dK), atol=1e-7)


def _dense_model(X, y, approx, Xu=None):
    cls, lik = CLASSES[approx]
    with pm.Model() as model:
        log_ls = pm.Normal("log_ls", 0, 1, shape=3)
        log_amp = pm.Normal("log_amp", 0, 1)
        covs = [pt.exp(log_amp + 0.2 * k) * pm.gp.cov.ExpQuad(2, ls=pt.exp(log_ls[k])) for k in range(3)]
        opts = {"tol": SOLVERS[approx][1]["tol"]}
        if Xu is None:
            gp = cls(cov_func=covs, likelihood=lik(), jitter=1e-8, **opts)
            gp.marginal_likelihood("y", X=X, y=y)
        else:
            gp = cls(cov_func=covs, likelihood=lik(), jitter=1e-8, approx="FITC", **opts)
            gp.marginal_likelihood("y", X=X, y=y, Xu=Xu)
    return model, gp


@pytest.mark.parametrize("approx", ["laplace", "ep"])
def test_inducing_inputs_at_the_data_equal_the_dense_model(approx):
    rng = np.random.default_rng(5)
    X = rng.uniform(-2, 2, size=(25, 2))
    y = np.digitize(X[:, 0], [-0.6, 0.6])
    dense, _ = _dense_model(X, y, approx)
    sparse, _ = _dense_model(X, y, approx, Xu=X)
    point = {"log_ls": np.array([-0.3, 0.0, 0.2]), "log_amp": np.array(0.3)}
    for a, b in ((dense.compile_logp(mode=VM), sparse.compile_logp(mode=VM)),
                 (dense.compile_dlogp(mode=VM), sparse.compile_dlogp(mode=VM))):
        va, vb = np.asarray(a(point)), np.asarray(b(point))
        np.testing.assert_allclose(vb, va, rtol=1e-6, atol=1e-6 * np.max(np.abs(va)))


def _op_functions(approx, y):
    cls, lik = CLASSES[approx]
    op = ApproxMarginalOp(approx, lik, tuple(SOLVERS[approx][1].items()), structure=FITC_MULTICLASS)
    Kuu, Kuf, kd = pt.dtensor3("Kuu"), pt.dtensor3("Kuf"), pt.dmatrix("kd")
    log_z = op(Kuu, Kuf, kd, pt.zeros(0), y)[0]
    return (pytensor.function([Kuu, Kuf, kd], log_z, mode=VM),
            pytensor.function([Kuu, Kuf, kd], pytensor.grad(log_z, [Kuu, Kuf, kd]), mode=VM))


@pytest.mark.parametrize("approx", ["laplace", "ep"])
def test_op_gradient_in_every_class_matches_finite_differences(approx):
    X, y, Xu = problem(1, n=30, m=5)
    inputs = list(fitc_inputs(X, Xu, jitter=1e-4))
    f, g = _op_functions(approx, y)
    grads = g(*inputs)
    rng = np.random.default_rng(2)
    h = 1e-5
    for j, (arr, grad) in enumerate(zip(inputs, grads)):
        scale = np.max(np.abs(grad))
        for k in range(3):  # every class
            for _ in range(2):
                idx = (k, *(rng.integers(0, s) for s in arr.shape[1:]))
                plus, minus = [a.copy() for a in inputs], [a.copy() for a in inputs]
                plus[j][idx] += h
                minus[j][idx] -= h
                fd = (f(*plus) - f(*minus)) / (2 * h)
                assert abs(fd - grad[idx]) < 1e-5 * max(scale, 1.0), (j, idx, fd, grad[idx])


@pytest.mark.parametrize("approx, per_class", [("laplace", True), ("ep", False)])
def test_gradient_through_the_gp_in_hyperparameters_and_random_inducing_inputs(approx, per_class):
    X, y, Xu = problem(3, n=30, m=5)
    cls, lik = CLASSES[approx]
    with pm.Model() as model:
        log_ls = pm.Normal("log_ls", 0, 1, shape=3)
        Z = pm.Normal("Xu", mu=Xu if per_class else Xu[0], sigma=1.0, shape=Xu.shape if per_class else Xu[0].shape)
        covs = [pm.gp.cov.ExpQuad(2, ls=pt.exp(log_ls[k])) for k in range(3)]
        gp = cls(cov_func=covs, likelihood=lik(), approx="FITC", tol=SOLVERS[approx][1]["tol"])
        gp.marginal_likelihood("y", X=X, y=y, Xu=Z)
    logp, dlogp = model.compile_logp(mode=VM), model.compile_dlogp(mode=VM)
    point = model.initial_point()
    _check_central_differences(logp, dlogp, {k: point[k] for k in ("log_ls", "Xu")})


def _check_central_differences(logp, dlogp, point):
    """The gradient ``dlogp`` at ``point`` (value variables in the model's order) equals central
    differences of ``logp`` (step 1e-5) in every coordinate, to 1e-5 of the largest; returns it."""
    sizes = [(k, np.shape(v)) for k, v in point.items()]
    x0 = np.concatenate([np.ravel(v) for v in point.values()])

    def at(x):
        out, i = {}, 0
        for k, shape in sizes:
            size = int(np.prod(shape))
            out[k] = x[i:i + size].reshape(shape)
            i += size
        return out

    grad = dlogp(at(x0))
    h = 1e-5
    fd = np.array([(logp(at(x0 + h * e)) - logp(at(x0 - h * e))) / (2 * h) for e in np.eye(x0.size)])
    np.testing.assert_allclose(grad, fd, atol=1e-5 * max(1.0, np.max(np.abs(fd))))
    return grad


@pytest.mark.parametrize("per_class", [True, "amplitudes"])
def test_learned_inducing_inputs_of_ard_classifier_have_the_central_difference_gradient(per_class):
    """``ard_classifier(learn_inducing=True)`` with several classes: one free (m, d) ``Xu`` shared
    by the classes' kernels; the model's gradient in Xu and every log-hyperparameter (through
    K_uu and K_uf of each class) equals central differences of its log density."""
    X, y, Xu = problem(9, n=30, m=5)
    model, _ = pymc_gpc.ard_classifier(X, y, approximation="laplace", inducing=Xu[0], learn_inducing=True,
                                       per_class=per_class, tol=1e-12)
    assert model["Xu"] in model.free_RVs and model.initial_point()["Xu"].shape == (5, 2)
    logp, dlogp = model.compile_logp(mode=VM), model.compile_dlogp(mode=VM)
    rng = np.random.default_rng(10)
    names = [v.name for v in model.value_vars]
    start = model.initial_point()
    point = {k: start[k] + (0.0 if k == "Xu" else 0.3 * rng.normal(size=np.shape(start[k]))) for k in names}
    grad = _check_central_differences(logp, dlogp, point)
    # the inducing inputs' own gradient is there (not zero), so the check covers its pullback
    i_xu = sum(int(np.size(point[k])) for k in names[:names.index("Xu")])
    assert np.max(np.abs(grad[i_xu:i_xu + 10])) > 1e-2


@pytest.mark.parametrize("approx", ["laplace", "ep"])
def test_predict_and_conditional_match_the_dense_computation_on_q_plus_lambda(approx):
    X, y, Xu = problem(4, n=35, m=6)
    Xs = np.random.default_rng(6).normal(size=(6, 2))
    cls, lik = CLASSES[approx]
    hyp = [(np.exp(v), 1.0) for v in (-0.2, 0.1, 0.3)]
    with pm.Model() as model:
        log_ls = pm.Normal("log_ls", 0, 1, shape=3)
        covs = [pm.gp.cov.ExpQuad(2, ls=pt.exp(log_ls[k])) for k in range(3)]
        gp = cls(cov_func=covs, likelihood=lik(), approx="FITC", jitter=JITTER, tol=SOLVERS[approx][1]["tol"])
        gp.marginal_likelihood("y", X=X, y=y, Xu=list(Xu))
    point = {"log_ls": np.array([-0.2, 0.1, 0.3])}
    p, mean, cov = gp.predict(Xs, point=point, return_latent=True)
    # dense: the solver on K~ = Q + Lambda, cross-covariances Q_f* = V^T V_*, prior variances k_**
    prior = MulticlassFITCPrior(*fitc_inputs(X, Xu, hyp))
    res = solve(approx, prior.dense(), y)
    Vs = prior.cross(np.array([rbf(Xu[k], Xs, *hyp[k]) for k in range(3)]))
    Q_cross = np.array([prior.V[k].T @ Vs[k] for k in range(3)])
    m_ref, c_ref = res.posterior.predict(res.a, Q_cross, np.ones((3, 6)))
    assert isinstance(res.posterior, CoupledBlockPosterior)
    np.testing.assert_allclose(mean, m_ref, atol=1e-7)
    np.testing.assert_allclose(cov, c_ref, atol=1e-7)
    np.testing.assert_allclose(p, gp.likelihood.predict(m_ref.T, c_ref), atol=1e-6)
    np.testing.assert_allclose(p.sum(axis=1), 1.0)
    with model:
        f_star = gp.conditional("f_star", Xs)
    stacked = model["f_star_stacked"]
    mu, cov_full = stacked.owner.inputs[-2:]
    fn = model.compile_fn([mu, cov_full], inputs=[model["log_ls"]], point_fn=False, mode=VM)
    mu_v, cov_v = fn(point["log_ls"])
    K_star = np.array([rbf(Xs, Xs, *h) for h in hyp])
    m_full, c_full = res.posterior.predict(res.a, Q_cross, K_star, full_cov=True)
    np.testing.assert_allclose(mu_v, m_full.ravel(), atol=1e-7)
    np.testing.assert_allclose(cov_v, c_full + 1e-6 * np.eye(18), atol=1e-7)
    assert f_star.type.shape[-1] in (None, 3)


def test_type2_fit_runs_and_returns_finite_values():
    X, y, Xu = problem(7, n=45, m=6)
    with pm.Model() as model:
        log_ls = pm.Normal("log_ls", 0, 1, shape=3)
        log_amp = pm.Normal("log_amp", 0, 1)
        cov = pt.exp(log_amp) * pm.gp.cov.ExpQuad(2, ls=pt.exp(log_ls[0]))
        covs = [pt.exp(log_amp) * pm.gp.cov.ExpQuad(2, ls=pt.exp(log_ls[k])) for k in range(3)]
        gp = pymc_gpc.MarginalLaplace(cov_func=covs, likelihood=Softmax(), approx="FITC")
        gp.marginal_likelihood("y", X=X, y=y, Xu=Xu[0])
    assert cov is not None
    result = pymc_gpc.fit(model, method="type2", progressbar=False)
    assert np.isfinite(result.log_evidence)
    assert all(np.all(np.isfinite(v)) for v in result.point.values())
    p = gp.predict(X[:5], point=result.point)
    assert np.all(np.isfinite(p)) and np.allclose(p.sum(axis=1), 1.0)


@pytest.mark.parametrize("Xu, match", [
    (np.zeros((5, 3)), "columns"),
    ([np.zeros((5, 2))] * 2, "inducing sets"),
    ([np.zeros((5, 2)), np.zeros((5, 2)), np.zeros((4, 2))], "same number"),
    (None, "needs inducing inputs"),
])
def test_bad_inducing_inputs_are_a_value_error(Xu, match):
    X, y, _ = problem()
    with pm.Model():
        gp = pymc_gpc.MarginalLaplace(cov_func=pm.gp.cov.ExpQuad(2, ls=1.0), likelihood=Softmax(), approx="FITC")
        with pytest.raises(ValueError, match=match):
            gp.marginal_likelihood("y", X=X, y=y, Xu=Xu)


def test_failure_is_minus_inf_with_status():
    X, y, Xu = problem()
    Kuu, Kuf, kd = fitc_inputs(X, Xu)
    f = _op_functions("laplace", y)[0]
    Kuf[1, 0, 0] = np.nan
    assert f(Kuu, Kuf, kd) == -np.inf


def test_shared_kernel_and_inducing_set_equal_their_per_class_copies():
    """One covariance and one (m, d) Xu (the CLI's ``--inducing``) is the per-class model with
    c equal copies of both: the same potential and gradient."""
    X, y, Xu = problem(8, n=30, m=5)

    def model(shared):
        with pm.Model() as mdl:
            log_ls = pm.Normal("log_ls", 0, 1)
            cov = pm.gp.cov.ExpQuad(2, ls=pt.exp(log_ls))
            gp = pymc_gpc.MarginalLaplace(cov_func=cov if shared else [cov] * 3, likelihood=Softmax(),
                                          approx="FITC", tol=1e-12)
            gp.marginal_likelihood("y", X=X, y=y, Xu=Xu[0] if shared else np.stack([Xu[0]] * 3))
        return mdl

    a, b = model(True), model(False)
    point = {"log_ls": np.array(0.2)}
    assert a.compile_logp(mode=VM)(point) == pytest.approx(b.compile_logp(mode=VM)(point), rel=1e-10)
    np.testing.assert_allclose(a.compile_dlogp(mode=VM)(point), b.compile_dlogp(mode=VM)(point), rtol=1e-8)


def _coupled_W(d):
    """The cn x cn class-major W of coupled weights d (c, n): W_i = diag(d_i) - d_i d_i^T / s_i."""
    c, n = d.shape
    W = np.zeros((c * n, c * n))
    for i in range(n):
        Wi = np.diag(d[:, i]) - np.outer(d[:, i], d[:, i]) / d[:, i].sum()
        idx = np.arange(c) * n + i
        W[np.ix_(idx, idx)] = Wi
    return W


def test_effective_precision_and_A_equal_their_definitions():
    from pymc_gpc.structures.multiclass_fitc import _effective_precision, _precision, _precision_times

    X, y, Xu = problem(seed=3, n=30, m=6)
    prior = MulticlassFITCPrior(*fitc_inputs(X, Xu))
    rng = np.random.default_rng(4)
    d = rng.dirichlet(np.ones(3), size=30).T
    d[1, :5] = 0.0  # a class without weight at some observations
    Wt, logdet, delta = _effective_precision(prior, d)
    for i in range(30):
        Wi = np.diag(d[:, i]) - np.outer(d[:, i], d[:, i]) / d[:, i].sum()
        B = np.eye(3) + Wi * prior.lam[:, i]  # I + W_i Lambda_i
        np.testing.assert_allclose(Wt[i], np.linalg.solve(B, Wi), rtol=1e-12, atol=1e-14)
        assert logdet[i] == pytest.approx(np.linalg.slogdet(B)[1], rel=1e-12, abs=1e-14)
    P = np.zeros((3 * 30, 3 * 6))  # f = P z: blockdiag(V_k^T)
    for k in range(3):
        P[k * 30:(k + 1) * 30, k * 6:(k + 1) * 6] = prior.V[k].T
    Wt_big = np.zeros((90, 90))
    for i in range(30):
        idx = np.arange(3) * 30 + i
        Wt_big[np.ix_(idx, idx)] = Wt[i]
    A = np.tril(_precision(prior.V, delta))
    np.testing.assert_allclose(A, np.tril(np.eye(18) + P.T @ Wt_big @ P), rtol=1e-11, atol=1e-11)
    # the CG's product A x in one pass over the observations
    x, Ax = rng.normal(size=18), np.empty(18)
    _precision_times(tuple(prior.V), delta, delta / np.sqrt(delta.sum(axis=0)), x, Ax)
    np.testing.assert_allclose(Ax, (np.eye(18) + P.T @ Wt_big @ P) @ x, rtol=1e-11, atol=1e-11)


def test_newton_step_at_a_large_amplitude_matches_the_dense_solve():
    # kernel amplitudes up to 1e4 (as at a MAP-II point of a large data set): the Newton
    # step's f = K~ (I + W K~)^{-1} v, by the factorised posterior and by CG preconditioned
    # with the posterior at other weights, against a dense LU solve
    X, y, Xu = problem(seed=5, n=60, m=8)
    hyp = [(0.8, 1e4), (0.6, 300.0), (1.2, 3.0)]
    prior = MulticlassFITCPrior(*fitc_inputs(X, Xu, hyp=hyp))
    rng = np.random.default_rng(6)
    d = rng.dirichlet(0.5 * np.ones(3), size=60).T
    v = 30.0 * rng.normal(size=(3, 60))
    Kd = prior.dense()
    K = np.zeros((180, 180))
    for k in range(3):
        K[k * 60:(k + 1) * 60, k * 60:(k + 1) * 60] = Kd[k]
    f_ref = (K @ np.linalg.solve(np.eye(180) + _coupled_W(d) @ K, v.ravel())).reshape(3, 60)
    other = prior.posterior(0.7 * d + 0.3 * rng.dirichlet(np.ones(3), size=60).T)
    by_cg = other.preconditioner().solve_other_weights(prior, d, v, None, 0.0)
    assert by_cg is not None
    for a in (prior.posterior(d).weights(v), by_cg):
        np.testing.assert_allclose(prior(a), f_ref, rtol=0, atol=1e-8 * np.max(np.abs(f_ref)))


def test_site_covariances_pass_and_A_inverse_over_column_blocks_equal_the_dense_algebra(monkeypatch):
    # blocks of 4 columns (the last one partial), so that the compiled passes' block offsets
    # are exercised: A^{-1}, S_i = P_i A^{-1} P_i^T by both routes (the triangular products
    # of nested EP's sweeps, the gradient's pass) and V_k R_kk, R = W~ - W~ P A^{-1} P^T W~,
    # against the dense (c n) x (c m) algebra
    from pymc_gpc.structures import multiclass_fitc

    monkeypatch.setattr(multiclass_fitc, "column_blocks", lambda n, c, m: [slice(j, min(j + 4, n)) for j in range(0, n, 4)])
    n, m, c = 22, 5, 3
    X, y, Xu = problem(seed=7, n=n, m=m)
    prior = MulticlassFITCPrior(*fitc_inputs(X, Xu))
    d = np.random.default_rng(8).dirichlet(np.ones(c), size=n).T
    P = np.zeros((c * n, c * m))
    for k in range(c):
        P[k * n:(k + 1) * n, k * m:(k + 1) * m] = prior.V[k].T
    post = prior.posterior(d)
    Wt = np.zeros((c * n, c * n))
    for i in range(n):
        idx = np.arange(c) * n + i
        Wt[np.ix_(idx, idx)] = post.Wt[i]
    Ai = np.linalg.inv(np.eye(c * m) + P.T @ Wt @ P)
    np.testing.assert_allclose(post.A_inv, Ai, rtol=1e-10, atol=1e-12)
    full = P @ Ai @ P.T
    S_ref = np.array([full[np.ix_(np.arange(c) * n + i, np.arange(c) * n + i)] for i in range(n)])
    np.testing.assert_allclose(post._site_blocks(), S_ref, rtol=1e-10, atol=1e-12)
    R = Wt - Wt @ full @ Wt
    S, VR = prior.posterior(d)._column_pass()
    np.testing.assert_allclose(S, S_ref, rtol=1e-10, atol=1e-12)
    for k in range(c):
        block = slice(k * n, (k + 1) * n)
        np.testing.assert_allclose(VR[k], prior.V[k] @ R[block, block], rtol=1e-10, atol=1e-12)
