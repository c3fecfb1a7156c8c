r"""The compile mode of the small graphs that ``fit`` and ``predict`` run once per iteration
or per draw: PyTensor's FAST_COMPILE (Python linker, NumPy per node), plus one rewrite.

Not numba, which compiles a new graph in seconds (``benchmarks/results/fit_graphs.md``).

The rewrite: the Python linker runs a scalar op without a NumPy ufunc, such as ``Clip``
(every stationary ``pm.gp.cov`` kernel clips its squared distances), as a Python loop over
the elements. ``clip(x, lo, hi)`` becomes ``minimum(maximum(x, lo), hi)``: the same values
and gradient (at a tie x = lo, both pass the cotangent to x).
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

# Graphs without a gradient (the kernels ``fit`` and ``predict`` evaluate): the same linker
# with only the merge and clip rewrites; FAST_COMPILE's canonicalisation pays only where
# ``pt.grad``'s output needs simplifying.
PYTHON_VM_FORWARD_MODE = Mode(linker=PYTHON_VM_MODE.linker, optimizer=RewriteDatabaseQuery(include=["merge", _TAG]))
