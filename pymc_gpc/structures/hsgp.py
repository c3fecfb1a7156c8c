r"""The basis-function (HSGP) prior: f = Phi beta, beta ~ N(0, diag(S)), in weight space.

Hilbert-space GP (Solin & Sarkka 2020; Riutort-Mayol et al. 2023), as ``pm.gp.HSGP``
builds it. On the box [-L, L]^d around the centred inputs, the Laplacian's eigenfunctions
phi_j and eigenvalues lambda_j give, for a stationary kernel with spectral density s,

.. math::

    k(x, x') \approx \sum_{j=1}^{M} s(\sqrt{\lambda_j})\, \phi_j(x) \phi_j(x'), \qquad
    \tilde K = \Phi \,\mathrm{diag}(S)\, \Phi^T, \quad S_j = s(\sqrt{\lambda_j}),

(Solin & Sarkka 2020, eq. 20; ``pm.gp.HSGP.prior_linearized`` returns Phi and sqrt S). The
periodic kernel has its own expansion (``periodic_basis``; Riutort-Mayol et al. 2023,
appendix B, ``pm.gp.HSGPPeriodic``). Phi depends on the inputs only, never on the
kernel's hyperparameters: they reach the evidence through S alone, so its gradient in S is
all a structure returns (``HSGPGradient``), and PyTensor carries it into the
hyperparameters through the graph of S (``spectral_variances``).

Weight space. With s = sqrt(S), V = diag(s) Phi^T (M x n) and z = beta / s ~ N(0, I_M),
this is the FITC algebra of ``structures.fitc`` without its diagonal Lambda: given sites
of precision w (EP's tau, Laplace's W), H = Phi^T diag(w) Phi and

.. math::

    A = I_M + V \mathrm{diag}(w) V^T = I + \mathrm{diag}(s) H \mathrm{diag}(s) = L_A L_A^T,

the posterior precision of z; the posterior covariance of beta is
diag(s) A^{-1} diag(s) = (diag(1/S) + H)^{-1}, written through A so that S_j may be tiny
(high frequencies; 1/S_j would overflow). By Woodbury,

* |B| = |I + W^{1/2} K~ W^{1/2}| = |A|;
* (I + W K~)^{-1} v = v - w (Phi s A^{-1} s Phi^T v) (EP's b, Newton's a), and
  K~ (I + W K~)^{-1} v = Phi s A^{-1} s Phi^T v (the posterior mean);
* Sigma = (K~^{-1} + W)^{-1} = Phi s A^{-1} s Phi^T, diag Sigma_ii = ||L_A^{-1} s Phi_i||^2;
* R = (K~ + W^{-1})^{-1} = W - W Phi s A^{-1} s Phi^T W.

Each evaluation costs two products over the n points (H, and L_A^{-1} s Phi^T for the
variances), 2 n M^2 flops with Phi held as an array (``DenseBasis``, any basis), an M^3/3
Cholesky, and O(n M) memory: no n x n matrix. The Laplacian bases have an operator
(``LaplacianBasis.at``, ``numerics.product_to_sum``) that forms H and the variances in
O(n P), P ~ 2^d M, without Phi.

Gradient. Given the gradient of an evidence in K~ as G = sum_k c_k (x_k y_k^T + y_k x_k^T)/2
+ r R (EP: (b b^T - R)/2; Laplace: its implicit term added, ``approximations.laplace``),

.. math::

    \frac{\partial \log Z}{\partial S_j} = \phi_j^T G \phi_j
    = \sum_k c_k (\Phi^T x_k)_j (\Phi^T y_k)_j + r\, Q_{jj}, \qquad
    Q = \Phi^T R \Phi = H - H s A^{-1} s H,

(K~ = sum_j S_j phi_j phi_j^T). Two forms of Q_jj: directly, H_jj - ||L_A^{-1} s H_j||^2,
whose subtraction loses about a factor S_j H_jj in relative accuracy; or, since
s Q s = (A - I) - (A - I) A^{-1} (A - I) = I - A^{-1}, Q_jj = (1 - (A^{-1})_jj) / S_j,
which loses about 1 / (1 - (A^{-1})_jj) <= (S_j H_jj + 1) / (S_j H_jj). The second is
used where S_j |H_jj| > 1, the first elsewhere (and wherever S_j = 0).
"""

from collections import namedtuple
import numbers

import numpy as np
import pymc as pm
import pytensor.tensor as pt
from pytensor.graph.basic import Constant
from pytensor.graph.traversal import graph_inputs
from scipy.linalg import blas, solve_triangular
from scipy.linalg.lapack import dpotri, dtrtri

from ..numerics.product_to_sum import CosineProductBasis
from .dense import NotPositiveDefiniteError, chol_lower
from .fitc import NonFiniteKernelError

HSGPGradient = namedtuple("HSGPGradient", ["S"])
HSGPGradient.__doc__ = """d log Z / dS of an evidence with the HSGP prior (module docstring).

What an approximation returns as ``dlog_z_dK`` when its ``K`` is an ``HSGPPrior``: the
derivatives in the basis functions' prior variances S (M,), which PyTensor's autodiff
carries into the kernel's hyperparameters through ``spectral_variances``.
"""

BOUNDARIES = ("dirichlet", "neumann", "dirichlet-neumann", "neumann-dirichlet")
# (first index j0, trigonometric function) of each boundary condition: lambda_j =
# (pi j / (2 L))^2 for j = j0, ..., j0 + m - 1, phi_j(x) = trig(sqrt(lambda_j) (x + L)) / sqrt(L)
# (``pymc.gp.hsgp_approx``'s table; the constant Neumann mode is 1 / sqrt(2 L))
# The floor of diag K~_i as the solvers read it (``HSGPPrior.diag``; EP's cavity floor divides
# by it): where every S_j with phi_j(x_i) != 0 underflows, K~_ii = 0. The floor bounds only;
# posterior variances, means and Phi diag(S) Phi^T itself are unchanged.
PRIOR_VARIANCE_FLOOR = 1e-12
_BOUNDARY_TABLE = {"dirichlet": (1.0, np.sin), "neumann": (0.0, np.cos),
                   "dirichlet-neumann": (0.5, np.sin), "neumann-dirichlet": (0.5, np.cos)}


class LaplacianBasis:
    r"""Laplacian eigenfunctions on the box [-L, L]^d around the training inputs' midpoint.

    The basis of ``pm.gp.HSGP`` (Solin & Sarkka 2020, eq. 16-17): with x centred at the
    training inputs' midpoint and L = c (max x - min x) / 2 per dimension (or L given),

    .. math::

        \phi_j(x) = \prod_{d} \frac{1}{\sqrt{L_d}} \sin\!\big(\omega_{jd} (x_d + L_d)\big), \qquad
        \omega_{jd} = \frac{\pi\, i_{jd}}{2 L_d},

    over the grid of indices i_jd = 1..m_d (Dirichlet; the other boundary conditions as
    ``pm.gp.HSGP``'s ``boundary``), in ``pm.gp.HSGP``'s order; ``drop_first`` drops the
    first basis function.

    Parameters
    ----------
    X : (n, D) training inputs (fix the centre and, with ``c``, L).
    m : sequence of int, the number of basis functions per active dimension.
    L, c : exactly one of them: the half-widths (one per active dimension), or the factor
        on the inputs' half-range (``c >= 1.2`` is recommended, as ``pm.gp.HSGP`` says).
    drop_first : drop the first basis function (``pm.gp.HSGP``'s ``drop_first``).
    boundary : one of ``BOUNDARIES`` or one per active dimension (default "dirichlet").
    active_dims : the columns of X the kernel reads (the kernel's ``active_dims``; all if None).

    Attributes
    ----------
    omega : (M, d) the square roots of the eigenvalues, the frequencies at which the
        kernel's spectral density is taken (``spectral_variances``).
    L, center : the box, as computed from the training inputs.

    Raises
    ------
    ValueError
        For a non-positive or non-integer m, both or neither of L and c, a non-positive L
        (e.g. a constant input column), or an unknown boundary condition.
    """

    def __init__(self, X, m, L=None, c=None, drop_first=False, boundary="dirichlet", active_dims=None):
        X = _checked_inputs(X)
        self.active_dims = list(range(X.shape[1])) if active_dims is None else list(np.atleast_1d(active_dims))
        d = len(self.active_dims)
        self.m = checked_m(m, d)
        self.boundary = checked_boundary(boundary, d)
        checked_box(L, c, d)
        self.center = (np.max(X, axis=0) + np.min(X, axis=0)) / 2.0
        Xs = (X - self.center)[:, self.active_dims]
        if L is None:
            L = np.asarray(c, float) * (np.max(Xs, axis=0) - np.min(Xs, axis=0)) / 2.0
        L = np.broadcast_to(np.asarray(L, dtype=float), (d,)).copy()
        if not np.all(np.isfinite(L)) or np.any(L <= 0.0):
            raise ValueError(f"the box half-widths L must be positive and finite, got {L} (a constant input column?)")
        self._set_box(L, drop_first)

    def _set_box(self, L, drop_first):
        """The frequencies of the box [-L, L]^d (``self.m``, ``self.boundary`` set)."""
        self.L = L
        self.drop_first = bool(drop_first)
        index = np.meshgrid(*[np.arange(_BOUNDARY_TABLE[b][0], _BOUNDARY_TABLE[b][0] + k)
                              for b, k in zip(self.boundary, self.m)])  # pm.gp.HSGP's order
        index = np.vstack([i.flatten() for i in index]).T
        self.index = index[int(self.drop_first):]
        self.omega = np.sqrt(np.square(np.pi * self.index / (2.0 * L)))  # pm.gp.HSGP's rounding
        self.M = self.omega.shape[0]

    def description(self):
        """The basis as a hashable tuple of numbers (what fixes it: m, L, the centre, drop_first,
        the boundary conditions, the active columns); ``from_description`` rebuilds it."""
        return (self.m, tuple(float(v) for v in self.L), tuple(float(v) for v in self.center), self.drop_first,
                self.boundary, tuple(int(k) for k in self.active_dims))

    @classmethod
    def from_description(cls, description):
        """The basis of ``description()``, without the training inputs."""
        m, L, center, drop_first, boundary, active_dims = description
        basis = cls.__new__(cls)
        basis.m, basis.boundary, basis.active_dims = tuple(m), tuple(boundary), list(active_dims)
        basis.center = np.asarray(center, dtype=float)
        basis._set_box(np.asarray(L, dtype=float), drop_first)
        return basis

    def _dimension_scale(self, k):
        """The eigenfunctions' normalisation along input dimension k, (M,): 1 / sqrt(L_k), and
        1 / sqrt(2 L_k) for the constant function of a boundary whose index starts at 0."""
        scale = np.full(self.M, 1.0 / np.sqrt(self.L[k]))
        if _BOUNDARY_TABLE[self.boundary[k]][0] == 0.0:
            scale[self.omega[:, k] == 0.0] = 1.0 / np.sqrt(2.0 * self.L[k])
        return scale

    def tensor(self, X):
        """Phi (n, M) at inputs X (an (n, D) tensor) as a PyTensor graph: ``__call__``'s formula."""
        Xs = (X - self.center)[:, self.active_dims]
        phi = pt.ones((X.shape[0], self.M))
        for k, b in enumerate(self.boundary):
            arg = self.omega[:, k][None, :] * (Xs[:, k][:, None] + self.L[k])
            trig = pt.sin if _BOUNDARY_TABLE[b][1] is np.sin else pt.cos
            phi = phi * self._dimension_scale(k) * trig(arg)
        return phi

    def _centred(self, X):
        return (_checked_inputs(X) - self.center)[:, self.active_dims]

    def at(self, X):
        """The basis at inputs X as an operator (``numerics.product_to_sum.CosineProductBasis``):
        Phi never formed, O(n sum_k m_k) memory, the posterior's products in O(n P)."""
        u = np.pi * (self._centred(X) + self.L) / (2.0 * self.L)
        amplitude = np.where(self.index == 0.0, 1.0 / np.sqrt(2.0 * self.L), 1.0 / np.sqrt(self.L))
        sine = [_BOUNDARY_TABLE[b][1] is np.sin for b in self.boundary]
        return CosineProductBasis(u, self.index, amplitude, sine)

    def __call__(self, X):
        """Phi (n, M), C-ordered: the basis functions at inputs X (the training box)."""
        Xs = self._centred(X)
        n = Xs.shape[0]
        phi = np.ones((n, self.M))
        for k, b in enumerate(self.boundary):
            trig = _BOUNDARY_TABLE[b][1]
            phi *= self._dimension_scale(k) * trig(self.omega[:, k] * (Xs[:, k][:, None] + self.L[k]))
        return phi

    def variances(self, cov_func):
        """S as a PyTensor graph: the kernel's spectral density at ``omega`` (``spectral_variances``)."""
        return spectral_variances(cov_func, self.omega)

    def kernel_variances(self, cov_func, scale=None):
        """S of ``cov_func`` (``variances``); ``scale`` belongs to the periodic expansion
        (``PeriodicBasis.kernel_variances``): ValueError if given."""
        if scale is not None:
            raise ValueError("scale is for a periodic kernel (pm.gp.HSGPPeriodic); scale a stationary kernel itself")
        return self.variances(cov_func)


def spectral_variances(cov_func, omega):
    r"""The prior variances S_j = s(omega_j) of the basis weights, as a PyTensor graph.

    s is the kernel's spectral density, ``cov_func.power_spectral_density`` (as
    ``pm.gp.HSGP`` takes it; Solin & Sarkka 2020, eq. 20); gradients in the kernel's
    hyperparameters follow from the graph. ``.eval()`` gives the numbers where the
    hyperparameters are numbers.

    Raises
    ------
    ValueError
        Naming the kernel, where it has no spectral density (a non-stationary kernel, a
        product of two kernels, the periodic kernel: ``periodic_basis``).
    """
    omega = np.asarray(omega, dtype=float)
    try:
        S = cov_func.power_spectral_density(pt.as_tensor_variable(omega))
    except (AttributeError, NotImplementedError, TypeError) as err:
        raise ValueError(
            f"the kernel {type(cov_func).__name__} has no power_spectral_density, which approx='HSGP' needs "
            "(stationary kernels: ExpQuad, Matern52, Matern32, Matern12/Exponential, RatQuad, and their sums and "
            "scalings; pm.gp.cov.Periodic itself, with scale= for its amplitude, through the periodic expansion "
            "as pm.gp.HSGPPeriodic)") from err
    return pt.flatten(S)


class PeriodicBasis:
    r"""The cosine-sine expansion of the periodic kernel (Riutort-Mayol et al. 2023, app. B).

    ``pm.gp.cov.Periodic`` with period T and lengthscale ell is
    k(tau) = exp(-sin^2(pi tau / T) / (2 ell^2)) = exp(a (cos(omega_0 tau) - 1)), with
    omega_0 = 2 pi / T and a = 1 / (4 ell^2); the generating function of the modified Bessel
    functions, e^{a cos t} = I_0(a) + 2 sum_{j>=1} I_j(a) cos(j t), gives

    .. math::

        k(\tau) = \sum_{j=0}^{\infty} \tilde q_j^2 \cos(j \omega_0 \tau), \qquad
        \tilde q_0^2 = \frac{I_0(a)}{e^{a}},\ \tilde q_j^2 = \frac{2 I_j(a)}{e^{a}},

    and, with cos(j w0 (x - x')) = cos cos + sin sin, the basis is
    [cos(j omega_0 x)]_{j<m} and [sin(j omega_0 x)]_{1<=j<m} (``pm.gp.HSGPPeriodic``'s
    ``phi_cos`` and ``phi_sin[:, 1:]``), 2m - 1 functions, with variances
    scale^2 (q~_0^2..q~_{m-1}^2, q~_1^2..q~_{m-1}^2).

    Two differences from ``pm.gp.HSGPPeriodic``, whose prior is not its kernel's: its
    ``Periodic.power_spectral_density_approx`` takes a = 1 / ell^2 (the kernel
    exp(-2 sin^2 / ell^2) of the usual convention, where ``Periodic`` has 1/2 in the
    exponent), and it multiplies the weights by scale q~_j^2 as if that were a standard
    deviation (prior variance scale^2 sum_j q~_j^4). Here Phi diag(S) Phi^T converges to
    scale^2 times ``Periodic``'s own matrix (tested).

    The basis depends on the period, which must therefore be a number: the gradient of
    the evidence is taken in S only (the lengthscale and the scale).

    Parameters
    ----------
    X : (n, 1) or (n, D) inputs (centred at their midpoint as ``pm.gp.HSGPPeriodic`` does).
    m : int, the number of cosine terms.
    cov_func : a ``pm.gp.cov.Periodic`` on one input dimension, with a constant period.
    """

    def __init__(self, X, m, cov_func):
        X = _checked_inputs(X)
        if not isinstance(m, numbers.Integral) or m <= 0:
            raise ValueError(f"m must be a positive integer, got {m!r}")
        check_periodic_kernel(cov_func)
        self.cov_func, self.m, self.M = cov_func, int(m), 2 * int(m) - 1
        self.period = constant_value(cov_func.period, "the period of the periodic kernel")
        if not (np.isfinite(self.period) and self.period > 0.0):
            raise ValueError(f"the period of the periodic kernel must be positive and finite, got {self.period}")
        self.center = (np.max(X, axis=0) + np.min(X, axis=0)) / 2.0
        self.active_dims = list(np.atleast_1d(cov_func.active_dims))

    def description(self):
        """The basis as a hashable tuple ("periodic", m, the period, the centre, the active
        column); ``from_description`` rebuilds it."""
        return ("periodic", self.m, self.period, tuple(float(v) for v in self.center),
                tuple(int(k) for k in self.active_dims))

    @classmethod
    def from_description(cls, description):
        """The basis of ``description()``, without the training inputs or the kernel."""
        _, m, period, center, active_dims = description
        basis = cls.__new__(cls)
        basis.cov_func, basis.m, basis.M, basis.period = None, int(m), 2 * int(m) - 1, float(period)
        basis.center, basis.active_dims = np.asarray(center, dtype=float), list(active_dims)
        return basis

    def _arguments(self, x):
        """j omega_0 x for j < m, (n, m), x the centred active column (an array or a tensor)."""
        return (2.0 * np.pi / self.period) * x @ np.arange(self.m)[None, :].astype(float)

    def __call__(self, X):
        """Phi (n, 2m - 1), C-ordered: [cos(j w0 x)]_{j<m}, [sin(j w0 x)]_{1<=j<m}."""
        arg = self._arguments((_checked_inputs(X) - self.center)[:, self.active_dims])
        return np.ascontiguousarray(np.hstack([np.cos(arg), np.sin(arg[:, 1:])]))

    def tensor(self, X):
        """Phi (n, 2m - 1) at inputs X (an (n, D) tensor) as a PyTensor graph: ``__call__``'s formula."""
        arg = self._arguments((X - self.center)[:, self.active_dims])
        return pt.concatenate([pt.cos(arg), pt.sin(arg[:, 1:])], axis=1)

    def at(self, X):
        """The basis at inputs X as an operator (``DenseBasis``: Phi held, O(n m) memory)."""
        return DenseBasis(self(X))

    def variances(self, scale=1.0, cov_func=None):
        """S as a PyTensor graph: scale^2 [q~^2, q~^2[1:]] (class docstring), for the lengthscale
        of ``cov_func`` (default: the kernel the basis was built from)."""
        cov_func = self.cov_func if cov_func is None else cov_func
        a = 0.25 / pt.square(cov_func.ls)
        j = np.arange(self.m)
        q2 = np.where(j > 0, 2.0, 1.0) * pt.ive(j, pt.flatten(a)[0])  # I_j(a) e^{-a}
        return pt.square(scale) * pt.concatenate([q2, q2[1:]])

    def kernel_variances(self, cov_func, scale=None):
        """S of ``cov_func``, a ``pm.gp.cov.Periodic`` of this basis's period, times scale^2
        (``pm.gp.HSGPPeriodic``'s ``scale``, default 1; a number or a PyTensor variable).

        Raises
        ------
        ValueError
            For another kernel, or a periodic kernel of another period (the basis depends on it).
        """
        check_periodic_kernel(cov_func)
        period = constant_value(cov_func.period, "the period of the periodic kernel")
        if not np.isclose(period, self.period, rtol=1e-12, atol=0.0):
            raise ValueError(f"the periodic basis has period {self.period}; the kernel has {period}")
        return self.variances(1.0 if scale is None else scale, cov_func)


def check_periodic_kernel(cov_func):
    """ValueError unless ``cov_func`` is a ``pm.gp.cov.Periodic`` on one input dimension (what the
    periodic expansion, ``PeriodicBasis``, takes; as ``pm.gp.HSGPPeriodic``)."""
    if not isinstance(cov_func, pm.gp.cov.Periodic):
        raise ValueError(f"the periodic expansion needs pm.gp.cov.Periodic, got {type(cov_func).__name__}")
    if cov_func.n_dims != 1:
        raise ValueError("the periodic expansion is for a kernel on one input dimension")


def basis_from_description(description):
    """The ``LaplacianBasis`` or ``PeriodicBasis`` of a basis's ``description()``."""
    if description[0] == "periodic":
        return PeriodicBasis.from_description(description)
    return LaplacianBasis.from_description(description)


def constant_value(value, what):
    """``value`` as a float if it is a number or a graph of constants only, else ValueError."""
    if isinstance(value, numbers.Real | np.ndarray):
        return float(value)
    var = pt.as_tensor_variable(value)
    if not all(isinstance(v, Constant) for v in graph_inputs([var])):
        raise ValueError(f"{what} must be a number here (the basis depends on it), got a variable")
    return float(var.eval())


def _checked_inputs(X):
    X = np.asarray(X, dtype=float)
    if X.ndim == 1:
        X = X[:, None]
    if X.ndim != 2 or X.shape[0] == 0:
        raise ValueError(f"X must be a non-empty (n, D) array, got shape {X.shape}")
    if not np.all(np.isfinite(X)):
        raise ValueError("X contains NaN or inf")
    return X


def checked_m(m, d):
    """m as a tuple of d positive ints (an int is repeated), else ValueError."""
    if isinstance(m, numbers.Integral):
        m = (m,) * d
    m = tuple(m)
    if len(m) != d or not all(isinstance(k, numbers.Integral) and k > 0 for k in m):
        raise ValueError(f"m must give one positive integer per active dimension ({d}), got {m!r}")
    return tuple(int(k) for k in m)


def _positive_per_dimension(value, d, what):
    """``value`` as d positive finite floats (a number is repeated), else ValueError naming ``what``."""
    try:
        v = np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        v = None
    if v is None or v.ndim > 1 or v.size not in (1, d) or not np.all(np.isfinite(v)) or not np.all(v > 0.0):
        raise ValueError(f"{what} must be positive and finite (a number or one per active dimension, {d}), got {value!r}")
    return np.broadcast_to(v.reshape(-1), (d,)).copy()


def checked_box(L, c, d):
    """ValueError unless exactly one of L (the box's half-widths) and c (a factor on the inputs'
    half-range) is given, as a positive finite number or one per active dimension (d)."""
    if (L is None) == (c is None):
        raise ValueError("give exactly one of L (the box's half-widths) and c (a factor on the inputs' half-range)")
    if L is None:
        _positive_per_dimension(c, d, "c")
    else:
        _positive_per_dimension(L, d, "L")


def checked_boundary(boundary, d):
    b = (boundary,) * d if isinstance(boundary, str) else tuple(boundary)
    if len(b) != d or any(x not in _BOUNDARY_TABLE for x in b):
        raise ValueError(f"boundary must be one of {BOUNDARIES} or one per active dimension ({d}), got {boundary!r}")
    return b


def row_blocks(n, M):
    """Slices of about 8 MB of rows of an n x M array (the n M^2 products run over them)."""
    step = max(256, (1 << 20) // max(M, 1))
    return [slice(i, min(i + step, n)) for i in range(0, n, step)]


class DenseBasis:
    """A basis matrix Phi (n, M) held as an array: the products of ``HSGPPosterior`` by BLAS,
    O(n M^2) for the Gram matrix and the quadratic forms (any basis; ``CosineProductBasis``
    answers the same questions in O(n P) for the Laplacian bases)."""

    def __init__(self, Phi):
        Phi = np.ascontiguousarray(Phi, dtype=float)
        if Phi.ndim != 2:
            raise ValueError(f"Phi must be an (n, M) array, got shape {Phi.shape}")
        if not np.all(np.isfinite(Phi)):
            raise ValueError("Phi contains NaN or inf")
        self.Phi = Phi
        self.n, self.M = Phi.shape

    def rmatvec(self, v):
        """Phi^T v."""
        return self.Phi.T @ v

    def matvec(self, z):
        """Phi z."""
        return self.Phi @ z

    def sq_diag(self, S):
        """sum_j S_j Phi_ij^2 for every i."""
        return np.einsum("ij,ij,j->i", self.Phi, self.Phi, S)

    def gram(self, w):
        """H = Phi^T diag(w) Phi (M x M, symmetric), over row blocks (dsyrk where w >= 0)."""
        M = self.M
        H = np.zeros((M, M), order="F")
        nonneg = np.min(w, initial=0.0) >= 0.0
        for rows in row_blocks(self.n, M):
            P = self.Phi[rows]
            if nonneg:
                B = P * np.sqrt(w[rows])[:, None]  # (rows, M) C-ordered: B.T is Fortran
                H = blas.dsyrk(1.0, B.T, beta=1.0, c=H, trans=0, lower=1, overwrite_c=1)
            else:
                H += np.tril(P.T @ (P * w[rows][:, None]))
        return H + np.tril(H, -1).T

    def quad_diag(self, L_A, s):
        """||L_A^{-1} s Phi_i||^2 = diag(Phi s A^{-1} s Phi^T)_i for every i (one triangular
        product over row blocks)."""
        out = np.empty(self.n)
        for rows in row_blocks(self.n, self.M):
            B = self.Phi[rows] * s  # (rows, M) C-ordered: B.T is Fortran (M, rows)
            C = blas.dtrsm(1.0, L_A, B.T, side=0, lower=1, overwrite_b=1)
            out[rows] = np.einsum("ij,ij->j", C, C)
        return out

    def dense(self):
        return self.Phi


def as_basis(Phi):
    """A basis operator (``DenseBasis``, ``CosineProductBasis``) for Phi, or Phi itself if it is one."""
    return Phi if hasattr(Phi, "quad_diag") else DenseBasis(Phi)


class HSGPPrior:
    r"""The prior covariance K~ = Phi diag(S) Phi^T (module docstring), never formed.

    Parameters
    ----------
    Phi : (n, M) basis functions at the training inputs (``LaplacianBasis.__call__``,
        ``PeriodicBasis.__call__``), or a basis operator (``LaplacianBasis.at``: the
        Laplacian basis through ``numerics.product_to_sum``, O(n P) per evaluation).
    S : (M,) non-negative prior variances of the weights (``spectral_variances``' values).

    Examples
    --------
    >>> import numpy as np, pymc as pm, pymc_gpc
    >>> from pymc_gpc.structures.hsgp import HSGPPrior, LaplacianBasis
    >>> X = np.linspace(-2, 2, 200)[:, None]
    >>> basis = LaplacianBasis(X, m=[30], c=1.5)
    >>> S = basis.variances(pm.gp.cov.ExpQuad(1, ls=0.7)).eval()
    >>> res = pymc_gpc.ep(HSGPPrior(basis.at(X), S), np.sign(X[:, 0] + 0.1), pymc_gpc.likelihoods.Probit())
    >>> res.dlog_z_dK.S.shape
    (30,)
    """

    sequential = False  # no rank-one sequential EP sweeps (they need the dense Sigma)

    def __init__(self, Phi, S):
        self.basis = as_basis(Phi)
        S = np.asarray(S, dtype=float).reshape(-1)
        if S.shape != (self.basis.M,):
            raise ValueError(f"HSGP shapes do not match: Phi {(self.basis.n, self.basis.M)}, S {S.shape}")
        if not np.all(np.isfinite(S)):
            raise NonFiniteKernelError("S (the spectral density at the basis frequencies) contains NaN or inf")
        if S.size and np.min(S) < 0.0:
            raise ValueError(f"S (the spectral density at the basis frequencies) has a negative entry ({np.min(S):.3g})")
        self.S, self.s = S, np.sqrt(S)
        self.n, self.M = self.basis.n, self.basis.M
        self._diag = np.maximum(self.basis.sq_diag(S), PRIOR_VARIANCE_FLOOR)

    def diag(self):
        """diag K~ (the prior variances), floored at ``PRIOR_VARIANCE_FLOOR``."""
        return self._diag

    def matvec(self, v):
        r""":math:`\tilde K v = \Phi (S \circ \Phi^T v)`."""
        return self.basis.matvec(self.S * self.basis.rmatvec(v))

    def posterior(self, w, rough=False):
        """q(f) at site precisions w (``HSGPPosterior``; always exact, ``rough`` is ignored)."""
        return HSGPPosterior(self, w)


class HSGPPosterior:
    r"""q(f) for the HSGP prior at site precisions w, through A = I + s H s = L_A L_A^T.

    The members of ``structures.base.LatentPosterior``, answered in weight space (module
    docstring): O(n M^2) to build (H and the marginal variances), O(n M) per solve.
    Raises ``NotPositiveDefiniteError`` where K~^{-1} + W is not positive definite (A has
    no Cholesky factor; only with negative site precisions).
    """

    rough = False

    def __init__(self, prior, w):
        self.prior = prior
        self.w = np.asarray(w, dtype=float)
        self.H = prior.basis.gram(self.w)
        s = prior.s
        A = s[:, None] * self.H * s[None, :]
        A[np.diag_indices_from(A)] += 1.0
        self.L_A = chol_lower(A, overwrite=True)
        self._var = self._Linv = self._A_inv = None

    def _A_solve(self, u):
        z = solve_triangular(self.L_A, u, lower=True, check_finite=False)
        return solve_triangular(self.L_A, z, lower=True, trans=1, check_finite=False)

    def _sigma_beta_times(self, u):
        """diag(s) A^{-1} diag(s) u: the posterior covariance of beta times u."""
        s = self.prior.s
        return s * self._A_solve(s * u)

    def half_logdet_B(self):
        """(1/2) log|I + W^{1/2} K~ W^{1/2}| = (1/2) log|A| = sum log diag L_A."""
        return float(np.sum(np.log(np.diag(self.L_A))))

    def mean_and_weights(self, v):
        """(K~ b, b) for b = (I + W K~)^{-1} v: K~ b = Phi s A^{-1} s Phi^T v, b = v - w K~ b."""
        basis = self.prior.basis
        v = np.asarray(v, dtype=float)
        mean = basis.matvec(self._sigma_beta_times(basis.rmatvec(v)))
        return mean, v - self.w * mean

    def weights(self, v):
        """(I + W K~)^{-1} v (EP's b from nu~, Newton's next a)."""
        return self.mean_and_weights(v)[1]

    def sigma_times(self, v):
        """(K~^{-1} + W)^{-1} v = Phi s A^{-1} s Phi^T v."""
        return self.mean_and_weights(v)[0]

    def R_times(self, v):
        """(K~ + W^{-1})^{-1} v = w v - w Phi s A^{-1} s Phi^T (w v)."""
        wv = self.w * np.asarray(v, dtype=float)
        return wv - self.w * self.sigma_times(wv)

    def var_diag(self):
        """diag Sigma_ii = ||L_A^{-1} s Phi_i||^2, floored at a tiny positive value: by the
        triangular product over the rows (``DenseBasis.quad_diag``), or for a basis with
        ``quad_diag_matrix`` (``CosineProductBasis``) as the quadratic forms of
        s A^{-1} s, with A^{-1} kept for the gradient (``R_projected_diag``)."""
        if self._var is None:
            prior = self.prior
            if hasattr(prior.basis, "quad_diag_matrix"):
                s = prior.s
                var = prior.basis.quad_diag_matrix(s[:, None] * self._A_inverse() * s[None, :])
            else:
                var = prior.basis.quad_diag(self.L_A, prior.s)
            self._var = np.maximum(var, 1e-14 * prior.diag())
        return self._var

    def _A_inverse(self):
        """A^{-1} (M, M), symmetric, from L_A by LAPACK's ``dpotri`` (M^3 / 3 + M^3 / 3 flops)."""
        if self._A_inv is None:
            A_inv, info = dpotri(self.L_A, lower=1)
            if info != 0:
                raise NotPositiveDefiniteError(f"the HSGP posterior's A is singular (dpotri info {info})")
            self._A_inv = np.tril(A_inv) + np.tril(A_inv, -1).T
        return self._A_inv

    def _A_inverse_diag(self, columns):
        """(A^{-1})_jj for the selected j: from the A^{-1} the variances formed where there is one,
        else the column norms of L_A^{-1} (``dtrtri``, M^3 / 3 flops)."""
        if self._A_inv is not None:
            return np.diag(self._A_inv)[columns]
        if self._Linv is None:
            Linv, info = dtrtri(self.L_A, lower=1)
            if info != 0:
                raise NotPositiveDefiniteError(f"L_A is singular (dtrtri info {info})")
            self._Linv = Linv
        Linv = self._Linv[:, columns]
        return np.einsum("ij,ij->j", Linv, Linv)

    def R_projected_diag(self):
        """Q_jj = (Phi^T R Phi)_jj, each by the more accurate of its two forms (module docstring)."""
        s, S, H = self.prior.s, self.prior.S, self.H
        h = np.diag(H)
        by_identity = S * np.abs(h) > 1.0
        Q = np.empty(self.prior.M)
        if np.any(~by_identity):
            C = solve_triangular(self.L_A, s[:, None] * H[:, ~by_identity], lower=True, check_finite=False)
            Q[~by_identity] = h[~by_identity] - np.einsum("ij,ij->j", C, C)
        if np.any(by_identity):
            Q[by_identity] = (1.0 - self._A_inverse_diag(by_identity)) / S[by_identity]
        return Q

    def kernel_gradient(self, outer, scale_R, rough=False):
        r"""d/dS of an evidence whose gradient in K~ is
        G = sum_k c_k (x_k y_k^T + y_k x_k^T)/2 + scale_R R: diag(Phi^T G Phi) (module docstring).

        outer : sequence of (x, y, c).
        """
        basis = self.prior.basis
        dS = scale_R * self.R_projected_diag() if scale_R != 0.0 else np.zeros(self.prior.M)
        for x, y, c in outer:
            px = basis.rmatvec(x)
            py = px if y is x else basis.rmatvec(y)
            dS += c * px * py
        return HSGPGradient(dS)

    def ep_gradient(self, b, rough=False):
        """d log Z_EP / dS from d log Z_EP / dK~ = (b b^T - R) / 2."""
        return self.kernel_gradient([(b, b, 0.5)], -0.5)

    def predict(self, a, Phi_star, k_diag_star=None):
        """Latent predictive mean and variance at new inputs, O(n_* M) memory.

        f_* = Phi_* beta: mean Phi_* (S Phi^T a) (K_*f a); variance ||L_A^{-1} s Phi_*i||^2
        (Cov(beta | y) = s A^{-1} s), floored as the training marginals are (``var_diag``: 1e-14
        times the prior variance, itself at least ``PRIOR_VARIANCE_FLOOR``), so that a likelihood's
        predictive never meets a zero variance (all S = 0). ``k_diag_star`` is not needed (the
        basis defines the prior).

        Phi_star : (n_*, M) the basis at the new inputs, or its operator (``LaplacianBasis.at``).
        """
        prior, star = self.prior, as_basis(Phi_star)
        mean = star.matvec(prior.S * prior.basis.rmatvec(np.asarray(a, dtype=float)))
        floor = 1e-14 * np.maximum(star.sq_diag(prior.S), PRIOR_VARIANCE_FLOOR)
        if hasattr(star, "quad_diag_matrix"):  # the A^{-1} of the training variances, if formed
            var = star.quad_diag_matrix(prior.s[:, None] * self._A_inverse() * prior.s[None, :])
        else:
            var = star.quad_diag(self.L_A, prior.s)
        return mean, np.maximum(var, floor)


class HSGPStructure:
    r"""What an evidence Op asks of the HSGP prior structure of one latent GP.

    The Op's one kernel input is S, the graph of the kernel's spectral density at the
    basis frequencies (``kernel_inputs``), so PyTensor's autodiff carries the cotangent
    d log Z / dS (``kernel_cotangents``) into every hyperparameter. The basis is data: fixed
    by the training inputs when ``kernel_inputs`` is called (as ``pm.gp.HSGP`` fixes its box
    at the first ``prior_linearized``), held here, and used by ``prior_from``. EP runs
    parallel sweeps only (no dense Sigma): its retries are FITC's, damped 0.5 then 0.25.
    EM-EP has no bound for this structure yet (its M-step takes a dense or FITC covariance).

    Parameters
    ----------
    m, L, c, drop_first, boundary : as ``pm.gp.HSGP`` (``LaplacianBasis``); for a
        ``pm.gp.cov.Periodic`` kernel, m is an int (``pm.gp.HSGPPeriodic``'s m) and L, c,
        drop_first and boundary are not used.
    scale : the periodic expansion's standard deviation (``pm.gp.HSGPPeriodic``'s ``scale``;
        a number or a PyTensor variable); only with a periodic kernel.

    Raises
    ------
    ValueError
        At construction, for both or neither of L and c (non-periodic use is checked when
        the basis is built, where the kernel's kind is known); at ``kernel_inputs``, for a
        kernel without a spectral density, a bad m, or a box of zero width.
    """

    name = "hsgp"
    n_kernel_inputs = 1

    def __init__(self, m, L=None, c=None, drop_first=False, boundary="dirichlet", scale=None):
        if L is not None and c is not None:
            raise ValueError("give at most one of L (the box's half-widths) and c (a factor on the inputs' half-range)")
        self.m, self.L, self.c, self.drop_first, self.boundary, self.scale = m, L, c, drop_first, boundary, scale
        self.basis = self.operator = None

    def kernel_inputs(self, cov_func, X):
        """[S]: the basis fixed at the training inputs X (numbers, or a tensor that is evaluated
        once, as ``pm.gp.HSGP`` does), and S's graph in ``cov_func``'s hyperparameters."""
        if hasattr(X, "eval") and not isinstance(X, np.ndarray):
            X = X.eval()
        X = _checked_inputs(X)
        if isinstance(cov_func, pm.gp.cov.Periodic):
            self.basis = PeriodicBasis(X, self.m, cov_func)
            self.operator = DenseBasis(self.basis(X))
            return [self.basis.variances(1.0 if self.scale is None else self.scale)]
        if self.scale is not None:
            raise ValueError("scale is for a periodic kernel (pm.gp.HSGPPeriodic); scale a stationary kernel itself")
        self.basis = LaplacianBasis(X, self.m, L=self.L, c=self.c, drop_first=self.drop_first,
                                    boundary=self.boundary, active_dims=cov_func.active_dims)
        S = self.basis.variances(cov_func)
        self.operator = self.basis.at(X)
        return [S]

    def _bound(self):
        if self.operator is None:
            raise RuntimeError("the HSGP basis is fixed by kernel_inputs(cov_func, X) first")
        return self.operator

    def prior_from(self, S, rough=False):
        """The solvers' prior from the kernel input's value: ``HSGPPrior`` on the held basis."""
        return HSGPPrior(self._bound(), S)

    @staticmethod
    def kernel_cotangents(result):
        """(d log Z / dS,) from a solver result on an ``HSGPPrior``."""
        return (np.asarray(result.dlog_z_dK.S),)

    def cross_covariances(self, Xnew):
        """What ``HSGPPosterior.predict`` takes at new inputs: the basis there (an operator)."""
        self._bound()
        Xnew = Xnew.eval() if hasattr(Xnew, "eval") and not isinstance(Xnew, np.ndarray) else Xnew
        if isinstance(self.basis, LaplacianBasis):
            return self.basis.at(Xnew)
        return DenseBasis(self.basis(Xnew))
