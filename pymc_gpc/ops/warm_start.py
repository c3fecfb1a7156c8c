r"""What an evidence Op keeps between evaluations, per thread: warm starts extrapolated along
the sampler's trajectory (``WarmStarts``), the outputs of the last few evaluations
(``RecentResults``), and the per-thread store itself (``PerThread``). None of it changes
the solver's fixed point, only how fast it is reached (``ops.marginal``).
"""

import dataclasses
import itertools
import os
import threading

import numpy as np

from ..numerics.extrapolation import trajectory_weights
from ..numerics.workspace import POOL

__all__ = ["WarmStarts", "RecentResults", "PerThread", "new_thread_state"]


class WarmStarts:
    r"""The last few solutions of one thread, and the warm start they suggest for a new point.

    NUTS evaluates the model along leapfrog trajectories that curve and end at a U-turn,
    and starts each new one in a new direction from a point it has solved. The guess for
    hyperparameters x is the local linear model of the solver state (a smooth function of
    the hyperparameters) fitted to the stored points nearest x
    (``numerics.extrapolation.trajectory_weights``):

    .. math::

        s = s_a + \sum_j w_j (s_j - s_a),

    with s_a the stored solution nearest x, or s_a itself where the weights would be large.
    A state array that is non-negative at s_a (EP's site precisions for log-concave
    likelihoods) but not after extrapolation falls back to s_a. With no
    hyperparameter vector (an Op built without the fourth input), the last solution.
    Points of one store share one length: a point of another length (``pymc_gpc.fit``'s
    handed-over solution has none) is guessed from the last solution and replaces the
    store when added. ``size`` covers a typical trajectory (up to 16 points) with the draw's
    evaluation for the trace: that draw is one of the trajectory's points, and its own
    solution makes its solve one sweep.
    """

    def __init__(self, size=16):
        self.size = size
        self.points, self.states = [], []

    def add(self, x, state):
        x = np.array(x, dtype=float)
        if self.points and x.shape != self.points[-1].shape:
            self.points, self.states = [], []
        self.points.append(x)
        self.states.append(state)
        if len(self.points) > self.size:
            self.points.pop(0)
            self.states.pop(0)

    def guess(self, x):
        if not self.states:
            return None
        if x.size == 0 or len(self.states) == 1 or x.shape != self.points[-1].shape:
            return self.states[-1]
        a, js, w = trajectory_weights(np.array(self.points), np.asarray(x, dtype=float))
        if w.size == 0:
            return self.states[a]
        return _extrapolate(self.states[a], [self.states[j] for j in js], w)


def _extrapolate(sa, others, w):
    """sa + sum_j w_j (others_j - sa), field by field (sa's where any lacks an optional
    field), or sa where that would turn a non-negative field negative."""
    moved = {}
    for field in dataclasses.fields(sa):
        if not field.metadata.get("extrapolate", True):  # kept from sa (e.g. EP's first_change)
            continue
        va = getattr(sa, field.name)
        vs = [getattr(s, field.name) for s in others]
        if va is None or any(v is None for v in vs):  # an optional field one lacks: sa's
            continue
        v = np.array(va, dtype=float)
        for wj, vj in zip(w, vs):
            v += wj * (vj - va)
        if np.min(va) >= 0.0 > np.min(v):
            return sa
        moved[field.name] = v
    return dataclasses.replace(sa, **moved)


class RecentResults:
    """The outputs of the last few evaluations of one thread, by input values.

    The trace records the Op's diagnostics (``y_loo``, ``y_n_iter``, ``y_status``) at each
    draw, a point NUTS has just evaluated inside its trajectory; those evaluations are
    answered from here (by the light results, ``get_light``, for the Op's ``light`` copy in a
    chain's trace function, ``estimation.chain_trace``). A result is looked
    up by the hyperparameter vector, the likelihood parameters and the labels (exact
    bytes), and returned only if K is also equal (a hit costs one comparison of K).
    Without a hyperparameter input nothing is kept. Arrays are copied in and out:
    PyTensor may overwrite an Op's outputs in place downstream (e.g. the cotangent times
    dlog_z/dK). Each entry holds two n x n arrays, so the number kept shrinks with n (16
    up to n = 350, within ``MEMORY`` bytes); an entry larger than ``MEMORY`` is not kept
    (dense n above about 1,400; FITC's m x n cotangent at 50,000 rows and m = 200 is
    80 MB, whose copy cost 10 ms of a 0.3 s evaluation): NUTS's one repeated point, the
    start of each iteration, is answered before the Op (``estimation.sampling.TrajectoryCache``).
    The light results are kept either way.
    """

    MEMORY = 32e6
    # The light results (every output but the kernel cotangents: O(n) each) of the last
    # evaluations, for an Op's ``light`` copy, which a chain's trace function holds
    # (``estimation.chain_trace``): a NUTS trajectory has up to 2^depth points, and its draw
    # may be any of them. As many as ``LIGHT_MEMORY`` bytes hold, at most ``LIGHT_SIZE``.
    LIGHT_MEMORY = 64e6
    LIGHT_SIZE = 256

    def __init__(self, size=16):
        self.size = size
        self.entries = {}
        self.light = {}

    @staticmethod
    def _key(params, y, hyper):
        return hyper.tobytes(), params.tobytes(), y.tobytes()

    def get(self, K, params, y, hyper, loo_output=None):
        """The outputs stored for these inputs, or None. ``loo_output``: the index of the
        LOO output, which the caller needs: an entry stored with its LOO terms deferred
        computes them now (once; ``add``'s ``loo_later``)."""
        if hyper.size == 0:
            return None
        key = self._key(params, y, hyper)
        entry = self.entries.get(key)
        if entry is None or entry[0].shape != K.shape or not np.array_equal(entry[0], K):
            return None
        stored, outputs, later = entry
        if later is not None and loo_output is not None:
            outputs = _with_loo(outputs, later, loo_output, y.shape[0])
            self.entries[key] = (stored, outputs, None)
        return tuple(POOL.copy(v) for v in outputs)

    def add(self, K, params, y, hyper, outputs, loo_later=None, cotangents=()):
        """Store the outputs of an evaluation; ``loo_later``: a function computing the LOO
        output, which ``outputs`` then lacks (its LOO slot is a placeholder). ``cotangents``:
        the positions of the kernel cotangents, left out of the light results."""
        if hyper.size == 0:
            return
        key = self._key(params, y, hyper)
        entry_bytes = 8 * (np.size(K) + sum(np.size(v) for v in outputs))
        full = min(self.size, int(self.MEMORY // max(entry_bytes, 1)))
        while len(self.entries) >= max(full, 1):
            self.entries.pop(next(iter(self.entries)))  # the oldest (dicts keep order)
        if full:
            self.entries[key] = (POOL.copy(K), tuple(POOL.copy(v) for v in outputs), loo_later)
        light = tuple(None if i in cotangents else np.array(v, copy=True) for i, v in enumerate(outputs))
        size = max(1, min(self.LIGHT_SIZE, int(self.LIGHT_MEMORY // sum(8 * np.size(v) + 64 for v in light))))
        if loo_later is not None:  # it holds the solver's posterior (as large as K): no longer than there
            size = min(size, max(full, 1))
        self.light.pop(key, None)
        while len(self.light) >= size:
            self.light.pop(next(iter(self.light)))
        self.light[key] = (light, loo_later)

    def get_light(self, params, y, hyper, loo_output):
        """The light results stored for these hyperparameters, parameters and labels (the
        kernel cotangents None), or None. Not checked against the kernel matrix: only for a
        function evaluated within one sampling run, where the data are fixed (compiling a
        graph with the Op clears the results)."""
        if hyper.size == 0:
            return None
        key = self._key(params, y, hyper)
        entry = self.light.get(key)
        if entry is None:
            return None
        outputs, later = entry
        if later is not None and loo_output is not None:
            outputs = _with_loo(outputs, later, loo_output, y.shape[0])
            self.light[key] = (outputs, None)
        return tuple(None if v is None else np.array(v, copy=True) for v in outputs)


def _with_loo(outputs, later, loo_output, n):
    """``outputs`` with the LOO slot ``loo_output`` filled by the deferred ``later``."""
    return (*outputs[:loo_output], _deferred_loo(later, n), *outputs[loo_output + 1:])


def _deferred_loo(later, n):
    """The n LOO terms from a solver's ``loo_later``; -inf where they cannot be computed
    (as for a failed evaluation)."""
    try:
        with np.errstate(over="ignore", invalid="ignore", divide="ignore", under="ignore"):
            return np.asarray(later(), dtype=float)
    except (ValueError, ArithmeticError, np.linalg.LinAlgError):
        return np.full(n, -np.inf)


class PerThread:
    """Per-thread state of an Op (warm starts, recent results), keyed by OS thread id.

    Not ``threading.local``: nutpie's chains are Rust threads that enter Python through
    numba's object-mode blocks, and each entry creates and then destroys a Python thread
    state, taking ``threading.local`` data with it. The states of the ``size`` most recently used
    threads are kept (default: twice the CPU count, at least 32); a finished thread's id
    may be reused, which at worst gives a new thread a warm start from another chain
    (results stay within tolerance). The dict is only changed under the lock; a hit
    only stamps its entry's last use.
    """

    def __init__(self, factory, size=None):
        self.factory = factory
        self.size = size or max(32, 2 * (os.cpu_count() or 1))
        self.items = {}  # thread id -> [last use, state]
        self._clock = itertools.count()
        self._lock = threading.Lock()

    def get(self):
        key = threading.get_ident()
        entry = self.items.get(key)
        if entry is None:
            with self._lock:
                while len(self.items) >= self.size:  # drop the least recently used
                    del self.items[min(self.items, key=lambda k: self.items[k][0])]
                entry = self.items.setdefault(key, [0, self.factory()])
        entry[0] = next(self._clock)
        return entry[1]


def new_thread_state():
    return {"warm": (None, None), "recent": RecentResults()}
