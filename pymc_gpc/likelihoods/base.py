r"""The contract every likelihood answers, the registry of likelihood kinds, and the
compiled dispatch generated from it.

A likelihood class declares its compiled site kernels (``SiteKernels``); defining the class
registers them (``Likelihood.__init_subclass__``) and gives the class its ``kind``, the
integer the compiled loops (sequential and parallel EP, ADF, ``backends.numba.compiled_ep``)
and the JAX backend (``backends.jax.likelihoods``) take. The dispatch those loops call
(``tilted_site``, ``log_lik_site``, ``params_valid``, ``labels_valid``,
``tilted_dparams_sum``) is generated from the registry when numba first compiles a caller
(``_dispatch_source``): an ``if kind == k`` chain over the registered kernels, inlined into
those functions and cached on disk with their callers, so that a new
likelihood touches its own module (and its JAX counterpart) only. ``docs/design/likelihoods.md`` works an example.

Caching. numba's cache of the package is stamped with the package's sources
(``_numba_cache``), so a likelihood module of the package is part of every stamp. A likelihood
defined outside the package adds its name to the stamp (``_numba_cache.extend_stamp``),
which makes numba recompile the engine once for that set of likelihoods; it must be
defined before the process first compiles or loads a loop that takes a ``kind``
(``register`` raises otherwise: the loops already in memory hold the old chain).

The site kernels (one site, numba ``nopython``):

``tilted(y, mu, s2, th)``
    EP: log Z_i = log \int p(y_i | f) N(f; mu_i, s2_i) df, d/dmu, d^2/dmu^2 and
    d log Z_i / d theta at fixed cavity (the parameter slot of a one-parameter likelihood;
    0 where ``dparams_sum`` forms the gradient). For any likelihood
    d^2 Z / d mu^2 = 2 dZ / d s2 (the heat equation), so no derivative in s2 is needed.
``log_lik(y, f, th)``
    Laplace: log p(y_i | f_i), its f-derivatives d1..d3 and d/dtheta of (log p, d1, d2): 7 values.
``params_valid(th, n_params)``
    ``Likelihood.check_params`` as a yes / no, after the finiteness check.
``labels_valid(y, th)``
    Whether the labels are coded as the kernels take them (-1/+1, or 0..K-1).
``dparams_sum(y, mu, s2, th, row, dth)``
    dth[:] = sum_i d log Z_i / d theta at cavities N(mu_i, s2_i); ``row`` holds ``tilted``'s
    parameter slot per site.
"""

import hashlib
import inspect
import sys
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np
from numba import njit
from numba.core.dispatcher import Dispatcher
from numba.extending import overload

from ..numerics import plain

# Gauss-Hermite rule for expectations of log p(y | f) under a Gaussian (``expected_log_lik``).
_GH_NODES, _GH_WEIGHTS = np.polynomial.hermite.hermgauss(128)

# The smallest latent variance ``predict`` integrates over: a predictive variance of 0 (the
# structures' predictions clip rounding below 0 to 0; a user may pass a point) is read as
# this one, whose probabilities equal the point's p(y | mu) to O(1e-20), where the tilted
# rules (which divide by s2, or by s2^2 for the second derivative) are still exact.
PREDICT_VARIANCE_FLOOR = 1e-20


# ---------------------------------------------------------------------------------
# Defaults of the site kernels a binary likelihood need not write
# ---------------------------------------------------------------------------------


@njit(nogil=True, cache=True)
def no_log_lik(y, f, th):
    """``log_lik`` of a likelihood without Laplace (``supports_laplace = False``)."""
    return np.nan, np.nan, np.nan, np.nan, np.nan, np.nan, np.nan


@njit(nogil=True, cache=True)
def n_params_valid(th, n_params):
    """Any values, ``n_params`` of them (a likelihood with no range restriction)."""
    return th.shape[0] == n_params


@njit(nogil=True, cache=True)
def signed_labels(y, th):
    """Labels -1 / +1."""
    for v in y:
        if abs(v) != 1.0:
            return False
    return True


@njit(nogil=True, cache=True)
def slot_dparams_sum(y, mu, s2, th, row, dth):
    """The gradient of a likelihood with at most one parameter: the sum of ``tilted``'s slot."""
    if dth.shape[0] > 0:
        dth[0] = row.sum()


@dataclass(frozen=True)
class SiteKernels:
    """The compiled kernels of one likelihood (signatures in the module docstring)."""

    tilted: Dispatcher
    log_lik: Dispatcher = no_log_lik
    params_valid: Dispatcher = n_params_valid
    labels_valid: Dispatcher = signed_labels
    dparams_sum: Dispatcher = slot_dparams_sum


# ---------------------------------------------------------------------------------
# The registry of kinds
# ---------------------------------------------------------------------------------

KINDS = []  # the registered likelihood classes; a class's kind is its index
_ROLES = {  # role -> arguments after ``kind``, and the value of an unknown kind
    "tilted": ("y, mu, s2, th", "np.nan, np.nan, np.nan, np.nan"),
    "log_lik": ("y, f, th", "np.nan, np.nan, np.nan, np.nan, np.nan, np.nan, np.nan"),
    "params_valid": ("th, n_params", "False"),
    "labels_valid": ("y, th", "False"),
    "dparams_sum": ("y, mu, s2, th, row, dth", "None"),
}
# the modules whose compiled functions call the dispatch (``_compiled_callers``)
_CALLERS = ("pymc_gpc.likelihoods.base", "pymc_gpc.approximations.", "pymc_gpc.backends.numba.")
_GENERATED = set()  # roles whose chain numba has generated in this process (and ``freeze``'s reasons)


def register(cls):
    """Give the likelihood class ``cls`` (with ``site_kernels``) the next kind; returns it.

    RuntimeError where a compiled caller of the dispatch already exists in this process
    (it would not see the new kind)."""
    if _compiled_callers():
        raise RuntimeError(
            f"likelihood {cls.__qualname__} is defined after the package compiled its EP loops in "
            "this process: define likelihoods before the first evaluation (at import)")
    if not cls.__module__.startswith(__package__.split(".")[0] + "."):
        from .. import _numba_cache

        _numba_cache.extend_stamp(f"{cls.__module__}.{cls.__qualname__}:{_source_digest(cls.site_kernels)}")
    KINDS.append(cls)
    return len(KINDS) - 1


def freeze(reason):
    """Record that compiled code holding the dispatch exists in this process (``reason``: what),
    so that ``register`` refuses a later kind: a C-callable compiled elsewhere
    (``backends.numba.compiled_ep.external``) that ``_compiled_callers`` cannot see."""
    _GENERATED.add(reason)


def _source_digest(kernels):
    """A hash of the kernels' source (so that an edit of an outside likelihood recompiles)."""
    digest = hashlib.sha256()
    for role in _ROLES:
        fn = getattr(kernels, role)
        try:
            digest.update(inspect.getsource(fn.py_func).encode())
        except (OSError, TypeError):
            digest.update(fn.py_func.__code__.co_code)
    return digest.hexdigest()[:16]


def _compiled_callers():
    """Whether any numba function of the package is compiled or loaded in this process."""
    if _GENERATED:
        return True
    for name, module in list(sys.modules.items()):
        if module is not None and name.startswith(_CALLERS):
            for value in list(vars(module).values()):
                if isinstance(value, Dispatcher) and value.overloads and value.py_func.__module__ == name:
                    return True
    return False


def _dispatch_source(role):
    """The chain ``if kind == k: return kernel_k(...)`` over the registered kinds, as source."""
    args, unknown = _ROLES[role]
    lines = [f"def dispatch(kind, {args}):"]
    for k in range(len(KINDS)):
        lines.append(f"    if kind == {k}:\n        return kernel_{k}({args})")
    lines.append(f"    return {unknown}")
    return "\n".join(lines)


def _generate(role):
    """The Python implementation of ``role``'s dispatch (numba compiles it into the caller)."""
    _GENERATED.add(role)
    namespace = {"np": np, **{f"kernel_{k}": getattr(cls.site_kernels, role) for k, cls in enumerate(KINDS)}}
    exec(_dispatch_source(role), namespace)
    return namespace["dispatch"]


def _tilted(kind, y, mu, s2, th):
    raise NotImplementedError("compiled only (``tilted_site``)")


def _log_lik(kind, y, f, th):
    raise NotImplementedError("compiled only (``log_lik_site``)")


def _params_valid(kind, th, n_params):
    raise NotImplementedError("compiled only (``params_valid``)")


def _labels_valid(kind, y, th):
    raise NotImplementedError("compiled only (``labels_valid``)")


def _dparams_sum(kind, y, mu, s2, th, row, dth):
    raise NotImplementedError("compiled only (``tilted_dparams_sum``)")


def _overload(stub, role):
    """Make ``_generate(role)`` numba's implementation of ``stub`` (the typing function must
    have the implementation's arguments)."""
    namespace = {"generate": _generate}
    exec(f"def typer(kind, {_ROLES[role][0]}):\n    return generate({role!r})", namespace)
    overload(stub, inline="always", jit_options={"nogil": True})(namespace["typer"])


for _stub, _role in ((_tilted, "tilted"), (_log_lik, "log_lik"), (_params_valid, "params_valid"),
                     (_labels_valid, "labels_valid"), (_dparams_sum, "dparams_sum")):
    _overload(_stub, _role)


# ---------------------------------------------------------------------------------
# The dispatch: one compiled function per role, taking the kind as an integer
# ---------------------------------------------------------------------------------


@njit(nogil=True, cache=True)
def tilted_site(kind, y, mu, s2, th):
    """The tilted kernel of likelihood ``kind`` at one site: log Z, d/dmu, d^2/dmu^2, d/dtheta."""
    return _tilted(kind, y, mu, s2, th)


@njit(nogil=True, cache=True)
def log_lik_site(kind, y, f, th):
    """The log-likelihood kernel of likelihood ``kind`` at one site (7 values)."""
    return _log_lik(kind, y, f, th)


@njit(nogil=True, cache=True)
def params_valid(kind, th, n_params):
    """``Likelihood.check_params`` of likelihood ``kind`` as a yes / no (finite, then the kind's range)."""
    for v in th:
        if not np.isfinite(v):
            return False
    return _params_valid(kind, th, n_params)


@njit(nogil=True, cache=True)
def labels_valid(kind, y, th):
    """Whether labels ``y`` are coded as likelihood ``kind``'s kernels take them."""
    return _labels_valid(kind, y, th)


@njit(nogil=True, cache=True)
def tilted_dparams_sum(kind, y, mu, s2, th, row, dth):
    """dth[:] = sum_i d log Z_i / d theta at the cavities N(mu_i, s2_i); ``row`` holds
    ``tilted_map``'s last row (the one-parameter kinds' per-site derivatives)."""
    _dparams_sum(kind, y, mu, s2, th, row, dth)


@njit(nogil=True, cache=True)
def tilted_map(kind, y, mu, s2, th):
    """``tilted_site`` over all sites: rows log Z, d/dmu, d^2/dmu^2, d/dtheta."""
    n = y.shape[0]
    out = np.empty((4, n))
    for i in range(n):
        a, b, c, d = tilted_site(kind, y[i], mu[i], s2[i], th)
        out[0, i] = a
        out[1, i] = b
        out[2, i] = c
        out[3, i] = d
    return out


@njit(nogil=True, cache=True)
def log_lik_map(kind, y, f, th):
    """``log_lik_site`` over all sites (7 rows)."""
    n = y.shape[0]
    out = np.empty((7, n))
    for i in range(n):
        r = log_lik_site(kind, y[i], f[i], th)
        for k in range(7):
            out[k, i] = r[k]
    return out


# ---------------------------------------------------------------------------------
# Result holders and the base class
# ---------------------------------------------------------------------------------


class TiltedMoments:
    """Per-site EP quantities at given cavities: log Z_i, d/dmu, d^2/dmu^2, d/dtheta.

    ``dparams``: the (n, p) derivatives in theta where they are not ``out``'s last row
    (likelihoods with several parameters, ``ordinal``)."""

    __slots__ = ("log_z", "dlog_z", "d2log_z", "dlog_z_dparams")

    def __init__(self, out, n_params, dparams=None):
        self.log_z, self.dlog_z, self.d2log_z = out[0], out[1], out[2]
        self.dlog_z_dparams = out[3:4].T[:, :n_params] if dparams is None else dparams


class LogLikDerivatives:
    """log p(y_i | f_i), its f-derivatives d1..d3, and d/dtheta of (log p, d1, d2)."""

    __slots__ = ("lp", "d1", "d2", "d3", "lp_dparams", "d1_dparams", "d2_dparams")

    def __init__(self, out, n_params, dparams=None):
        """``dparams``: a (3, n, p) array of the theta-derivatives of (log p, d1, d2) where
        they are not ``out``'s last three rows (``ordinal``)."""
        self.lp, self.d1, self.d2, self.d3 = out[0], out[1], out[2], out[3]
        if dparams is None:
            dparams = out[4:7, :, None][:, :, :n_params]
        self.lp_dparams, self.d1_dparams, self.d2_dparams = dparams


class Likelihood:
    r"""Base class: a binary observation model with at most one parameter.

    Subclasses set ``param_names`` and ``site_kernels`` (a ``SiteKernels``: defining the
    class registers them and sets ``kind``, its index in the compiled dispatch) and extend
    ``check_params``.

    Every approximation talks to a likelihood only through its numeric contract: the EP
    tilted moments (:math:`\log Z_i` and its derivatives in the cavity mean and variance and
    in the parameter), :math:`\log p(y \mid f)` and its derivatives in :math:`f` (Laplace),
    expected log-likelihoods under a Gaussian (mean field, EM-EP's bound) and the
    predictive :math:`p(y_* = 1 \mid \mu_*, s^2_*)`.

    Examples
    --------
    >>> import pymc_gpc
    >>> lik = pymc_gpc.likelihoods.ProbitNoise(sigma=2.0)
    >>> isinstance(lik, pymc_gpc.likelihoods.Likelihood), lik.param_names
    (True, ('sigma',))
    """

    param_names: tuple = ()
    supports_laplace = True
    # log p(y | f) concave in f: EP's and Laplace's fixed point is unique. A likelihood that is
    # not (``StepLabelNoise``) says so, and the solvers take every schedule's run and keep the
    # converged one with the highest evidence (``approximations.solve.highest_converged``).
    log_concave = True
    site_kernels = None  # a SiteKernels, set by every concrete likelihood
    kind = None  # set from site_kernels by __init_subclass__
    # p(y | f) <= 1 for discrete labels, so log p(y) <= 0: an approximate log evidence above
    # this is a broken solve, not a value (``approximations.solve.solve_with_retries``)
    max_log_evidence = 0.0

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.__dict__.get("_abstract", False):  # an intermediate base (``ordinal.OrdinalLikelihood``)
            return
        if "site_kernels" in cls.__dict__:
            if not isinstance(cls.site_kernels, SiteKernels):
                raise TypeError(f"{cls.__name__}.site_kernels must be a SiteKernels, got {cls.site_kernels!r}")
            cls.kind = register(cls)
        elif cls.kind is None:
            raise TypeError(f"{cls.__name__} must set site_kernels (a likelihoods.base.SiteKernels)")

    def __init__(self, *values):
        self._values = values
        if any(_is_symbolic(v) for v in values):
            self._params = None  # random variables: values arrive at evaluation time
        else:
            self._params = self.check_params(values)

    def params_tensor(self):
        """The parameters as a PyTensor vector (of length ``n_params``)."""
        import pytensor.tensor as pt

        if not self._values:
            return pt.zeros((0,), dtype="float64")
        return pt.stack([pt.as_tensor_variable(v).astype("float64") for v in self._values])

    @property
    def n_params(self):
        return len(self.param_names)

    @property
    def params(self):
        """The likelihood's fixed parameter values (length ``n_params``)."""
        if self._params is None:
            raise ValueError(f"{type(self).__name__} has symbolic parameters; their values are not fixed")
        return self._params.copy()

    def check_params(self, params):
        """Return ``params`` as a float array, or raise ValueError naming the problem."""
        try:
            params = np.asarray(params, dtype=float).reshape(-1)
        except (TypeError, ValueError):
            raise ValueError(
                f"{type(self).__name__} parameters {self.param_names} must be numbers or "
                f"PyTensor/PyMC variables, got {params!r}"
            ) from None
        if params.shape != (self.n_params,):
            raise ValueError(
                f"{type(self).__name__} takes {self.n_params} parameter(s) "
                f"{self.param_names}, got {params.size}"
            )
        if not np.all(np.isfinite(params)):
            raise ValueError(f"{type(self).__name__} parameters must be finite, got {params}")
        return params

    def resolve_params(self, params):
        if params is None:
            return self.params
        return np.asarray(params, dtype=float).reshape(-1)

    def check_labels(self, y, params=None):
        """The solvers' labels as floats: here -1.0 / +1.0 (``validation.as_signed_labels``)."""
        from ..validation import as_signed_labels

        return as_signed_labels(y, require_both=False)

    def tilted_moments(self, out, y, mu, s2, th):
        """``TiltedMoments`` of ``tilted_map``'s rows ``out`` (computed at cavities N(mu, s2))."""
        return TiltedMoments(out, self.n_params)

    def tilted(self, y, mu, s2, params=None):
        r"""EP tilted moments at cavities :math:`N(\mu_i, s^2_i)`; see the module docstring."""
        out = tilted_map(self.kind, plain(np.asarray(y, float)), plain(np.asarray(mu, float)), plain(np.asarray(s2, float)),
                         plain(self.resolve_params(params)))  # one compiled specialisation (``plain``)
        return TiltedMoments(out, self.n_params)

    def log_lik(self, y, f, params=None):
        r""":math:`\log p(y_i \mid f_i)` with its f-derivatives to third order (Laplace)."""
        if not self.supports_laplace:
            raise ValueError(laplace_unsupported_message(self))
        out = log_lik_map(self.kind, plain(np.asarray(y, float)), plain(np.asarray(f, float)),
                          plain(self.resolve_params(params)))
        return LogLikDerivatives(out, self.n_params)

    def expected_log_lik(self, y, mu, s2, params=None):
        r""":math:`E_q[\log p(y_i \mid f_i)]` under :math:`q(f_i) = N(\mu_i, s^2_i)`, and its :math:`\theta`-gradient.

        The data term of the variational bound (Kim & Ghahramani eq. 15, first integral;
        Tan eq. 17, first sum), by Gauss-Hermite quadrature of ``log_lik``. Returns
        per-site values (n,) and :math:`\partial / \partial \theta` (n, p).
        """
        mu = np.asarray(mu, float).reshape(-1)
        s2 = np.asarray(s2, float).reshape(-1)
        f = mu[:, None] + np.sqrt(2.0 * s2)[:, None] * _GH_NODES[None, :]
        y_rep = np.repeat(np.asarray(y, float), _GH_NODES.size)
        d = self.log_lik(y_rep, f.reshape(-1), params)
        w = _GH_WEIGHTS / np.sqrt(np.pi)
        value = d.lp.reshape(mu.size, -1) @ w
        grad = np.einsum("ikp,k->ip", d.lp_dparams.reshape(mu.size, _GH_NODES.size, self.n_params), w)
        return value, grad

    def predict(self, mu, s2, params=None):
        r""":math:`p(y_* = +1 \mid \mu_*, s^2_*)`: the likelihood averaged over :math:`N(\mu_*, s^2_*)` (Tan eq. 13)."""
        mu = np.asarray(mu, dtype=float).reshape(-1)
        s2 = np.maximum(np.asarray(s2, dtype=float).reshape(-1), PREDICT_VARIANCE_FLOOR)
        return np.exp(self.tilted(np.ones_like(mu), mu, s2, params).log_z)

    def __repr__(self):
        vals = self._values if self._params is None else [f"{v:g}" for v in self._params]
        args = ", ".join(f"{k}={v}" for k, v in zip(self.param_names, vals))
        return f"{type(self).__name__}({args})"


def _is_symbolic(value):
    try:
        from pytensor.graph.basic import Variable
    except ImportError:  # pragma: no cover
        return False
    return isinstance(value, Variable)


def laplace_unsupported_message(lik):
    return (
        f"{type(lik).__name__} has no Laplace approximation: its log-likelihood is "
        "piecewise constant in f, so the mode and Hessian that Laplace's method needs do "
        "not exist. Use Expectation Propagation (MarginalEP / ep) instead."
    )


# ---------------------------------------------------------------------------------
# The contract as a Protocol (``contracts.conformance_gaps`` checks an object against it)
# ---------------------------------------------------------------------------------


@runtime_checkable
class BinaryLikelihood(Protocol):
    """A binary observation model p(y | f, theta) with at most a few parameters theta.

    The Ops construct the likelihood *type* with no arguments (``likelihood_type()``) and
    pass theta as an input, so every method takes ``params`` (None: the values the
    instance was built with).

    Attributes
    ----------
    kind : its index in the registry of kinds (``register``), which the compiled dispatch
        (``tilted_site`` / ``log_lik_site``) and the JAX table take; read by EP, ADF and the
        numba and JAX Ops.
    param_names : names of theta's entries (messages; ``n_params`` of them).
    supports_laplace : whether ``log_lik`` exists (False for a likelihood piecewise constant
        in f, whose mode and Hessian Laplace's method needs do not exist).
    log_concave : whether log p(y | f) is concave in f (``Likelihood.log_concave``); where it
        is not, the solvers run every schedule cold and keep the converged run of highest
        evidence (``approximations.solve.highest_converged``).
    """

    kind: int
    param_names: tuple
    supports_laplace: bool
    log_concave: bool

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
