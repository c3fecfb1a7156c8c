r"""PyTensor Ops for several classes: the marginal likelihood and the latent predictive.

``MulticlassMarginalOp`` is ``ApproxMarginalOp`` with a (c, n, n) stack of kernel
matrices (one per class; a shared kernel is the same matrix c times, and autodiff sums
its c cotangents) and class codes 0..c-1 as labels. It keeps everything else of the
binary Op: outputs (log_z, dlog_z/dK (c, n, n), dlog_z/dtheta (empty), loo (n,),
n_iter, status), ``pullback`` (cotangent times the gradient), -inf and status 2 on
failure, retries, per-thread warm starts, recent results and the numba registration.
The approximations are ``SOLVERS["laplace-multiclass"]`` (softmax, ``softmax_laplace``)
and ``SOLVERS["ep-multiclass"]`` (multinomial probit, ``multinomial_probit_ep``).

With inducing points (``approx="FITC"``), ``MulticlassSparseMarginalOp`` takes each class's
FITC prior instead, (K_uu (c, m, m), K_uf (c, m, n), diag K_ff (c, n), theta, y[, hyper]),
and returns the gradient in those three (``structures.multiclass_fitc``), as
``ops.sparse.SparseMarginalOp`` does for one class; ``MulticlassSparsePredictiveOp`` is its
predictive, in O(n* c m) memory.
"""

import warnings

import numpy as np
import pytensor.tensor as pt
from pytensor.gradient import DisconnectedType, disconnected_type, grad_not_implemented
from pytensor.graph.basic import Apply

from ..structures.multiclass_fitc import MulticlassFITCPrior
from ..validation import trusted_kernel
from .marginal import (
    SOLVERS,
    STATUS_CONVERGED,
    STATUS_FAILED,
    STATUS_NOT_CONVERGED,
    ApproximationFailedWarning,
    ApproxMarginalOp,
    LatentPredictiveOp,
    _loo_or_placeholder,
    _register_numba,
    _solve,
    _solve_with_retries,
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


class MulticlassSparseMarginalOp(MulticlassMarginalOp):
    """log q(y | each class's FITC prior, theta) and its gradient in every class's K_uu, K_uf
    and diag K_ff.

    Inputs: K_uu (c, m, m), K_uf (c, m, n), k_diag (c, n), theta, y (class codes as floats)
    and the optional hyperparameter vector. Outputs: log_z, dlog_z/dK_uu (c, m, m),
    dlog_z/dK_uf (c, m, n), dlog_z/dk_diag (c, n), dlog_z/dtheta (empty), loo (n,), n_iter,
    status. Warm starts, recent results, retries (nested EP: one damped retry; Laplace:
    more Newton steps), the failure contract and the numba registration are
    ``ApproxMarginalOp``'s. ``pymc_gpc.fit`` reads it through ``n_kernel_inputs``,
    ``prior_from`` and ``kernel_cotangents``.
    """

    n_kernel_inputs = 3
    loo_output = 5

    def prior_from(self, Kuu, Kuf, k_diag):
        return MulticlassFITCPrior(Kuu, Kuf, k_diag)

    def kernel_cotangents(self, result):
        return tuple(result.dlog_z_dK)

    def make_node(self, Kuu, Kuf, k_diag, params, y, hyper=None):
        ins = [pt.as_tensor_variable(v).astype("float64") for v in (Kuu, Kuf, k_diag, params, y)]
        for name, v, nd in (("Kuu", ins[0], 3), ("Kuf", ins[1], 3), ("k_diag", ins[2], 2)):
            if v.ndim != nd:
                raise ValueError(f"{name} must have {nd} dimensions (one slice per class), got {v.ndim}")
        hyper = pt.zeros((0,), dtype="float64") if hyper is None else pt.as_tensor_variable(hyper).astype("float64")
        ins.append(hyper)
        outputs = [pt.dscalar(), pt.dtensor3(), pt.dtensor3(), pt.dmatrix(), pt.dvector(), pt.dvector(),
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
            prior = MulticlassFITCPrior(Kuu, Kuf, k_diag)
            with trusted_kernel():
                result, retries = _solve_with_retries(
                    self.approximation, prior, y, self._lik, params, warm.guess(hyper), options,
                    self.retry_schedule(options))
            ok = (np.isfinite(result.log_z) and all(np.all(np.isfinite(g)) for g in result.dlog_z_dK)
                  and np.all(np.isfinite(result.dlog_z_dparams)))
            status = (STATUS_CONVERGED if result.converged else STATUS_NOT_CONVERGED) if ok else STATUS_FAILED
        except (ValueError, ArithmeticError, np.linalg.LinAlgError):
            status = STATUS_FAILED
        self._counts["retries"] += retries
        if status == STATUS_FAILED:
            self._counts["failed"] += 1
            self._write(output_storage, -np.inf, (np.zeros(Kuu.shape), np.zeros(Kuf.shape), np.zeros(k_diag.shape)),
                        np.zeros(len(params)), np.full(n, -np.inf), 0, status)
            return None
        if status == STATUS_NOT_CONVERGED:
            self._counts["not_converged"] += 1
            warnings.warn(
                f"{self.approximation.upper()} (FITC) did not converge at "
                f"{self._describe_point(params, hyper) or 'this point'} (last change "
                f"{result.max_change:.2e} after {retries} retries). The value is used; "
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
        return None

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


class MulticlassSparsePredictiveOp(LatentPredictiveOp):
    """Mean (c, n*) and covariance of f* under q with each class's FITC prior, O(n* c m) memory.

    Inputs: K_uu (c, m, m), K_uf (c, m, n), k_diag (c, n), y (n,) codes, K_u* (c, m, n*) and
    the prior variances (c, n*) at the new inputs, or K_** (c, n*, n*) with ``full_cov``.
    Outputs: mean (c, n*) and the per-point c x c covariances (n*, c, c), or the joint
    (c n*, c n*) class-major covariance (``MulticlassFITCPosterior.predict``: Q_*f and
    K_**'s diagonal, as the binary FITC predictive). No gradient.
    """

    def make_node(self, Kuu, Kuf, k_diag, y, Kus, K_star):
        ins = [pt.as_tensor_variable(v).astype("float64") for v in (Kuu, Kuf, k_diag, y, Kus, K_star)]
        out_cov = pt.dmatrix() if self.full_cov else pt.dtensor3()
        return Apply(self, ins, [pt.dmatrix(), out_cov])

    def perform(self, node, inputs, output_storage):
        Kuu, Kuf, k_diag, y, Kus, K_star = inputs
        c, ns = Kus.shape[0], Kus.shape[2]
        check_training_sizes(y.shape[0], K_uf=Kuf.shape[2:], k_diag=k_diag.shape[1:])
        try:
            prior = MulticlassFITCPrior(Kuu, Kuf, k_diag)
            with trusted_kernel():
                res = _solve(self.approximation, prior, y, self._lik, None, None, prediction_options(self.options))
            mean, cov = res.posterior.predict(res.a, Kus, K_star, full_cov=self.full_cov)
        except (ValueError, np.linalg.LinAlgError):
            mean = np.full((c, ns), np.nan)
            cov = np.full((c * ns, c * ns) if self.full_cov else (ns, c, c), np.nan)
        output_storage[0][0] = mean
        output_storage[1][0] = cov


_register_numba((MulticlassMarginalOp, MulticlassPredictiveOp, MulticlassSparseMarginalOp,
                 MulticlassSparsePredictiveOp))
