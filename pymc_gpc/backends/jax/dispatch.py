r"""JAX implementations of the package's PyTensor Ops (``jax_funcify``).

PyMC's JAX samplers (``pm.sample(nuts_sampler="numpyro" | "blackjax")``) turn the model's
log density into a JAX function (``pymc.sampling.jax.get_jaxified_logp``) and
differentiate it with JAX itself, so the Ops' ``pullback`` is not used there: the
gradient lives in the JAX function, as the ``jax.custom_vjp`` of
``backends.jax.engine.marginal_fn`` (the exact fixed-point / implicit gradient,
never automatic differentiation through the EP or Newton loop).

Registered here:

* ``ApproxMarginalOp`` (EP and Laplace; mean field and ADF raise
  ``registry.UnsupportedCombinationError``, a ``NotImplementedError``, naming what works), with the options of the numba path (the registry's ``sampling_defaults``) and the
  tolerance of a solve from zero sites (``op_options``). The fourth input (hyperparameter
  values, used by the numba path for warm starts and warnings) is ignored: each evaluation
  starts cold.
* ``LatentPredictiveOp`` (prediction, ``conditional``).
* The same two Ops on the FITC prior (``backends/jax/fitc.py``), with the training points
  split over a device mesh inside ``sharding.shard_rows()``: each Op is one class for every
  prior structure, registered once (``jax_funcify_structured``), which calls the
  implementation of the Op's structure (``implements``).
* The multi-class structures' implementations (dense and FITC) are in ``multiclass.py`` and
  ``multiclass_fitc.py``; a structure the registry does not list for JAX raises
  ``registry.UnsupportedCombinationError`` (a ``NotImplementedError`` and a ``ValueError``).
* ``training_check.TrainingValuesCheck`` (a training ``pm.Data`` container in a predictive
  graph): the identity, since a traced value cannot be compared in Python; ``predict`` and
  ``conditional`` check the container's value when they are called.
* ``ARDKernelOp`` and ``ARDKernelPullbackOp`` of ``kernels.py`` (``ard_classifier``): the
  kernel as jnp code, which JAX differentiates exactly.

Importing this module imports jax and PyTensor's JAX dispatch; ``registration``
(installed when ``pymc_gpc`` is imported) imports it right after PyTensor's JAX dispatch
is first imported (by PyMC's JAX samplers, ``mode="JAX"``), so that ``import pymc_gpc``
does not pay for importing jax (``docs/design/engine_notes.md``, "Importing jax").
"""

import jax
import jax.numpy as jnp
import numpy as np

from ...approximations import registry
from ...kernels import ARDKernelOp, ARDKernelPullbackOp
from ...ops import ApproxMarginalOp, LatentPredictiveOp
from ...ops.training_check import TrainingValuesCheck
from . import engine as jax_engine
from . import fitc as jax_fitc
from . import sharding


def op_options(op, sampling):
    """The Op's solver options over the registry's sampling defaults where it samples, less
    ``with_grad`` and ``with_loo`` (the JAX functions always return both); every JAX
    registration (binary, FITC, multi-class) reads its options here. A JAX solve always
    starts from zero sites, so where it samples its ``tol`` is a cold solve's
    (``ApproxMarginalOp.solver_options(cold=True)``: the engine's, not the sampler's 1e-2)."""
    options = dict(op.options)
    if sampling:
        options = op.solver_options(cold=True)
    options.pop("with_grad", None)
    options.pop("with_loo", None)
    return options


def check_supported(op):
    """The registry's ``check_backend``: mean field and ADF have no JAX implementation
    (``UnsupportedCombinationError``, a NotImplementedError naming what works)."""
    registry.check_backend(op.approximation, op.structure.name, "jax", type(op).__name__)


# The evidence and predictive Ops are one class each for every prior structure: one
# jax_funcify each, dispatching on (Op type, the Op's structure name) to what ``implements``
# registered (here, ``multiclass.py`` and ``multiclass_fitc.py``).
_IMPLEMENTATIONS = {}


def implements(op_type, structure_name):
    """Register the decorated funcify as the JAX implementation of ``op_type`` on the prior
    structure ``structure_name``."""
    def register(funcify):
        _IMPLEMENTATIONS[(op_type, structure_name)] = funcify
        return funcify
    return register


def jax_funcify_structured(op, node=None, **kwargs):
    """The implementation registered for the Op's structure (``implements``)."""
    check_supported(op)
    return implementation(type(op), op.structure.name)(op, node=node, **kwargs)


def implementation(op_type, structure_name):
    """The funcify ``implements`` registered for ``op_type`` on ``structure_name``. A module
    that a registration made during a user's direct import of another backend module had to
    skip (``registration._register``) is imported here, on first use."""
    if (op_type, structure_name) not in _IMPLEMENTATIONS:
        from .registration import _register
        _register()
    return _IMPLEMENTATIONS[(op_type, structure_name)]


# PyTensor's JAX dispatch is imported here, after what the other backend modules import from
# this one: its import runs ``registration``'s hook, which imports them (a direct import of
# this module must not hand them a half-initialised module).
from pytensor.link.jax.dispatch import jax_funcify  # noqa: E402


jax_funcify.register(ApproxMarginalOp)(jax_funcify_structured)
jax_funcify.register(LatentPredictiveOp)(jax_funcify_structured)


@implements(ApproxMarginalOp, "dense")
def dense_marginal(op, node=None, **kwargs):
    check_supported(op)
    marginal = jax_engine.marginal_fn(op.approximation, op.likelihood.kind, **op_options(op, sampling=op.sampling))

    def approx_marginal(K, params, y, hyper=None):
        return marginal(K, params, y)

    return approx_marginal


@implements(LatentPredictiveOp, "dense")
def dense_predictive(op, node=None, **kwargs):
    check_supported(op)
    predict = jax_engine.predictive_fn(op.approximation, op.likelihood.kind, op.full_cov, **op_options(op, sampling=False))

    def latent_predictive(K, params, y, K_cross, K_star):
        return predict(K, params, y, K_cross, K_star)

    return latent_predictive


@implements(ApproxMarginalOp, "fitc")
def fitc_marginal(op, node=None, **kwargs):
    check_supported(op)
    marginal = jax_fitc.marginal_fn(op.approximation, op.likelihood.kind, constrain=sharding.active_constraint(),
                                    **op_options(op, sampling=op.sampling))

    def sparse_marginal(Kuu, Kuf, k_diag, params, y, hyper=None):
        return marginal(Kuu, Kuf, k_diag, params, y)

    return sparse_marginal


@implements(LatentPredictiveOp, "fitc")
def fitc_predictive(op, node=None, **kwargs):
    check_supported(op)
    predict = jax_fitc.predictive_fn(op.approximation, op.likelihood.kind, op.full_cov,
                                     constrain=sharding.active_constraint(), **op_options(op, sampling=False))

    def sparse_predictive(Kuu, Kuf, k_diag, params, y, Kus, K_star):
        return predict(Kuu, Kuf, k_diag, params, y, Kus, K_star)

    return sparse_predictive


def _distance_terms(X, Xs, discrete):
    """d_m(X_i, Xs_j) for every column m: (d, n, m); Hamming on discrete columns."""
    diff = X.T[:, :, None] - Xs.T[:, None, :]
    disc = jnp.asarray(discrete)[:, None, None]
    return jnp.where(disc, (diff != 0.0).astype(X.dtype), diff * diff)


@jax_funcify.register(ARDKernelOp)
def jax_funcify_ARDKernelOp(op, node=None, **kwargs):
    discrete, symmetric = np.array(op.discrete, dtype=bool), op.symmetric

    def ard_kernel(X, Xs, l, v0, v1, v2):
        D = jnp.einsum("m,mij->ij", l, _distance_terms(X, Xs, discrete))
        E = jnp.exp(-0.5 * D)
        K = v0 * E + v1
        if symmetric:
            K = K + v2 * jnp.eye(X.shape[0], dtype=K.dtype)
        return K, E

    return ard_kernel


@jax_funcify.register(ARDKernelPullbackOp)
def jax_funcify_ARDKernelPullbackOp(op, node=None, **kwargs):
    discrete = np.array(op.discrete, dtype=bool)

    def ard_kernel_pullback(G, E, X, Xs):
        A = G * E
        s = jnp.einsum("ij,mij->m", A, _distance_terms(X, Xs, discrete))
        k = min(G.shape[0], G.shape[1])
        return s, jnp.sum(A), jnp.sum(G), jnp.trace(G[:k, :k])

    return ard_kernel_pullback


@jax_funcify.register(TrainingValuesCheck)
def jax_funcify_TrainingValuesCheck(op, node=None, **kwargs):
    def training_values(x):
        return x

    return training_values
