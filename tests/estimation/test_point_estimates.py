"""Point estimates (``pymc_gpc.fit``): type-II ML, MAP-II and EM-EP.

Ground truth: scikit-learn's type-II maximum likelihood (Laplace + logistic) for
"type2", ``pm.find_MAP`` on the same model for "map", finite differences and direct
NumPy formulas for the pieces of the EM-EP bound, quadrature for the expected
log-likelihoods, and the two synthetic experiments of Kim & Ghahramani (2003).
"""

import warnings

import arviz as az
import numpy as np
import pymc as pm
import pytensor.tensor as pt
import pytest
from scipy import integrate, stats

import pymc_gpc
from pymc_gpc import likelihoods as L
from pymc_gpc.estimation import point_estimates as PE
from pymc_gpc.estimation import em_ep, objective as OBJ
from pymc_gpc.structures import em_bounds
from pymc_gpc.datasets import synthetic
from pymc_gpc.kernels import MixedARD
from pymc_gpc.gp.models import classification_metrics, label_noise_classifier
from pymc_gpc.structures import FITCPrior

from ..conftest import LIKELIHOOD_CASES, lik_id, reference_log_lik


def _rbf_model(X, y, approximation="ep", likelihood=None, prior_sd=3.0, **options):
    """v0 * ExpQuad with one lengthscale per column, N(0, prior_sd^2) on the logs."""
    d = X.shape[1]
    with pm.Model() as model:
        log_v0 = pm.Normal("log_v0", 0.0, prior_sd)
        log_ls = pm.Normal("log_ls", 0.0, prior_sd, shape=d)
        cov = pt.exp(log_v0) * pm.gp.cov.ExpQuad(d, ls=pt.exp(log_ls))
        cls = pymc_gpc.MarginalEP if approximation == "ep" else pymc_gpc.MarginalLaplace
        gp = cls(cov_func=cov, likelihood=likelihood or L.Probit(), **options)
        gp.marginal_likelihood("y", X=X, y=y)
    return model, gp


@pytest.fixture(scope="module")
def small_problem():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(40, 2))
    y = np.where(np.sin(2 * X[:, 0]) + 0.5 * X[:, 1] + 0.3 * rng.normal(size=40) > 0, 1.0, -1.0)
    return X, y


# -- pieces of the EM-EP bound ---------------------------------------------------------


def test_covariance_bound_value_and_gradient():
    rng = np.random.default_rng(0)
    n = 6
    M = rng.normal(size=(n, n))
    K = M @ M.T + n * np.eye(n)
    h = rng.normal(size=n)
    S = rng.normal(size=(n, n))
    A = S @ S.T / n + 0.1 * np.eye(n)
    value, grad = em_bounds.covariance_bound(K, h, A)
    K_inv = np.linalg.inv(K)
    expected = -0.5 * np.linalg.slogdet(K)[1] - 0.5 * h @ K_inv @ h - 0.5 * np.trace(K_inv @ A)
    assert value == pytest.approx(expected, abs=1e-10)
    for i, j in [(0, 0), (1, 3), (5, 2), (4, 4)]:
        E = np.zeros((n, n))
        E[i, j] = E[j, i] = 1e-6
        fd = (em_bounds.covariance_bound(K + E, h, A)[0] - em_bounds.covariance_bound(K - E, h, A)[0]) / 2e-6
        analytic = grad[i, j] * (1 if i == j else 2)
        assert analytic == pytest.approx(fd, rel=1e-5, abs=1e-9)


def test_fitc_covariance_bound_equals_the_dense_bound_and_matches_finite_differences():
    # F_K of the FITC covariance Q + Lambda in O(n m^2) against ``covariance_bound`` on the
    # dense matrix; its gradient in (K_uu, K_uf, diag K_ff) against central differences;
    # and a FITC posterior's covariance factors against the dense (K~^-1 + W)^-1
    rng = np.random.default_rng(1)
    n, m = 30, 6
    X, Xu = rng.normal(size=(n, 2)), rng.normal(size=(m, 2))
    k = lambda A, B: 1.3 * np.exp(-0.5 * np.sum((A[:, None] - B[None]) ** 2, -1) / 0.8)  # noqa: E731
    Kuu, Kuf, k_diag = k(Xu, Xu) + 1e-8 * np.eye(m), k(Xu, X), np.full(n, 1.31)
    Q = Kuf.T @ np.linalg.solve(Kuu, Kuf)
    K = Q + np.diag(k_diag - np.diag(Q))
    w = rng.uniform(0.1, 2.0, n)
    post = FITCPrior(Kuu, Kuf, k_diag).posterior(w)
    A = em_bounds.FITCCovariance(*post.covariance_factors())
    np.testing.assert_allclose(np.diag(A.diag) + A.U @ A.U.T, np.linalg.inv(np.linalg.inv(K) + np.diag(w)),
                               rtol=1e-9, atol=1e-12)
    h = rng.normal(size=n)
    value, grads, log_det = em_bounds.fitc_covariance_bound(Kuu, Kuf, k_diag, h, A)
    dense, _ = em_bounds.covariance_bound(K, h, np.diag(A.diag) + A.U @ A.U.T)
    assert value == pytest.approx(dense, abs=1e-9)
    assert log_det == pytest.approx(np.linalg.slogdet(K)[1], abs=1e-10)
    inputs = [Kuu, Kuf, k_diag]
    for which, index in [(0, (0, 0)), (0, (2, 4)), (1, (1, 3)), (1, (5, 29)), (2, (7,)), (2, (0,))]:
        step = np.zeros_like(inputs[which])
        step[index] = 1e-6
        if which == 0:
            step = step + step.T - np.diag(np.diag(step))  # K_uu stays symmetric
        f = [em_bounds.fitc_covariance_bound(*[x + s * step if j == which else x for j, x in enumerate(inputs)], h, A)[0]
             for s in (1, -1)]
        analytic = np.sum(grads[which] * step) / 1e-6
        assert analytic == pytest.approx((f[0] - f[1]) / 2e-6, rel=1e-5, abs=1e-8)


@pytest.mark.parametrize("lik", LIKELIHOOD_CASES, ids=lik_id)
def test_expected_log_lik_against_quadrature(lik):
    y = np.array([1.0, -1.0, 1.0, -1.0])
    mu = np.array([0.3, 1.2, -2.0, 0.0])
    s2 = np.array([0.5, 2.0, 0.1, 3.0])
    value, grad = lik.expected_log_lik(y, mu, s2)
    log_p = reference_log_lik(lik)
    for i in range(4):
        sd = np.sqrt(s2[i])
        f = lambda t: stats.norm.pdf(t, mu[i], sd) * log_p(y[i], t)  # noqa: E731
        ref = sum(integrate.quad(f, a, b, limit=200)[0] for a, b in [(mu[i] - 14 * sd, 0.0), (0.0, mu[i] + 14 * sd)])
        assert value[i] == pytest.approx(ref, abs=1e-8)
    if lik.n_params:
        h = 1e-6
        up = lik.expected_log_lik(y, mu, s2, lik.params + h)[0]
        down = lik.expected_log_lik(y, mu, s2, lik.params - h)[0]
        np.testing.assert_allclose(grad[:, 0], (up - down) / (2 * h), rtol=1e-5, atol=1e-8)


def test_epsilon_rules():
    rng = np.random.default_rng(1)
    y = np.where(rng.random(50) < 0.5, 1.0, -1.0)
    h = y * rng.normal(1.0, 1.5, size=50)  # about a quarter of the signs wrong
    a = rng.uniform(0.1, 2.0, size=50)
    # "omega" maximises sum_i E_q[log p(y_i | f_i, eps)] exactly
    eps = PE.epsilon_update("omega", y, h, a)
    grid = np.linspace(0.001, 0.499, 4999)
    bound = [L.StepLabelNoise(e).expected_log_lik(y, h, a)[0].sum() for e in grid]
    assert eps == pytest.approx(grid[int(np.argmax(bound))], abs=2e-4)
    # "errors" is the training error rate of sign(E f) (Kim & Ghahramani eq. 18)
    assert PE.epsilon_update("errors", y, h, a) == np.mean(np.sign(h) != y)


# -- type-II ML and MAP-II ----------------------------------------------------------------


def test_type2_matches_scikit_learn(small_problem):
    """Laplace + logistic type-II ML: the same optimum as scikit-learn's GPC."""
    from sklearn.gaussian_process import GaussianProcessClassifier
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel

    X, y = small_problem
    kernel = ConstantKernel(1.0, (1e-5, 1e5)) * RBF(np.ones(2), (1e-5, 1e5))
    sk = GaussianProcessClassifier(kernel=kernel).fit(X, (y > 0).astype(int))
    model, gp = _rbf_model(X, y, "laplace", L.Logistic())
    result = pymc_gpc.fit(model, method="type2", progressbar=False)
    assert result.converged
    assert result.log_evidence >= sk.log_marginal_likelihood_value_ - 1e-6
    assert result.log_evidence == pytest.approx(sk.log_marginal_likelihood_value_, abs=1e-4)
    sk_theta = np.exp(sk.kernel_.theta)  # (amplitude, lengthscales)
    np.testing.assert_allclose(np.exp(result.point["log_v0"]), sk_theta[0], rtol=2e-2)
    np.testing.assert_allclose(np.exp(result.point["log_ls"]), sk_theta[1:], rtol=2e-2)
    # the history is the optimiser's path, ending at the reported evidence
    assert result.history["log_evidence"][-1] == pytest.approx(result.log_evidence, abs=1e-8)
    p = gp.predict(X, point=result.point, model=model)
    assert np.all((p > 0) & (p < 1))


def test_map_matches_find_map(small_problem):
    X, y = small_problem
    # find_MAP runs the model's Op: at the sampler's EP tolerance (1e-2) a cold start leaves
    # ~1e-2 in the gradient and moves the optimum by ~5e-3, so the comparison needs a tight one
    model, _ = _rbf_model(X, y, "ep", prior_sd=1.0, tol=1e-8)
    result = pymc_gpc.fit(model, method="map", progressbar=False)
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reference = pm.find_MAP(progressbar=False)
    assert result.converged
    for name in ("log_v0", "log_ls"):
        np.testing.assert_allclose(result.point[name], reference[name], atol=2e-3)
    # the priors pull the optimum away from type-II's
    type2 = pymc_gpc.fit(model, method="type2", progressbar=False)
    assert type2.log_evidence > result.log_evidence


@pytest.mark.parametrize("approximation", ["ep", "laplace"])
def test_fit_point_deterministics_equal_the_models_graph(small_problem, approximation):
    """``fit`` evaluates the evidence terms' deterministics (y_loo, ...) at the optimum from the
    objective's warm state and puts them into the graph as constants: the values must be the
    model's own compiled deterministics there (cold solve), and the evaluation warm."""
    X, y = small_problem
    # a tight EP tolerance in the Op (its sampling default 1e-2 leaves ~1e-3 between starts)
    model, _ = _rbf_model(X, y, approximation, **({"tol": 1e-8} if approximation == "ep" else {}))
    result = pymc_gpc.fit(model, method="map", progressbar=False)
    outs = model.unobserved_value_vars
    fn = model.compile_fn(outs, inputs=model.value_vars, point_fn=False, on_unused_input="ignore")
    pymc_gpc.reset_warm_starts()
    reference = dict(zip([v.name for v in outs], fn(**{v.name: result.point[v.name] for v in model.value_vars})))
    assert set(reference) <= set(result.point)
    np.testing.assert_allclose(result.point["y_loo"], reference["y_loo"], rtol=1e-6, atol=1e-8)
    assert result.point["y_status"] == reference["y_status"] == 0
    assert 1 <= result.point["y_n_iter"] < reference["y_n_iter"]
    for name in ("log_v0", "log_ls", "log_ls_log__") if "log_ls_log__" in reference else ("log_v0", "log_ls"):
        np.testing.assert_array_equal(result.point[name], reference[name])


# -- EM-EP ---------------------------------------------------------------------------------


def _circle_model(d, epsilon):
    return label_noise_classifier(d.X_train, d.y_train, epsilon=epsilon)


# Kim & Ghahramani's initial values (footnote 3)
CIRCLE_START = dict(log_v0=0.0, log_v1=np.log(1e-8), log_v2=np.log(1e-6), log_l=np.log([0.1, 0.1]))


def test_em_ep_m_step_maximises_the_bound():
    d = synthetic.circle(n_train=30, n_test=10, seed=1)
    model, _ = _circle_model(d, None)
    objective = OBJ.objective_for(model, [], [v for v in model.continuous_value_vars if v.name != "epsilon_interval__"])
    objective.theta_free = False
    point = OBJ.start_point(model, dict(CIRCLE_START, epsilon=0.05))
    [(K, theta)], _ = objective.kernels(point)
    q = em_ep.e_step(objective, K, theta)
    h, A = q.mean, q.posterior.full_cov()
    before, grad = em_ep.m_step_objective(objective, point, h, A)
    # gradient of the M-step objective against central differences
    x0 = OBJ.ravel(point, objective.targets)
    for k in range(len(x0.data)):
        e = np.zeros_like(x0.data)
        e[k] = 1e-5
        f = [em_ep.m_step_objective(objective, OBJ.unravel(x0.data + s * e, x0, point), h, A)[0]
             for s in (1, -1)]
        assert grad[k] == pytest.approx((f[0] - f[1]) / 2e-5, rel=1e-4, abs=1e-6)
    new_point, after = em_ep.m_step(objective, point, h, A)
    assert after > before + 1e-3
    assert after == pytest.approx(em_ep.m_step_objective(objective, new_point, h, A)[0], abs=1e-8)


def test_em_ep_reproduces_the_circle_experiment():
    """Kim & Ghahramani sec. 5.1: 40 points, 2 labels flipped (true rate 0.05).

    On this draw (seed 0), EM-EP with the paper's rule (eps* = r / n) settles at
    eps = 1/40 with test error 0.072, while with eps fixed at 0 the evidence is highest
    for a boundary that wraps the flipped points (test error 0.31; paper, its own draw:
    0.0281 adapted vs 0.0740 fixed). Other draws: see benchmarks/point_estimates.py.
    """
    d = synthetic.circle(seed=0)
    fixed_model, fixed_gp = _circle_model(d, 0.0)
    fixed = pymc_gpc.fit(fixed_model, method="em-ep", start=CIRCLE_START, progressbar=False, maxiter=300)
    adapted_model, adapted_gp = _circle_model(d, None)
    adapted = pymc_gpc.fit(adapted_model, method="em-ep", start=dict(CIRCLE_START, epsilon=0.01),
                           epsilon_rule="errors", progressbar=False, maxiter=300)
    assert fixed.converged and adapted.converged
    assert 0.0 < float(adapted.point["epsilon"]) <= 0.1
    err = {
        name: classification_metrics(gp.predict(d.X_test, point=r.point, model=m), d.y_test)["error_rate"]
        for name, (r, m, gp) in {"fixed": (fixed, fixed_model, fixed_gp),
                                 "adapted": (adapted, adapted_model, adapted_gp)}.items()
    }
    assert err["adapted"] < 0.1 < 0.2 < err["fixed"]
    assert np.all(np.isnan(fixed.history["epsilon"]))
    assert np.all(np.abs(np.diff(adapted.history["log_evidence"][-5:])) < 0.05)
    tree = adapted.to_inference_data()
    assert "fit_history" in tree.children
    summary = az.summary(tree, var_names=["log_l", "epsilon"], kind="stats")
    assert len(summary) == 3


def test_type2_switches_off_irrelevant_inputs():
    """Kim & Ghahramani's ARD experiment (300 points): x4..x6 lose their relevance."""
    d = synthetic.relevance(n_train=300, n_test=100, seed=0)

    def model(shared):
        with pm.Model() as m:
            log_v0 = pm.Normal("log_v0", 0, 3)
            log_l = pm.Normal("log_l", -2, 3, shape=() if shared else 6)
            cov = MixedARD(6, v0=pt.exp(log_v0), l=pt.exp(log_l), v2=1e-4)
            gp = pymc_gpc.MarginalEP(cov_func=cov, likelihood=L.Probit())
            gp.marginal_likelihood("y", X=d.X_train, y=d.y_train)
        return m

    ard = pymc_gpc.fit(model(False), progressbar=False)
    single = pymc_gpc.fit(model(True), progressbar=False)
    log_l = ard.point["log_l"]
    # Irrelevant inverse lengthscales go to near zero: on this draw x5 and x6 reach
    # about e^-23, while x4 stays at the relevant inputs' level (e^-3; the same optimum
    # from four starting points: the sample carries a chance dependence on x4).
    assert np.sum(log_l[3:] < np.min(log_l[:3]) - 10.0) >= 2
    assert np.mean(log_l[3:]) < np.mean(log_l[:3]) - 5.0
    assert ard.log_evidence > single.log_evidence


def test_em_ep_accelerated_reaches_the_evidence_maximum(small_problem):
    """SQUAREM-accelerated EM-EP converges where plain EM crawls (3000 iterations not enough here)."""
    X, y = small_problem
    model, _ = _rbf_model(X, y)
    em = pymc_gpc.fit(model, method="em-ep", tol=1e-7, maxiter=400, progressbar=False)
    type2 = pymc_gpc.fit(model, method="type2", progressbar=False)
    assert em.converged and em.n_iter < 200
    assert em.log_evidence == pytest.approx(type2.log_evidence, abs=1e-3)
    np.testing.assert_allclose(em.point["log_ls"], type2.point["log_ls"], atol=0.02)
    plain = pymc_gpc.fit(model, method="em-ep", accelerate=False, maxiter=30, progressbar=False)
    assert np.all(np.diff(plain.history["log_evidence"]) > -1e-8)  # EM steps never lower it here
    assert plain.log_evidence < em.log_evidence - 0.01


@pytest.mark.parametrize("cls", [pymc_gpc.MarginalLaplace, pymc_gpc.MarginalADF], ids=lambda c: c.__name__)
def test_em_with_other_approximations(small_problem, cls):
    """Any Gaussian q serves as the E-step; gradient-free ADF is refused by type-II ML."""
    X, y = small_problem
    with pm.Model() as model:
        log_v0 = pm.Normal("log_v0", 0.0, 3)
        log_ls = pm.Normal("log_ls", 0.0, 3, shape=2)
        gp = cls(cov_func=pt.exp(log_v0) * pm.gp.cov.ExpQuad(2, ls=pt.exp(log_ls)), likelihood=L.Probit())
        gp.marginal_likelihood("y", X=X, y=y)
    em = pymc_gpc.fit(model, method="em-ep", progressbar=False)
    assert em.converged and em.log_evidence > em.history["log_evidence"][0] + 1.0
    if cls is pymc_gpc.MarginalADF:
        with pytest.raises(ValueError, match="ADF does not provide"):
            pymc_gpc.fit(model, method="type2")


# -- bad input ------------------------------------------------------------------------------


def test_fit_rejects_bad_requests(small_problem):
    X, y = small_problem
    model, _ = _rbf_model(X, y)
    with pytest.raises(ValueError, match="method must be one of"):
        pymc_gpc.fit(model, method="newton")
    with pytest.raises(ValueError, match="epsilon_rule"):
        pymc_gpc.fit(model, method="em-ep", epsilon_rule="median")
    with pytest.raises(ValueError, match="lengthscales must be"):
        label_noise_classifier(X, y, lengthscales="two")
    with pm.Model() as empty:
        pm.Normal("a")
    with pytest.raises(ValueError, match="no GP classification term"):
        pymc_gpc.fit(empty)
    with pm.Model() as two_eps:
        a = pm.Uniform("a", 0, 0.25)
        b = pm.Uniform("b", 0, 0.25)
        gp = pymc_gpc.MarginalEP(cov_func=pm.gp.cov.ExpQuad(2, ls=1.0), likelihood=L.StepLabelNoise(a + b))
        gp.marginal_likelihood("y", X=X, y=y)
    with pytest.raises(ValueError, match="one scalar free variable"):
        pymc_gpc.fit(two_eps, method="em-ep")
