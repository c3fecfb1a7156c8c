"""The graph rewrites of the evidence Ops, applied when a graph is compiled.

``use_sampling_tolerance``: within ``sampling_tolerance()`` (``pymc_gpc.sample``), an Op
becomes its ``sampling_twin`` (the registry's ``sampling_defaults``). ``defer_unused_loo``:
an Op whose ``loo`` output the graph does not use (the logp and gradient NUTS evaluates)
defers its LOO terms where the registry's ``deferred_loo`` says they cost noticeably.
"""

import contextlib
import threading

from pytensor.compile import optdb
from pytensor.graph.rewriting.basic import in2out, node_rewriter

from ..approximations.registry import APPROXIMATIONS
from .marginal import ApproxMarginalOp

__all__ = ["sampling_tolerance", "sampling_tolerance_active", "defer_unused_loo", "use_sampling_tolerance",
           "register_rewrites"]


_sampling = threading.local()


@contextlib.contextmanager
def sampling_tolerance():
    """Graphs compiled within this block evaluate the evidence Ops at the sampler's
    tolerances (the registry's ``sampling_defaults``: EP's tol 1e-2) instead of the engine's (1e-8).

    ``pymc_gpc.sample`` compiles its sampler inside this block: the loose tolerance is a
    speed device for NUTS (``approximations.registry``). Every other graph with the Ops
    (``model.compile_logp`` / ``compile_dlogp``, ``pm.find_MAP``, ADVI, pathfinder, a
    Laplace approximation from a Hessian, plain ``pm.sample``) gets the engine's
    accuracy, as do options given to the GP's constructor (``tol=...``) everywhere.
    Works by a graph rewrite at compilation (``use_sampling_tolerance``), so the compiled
    function keeps the sampler's Ops in worker processes too.
    """
    _sampling.depth = getattr(_sampling, "depth", 0) + 1
    try:
        yield
    finally:
        _sampling.depth -= 1


def sampling_tolerance_active():
    """Whether graphs compiled now in this thread get the sampler's tolerances."""
    return getattr(_sampling, "depth", 0) > 0


@node_rewriter(None)
def defer_unused_loo(fgraph, node):
    """An ``ApproxMarginalOp`` whose ``loo`` output has no client in the graph (the logp and
    gradient that NUTS evaluates) becomes its ``deferring_loo`` copy."""
    op = node.op
    if not isinstance(op, ApproxMarginalOp) or op.defer_loo or not APPROXIMATIONS[op.approximation].deferred_loo:
        return None
    if fgraph.clients.get(node.outputs[op.loo_output]):
        return None
    return op.deferring_loo().make_node(*node.inputs).outputs


@node_rewriter(None)
def use_sampling_tolerance(fgraph, node):
    """Within ``sampling_tolerance()``, an ``ApproxMarginalOp`` becomes its ``sampling_twin``."""
    op = node.op
    if not isinstance(op, ApproxMarginalOp) or op.sampling or not sampling_tolerance_active():
        return None
    return op.sampling_twin().make_node(*node.inputs).outputs


def register_rewrites():
    """Add the two rewrites to PyTensor's optimizer database, in every mode that rewrites at
    all: ``use_sampling_tolerance`` first (``defer_unused_loo``'s copies keep the ``sampling``
    prop), both after the canonical rewrites and before the in-place ones. Called once, by
    ``ops/__init__``."""
    optdb.register("pymc_gpc_sampling_tolerance", in2out(use_sampling_tolerance), "fast_run", "fast_compile",
                   position=48.8)
    optdb.register("pymc_gpc_defer_unused_loo", in2out(defer_unused_loo), "fast_run", "fast_compile", position=48.9)
