"""The JAX backend's HSGP EP and Laplace (``backends/jax/hsgp.py``) and its registration:
against the numba path (``structures.hsgp.HSGPPrior`` with ``pymc_gpc.ep`` /
``pymc_gpc.laplace``, itself tested against the dense computation on Phi diag(S) Phi^T and
finite differences in ``tests/structures``), against central finite differences, through
``pytensor.function(mode="JAX")`` and numpyro.

Skipped where jax is not installed. Each jitted function is compiled once per module
(``_fn``): compilation, not evaluation, is what these tests spend their time on.
"""

import warnings

import numpy as np
import pytest

jax = pytest.importorskip("jax", reason="the JAX backend needs jax: pip install pymc-gpc[jax]")

import jax.numpy as jnp  # noqa: E402
import pymc as pm  # noqa: E402
import pytensor  # noqa: E402
import pytensor.tensor as pt  # noqa: E402

import pymc_gpc  # noqa: E402
from pymc_gpc import likelihoods as L  # noqa: E402
from pymc_gpc.approximations import registry  # noqa: E402
from pymc_gpc.approximations.solve import solve_with_retries  # noqa: E402
from pymc_gpc.backends.jax import hsgp as jax_hsgp  # noqa: E402
from pymc_gpc.structures.hsgp import HSGPPrior, LaplacianBasis  # noqa: E402

N, M = 40, (6, 5)
CUTS = [-0.5, 0.5]
# (approximation, likelihood class, theta, ordinal labels)
CASES = [("ep", L.Probit, [], False), ("laplace", L.Logistic, [], False),
         ("ep", L.OrderedProbit, [*CUTS, 0.8], True), ("laplace", L.OrderedProbit, [*CUTS, 0.8], True)]
IDS = ["ep-probit", "laplace-logistic", "ep-ordered-probit", "laplace-ordered-probit"]
TOL = {"ep": {"tol": 1e-12}, "laplace": {}}
_FNS = {}


def _likelihood(cls, th):
    return cls(cutpoints=th[:2], sigma=th[2]) if cls is L.OrderedProbit else cls(*th)


@pytest.fixture(scope="module")
def problem():
    """n = 40 points in 2-D, a 6 x 5 Laplacian basis (c = 1.5), S of an ExpQuad kernel of
    variance 4; binary and 3-level ordinal labels."""
    rng = np.random.default_rng(5)
    X = rng.uniform(-2.0, 2.0, size=(N, 2))
    f = np.sin(2.0 * X[:, 0]) + X[:, 1]
    y_binary = np.where(f + 0.3 * rng.normal(size=N) > 0, 1.0, -1.0)
    y_ordinal = np.digitize(f + 0.3 * rng.normal(size=N), CUTS).astype(float)
    basis = LaplacianBasis(X, list(M), c=1.5)
    S = basis.variances(4.0 * pm.gp.cov.ExpQuad(2, ls=0.8)).eval()
    return X, basis, S, y_binary, y_ordinal


def _fn(basis, approx, kind, **options):
    """The jitted HSGP function (compiled once per module and options)."""
    key = (approx, kind, tuple(sorted(options.items())))
    if key not in _FNS:
        _FNS[key] = jax.jit(jax_hsgp.marginal_fn(approx, kind, basis, **{**TOL[approx], **options}))
    return _FNS[key]


def _labels(problem, ordinal):
    return problem[4] if ordinal else problem[3]


def _assert_same(out, ref, th):
    np.testing.assert_allclose(float(out[0]), ref.log_z, rtol=1e-8, atol=1e-8)
    np.testing.assert_allclose(np.asarray(out[1]), ref.dlog_z_dK.S, rtol=1e-8, atol=1e-8)
    np.testing.assert_allclose(np.asarray(out[3]), ref.dlog_z_dparams[: len(th)], rtol=1e-8, atol=1e-8)
    np.testing.assert_allclose(np.asarray(out[4]), ref.loo_log_p, rtol=1e-8, atol=1e-8)


@pytest.mark.parametrize("approx, cls, th, ordinal", CASES, ids=IDS)
def test_jax_hsgp_equals_the_numba_path(problem, approx, cls, th, ordinal):
    """Evidence, its gradient in S and theta, and the LOO terms, to 1e-8; dX is zero."""
    X, basis, S, *_ = problem
    y = _labels(problem, ordinal)
    out = _fn(basis, approx, cls.kind)(S, X, jnp.asarray(th, float), y)
    ref = getattr(pymc_gpc, approx)(HSGPPrior(basis.at(X), S), y, _likelihood(cls, th), **TOL[approx])
    assert int(out[-1]) == 0 and ref.converged
    _assert_same(out, ref, th)
    assert np.all(np.asarray(out[2]) == 0.0) and np.shape(out[2]) == X.shape


@pytest.mark.parametrize("case", [0, 3], ids=[IDS[0], IDS[3]])
def test_gradient_matches_central_differences(problem, case):
    """The returned gradient along a random direction in (S, theta) against central
    differences of the returned value (step 1e-5 relative to S)."""
    approx, cls, th, ordinal = CASES[case]
    X, basis, S, *_ = problem
    y = _labels(problem, ordinal)
    rng = np.random.default_rng(3)
    dS, dth = S * rng.normal(size=S.shape), rng.normal(size=len(th))
    fn = _fn(basis, approx, cls.kind)
    th = np.asarray(th, float)
    out = fn(S, X, th, y)
    analytic = float(np.sum(np.asarray(out[1]) * dS) + np.sum(np.asarray(out[3]) * dth))
    h = 1e-5

    def value(t):
        return float(fn(S + t * h * dS, X, th + t * h * dth, y)[0])

    assert analytic == pytest.approx((value(1) - value(-1)) / (2 * h), rel=1e-6, abs=1e-6)


def test_jax_grad_goes_through_the_custom_vjp(problem):
    """jax.grad of a function of the evidence: the cotangent times the returned gradient."""
    X, basis, S, y, _ = problem
    fn = _fn(basis, "ep", L.Probit.kind)
    dS = jax.grad(lambda s: 3.0 * fn(s, X, jnp.zeros(0), y)[0])(jnp.asarray(S))
    np.testing.assert_allclose(np.asarray(dS), 3.0 * np.asarray(fn(S, X, jnp.zeros(0), y)[1]), rtol=1e-12)


def test_retries_follow_the_numba_schedule(problem):
    """Four sweeps do not converge EP at a large amplitude: the JAX function runs the
    registry's "hsgp" retries (damping 0.5 with 8 sweeps, 0.25 with 16), and its value and
    gradient equal the numba path's ``solve_with_retries`` with the same schedule."""
    X, basis, S, y, _ = problem
    options = {"tol": 1e-12, "max_sweeps": 8}
    schedule = registry.get("ep").retry_schedule(options, "hsgp")
    assert [r["damping"] for r in schedule] == [0.5, 0.25]
    ref, retries = solve_with_retries("ep", HSGPPrior(basis.at(X), 100.0 * S), y, L.Probit(), np.zeros(0), None,
                                      options, retry_options=schedule)
    out = _fn(basis, "ep", L.Probit.kind, max_sweeps=8)(100.0 * S, X, jnp.zeros(0), y)
    assert retries == 2 and int(out[-2]) > 8
    assert int(out[-1]) == (0 if ref.converged else 1)
    np.testing.assert_allclose(float(out[0]), ref.log_z, rtol=1e-8)
    np.testing.assert_allclose(np.asarray(out[1]), ref.dlog_z_dK.S, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("case", ["negative S", "nan S", "epsilon >= 0.5"])
def test_failure_gives_minus_inf_and_a_zero_gradient(problem, case):
    X, basis, S, y, _ = problem
    S = S.copy()
    cls, th = (L.StepLabelNoise, [0.6]) if case == "epsilon >= 0.5" else (L.Probit, [])
    if case != "epsilon >= 0.5":
        S[1] = -1.0 if case == "negative S" else np.nan
    out = _fn(basis, "ep", cls.kind)(S, X, jnp.asarray(th, float), y)
    assert float(out[0]) == -np.inf and int(out[-1]) == 2
    assert np.all(np.asarray(out[4]) == -np.inf)
    assert all(np.all(np.asarray(g) == 0.0) for g in out[1:4])


@pytest.mark.parametrize("approx, cls, th, ordinal", CASES, ids=IDS)
def test_all_S_zero_gives_the_evidence_of_the_zero_prior(problem, approx, cls, th, ordinal):
    """S = 0 (the spectral density underflowed): the prior is f = 0, log Z = sum_i log p(y_i | 0)
    and the LOO terms log p(y_i | 0), status 0; Laplace's gradient in S the first-order term
    ((Phi^T g)^2 + (Phi^2)^T h) / 2 (g, h: d/df and d^2/df^2 of log p at 0), as the numba
    path (``tests/structures/test_hsgp.py``)."""
    X, basis, S, *_ = problem
    y = _labels(problem, ordinal)
    out = _fn(basis, approx, cls.kind)(np.zeros_like(S), X, jnp.asarray(th, float), y)
    d = _likelihood(cls, th).log_lik(y, np.zeros(N))
    Phi = basis(X)
    assert int(out[-1]) == 0
    np.testing.assert_allclose(float(out[0]), np.sum(d.lp), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(out[4]), d.lp, rtol=1e-12)
    if approx == "laplace":
        dS = 0.5 * ((Phi.T @ d.d1) ** 2 + (Phi ** 2).T @ d.d2)
        np.testing.assert_allclose(np.asarray(out[1]), dS, rtol=1e-10, atol=1e-12 * np.max(np.abs(dS)))


def test_predictive_equals_the_numba_path(problem):
    """Latent predictive mean and variance, and the joint covariance, at new inputs against
    ``HSGPPosterior.predict`` (Laplace, logistic)."""
    X, basis, S, y, _ = problem
    Xnew = np.random.default_rng(8).uniform(-2.5, 2.5, size=(7, 2))
    ref = pymc_gpc.laplace(HSGPPrior(basis.at(X), S), y, L.Logistic())
    want_mean, want_var = ref.posterior.predict(ref.a, basis.at(Xnew))
    Phi_new = basis(Xnew)
    for full_cov in (False, True):
        predict = jax.jit(jax_hsgp.predictive_fn("laplace", L.Logistic.kind, basis, full_cov))
        mean, second = predict(S, X, jnp.zeros(0), y, Phi_new, np.zeros(7))
        np.testing.assert_allclose(np.asarray(mean), want_mean, rtol=1e-8, atol=1e-10)
        var = np.diag(np.asarray(second)) if full_cov else np.asarray(second)
        np.testing.assert_allclose(var, want_var, rtol=1e-8, atol=1e-10)
    C = np.linalg.solve(ref.posterior.L_A, (Phi_new * np.sqrt(S)).T)
    np.testing.assert_allclose(np.asarray(second), C.T @ C, rtol=1e-8, atol=1e-10)


def _model(X, y, **options):
    with pm.Model() as model:
        log_ls = pm.Normal("log_ls", 0.0, 1.0)
        log_amp = pm.Normal("log_amp", 0.0, 1.0)
        cov = pt.exp(log_amp) * pm.gp.cov.ExpQuad(X.shape[1], ls=pt.exp(log_ls))
        gp = pymc_gpc.MarginalEP(cov_func=cov, likelihood=L.Probit(), approx="HSGP", m=[12], c=1.5, **options)
        gp.marginal_likelihood("y", X=X, y=y)
    return model


def test_pytensor_jax_mode_on_an_hsgp_model_logp_and_dlogp():
    """An HSGP model's logp and dlogp (autodiff through the spectral density into log_ls and
    log_amp) under mode="JAX" against the CPU linker (the Op's ``perform``)."""
    rng = np.random.default_rng(2)
    X = rng.uniform(-3.0, 3.0, size=(30, 1))
    y = np.where(np.sin(1.5 * X[:, 0]) + 0.3 * rng.normal(size=30) > 0, 1, -1)
    model = _model(X, y, tol=1e-11)
    logp = model.logp()
    outputs = [logp, *pytensor.grad(logp, model.value_vars)]
    cpu_fn = pytensor.function(model.value_vars, outputs)
    jax_fn = pytensor.function(model.value_vars, outputs, mode="JAX")
    for point in ((0.1, 0.3), (-0.4, 1.5)):
        ref, got = cpu_fn(*map(np.asarray, point)), jax_fn(*map(np.asarray, point))
        for r, g in zip(ref, got):
            np.testing.assert_allclose(np.asarray(g), r, rtol=1e-8, atol=1e-8)


def test_periodic_hsgp_model_under_jax_mode_equals_the_cpu_path():
    """The periodic expansion's variances use ``pt.ive`` (no JAX implementation without
    TensorFlow Probability; ``backends/jax/special.py`` supplies SciPy's): logp and dlogp in
    log_ls and log_scale under mode="JAX" equal the CPU linker's, and ``special.ive``
    equals SciPy's on a grid."""
    import scipy.special

    rng = np.random.default_rng(4)
    X = np.linspace(0.0, 4.0, 30)[:, None]
    y = np.where(np.sin(2 * np.pi * X[:, 0] / 1.3) + 0.3 * rng.normal(size=30) > 0, 1, -1)
    with pm.Model() as model:
        log_ls = pm.Normal("log_ls", 0.0, 1.0)
        log_scale = pm.Normal("log_scale", 0.0, 1.0)
        cov = pm.gp.cov.Periodic(1, period=1.3, ls=pt.exp(log_ls))
        gp = pymc_gpc.MarginalEP(cov_func=cov, likelihood=L.Probit(), approx="HSGP", m=12,
                                 scale=pt.exp(log_scale), tol=1e-11)
        gp.marginal_likelihood("y", X=X, y=y)
    logp = model.logp()
    outputs = [logp, *pytensor.grad(logp, model.value_vars)]
    cpu_fn = pytensor.function(model.value_vars, outputs)
    jax_fn = pytensor.function(model.value_vars, outputs, mode="JAX")
    for point in ((-0.2, 0.3), (0.4, -0.5)):
        ref, got = cpu_fn(*map(np.asarray, point)), jax_fn(*map(np.asarray, point))
        for r, g in zip(ref, got):
            np.testing.assert_allclose(np.asarray(g), r, rtol=1e-8, atol=1e-8)
    from pymc_gpc.backends.jax import special  # registered by the package already (above)

    v, x = np.arange(6.0)[:, None], np.geomspace(1e-3, 50.0, 7)[None, :]
    np.testing.assert_allclose(np.asarray(special.ive(v, x)), scipy.special.ive(v, x), rtol=1e-15)


def test_numpyro_nuts_runs_on_a_tiny_hsgp_model():
    """numpyro NUTS (the HSGP Op's JAX function) takes a few draws: every evaluation
    converged, the chain moved, and the log density it recorded at each draw is the CPU
    path's (to the sampler's EP tolerance, 1e-2 in the site change)."""
    rng = np.random.default_rng(0)
    X = rng.uniform(-3.0, 3.0, size=(20, 1))
    y = np.where(np.sin(1.5 * X[:, 0]) > 0, 1, -1)
    model = _model(X, y)
    start = model.initial_point()
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        idata = pymc_gpc.sample(draws=10, tune=10, chains=1, random_seed=1, progressbar=False,
                                nuts_sampler="numpyro", initvals=[start], nuts={"jitter": False})
    assert np.all(np.asarray(idata["sample_stats"]["y_status"]) == 0)
    post = idata["posterior"]
    draws = {name: np.asarray(post[name]).ravel() for name in ("log_ls", "log_amp")}
    assert np.all(np.isfinite(draws["log_ls"])) and np.unique(draws["log_ls"]).size > 1
    logp = model.compile_logp()
    cpu_lp = [logp({name: v[i] for name, v in draws.items()}) for i in range(10)]
    # PyMC stores numpyro's potential energy, -log density, as "lp"
    np.testing.assert_allclose(-np.asarray(idata["sample_stats"]["lp"]).ravel(), cpu_lp, atol=1e-3)


# --- several classes (``backends/jax/multiclass_hsgp.py``) ---------------------------------------

MC_SOLVERS = {"laplace": (pymc_gpc.softmax_laplace, L.Softmax, {}),
              "ep": (pymc_gpc.multinomial_probit_ep, L.MultinomialProbit, {"tol": 1e-10})}
_MC_FNS = {}


@pytest.fixture(scope="module")
def mc_problem():
    """n = 36 points in 2-D, a 5 x 4 Laplacian basis (c = 1.5) shared by 3 classes, each with its
    own ExpQuad kernel's S; the third class's 8 highest frequencies set to 0 (an underflowed
    spectral density); labels from three bands of a smooth function."""
    rng = np.random.default_rng(11)
    X = rng.uniform(-2.0, 2.0, size=(36, 2))
    y = np.digitize(X[:, 0] + 0.5 * np.sin(2.0 * X[:, 1]) + 0.3 * rng.normal(size=36), [-0.6, 0.6])
    basis = LaplacianBasis(X, [5, 4], c=1.5)
    S = np.stack([basis.variances(a * pm.gp.cov.ExpQuad(2, ls=ls)).eval() for a, ls in ((2.0, 0.8), (1.0, 1.2), (3.0, 0.6))])
    S[2, np.argsort(np.sum(basis.omega ** 2, axis=1))[-8:]] = 0.0
    return X, basis, S, y


def _mc_fn(basis, approx):
    from pymc_gpc.backends.jax import multiclass_hsgp

    if approx not in _MC_FNS:
        _MC_FNS[approx] = jax.jit(multiclass_hsgp.marginal_fn(approx, basis, **MC_SOLVERS[approx][2]))
    return _MC_FNS[approx]


def _mc_numba(approx, basis, X, S, y):
    from pymc_gpc.structures.multiclass_hsgp import MulticlassHSGPPrior

    run, cls, options = MC_SOLVERS[approx]
    return run(MulticlassHSGPPrior(basis(X), S), y, cls(), **options)


@pytest.mark.parametrize("approx", ["laplace", "ep"], ids=["softmax-laplace", "nested-ep"])
def test_multiclass_jax_hsgp_equals_the_numba_path(mc_problem, approx):
    """Softmax Laplace and nested EP: the evidence, its gradient in S (c, M) and the LOO terms
    to 1e-8 against ``structures.multiclass_hsgp`` (itself held to the dense computation in
    ``tests/structures/test_hsgp_multiclass.py``); dX is zero."""
    X, basis, S, y = mc_problem
    out = _mc_fn(basis, approx)(S, X, jnp.zeros(0), y.astype(float))
    ref = _mc_numba(approx, basis, X, S, y)
    assert int(out[-1]) == 0 and ref.converged
    np.testing.assert_allclose(float(out[0]), ref.log_z, rtol=1e-8, atol=1e-8)
    np.testing.assert_allclose(np.asarray(out[1]), ref.dlog_z_dK.S, rtol=1e-8, atol=1e-8)
    np.testing.assert_allclose(np.asarray(out[4]), ref.loo_log_p, rtol=1e-8, atol=1e-8)
    assert np.all(np.asarray(out[2]) == 0.0) and np.shape(out[2]) == X.shape


@pytest.mark.parametrize("approx", ["laplace", "ep"], ids=["softmax-laplace", "nested-ep"])
def test_multiclass_gradient_matches_central_differences(mc_problem, approx):
    """The returned dS along a random direction (relative to S, the zero entries moved up from
    0) against central differences of the returned value, step 1e-5."""
    X, basis, S, y = mc_problem
    fn = _mc_fn(basis, approx)
    rng = np.random.default_rng(4)
    dS = np.where(S > 0.0, S * rng.normal(size=S.shape), 1e-3 * np.abs(rng.normal(size=S.shape)))
    S0 = S + 1e-5 * (S == 0.0)  # central differences about a point where every S_j > 0
    analytic = float(np.sum(np.asarray(fn(S0, X, jnp.zeros(0), y.astype(float))[1]) * dS))
    h = 1e-5

    def value(t):
        return float(fn(S0 + t * h * dS, X, jnp.zeros(0), y.astype(float))[0])

    assert analytic == pytest.approx((value(1) - value(-1)) / (2 * h), rel=1e-6, abs=1e-7)


def test_multiclass_predictive_equals_the_numba_path(mc_problem):
    """Latent predictive mean and the per-point c x c covariances, and the joint class-major
    covariance, at new inputs against ``MulticlassHSGPPosterior.predict`` (softmax Laplace)."""
    from pymc_gpc.backends.jax import multiclass_hsgp

    X, basis, S, y = mc_problem
    Xnew = np.random.default_rng(8).uniform(-2.5, 2.5, size=(6, 2))
    ref = _mc_numba("laplace", basis, X, S, y)
    Phi_new = np.stack([basis(Xnew)] * 3)
    for full_cov in (False, True):
        want_mean, want_cov = ref.posterior.predict(ref.a, Phi_new, full_cov=full_cov)
        predict = jax.jit(multiclass_hsgp.predictive_fn("laplace", basis, full_cov))
        mean, cov = predict(S, X, y.astype(float), Phi_new, np.zeros((3, 6)))
        np.testing.assert_allclose(np.asarray(mean), want_mean, rtol=1e-8, atol=1e-10)
        np.testing.assert_allclose(np.asarray(cov), want_cov, rtol=1e-8, atol=1e-10)


def test_numpyro_nuts_runs_on_a_tiny_multiclass_hsgp_model():
    """numpyro NUTS on a softmax Laplace model with approx="HSGP" (the multi-class HSGP Op's JAX
    function): every evaluation converged, the chain moved, and the log density recorded at
    each draw is the numba model's."""
    rng = np.random.default_rng(1)
    X = rng.uniform(-3.0, 3.0, size=(24, 1))
    y = np.digitize(np.sin(1.2 * X[:, 0]) + 0.2 * rng.normal(size=24), [-0.4, 0.4])
    with pm.Model() as model:
        log_ls = pm.Normal("log_ls", 0.0, 1.0)
        cov = pm.gp.cov.ExpQuad(1, ls=pt.exp(log_ls))
        gp = pymc_gpc.MarginalLaplace(cov_func=cov, likelihood=L.Softmax(), approx="HSGP", m=[10], c=1.5)
        gp.marginal_likelihood("y", X=X, y=y)
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        idata = pymc_gpc.sample(draws=8, tune=8, chains=1, random_seed=1, progressbar=False,
                                nuts_sampler="numpyro", initvals=[model.initial_point()], nuts={"jitter": False})
    assert np.all(np.asarray(idata["sample_stats"]["y_status"]) == 0)
    draws = np.asarray(idata["posterior"]["log_ls"]).ravel()
    assert np.all(np.isfinite(draws)) and np.unique(draws).size > 1
    logp = model.compile_logp()
    np.testing.assert_allclose(-np.asarray(idata["sample_stats"]["lp"]).ravel(),
                               [logp({"log_ls": v}) for v in draws], atol=1e-3)


@pytest.mark.parametrize("d, m, boundary", [(1, [9], "dirichlet"), (2, [5, 4], "neumann"),
                                            (2, [4, 6], ("dirichlet-neumann", "neumann-dirichlet"))])
def test_product_to_sum_equals_the_dense_products(d, m, boundary):
    """``ProductToSum`` (the O(n P) route the JAX solvers take for a Laplacian basis) against
    the dense products on Phi: H = Phi^T diag(w) Phi with weights of either sign, and
    diag(Phi Sigma Phi^T) for a symmetric positive definite Sigma, every boundary condition."""
    rng = np.random.default_rng(d + len(m))
    X = rng.uniform(-1.5, 2.0, size=(50, d))
    basis = LaplacianBasis(X, m, c=1.4, boundary=boundary)
    Phi = basis(X)
    pts = jax_hsgp.ProductToSum(basis)
    tables = pts.tables(jnp.asarray(X))
    w = rng.normal(size=50)
    np.testing.assert_allclose(np.asarray(pts.gram(tables, jnp.asarray(w))), Phi.T @ (w[:, None] * Phi),
                               rtol=1e-10, atol=1e-12)
    B = rng.normal(size=(basis.M, basis.M))
    Sigma = B @ B.T / basis.M + np.eye(basis.M)
    np.testing.assert_allclose(np.asarray(pts.quad_diag(tables, jnp.asarray(Sigma))),
                               np.einsum("ij,jk,ik->i", Phi, Sigma, Phi), rtol=1e-10)
