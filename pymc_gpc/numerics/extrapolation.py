r"""The warm start for a new point from the solver states stored at earlier points: a local
linear model of the state in the hyperparameters, fitted to the nearest stored points.

A solver's fixed point s(x) (EP's sites, Laplace's mode) is a smooth function of the
hyperparameters x. Near the stored point x_a nearest x,

.. math::

    s(x) \approx s_a + \sum_j w_j (s_j - s_a), \qquad
    w = \arg\min_w \Big\| \sum_j w_j (x_j - x_a) - (x - x_a) \Big\|^2 + \lambda \|w\|^2,

over the ``NEIGHBOURS`` stored points nearest x after x_a, with the ridge
\lambda = ``RIDGE`` times the mean squared offset |x_j - x_a|^2. Without the ridge the guess
is exact for a state linear in x whenever x - x_a lies in the span of the offsets (along a
line, with one neighbour, it is the extrapolation s_a + t (s_a - s_b)). The ridge keeps the
weights small where the offsets are nearly collinear: the stored states carry the solver's
own error (up to its tolerance), and large weights would multiply it. A NUTS trajectory
curves (it stops at a U-turn) and each new trajectory leaves in a new direction, so the
offsets of the last few trajectories' points, not only the last two, span the step.
Weights whose absolute sum exceeds ``MAX_WEIGHT`` (x far outside the stored points'
reach) are not used: the guess is then s_a.
"""

import numpy as np
from numba import njit

__all__ = ["trajectory_weights", "NEIGHBOURS", "RIDGE", "MAX_WEIGHT"]

NEIGHBOURS = 10
RIDGE = 1e-4
MAX_WEIGHT = 20.0


@njit(nogil=True, cache=True)
def trajectory_weights(P, x):
    """(a, js, w) for points ``P`` (k, p) and a new point ``x`` (p,): the row a nearest x,
    the neighbour rows js and their weights w (module docstring); the guess is
    s_a + sum_j w_j (s_js[j] - s_a), and s_a itself where w is empty (x at a stored point,
    no finite neighbour, or weights too large). Ties go to the earlier row."""
    k = P.shape[0]
    d = np.empty(k)
    for i in range(k):
        d[i] = np.sum((P[i] - x) ** 2)
    order = np.argsort(d, kind="mergesort")
    a = order[0]
    none = (a, order[:0], np.zeros(0))
    if not d[a] > 0.0 or not np.isfinite(d[a]):  # x is a stored point (or unknown): s_a
        return none
    m = 0
    js = np.empty(min(NEIGHBOURS, k - 1), dtype=order.dtype)
    for i in order[1:]:
        if m == js.shape[0]:
            break
        if np.isfinite(d[i]) and np.all(np.isfinite(P[i])):
            js[m] = i
            m += 1
    if m == 0:
        return none
    js = js[:m]
    D = np.empty((m, P.shape[1]))
    for j in range(m):
        D[j] = P[js[j]] - P[a]
    G = D @ D.T
    scale = np.trace(G) / m
    if not scale > 0.0:
        return none
    for j in range(m):
        G[j, j] += RIDGE * scale
    w = np.linalg.solve(G, D @ (x - P[a]))
    if not np.all(np.isfinite(w)) or np.sum(np.abs(w)) > MAX_WEIGHT:
        return none
    return a, js, w
