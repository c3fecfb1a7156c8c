r"""PyTensor Ops for several classes: the marginal likelihood and the latent predictive.

``MulticlassMarginalOp`` is ``ApproxMarginalOp`` with a (c, n, n) stack of kernel
matrices (one per class; a shared kernel is the same matrix c times, and autodiff sums
its c cotangents) and class codes 0..c-1 as labels. It keeps everything else of the
binary Op: outputs (log_z, dlog_z/dK (c, n, n), dlog_z/dtheta (empty), loo (n,),
n_iter, status), ``pullback`` (cotangent times the gradient), -inf and status 2 on
failure, retries, per-thread warm starts, recent results and the numba registration.
The approximations are the registry's "laplace" (softmax: its multi-class solver
``softmax_laplace``) and "ep" (multinomial probit: ``multinomial_probit_ep``).

With inducing points (``approx="FITC"``), ``MulticlassSparseMarginalOp`` takes each class's
FITC prior instead, (K_uu (c, m, m), K_uf (c, m, n), diag K_ff (c, n), theta, y[, hyper]),
and returns the gradient in those three (``structures.multiclass_fitc``), as
``ops.sparse.SparseMarginalOp`` does for one class; ``MulticlassSparsePredictiveOp`` is its
predictive, in O(n* c m) memory.
"""

import contextlib

import numpy as np
import pytensor.tensor as pt
from pytensor.graph.basic import Apply

from ..approximations import registry
from ..approximations.solve import prediction_options, solve
from ..structures.multiclass_fitc import MulticlassFITCPrior
from ..validation import trusted_kernel
from .marginal import ApproxMarginalOp, LatentPredictiveOp, check_training_sizes
from .sparse import FITCInputs


def _dense_multiclass_retries(approximation, options):
    return registry.get(approximation).retry_schedule(options, "dense-multiclass")


class MulticlassMarginalOp(ApproxMarginalOp):
    """log q(y | K_1..K_c) with its gradient (see the module docstring).

    Parameters as for ``ApproxMarginalOp``; ``approximation`` is "laplace" or "ep" and
    ``likelihood_type`` a ``MulticlassLikelihood`` subclass (the registry's multi-class solver).

    Examples
    --------
    The GP classes build this Op; by hand:

    >>> from pymc_gpc.ops import MulticlassMarginalOp
    >>> op = MulticlassMarginalOp("laplace", pymc_gpc.likelihoods.Softmax)   # doctest: +SKIP
    >>> outputs = op(K_stack, params, y)   # K_stack: (c, n, n)  # doctest: +SKIP
    """

    structure_name = "dense-multiclass"
    retry_schedule_for = staticmethod(_dense_multiclass_retries)

    def __init__(self, approximation, likelihood_type, options=(), hyper_names=(), defer_loo=False,
                 sampling=False):
        registry.check_structure(approximation, self.structure_name)
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


def _fitc_multiclass_retries(approximation, options):
    return registry.get(approximation).retry_schedule(options, "fitc-multiclass")


class MulticlassSparseMarginalOp(FITCInputs, MulticlassMarginalOp):
    """log q(y | each class's FITC prior, theta) and its gradient in every class's K_uu, K_uf
    and diag K_ff.

    Inputs: K_uu (c, m, m), K_uf (c, m, n), k_diag (c, n), theta, y (class codes as floats)
    and the optional hyperparameter vector. Outputs: log_z, dlog_z/dK_uu (c, m, m),
    dlog_z/dK_uf (c, m, n), dlog_z/dk_diag (c, n), dlog_z/dtheta (empty), loo (n,), n_iter,
    status. Warm starts, recent results, retries, the failure contract and the numba
    registration are ``ApproxMarginalOp``'s; the input layout (``make_node``), pullback and
    recent-result key are the mixin ``ops.sparse.FITCInputs``' (shared with ``SparseMarginalOp``).
    ``pymc_gpc.fit`` reads it through ``n_kernel_inputs``, ``prior_from`` and
    ``kernel_cotangents``.
    """

    structure_name = "fitc-multiclass"

    @staticmethod
    def prior_from(Kuu, Kuf, k_diag):
        return MulticlassFITCPrior(Kuu, Kuf, k_diag)

    retry_schedule_for = staticmethod(_fitc_multiclass_retries)
    kernel_ndims = (3, 3, 2)  # one slice per class
    kernel_ndims_hint = " (one slice per class)"


class MulticlassPredictiveOp(LatentPredictiveOp):
    """Mean (c, m) and covariance of f* under q, given (K, y, K_cross, K_star).

    Inputs: K (c, n, n), y (n,) codes, K_cross (c, n, m), K_star (c, m) prior variances
    or (c, m, m) with ``full_cov``. Outputs: mean (c, m) and the per-point c x c
    covariances (m, c, c), or the joint (c m, c m) class-major covariance. No gradient.

    Examples
    --------
    The GP classes build this Op; by hand:

    >>> from pymc_gpc.ops import MulticlassPredictiveOp
    >>> op = MulticlassPredictiveOp("laplace", pymc_gpc.likelihoods.Softmax)   # doctest: +SKIP
    >>> mean, cov = op(K_stack, y, K_cross, K_star)   # doctest: +SKIP
    """

    n_kernel_inputs = 1
    prior_from = staticmethod(ApproxMarginalOp.prior_from)
    # The dense stack is checked (symmetric, positive definite) as the binary predictive's K;
    # the FITC prior validates its own inputs.
    trusted_kernels = False

    def make_node(self, *inputs):
        """Inputs: the ``n_kernel_inputs`` prior tensors, y, K_cross, K_star."""
        ins = [pt.as_tensor_variable(v).astype("float64") for v in inputs]
        out_cov = pt.dmatrix() if self.full_cov else pt.dtensor3()
        return Apply(self, ins, [pt.dmatrix(), out_cov])

    @staticmethod
    def _training_shapes(kernels, K_cross):
        return {"K": kernels[0].shape[1:], "K_cross": K_cross.shape[1:2]}

    def perform(self, node, inputs, output_storage):
        k = self.n_kernel_inputs
        kernels, (y, K_cross, K_star) = inputs[:k], inputs[k:]
        c, m = K_cross.shape[0], K_cross.shape[2]
        check_training_sizes(y.shape[0], **self._training_shapes(kernels, K_cross))
        try:
            with trusted_kernel() if self.trusted_kernels else contextlib.nullcontext():
                res = solve(self.approximation, self.prior_from(*kernels), y, self.likelihood, None, None,
                            prediction_options(self.options))
            mean, cov = res.posterior.predict(res.a, K_cross, K_star, full_cov=self.full_cov)
        except (ValueError, np.linalg.LinAlgError):  # NotPositiveDefiniteError is a LinAlgError
            mean = np.full((c, m), np.nan)
            cov = np.full((c * m, c * m) if self.full_cov else (m, c, c), np.nan)
        output_storage[0][0] = mean
        output_storage[1][0] = cov


class MulticlassSparsePredictiveOp(MulticlassPredictiveOp):
    """Mean (c, n*) and covariance of f* under q with each class's FITC prior, O(n* c m) memory.

    Inputs: K_uu (c, m, m), K_uf (c, m, n), k_diag (c, n), y (n,) codes, K_u* (c, m, n*) and
    the prior variances (c, n*) at the new inputs, or K_** (c, n*, n*) with ``full_cov``.
    Outputs as ``MulticlassPredictiveOp`` (``MulticlassFITCPosterior.predict``: Q_*f and
    K_**'s diagonal, as the binary FITC predictive). No gradient.
    """

    n_kernel_inputs = 3
    prior_from = staticmethod(MulticlassSparseMarginalOp.prior_from)
    trusted_kernels = True

    @staticmethod
    def _training_shapes(kernels, K_cross):
        Kuu, Kuf, k_diag = kernels
        return {"K_uf": Kuf.shape[2:], "k_diag": k_diag.shape[1:]}
