"""What every approximation returns: evidence, its gradient, posterior, diagnostics."""

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..structures.dense import LatentPosterior


class WarmStartMismatch(ValueError):
    """A warm-start state that does not fit the data (another number of sites or classes):
    ``solve.solve_with_retries`` then starts cold. A ValueError, so callers that passed the
    state themselves still see a ValueError naming the sizes."""


@dataclass
class ApproximationResult:
    r"""The result of one approximation at one kernel matrix and likelihood parameter value.

    Attributes
    ----------
    method : "ep-parallel", "ep-sequential", "laplace", "meanfield-ensemble",
        "meanfield-naive", "adf" (one online pass) or "adf-ep" (passes with revisits).
    log_z : approximate log marginal likelihood log q(y | K, theta).
    dlog_z_dK : (n, n) symmetric gradient of log_z with respect to K (None for ADF).
    dlog_z_dparams : (p,) gradient with respect to the likelihood parameters.
    a : representer weights; the posterior mean of f is K a, and of f* is K*^T a.
    posterior : the Gaussian q(f) in factored form (predictions, variances).
    mean, var : posterior mean and marginal variances of f at the training inputs.
    state : warm-start state; pass it as ``state=`` to the next call.
    n_iter : EP sweeps or Newton iterations taken.
    converged : whether the tolerance was met within the iteration limit.
    max_change : the last convergence measure (scaled site change or Newton step).
    loo_log_p : :math:`\log q(y_i \mid y_{-i})`: the likelihood averaged over the cavity
        distribution (EP: log Z_i, Opper & Winther 2000; Laplace: LA-LOO; mean field:
        log Z_i at the mean-field cavity; ADF: EP-style cavities of the final sites).
    loo_later : where the solver was asked for ``with_loo="deferred"`` (Laplace), a function
        of no arguments that returns ``loo_log_p``; it holds its own copies of the
        vectors it needs.

    Examples
    --------
    >>> res = pymc_gpc.ep(K, y, pymc_gpc.likelihoods.Probit())  # doctest: +SKIP
    >>> mean, var = res.predict_latent(K_cross, k_diag)         # doctest: +SKIP
    """

    method: str
    log_z: float
    dlog_z_dK: np.ndarray | None
    dlog_z_dparams: np.ndarray | None
    a: np.ndarray
    posterior: LatentPosterior
    mean: np.ndarray
    var: np.ndarray
    state: object
    n_iter: int
    converged: bool
    max_change: float
    loo_log_p: np.ndarray | None = None
    loo_later: Callable[[], np.ndarray] | None = None

    def predict_latent(self, K_cross, k_diag):
        """Mean and variance of the latent f* given cross-covariances (n, m) and prior variances (m,)."""
        return self.posterior.predict(self.a, np.asarray(K_cross, float), np.asarray(k_diag, float))


def loo_outputs(loo, with_loo):
    """``(loo_log_p, loo_later)`` of a result whose LOO terms a function ``loo`` of no
    arguments computes, for the solvers' ``with_loo``: True, the terms now; False, neither;
    "deferred", ``loo`` itself (``ApproximationResult.loo_later``, for ``ops.marginal``'s
    ``defer_loo``)."""
    if with_loo == "deferred":
        return None, loo
    return (loo() if with_loo else None), None
