r"""What the tilted moments of the logit likelihoods (logistic, ordered logit) share, in numba
and JAX alike: the guarded Newton step to the tilted density's mode and the composite
Gauss-Legendre rule centred there.

The tilted density g(f) = log p(y | f) - (f - mu)^2 / (2 s2) is strictly concave for a logit
likelihood, but in its flat tails g'' is close to -1/s2 and plain Newton stalls or diverges
(mu = -91, s2 = 100 for the logistic; mu = 5, s2 = 100 for the middle class of cutpoints
(-1, 1)). ``bracketed_newton_step`` keeps a bracket [lo, hi] around the mode, shrinks it at
every iterate and replaces a Newton step that leaves it by bisection.

The integrals over g use ``GL_NODES`` / ``GL_WEIGHTS`` (12 nodes per panel) on panels that
cover mode +- ``N_SD`` cavity sd, with ends graded by powers of 2 (``GRADE``) around the
likelihood's kinks; ``likelihoods.binary._logistic_tilted``,
``likelihoods.ordinal._ordered_logit_tilted_local`` and their JAX twins in
``backends.jax.likelihoods`` place the panels.
"""

import math

import numpy as np
from numba import njit

GL_NODES, GL_WEIGHTS = np.polynomial.legendre.leggauss(12)
GRADE = 2.0 ** np.arange(-1, 21)  # offsets of the graded panels' ends from a kink
N_SD = 9  # the rule covers mode +- 9 sd: the log-integrand has fallen by more than 40 there


@njit(nogil=True, cache=True)
def bracketed_newton_step(m, g1, g2, lo, hi, s2):
    """One Newton step for the mode of a strictly concave g, guarded by the bracket [lo, hi].

    ``g1 = g'(m)`` and ``g2 = g''(m) < 0``; the sign of g1 says on which side of m the mode
    lies, so m replaces lo (g1 > 0) or hi. Returns (m_new, lo, hi, done): m_new is the
    Newton iterate m - g1 / g2, or the bracket's midpoint where that leaves it; done when the
    step or the bracket is below 1e-13 (1 + |m_new|) + 1e-9 sqrt(s2).
    """
    if g1 > 0.0:
        lo = m
    else:
        hi = m
    m_new = m - g1 / g2
    if not (lo < m_new < hi):
        m_new = 0.5 * (lo + hi)
    tol = 1e-13 * (1.0 + abs(m_new)) + 1e-9 * math.sqrt(s2)
    return m_new, lo, hi, abs(m_new - m) <= tol or hi - lo <= tol
