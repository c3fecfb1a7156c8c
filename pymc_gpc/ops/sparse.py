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

import numpy as np
import pytensor.tensor as pt
from pytensor.gradient import DisconnectedType, disconnected_type, grad_not_implemented
from pytensor.graph.basic import Apply

from ..approximations import registry
from ..structures.fitc import FITCPrior
from .marginal import ApproxMarginalOp, LatentPredictiveOp


def sparse_retry_options(approximation, options):
    """The registry's FITC schedule: damped EP (no sequential schedule for FITC), or more
    Newton iterations."""
    return registry.get(approximation).retry_schedule(options, "fitc")


class FITCInputs:
    """The FITC input handling that the binary and multi-class FITC evidence Ops share (a
    mixin, listed before the Op's base class).

    The inputs are (K_uu, K_uf, diag K_ff, theta, y[, hyper]), one slice per class for
    several classes; the outputs log_z, the three kernel gradients, dlog_z/dtheta, loo,
    n_iter and status. The mixin gives the Op that layout's ``n_kernel_inputs`` and
    ``loo_output``, the cotangents (the solver's ``FITCGradient``: d/dK_uu, d/dK_uf,
    d/d diag K_ff, derived in ``structures.fitc``), ``make_node`` (the kernel inputs' and
    their gradients' ranks are ``kernel_ndims``), the recent-result key, the warning after
    the damped retries, the connection pattern and the pullback. ``prior_from`` and the
    retry schedule stay with each Op.
    """

    n_kernel_inputs = 3
    loo_output = 5
    kernel_ndims = (2, 2, 1)  # K_uu, K_uf, diag K_ff
    kernel_ndims_hint = ""

    def make_node(self, Kuu, Kuf, k_diag, params, y, hyper=None):
        ins = [pt.as_tensor_variable(v).astype("float64") for v in (Kuu, Kuf, k_diag, params, y)]
        for name, v, nd in zip(("Kuu", "Kuf", "k_diag"), ins, self.kernel_ndims):
            if v.ndim != nd:
                raise ValueError(f"{name} must have {nd} dimensions{self.kernel_ndims_hint}, got {v.ndim}")
        hyper = pt.zeros((0,), dtype="float64") if hyper is None else pt.as_tensor_variable(hyper).astype("float64")
        kernel_grads = [pt.tensor(dtype="float64", shape=(None,) * nd) for nd in self.kernel_ndims]
        outputs = [pt.dscalar(), *kernel_grads, pt.dvector(), pt.dvector(), pt.lscalar(), pt.lscalar()]
        return Apply(self, [*ins, hyper], outputs)

    @staticmethod
    def kernel_cotangents(result):
        return tuple(result.dlog_z_dK)

    def _recent_key(self, inputs):
        """K_uf and the hyperparameters identify the point."""
        Kuu, Kuf, k_diag, params, y, hyper = (*inputs, np.zeros(0))[:6]
        return Kuf, params, y, hyper

    def _not_converged_message(self, point, kernels, result, retries):
        return (f"{self.approximation.upper()} (FITC) did not converge at {point or 'this point'} (last change "
                f"{result.max_change:.2e} after {retries} damped retries). The value is used; "
                "the evaluation's status output is 1.")

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


class SparseMarginalOp(FITCInputs, ApproxMarginalOp):
    """log q(y | K_uu, K_uf, diag K_ff, theta) with the FITC prior, and its gradient.

    Parameters as ``ApproxMarginalOp``; ``approximation`` is "ep" or "laplace". The input
    layout and pullback are ``FITCInputs``'.
    """

    def __init__(self, approximation, likelihood_type, options=(), hyper_names=(), defer_loo=False,
                 sampling=False):
        registry.check_structure(approximation, "fitc")
        super().__init__(approximation, likelihood_type, options, hyper_names, defer_loo, sampling)

    @staticmethod
    def prior_from(Kuu, Kuf, k_diag):
        return FITCPrior(Kuu, Kuf, k_diag)

    retry_schedule_for = staticmethod(sparse_retry_options)


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

    n_kernel_inputs = 3
    prior_from = staticmethod(SparseMarginalOp.prior_from)

    @staticmethod
    def _training_shapes(kernels, K_cross):
        Kuu, Kuf, k_diag = kernels
        return {"K_uf": Kuf.shape[1:], "k_diag": k_diag.shape}

    def _latent(self, res, Kus, K_star):
        if self.full_cov:
            return res.posterior.predict_cov(res.a, Kus, K_star)
        return res.predict_latent(Kus, K_star)
