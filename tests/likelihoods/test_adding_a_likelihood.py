"""The worked example of ``docs/design/likelihoods.md`` ("Adding a likelihood") works: a
likelihood defined outside the package, by its site kernels alone, runs EP on numba and its
JAX twin gives the same tilted moments.

The toy is the probit with a scale, p(y | f) = Phi(y f / s), written from scratch (erfc, no
package kernel); ``ProbitNoise(sigma=s)`` is the same model by an independent implementation,
and quadrature is the ground truth of its tilted moments.

Defining a likelihood changes the compiled dispatch and numba's cache stamp, and it must
come before the process first compiles a loop that takes a kind: the example runs as this
file's ``__main__`` in a fresh process with its own numba cache (which is why it compiles the
engine, tens of seconds), and prints its numbers as JSON for the test to check.
"""

import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest
from numba import njit

pytestmark = pytest.mark.slow  # a fresh process compiles the EP engine


# -- the example, as in docs/design/likelihoods.md ------------------------------------------


@njit(nogil=True)
def scaled_probit_tilted(y, mu, s2, th):
    """Z = Phi(z), z = y mu / sqrt(s^2 + s2): log Z, d/dmu, d^2/dmu^2, d/ds."""
    s = th[0]
    v = s * s + s2
    z = y * mu / math.sqrt(v)
    phi = 0.5 * math.erfc(-z / math.sqrt(2.0))
    r = math.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi) / phi  # N(z) / Phi(z)
    return math.log(phi), y * r / math.sqrt(v), -r * (z + r) / v, -r * z * s / v


@njit(nogil=True)
def scale_positive(th, n_params):
    return th.shape[0] == n_params and th[0] > 0.0


def define_scaled_probit():
    """Define the class (which registers its kernels) and its JAX twin; returns the class."""
    from pymc_gpc.likelihoods import Likelihood, SiteKernels

    class ScaledProbit(Likelihood):
        """p(y | f) = Phi(y f / s); EP only (no ``log_lik`` kernel)."""

        param_names = ("scale",)
        supports_laplace = False
        site_kernels = SiteKernels(scaled_probit_tilted, params_valid=scale_positive)

        def __init__(self, scale=1.0):
            super().__init__(scale)

    try:
        import jax.numpy as jnp
        from jax.scipy.special import ndtr
    except ImportError:
        return ScaledProbit
    from pymc_gpc.backends.jax.likelihoods import JaxKernels, register

    def jax_tilted(y, mu, s2, th):
        v = th[0] ** 2 + s2
        z = y * mu / jnp.sqrt(v)
        phi = ndtr(z)
        r = jnp.exp(-0.5 * z * z) / jnp.sqrt(2.0 * jnp.pi) / phi
        return jnp.stack((jnp.log(phi), y * r / jnp.sqrt(v), -r * (z + r) / v, -r * z * th[0] / v))

    register(ScaledProbit, JaxKernels(jax_tilted, params_valid=lambda th: th[0] > 0.0))
    return ScaledProbit


def run_example():
    """The numbers the test checks, as a dict of lists."""
    from scipy import integrate
    from scipy.stats import norm

    import pymc_gpc
    from pymc_gpc.likelihoods import Likelihood, ProbitNoise
    from pymc_gpc.likelihoods.base import KINDS

    ScaledProbit = define_scaled_probit()
    toy, reference = ScaledProbit(scale=1.7), ProbitNoise(sigma=1.7)
    out = {"kind": ScaledProbit.kind, "n_kinds": len(KINDS)}

    y, mu, s2 = np.array([1.0, -1.0, 1.0]), np.array([0.3, 1.2, -2.5]), np.array([0.5, 2.0, 4.0])
    t = toy.tilted(y, mu, s2)
    out["tilted"] = [t.log_z.tolist(), t.dlog_z.tolist(), t.d2log_z.tolist(), t.dlog_z_dparams[:, 0].tolist()]
    quad = []
    for yi, m, v in zip(y, mu, s2):
        z, _ = integrate.quad(lambda f: norm.cdf(yi * f / 1.7) * norm.pdf(f, m, math.sqrt(v)), -np.inf, np.inf,
                              epsabs=1e-13, epsrel=1e-12)
        quad.append(math.log(z))
    out["quadrature_log_z"] = quad

    rng = np.random.default_rng(0)
    X = rng.normal(size=(25, 2))
    K = 2.0 * np.exp(-0.5 * ((X[:, None] - X[None]) ** 2).sum(-1)) + 1e-8 * np.eye(25)
    labels = np.where(X[:, 0] + 0.3 * rng.normal(size=25) > 0, 1.0, -1.0)
    for name, lik in (("toy", toy), ("reference", reference)):
        res = pymc_gpc.solvers.ep(K, labels, lik, tol=1e-12)
        out[name] = {"converged": bool(res.converged), "log_z": res.log_z, "dK": res.dlog_z_dK.ravel().tolist(),
                     "dth": np.ravel(res.dlog_z_dparams).tolist()}

    try:
        import jax

        from pymc_gpc.backends.jax import likelihoods as jl
    except ImportError:
        out["jax"] = None
    else:
        jax.config.update("jax_enable_x64", True)  # as the JAX backend runs
        out["jax"] = np.asarray(jl.tilted(ScaledProbit.kind, y, mu, s2, np.array([1.7]))).tolist()

    try:  # the dispatch in memory is frozen once a loop is compiled
        type("Late", (Likelihood,), {"site_kernels": ScaledProbit.site_kernels})
        out["late_definition"] = "accepted"
    except RuntimeError as err:
        out["late_definition"] = str(err)
    return out


# -- the test ------------------------------------------------------------------------------


def test_a_likelihood_defined_outside_the_package_runs_ep_on_numba(tmp_path):
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba"), OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    done = subprocess.run([sys.executable, os.path.abspath(__file__)], env=env, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])

    assert out["kind"] == out["n_kinds"] - 1 == 7  # the package's seven kinds, then the toy
    log_z, d1, d2, ds = (np.array(r) for r in out["tilted"])
    np.testing.assert_allclose(log_z, out["quadrature_log_z"], rtol=1e-10, atol=1e-12)
    toy, ref = out["toy"], out["reference"]
    assert toy["converged"] and ref["converged"]
    np.testing.assert_allclose(toy["log_z"], ref["log_z"], rtol=1e-10)
    np.testing.assert_allclose(toy["dK"], ref["dK"], rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(toy["dth"], ref["dth"], rtol=1e-8, atol=1e-10)
    if out["jax"] is not None:
        np.testing.assert_allclose(out["jax"], np.stack([log_z, d1, d2, ds]), rtol=1e-10, atol=1e-12)
    assert "before the first evaluation" in out["late_definition"]


if __name__ == "__main__":
    print(json.dumps(run_example()))
