r"""The compile mode of the small graphs that ``fit`` and ``predict`` run once per iteration
or per draw: PyTensor's FAST_COMPILE (Python linker, NumPy per node), plus one rewrite.

Why not numba: numba compiles a graph it has not seen at its first call, seconds to tens
of seconds for a new model's kernel and pullback graphs, against a fraction of a second
here (``benchmarks/results/fit_graphs.md``).

The rewrite. The Python linker runs an elementwise node through the NumPy ufunc its scalar
op names; a scalar op without one goes through a Python-level loop over the elements.
``Clip`` has none, and every stationary ``pm.gp.cov`` kernel clips its squared distances
at zero (``Stationary.square_dist``): on Forensic Glass those clips were most of the
kernel and pullback graphs' time (``benchmarks/results/fit_graphs.md``). ``clip(x, lo, hi)`` is rewritten to
``minimum(maximum(x, lo), hi)``: the same values, and the same gradient (at a tie x = lo,
both pass the cotangent to x).
"""

import pytensor.scalar as ps
import pytensor.tensor as pt
from pytensor.compile import optdb
from pytensor.compile.mode import Mode, get_mode
from pytensor.graph.rewriting.basic import in2out, node_rewriter
from pytensor.graph.rewriting.db import RewriteDatabaseQuery
from pytensor.tensor.elemwise import Elemwise

__all__ = ["PYTHON_VM_MODE", "PYTHON_VM_FORWARD_MODE", "clip_as_maximum_minimum"]

_TAG = "pymc_gpc_python_vm"


@node_rewriter([Elemwise])
def clip_as_maximum_minimum(fgraph, node):
    """Elementwise clip(x, lo, hi) -> minimum(maximum(x, lo), hi) (module docstring)."""
    if not isinstance(node.op.scalar_op, ps.Clip):
        return None
    x, lo, hi = node.inputs
    out = pt.minimum(pt.maximum(x, lo), hi)
    if out.type != node.outputs[0].type:  # e.g. a dtype or static shape the clip had
        out = pt.specify_shape(out.astype(node.outputs[0].dtype), node.outputs[0].type.shape)
    return [out]


# Registered under its own tag only: no mode includes it unless asked (PYTHON_VM_MODE).
if "pymc_gpc_clip_as_maximum_minimum" not in optdb:
    optdb.register("pymc_gpc_clip_as_maximum_minimum", in2out(clip_as_maximum_minimum), _TAG,
                   position=0.5)

PYTHON_VM_MODE = get_mode("FAST_COMPILE").including(_TAG)

# Graphs without a gradient (the kernels that ``fit`` and ``predict`` evaluate): the same
# linker, with only the merge rewrite (shared subexpressions computed once) and the clip
# rewrite. FAST_COMPILE's canonicalisation pays where ``pt.grad``'s output needs
# simplifying (Forensic Glass's pullback graph ran several times slower without it). A
# forward graph runs about as fast without it and compiles several times faster, which is
# most of a one-point prediction (figures: docs/design/engine_notes.md).
PYTHON_VM_FORWARD_MODE = Mode(linker=PYTHON_VM_MODE.linker, optimizer=RewriteDatabaseQuery(include=["merge", _TAG]))
