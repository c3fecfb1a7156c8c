r"""PyTensor Ops for several classes: the marginal likelihood and the latent predictive.

``MulticlassMarginalOp`` is ``ApproxMarginalOp`` with a (c, n, n) stack of kernel
matrices (one per class; a shared kernel is the same matrix c times, and autodiff sums
its c cotangents) and class codes 0..c-1 as labels. It keeps everything else of the
binary Op: outputs (log_z, dlog_z/dK (c, n, n), dlog_z/dtheta (empty), loo (n,),
n_iter, status), ``pullback`` (cotangent times the gradient), -inf and status 2 on
failure, retries, per-thread warm starts, recent results and the numba registration.
The approximations are ``SOLVERS["laplace-multiclass"]`` (softmax, ``softmax_laplace``)
and ``SOLVERS["ep-multiclass"]`` (multinomial probit, ``multinomial_probit_ep``).
"""

import numpy as np
import pytensor.tensor as pt
from pytensor.gradient import grad_not_implemented
from pytensor.graph.basic import Apply

from ..backends.numba.dispatch import register_numba as _register_numba
from .marginal import (
    SOLVERS,
    ApproxMarginalOp,
    LatentPredictiveOp,
    check_training_sizes,
    prediction_options,
)

MULTICLASS_APPROXIMATIONS = ("laplace-multiclass", "ep-multiclass")


class MulticlassMarginalOp(ApproxMarginalOp):
    """log q(y | K_1..K_c) with its gradient (see the module docstring).

    Parameters as for ``ApproxMarginalOp``; ``approximation`` is "laplace-multiclass"
    or "ep-multiclass" and ``likelihood_type`` a ``MulticlassLikelihood`` subclass.

    Examples
    --------
    The GP classes build this Op; by hand:

    >>> from pymc_gpc.ops import MulticlassMarginalOp
    >>> op = MulticlassMarginalOp("laplace", pymc_gpc.likelihoods.Softmax)                    # doctest: +SKIP
    >>> outputs = op(K_stack, params, y)   # K_stack: (c, n, n)  # doctest: +SKIP
    """

    def __init__(self, approximation, likelihood_type, options=(), hyper_names=(), defer_loo=False,
                 sampling=False):
        if approximation not in MULTICLASS_APPROXIMATIONS:
            raise ValueError(f"approximation must be one of {MULTICLASS_APPROXIMATIONS}, got {approximation!r}")
        super().__init__(approximation, likelihood_type, options, hyper_names, defer_loo, sampling)

    def make_node(self, K, params, y, hyper=None):
        K = pt.as_tensor_variable(K).astype("float64")
        if K.ndim != 3:
            raise ValueError(f"K must be a (c, n, n) stack of kernel matrices, got {K.ndim} dimensions")
        params = pt.as_tensor_variable(params).astype("float64")
        y = pt.as_tensor_variable(y).astype("float64")
        hyper = pt.zeros((0,), dtype="float64") if hyper is None else pt.as_tensor_variable(hyper).astype("float64")
        # log_z, dlog_z/dK (c, n, n), dlog_z/dtheta, loo, n_iter, status (as ApproxMarginalOp)
        outputs = [pt.dscalar(), pt.dtensor3(), pt.dvector(), pt.dvector(), pt.lscalar(), pt.lscalar()]
        return Apply(self, [K, params, y, hyper], outputs)


class MulticlassPredictiveOp(LatentPredictiveOp):
    """Mean (c, m) and covariance of f* under q, given (K, y, K_cross, K_star).

    Inputs: K (c, n, n), y (n,) codes, K_cross (c, n, m), K_star (c, m) prior variances
    or (c, m, m) with ``full_cov``. Outputs: mean (c, m) and the per-point c x c
    covariances (m, c, c), or the joint (c m, c m) class-major covariance. No gradient.

    Examples
    --------
    The GP classes build this Op; by hand:

    >>> from pymc_gpc.ops import MulticlassPredictiveOp
    >>> op = MulticlassPredictiveOp("laplace", pymc_gpc.likelihoods.Softmax)                    # doctest: +SKIP
    >>> mean, cov = op(K_stack, y, K_cross, K_star)   # doctest: +SKIP
    """

    def make_node(self, K, y, K_cross, K_star):
        ins = [pt.as_tensor_variable(v).astype("float64") for v in (K, y, K_cross, K_star)]
        out_cov = pt.dmatrix() if self.full_cov else pt.dtensor3()
        return Apply(self, ins, [pt.dmatrix(), out_cov])

    def perform(self, node, inputs, output_storage):
        K, y, K_cross, K_star = inputs
        c, _, m = K_cross.shape
        check_training_sizes(y.shape[0], K=K.shape[1:], K_cross=K_cross.shape[1:2])
        try:
            res = SOLVERS[self.approximation](K, y, self._lik, None, **prediction_options(self.options))
            mean, cov = res.posterior.predict(res.a, K_cross, K_star, full_cov=self.full_cov)
        except (ValueError, np.linalg.LinAlgError):  # NotPositiveDefiniteError is a LinAlgError
            mean = np.full((c, m), np.nan)
            cov = np.full((c * m, c * m) if self.full_cov else (m, c, c), np.nan)
        output_storage[0][0] = mean
        output_storage[1][0] = cov

    def pullback(self, inputs, outputs, cotangents):
        return [grad_not_implemented(self, i, v, "prediction has no gradient") for i, v in enumerate(inputs)]


_register_numba((MulticlassMarginalOp, MulticlassPredictiveOp))
