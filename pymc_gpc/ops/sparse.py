r"""PyTensor Ops for the inducing-point (FITC) prior: evidence with its pullback, and predictions.

``SparseMarginalOp`` maps (K_uu, K_uf, diag K_ff, theta, y[, hyper]) to

* ``log_z``: log q(y) by EP or Laplace with the FITC prior K~ = Q + Lambda
  (``structures.fitc``), in O(n m^2) time and O(n m) memory;
* ``dlog_z_dKuu`` (m, m), ``dlog_z_dKuf`` (m, n), ``dlog_z_dk_diag`` (n,) and
  ``dlog_z_dtheta`` (p,): its exact gradient (derived in ``structures.fitc``), so
  PyTensor's autodiff carries it into every kernel hyperparameter and into the inducing
  inputs Xu when they are random variables;
* ``loo``, ``n_iter``, ``status`` as ``ApproxMarginalOp``.

Everything else is ``ApproxMarginalOp``'s: per-thread warm starts, recent results,
the failure contract (-inf with status 2, status 1 and a warning after the retries),
the numba registration (inherited through the Op's type). The retries differ: FITC has
no sequential EP, so a non-converged EP run is retried with damping 0.5 and then 0.25.
"""

import warnings

import numpy as np
import pytensor.tensor as pt
from pytensor.gradient import DisconnectedType, disconnected_type, grad_not_implemented
from pytensor.graph.basic import Apply

from ..approximations import registry
from ..structures.fitc import FITCPrior
from ..validation import trusted_kernel
from .marginal import (
    STATUS_CONVERGED,
    STATUS_FAILED,
    STATUS_NOT_CONVERGED,
    ApproximationFailedWarning,
    ApproxMarginalOp,
    LatentPredictiveOp,
    check_training_sizes,
    _solve,
    _loo_or_placeholder,
    _solve_with_retries,
    prediction_options,
)

def sparse_retry_options(approximation, options):
    """The registry's FITC schedule: damped EP (no sequential schedule for FITC), or more
    Newton iterations."""
    return registry.get(approximation).retry_schedule(options, "fitc")


class SparseMarginalOp(ApproxMarginalOp):
    """log q(y | K_uu, K_uf, diag K_ff, theta) with the FITC prior, and its gradient.

    Parameters as ``ApproxMarginalOp``; ``approximation`` is "ep" or "laplace".
    """

    n_kernel_inputs = 3
    loo_output = 5

    def __init__(self, approximation, likelihood_type, options=(), hyper_names=(), defer_loo=False,
                 sampling=False):
        registry.check_structure(approximation, "fitc")
        super().__init__(approximation, likelihood_type, options, hyper_names, defer_loo, sampling)

    @staticmethod
    def prior_from(Kuu, Kuf, k_diag):
        return FITCPrior(Kuu, Kuf, k_diag)

    retry_schedule_for = staticmethod(sparse_retry_options)

    @staticmethod
    def kernel_cotangents(result):
        return tuple(result.dlog_z_dK)

    def make_node(self, Kuu, Kuf, k_diag, params, y, hyper=None):
        ins = [pt.as_tensor_variable(v).astype("float64") for v in (Kuu, Kuf, k_diag, params, y)]
        if hyper is None:
            hyper = pt.zeros((0,), dtype="float64")
        ins.append(pt.as_tensor_variable(hyper).astype("float64"))
        outputs = [pt.dscalar(), pt.dmatrix(), pt.dmatrix(), pt.dvector(), pt.dvector(), pt.dvector(),
                   pt.lscalar(), pt.lscalar()]
        return Apply(self, ins, outputs)

    def _recent_key(self, inputs):
        """K_uf and the hyperparameters identify the point."""
        Kuu, Kuf, k_diag, params, y, hyper = (*inputs, np.zeros(0))[:6]
        return Kuf, params, y, hyper

    def _perform(self, inputs, output_storage):
        Kuu, Kuf, k_diag, params, y = inputs[:5]
        hyper = inputs[5] if len(inputs) > 5 else np.zeros(0)
        n = y.shape[0]
        options = self._solver_options()
        self._counts["evaluations"] += 1
        warm = self._warm_starts(n)
        result, status, retries = None, STATUS_FAILED, 0
        try:
            prior = FITCPrior(Kuu, Kuf, k_diag)
            with trusted_kernel():
                result, retries = _solve_with_retries(
                    self.approximation, prior, y, self._lik, params, warm.guess(hyper), options,
                    self.retry_schedule(options))
            ok = np.isfinite(result.log_z) and all(np.all(np.isfinite(g)) for g in result.dlog_z_dK) \
                and np.all(np.isfinite(result.dlog_z_dparams))
            status = (STATUS_CONVERGED if result.converged else STATUS_NOT_CONVERGED) if ok else STATUS_FAILED
        except (ValueError, ArithmeticError, np.linalg.LinAlgError):
            status = STATUS_FAILED
        self._counts["retries"] += retries
        if status == STATUS_FAILED:
            self._counts["failed"] += 1
            self._write(output_storage, -np.inf, (np.zeros_like(Kuu), np.zeros_like(Kuf), np.zeros(n)),
                        np.zeros(len(params)), np.full(n, -np.inf), 0, status)
            return None
        if status == STATUS_NOT_CONVERGED:
            self._counts["not_converged"] += 1
            warnings.warn(
                f"{self.approximation.upper()} (FITC) did not converge at "
                f"{self._describe_point(params, hyper) or 'this point'} (last change "
                f"{result.max_change:.2e} after {retries} damped retries). The value is used; "
                "the evaluation's status output is 1.",
                ApproximationFailedWarning,
                stacklevel=2,
            )
        warm.add(hyper, result.state)
        self._write(output_storage, result.log_z, result.dlog_z_dK, result.dlog_z_dparams,
                    _loo_or_placeholder(result, n), result.n_iter, status)
        return result.loo_later

    @staticmethod
    def _write(output_storage, log_z, grads, dth, loo, n_iter, status):
        output_storage[0][0] = np.asarray(log_z, dtype=float)
        for k, g in enumerate(grads):
            output_storage[1 + k][0] = np.asarray(g, dtype=float)
        output_storage[4][0] = np.asarray(dth, dtype=float).reshape(-1)
        output_storage[5][0] = np.asarray(loo, dtype=float)
        output_storage[6][0] = np.asarray(n_iter, dtype="int64")
        output_storage[7][0] = np.asarray(status, dtype="int64")

    def _fast_ep(self, *args, **kwargs):
        return None  # the compiled loop is the dense structure's

    def connection_pattern(self, node):
        # inputs Kuu, Kuf, k_diag, params, y, hyper x outputs log_z, 4 gradients, loo, n_iter, status
        connected = [True] * 6 + [False, False]
        return [connected] * 4 + [[False] * 8, [False] * 8]

    def pullback(self, inputs, outputs, cotangents):
        g = cotangents[0]
        differentiable = inputs[:4]
        if any(not isinstance(c.type, DisconnectedType) for c in cotangents[1:6]):
            return [grad_not_implemented(self, i, v, "second derivatives of the evidence")
                    for i, v in enumerate(differentiable)] + [disconnected_type()] * 2
        if isinstance(g.type, DisconnectedType):
            return [disconnected_type()] * 6
        return [g * outputs[1], g * outputs[2], g * outputs[3], g * outputs[4], disconnected_type(),
                disconnected_type()]


class SparsePredictiveOp(LatentPredictiveOp):
    """Mean and variance (or covariance) of f* under q with the FITC prior, O(n* m) memory.

    Inputs: K_uu, K_uf, diag K_ff, theta, y, K_u* (m, n*), and diag K_** (n*,) or K_**
    (n*, n*) with ``full_cov``. Outputs: mean (n*,), variance (n*,) or covariance.
    No gradient (prediction and ``pm.sample_posterior_predictive``); constructed as
    ``LatentPredictiveOp``, whose numba registration it inherits.
    """

    def make_node(self, Kuu, Kuf, k_diag, params, y, Kus, K_star):
        ins = [pt.as_tensor_variable(v).astype("float64") for v in (Kuu, Kuf, k_diag, params, y, Kus, K_star)]
        return Apply(self, ins, [pt.dvector(), pt.dmatrix() if self.full_cov else pt.dvector()])

    def perform(self, node, inputs, output_storage):
        Kuu, Kuf, k_diag, params, y, Kus, K_star = inputs
        m = Kus.shape[1]
        check_training_sizes(y.shape[0], K_uf=Kuf.shape[1:], k_diag=k_diag.shape)
        try:
            res = _solve(self.approximation, FITCPrior(Kuu, Kuf, k_diag), y, self._lik, params, None,
                         prediction_options(self.options))
            if self.full_cov:
                output_storage[0][0], output_storage[1][0] = res.posterior.predict_cov(res.a, Kus, K_star)
            else:
                output_storage[0][0], output_storage[1][0] = res.predict_latent(Kus, K_star)
        except (ValueError, np.linalg.LinAlgError):
            output_storage[0][0] = np.full(m, np.nan)
            output_storage[1][0] = np.full((m, m) if self.full_cov else m, np.nan)

