r"""FITC evaluations with the n training points split over several devices.

FITC's work is O(n m^2) over the points: V = L_uu^-1 K_uf, A = I + V diag(d) V^T, the
marginal variances ||L_A^-1 V_i||^2 and the gradient's m x n products are column by
column, and the only couplings between points are m x m sums over them (A, V v, V^T z
products). So the columns of K_uf (and diag K_ff, the labels, the sites) are split over a
one-axis device mesh (``jax.sharding.Mesh``, axis ``"rows"``) with
``jax.lax.with_sharding_constraint`` (``NamedSharding``), and XLA's SPMD partitioner turns
each m x m sum over the points into a local product and a collective sum (all-reduce);
everything m x m (the Cholesky factors of K_uu and A) is replicated. The numbers are those
of one device up to the order of the sums (a few units of rounding).

How to ask for it. Inside ``with shard_rows(devices):`` every FITC Op that PyTensor turns
into JAX code (``pm.sample(nuts_sampler="numpyro" | "blackjax")``,
``pymc_gpc.sample(..., nuts_sampler="numpyro")``, ``pytensor.function(..., mode="JAX")``)
is built with the rows split over ``devices`` (default: all of ``jax.devices()``)::

    import jax
    import pymc_gpc
    from pymc_gpc.backends.jax.sharding import shard_rows

    with model, shard_rows():  # every device JAX sees
        idata = pymc_gpc.sample(nuts_sampler="numpyro",
                                nuts_sampler_kwargs={"chain_method": "vectorized"})

The chains then run one after the other (``"sequential"``) or vectorised
(``"vectorized"``) on the whole mesh; numpyro's default ``"parallel"`` puts one chain on
each device, which is the other way of using several devices (for small n), not this one.
Dense and multi-class Ops are not affected.

Several hosts. JAX's multi-controller model: start the same script on every host, with
``jax.distributed.initialize()`` (coordinator address, number of processes, process id;
automatic on Cloud TPU and SLURM) called before anything else touches jax; then
``jax.devices()`` lists the devices of all hosts, ``shard_rows()`` spans them, and every
process passes the same data (each builds the same model; the inputs are replicated and
then split, so each host keeps only its share of the m x n work). Tested: several devices
in one process, and two processes on one host with a local coordinator
(``tests/backends/test_jax_distributed.py``: the evidence and gradient of one process to
1e-10, numpyro NUTS on ``marginal_fn``); the launch on several hosts (SLURM) is in
``docs/user_guide/large_data.md``.

The pure functions: ``marginal_fn(approximation, kind, devices=None, **options)`` is
``fitc.marginal_fn`` with the rows split (jit it, or call it inside a jitted function).
"""

import contextlib
import threading

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from . import fitc

AXIS = "rows"
_state = threading.local()


def row_mesh(devices=None):
    """A one-axis mesh (axis ``"rows"``) over ``devices`` (default: all of ``jax.devices()``)."""
    devices = list(jax.devices() if devices is None else devices)
    if not devices:
        raise ValueError("shard_rows needs at least one device")
    return Mesh(np.array(devices), (AXIS,))


def row_constraint(mesh):
    """(x, axis) -> x constrained to have ``axis`` (the training points) split over ``mesh``
    and every other axis replicated (``fitc``'s ``constrain``)."""

    def constrain(x, axis):
        spec = [None] * x.ndim
        spec[axis] = AXIS
        return jax.lax.with_sharding_constraint(x, NamedSharding(mesh, PartitionSpec(*spec)))

    return constrain


@contextlib.contextmanager
def shard_rows(devices=None):
    """Within this block, FITC Ops turned into JAX code split the training points over
    ``devices`` (default: every device JAX sees; module docstring). One device: no change."""
    previous = getattr(_state, "mesh", None)
    _state.mesh = row_mesh(devices)
    try:
        yield _state.mesh
    finally:
        _state.mesh = previous


def active_constraint():
    """The ``constrain`` function of the enclosing ``shard_rows`` block, or None (outside
    one, or with a single device)."""
    mesh = getattr(_state, "mesh", None)
    if mesh is None or mesh.size == 1:
        return None
    return row_constraint(mesh)


def marginal_fn(approximation, kind, devices=None, **options):
    """``fitc.marginal_fn`` with the training points split over ``devices`` (default all),
    jitted: a sharding constraint evaluated eagerly (numpyro's initialisation calls the
    potential and its gradient outside ``jit``) is an output sharding, which must split n
    evenly across processes; inside ``jit`` an uneven split is padded."""
    mesh = row_mesh(devices)
    if mesh.size == 1:
        return fitc.marginal_fn(approximation, kind, **options)
    return jax.jit(fitc.marginal_fn(approximation, kind, constrain=row_constraint(mesh), **options))
