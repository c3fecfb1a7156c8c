r"""The PyTensor Op of the latent predictive, one class for every prior structure.

``LatentPredictiveOp`` maps (kernel inputs, [theta,] y, cross-covariances, prior
(co)variances at the new inputs) to the mean and the variance (or covariance) of f*
under q. The prior structure in its props (``structures.select``) says what the kernel
inputs are, whether theta is an input (the multi-class likelihoods have none), how the
solve's result gives the predictive (``latent_predictive``: K_*f (K + W^-1)^-1 ... for
the dense K, Q_*f for FITC, per-class blocks for several classes) and what its outputs
are. No gradient: used for prediction and ``pm.sample_posterior_predictive``.
"""

import contextlib

import numpy as np
import pytensor.tensor as pt
from pytensor.gradient import grad_not_implemented
from pytensor.graph.basic import Apply
from pytensor.graph.op import Op

from ..approximations.solve import prediction_options, solve
from ..structures.select import DENSE_BINARY
from ..validation import trusted_kernel
from .marginal import check_structure

__all__ = ["LatentPredictiveOp", "check_training_sizes"]


def check_training_sizes(n, **shapes):
    """ValueError unless every leading dimension in ``shapes`` (name: shape) is the number
    ``n`` of training labels: a predictive Op given kernels of other training inputs (a
    training ``pm.Data`` container changed after ``marginal_likelihood``) says so instead of
    returning NaN."""
    bad = {name: tuple(int(v) for v in shape) for name, shape in shapes.items() if any(v != n for v in shape)}
    if bad:
        raise ValueError(
            f"the prediction's training kernels have shapes {bad} but there are {n} training labels: the training "
            "inputs changed after marginal_likelihood (pm.set_data on the training container?); put new inputs "
            "in a separate pm.Data container (e.g. pm.Data(\"X_new\", ...)) passed to gp.conditional"
        )


class LatentPredictiveOp(Op):
    """Mean and variance (or covariance) of f* under q, for one prior structure.

    Inputs: the structure's kernel inputs (dense: K (n, n); FITC: K_uu, K_uf, diag K_ff;
    several classes: one slice per class), theta (p,) unless the structure's
    ``predictive_takes_theta`` is false (several classes), y (n,), the cross-covariances
    (dense: K(X, X*) (n, m); FITC: K(Xu, X*) (m_u, m); several classes: the (c, ., m)
    stack) and the prior variances at the new inputs (m,) ((c, m) for several classes),
    or their covariance with ``full_cov``. Outputs: the mean (m,) and the variance (m,)
    or covariance (m, m); for several classes the mean (c, m) and the per-point c x c
    covariances (m, c, c), or the joint (c m, c m) class-major covariance. NaN where the
    solve fails; ValueError where the training kernels do not match y.

    Parameters
    ----------
    approximation, likelihood_type, options : as ``ApproxMarginalOp``.
    full_cov : return the joint covariance of f* instead of its marginal variances.
    structure : the prior structure (``structures.select``; ``DENSE_BINARY`` by default).

    Examples
    --------
    The GP classes build this Op; by hand:

    >>> from pymc_gpc.ops import LatentPredictiveOp
    >>> op = LatentPredictiveOp("ep", pymc_gpc.likelihoods.Probit)                    # doctest: +SKIP
    >>> mean, var = op(K, params, y, K_cross, k_star_diag)   # doctest: +SKIP
    """

    __props__ = ("structure", "approximation", "likelihood_type", "options", "full_cov")

    def __init__(self, approximation, likelihood_type, options=(), full_cov=False, structure=DENSE_BINARY):
        check_structure(structure, approximation, likelihood_type)
        self.structure = structure
        self.approximation = approximation
        self.likelihood_type = likelihood_type
        self.options = tuple(options)
        self.full_cov = bool(full_cov)
        self.likelihood = likelihood_type()

    @property
    def n_kernel_inputs(self):
        """How many kernel tensors come first (the structure's)."""
        return self.structure.n_kernel_inputs

    def make_node(self, *inputs):
        expected = self.structure.n_kernel_inputs + (4 if self.structure.predictive_takes_theta else 3)
        if len(inputs) != expected:
            raise TypeError(f"the {self.structure.name} predictive Op takes {expected} inputs, got {len(inputs)}")
        ins = [pt.as_tensor_variable(v).astype("float64") for v in inputs]
        return Apply(self, ins, list(self.structure.predictive_types(self.full_cov)))

    def perform(self, node, inputs, output_storage):
        structure = self.structure
        k = structure.n_kernel_inputs
        kernels, rest = inputs[:k], inputs[k:]
        params, (y, cross, star) = (rest[0], rest[1:]) if structure.predictive_takes_theta else (None, rest)
        check_training_sizes(y.shape[0], **structure.training_shapes(kernels, cross))
        try:
            with trusted_kernel() if structure.trusted_prediction else contextlib.nullcontext():
                res = solve(self.approximation, structure.prior_from(*kernels), y, self.likelihood, params, None,
                            prediction_options(self.options))
            mean, cov = structure.latent_predictive(res, cross, star, self.full_cov)
        except (ValueError, np.linalg.LinAlgError):  # NotPositiveDefiniteError is a LinAlgError
            mean, cov = structure.failed_prediction(cross, self.full_cov)
        output_storage[0][0], output_storage[1][0] = mean, cov

    def pullback(self, inputs, outputs, cotangents):
        return [grad_not_implemented(self, i, v, "prediction has no gradient") for i, v in enumerate(inputs)]
