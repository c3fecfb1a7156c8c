"""The JAX backend's FITC EP and Laplace (``backends/jax/fitc.py``), its dispatch and the
row sharding (``backends/jax/sharding.py``): against the numba path (``structures.fitc``
with ``pymc_gpc.ep`` / ``pymc_gpc.laplace``), against central finite differences, sharded
against one device, through ``pytensor.function(mode="JAX")`` and numpyro.

Skipped where jax is not installed (``pip install pymc-gpc[jax]``). Each jitted function
is compiled once per module (``_fn``): compilation, not evaluation, is what these tests
spend their time on.
"""

import os
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

jax = pytest.importorskip("jax", reason="the JAX backend needs jax: pip install pymc-gpc[jax]")

import jax.numpy as jnp  # noqa: E402
import pymc as pm  # noqa: E402
import pytensor  # noqa: E402
import pytensor.tensor as pt  # noqa: E402

import pymc_gpc  # noqa: E402
from pymc_gpc import ep, laplace  # noqa: E402
from pymc_gpc import likelihoods as L  # noqa: E402
from pymc_gpc.backends.jax import fitc as jax_fitc  # noqa: E402
from pymc_gpc.structures import FITCPrior  # noqa: E402

from ..conftest import XLA_TEST_FLAGS, random_problem  # noqa: E402

LIKS = [(L.Probit, []), (L.ProbitBias, [0.4]), (L.ProbitNoise, [0.6]), (L.StepLabelNoise, [0.1]), (L.Logistic, [])]
PAIRS = [(a, lik, th) for lik, th in LIKS for a in ("ep", "laplace") if lik.supports_laplace or a == "ep"]
TOL = {"ep": {"tol": 1e-12}, "laplace": {}}
RUN = {"ep": ep, "laplace": laplace}
_FNS = {}


def _fn(approx, kind):
    """The jitted FITC function (compiled once per module)."""
    if (approx, kind) not in _FNS:
        _FNS[approx, kind] = jax.jit(jax_fitc.marginal_fn(approx, kind, **TOL[approx]))
    return _FNS[approx, kind]


def _se(A, B, amp, ls):
    return amp * np.exp(-0.5 * ((A[:, None] - B[None]) ** 2).sum(-1) / ls ** 2)


@pytest.fixture(scope="module")
def problem():
    """n = 40 points, m = 6 inducing inputs, a squared-exponential kernel (amplitude 3)."""
    rng = np.random.default_rng(11)
    X, y = random_problem(rng, 40)
    Xu = X[:6] + 0.3 * rng.normal(size=(6, 2))
    Kuu = _se(Xu, Xu, 3.0, 0.9) + 1e-6 * np.eye(6)
    return Kuu, _se(Xu, X, 3.0, 0.9), np.full(40, 3.0 + 1e-6), y


def _numba(approx, lik, th, Kuu, Kuf, kd, y):
    return RUN[approx](FITCPrior(Kuu, Kuf, kd), y, lik(*th), **TOL[approx])


def _assert_same(out, ref, th):
    assert int(out[-1]) == 0 and ref.converged
    np.testing.assert_allclose(float(out[0]), ref.log_z, rtol=1e-8, atol=1e-8)
    for got, want in zip(out[1:4], ref.dlog_z_dK):
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-8, atol=1e-8)
    np.testing.assert_allclose(np.asarray(out[4]), ref.dlog_z_dparams[: len(th)], rtol=1e-8, atol=1e-8)
    np.testing.assert_allclose(np.asarray(out[5]), ref.loo_log_p, rtol=1e-8, atol=1e-8)


@pytest.mark.parametrize("approx, lik, th", PAIRS, ids=lambda v: getattr(v, "__name__", str(v)))
def test_jax_fitc_equals_the_numba_path(problem, approx, lik, th):
    """Evidence, its gradient in K_uu, K_uf, diag K_ff and theta, and the LOO terms, to 1e-8."""
    Kuu, Kuf, kd, y = problem
    out = _fn(approx, lik.kind)(Kuu, Kuf, kd, jnp.asarray(th, float), y)
    _assert_same(out, _numba(approx, lik, th, Kuu, Kuf, kd, y), th)


@pytest.mark.parametrize("approx, lik, th", [PAIRS[2], PAIRS[3], PAIRS[7]],
                         ids=lambda v: getattr(v, "__name__", str(v)))
def test_gradient_matches_central_differences(problem, approx, lik, th):
    """The returned gradient along a random direction in (K_uu, K_uf, diag K_ff, theta)
    against central differences of the returned value (step 1e-5)."""
    Kuu, Kuf, kd, y = problem
    rng = np.random.default_rng(3)
    E = rng.normal(size=Kuu.shape)
    dirs = [0.5 * (E + E.T), rng.normal(size=Kuf.shape), rng.normal(size=kd.shape), rng.normal(size=len(th))]
    fn = _fn(approx, lik.kind)
    out = fn(Kuu, Kuf, kd, jnp.asarray(th, float), y)
    analytic = sum(float(np.sum(np.asarray(g) * d)) for g, d in zip(out[1:5], dirs))
    h = 1e-5

    def value(s):
        return float(fn(*(a + s * h * d for a, d in zip((Kuu, Kuf, kd, np.asarray(th, float)), dirs)), y)[0])

    fd = (value(1) - value(-1)) / (2 * h)
    assert analytic == pytest.approx(fd, rel=1e-6, abs=1e-6)


def test_jax_grad_goes_through_the_custom_vjp(problem):
    """jax.grad of a function of the FITC evidence: the cotangent times the returned gradient."""
    Kuu, Kuf, kd, y = problem
    fn = _fn("ep", L.ProbitBias.kind)

    def f(Kuf, th):
        return 2.0 * fn(Kuu, Kuf, kd, th, y)[0]

    dKuf, dth = jax.grad(f, argnums=(0, 1))(Kuf, jnp.asarray([0.4]))
    out = fn(Kuu, Kuf, kd, jnp.asarray([0.4]), y)
    np.testing.assert_allclose(np.asarray(dKuf), 2.0 * np.asarray(out[2]), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(dth), 2.0 * np.asarray(out[4]), rtol=1e-12)


def test_singular_kuu_takes_the_numba_paths_jitter(problem):
    """K_uu with duplicated inducing inputs (singular): both add the same fallback jitter."""
    Kuu, Kuf, kd, y = problem
    Kuu, Kuf = Kuu.copy(), Kuf.copy()
    Kuu[1], Kuu[:, 1], Kuf[1] = Kuu[0], Kuu[:, 0], Kuf[0]
    Kuu[1, 1] = Kuu[0, 0]
    out = _fn("ep", L.Probit.kind)(Kuu - 1e-6 * np.eye(6), Kuf, kd, jnp.zeros(0), y)
    ref = _numba("ep", L.Probit, [], Kuu - 1e-6 * np.eye(6), Kuf, kd, y)
    assert FITCPrior(Kuu - 1e-6 * np.eye(6), Kuf, kd).jitter > 0.0
    _assert_same(out, ref, [])


@pytest.mark.parametrize("case", ["nan kernel", "sigma < 0", "epsilon >= 0.5"])
def test_failure_gives_minus_inf_and_a_finite_zero_gradient(problem, case):
    Kuu, Kuf, kd, y = problem
    approx, lik, th = {"nan kernel": ("laplace", L.Probit, []), "sigma < 0": ("ep", L.ProbitNoise, [-0.5]),
                       "epsilon >= 0.5": ("ep", L.StepLabelNoise, [0.6])}[case]
    if case == "nan kernel":
        Kuf = Kuf.copy()
        Kuf[0, 0] = np.nan
    fn = _fn(approx, lik.kind)
    out = fn(Kuu, Kuf, kd, jnp.asarray(th, float), y)
    assert float(out[0]) == -np.inf and int(out[-1]) == 2
    assert np.all(np.asarray(out[5]) == -np.inf)
    for g in out[1:5]:
        assert np.all(np.asarray(g) == 0.0)
    grad = jax.grad(lambda k: fn(Kuu, k, kd, jnp.asarray(th, float), y)[0])(jnp.asarray(Kuf))
    assert np.all(np.isfinite(np.asarray(grad)))


def test_extreme_amplitude_is_finite_or_minus_inf(problem):
    """A kernel amplitude of 1e12 (probit EP): never NaN; the value is finite with a finite
    gradient, or -inf with status 2 and a zero gradient."""
    Kuu, Kuf, kd, y = problem
    out = _fn("ep", L.Probit.kind)(1e12 * Kuu, 1e12 * Kuf, 1e12 * kd, jnp.zeros(0), y)
    value, status = float(out[0]), int(out[-1])
    assert not np.isnan(value) and all(np.all(np.isfinite(np.asarray(g))) for g in out[1:5])
    assert (status == 2 and value == -np.inf) or np.isfinite(value)


def test_predictive_equals_the_numba_path(problem):
    """Latent predictive mean and variance at new inputs (``SparsePredictiveOp``'s JAX
    function) against ``FITCPosterior.predict``, Laplace with the logistic likelihood."""
    Kuu, Kuf, kd, y = problem
    Kus = Kuf[:, :7] * 0.9
    ref = laplace(FITCPrior(Kuu, Kuf, kd), y, L.Logistic())
    want = ref.posterior.predict(ref.a, Kus, np.full(7, 3.0))
    got = jax.jit(jax_fitc.predictive_fn("laplace", L.Logistic.kind))(Kuu, Kuf, kd, jnp.zeros(0), y, Kus,
                                                                     np.full(7, 3.0))
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), w, rtol=1e-8, atol=1e-10)


def _model(X, y, Xu, **options):
    with pm.Model() as model:
        log_ls = pm.Normal("log_ls", 0.0, 1.0)
        log_amp = pm.Normal("log_amp", 0.0, 1.0)
        cov = pt.exp(log_amp) * pm.gp.cov.ExpQuad(X.shape[1], ls=pt.exp(log_ls))
        gp = pymc_gpc.MarginalEP(cov_func=cov, likelihood=L.Probit(), approx="FITC", **options)
        gp.marginal_likelihood("y", X=X, y=y, Xu=Xu)
    return model


def test_pytensor_jax_mode_on_a_fitc_model_logp_and_dlogp():
    """A FITC model's logp and dlogp (autodiff through the kernel into log_ls and log_amp)
    under mode="JAX" against the CPU linker (the Op's ``perform``)."""
    rng = np.random.default_rng(2)
    X, y = random_problem(rng, 30)
    model = _model(X, y, X[:5] + 0.2, tol=1e-11)
    logp = model.logp()
    outputs = [logp, *pytensor.grad(logp, model.value_vars)]
    cpu_fn = pytensor.function(model.value_vars, outputs)
    jax_fn = pytensor.function(model.value_vars, outputs, mode="JAX")
    for point in ((0.1, 0.3), (-0.4, 1.5)):
        ref, got = cpu_fn(*map(np.asarray, point)), jax_fn(*map(np.asarray, point))
        for r, g in zip(ref, got):
            np.testing.assert_allclose(np.asarray(g), r, rtol=1e-8, atol=1e-8)


def assert_same_posterior(a, b, names, z=4.0):
    """Two samplers' posteriors agree: for each parameter, the means within z combined Monte
    Carlo standard errors, and the sds within z combined MCSEs of the sd (arviz's)."""
    import arviz as az

    sa, sb = az.summary(a, var_names=names), az.summary(b, var_names=names)
    for name in names:
        ra, rb = sa.loc[name], sb.loc[name]
        assert abs(ra["mean"] - rb["mean"]) <= z * np.hypot(ra["mcse_mean"], rb["mcse_mean"]), (name, sa, sb)
        assert abs(ra["sd"] - rb["sd"]) <= z * np.hypot(ra["mcse_sd"], rb["mcse_sd"]), (name, sa, sb)


def jittered_starts(model, chains, seed):
    """One starting point per chain: the model's initial point plus uniform(-1, 1) noise on
    every value, PyMC's own jitter (``_init_jitter``), drawn here. Given to PyMC's JAX
    samplers with ``jitter=False``, it replaces their check of the logp at the jittered
    points, which runs the Op's JAX function eagerly, compiling it primitive by primitive
    (a large part of these tests' time); the value variables here are untransformed."""
    rng = np.random.default_rng(seed)
    start = model.initial_point()
    return [{k: v + rng.uniform(-1.0, 1.0, size=np.shape(v)) for k, v in start.items()} for _ in range(chains)]


def sample_both(model, seed, draws=300, tune=300):
    """{"pymc": ..., "numpyro": ...}: ``pymc_gpc.sample`` with PyMC's NUTS (the Ops' CPU
    path, one process) and with numpyro (the Ops' JAX functions; ``jittered_starts``), 2 chains each,
    fixed seeds."""
    out = {}
    for sampler in ("pymc", "numpyro"):
        kw = ({"cores": 1} if sampler == "pymc" else
              {"initvals": jittered_starts(model, 2, seed), "nuts": {"jitter": False}})
        with model, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out[sampler] = pymc_gpc.sample(draws=draws, tune=tune, chains=2, random_seed=seed, progressbar=False,
                                           nuts_sampler=sampler, **kw)
    return out


def test_numpyro_and_pymc_nuts_agree_on_a_tiny_fitc_model():
    """numpyro (the FITC Op's JAX function) and PyMC's NUTS (the Op's CPU path) on the same FITC
    probit model: every evaluation converged, and the posterior means and sds of log_ls and
    log_amp agree within 4 combined Monte Carlo standard errors (``assert_same_posterior``)."""
    rng = np.random.default_rng(0)
    X = rng.uniform(-3, 3, size=(20, 1))
    y = np.where(np.sin(1.5 * X[:, 0]) > 0, 1, -1)
    idata = sample_both(_model(X, y, np.linspace(-3, 3, 4)[:, None]), seed=1)
    assert np.all(np.asarray(idata["numpyro"]["sample_stats"]["y_status"]) == 0)
    assert_same_posterior(idata["pymc"], idata["numpyro"], ["log_ls", "log_amp"])


_SHARDED = textwrap.dedent("""
    import numpy as np, jax, jax.numpy as jnp
    from pymc_gpc.backends.jax import fitc, sharding
    from pymc_gpc import likelihoods as L
    assert jax.device_count() == 4, jax.devices()
    rng = np.random.default_rng(4)
    n, m = 42, 6                               # 42 rows: not a multiple of 4
    X = rng.normal(size=(n, 2)); Xu = X[:m] + 0.2
    se = lambda A, B: 2.0 * np.exp(-0.5 * ((A[:, None] - B[None]) ** 2).sum(-1))
    y = np.where(X[:, 0] + 0.3 * rng.normal(size=n) > 0, 1.0, -1.0)
    args = (se(Xu, Xu) + 1e-6 * np.eye(m), se(Xu, X), np.full(n, 2.0 + 1e-6), jnp.zeros(0), y)
    for approx, kind in (("ep", L.Probit.kind),):
        one = jax.jit(fitc.marginal_fn(approx, kind, tol=1e-12 if approx == "ep" else 1e-10))(*args)
        for k in (2, 4):
            fn = jax.jit(sharding.marginal_fn(approx, kind, devices=jax.devices()[:k],
                                              tol=1e-12 if approx == "ep" else 1e-10))
            hlo = fn.lower(*args).compile().as_text()
            assert "all-reduce" in hlo, "no collective sum: the rows were not split"
            out = fn(*args)
            assert int(out[-1]) == 0
            for a, b in zip(one[:6], out[:6]):
                np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-10, atol=1e-10)
    print("ok")
""")


def test_sharded_rows_give_the_single_device_numbers():
    """In a process with 4 host devices: the rows split over 2 and 4 devices (with a
    collective sum in the compiled program) give one device's evidence, gradients and LOO
    to 1e-10 (EP, probit; Laplace shares the structure and was checked the same way by hand)."""
    env = {**os.environ, "XLA_FLAGS": f"--xla_force_host_platform_device_count=4 {XLA_TEST_FLAGS}",
           "PYTHONPATH": os.pathsep.join(filter(None, [os.getcwd(), os.environ.get("PYTHONPATH")]))}
    out = subprocess.run([sys.executable, "-c", _SHARDED], capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0 and out.stdout.split()[-1:] == ["ok"], out.stderr[-3000:]
