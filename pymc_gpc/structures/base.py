r"""The contracts of the prior structures: ``typing.Protocol`` classes of the members the
approximations, the Ops, the GP classes and ``pymc_gpc.fit`` call (read from their call
sites; an implementing class may have more).

``SolverPrior`` (binary: ``BinarySolverPrior``)
    the prior covariance as the solvers take it (``dense.DensePrior``, ``fitc.FITCPrior``,
    ``multiclass_fitc.MulticlassFITCPrior``).
``LatentPosterior`` (``DenseLatentPosterior``, ``FITCLatentPosterior``) and ``MulticlassPosterior``
    the Gaussian q(f) a solver builds at given site precisions (binary:
    ``dense.LatentPosterior``, ``dense.IndefiniteSitePosterior``, ``fitc.FITCPosterior``;
    several classes: ``multiclass.CoupledBlockPosterior``,
    ``multiclass_fitc.MulticlassFITCPosterior``).
``PriorStructure``
    the PyMC side of a structure, as the GP classes, the Ops and ``pymc_gpc.fit`` ask it
    (``select.DenseBinary`` and its kin, chosen by ``select.select_structure``).

``contracts.conformance_gaps(obj, contract)`` lists what an object lacks, member by member
and signature by signature.
Notation: Rasmussen & Williams 2006 (R&W): K the prior covariance, W = diag(w) the site
precisions, B = I + W^{1/2} K W^{1/2}, R = (K + W^{-1})^{-1}, Sigma = (K^{-1} + W)^{-1}.
"""

from typing import Protocol, runtime_checkable

__all__ = ["SolverPrior", "BinarySolverPrior", "LatentPosterior", "DenseLatentPosterior", "FITCLatentPosterior",
           "MulticlassPosterior", "PriorStructure"]


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
class PriorStructure(Protocol):
    """What a GP classifier and ``pymc_gpc.fit`` ask of a prior structure.

    ``gp`` below is the classifier (``gp.MarginalEP`` and its kin): it offers
    ``cov_func``, ``jitter``, the inducing inputs ``Xu`` (FITC) and, for several classes,
    ``class_kernels(X)`` (the (c, n, n) stack, ``gp.marginal``). Arrays are NumPy float64;
    tensors are PyTensor variables.

    Attributes
    ----------
    name : a short name for messages and the approximation registry ("dense", "fitc",
        "dense-multiclass", "fitc-multiclass", "hsgp", "hsgp-multiclass"); it identifies the structure (equality,
        hash, ``repr`` and pickling go by it, so an Op holding it in ``__props__`` has
        the same cache key in every process).
    multiclass : whether the likelihood has one latent GP per class
        (``likelihoods.multiclass.MulticlassLikelihood``).
    dense_kernel : whether each latent GP's prior is a dense n x n kernel, O(n^3) per
        evaluation (``sampling.warn_dense_size``).
    n_kernel_inputs : how many tensors ``kernel_inputs`` returns (the Ops' first inputs).
    kernel_names, kernel_ndims : their names (for messages) and numbers of dimensions; the
        evidence Op's gradient outputs have the same ranks.
    point_input : the kernel input whose value, with theta, y and the hyperparameters,
        identifies an evaluation (the evidence Op's recent results): K, or K_uf for FITC; or a
        tuple of inputs, whose values together do (HSGP: S, and X, at which the basis is taken).
    compiled_ep_loop : whether binary EP's compiled dense loop (``approximations.ep.ep_warm``,
        ``backends.numba.compiled_ep``) solves this structure.
    predictive_takes_theta : whether the predictive Op takes theta after the kernel inputs
        (the multi-class likelihoods have no parameters).
    trusted_prediction : whether the predictive's solve skips the dense kernel's checks
        (``validation.trusted_kernel``): the FITC prior checks its own inputs.
    """

    name: str
    multiclass: bool
    dense_kernel: bool
    n_kernel_inputs: int
    kernel_names: tuple
    kernel_ndims: tuple
    point_input: object
    compiled_ep_loop: bool
    predictive_takes_theta: bool
    trusted_prediction: bool

    def prior_options(self, cov_func, m=None, L=None, c=None, drop_first=False, scale=None, boundary=None):
        """The options of this prior given to the GP's constructor (HSGP's m, L, c, drop_first,
        boundary as ``pm.gp.HSGP``'s; scale as ``pm.gp.HSGPPeriodic``'s), checked against ``cov_func`` before any heavy work: what the GP
        keeps as ``gp.prior_options`` (None for a structure without options). ValueError for
        options this structure does not take, or bad ones."""

    def for_training_inputs(self, gp, X):
        """The structure of ``gp`` with training inputs X (an (n, d) array): itself, or for a
        prior fixed by X (HSGP's basis box) a structure holding that as data."""

    def check_inducing(self, Xu, X, n_classes=None):
        """``Xu`` (inducing inputs given to ``marginal_likelihood``, or None) checked against
        the training inputs X (an (n, d) array) and, for several classes, their number:
        what the GP keeps as ``gp.Xu``. ValueError where this structure takes no inducing
        inputs and some were given, or needs them and they are missing or do not fit X."""

    def kernel_inputs(self, gp, X):
        """The evidence Op's kernel tensors at the training inputs X (a tensor): dense
        [K(X, X) + jitter I]; FITC [K_uu + jitter I, K_uf, diag K_ff + jitter];
        HSGP [S, X]; several classes their (c, ...) stacks."""

    def cross_covariances(self, gp, X, Xnew):
        """The prior cross-covariances the predictive takes: dense K(X, X*) (n, m); FITC
        K(Xu, X*) (m_u, m); several classes the (c, n, m) stack."""

    def prior_from(self, *arrays, rough=False):
        """What the solvers take as the prior, from the values of the ``n_kernel_inputs``
        kernel inputs: the matrix K itself, or a structure object (``FITCPrior``). ``rough``:
        for a solve at the sampler's tolerances, where a structure may form its prior's
        products in single precision (FITC's V; the others ignore it)."""

    def prior_function(self, fn):
        """``fn`` (a compiled function whose outputs start with the ``n_kernel_inputs`` kernel
        inputs) as a function whose outputs start with ``prior_from`` of them instead: ``fn``
        itself where the kernel input is the prior (dense), else a wrapper (FITC)."""

    def kernel_cotangents(self, result):
        """The solver result's gradient of log q in each kernel input, as a tuple of
        ``n_kernel_inputs`` arrays (shaped as the inputs)."""

    def not_converged_message(self, approximation, point, kernels, result, retries):
        """The evidence Op's ``ApproximationFailedWarning`` after the retries, naming the point."""

    def training_shapes(self, kernels, cross):
        """name -> shape of the predictive inputs whose dimensions must all be the number of
        training labels (``ops.predictive.check_training_sizes``)."""

    def latent_predictive(self, result, cross, star, full_cov):
        """(mean, variance or covariance) of f* from a solve ``result``, the
        cross-covariances and the prior (co)variances at the new inputs."""

    def predictive_types(self, full_cov):
        """The predictive Op's output types (mean, variance or covariance)."""

    def failed_prediction(self, cross, full_cov):
        """The predictive's NaN outputs where the solve failed, shaped as ``latent_predictive``'s."""

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
