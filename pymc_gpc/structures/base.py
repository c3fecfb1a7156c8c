r"""The contracts of the prior structures as the solvers see them: ``typing.Protocol`` classes
of the members the approximations, the Ops and ``pymc_gpc.fit`` call (read from their call
sites; an implementing class may have more).

``SolverPrior`` (binary: ``BinarySolverPrior``)
    the prior covariance as the solvers take it (``dense.DensePrior``, ``fitc.FITCPrior``,
    ``multiclass_fitc.MulticlassFITCPrior``).
``LatentPosterior`` (``DenseLatentPosterior``, ``FITCLatentPosterior``) and ``MulticlassPosterior``
    the Gaussian q(f) a solver builds at given site precisions (binary:
    ``dense.LatentPosterior``, ``dense.IndefiniteSitePosterior``, ``fitc.FITCPosterior``;
    several classes: ``multiclass.CoupledBlockPosterior``,
    ``multiclass_fitc.MulticlassFITCPosterior``).

The PyMC side of a structure is ``select.PriorStructure``. ``contracts.conformance_gaps(obj,
contract)`` lists what an object lacks, member by member and signature by signature.
Notation: Rasmussen & Williams 2006 (R&W): K the prior covariance, W = diag(w) the site
precisions, B = I + W^{1/2} K W^{1/2}, R = (K + W^{-1})^{-1}, Sigma = (K^{-1} + W)^{-1}.
"""

from typing import Protocol, runtime_checkable

__all__ = ["SolverPrior", "BinarySolverPrior", "LatentPosterior", "DenseLatentPosterior", "FITCLatentPosterior",
           "MulticlassPosterior"]


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
