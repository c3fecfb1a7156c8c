"""The trace's values computed in each chain's own process, not in ``pm.sample``'s main one.

With chains in parallel (``cores > 1``), PyMC's workers send back only the sampled values;
the main process then evaluates every traced variable at each draw (``NDArray.record``). A
GP classifier's deterministics ``{name}_loo``, ``{name}_n_iter`` and ``{name}_status`` are
outputs of the evidence Op, so each draw cost the main process an evidence solve, from a
warm start that is the previous draw (of either chain), not the trajectory's solutions that
only the chain's process holds, and on the cores the chains run on.

Here the chain evaluates the traced variables at its new point right after its step
(``RecordingNUTS.step``) and sends the values with its sampler statistics; ``ChainTrace``
stores them and evaluates nothing. The draw is a point the trajectory solved, any of its up
to 2^depth points: the trace function holds the evidence Op's ``light_twin``
(``light_evidence``), which answers it from the light results the sampler's copy of the Op
stored (``ops.warm_start.RecentResults``: every output but the kernel cotangents, for a few
hundred points), where the full results keep one point at 50,000 rows (FITC, m = 200).
PyMC's ``ZarrTrace`` records in the workers too, but needs zarr and a store on disk.
"""

import numpy as np
import pymc as pm
from pymc.backends.ndarray import NDArray
from pytensor.graph.replace import graph_replace
from pytensor.graph.traversal import ancestors

from ..ops.marginal import ApproxMarginalOp
from ..ops.rewrites import sampling_tolerance

__all__ = ["RecordingNUTS", "ChainTrace", "LightLookup", "record_in_chains", "TRACE_PREFIX"]

# The sampler statistics that carry the traced values are named "trace:<variable>" (a name
# that no NUTS statistic has); ``ChainTrace`` takes them out of the statistics.
TRACE_PREFIX = "trace:"


def trace_variables(model, var_names=None):
    """The variables ``pm.sample`` traces (its ``var_names`` or every unobserved variable), in
    terms of the value variables, as ``pm.sample`` builds them."""
    if var_names is None:
        return model.unobserved_value_vars
    traced = [v for v in model.unobserved_RVs if v.name in var_names]
    if len(traced) != len(var_names):
        missing = sorted(set(var_names) - {v.name for v in traced})
        raise ValueError(f"var_names names variables the model does not have: {missing}")
    return model.replace_rvs_by_values(traced)


def light_evidence(variables):
    """``variables`` with each evidence Op whose kernel cotangents they do not use replaced by
    its ``light_twin``: at a point of the trajectory it answers from the results the
    sampler's copy stored (every output but the cotangents, O(n) each, a few hundred points),
    where the full results (the cotangents are m x n under FITC) are kept for one point at
    50,000 rows, so the draw, any point of the trajectory, was mostly solved again."""
    variables = list(variables)
    used = set(ancestors(variables))
    replace = {}
    for node in {v.owner for v in used if v.owner is not None and isinstance(v.owner.op, ApproxMarginalOp)}:
        if any(node.outputs[i] in used for i in node.op.cotangent_outputs):
            continue
        replace.update(zip(node.outputs, node.op.light_twin().make_node(*node.inputs).outputs))
    return graph_replace(variables, replace, strict=False) if replace else variables


class RecordingNUTS(pm.NUTS):
    """``pm.NUTS`` that evaluates the traced variables at each new point in its own process
    and returns them as sampler statistics ``trace:<name>`` (``record_in_chains`` sets it up;
    ``ChainTrace`` receives them); until then, ``pm.NUTS``."""

    _trace_fn = None

    def record(self, model, variables, trace):
        """Compile the traced ``variables`` (under the sampling tolerances, as the step's own
        function, so that both reach the same solver state) and their ``LightLookup``, and
        declare their statistics from ``trace``'s shapes and dtypes."""
        light = light_evidence(variables)
        with model, sampling_tolerance():
            self._trace_fn = model.compile_fn(outs=light, inputs=model.value_vars,
                                              point_fn=False, on_unused_input="ignore")
            self._lookup = LightLookup(model, light)
        self._trace_inputs = [v.name for v in model.value_vars]
        self._trace_names = [v.name for v in variables]
        declared = {TRACE_PREFIX + n: (trace.var_dtypes[n], list(trace.var_shapes[n])) for n in self._trace_names}
        self.stats_dtypes_shapes = {**self.stats_dtypes_shapes, **declared}
        self.stats_dtypes = [{**self.stats_dtypes[0], **{k: d for k, (d, _) in declared.items()}}]

    def step(self, point):
        point, stats = super().step(point)
        if self._trace_fn is None:
            return point, stats
        at = [point[name] for name in self._trace_inputs]
        values = self._lookup(at)
        if values is None:  # a point no light result holds: the evidence Op solves it
            values = self._trace_fn(*at)
        stats = [dict(stats[0]), *stats[1:]]
        stats[0].update((TRACE_PREFIX + n, np.array(v, copy=True)) for n, v in zip(self._trace_names, values))
        return point, stats


class LightLookup:
    """The traced variables at a point the chain's sampler has solved, without the kernel
    matrices: each ``light`` evidence Op's outputs are read from its lineage's light results
    (``ApproxMarginalOp.light_outputs``) and given, with the point, to the traced graph
    compiled with those outputs as inputs. The trace function proper computes K_uu and K_uf
    before its Op finds the point (about 66 ms a draw at 50,000 rows, FITC m = 200).

    Calling it returns the traced values, or None where some Op has no light result for the
    point (``RecordingNUTS.step`` then runs the trace function).
    """

    def __init__(self, model, variables):
        nodes = list(dict.fromkeys(v.owner for v in ancestors(variables) if v.owner is not None
                                   and isinstance(v.owner.op, ApproxMarginalOp) and v.owner.op.light))
        self.ops, self._keys, self._values = [], None, None
        if not nodes:  # nothing to look up: the trace function answers every draw
            return
        # the sampler's copy of each Op (``sampling``, as the rewrite makes it) holds the results
        self.ops = [node.op if node.op.sampling else node.op.sampling_twin() for node in nodes]
        holders = [[out.type() for out in node.outputs] for node in nodes]
        replaced = graph_replace(variables, {out: h for node, hs in zip(nodes, holders)
                                             for out, h in zip(node.outputs, hs)}, strict=False)
        # (theta, y, hyper) of each Op, computed as the sampler's function computes them
        keys = [x for node in nodes for x in node.inputs[node.op.n_kernel_inputs:node.op.n_kernel_inputs + 3]]
        self._keys = model.compile_fn(outs=keys, inputs=model.value_vars, point_fn=False, on_unused_input="ignore")
        self._values = model.compile_fn(outs=replaced, inputs=[*model.value_vars, *(h for hs in holders for h in hs)],
                                        point_fn=False, on_unused_input="ignore", mode="FAST_COMPILE")

    def __call__(self, at):
        if self._keys is None:
            return None
        keys = self._keys(*at)
        outputs = []
        for j, op in enumerate(self.ops):
            found = op.light_outputs(*keys[3 * j:3 * j + 3])
            if found is None:
                return None
            outputs.extend(found)
        return self._values(*at, *outputs)


class ChainTrace(NDArray):
    """PyMC's in-memory trace, filled from the values the chains send as ``trace:<name>``
    statistics (``RecordingNUTS``) instead of evaluated at each draw; the statistics
    themselves are kept as PyMC keeps them. ``pm.sample(trace=...)`` copies it once a chain."""

    def __copy__(self):
        new = type(self).__new__(type(self))
        new.__dict__.update(self.__dict__)
        new.samples, new._stats = {}, None  # each chain its own arrays
        return new

    def setup(self, draws, chain, sampler_vars=None):
        if sampler_vars is not None:
            sampler_vars = [{k: d for k, d in s.items() if not k.startswith(TRACE_PREFIX)} for s in sampler_vars]
        super().setup(draws, chain, sampler_vars)

    def record(self, point, sampler_stats=None, *, in_warmup):
        stats = [dict(s) for s in sampler_stats]
        values = {k[len(TRACE_PREFIX):]: s.pop(k) for s in stats for k in list(s) if k.startswith(TRACE_PREFIX)}
        for name in self.varnames:
            self.samples[name][self.draw_idx] = values[name]
        for data, s in zip(self._stats, stats):
            for key, val in s.items():
                data[key][self.draw_idx] = val
        self.draw_idx += 1


def record_in_chains(step, model, var_names=None):
    """Make ``step`` (a ``RecordingNUTS``) send the traced variables; returns the ``ChainTrace``
    to give ``pm.sample`` as ``trace``. Building the trace evaluates the variables once at the
    model's initial point, for their shapes (as ``pm.sample``'s own trace does)."""
    variables = trace_variables(model, var_names)
    with sampling_tolerance():
        trace = ChainTrace(model=model, vars=variables)
    step.record(model, variables, trace)
    return trace
