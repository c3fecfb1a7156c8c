"""JAX implementations of the special functions that the priors' graphs use and that
PyTensor's JAX backend takes from TensorFlow Probability.

``pt.ive`` (the exponentially scaled modified Bessel function I_v(x) e^{-|x|}) enters the
periodic HSGP prior's spectral variances (``structures.hsgp.PeriodicBasis``, the series of
``pm.gp.HSGPPeriodic``). PyTensor's JAX dispatch of ``Ive`` imports
``tensorflow_probability``; where it is not installed, this module registers SciPy's
``ive`` as a host callback instead (``jax.pure_callback``: the values are SciPy's; the
gradient needs nothing more, since PyTensor differentiates ``ive`` symbolically into other
``ive`` terms before the graph reaches JAX).
"""

import importlib.util

import jax
import jax.numpy as jnp
import numpy as np
import scipy.special
from pytensor.link.jax.dispatch import jax_funcify
from pytensor.scalar.math import Ive

__all__ = ["ive"]


def ive(v, x):
    """I_v(x) e^{-|x|}, elementwise with broadcasting, computed by ``scipy.special.ive`` on the host."""
    v, x = jnp.asarray(v), jnp.asarray(x)
    dtype = jnp.result_type(v.dtype, x.dtype, jnp.float32)
    shape = jnp.broadcast_shapes(v.shape, x.shape)

    def host(v_, x_):
        return np.asarray(scipy.special.ive(v_, x_), dtype=dtype)

    return jax.pure_callback(host, jax.ShapeDtypeStruct(shape, dtype), v, x, vmap_method="broadcast_all")


if importlib.util.find_spec("tensorflow_probability") is None:

    @jax_funcify.register(Ive)
    def _jax_funcify_Ive(op, **kwargs):
        return ive
