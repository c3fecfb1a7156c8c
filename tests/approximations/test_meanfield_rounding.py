"""The mean field's convergence at the rounding floor of its residual
(``meanfield._rounding_floor``), on points the fuzz drew (``scripts/fuzz.py``, seed 98765).
Named by seeded faults of ``scripts/mutation.py``, so in ``DEFAULT_MODE_FILES`` (it compiles
no graph)."""

import numpy as np

from pymc_gpc import likelihoods as L
from pymc_gpc import meanfield
from pymc_gpc.approximations import meanfield as MF
from pymc_gpc.datasets import load


def _crabs_step_case(log_w, log_v0, log_v1, epsilon):
    """Crabs' training set under the fuzz's ARD kernel (``scripts/fuzz.py``) at one point."""
    crabs = load("crabs")
    X, y = crabs.X_train, crabs.y_train
    d2 = (((X[:, None, :] - X[None, :, :]) ** 2) * np.exp(log_w)).sum(-1)
    return np.exp(log_v0) * np.exp(-0.5 * d2) + np.exp(log_v1), y, L.StepLabelNoise(), np.array([epsilon])


def test_a_fixed_point_at_the_rounding_floor_is_converged_and_a_stall_is_not():
    """Two points the fuzz drew (seed 98765) for the step likelihood under the ensemble mean
    field on Crabs. At the first (epsilon = 0.082, cond K = 2.6e9, |gamma| up to 1e4) the
    residual cannot fall below tol = 1e-10 in double precision: perturbing alpha by machine
    epsilon, relative, moves the residual by as much as Newton's last residual. It is
    converged, each site's residual below its ``_rounding_floor``. At the second (epsilon = 0.483) Newton
    and the free-energy ascent stall far from a root (residual 0.17), which the floor does not
    hide: not converged. Nor does it hide an early stop: Probit on Crabs after 3 Newton steps
    (residual 1e-6, between tol and ``FLOOR_CAP`` tol, far above its floor) is not
    converged, after 4 it is."""
    K, y, lik, th = _crabs_step_case([-0.092, -3.584, 0.543, 2.908, -0.254], -4.51, 3.935, 0.5 / (1 + np.exp(1.632)))
    res = meanfield(K, y, lik, th, with_loo=False)
    assert res.converged and 1e-10 < res.max_change
    Kinv, _ = MF._inverse_and_logdet(K)
    s2 = 1.0 / np.diag(Kinv)
    A, scale, alpha = K - np.diag(s2), np.sqrt(np.diag(K)), res.state.alpha

    def residual(a):
        return np.max(np.abs(lik.tilted(y, A @ a, s2, th).dlog_z - a) * scale)

    rng = np.random.default_rng(0)
    eps = np.finfo(float).eps
    moved = [abs(residual(alpha * (1 + eps * rng.choice([-1.0, 1.0], size=len(y)))) - residual(alpha))
             for _ in range(5)]
    assert max(moved) > 0.3 * res.max_change, (moved, res.max_change)  # the residual is rounding noise

    K, y, lik, th = _crabs_step_case([-2.353, -3.505, 2.034, -1.144, 0.165], 1.435, 0.533, 0.5 / (1 + np.exp(-3.358)))
    res = meanfield(K, y, lik, th, with_loo=False)
    assert not res.converged and res.max_change > 0.1

    X = load("crabs").X_train
    K = 2.0 * np.exp(-0.5 * np.exp(-2.0) * ((X[:, None, :] - X[None, :, :]) ** 2).sum(-1)) + 1.0
    early = meanfield(K, y, L.Probit(), max_iter=3, with_loo=False)
    assert not early.converged and 1e-9 < early.max_change < MF.FLOOR_CAP * 1e-10
    assert meanfield(K, y, L.Probit(), max_iter=4, with_loo=False).converged
