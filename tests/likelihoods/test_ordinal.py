"""Ordinal GP classification (``likelihoods.ordinal``): OrderedProbit and OrderedLogit.

Ground truth: the binary likelihoods at K = 2, brute-force integration over the latent
Gaussian (scipy), central finite differences, Monte Carlo over the latent predictive and
a short NUTS run on data drawn from the model.
"""

import warnings

import numpy as np
import pandas as pd
import pymc as pm
import pytensor.tensor as pt
import pytest
from scipy import integrate, special

import pymc_gpc
from pymc_gpc.backends.python_vm import PYTHON_VM_MODE
from pymc_gpc.likelihoods import Logistic, OrderedLogit, OrderedProbit, ProbitBias

rng = np.random.default_rng(3)
X_SMALL = rng.normal(size=(12, 2))
K_SMALL = 1.5 * np.exp(-0.5 * ((X_SMALL[:, None] - X_SMALL[None]) ** 2).sum(-1)) + 1e-8 * np.eye(12)
Y01 = (X_SMALL[:, 0] + 0.5 * rng.normal(size=12) > 0).astype(float)
SOLVERS = {"ep": pymc_gpc.ep, "laplace": pymc_gpc.laplace}


def _ref_prob(lik_name, k, f, th):
    """p(y = k | f) written with scipy (Chu & Ghahramani 2005, eq. 4), f any shape."""
    if lik_name == "OrderedProbit":
        b, s, cdf = np.r_[-np.inf, th[:-1], np.inf], th[-1], special.ndtr
    else:
        b, s, cdf = np.r_[-np.inf, th, np.inf], 1.0, special.expit
    return cdf((b[k + 1] - f) / s) - cdf((b[k] - f) / s)


# -- K = 2 is the binary model ------------------------------------------------------


@pytest.mark.parametrize("solver", sorted(SOLVERS))
def test_two_classes_equal_the_binary_likelihoods(solver):
    """OrderedProbit([b]) is ProbitBias(-b) with 0 -> -1, 1 -> +1; OrderedLogit([0]) is Logistic."""
    run = SOLVERS[solver]
    a, b = run(K_SMALL, Y01, OrderedProbit([0.3])), run(K_SMALL, 2 * Y01 - 1, ProbitBias(-0.3))
    assert abs(a.log_z - b.log_z) < 1e-10
    np.testing.assert_allclose(a.dlog_z_dK, b.dlog_z_dK, rtol=0, atol=1e-10)
    assert abs(a.dlog_z_dparams[0] + b.dlog_z_dparams[0]) < 1e-10  # d/dcutpoint = -d/dbias
    a, b = run(K_SMALL, Y01, OrderedLogit([0.0])), run(K_SMALL, 2 * Y01 - 1, Logistic())
    assert abs(a.log_z - b.log_z) < 1e-10
    np.testing.assert_allclose(a.dlog_z_dK, b.dlog_z_dK, rtol=0, atol=1e-10)


# -- evidence against brute-force integration ----------------------------------------


def _exact_log_evidence(K, y, lik_name, th):
    """log of the integral of prod_i p(y_i | f_i) N(f; 0, K): scipy's dblquad for n = 2, a
    60-point Gauss-Hermite product rule for n = 3 (after f = L z)."""
    n = len(y)
    L_ = np.linalg.cholesky(K)
    if n == 2:
        def integrand(z2, z1):
            f = L_ @ np.array([z1, z2])
            lik = np.prod([_ref_prob(lik_name, int(y[i]), f[i], th) for i in range(2)])
            return lik * np.exp(-0.5 * (z1 * z1 + z2 * z2)) / (2 * np.pi)
        value = integrate.dblquad(integrand, -9, 9, -9, 9, epsabs=1e-13, epsrel=1e-10)[0]
        return np.log(value)
    x, w = special.roots_hermite(60)
    grid = np.stack(np.meshgrid(*[x] * n, indexing="ij"), -1).reshape(-1, n)
    weights = np.prod(np.stack(np.meshgrid(*[w] * n, indexing="ij"), -1).reshape(-1, n), axis=1)
    f = np.sqrt(2.0) * grid @ L_.T
    lik = np.prod([_ref_prob(lik_name, int(y[i]), f[:, i], th) for i in range(n)], axis=0)
    return np.log(np.sum(weights * lik) / np.pi ** (n / 2))


EVIDENCE_CASES = [  # (K, labels, likelihood)
    (np.array([[1.0, 0.6], [0.6, 1.0]]), [0, 2], OrderedProbit([-0.5, 0.7], sigma=0.6)),
    (np.array([[2.0, 1.5], [1.5, 2.0]]), [1, 1], OrderedLogit([-1.0, 1.0])),
    (np.array([[1.0, 0.3, 0.1], [0.3, 1.5, 0.5], [0.1, 0.5, 0.8]]), [0, 1, 3], OrderedProbit([-1.0, 0.0, 0.8])),
    (np.array([[3.0, 2.0, 1.0], [2.0, 3.0, 2.0], [1.0, 2.0, 3.0]]), [2, 0, 1], OrderedLogit([-0.5, 0.4])),
]


def test_evidence_against_brute_force_integration():
    """EP within 2e-2 nats and Laplace within 1.5e-1 of the exact log evidence (n <= 3), and
    EP closer than Laplace on average (as for binary GPC: Kuss & Rasmussen 2005)."""
    errors = {"ep": [], "laplace": []}
    for K, y, lik in EVIDENCE_CASES:
        exact = _exact_log_evidence(K, np.array(y), type(lik).__name__, lik.params)
        for name, run in SOLVERS.items():
            errors[name].append(abs(run(K, np.array(y, float), lik).log_z - exact))
    assert max(errors["ep"]) < 2e-2, errors
    assert max(errors["laplace"]) < 1.5e-1, errors
    assert np.mean(errors["ep"]) < np.mean(errors["laplace"]), errors


# -- gradients against central finite differences -------------------------------------

Y3 = np.digitize(X_SMALL[:, 0] + 0.3 * X_SMALL[:, 1], [-0.5, 0.5])


def _model(gp_class, lik_name):
    with pm.Model() as model:
        ls = pm.LogNormal("ls", 0.0, 0.5)
        amp = pm.LogNormal("amp", 0.0, 0.5)
        c = pm.Normal("c", 0.0, 2.0, shape=2, transform=pm.distributions.transforms.ordered, initval=[-0.6, 0.4])
        if lik_name == "OrderedProbit":
            lik = OrderedProbit(c, sigma=pm.LogNormal("sigma", -0.5, 0.3))
        else:
            lik = OrderedLogit(c)
        gp = gp_class(cov_func=amp * pm.gp.cov.ExpQuad(2, ls=ls), likelihood=lik)
        gp.marginal_likelihood("y", X=X_SMALL, y=Y3)
    return model, gp


GP_CLASSES = {"ep": pymc_gpc.MarginalEP, "laplace": pymc_gpc.MarginalLaplace}


@pytest.fixture(scope="module", params=[(a, k) for a in GP_CLASSES for k in ("OrderedProbit", "OrderedLogit")],
                ids=lambda p: "-".join(p))
def compiled(request):
    """(model, gp, logp, dlogp), compiled once per classifier and likelihood (Python VM:
    the graph around the Op is tiny, and numba's compilation would dominate the tests)."""
    approximation, lik_name = request.param
    model, gp = _model(GP_CLASSES[approximation], lik_name)
    fn = model.compile_fn([model.logp(), model.dlogp()], mode=PYTHON_VM_MODE)
    return model, gp, lambda p: fn(p)[0], lambda p: fn(p)[1], lik_name


def test_gradient_against_finite_differences(compiled):
    """d log p / d (log ls, log amp, both cutpoints (ordered transform), log sigma)."""
    model, _, logp, dlogp, _ = compiled
    point = model.initial_point()
    point["ls_log__"] = np.array(0.2)
    names = [v.name for v in model.value_vars]
    sizes = [np.size(point[n]) for n in names]
    x0 = np.concatenate([np.ravel(point[n]) for n in names])

    def at(x):
        out, i = {}, 0
        for n, k in zip(names, sizes):
            out[n] = x[i:i + k].reshape(np.shape(point[n]))
            i += k
        return out

    grad = dlogp(at(x0))
    h = 1e-5
    for j in range(x0.size):
        e = np.zeros_like(x0)
        e[j] = h
        fd = (logp(at(x0 + e)) - logp(at(x0 - e))) / (2 * h)
        assert abs(fd - grad[j]) < 1e-5 * max(1.0, abs(fd)), (names, j, fd, grad[j])


# -- prediction ---------------------------------------------------------------------


def test_predict_rows_sum_to_one_and_match_monte_carlo(compiled):
    model, gp, _, _, lik_name = compiled
    point = model.initial_point()
    point = {**point, "ls": np.array(1.0), "amp": np.array(1.0), "c": np.array([-0.6, 0.4]), "sigma": np.array(0.6)}
    Xnew = np.array([[0.0, 0.0], [1.5, -0.5], [-2.0, 1.0]])
    p, mean, var = gp.predict(Xnew, point=point, return_latent=True, progressbar=False)
    assert p.shape == (3, 3)
    np.testing.assert_allclose(p.sum(axis=1), 1.0, atol=1e-12)
    th = np.r_[-0.6, 0.4, 0.6] if lik_name == "OrderedProbit" else np.r_[-0.6, 0.4]
    f = mean[:, None] + np.sqrt(var)[:, None] * np.random.default_rng(0).normal(size=(1, 200_000))
    mc = np.stack([_ref_prob(lik_name, k, f, th).mean(axis=1) for k in range(3)], axis=1)
    np.testing.assert_allclose(p, mc, atol=4e-3)


def test_labels_as_ordered_categorical_or_levels_give_the_same_model():
    names = np.array(["low", "mid", "high"])
    values = []
    for y, levels in ((Y3, None), (pd.Categorical(names[Y3], categories=names, ordered=True), None),
                      (names[Y3], ["low", "mid", "high"])):
        with pm.Model() as model:
            gp = pymc_gpc.MarginalEP(cov_func=pm.gp.cov.ExpQuad(2, ls=1.0), likelihood=OrderedProbit([-0.5, 0.5]))
            gp.marginal_likelihood("y", X=X_SMALL, y=y, levels=levels)
        values.append(model.compile_logp()({}))
        assert list(gp.classes) == ([0, 1, 2] if levels is None and not isinstance(y, pd.Categorical)
                                    else list(names))
    assert values[0] == values[1] == values[2]


# -- bad input ------------------------------------------------------------------------


@pytest.mark.parametrize("make,match", [
    (lambda: OrderedProbit([0.5, 0.5]), "strictly increasing"),
    (lambda: OrderedLogit([1.0, -1.0]), "strictly increasing"),
    (lambda: OrderedProbit([-1.0, 1.0], sigma=0.0), "sigma > 0"),
    (lambda: OrderedProbit([-1.0, 1.0], sigma=-2.0), "sigma > 0"),
    (lambda: OrderedLogit([np.nan, 1.0]), "finite"),
])
def test_bad_likelihood_parameters(make, match):
    with pytest.raises(ValueError, match=match):
        make()


@pytest.mark.parametrize("lik,y,kwargs,match", [
    (OrderedProbit([-0.5, 0.5]), np.r_[Y3[:-1], 3], {}, "outside the integers 0..2"),
    (OrderedProbit([-0.5, 0.5]), np.r_[Y3[:-1], 1.5], {}, "outside the integers 0..2"),
    (OrderedProbit([0.0]), (Y3 > 0).astype(int), {}, "at least 3 ordered levels.*binary likelihood"),
    (OrderedLogit([-0.5, 0.5]), np.array(["a", "b", "c"])[Y3], {}, "levels="),
    (OrderedLogit([-0.5, 0.5]), pd.Categorical(np.array(["a", "b", "c"])[Y3]), {}, "unordered categorical"),
    (OrderedLogit([-0.5, 0.5]), np.array(["a", "b", "c"])[Y3], {"levels": ["a", "b"]}, "levels has 2"),
    (OrderedLogit([-0.5, 0.5]), np.array(["a", "b", "d"])[Y3], {"levels": ["a", "b", "c"]}, "not among the levels"),
    (OrderedLogit([-0.5, 0.5, 1.0]), pd.Categorical(Y3, ordered=True), {}, "3 ordered levels but the likelihood has 4"),
])
def test_bad_labels(lik, y, kwargs, match):
    with pm.Model():
        gp = pymc_gpc.MarginalEP(cov_func=pm.gp.cov.ExpQuad(2, ls=1.0), likelihood=lik)
        with pytest.raises(ValueError, match=match):
            gp.marginal_likelihood("y", X=X_SMALL, y=y, **kwargs)


def test_ordinal_refused_where_not_integrated():
    with pytest.raises(ValueError, match="MarginalEP or MarginalLaplace"):
        pymc_gpc.MarginalMeanField(cov_func=pm.gp.cov.ExpQuad(2, ls=1.0), likelihood=OrderedProbit([-1.0, 1.0]))


def test_extreme_proposals_give_minus_inf_with_a_finite_gradient(compiled):
    """Cutpoints merged by the ordered transform's underflow, a collapsed or huge noise and
    a vast kernel amplitude: -inf or a finite value, never NaN, and a finite gradient."""
    model, _, logp, dlogp, lik_name = compiled
    start = model.initial_point()
    extremes = [{"c_ordered__": np.array([0.3, -800.0])}, {"amp_log__": np.array(60.0)},
                {"ls_log__": np.array(-40.0)}, {"c_ordered__": np.array([1e8, 20.0])}]
    if lik_name == "OrderedProbit":
        extremes += [{"sigma_log__": np.array(-400.0)}, {"sigma_log__": np.array(300.0)}]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for change in extremes:
            point = {**start, **change}
            value = logp(point)
            assert not np.isnan(value) and value < np.inf, change
            assert np.all(np.isfinite(dlogp(point))), change
    assert logp({**start, **extremes[0]}) == -np.inf


# -- a short NUTS run ---------------------------------------------------------------------


@pytest.mark.slow  # a sampling run: CI only, not the between-edits tier
def test_nuts_recovers_the_cutpoints():
    """30 points drawn from the model (ls 1, amplitude 1, cutpoints -0.7, 0.6, probit noise 0.3):
    no divergences, both true cutpoints inside the 95 % intervals, and az.loo runs."""
    import arviz as az

    r = np.random.default_rng(11)
    X = np.sort(r.uniform(-3, 3, size=(30, 1)), axis=0)
    Kt = np.exp(-0.5 * (X - X.T) ** 2) + 1e-8 * np.eye(30)
    f = np.linalg.cholesky(Kt) @ r.normal(size=30)
    y = np.digitize(f + 0.3 * r.normal(size=30), [-0.7, 0.6])
    with pm.Model() as model:
        ls = pm.LogNormal("ls", 0.0, 0.5)
        c = pm.Normal("c", 0.0, 2.0, shape=2, transform=pm.distributions.transforms.ordered, initval=[-0.5, 0.5])
        gp = pymc_gpc.MarginalEP(cov_func=pm.gp.cov.ExpQuad(1, ls=ls), likelihood=OrderedProbit(c, sigma=0.3))
        gp.marginal_likelihood("y", X=X, y=y)
        idata = pymc_gpc.sample(draws=200, tune=200, chains=2, cores=1, random_seed=5, progressbar=False,
                                compute_convergence_checks=False, compile_kwargs={"mode": PYTHON_VM_MODE})
    assert int(idata.sample_stats["diverging"].sum()) == 0
    lo, hi = np.quantile(idata.posterior["c"].values.reshape(-1, 2), [0.025, 0.975], axis=0)
    assert np.all((lo < [-0.7, 0.6]) & ([-0.7, 0.6] < hi)), (lo, hi)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Pareto k warnings on 30 points are not the point here
        assert np.isfinite(float(az.loo(idata).elpd))
    p = gp.predict(X[:5], idata=idata, max_draws=20, progressbar=False)
    assert p.shape == (5, 3) and np.allclose(p.sum(axis=1), 1.0)


# -- FITC ------------------------------------------------------------------------------


@pytest.mark.parametrize("gp_class", [pymc_gpc.MarginalEP, pymc_gpc.MarginalLaplace], ids=lambda c: c.__name__)
def test_fitc_with_inducing_inputs_at_the_data_equals_dense(gp_class):
    """With Xu = X the FITC prior is the dense one: evidence and gradient agree to 1e-6."""
    results = []
    for approx in (None, "FITC"):
        with pm.Model() as model:
            ls = pm.LogNormal("ls", 0.0, 0.5)
            c = pm.Normal("c", 0.0, 2.0, shape=2, transform=pm.distributions.transforms.ordered,
                          initval=[-0.6, 0.4])
            gp = gp_class(cov_func=pm.gp.cov.ExpQuad(2, ls=ls), likelihood=OrderedLogit(c), approx=approx)
            gp.marginal_likelihood("y", X=X_SMALL, y=Y3, **({"Xu": X_SMALL} if approx else {}))
        fn = model.compile_fn([model.logp(), model.dlogp()], mode=PYTHON_VM_MODE)
        results.append(fn({"ls_log__": np.array(0.1), "c_ordered__": np.array([-0.6, 0.0])}))
    assert abs(results[0][0] - results[1][0]) < 1e-6
    np.testing.assert_allclose(results[0][1], results[1][1], rtol=0, atol=1e-6)


# -- JAX -------------------------------------------------------------------------------


@pytest.mark.parametrize("lik", [OrderedProbit([-1.0, 0.2, 1.5], sigma=0.7), OrderedLogit([-1.0, 0.2, 1.5])],
                         ids=lambda lik: type(lik).__name__)
def test_jax_kernels_match_numba(lik):
    """``backends.jax.likelihoods``' ordinal rows against the numba kernels, to 1e-8."""
    jax = pytest.importorskip("jax", reason="the JAX backend needs the jax extra")
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp

    from pymc_gpc.backends.jax import likelihoods as JL
    from pymc_gpc.likelihoods.base import log_lik_map, tilted_map
    from pymc_gpc.likelihoods.ordinal import ordinal_log_lik_dparams, ordinal_tilted_dparams

    r = np.random.default_rng(0)
    y = r.integers(0, 4, 30).astype(float)
    mu, s2, f = 3 * r.normal(size=30), np.exp(r.normal(size=30)), 3 * r.normal(size=30)
    th = lik.params
    J = [jnp.asarray(a) for a in (y, mu, s2, f, th)]
    rows = np.asarray(JL.ordinal_tilted(lik.logit, J[0], J[1], J[2], J[4]))
    np.testing.assert_allclose(rows[:3], tilted_map(lik.kind, y, mu, s2, th)[:3], rtol=1e-8, atol=1e-8)
    np.testing.assert_allclose(JL.ordinal_scatter(lik.logit, J[0], J[4], *rows[3:6]),
                               ordinal_tilted_dparams(lik.logit, y, mu, s2, th), rtol=1e-8, atol=1e-8)
    rows = np.asarray(JL.ordinal_log_lik(lik.logit, J[0], J[3], J[4]))
    np.testing.assert_allclose(rows[:4], log_lik_map(lik.kind, y, f, th)[:4], rtol=1e-8, atol=1e-8)
    for j, want in enumerate(ordinal_log_lik_dparams(lik.logit, y, f, th)):
        np.testing.assert_allclose(JL.ordinal_scatter(lik.logit, J[0], J[4], *rows[4 + 3 * j:7 + 3 * j]), want,
                                   rtol=1e-8, atol=1e-8)


# -- numba: the compiled EP path -----------------------------------------------------------


@pytest.mark.parametrize("lik_type, theta", [(OrderedProbit, [-0.6, 0.5, 0.8]), (OrderedLogit, [-0.8, 0.0, 0.9])],
                         ids=lambda v: getattr(v, "__name__", None))
def test_compiled_ep_path_equals_the_python_path(lik_type, theta, compiled_ep):
    """EP through the numba linker (``backends.numba.compiled_ep``: no Python per evaluation)
    and the Python linker (the Op's ``perform``, ``pymc_gpc.ep``), each Op with its own warm
    starts, along a short walk of the kernel amplitude and the cutpoints: the same log Z,
    dlog Z/dK, dlog Z/dtheta (every cutpoint, sigma) and LOO terms to 1e-10, the numba
    function answering without the Op's Python path; unordered cutpoints give -inf, status 2
    and a zero gradient on both."""
    import pytensor
    from pymc_gpc.backends.numba import thread_state
    from pymc_gpc.ops import ApproxMarginalOp

    K, th_in, hyper = pt.dmatrix("K"), pt.dvector("theta"), pt.dvector("hyper")
    y = np.digitize(X_SMALL[:, 0] + 0.3 * rng.normal(size=12), theta[:2] if lik_type is OrderedProbit else theta)
    fns, ops_ = [], []
    for linker in ("numba", "py"):
        op = ApproxMarginalOp("ep", lik_type, hyper_names=(("log_amp", 1),))
        out = op(K, th_in, y.astype(float), hyper)
        fns.append(pytensor.function([K, th_in, hyper], [out[0], out[1], out[2], out[3], out[5]],
                                     mode=pytensor.compile.mode.Mode(linker=linker)))
        ops_.append(op)
    walk = np.random.default_rng(8)
    for step in range(6):
        log_amp = 0.4 * walk.normal()
        th = np.array(theta)
        n_cut = len(theta) - (lik_type is OrderedProbit)
        th[:n_cut] += 0.1 * walk.normal(size=n_cut)  # stays ordered: gaps of 0.8 and more
        args = (np.exp(log_amp) * K_SMALL, th, np.array([log_amp]))
        got, want = fns[0](*args), fns[1](*args)
        assert int(got[4]) == int(want[4]) == 0
        for a, b in zip(got[:4], want[:4]):
            np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-10 * np.abs(b).max(initial=1.0))
    (key,) = ops_[0].backend_state_keys
    assert ops_[0]._counts["evaluations"] == 0 and thread_state.evaluations(key) == 6
    unordered = np.array(theta)
    unordered[[0, 1]] = unordered[[1, 0]]
    for fn in fns:
        out = fn(K_SMALL, unordered, np.array([0.0]))
        assert out[0] == -np.inf and int(out[4]) == 2 and np.all(out[1] == 0.0) and np.all(out[2] == 0.0)
