"""The prior structure of a GP classifier, chosen in one place: ``select_structure``.

A prior covariance takes one of a few forms: the dense n x n kernel, FITC's inducing-point
prior, HSGP's basis-function prior, or a (c, ...) stack of class GPs. Whatever differs
between them, from the PyTensor graph the classifier builds to the numbers
``pymc_gpc.fit`` hands the solvers, is asked of one object satisfying
``structures.base.PriorStructure`` (as GPflow's ``get_posterior_class`` or GPML 4's
``apx.m``); the classifier, the point estimates and prediction never branch on it. The
numeric linear algebra is in each structure's own module.

The evidence and predictive Ops hold the structure in their ``__props__``: they take its
``n_kernel_inputs`` kernel tensors, then theta, y and the optional hyperparameter vector,
and ask it for the prior (``prior_from``), the kernel cotangents and the predictive's
outputs. This module imports neither an Op nor the registry.

Adding a structure: a class with the members of ``PriorStructure``, its condition in
``select_structure``, and an entry in ``STRUCTURES``.
"""

import numbers

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
from pytensor.raise_op import Assert
from scipy.linalg import solve_triangular

from ..likelihoods.multiclass import MulticlassLikelihood
from ..validation import check_inputs
from .base import PriorStructure
from .em_bounds import FITCCovariance, covariance_bound, fitc_covariance_bound
from .dense import chol_lower
from .fitc import FITCPrior
from .hsgp import (HSGPPrior, HSGPStructure, LaplacianBasis, PeriodicBasis, basis_from_description, check_periodic_kernel,
                   checked_boundary, checked_box, checked_m, constant_value, spectral_variances)
from .multiclass_fitc import MulticlassFITCPrior
from .multiclass_hsgp import MulticlassHSGPPrior

__all__ = ["PriorStructure", "DenseBinary", "FITCBinary", "HSGPBinary", "DenseMulticlass", "FITCMulticlass",
           "HSGPMulticlass", "STRUCTURES", "select_structure", "structure_named", "hsgp_options", "DENSE_BINARY",
           "FITC_BINARY", "HSGP_BINARY", "DENSE_MULTICLASS", "FITC_MULTICLASS", "HSGP_MULTICLASS"]


class DenseBinary:
    """The dense n x n kernel K = k(X, X) + jitter I of one latent GP (``structures.dense``)."""

    name = "dense"
    multiclass = False
    dense_kernel = True
    n_kernel_inputs = 1
    kernel_names = ("K",)
    kernel_ndims = (2,)
    point_input = 0
    compiled_ep_loop = True
    predictive_takes_theta = True
    trusted_prediction = False

    def __repr__(self):
        return f"structure:{self.name}"

    def __eq__(self, other):
        return isinstance(other, DenseBinary) and other.name == self.name

    def __hash__(self):
        return hash(("PriorStructure", self.name))

    def __reduce__(self):
        return structure_named, (self.name,)

    def prior_options(self, cov_func, m=None, L=None, c=None, drop_first=False, scale=None, boundary=None):
        options = {"m": m, "L": L, "c": c, "drop_first": drop_first, "scale": scale, "boundary": boundary}
        given = [k for k, v in options.items() if v is not None and v is not False]
        if given:
            raise ValueError(f"{', '.join(given)}: options of approx='HSGP', not of the {self.name} prior")
        return None

    def for_training_inputs(self, gp, X):
        return self

    def check_inducing(self, Xu, X, n_classes=None):
        if Xu is not None:
            raise ValueError(f"Xu (inducing inputs) is for approx='FITC'; this GP uses the {self.name} prior")
        return None

    def kernel_inputs(self, gp, X):
        return [gp.cov_func(X) + gp.jitter * pt.eye(X.shape[0])]

    def cross_covariances(self, gp, X, Xnew):
        return gp.cov_func(X, Xnew)

    def prior_from(self, *arrays, rough=False):
        (K,) = arrays
        return K

    def prior_function(self, fn):
        return fn

    def kernel_cotangents(self, result):
        return (result.dlog_z_dK,)

    def not_converged_message(self, approximation, point, kernels, result, retries):
        K = kernels[0]
        return (f"{approximation.upper()} did not converge at {point or 'this point'} "
                f"(mean diag(K) {np.mean(np.diagonal(K, axis1=-2, axis2=-1)):.3g}; last change "
                f"{result.max_change:.2e} after {retries} retr{'y' if retries == 1 else 'ies'} with damped/sequential "
                "updates). The value is used; the evaluation's status output is 1.")

    def training_shapes(self, kernels, cross):
        return {"K": kernels[0].shape, "K_cross": cross.shape[:1]}

    def latent_predictive(self, result, cross, star, full_cov):
        if full_cov:
            V = result.posterior.R() @ cross
            cov = star - cross.T @ V
            return cross.T @ result.a, 0.5 * (cov + cov.T)
        _, var = result.predict_latent(cross, star)
        return cross.T @ result.a, var

    def predictive_types(self, full_cov):
        return pt.dvector(), pt.dmatrix() if full_cov else pt.dvector()

    def failed_prediction(self, cross, full_cov):
        m = cross.shape[-1]
        return np.full(m, np.nan), np.full((m, m) if full_cov else m, np.nan)

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
    dense_kernel = False
    n_kernel_inputs = 3
    kernel_names = ("Kuu", "Kuf", "k_diag")
    kernel_ndims = (2, 2, 1)
    point_input = 1  # K_uf
    compiled_ep_loop = False

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

    def prior_from(self, *arrays, rough=False):
        Kuu, Kuf, k_diag = arrays
        return FITCPrior(Kuu, Kuf, k_diag, single=rough)

    def kernel_cotangents(self, result):
        """d log q / d(K_uu, K_uf, diag K_ff): the solver's ``FITCGradient`` (``structures.fitc``)."""
        return tuple(result.dlog_z_dK)

    def not_converged_message(self, approximation, point, kernels, result, retries):
        return (f"{approximation.upper()} (FITC) did not converge at {point or 'this point'} (last change "
                f"{result.max_change:.2e} after {retries} damped retries). The value is used; "
                "the evaluation's status output is 1.")

    def training_shapes(self, kernels, cross):
        Kuu, Kuf, k_diag = kernels
        return {"K_uf": Kuf.shape[1:], "k_diag": k_diag.shape}

    def latent_predictive(self, result, cross, star, full_cov):
        if full_cov:
            return result.posterior.predict_cov(result.a, cross, star)
        return result.predict_latent(cross, star)

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


class HSGPBinary(FITCBinary):
    r"""The basis-function prior K~ = Phi diag(S) Phi^T of one latent GP (``structures.hsgp``,
    Solin & Sarkka 2020, eq. 20), as ``pm.gp.HSGP`` builds it, or for a ``pm.gp.cov.Periodic``
    kernel the periodic expansion of ``pm.gp.HSGPPeriodic`` (``structures.hsgp.PeriodicBasis``).

    The basis is fixed by the training inputs (the box [-L, L]^d around their midpoint; the
    periodic basis's centre), so a structure bound to them (``for_training_inputs``) holds
    the basis as a hashable description (``LaplacianBasis.description``,
    ``PeriodicBasis.description``) and is compared, hashed and pickled by it.
    The Op's kernel inputs are S (M,), the kernel's spectral density at the basis
    frequencies (the periodic expansion's variances), whose graph carries the gradient into
    the hyperparameters, and the training inputs X (n, D), data with a zero cotangent, at
    which the basis operator (``LaplacianBasis.at``) is formed. The predictive's cross input
    is Phi at the new inputs (n*, M). ``HSGP_BINARY`` (no basis) names the structure for the
    registry.
    """

    name = "hsgp"
    n_kernel_inputs = 2
    kernel_names = ("S", "X")
    kernel_ndims = (1, 2)
    point_input = (0, 1)  # S, and X: the basis is taken at X, which pm.set_data may change
    trusted_prediction = True  # HSGPPrior checks S itself

    def __init__(self, box=None, columns=None):
        self.box, self.columns = box, columns  # the basis description; X's column count
        self._basis = None if box is None else basis_from_description(box)

    def __repr__(self):
        if self.box is None:
            return f"structure:{self.name}"
        if self.box[0] == "periodic":
            return f"structure:{self.name}(periodic, m={self.box[1]}, period={self.box[2]})"
        return f"structure:{self.name}(m={self.box[0]}, L={self.box[1]})"

    def __eq__(self, other):
        return type(other) is type(self) and (other.box, other.columns) == (self.box, self.columns)

    def __hash__(self):
        return hash(("PriorStructure", self.name, self.box, self.columns))

    def __reduce__(self):
        return type(self), (self.box, self.columns)

    @property
    def basis(self):
        if self._basis is None:
            raise RuntimeError("the HSGP structure has no basis before marginal_likelihood fixes it at the training X")
        return self._basis

    def prior_options(self, cov_func, m=None, L=None, c=None, drop_first=False, scale=None, boundary=None):
        """The options of ``pm.gp.HSGP`` (m, one per active dimension of ``cov_func``; L or c,
        default c = 1.5; drop_first; boundary) or, for a ``pm.gp.cov.Periodic`` kernel, of
        ``pm.gp.HSGPPeriodic`` (m, an int; scale), as an ``HSGPStructure``, checked before any
        heavy work (``hsgp_options``)."""
        return hsgp_options([cov_func], m, L, c, drop_first, scale, boundary)

    @staticmethod
    def _kernels(gp):
        """The latent functions' covariance functions, the one shared (or the first) first."""
        return [gp.cov_func]

    def for_training_inputs(self, gp, X):
        """This structure with the basis of ``gp.prior_options`` (``prior_options``) fixed at X,
        as ``pm.gp.HSGP`` fixes its box."""
        config, cov_func = gp.prior_options, self._kernels(gp)[0]
        if isinstance(cov_func, pm.gp.cov.Periodic):
            basis = PeriodicBasis(X, config.m, cov_func)
        else:
            basis = LaplacianBasis(X, config.m, L=config.L, c=config.c, drop_first=config.drop_first,
                                   boundary=config.boundary, active_dims=cov_func.active_dims)
        return type(self)(basis.description(), X.shape[1])

    def check_inducing(self, Xu, X, n_classes=None):
        return DenseBinary.check_inducing(self, Xu, X, n_classes)

    def kernel_inputs(self, gp, X):
        return [self.basis.kernel_variances(gp.cov_func, gp.prior_options.scale), pt.as_tensor_variable(X)]

    def cross_covariances(self, gp, X, Xnew):
        return self.basis.tensor(Xnew)

    def prior_from(self, *arrays, rough=False):
        S, X = arrays
        return HSGPPrior(self._kept_at(X, self.basis.at), S)

    def _kept_at(self, X, build):
        """``build(X)`` (the basis at the training inputs X), formed once and kept while X's
        values stay the same, as they do across a model's evaluations (a new X, e.g. from
        ``pm.set_data``, forms it anew). Not part of the structure's identity or pickle."""
        kept = getattr(self, "_kept_basis", None)
        if kept is None or kept[0].shape != np.shape(X) or not np.array_equal(kept[0], X):
            kept = self._kept_basis = (np.array(X, copy=True), build(X))
        return kept[1]

    def kernel_cotangents(self, result):
        """(d log Z / dS, 0): the training inputs are data."""
        dS = np.asarray(result.dlog_z_dK.S)
        return dS, np.zeros((np.shape(result.a)[-1], self.columns))

    def not_converged_message(self, approximation, point, kernels, result, retries):
        return (f"{approximation.upper()} (HSGP) did not converge at {point or 'this point'} (last change "
                f"{result.max_change:.2e} after {retries} damped retries). The value is used; "
                "the evaluation's status output is 1.")

    def training_shapes(self, kernels, cross):
        return {"X": kernels[1].shape[:1]}

    def latent_predictive(self, result, cross, star, full_cov):
        """f* = Phi* beta: mean Phi* S Phi^T a, (co)variance Phi* s A^{-1} s Phi*^T (``HSGPPosterior.predict``)."""
        posterior = result.posterior
        if not full_cov:
            return posterior.predict(result.a, cross)
        mean = posterior.predict(result.a, cross)[0]
        C = solve_triangular(posterior.L_A, (cross * posterior.prior.s).T, lower=True, check_finite=False)
        return mean, C.T @ C

    def failed_prediction(self, cross, full_cov):
        m = cross.shape[0]
        return np.full(m, np.nan), np.full((m, m) if full_cov else m, np.nan)

    def _no_em_bound(self, *args):
        raise ValueError("EM-EP has no bound for approx='HSGP' (its M-step takes a dense or FITC covariance); "
                         "fit an HSGP model with method='map' or sample it")

    q_covariance = marginal_variances = covariance_bound = log_det_prior = _no_em_bound


def _same_for_every_class(cov_funcs, read, what):
    """``read(f)`` of the first kernel, ValueError unless every kernel has the same (one basis)."""
    first = read(cov_funcs[0])
    if any(read(f) != first for f in cov_funcs[1:]):
        raise ValueError(f"approx='HSGP' with one kernel per class needs the classes' kernels to share {what} "
                         "(one basis serves every class)")
    return first


def hsgp_options(cov_funcs, m=None, L=None, c=None, drop_first=False, scale=None, boundary=None):
    """``approx="HSGP"``'s options for the latent functions' kernels ``cov_funcs`` (one, or one
    per class) as an ``HSGPStructure``, checked before any heavy work, with ``pm.gp.HSGP``'s
    and ``pm.gp.HSGPPeriodic``'s meanings: a ``pm.gp.cov.Periodic`` kernel takes the periodic
    expansion (m an int, scale), any other kernel the Laplacian basis (m one per active
    dimension, L or c with c = 1.5 by default, drop_first, boundary) and needs a
    ``power_spectral_density``. Several kernels share one basis: their active columns (and
    periods) must agree.

    Raises
    ------
    ValueError
        For a missing or bad m, a non-positive c or L, both L and c, options of the other
        variant, kernels of both kinds or on different columns, or a kernel without a
        spectral density (named: ``structures.hsgp.spectral_variances``).
    """
    if m is None:
        raise ValueError("approx='HSGP' needs m, the number of basis functions per input dimension "
                         "(e.g. m=[30, 30]; an int for a pm.gp.cov.Periodic kernel)")
    periodic = [isinstance(f, pm.gp.cov.Periodic) for f in cov_funcs]
    if any(periodic) != all(periodic):
        raise ValueError("approx='HSGP' needs every class's kernel periodic (pm.gp.cov.Periodic) or none")
    if all(periodic):
        given = [k for k, v in dict(L=L, c=c, drop_first=drop_first or None, boundary=boundary).items()
                 if v is not None]
        if given:
            raise ValueError(f"{', '.join(given)}: options of pm.gp.HSGP's Laplacian basis; the periodic "
                             "expansion of a pm.gp.cov.Periodic kernel takes m and scale (as pm.gp.HSGPPeriodic)")
        if not isinstance(m, numbers.Integral) or isinstance(m, bool) or m <= 0:
            raise ValueError(f"m must be a positive integer for the periodic expansion, got {m!r}")
        for f in cov_funcs:
            check_periodic_kernel(f)
        _same_for_every_class(cov_funcs, lambda f: float(constant_value(f.period, "the period of the periodic kernel")),
                              "one period")
        _same_for_every_class(cov_funcs, lambda f: tuple(np.atleast_1d(f.active_dims)), "their input column")
        return HSGPStructure(int(m), scale=scale)
    if scale is not None:
        raise ValueError("scale is for a periodic kernel (pm.gp.HSGPPeriodic); scale a stationary kernel itself")
    active = _same_for_every_class(cov_funcs, lambda f: tuple(np.atleast_1d(f.active_dims)), "their input columns")
    d = len(active)
    config = HSGPStructure(checked_m(m, d), L=L, c=1.5 if L is None and c is None else c, drop_first=drop_first,
                           boundary="dirichlet" if boundary is None else boundary)
    checked_box(config.L, config.c, d)
    checked_boundary(config.boundary, d)
    for f in cov_funcs:
        spectral_variances(f, np.ones((1, d)))
    return config


class DenseMulticlass(DenseBinary):
    """c independent dense GPs, their kernels a (c, n, n) stack (``structures.multiclass``),
    built by the multi-class classifier (``gp.marginal``: ``gp.class_kernels(X)``)."""

    name = "dense-multiclass"
    multiclass = True
    kernel_names = ("K",)
    kernel_ndims = (3,)  # the (c, n, n) stack
    compiled_ep_loop = False
    predictive_takes_theta = False

    def kernel_inputs(self, gp, X):
        return [gp.class_kernels(X)]

    def cross_covariances(self, gp, X, Xnew):
        return pt.stack([f(X, Xnew) for f in gp.class_cov_funcs()])

    def training_shapes(self, kernels, cross):
        return {"K": kernels[0].shape[1:], "K_cross": cross.shape[1:2]}

    def latent_predictive(self, result, cross, star, full_cov):
        """Mean (c, m) and the per-point c x c covariances (m, c, c), or the joint (c m, c m)
        class-major covariance with ``full_cov``."""
        return result.posterior.predict(result.a, cross, star, full_cov=full_cov)

    def predictive_types(self, full_cov):
        return pt.dmatrix(), pt.dmatrix() if full_cov else pt.dtensor3()

    def failed_prediction(self, cross, full_cov):
        c, m = cross.shape[0], cross.shape[-1]
        return np.full((c, m), np.nan), np.full((c * m, c * m) if full_cov else (m, c, c), np.nan)


class FITCMulticlass(DenseMulticlass):
    """c independent GPs, each with its FITC prior K~_k = Q_k + Lambda_k
    (``structures.multiclass_fitc``), from the (c, m, m), (c, m, n) and (c, n) stacks of
    K_uu (jittered), K_uf and diag K_ff (jittered). The inducing inputs are one (m, d) set
    shared by the classes or one per class (``gp.Xu`` a list of c sets)."""

    name = "fitc-multiclass"
    dense_kernel = False
    n_kernel_inputs = 3
    kernel_names = FITCBinary.kernel_names
    kernel_ndims = (3, 3, 2)  # one slice per class
    point_input = FITCBinary.point_input
    trusted_prediction = True  # the FITC prior validates its own inputs
    prior_function = FITCBinary.prior_function
    kernel_cotangents = FITCBinary.kernel_cotangents
    not_converged_message = FITCBinary.not_converged_message

    def prior_from(self, *arrays, rough=False):
        Kuu, Kuf, k_diag = arrays
        return MulticlassFITCPrior(Kuu, Kuf, k_diag)

    def training_shapes(self, kernels, cross):
        Kuu, Kuf, k_diag = kernels
        return {"K_uf": Kuf.shape[2:], "k_diag": k_diag.shape[1:]}

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


class HSGPMulticlass(HSGPBinary):
    r"""c independent GPs, each with the basis-function prior
    K~_k = Phi diag(S_k) Phi^T of its own kernel on one shared basis
    (``structures.multiclass_hsgp``): ``HSGPBinary``'s basis, fixed at the training inputs,
    and the (c, M) stack of the classes' spectral variances. The classes' kernels (one shared
    or one per class, ``gp.class_cov_funcs``) read the same input columns, and periodic
    kernels have one period (``hsgp_options``). The predictive's cross input is the (c, n*, M)
    stack of the basis at the new inputs (one slice per class)."""

    name = "hsgp-multiclass"
    multiclass = True
    kernel_ndims = (2, 2)  # S (c, M), X (n, D)
    predictive_takes_theta = False
    predictive_types = DenseMulticlass.predictive_types

    def prior_options(self, cov_func, m=None, L=None, c=None, drop_first=False, scale=None, boundary=None):
        """``HSGPBinary.prior_options`` for one kernel shared by the classes or a list of them."""
        cov_funcs = list(cov_func) if isinstance(cov_func, (list, tuple)) else [cov_func]
        return hsgp_options(cov_funcs, m, L, c, drop_first, scale, boundary)

    @staticmethod
    def _kernels(gp):
        return gp.cov_funcs or [gp.cov_func]

    def kernel_inputs(self, gp, X):
        scale = gp.prior_options.scale
        if gp.cov_funcs is None:  # one kernel: its variances built once, used by every class
            S = [self.basis.kernel_variances(gp.cov_func, scale)] * gp.n_classes
        else:
            S = [self.basis.kernel_variances(f, scale) for f in gp.cov_funcs]
        return [pt.stack(S), pt.as_tensor_variable(X)]

    def cross_covariances(self, gp, X, Xnew):
        return pt.stack([self.basis.tensor(Xnew)] * gp.n_classes)

    def prior_from(self, *arrays, rough=False):
        S, X = arrays
        return MulticlassHSGPPrior(self._kept_at(X, self.basis), S)

    def latent_predictive(self, result, cross, star, full_cov):
        """Mean (c, n*) and the per-point c x c covariances (n*, c, c), or the joint (c n*, c n*)
        class-major covariance with ``full_cov`` (``MulticlassHSGPPosterior.predict``)."""
        return result.posterior.predict(result.a, cross, star, full_cov=full_cov)

    def failed_prediction(self, cross, full_cov):
        c, m = cross.shape[0], cross.shape[1]
        return np.full((c, m), np.nan), np.full((c * m, c * m) if full_cov else (m, c, c), np.nan)


DENSE_BINARY, FITC_BINARY, DENSE_MULTICLASS = DenseBinary(), FITCBinary(), DenseMulticlass()
FITC_MULTICLASS, HSGP_BINARY, HSGP_MULTICLASS = FITCMulticlass(), HSGPBinary(), HSGPMulticlass()
STRUCTURES = (DENSE_BINARY, FITC_BINARY, DENSE_MULTICLASS, FITC_MULTICLASS, HSGP_BINARY, HSGP_MULTICLASS)


def select_structure(likelihood, approx):
    """The prior structure for ``likelihood`` (an instance) and ``approx`` (None for the
    dense kernel, "FITC" or "HSGP" as ``registry.check_approx`` returns it). For "HSGP" the
    GP binds the structure to its training inputs (``for_training_inputs``).

    Raises
    ------
    ValueError
        For an ``approx`` other than None, "FITC" and "HSGP".
    """
    if approx not in (None, "FITC", "HSGP"):
        raise ValueError(f"approx must be None (dense), 'FITC' or 'HSGP', got {approx!r}")
    if isinstance(likelihood, MulticlassLikelihood):
        return {None: DENSE_MULTICLASS, "FITC": FITC_MULTICLASS, "HSGP": HSGP_MULTICLASS}[approx]
    return {None: DENSE_BINARY, "FITC": FITC_BINARY, "HSGP": HSGP_BINARY}[approx]


def structure_named(name):
    """The structure of ``STRUCTURES`` called ``name`` (how a pickled structure is restored:
    each structure is one object, compared and hashed by its name)."""
    for structure in STRUCTURES:
        if structure.name == name:
            return structure
    raise ValueError(f"no prior structure is named {name!r}; the structures are "
                     f"{[s.name for s in STRUCTURES]}")
