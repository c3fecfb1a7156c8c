"""The ordinal likelihoods (``OrderedProbit``, ``OrderedLogit``) on the JAX backend
(``backends/jax/engine.py`` dense, ``backends/jax/fitc.py`` FITC; EP and Laplace): evidence,
gradient in the kernel and in every cutpoint and sigma, and LOO terms against the numba
path (``pymc_gpc.ep`` / ``pymc_gpc.laplace``, dense or ``FITCPrior``); the ``custom_vjp``
against central finite differences; the failure convention at unordered and extreme
parameters; ``pytensor.function(mode="JAX")`` on a model's logp and the latent predictive.

Skipped where jax is not installed (``pip install pymc-gpc[jax]``). Compilation, not
evaluation, is what these tests spend their time on: each jitted function is compiled
once per module (``_fn``), and the likelihood x approximation x prior cells are a Latin
square (every pair of the three met once) with K = 3 under EP and K = 4 under Laplace
(a new number of cutpoints is a new compilation).
"""

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
from pymc_gpc.backends.jax import engine as jax_engine  # noqa: E402
from pymc_gpc.backends.jax import fitc as jax_fitc  # noqa: E402
from pymc_gpc.ops import LatentPredictiveOp  # noqa: E402
from pymc_gpc.backends.python_vm import PYTHON_VM_MODE  # noqa: E402
from pymc_gpc.structures import FITCPrior  # noqa: E402

TOL = {"ep": {"tol": 1e-12}, "laplace": {}}
RUN = {"ep": ep, "laplace": laplace}
SIGMA = 0.7
# (likelihood, approximation, prior, K): a Latin square of the first three (each pair of
# likelihood, approximation and prior met once; each compilation costs seconds), K = 3 and 4
CASES = [(lik, approx, prior, 3 + j)
         for i, lik in enumerate((L.OrderedProbit, L.OrderedLogit))
         for j, approx in enumerate(("ep", "laplace"))
         for k, prior in enumerate(("dense", "fitc")) if (i + j + k) % 2 == 0]
_FNS = {}

rng = np.random.default_rng(17)
N, M = 16, 5
X = rng.normal(size=(N, 2))
F_TRUE = X[:, 0] + 0.4 * X[:, 1] + 0.3 * rng.normal(size=N)
XU = X[:M] + 0.2 * rng.normal(size=(M, 2))


def _se(A, B, amp=2.0, ls=1.1):
    return amp * np.exp(-0.5 * ((A[:, None] - B[None]) ** 2).sum(-1) / ls ** 2)


def _cutpoints(n_classes):
    """Equal-frequency cutpoints of the latent values (rounded): every class is observed."""
    return np.round(np.quantile(F_TRUE, np.arange(1, n_classes) / n_classes), 2)


def _theta(lik, cuts):
    return np.r_[cuts, SIGMA] if lik is L.OrderedProbit else np.asarray(cuts, float)


def _likelihood(lik, cuts):
    return lik(cuts, sigma=SIGMA) if lik is L.OrderedProbit else lik(cuts)


def _fn(approx, prior, kind):
    """The jitted engine function, compiled once per module (and per number of cutpoints)."""
    if (approx, prior, kind) not in _FNS:
        module = jax_engine if prior == "dense" else jax_fitc
        _FNS[approx, prior, kind] = jax.jit(module.marginal_fn(approx, kind, **TOL[approx]))
    return _FNS[approx, prior, kind]


def _kernels(prior):
    if prior == "dense":
        return (_se(X, X) + 1e-6 * np.eye(N),)
    return _se(XU, XU) + 1e-6 * np.eye(M), _se(XU, X), np.full(N, 2.0 + 1e-6)


@pytest.mark.parametrize("lik, approx, prior, n_classes", CASES,
                         ids=lambda v: getattr(v, "__name__", str(v)))
def test_jax_equals_the_numba_path(lik, approx, prior, n_classes):
    """log Z, its gradient in the kernel input(s) (hence in any kernel hyperparameter) and in
    every cutpoint and sigma, and the LOO terms, to 1e-8; status converged."""
    cuts = _cutpoints(n_classes)
    y = np.digitize(F_TRUE, cuts).astype(float)
    assert set(y) == set(range(n_classes))
    kernels = _kernels(prior)
    ref = RUN[approx](kernels[0] if prior == "dense" else FITCPrior(*kernels), y, _likelihood(lik, cuts),
                      **TOL[approx])
    out = _fn(approx, prior, lik.kind)(*kernels, jnp.asarray(_theta(lik, cuts)), y)
    assert ref.converged and int(out[-1]) == 0
    k = len(kernels)
    want_dK = (ref.dlog_z_dK,) if prior == "dense" else tuple(ref.dlog_z_dK)
    np.testing.assert_allclose(float(out[0]), ref.log_z, rtol=1e-8, atol=1e-8)
    for got, want in zip(out[1:1 + k], want_dK):
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-8, atol=1e-8)
    assert out[1 + k].shape == (len(_theta(lik, cuts)),)
    np.testing.assert_allclose(np.asarray(out[1 + k]), ref.dlog_z_dparams, rtol=1e-8, atol=1e-8)
    np.testing.assert_allclose(np.asarray(out[2 + k]), ref.loo_log_p, rtol=1e-8, atol=1e-8)


@pytest.fixture(scope="module")
def value_and_grad():
    """log Z of dense EP with the ordered probit (K = 3) as a function of h = (log amplitude,
    log lengthscale, cutpoints, sigma) and its gradient through the custom_vjp, jitted."""
    fn = jax_engine.marginal_fn("ep", L.OrderedProbit.kind, **TOL["ep"])
    D = jnp.asarray(((X[:, None] - X[None]) ** 2).sum(-1))
    y = jnp.asarray(np.digitize(F_TRUE, _cutpoints(3)).astype(float))

    def log_z(h):
        K = jnp.exp(h[0]) * jnp.exp(-0.5 * D / jnp.exp(2 * h[1])) + 1e-6 * jnp.eye(N)
        return fn(K, h[2:], y)[0]

    return jax.jit(jax.value_and_grad(log_z))  # one compilation serves values and gradients


def test_custom_vjp_matches_finite_differences(value_and_grad):
    """jax.grad through the engine's custom_vjp against central differences (step 1e-5) in the
    kernel's hyperparameters, both cutpoints and sigma."""
    vg = value_and_grad
    h = jnp.asarray([np.log(2.0), np.log(1.1), -0.5, 0.6, 0.8])
    g = np.asarray(vg(h)[1])
    for k in range(h.shape[0]):
        e = np.zeros(h.shape[0])
        e[k] = 1e-5
        fd = (float(vg(h + e)[0]) - float(vg(h - e)[0])) / 2e-5
        assert g[k] == pytest.approx(fd, rel=1e-5, abs=1e-7), k


@pytest.mark.parametrize("th", [[0.6, -0.5, 0.8], [0.3, 0.3, 0.8], [-0.5, 0.6, 0.0], [-0.5, 0.6, -1.0],
                                [-0.5, np.nan, 0.8], [-1e300, 1e300, 1e-300]],
                         ids=["unordered", "merged", "sigma-0", "sigma-negative", "nan", "extreme"])
def test_bad_or_extreme_parameters_give_minus_inf_or_a_value_and_a_finite_gradient(value_and_grad, th):
    """Unordered or merged cutpoints, sigma <= 0 and NaN: log Z = -inf (status 2 on the
    engine's output) and a finite (zero) gradient; huge cutpoints with a vanishing sigma:
    never NaN, and a finite gradient."""
    h = jnp.asarray([np.log(2.0), np.log(1.1), *th])
    value, grad = value_and_grad(h)
    assert np.all(np.isfinite(np.asarray(grad)))
    if th[0] == -1e300:
        assert not np.isnan(float(value))
        return
    assert float(value) == -np.inf and np.all(np.asarray(grad) == 0.0)
    out = _fn("ep", "dense", L.OrderedProbit.kind)(_kernels("dense")[0], jnp.asarray(th),
                                                   np.digitize(F_TRUE, _cutpoints(3)).astype(float))
    assert int(out[-1]) == 2 and np.all(np.asarray(out[3]) == -np.inf)


def test_model_logp_and_latent_predictive_in_jax_mode_equal_numba():
    """A model with free ordered cutpoints (MarginalLaplace, OrderedLogit, K = 4): its logp and
    dlogp compiled by ``pytensor.function(mode="JAX")`` against PyTensor's Python VM (the
    Op's ``perform``: no numba compilation of the graph), with the latent predictive
    (``LatentPredictiveOp``) in the same function."""
    y = np.digitize(F_TRUE, _cutpoints(4))
    Xnew = rng.normal(size=(4, 2))
    with pm.Model() as model:
        ls = pm.LogNormal("ls", 0.0, 0.5)
        c = pm.Normal("c", 0.0, 2.0, shape=3, transform=pm.distributions.transforms.ordered,
                      initval=_cutpoints(4))
        cov = pm.gp.cov.ExpQuad(2, ls=ls)
        gp = pymc_gpc.MarginalLaplace(cov_func=cov, likelihood=L.OrderedLogit(c))
        gp.marginal_likelihood("y", X=X, y=y)
    K = cov(X) + 1e-6 * pt.eye(N)
    latent = LatentPredictiveOp("laplace", L.OrderedLogit)(K, c, y.astype(float), cov(X, Xnew), cov(Xnew, diag=True))
    outputs = [model.logp(), model.dlogp(), *model.replace_rvs_by_values(latent)]
    inputs = model.value_vars
    ref_fn = pytensor.function(inputs, outputs, mode=PYTHON_VM_MODE)
    jax_fn = pytensor.function(inputs, outputs, mode="JAX")
    for shift in (0.0, 0.4):
        point = model.initial_point()
        point["ls_log__"] = point["ls_log__"] + shift
        args = [point[v.name] for v in inputs]
        for r, g in zip(ref_fn(*args), jax_fn(*args)):
            assert np.all(np.isfinite(r))
            np.testing.assert_allclose(np.asarray(g), r, rtol=1e-8, atol=1e-9)
