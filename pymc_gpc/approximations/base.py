"""The contract of what every approximation returns (``result.ApproximationResult``), as a
``typing.Protocol`` of the members the Ops, prediction and ``pymc_gpc.fit`` read
(``contracts.conformance_gaps`` checks an object against it)."""

from typing import Protocol, runtime_checkable

__all__ = ["SolveResult"]


@runtime_checkable
class SolveResult(Protocol):
    """What every approximation returns and the Ops, prediction and ``pymc_gpc.fit`` read."""

    log_z: float
    dlog_z_dK: object
    dlog_z_dparams: object
    a: object
    posterior: object
    mean: object
    var: object
    state: object
    n_iter: int
    converged: bool
    max_change: float
    loo_log_p: object
    loo_later: object

    def predict_latent(self, K_cross, k_diag):
        """Mean and variance of f* from cross-covariances and prior variances (R&W Alg. 3.2)."""
