"""The logistic likelihood's EP tilted moments at extreme cavities (issue 58), numba and JAX,
against brute-force adaptive quadrature.

The reference integrates sigma(y f) N(f; mu, s2) with scipy's ``quad`` in the rescaled
variable z = (f - m) / s around the mode m of the log-integrand (found by ``brentq``, not by
the code under test), the integrand divided by its value at the mode, on panels split at
every sd and at the logistic's transition f = 0: log Z, the tilted mean and the tilted
variance, each to about 1e-13.
"""

import itertools
import math

import numpy as np
import pytest
from scipy import integrate, optimize
from scipy.special import expit, log_expit

from pymc_gpc.likelihoods import Logistic
from pymc_gpc.likelihoods.binary import _logistic_tilted

LOGISTIC = Logistic.kind

MEANS = (-91.0, -50.0, -10.0, 0.0, 3.0, 50.0)
VARIANCES = (1e-6, 1e-2, 1.0, 100.0, 1e4, 1e6)
CASES = list(itertools.product((1.0, -1.0), MEANS, VARIANCES))


def reference(y, mu, s2):
    """(log Z, E f, Var f) of sigma(y f) N(f; mu, s2) by adaptive quadrature (module docstring)."""
    s = math.sqrt(s2)
    lo, hi = sorted((mu, mu + y * s2))
    m = optimize.brentq(lambda f: y * expit(-y * f) - (f - mu) / s2, lo - 1.0, hi + 1.0, xtol=1e-300, rtol=1e-15,
                        maxiter=2000)
    dm = m - mu
    g_m = log_expit(y * m) - 0.5 * dm ** 2 / s2

    def w(z):
        return math.exp(log_expit(y * (m + s * z)) - 0.5 * (dm + s * z) ** 2 / s2 - g_m)

    ends = {-12.0, 12.0, *range(-11, 12), *(z for z in (-m / s + d / s for d in (-20, -2, 0, 2, 20)) if abs(z) < 12)}
    ends = sorted(ends)

    def quad(fn):
        return sum(integrate.quad(fn, a, b, epsabs=1e-300, epsrel=1e-14, limit=200)[0] for a, b in zip(ends[:-1], ends[1:]))

    z0 = quad(w)
    z1 = quad(lambda z: z * w(z)) / z0
    z2 = quad(lambda z: (z - z1) ** 2 * w(z)) / z0
    log_z = g_m + math.log(s * z0) - 0.5 * math.log(2.0 * math.pi * s2)
    return log_z, m + s * z1, s2 * z2


def _errors(lz, d1, d2, y, mu, s2):
    """|log Z error|, |mean error| / sd, |variance error| / s2 from the kernels' rows."""
    ref = reference(y, mu, s2)
    return abs(lz - ref[0]), abs(mu + s2 * d1 - ref[1]) / math.sqrt(s2), abs(s2 + s2 * s2 * d2 - ref[2]) / s2


@pytest.mark.filterwarnings("ignore::scipy.integrate.IntegrationWarning")
def test_numba_tilted_moments_against_quadrature():
    worst = np.zeros(3)
    for y, mu, s2 in CASES:
        lz, d1, d2, _ = _logistic_tilted(y, mu, s2, np.zeros(0))
        assert lz <= 0.0, (y, mu, s2, lz)  # Z is an average of sigma <= 1
        worst = np.maximum(worst, _errors(lz, d1, d2, y, mu, s2))
    assert np.all(worst < 1e-10), worst


@pytest.mark.filterwarnings("ignore::scipy.integrate.IntegrationWarning")
def test_jax_tilted_moments_against_quadrature():
    pytest.importorskip("jax")
    import jax.numpy as jnp

    from pymc_gpc.backends.jax import engine  # noqa: F401 - sets jax_enable_x64, as the backend runs
    from pymc_gpc.backends.jax import likelihoods as jlik

    y, mu, s2 = (np.array(v) for v in zip(*CASES))
    rows = np.asarray(jlik.tilted(LOGISTIC, jnp.asarray(y), jnp.asarray(mu), jnp.asarray(s2), jnp.zeros(0)))
    worst = np.zeros(3)
    for i, (yi, mi, si) in enumerate(CASES):
        assert rows[0, i] <= 0.0, (yi, mi, si, rows[0, i])
        worst = np.maximum(worst, _errors(rows[0, i], rows[1, i], rows[2, i], yi, mi, si))
    assert np.all(worst < 1e-10), worst


@pytest.mark.filterwarnings("ignore::scipy.integrate.IntegrationWarning")
def test_predict_at_wide_latent_variance():
    """p(y* = 1) = Z at y = +1: against the reference where the latent variance is 1e6."""
    mu = np.array([-50.0, 0.0, 50.0])
    p = Logistic().predict(mu, np.full(3, 1e6))
    ref = [math.exp(reference(1.0, m, 1e6)[0]) for m in mu]
    np.testing.assert_allclose(p, ref, rtol=0, atol=1e-12)
