"""The predictive graph's check that a training ``pm.Data`` container still holds the
inputs the evidence was built with (``validation.check_training_values``)."""

import hashlib

import numba
import numpy as np
import pytensor.tensor as pt
from pytensor.graph.basic import Apply
from pytensor.graph.op import Op
from pytensor.link.numba.dispatch.basic import get_numba_type, numba_njit, register_funcify_and_cache_key

from ..validation import check_training_values


class TrainingValuesCheck(Op):
    """Identity on a training container's tensor that raises ValueError when its value
    is not the one recorded (``check_training_values``)."""

    __props__ = ("name", "digest")
    view_map = {0: [0]}

    def __init__(self, values, name):
        self.values = np.array(values, copy=True)
        self.values.setflags(write=False)
        self.name = name
        self.digest = hashlib.sha256(
            str((self.values.dtype.str, self.values.shape)).encode() + np.ascontiguousarray(self.values).tobytes()
        ).hexdigest()

    def make_node(self, x):
        x = pt.as_tensor_variable(x)
        return Apply(self, [x], [x.type()])

    def perform(self, node, inputs, output_storage):
        check_training_values(self.name, self.values, inputs[0])
        output_storage[0][0] = inputs[0]

    def infer_shape(self, node, shapes):
        return [shapes[0]]

    def pullback(self, inputs, outputs, cotangents):
        return [cotangents[0]]


def checked_training_tensor(tensor, values):
    """``tensor`` (a training ``pm.Data`` container) passed through an Op that raises
    ``check_training_values``'s ValueError when it is evaluated at other values than
    ``values`` (those recorded at ``marginal_likelihood``)."""
    return TrainingValuesCheck(values, tensor.name or "X")(tensor)


@register_funcify_and_cache_key(TrainingValuesCheck)
def numba_funcify_TrainingValuesCheck(op, node, **kwargs):
    """The numba backend runs the check in object mode (without PyTensor's fallback warning)."""
    ret_sig = get_numba_type(node.outputs[0].type)

    def run(x):
        check_training_values(op.name, op.values, x)
        return x

    @numba_njit
    def check(x):
        with numba.objmode(ret=ret_sig):
            ret = run(x)
        return ret

    return check, None  # a closure over the Op: not cached
