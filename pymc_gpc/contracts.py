r"""The package's public contracts: what each kind of object must provide, in one place.

Five ``typing.Protocol`` classes state what the approximations, the Ops, the GP classes
and ``pymc_gpc.fit`` actually call on the objects they are handed, so that a new
likelihood, prior structure or posterior can be written against a contract instead of
against an existing class:

``BinaryLikelihood``
    a binary observation model p(y | f, theta), y in {-1, +1}
    (``likelihoods.binary``: ``Probit``, ``ProbitBias``, ``ProbitNoise``,
    ``StepLabelNoise``, ``Logistic``).
``MulticlassLikelihood``
    a c-class observation model p(y | f_1..f_c) (``likelihoods.multiclass``:
    ``Softmax``, ``MultinomialProbit``).
``SolverPrior`` (binary: ``BinarySolverPrior``)
    the prior covariance as the solvers see it (``structures.dense.DensePrior``,
    ``structures.fitc.FITCPrior``, ``structures.multiclass_fitc.MulticlassFITCPrior``).
``LatentPosterior`` and ``MulticlassPosterior``
    the Gaussian q(f) a solver builds at given site precisions (binary:
    ``structures.dense.LatentPosterior``, ``IndefiniteSitePosterior``,
    ``structures.fitc.FITCPosterior``; several classes:
    ``structures.multiclass.CoupledBlockPosterior``,
    ``structures.multiclass_fitc.MulticlassFITCPosterior``).
``SolveResult``
    what every approximation returns (``approximations.result.ApproximationResult``).

``PriorStructure`` (the PyMC side of a prior structure) is ``structures.select``'s, re-exported
here. ``conformance_gaps(obj, contract)`` lists what an object lacks, member by member
and signature by signature; ``isinstance(obj, contract)`` checks only that the members
exist (``typing.runtime_checkable``).

Members are those used by the package, read from its call sites; an implementing class
may have more (a structure's own extras, e.g. the dense posterior's ``full_cov``, are
stated on the sub-protocols ``DenseLatentPosterior`` and ``FITCLatentPosterior``).
Notation: Rasmussen & Williams 2006 (R&W): K the prior covariance, W = diag(w) the
site precisions, B = I + W^{1/2} K W^{1/2}, R = (K + W^{-1})^{-1}, Sigma = (K^{-1} + W)^{-1}.
"""

import inspect
from typing import Protocol, runtime_checkable

from .structures.select import PriorStructure

__all__ = ["BinaryLikelihood", "MulticlassLikelihood", "SolverPrior", "BinarySolverPrior", "LatentPosterior", "DenseLatentPosterior",
           "FITCLatentPosterior", "MulticlassPosterior", "SolveResult", "PriorStructure", "conformance_gaps"]


@runtime_checkable
class BinaryLikelihood(Protocol):
    """A binary observation model p(y | f, theta) with at most a few parameters theta.

    The Ops construct the likelihood *type* with no arguments (``likelihood_type()``) and
    pass theta as an input, so every method takes ``params`` (None: the values the
    instance was built with).

    Attributes
    ----------
    kind : the index of its site kernels in the compiled dispatch (``likelihoods.binary``'s
        ``tilted_site`` / ``log_lik_site``; read by EP, ADF and the numba and JAX Ops).
    param_names : names of theta's entries (messages; ``n_params`` of them).
    supports_laplace : whether ``log_lik`` exists (False for a likelihood piecewise constant
        in f, whose mode and Hessian Laplace's method needs do not exist).
    """

    kind: int
    param_names: tuple
    supports_laplace: bool

    @property
    def n_params(self) -> int:
        """The length p of theta."""

    @property
    def params(self):
        """The fixed theta the instance was built with, (p,); ValueError where it is symbolic."""

    def params_tensor(self):
        """theta as a PyTensor vector (p,), the Op's parameter input (``gp``)."""

    def check_params(self, params):
        """theta as a float array (p,), or ValueError naming the problem (wrong length, not
        finite, outside the likelihood's domain such as epsilon >= 1/2)."""

    def tilted(self, y, mu, s2, params=None):
        """EP's tilted moments at cavities N(mu_i, s2_i): log Z_i = log int p(y_i | f)
        N(f; mu_i, s2_i) df with d/dmu_i, d^2/dmu_i^2 and d/dtheta at fixed cavity
        (R&W eq. 3.58; Tan et al., Appendix A, per likelihood), as ``TiltedMoments``."""

    def log_lik(self, y, f, params=None):
        """log p(y_i | f_i) with its f-derivatives to third order and the theta-derivatives of
        the first three (Laplace: R&W eq. 3.15-3.16 and Alg. 5.1; Barber & Williams), as
        ``LogLikDerivatives``; ValueError where ``supports_laplace`` is False."""

    def expected_log_lik(self, y, mu, s2, params=None):
        """E_q[log p(y_i | f_i)] under q(f_i) = N(mu_i, s2_i), (n,), and its theta-gradient
        (n, p): the data term of the variational bound (Kim & Ghahramani eq. 15; Tan eq. 17),
        read by EM-EP's M-step (``estimation.em_ep``)."""

    def predict(self, mu, s2, params=None):
        """p(y* = +1 | mu*, s2*) = int p(+1 | f) N(f; mu*, s2*) df (Tan eq. 13)."""


@runtime_checkable
class MulticlassLikelihood(Protocol):
    """A c-class observation model p(y | f_1..f_c), labels the class codes 0..c-1, latent
    values class-major (F[k, i] = f_k(x_i)). Constructed with no arguments by the Ops.

    Attributes
    ----------
    approximations : the registry's approximations that can integrate it out ("laplace":
        ``log_lik`` concave; "ep": nested EP's tilted moments, ``multinomial_probit_ep``).
    param_names, n_params : theta (none for the present likelihoods).
    n_classes : c where fixed at construction, else None (taken from the labels).
    """

    approximations: tuple
    param_names: tuple
    n_params: int
    n_classes: int | None

    def params_tensor(self):
        """theta as a PyTensor vector (the Op's parameter input; empty)."""

    def check_params(self, params):
        """theta as a float array, or ValueError naming the problem."""

    def log_lik(self, y, F):
        """log p(y_i | f_i) (n,) and the class probabilities pi (c, n), from which Laplace's
        gradient Y - pi and negative Hessian W = diag(pi) - pi pi^T follow (R&W eq. 3.32-3.34,
        Williams & Barber 1998)."""

    def probabilities(self, F):
        """p(y = k | f) for every class k at latent values F (c, ...)."""

    def predict(self, mean, cov, size=None, predictive=None):
        """Class probabilities (m, c) from the latent predictive N(mean_i, cov_i): the integral
        E[p(k | f*)] (R&W sec. 3.5, Alg. 3.4 line 10) or a plug-in (``predictive``)."""

    def expected_prob(self, y, mean, cov, size=None):
        """E[p(y_i | f_i)] under f_i ~ N(mean_i, cov_i), (m,): the LOO predictive over a cavity."""


@runtime_checkable
class SolverPrior(Protocol):
    """The prior covariance K (binary (n, n), or c blocks for several classes) as the
    solvers take it in place of a matrix (``structures.is_structure``).

    Attributes
    ----------
    n : the number of training points.
    """

    n: int

    def diag(self):
        """diag K, the prior variances (EP's cavities, R&W eq. 3.56)."""

    def matvec(self, v):
        """K v (Laplace's f = K a, R&W Alg. 3.1 line 7)."""

    def posterior(self, w, rough=False):
        """q(f) at site precisions w: a ``LatentPosterior`` (binary) or ``MulticlassPosterior``
        (several classes); ``rough`` allows single-precision factors where the structure
        can bound their error."""

    def dense(self):
        """K as a dense array (small problems and tests)."""


@runtime_checkable
class BinarySolverPrior(SolverPrior, Protocol):
    """A binary prior: also says whether sequential EP's rank-one sweeps apply (they need the
    dense Sigma: R&W Alg. 3.5 lines 6-9)."""

    sequential: bool


@runtime_checkable
class LatentPosterior(Protocol):
    """The binary q(f) = N(K a, Sigma), Sigma = (K^{-1} + W)^{-1}, at site precisions w
    (R&W sec. 3.4-3.6), as EP and Laplace use it.

    Attributes
    ----------
    rough : whether its factors are single precision (a parallel EP sweep's direction only).
    """

    rough: bool

    def half_logdet_B(self):
        """(1/2) log|B| (R&W eq. 3.32 and 3.65)."""

    def weights(self, v):
        """R W^{-1} v = (K + W^{-1})^{-1} W^{-1} v: Newton's and EP's representer weights
        (R&W Alg. 3.2 line 6, Alg. 3.5 line 7)."""

    def var_diag(self):
        """diag Sigma, the marginal variances (R&W Alg. 3.5 line 8)."""

    def mean_and_weights(self, v):
        """(K b, b) for b = ``weights(v)``: EP's posterior mean from nu~."""

    def R_times(self, v):
        """R v = (K + W^{-1})^{-1} v (Laplace's gradient, R&W Alg. 5.1)."""

    def sigma_times(self, v):
        """Sigma v (Laplace's implicit term, R&W Alg. 5.1 lines 8-10)."""

    def kernel_gradient(self, outer, scale_R):
        """G = sum_k c_k (x_k y_k^T + y_k x_k^T)/2 + scale_R R for ``outer`` [(x_k, y_k, c_k)],
        the gradient of log q in K (Laplace: R&W eq. 5.23, Alg. 5.1 line 9)."""

    def ep_gradient(self, b, rough=False):
        """dlog Z_EP / dK = (b b^T - R) / 2 at EP's fixed point (R&W eq. 5.27, Seeger 2005)."""

    def predict(self, a, K_cross, k_diag):
        """Latent predictive mean K_*^T a and variance k_** - ||L^{-1} W^{1/2} k_*||^2 at new
        points (R&W Alg. 3.2 lines 4-6 / Alg. 3.6)."""


@runtime_checkable
class DenseLatentPosterior(LatentPosterior, Protocol):
    """The dense prior's posterior: also the matrices sequential EP, EM-EP and the full
    predictive covariance take."""

    def full_cov(self):
        """Sigma as an (n, n) matrix (sequential EP's rank-one updates; EM-EP's q_covariance)."""

    def R(self):
        """R = (K + W^{-1})^{-1} as an (n, n) matrix (the predictive covariance, R&W eq. 3.61)."""


@runtime_checkable
class FITCLatentPosterior(LatentPosterior, Protocol):
    """The FITC prior's posterior (Snelson & Ghahramani 2006): what its predictive and EM-EP take."""

    def predict_cov(self, a, Kus, K_star):
        """Latent predictive mean and full covariance at new points from K_u* and K_**."""

    def covariance_factors(self):
        """Sigma in factored low-rank-plus-diagonal form (EM-EP's FITC bound, ``FITCCovariance``)."""


@runtime_checkable
class MulticlassPosterior(Protocol):
    """The c-class q(f) = N(K a, (K^{-1} + W)^{-1}) with K block-diagonal over classes and W
    the coupled site precision (R&W sec. 3.5, Alg. 3.3-3.4; Seeger & Jordan 2004 for EP).

    Attributes
    ----------
    d : the per-class diagonals of W (softmax: pi, R&W eq. 3.38).
    rough : whether its factors are single precision (a Newton direction only).
    """

    d: object
    rough: bool

    def half_logdet_B(self):
        """(1/2) log|I + W^{1/2} K W^{1/2}| (R&W eq. 3.44)."""

    def K_times(self, v):
        """K v, class by class."""

    def R_times(self, v):
        """(K + W^{-1})^{-1} v."""

    def weights(self, v):
        """The Newton step's representer weights (R&W Alg. 3.3 lines 5-10)."""

    def preconditioner(self):
        """The preconditioner for later Newton steps by conjugate gradients."""

    def site_covariances(self):
        """The c x c posterior covariance of (f_1(x_i), ..., f_c(x_i)) for every i, (n, c, c)."""

    def kernel_gradient(self, outer, scale_R):
        """sum_k c_k (x_k y_k^T + y_k x_k^T)/2 + scale_R R in each class block (the gradient in K)."""

    def predict(self, a, K_cross, k_star, full_cov=False):
        """Latent predictive mean (c, m) and covariances (m, c, c), or the joint (c m, c m)
        class-major with ``full_cov`` (R&W Alg. 3.4 lines 2-8)."""


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


def _members(contract):
    """{name: declared member} of a Protocol and the Protocols it extends (data members as None)."""
    out = {}
    for klass in reversed(contract.__mro__):
        if klass is object or klass is Protocol or not getattr(klass, "_is_protocol", False):
            continue
        out.update({name: None for name in klass.__dict__.get("__annotations__", {})})
        out.update({name: v for name, v in klass.__dict__.items()
                    if not name.startswith("_") and (callable(v) or isinstance(v, property))})
    return out


def _accepts(declared, actual):
    """Why ``actual`` (a signature) cannot be called as ``declared`` is, or None: the declared
    required parameters by position, the declared optional ones by keyword, and no extra
    required parameter."""
    params = list(actual.parameters.values())
    var_pos = any(p.kind is p.VAR_POSITIONAL for p in params)
    var_kw = any(p.kind is p.VAR_KEYWORD for p in params)
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    by_name = {p.name: p for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    wanted = [p for p in declared.parameters.values() if p.name != "self"]
    required = [p for p in wanted if p.default is p.empty]
    if len(required) > len(positional) and not var_pos:
        return f"takes {len(positional)} positional arguments, the contract passes {len(required)}"
    keywords = [p.name for p in wanted if p.default is not p.empty]
    for want, got in zip(required, positional):
        if got.name in keywords:  # the keyword would then be passed twice
            return f"takes the contract's {want.name!r} as its {got.name!r}"
    for name in keywords:
        if name not in by_name and not var_kw:
            return f"does not accept the keyword {name!r}"
    extra = [p.name for p in positional[len(required):] if p.default is p.empty]
    extra += [p.name for p in params if p.kind is p.KEYWORD_ONLY and p.default is p.empty]
    if extra:
        return f"requires {extra}, which the contract does not pass"
    return None


_MISSING = object()


def conformance_gaps(obj, contract):
    """What ``obj`` (an instance) lacks to satisfy ``contract``: a list of messages, empty
    when it conforms. A method is compatible when it can be called as the contract declares
    it (``_accepts``); a data member or property must exist on the instance."""
    gaps = []
    for name, declared in _members(contract).items():
        # presence without evaluating: a property may rightly raise (a likelihood template's
        # ``params`` has no values), which hasattr would not tell from an absent member
        if inspect.getattr_static(obj, name, _MISSING) is _MISSING:
            gaps.append(f"{type(obj).__name__} has no {name!r}")
            continue
        if declared is None or isinstance(declared, property):
            continue
        actual = getattr(obj, name)
        if not callable(actual):
            gaps.append(f"{type(obj).__name__}.{name} is not callable")
            continue
        why = _accepts(inspect.signature(declared), inspect.signature(actual))
        if why:
            gaps.append(f"{type(obj).__name__}.{name} {why}")
    return gaps
