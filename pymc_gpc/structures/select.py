r"""The prior structure of a GP classifier, chosen in one place: ``select_structure``.

A GP classifier's prior covariance takes one of a few forms (a *prior structure*): the
dense n x n kernel, the inducing-point prior of FITC (Snelson & Ghahramani 2006), or the
(c, n, n) stack of c independent class GPs. Everything that differs between them, from
the PyTensor graph the classifier builds to the numbers ``pymc_gpc.fit`` hands the
solvers, is asked of one object satisfying ``PriorStructure``; the classifier
(``gp``), the point estimates (``point_estimates``) and prediction never branch on the
structure themselves. This is GPflow's ``get_posterior_class`` (one dispatcher) and
GPML 4's ``apx.m`` (the prior's operations chosen once, at the top of ``infEP.m``).

The numeric linear algebra of each structure (``posterior``, ``matvec``...) is in its own
module (``structures.dense``, ``structures.fitc``, ``structures.multiclass``); the objects
here wire it to the PyMC and PyTensor side.

Adding a structure (e.g. multi-class FITC): write a class with the attributes and methods
of ``PriorStructure``, give ``select_structure`` the one condition that chooses it, and
list it in ``STRUCTURES``. Its marginal Op type must take the structure's
``n_kernel_inputs`` kernel tensors first, then theta, y and the optional hyperparameter
vector (``ops.marginal.ApproxMarginalOp``'s convention, read by ``pymc_gpc.fit``).
"""

from typing import Protocol, runtime_checkable

import numpy as np
import pytensor
import pytensor.tensor as pt
from pytensor.raise_op import Assert

from ..likelihoods.multiclass import MulticlassLikelihood
from ..ops.marginal import ApproxMarginalOp, LatentPredictiveOp
from ..ops.multiclass import (
    MulticlassMarginalOp,
    MulticlassPredictiveOp,
    MulticlassSparseMarginalOp,
    MulticlassSparsePredictiveOp,
)
from ..ops.sparse import SparseMarginalOp, SparsePredictiveOp
from ..validation import check_inputs
from .em_bounds import FITCCovariance, covariance_bound, fitc_covariance_bound
from .dense import chol_lower

__all__ = ["PriorStructure", "DenseBinary", "FITCBinary", "DenseMulticlass", "FITCMulticlass", "STRUCTURES",
           "select_structure", "structure_of_op", "DENSE_BINARY", "FITC_BINARY", "DENSE_MULTICLASS",
           "FITC_MULTICLASS"]


@runtime_checkable
class PriorStructure(Protocol):
    """What a GP classifier and ``pymc_gpc.fit`` ask of a prior structure.

    ``gp`` below is the classifier (``gp.MarginalEP`` and its kin): it offers
    ``cov_func``, ``jitter``, the inducing inputs ``Xu`` (FITC) and, for several classes,
    ``class_kernels(X)`` (the (c, n, n) stack, ``gp_multiclass``). Arrays are NumPy float64;
    tensors are PyTensor variables.

    Attributes
    ----------
    name : a short name for messages and the approximation registry ("dense", "fitc",
        "dense-multiclass").
    marginal_op : the evidence Op type (``ops.marginal.ApproxMarginalOp`` or a subclass),
        constructed as ``marginal_op(approximation, likelihood_type, options, hyper_names)``
        and applied to ``(*kernel_inputs, theta, y, hyper)``.
    predictive_op : the latent predictive Op type (``ops.marginal.LatentPredictiveOp`` or
        a subclass), constructed as ``predictive_op(approximation, likelihood_type,
        options, full_cov)``.
    n_kernel_inputs : how many tensors ``kernel_inputs`` returns (the Op's first inputs).
    """

    name: str
    marginal_op: type
    predictive_op: type
    n_kernel_inputs: int

    def check_inducing(self, Xu, X, n_classes=None):
        """``Xu`` (inducing inputs given to ``marginal_likelihood``, or None) checked against
        the training inputs X (an (n, d) array) and, for several classes, their number:
        what the GP keeps as ``gp.Xu``. ValueError where this structure takes no inducing
        inputs and some were given, or needs them and they are missing or do not fit X."""

    def kernel_inputs(self, gp, X):
        """The evidence Op's kernel tensors at the training inputs X (a tensor): dense
        [K(X, X) + jitter I]; FITC [K_uu + jitter I, K_uf, diag K_ff + jitter];
        several classes [the (c, n, n) stack]."""

    def cross_covariances(self, gp, X, Xnew):
        """The prior cross-covariances the predictive takes: dense K(X, X*) (n, m); FITC
        K(Xu, X*) (m_u, m); several classes the (c, n, m) stack."""

    def prior_from(self, *arrays):
        """What the solvers take as the prior, from the values of the ``n_kernel_inputs``
        kernel inputs: the matrix K itself, or a structure object (``FITCPrior``)."""

    def prior_function(self, fn):
        """``fn`` (a compiled function whose outputs start with the ``n_kernel_inputs`` kernel
        inputs) as a function whose outputs start with ``prior_from`` of them instead: ``fn``
        itself where the kernel input is the prior (dense), else a wrapper (FITC)."""

    def kernel_cotangents(self, result):
        """The solver result's gradient of log q in each kernel input, as a tuple of
        ``n_kernel_inputs`` arrays (shaped as the inputs)."""

    def retry_schedule(self, approximation, options):
        """The option dicts tried, in order, after a non-converged run of ``approximation``
        with ``options`` (``approximations.solve.solve_with_retries``)."""

    def q_covariance(self, q):
        """The covariance A of q(f) in a solver result ``q``, in the form
        ``covariance_bound`` and ``marginal_variances`` take (EM-EP's E-step)."""

    def marginal_variances(self, A):
        """diag A, for A from ``q_covariance``."""

    def covariance_bound(self, arrays, h, A):
        """EM-EP's F_K (Kim & Ghahramani eq. 16-17) at the kernel input values ``arrays``
        with q(f) = N(h, A) fixed, and its gradient in each kernel input: (value, tuple).
        Raises ``structures.dense.NotPositiveDefiniteError`` outside K's domain."""

    def log_det_prior(self, arrays, h, A):
        """log|K| of the prior at ``arrays`` (for EM-EP's recorded bound)."""


class DenseBinary:
    """The dense n x n kernel K = k(X, X) + jitter I of one latent GP (``structures.dense``)."""

    name = "dense"
    marginal_op = ApproxMarginalOp
    predictive_op = LatentPredictiveOp
    n_kernel_inputs = 1

    def check_inducing(self, Xu, X, n_classes=None):
        if Xu is not None:
            raise ValueError("Xu (inducing inputs) is for approx='FITC'; this GP uses the dense kernel")
        return None

    def kernel_inputs(self, gp, X):
        return [gp.cov_func(X) + gp.jitter * pt.eye(X.shape[0])]

    def cross_covariances(self, gp, X, Xnew):
        return gp.cov_func(X, Xnew)

    def prior_from(self, *arrays):
        return self.marginal_op.prior_from(*arrays)

    def prior_function(self, fn):
        return fn

    def kernel_cotangents(self, result):
        return self.marginal_op.kernel_cotangents(result)

    def retry_schedule(self, approximation, options):
        return self.marginal_op.retry_schedule_for(approximation, options)

    def q_covariance(self, q):
        return q.posterior.full_cov()

    def marginal_variances(self, A):
        return np.diag(A)

    def covariance_bound(self, arrays, h, A):
        value, grad = covariance_bound(arrays[0], h, A)
        return value, (grad,)

    def log_det_prior(self, arrays, h, A):
        return 2.0 * np.sum(np.log(np.diag(chol_lower(arrays[0]))))


class FITCBinary(DenseBinary):
    """The inducing-point prior K~ = Q + Lambda of one latent GP (``structures.fitc``), from
    K_uu, K_uf and diag K_ff, each jittered where the dense K's diagonal is."""

    name = "fitc"
    marginal_op = SparseMarginalOp
    predictive_op = SparsePredictiveOp
    n_kernel_inputs = 3

    def check_inducing(self, Xu, X, n_classes=None):
        """Xu as a constant array or a tensor, checked against X (before any heavy work)."""
        if Xu is None:
            raise ValueError("approx='FITC' needs inducing inputs: marginal_likelihood(name, X, y, Xu=Xu), "
                             "e.g. Xu = pm.gp.util.kmeans_inducing_points(m, X)")
        n, d = X.shape
        if isinstance(Xu, pytensor.graph.basic.Variable):
            if Xu.ndim != 2:
                raise ValueError(f"Xu must be a 2-D (m, {d}) tensor, got {Xu.ndim} dimensions")
            m, cols = Xu.type.shape
        else:
            Xu = check_inputs(Xu, name="Xu")
            m, cols = Xu.shape
        if cols is not None and cols != d:
            raise ValueError(f"Xu has {cols} columns but the training inputs X have {d}")
        if m is not None and m > n:
            raise ValueError(f"Xu has m = {m} inducing inputs, more than the n = {n} data points")
        return Xu

    def kernel_inputs(self, gp, X):
        Xu = gp.Xu
        Kuu = gp.cov_func(Xu) + gp.jitter * pt.eye(Xu.shape[0])
        return [Kuu, gp.cov_func(Xu, X), gp.cov_func(X, diag=True) + gp.jitter]

    def cross_covariances(self, gp, X, Xnew):
        return gp.cov_func(gp.Xu, Xnew)

    def prior_function(self, fn):
        k = self.n_kernel_inputs

        def prior_and_rest(*args):
            values = fn(*args)
            return (self.prior_from(*values[:k]), *values[k:])

        return prior_and_rest

    def q_covariance(self, q):
        return FITCCovariance(*q.posterior.covariance_factors())

    def marginal_variances(self, A):
        return A.marginal_variances()

    def covariance_bound(self, arrays, h, A):
        value, grads, _ = fitc_covariance_bound(*arrays, h, A)
        return value, grads

    def log_det_prior(self, arrays, h, A):
        return fitc_covariance_bound(*arrays, h, A)[2]


class DenseMulticlass(DenseBinary):
    """c independent dense GPs, their kernels a (c, n, n) stack (``structures.multiclass``),
    built by the multi-class classifier (``gp_multiclass``: ``gp.class_kernels(X)``)."""

    name = "dense-multiclass"
    marginal_op = MulticlassMarginalOp
    predictive_op = MulticlassPredictiveOp

    def kernel_inputs(self, gp, X):
        return [gp.class_kernels(X)]

    def cross_covariances(self, gp, X, Xnew):
        return pt.stack([f(X, Xnew) for f in gp.class_cov_funcs()])


class FITCMulticlass(DenseMulticlass):
    """c independent GPs, each with its FITC prior K~_k = Q_k + Lambda_k
    (``structures.multiclass_fitc``), from the (c, m, m), (c, m, n) and (c, n) stacks of
    K_uu (jittered), K_uf and diag K_ff (jittered). The inducing inputs are one (m, d) set
    shared by the classes or one per class (``gp.Xu`` a list of c sets)."""

    name = "fitc-multiclass"
    marginal_op = MulticlassSparseMarginalOp
    predictive_op = MulticlassSparsePredictiveOp
    n_kernel_inputs = 3
    prior_function = FITCBinary.prior_function

    def check_inducing(self, Xu, X, n_classes=None):
        """Xu as one (m, d) set (an array or a tensor) or a list of c of them (from a list or a
        (c, m, d) array or tensor), checked against X: ValueError for a wrong column count,
        sets of different sizes, a number of sets other than ``n_classes``, or m > n."""
        if Xu is None:
            return FITC_BINARY.check_inducing(None, X)
        c = n_classes
        symbolic = isinstance(Xu, pytensor.graph.basic.Variable)
        if isinstance(Xu, (list, tuple)):
            sets = list(Xu)
        elif (Xu.ndim if symbolic else np.ndim(Xu)) == 3:
            count = Xu.type.shape[0] if symbolic else np.shape(Xu)[0]
            if count is not None and count != c:
                raise ValueError(f"Xu holds {count} inducing sets but y holds {c} classes")
            if count is None:  # checked where the graph runs
                Xu = Assert(f"Xu must hold one inducing set per class ({c})")(Xu, pt.eq(Xu.shape[0], c))
            sets = [Xu[k] for k in range(c)] if symbolic else list(np.asarray(Xu))
        else:
            return FITC_BINARY.check_inducing(Xu, X)
        if len(sets) != c:
            raise ValueError(f"Xu lists {len(sets)} inducing sets but y holds {c} classes")
        checked = [FITC_BINARY.check_inducing(v, X) for v in sets]
        sizes = {v.type.shape[0] if isinstance(v, pytensor.graph.basic.Variable) else v.shape[0] for v in checked}
        sizes.discard(None)
        if len(sizes) > 1:
            raise ValueError(f"every class needs the same number m of inducing inputs, got {sorted(sizes)}")
        return checked

    @staticmethod
    def _inducing(gp):
        """The c inducing-input sets (one shared set repeated)."""
        return gp.Xu if isinstance(gp.Xu, list) else [gp.Xu] * gp.n_classes

    def kernel_inputs(self, gp, X):
        shared = gp.cov_funcs is None and not isinstance(gp.Xu, list)
        pairs = [(gp.cov_func, gp.Xu)] if shared else list(zip(gp.class_cov_funcs(), self._inducing(gp)))
        Kuu = [f(Xu) + gp.jitter * pt.eye(Xu.shape[0]) for f, Xu in pairs]
        Kuf = [f(Xu, X) for f, Xu in pairs]
        kd = [f(X, diag=True) + gp.jitter for f, _ in pairs]
        if shared:  # one kernel and one inducing set: built once, used by every class
            Kuu, Kuf, kd = Kuu * gp.n_classes, Kuf * gp.n_classes, kd * gp.n_classes
        if gp.cov_funcs is None and isinstance(gp.Xu, list):  # one kernel: diag K_ff built once
            kd = kd[:1] * gp.n_classes
        return [pt.stack(Kuu), pt.stack(Kuf), pt.stack(kd)]

    def cross_covariances(self, gp, X, Xnew):
        return pt.stack([f(Xu, Xnew) for f, Xu in zip(gp.class_cov_funcs(), self._inducing(gp))])


DENSE_BINARY, FITC_BINARY, DENSE_MULTICLASS = DenseBinary(), FITCBinary(), DenseMulticlass()
FITC_MULTICLASS = FITCMulticlass()
STRUCTURES = (DENSE_BINARY, FITC_BINARY, DENSE_MULTICLASS, FITC_MULTICLASS)


def select_structure(likelihood, approx):
    """The prior structure for ``likelihood`` (an instance) and ``approx`` (None for the
    dense kernel, or "FITC" as ``registry.check_approx`` returns it).

    Raises
    ------
    ValueError
        For an ``approx`` other than None and "FITC".
    """
    if approx not in (None, "FITC"):
        raise ValueError(f"approx must be None (dense) or 'FITC', got {approx!r}")
    if isinstance(likelihood, MulticlassLikelihood):
        return DENSE_MULTICLASS if approx is None else FITC_MULTICLASS
    return DENSE_BINARY if approx is None else FITC_BINARY


def structure_of_op(op):
    """The prior structure whose ``marginal_op`` or ``predictive_op`` (or a base of it, the
    most derived first) ``op`` is an instance of: how ``pymc_gpc.fit`` reads the evidence
    nodes it finds in a model, and a backend the Ops it is given."""
    for op_type in type(op).__mro__:
        for structure in STRUCTURES:
            if op_type in (structure.marginal_op, structure.predictive_op):
                return structure
    raise ValueError(f"{op!r} is not the evidence Op of a known prior structure")
