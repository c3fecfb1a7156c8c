r"""PyTensor Ops: the approximate marginal likelihood and the latent predictive.

``ApproxMarginalOp`` maps (K, theta, y) to

* ``log_z``: log q(y | K, theta) by EP, Laplace, mean field (I or II) or online ADF
  (``approximations.registry``),
* ``dlog_z_dK`` (n, n) and ``dlog_z_dtheta`` (p,): its gradient, computed in the same
  pass (the solver's fixed point gives both); ADF has none (NaN, and ``pullback``
  raises a clear error),
* ``loo`` (n,): the leave-one-out log predictive log q(y_i | y_{-i}, theta) from the
  cavity of EP or of Laplace's Gaussian, the pointwise term of PSIS-LOO for a
  non-factorising likelihood (Buerkner, Gabry & Vehtari 2021),
* ``n_iter`` and ``status`` diagnostics (0 converged, 1 not converged, 2 failed).

``pullback`` returns cotangent * gradient, so PyTensor's autodiff carries d/dK into
the hyperparameters of any ``pm.gp.cov`` kernel that built K (one reverse sweep).

Failures never reach the sampler as an exception or a NaN: after a non-converged EP
run the Op retries damped and sequential (``_solve_with_retries``); if the last run
is still not converged the value is used, status is 1 and an
``ApproximationFailedWarning`` names the hyperparameter values (from the optional,
gradient-disconnected fourth input); if the solver raises (K not positive definite,
an invalid likelihood parameter such as epsilon >= 0.5 drawn by the sampler) or any
output is not finite, it returns log_z = -inf with a zero gradient and status 2, so
NUTS rejects the point.

The common case inside a sampler (EP with the default schedule, labels -1/+1, valid
likelihood parameters, non-negative warm-start sites) runs through ``ep.ep_warm``, the
compiled loop and its converged outputs without ``ep``'s checks and result object; all
else, and every run it declines, goes through ``ep`` and the retries below.

Warm starts: the last few solutions are kept per thread (``PerThread``), so
process-based chains and nutpie's threads never share state, and the next start is
extrapolated from them along the sampler's trajectory (``WarmStarts``). The state does
not change the fixed point, only how fast it is reached, but it moves the returned
solution within the solver's tolerance; compiling a graph with the Op clears it
(``reset_warm_starts``), so that every sampling run starts alike and a seeded run
repeats itself.
"""

import contextlib
import copy
import dataclasses
import itertools
import os
import threading
import warnings
import weakref

import numba
import numpy as np
import pytensor.tensor as pt
from pytensor.compile import optdb
from pytensor.gradient import DisconnectedType, disconnected_type, grad_not_implemented
from pytensor.graph.basic import Apply
from pytensor.graph.op import Op
from pytensor.graph.rewriting.basic import in2out, node_rewriter

from .._numba_cache import cache_key
from ..approximations import registry
from ..approximations.ep import EPState, ep_warm
from ..approximations.registry import SOLVERS  # noqa: F401  (ops.multiclass reads it here)
from ..numerics.workspace import POOL
from ..validation import trusted_kernel
from . import thread_state

STATUS_CONVERGED, STATUS_NOT_CONVERGED, STATUS_FAILED = 0, 1, 2


def _new_counts():
    return {"evaluations": 0, "retries": 0, "not_converged": 0, "failed": 0}


class ApproximationFailedWarning(RuntimeWarning):
    """EP or Newton did not converge at some point, even after the retries.

    The value is used and the evaluation's status output is 1. (Failures, status 2,
    are not warned about: their value is -inf and the sampler rejects the point.)

    Examples
    --------
    >>> import warnings
    >>> with warnings.catch_warnings():   # doctest: +SKIP
    ...     warnings.simplefilter("ignore", pymc_gpc.ops.ApproximationFailedWarning)
    ...     idata = pymc_gpc.sample(model=model)
    >>> int((idata.sample_stats["y_status"] == 1).sum())   # doctest: +SKIP
    """


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


def prediction_options(options):
    """``options`` for a solve whose result only predicts: no gradient and no LOO terms."""
    return dict(options, with_grad=False, with_loo=False)


def _solve(approximation, K, y, lik, params, state, options):
    return registry.APPROXIMATIONS[approximation].solver(K, y, lik, params, state=state, **options)


def _retry_options(approximation, options):
    """The fallback schedule after a non-converged run: the registry's for the approximation's
    default structure (dense EP: damped, then sequential)."""
    return registry.get(approximation).retry_schedule(options)


def _solve_with_retries(approximation, K, y, lik, params, state, options, retry_options=None):
    """Solve, falling back on a cold start and then on ``_retry_options``.

    A warm start fitted to another K can be invalid at this one (negative EP sites of
    the step likelihood can make K^-1 + S indefinite): if the warm-started run raises a
    LinAlgError or gives a non-finite value, the solve is repeated from scratch. After a
    non-converged run the retry schedule is tried (cold starts); a retry that raises is
    skipped. Returns (result, number of retries taken); other exceptions, and a cold
    start's, propagate. ``retry_options``: a schedule replacing ``_retry_options`` (a prior
    structure without sequential EP, ``ops.sparse``).
    """
    schedule = _retry_options(approximation, options) if retry_options is None else retry_options
    retries = 0
    result = None
    try:
        result = _solve(approximation, K, y, lik, params, state, options)
    except np.linalg.LinAlgError:
        if state is None:
            raise
    if state is not None and (result is None or not np.isfinite(result.log_z)):
        retries += 1
        result = _solve(approximation, K, y, lik, params, None, options)
    for retry in schedule if not result.converged else []:
        retries += 1
        try:
            attempt = _solve(approximation, K, y, lik, params, None, retry)
        except np.linalg.LinAlgError:
            continue
        if np.isfinite(attempt.log_z) or not np.isfinite(result.log_z):
            result = attempt
        if result.converged:
            break
    return result, retries


class WarmStarts:
    r"""The last few solutions of one thread, and the warm start they suggest for a new point.

    NUTS evaluates the model along leapfrog trajectories: consecutive points are nearly
    collinear and equally spaced, and a new subtree starts one step beyond a point
    evaluated a few steps earlier. The guess for hyperparameters x is the stored
    solution s_a nearest to x, moved along the line to the stored solution s_b nearest
    to s_a's point (linear extrapolation of the solver state, a smooth function of the
    hyperparameters):

    .. math::

        s = s_a + t (s_a - s_b), \qquad t = \frac{(x - x_a)^T (x_a - x_b)}{|x_a - x_b|^2},

    used for 0 < t <= 2; otherwise s_a itself. A start error of O(h) becomes O(h^2)
    for a small step h; NUTS's steps on Pima are not small (median 2.6 in the
    log-hyperparameters) and the gain is slight: replaying 1,500 evaluations at tol
    1e-2 took 2.12 sweeps each against 2.14 from the nearest stored solution, 2.19 from
    the last one and about 6 cold (the first sweep's site change stays near 0.07 with
    any of these starts, also when extrapolating in K instead of the hyperparameters).
    A state array that is non-negative at s_a (EP's site precisions for log-concave
    likelihoods) but not after extrapolation falls back to s_a. With no
    hyperparameter vector (an Op built without the fourth input), the last solution.
    Points of one store share one length: a point of another length (``pymc_gpc.fit``'s
    handed-over solution has none) is guessed from the last solution and replaces the
    store when added.
    """

    def __init__(self, size=6):
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
        P = np.array(self.points)
        a = int(np.argmin(np.sum((P - x) ** 2, axis=1)))
        to_a = np.sum((P - P[a]) ** 2, axis=1)
        to_a[a] = np.inf
        b = int(np.argmin(to_a))
        d = P[a] - P[b]
        dd = float(d @ d)
        t = float((x - P[a]) @ d) / dd if dd > 0.0 else 0.0
        if not 0.0 < t <= 2.0:
            return self.states[a]
        return _extrapolate(self.states[a], self.states[b], t)


def _extrapolate(sa, sb, t):
    """sa + t (sa - sb), field by field (sa's where either lacks an optional field), or sa
    where that would turn a non-negative field negative."""
    moved = {}
    for field in dataclasses.fields(sa):
        if not field.metadata.get("extrapolate", True):  # kept from sa (e.g. EP's first_change)
            continue
        va, vb = getattr(sa, field.name), getattr(sb, field.name)
        if va is None or vb is None:  # an optional field one of the two lacks: sa's
            continue
        v = va + t * (va - vb)
        if np.min(va) >= 0.0 > np.min(v):
            return sa
        moved[field.name] = v
    return dataclasses.replace(sa, **moved)


class RecentResults:
    """The outputs of the last few evaluations of one thread, by input values.

    PyMC evaluates the model once more at every draw it keeps, to record the Op's
    diagnostics (``y_loo``, ``y_n_iter``, ``y_status``), at a point NUTS has just
    evaluated inside its trajectory; those evaluations (about 10 % of all on Pima) are
    answered from here. A result is looked up by the hyperparameter vector, the
    likelihood parameters and the labels (exact bytes), and returned only if K is also
    equal (a hit costs one comparison of K). Without a hyperparameter input nothing is
    kept. Arrays are copied in and out: PyTensor may overwrite an Op's outputs in place
    downstream (e.g. the cotangent times dlog_z/dK). Each entry holds two n x n arrays,
    so the number kept shrinks with n (16 up to n = 350, within ``MEMORY`` bytes).
    """

    MEMORY = 32e6

    def __init__(self, size=16):
        self.size = size
        self.entries = {}

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
            outputs = (*outputs[:loo_output], _deferred_loo(later, y.shape[0]), *outputs[loo_output + 1:])
            self.entries[key] = (stored, outputs, None)
        return tuple(POOL.copy(v) for v in outputs)

    def add(self, K, params, y, hyper, outputs, loo_later=None):
        """Store the outputs of an evaluation; ``loo_later``: a function computing the LOO
        output, which ``outputs`` then lacks (its LOO slot is a placeholder)."""
        if hyper.size == 0:
            return
        size = max(1, min(self.size, int(self.MEMORY // (16 * max(K.size, 1)))))
        while len(self.entries) >= size:
            self.entries.pop(next(iter(self.entries)))  # the oldest (dicts keep order)
        self.entries[self._key(params, y, hyper)] = (POOL.copy(K), tuple(POOL.copy(v) for v in outputs), loo_later)


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
    state, taking ``threading.local`` data with it (every evaluation then started cold:
    6.0 instead of 2.9 EP sweeps on Pima). The states of the ``size`` most recently used
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


def _thread_state():
    return {"warm": (None, None), "recent": RecentResults()}


def _write_outputs(output_storage, log_z, dK, dth, loo, n_iter, status):
    """The Op's six outputs, with the dtypes ``make_node`` declares."""
    output_storage[0][0] = np.asarray(log_z, dtype=float)
    output_storage[1][0] = dK
    output_storage[2][0] = np.asarray(dth, dtype=float).reshape(-1)
    output_storage[3][0] = np.asarray(loo, dtype=float)
    output_storage[4][0] = np.asarray(n_iter, dtype="int64")
    output_storage[5][0] = np.asarray(status, dtype="int64")


def _loo_or_placeholder(result, n):
    """The LOO output: the result's terms, or NaN where they were deferred (``loo_later``)."""
    return np.full(n, np.nan) if result.loo_later is not None else result.loo_log_p


# Every ApproxMarginalOp alive in this process, by id, for ``reset_warm_starts`` (not a
# WeakSet: Ops with equal props are equal and hash alike, and a set would keep one of them).
_LIVE_OPS = weakref.WeakValueDictionary()


def reset_warm_starts():
    """Clear the warm starts and recent results of every ``ApproxMarginalOp`` in this process.

    Compiling a graph with the Op does this already (``ApproxMarginalOp.reset_warm_starts``);
    call it to repeat a seeded run with a function compiled once, e.g. a
    ``nutpie.compile_pymc_model`` result passed to ``nutpie.sample`` twice.

    Examples
    --------
    >>> compiled = nutpie.compile_pymc_model(model)   # doctest: +SKIP
    >>> first = nutpie.sample(compiled, seed=1)       # doctest: +SKIP
    >>> pymc_gpc.reset_warm_starts()                  # doctest: +SKIP
    >>> again = nutpie.sample(compiled, seed=1)       # the same draws as ``first``  # doctest: +SKIP

    Returns
    -------
    None
    """
    for op in list(_LIVE_OPS.values()):
        op.reset_warm_starts()


class ApproxMarginalOp(Op):
    """log q(y | K, theta) with its gradient, for one approximation and likelihood type.

    Parameters
    ----------
    approximation : a key of ``approximations.registry.APPROXIMATIONS``: "ep", "laplace",
        "meanfield" or "adf".
    likelihood_type : a ``pymc_gpc.likelihoods.Likelihood`` subclass; its parameter
        values are the second input, so they may be random variables.
    options : tuple of (name, value) pairs passed to the solver, over the engine's
        defaults (EP's tol 1e-8), or over the registry's ``sampling_defaults`` (EP's tol 1e-2) where
        ``sampling`` is set.
    hyper_names : tuple of (name, size) pairs naming the optional fourth input, a
        vector of the model's hyperparameter values (gradient-disconnected). It is used
        only to name the point in the non-convergence warning.
    defer_loo : leave the ``loo`` output unfilled (NaN) and keep, with the recent results,
        a function that computes it; set only by the rewrite ``defer_unused_loo`` on an Op
        whose ``loo`` output the graph does not use (the logp and gradient a sampler
        runs), and the copy shares its original's warm starts and recent results, so the
        deterministics at a draw (``y_loo``) compute the LOO terms from the result NUTS
        already has.
    sampling : use the registry's ``sampling_defaults`` under the Op's options; set only by the rewrite
        ``use_sampling_tolerance`` on graphs compiled within ``sampling_tolerance()``
        (``pymc_gpc.sample``), on a copy that shares its warm starts with the other
        sampling copies of the same Op (not with the Op itself, whose recent results
        are at the engine's accuracy).

    ``counts`` (not a prop, not pickled) tallies, per Op instance, the evaluations,
    retries taken, non-converged and failed results since construction (diagnostics:
    increments from concurrent threads are not locked); its evaluations include those of
    the compiled path (``ops.compiled_ep``) under this Op's keys, which equal Ops on
    equal data share.

    Examples
    --------
    The GP classes build this Op; by hand:

    >>> from pymc_gpc.ops import ApproxMarginalOp
    >>> op = ApproxMarginalOp("ep", pymc_gpc.likelihoods.Probit)                    # doctest: +SKIP
    >>> outputs = op(K, params, y)   # log Z first; the LOO terms, iterations and status last  # doctest: +SKIP
    """

    __props__ = ("approximation", "likelihood_type", "options", "hyper_names", "defer_loo", "sampling")

    def __init__(self, approximation, likelihood_type, options=(), hyper_names=(), defer_loo=False,
                 sampling=False):
        registry.get(approximation)  # ValueError naming the known ones
        self.approximation = approximation
        self.likelihood_type = likelihood_type
        self.options = tuple(options)
        self.hyper_names = tuple((str(n), int(k)) for n, k in hyper_names)
        self.defer_loo = bool(defer_loo)
        self.sampling = bool(sampling)
        self._lik = likelihood_type()
        self._start_fresh()

    # The position of the ``loo`` output (``defer_loo``, ``RecentResults``).
    loo_output = 3

    # The prior's inputs come first (here K alone), then theta, y and the hyperparameters;
    # ``pymc_gpc.fit`` reads a node through these three (``ops.sparse`` has three inputs).
    n_kernel_inputs = 1

    @staticmethod
    def prior_from(K):
        """What the solvers take as the prior, from the values of the first inputs."""
        return K

    # The option sets tried after a non-converged run (``_solve_with_retries``), by approximation.
    retry_schedule_for = staticmethod(_retry_options)

    def retry_schedule(self, options):
        """The option sets tried after a non-converged run of this Op's approximation."""
        return self.retry_schedule_for(self.approximation, options)

    @staticmethod
    def kernel_cotangents(result):
        """The solver's gradient in each of the first inputs."""
        return (result.dlog_z_dK,)

    def _start_fresh(self):
        """No warm starts, zero counts, listed for ``reset_warm_starts`` (new or unpickled)."""
        self._shared = {}  # the per-thread state; one dict for an Op and its ``deferring_loo`` copies
        self.reset_warm_starts()
        self._counts = _new_counts()
        _LIVE_OPS[id(self)] = self

    @property
    def counts(self):
        """The evaluations, retries, non-converged and failed results (a new dict)."""
        counts = dict(self._counts)
        counts["evaluations"] += sum(thread_state.evaluations(k) for k in self._shared.get("compiled", ()))
        return counts

    def __getstate__(self):
        state = self.__dict__.copy()
        state.pop("_shared", None)
        state.pop("_counts", None)
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._start_fresh()

    def make_node(self, K, params, y, hyper=None):
        K = pt.as_tensor_variable(K).astype("float64")
        params = pt.as_tensor_variable(params).astype("float64")
        y = pt.as_tensor_variable(y).astype("float64")
        if hyper is None:
            hyper = pt.zeros((0,), dtype="float64")
        hyper = pt.as_tensor_variable(hyper).astype("float64")
        outputs = [
            pt.dscalar(),  # log_z
            pt.dmatrix(),  # dlog_z / dK
            pt.dvector(),  # dlog_z / dtheta
            pt.dvector(),  # loo
            pt.lscalar(),  # n_iter
            pt.lscalar(),  # status
        ]
        return Apply(self, [K, params, y, hyper], outputs)

    def reset_warm_starts(self):
        """Forget the warm starts and recent results of every thread: the next evaluation
        starts cold.

        Called whenever a graph holding this Op is compiled (``prepare_node`` for PyTensor's
        Python and C linkers, the numba ``funcify`` below), so every ``pm.sample`` starts
        from the same state and a run with a given ``random_seed`` repeats its draws exactly
        (its process-based chains fork after the compilation; the docs' diagnostics page,
        "Reproducibility", lists what still depends on history within the tolerance).
        Otherwise a run's warm starts would come from whatever the process evaluated
        before, and since warm starts move the solution within the solver's tolerance,
        the same seed would give different draws.
        """
        self._shared["threads"] = PerThread(_thread_state)
        for key in self._shared.get("compiled", ()):  # the compiled path's (``compiled_ep``)
            thread_state.reset(key)

    @property
    def _threads(self):
        return self._shared["threads"]

    def deferring_loo(self):
        """This Op with ``defer_loo`` set, sharing its warm starts and recent results."""
        twin = copy.copy(self)  # through __getstate__ / __setstate__: fresh counts
        twin.defer_loo = True
        twin._shared = self._shared
        return twin

    def sampling_twin(self):
        """This Op with ``sampling`` set; the sampling copies of one Op (and of its
        ``deferring_loo`` copies) share their warm starts and recent results."""
        twin = copy.copy(self)
        twin.sampling = True
        shared = self._shared.setdefault("sampling_shared", {})
        fresh = "threads" not in shared
        twin._shared = shared
        if fresh:
            twin.reset_warm_starts()
        return twin

    @property
    def compiles_ep(self):
        """Whether the numba implementation runs this Op's common case compiled
        (``ops.compiled_ep``): where ``COMPILED_EP`` is set, binary EP with the default
        schedule and one of the package's likelihoods."""
        from ..likelihoods.binary import LIKELIHOODS

        return (COMPILED_EP and type(self) is ApproxMarginalOp and self.approximation == "ep"
                and self.likelihood_type in LIKELIHOODS and dict(self.options).keys() <= {"tol", "max_sweeps"})

    def prepare_node(self, node, storage_map, compute_map, impl):
        self.reset_warm_starts()

    def _warm_starts(self, n):
        """This thread's ``WarmStarts`` for data of size n."""
        state = self._threads.get()
        if state["warm"][0] != n:
            state["warm"] = (n, WarmStarts())
        return state["warm"][1]

    def seed_warm_start(self, n, state):
        """Make ``state`` (a solver state for data of size n) this thread's warm start for the
        next evaluation without a hyperparameter input (``pymc_gpc.fit`` hands over its
        solution at the optimum)."""
        self._warm_starts(n).add(np.zeros(0), state)

    def _recent(self):
        """This thread's ``RecentResults``."""
        return self._threads.get()["recent"]

    def perform(self, node, inputs, output_storage):
        key = self._recent_key(inputs)
        recent = self._recent()
        outputs = recent.get(*key, loo_output=None if self.defer_loo else self.loo_output)
        if outputs is None:
            # Overflow at extreme hyperparameters is expected and handled: the result is
            # checked below and becomes -inf with status "failed", not a NumPy warning.
            with np.errstate(over="ignore", invalid="ignore", divide="ignore", under="ignore"):
                loo_later = self._perform(inputs, output_storage)
            recent.add(*key, tuple(s[0] for s in output_storage), loo_later)
            return
        for storage, value in zip(output_storage, outputs):
            storage[0] = value

    def _recent_key(self, inputs):
        """(kernel, theta, y, hyper): the values that identify an evaluation for ``_recent``."""
        K, params, y, hyper = (*inputs, np.zeros(0))[:4]
        return K, params, y, hyper

    def _describe_point(self, params, hyper):
        """'log_w=[...], log_v0=...' from the hyperparameter input, else the likelihood values."""
        parts, i = [], 0
        if hyper.size == sum(k for _, k in self.hyper_names):
            for name, k in self.hyper_names:
                vals = np.round(hyper[i : i + k], 4).tolist()
                parts.append(f"{name}={vals if k != 1 else vals[0]}")
                i += k
        if not parts:  # no hyperparameter input: name the likelihood parameters at least
            parts = [f"{n}={v:.4g}" for n, v in zip(self._lik.param_names, params)]
        return ", ".join(parts)

    def _solver_options(self):
        """The solver's options: the registry's ``sampling_defaults`` (with ``sampling``) or
        ``engine_defaults`` under the Op's, and the LOO deferred where ``defer_loo`` is set."""
        entry = registry.APPROXIMATIONS[self.approximation]
        defaults = entry.sampling_defaults if self.sampling else entry.engine_defaults
        options = {**defaults, **dict(self.options)}
        if self.defer_loo:
            options["with_loo"] = "deferred"
        return options

    def _perform(self, inputs, output_storage):
        """Solve and write the outputs; returns the result's ``loo_later`` (None unless the LOO
        output was deferred)."""
        hyper = inputs[3] if len(inputs) > 3 else np.zeros(0)
        warm = self._warm_starts(inputs[2].shape[0])
        state, loo_later = self._evaluate(inputs, warm.guess(hyper), output_storage)
        if state is not None:
            warm.add(hyper, state)
        return loo_later

    def _evaluate(self, inputs, guess, output_storage):
        """Solve from the warm start ``guess`` (a solver state or None) and write the outputs;
        returns (the solution's state to keep as a warm start, or None after a failure;
        the result's ``loo_later``)."""
        K, params, y = inputs[:3]
        hyper = inputs[3] if len(inputs) > 3 else np.zeros(0)
        n = y.shape[0]
        options = self._solver_options()
        self._counts["evaluations"] += 1
        fast = self._fast_ep(K, params, y, guess, options)
        if fast is not None:
            log_z, dK, dth, loo, sweeps, state = fast
            _write_outputs(output_storage, log_z, dK, dth, loo, sweeps, STATUS_CONVERGED)
            return state, None
        result, status, retries = None, STATUS_FAILED, 0
        try:  # ep() / laplace() reject non-finite or invalid inputs with ValueError
            with trusted_kernel():  # K comes from a covariance function: no extra PSD check
                result, retries = _solve_with_retries(self.approximation, K, y, self._lik, params, guess, options)
            ok = np.isfinite(result.log_z) and (
                result.dlog_z_dK is None  # ADF: no gradient (pullback refuses it)
                or (np.all(np.isfinite(result.dlog_z_dK)) and np.all(np.isfinite(result.dlog_z_dparams)))
            )
            status = (STATUS_CONVERGED if result.converged else STATUS_NOT_CONVERGED) if ok else STATUS_FAILED
        except (ValueError, ArithmeticError, np.linalg.LinAlgError):
            # NotPositiveDefiniteError is a LinAlgError; a ZeroDivisionError from compiled
            # code (a zero prior variance) is an ArithmeticError: the point is rejected
            status = STATUS_FAILED
        self._counts["retries"] += retries
        if status == STATUS_FAILED:
            self._counts["failed"] += 1
            _write_outputs(output_storage, -np.inf, np.zeros(K.shape), np.zeros(len(params)),
                           np.full(n, -np.inf), 0, status)
            return None, None
        if status == STATUS_NOT_CONVERGED:
            self._counts["not_converged"] += 1
            point = self._describe_point(params, hyper)
            warnings.warn(
                f"{self.approximation.upper()} did not converge at {point or 'this point'} "
                f"(mean diag(K) {np.mean(np.diagonal(K, axis1=-2, axis2=-1)):.3g}; last change {result.max_change:.2e} "
                f"after {retries} retr{'y' if retries == 1 else 'ies'} with damped/sequential "
                "updates). The value is used; the evaluation's status output is 1.",
                ApproximationFailedWarning,
                stacklevel=2,
            )
        no_grad = result.dlog_z_dK is None  # ADF: NaN, and pullback refuses (below)
        _write_outputs(
            output_storage,
            result.log_z,
            np.full((n, n), np.nan) if no_grad else result.dlog_z_dK,
            np.full(len(params), np.nan) if no_grad else result.dlog_z_dparams,
            _loo_or_placeholder(result, n),
            result.n_iter,
            status,
        )
        return result.state, result.loo_later

    def _fast_ep(self, K, params, y, state, options):
        """``ep.ep_warm`` where it applies, else None: EP with the default schedule (only
        tol / max_sweeps set), labels already -1/+1 in a vector matching an n x n K with
        finite entries, valid likelihood parameters and non-negative warm-start sites.
        Anything else, and any run ``ep_warm`` declines or that raises, goes through
        ``ep`` with its checks and retries (which give the error, or -inf, status 2)."""
        if self.approximation != "ep" or not options.keys() <= {"tol", "max_sweeps"}:
            return None
        n = y.shape[0] if y.ndim == 1 else 0
        if n == 0 or K.shape != (n, n) or y.dtype != np.float64 or not np.all(np.abs(y) == 1.0):
            return None
        if (state is not None and state.tau.min() < 0.0) or not np.isfinite(K).all() or K.diagonal().min() <= 0.0:
            return None
        try:
            th = self._lik.check_params(self._lik._th(params))
            return ep_warm(K, y, self._lik, th, state, **options)
        except (ValueError, ArithmeticError):
            return None

    def connection_pattern(self, node):
        # inputs K, params, y, hyper  x  outputs log_z, dK, dth, loo, n_iter, status
        return [
            [True, True, True, True, False, False],
            [True, True, True, True, False, False],
            [False] * 6,
            [False] * 6,
        ]

    def pullback(self, inputs, outputs, cotangents):
        K, params = inputs[:2]
        g = cotangents[0]
        for other in cotangents[1:4]:
            if not isinstance(other.type, DisconnectedType):
                return [
                    grad_not_implemented(self, 0, K, "second derivatives of the evidence"),
                    grad_not_implemented(self, 1, params, "second derivatives of the evidence"),
                    disconnected_type(),
                    disconnected_type(),
                ]
        if isinstance(g.type, DisconnectedType):
            return [disconnected_type()] * 4
        if not registry.APPROXIMATIONS[self.approximation].has_gradient:
            msg = ("the online (ADF) evidence has no gradient in pymc-gpc; use a gradient-free "
                   "step method, or MarginalEP / MarginalMeanField")
            return [grad_not_implemented(self, 0, K, msg), grad_not_implemented(self, 1, params, msg),
                    disconnected_type(), disconnected_type()]
        return [g * outputs[1], g * outputs[2], disconnected_type(), disconnected_type()]


@node_rewriter(None)
def defer_unused_loo(fgraph, node):
    """An ``ApproxMarginalOp`` whose ``loo`` output has no client in the graph (the logp and
    gradient that NUTS evaluates) becomes its ``deferring_loo`` copy."""
    op = node.op
    if not isinstance(op, ApproxMarginalOp) or op.defer_loo or not registry.APPROXIMATIONS[op.approximation].deferred_loo:
        return None
    if fgraph.clients.get(node.outputs[op.loo_output]):
        return None
    return op.deferring_loo().make_node(*node.inputs).outputs


# after the canonical rewrites and before in-place ones; in every mode that rewrites at all
optdb.register("pymc_gpc_defer_unused_loo", in2out(defer_unused_loo), "fast_run", "fast_compile", position=48.9)


@node_rewriter(None)
def use_sampling_tolerance(fgraph, node):
    """Within ``sampling_tolerance()``, an ``ApproxMarginalOp`` becomes its ``sampling_twin``."""
    op = node.op
    if not isinstance(op, ApproxMarginalOp) or op.sampling or not sampling_tolerance_active():
        return None
    return op.sampling_twin().make_node(*node.inputs).outputs


# before ``defer_unused_loo`` (whose copies keep the ``sampling`` prop)
optdb.register("pymc_gpc_sampling_tolerance", in2out(use_sampling_tolerance), "fast_run", "fast_compile",
               position=48.8)


def check_training_sizes(n, **shapes):
    """ValueError unless every leading dimension in ``shapes`` (name: shape) is the number
    ``n`` of training labels: a predictive Op given kernels of other training inputs (a
    training ``pm.Data`` container changed after ``marginal_likelihood``) says so instead of
    returning NaN."""
    bad = {name: tuple(int(v) for v in shape) for name, shape in shapes.items() if any(v != n for v in shape)}
    if bad:
        raise ValueError(
            f"the prediction's training kernels have shapes {bad} but there are {n} training labels: the training "
            "inputs changed after marginal_likelihood (pm.set_data on the training container?); put new inputs "
            "in a separate pm.Data container (e.g. pm.Data(\"X_new\", ...)) passed to gp.conditional"
        )


class LatentPredictiveOp(Op):
    """Mean and variance (or covariance) of f* under q, given (K, theta, y, K_cross, K_star).

    Inputs: K (n, n), theta (p,), y (n,), K_cross (n, m), K_star (m, m) or its
    diagonal (m,). Outputs: mean (m,) and the variance (m,) or covariance (m, m).
    No gradient: used for prediction and ``pm.sample_posterior_predictive``.

    Examples
    --------
    The GP classes build this Op; by hand:

    >>> from pymc_gpc.ops import LatentPredictiveOp
    >>> op = LatentPredictiveOp("ep", pymc_gpc.likelihoods.Probit)                    # doctest: +SKIP
    >>> mean, var = op(K, params, y, K_cross, k_star_diag)   # doctest: +SKIP
    """

    __props__ = ("approximation", "likelihood_type", "options", "full_cov")

    def __init__(self, approximation, likelihood_type, options=(), full_cov=False):
        self.approximation = approximation
        self.likelihood_type = likelihood_type
        self.options = tuple(options)
        self.full_cov = full_cov
        self._lik = likelihood_type()

    def make_node(self, K, params, y, K_cross, K_star):
        ins = [pt.as_tensor_variable(v).astype("float64") for v in (K, params, y, K_cross, K_star)]
        out_cov = pt.dmatrix() if self.full_cov else pt.dvector()
        return Apply(self, ins, [pt.dvector(), out_cov])

    def perform(self, node, inputs, output_storage):
        K, params, y, K_cross, K_star = inputs
        m = K_cross.shape[1]
        check_training_sizes(y.shape[0], K=K.shape, K_cross=K_cross.shape[:1])
        try:
            res = _solve(self.approximation, K, y, self._lik, params, None, prediction_options(self.options))
            mean = K_cross.T @ res.a
            if self.full_cov:
                V = res.posterior.R() @ K_cross
                cov = K_star - K_cross.T @ V
                output_storage[1][0] = 0.5 * (cov + cov.T)
            else:
                _, var = res.predict_latent(K_cross, K_star)
                output_storage[1][0] = var
            output_storage[0][0] = mean
        except (ValueError, np.linalg.LinAlgError):  # NotPositiveDefiniteError is a LinAlgError
            output_storage[0][0] = np.full(m, np.nan)
            output_storage[1][0] = np.full((m, m) if self.full_cov else m, np.nan)

    def pullback(self, inputs, outputs, cotangents):
        return [grad_not_implemented(self, i, v, "prediction has no gradient") for i, v in enumerate(inputs)]


# Whether binary EP's numba implementation is the compiled one (``ops.compiled_ep``: no
# Python, no GIL per evaluation) rather than the object-mode call of ``perform``; read when
# a graph is compiled (environment variable PYMC_GPC_COMPILED_EP=0 switches it off, or set
# this). It is faster per evaluation than the object-mode Op, with one thread and
# markedly with two (no GIL to share), and compiles as fast, since the engine is reached
# through a symbol (benchmarks/results/engine_notes.md).
COMPILED_EP = os.environ.get("PYMC_GPC_COMPILED_EP", "1") == "1"

# Ops whose numba implementation has been built in this process, by cache key
# (``_numba_key``), held weakly; the compiled graph names its Op by that key. Equal Ops
# on equal data share one key: the first one still alive answers (results are the
# same; its warm starts and ``counts`` are shared).
_NUMBA_OPS = {}


def _numba_key(op, node):
    """A key for ``op`` at ``node`` that is the same in every process: the Op's props
    and the data of its constant inputs (the labels, usually), hashed."""
    import hashlib

    parts = [type(op).__qualname__, [(k, repr(v)) for k, v in op._props_dict().items()]]
    for v in node.inputs:
        data = getattr(v, "data", None)
        if isinstance(data, np.ndarray):
            parts.append(hashlib.sha256(np.ascontiguousarray(data).tobytes()).hexdigest())
    return cache_key(*parts)


def _perform_registered(key, inputs):
    """Run the ``perform`` of the Op registered under ``key`` (called from compiled graphs)."""
    op, n_outputs = next((ref(), k) for ref, k in _NUMBA_OPS[key] if ref() is not None)
    storage = [[None] for _ in range(n_outputs)]
    op.perform(None, list(inputs), storage)  # neither Op's perform reads the node
    return tuple(s[0] for s in storage)


def _registered_op(key):
    """The first Op still alive among those registered under ``key``."""
    return next(ref() for ref, _ in _NUMBA_OPS[key] if ref() is not None)


def _fallback_ep(key, K, params, y, hyper, use_block, has_start, tau, nu, first_change):
    """The Python path of a compiled EP evaluation that ``compiled_ep.evaluate`` left undone,
    from its warm start (tau, nu, first_change where ``has_start``). Returns the six
    outputs as the compiled code declares them, then (whether there is a solution to keep,
    its tau, nu and first change). Without a block (``thread_state``'s table is full) the
    Op's ``perform`` with its Python state."""
    op = _registered_op(key)
    storage = [[None] for _ in range(6)]
    inputs = [K, params, y, hyper]
    state = None
    if not use_block:
        op.perform(None, inputs, storage)
    else:
        guess = EPState(tau.copy(), nu.copy(), first_change) if has_start else None
        with np.errstate(over="ignore", invalid="ignore", divide="ignore", under="ignore"):
            state, _ = op._evaluate(inputs, guess, storage)
    log_z, dK, dth, loo, n_iter, status = (s[0] for s in storage)
    outputs = (float(log_z), np.ascontiguousarray(dK, dtype=float), np.ascontiguousarray(dth, dtype=float),
               np.ascontiguousarray(loo, dtype=float), int(n_iter), int(status))
    if state is None:
        return (*outputs, False, np.zeros(y.shape[0]), np.zeros(y.shape[0]), np.inf)
    return (*outputs, True, np.ascontiguousarray(state.tau, dtype=float),
            np.ascontiguousarray(state.nu, dtype=float), float(state.first_change))


# The two object-mode steps of the compiled function, module-level and cached on disk
# (closures calling closures made PyTensor's cache of the whole graph miss: 9 s of
# compilation at every ``pm.sample``).
@numba.njit(cache=True)
def _allocate_block(key, n, p, q):
    with numba.objmode():
        thread_state.allocate(key, n, p, q)


@numba.njit(cache=True)
def _fallback_block(key, K, params, y, hyper, use_block, has, tau, nu, change):
    with numba.objmode(log_z="float64", dK="float64[:, ::1]", dth="float64[::1]", loo="float64[::1]",
                       n_iter="int64", status="int64", stored="boolean", tau_out="float64[::1]",
                       nu_out="float64[::1]", change_out="float64"):
        log_z, dK, dth, loo, n_iter, status, stored, tau_out, nu_out, change_out = _fallback_ep(
            key, K, params, y, hyper, use_block, has, tau, nu, change)
    return log_z, dK, dth, loo, n_iter, status, stored, tau_out, nu_out, change_out


def _release_if_unused(key):
    """Drop the compiled path's blocks of ``key`` once no Op of that key is alive (a
    finalizer: the release itself waits for the next block made, ``release_later``)."""
    if not any(ref() is not None for ref, _ in _NUMBA_OPS.get(key, ())):
        thread_state.release_later(key)


def _register_numba(op_types=None):
    """Run the Ops' Python ``perform`` from numba-compiled graphs, without a warning.

    The heavy lifting is LAPACK and ``nogil`` numba kernels already, so the object-mode
    call costs microseconds; registering it explicitly replaces PyTensor's fallback,
    which warns at every compilation. The object-mode block calls a module-level
    function with a string key (``_numba_key``) rather than a closure over the Op, so
    that numba can cache the whole compiled graph on disk: a model's logp and gradient
    then compile in well under a second from the second ``pm.sample`` on, instead of
    about 5 s each time.

    An Op whose ``compiles_ep`` is set (binary EP, by default) gets
    ``_compiled_ep_function`` instead: its common case runs without Python
    (``ops.compiled_ep``), the rest through ``_fallback_ep``.
    """
    try:
        import numba
        from pytensor.link.numba.dispatch.basic import (
            get_numba_type,
            numba_njit,
            register_funcify_and_cache_key,
        )
    except ImportError:  # pragma: no cover - numba backend unavailable
        return

    def funcify(op, node, **kwargs):
        key = _numba_key(op, node)
        refs = _NUMBA_OPS.setdefault(key, [])
        refs[:] = [r for r in refs if r[0]() is not None]
        if not any(r[0]() is op for r in refs):
            refs.append((weakref.ref(op), len(node.outputs)))
        compiled = getattr(op, "compiles_ep", False)
        if compiled and key not in op._shared.setdefault("compiled", set()):
            op._shared["compiled"].add(key)
            weakref.finalize(op, _release_if_unused, key)
        for ref, _ in refs:  # any of them may answer the compiled graph (``_perform_registered``)
            alive = ref()
            if alive is not None and hasattr(alive, "reset_warm_starts"):
                alive.reset_warm_starts()
        ret_sig = numba.types.Tuple([get_numba_type(o.type) for o in node.outputs])
        if compiled:
            thread_state.reset(key)
            return _compiled_ep_function(op, key, numba_njit, ret_sig), key + "_compiled"

        @numba_njit
        def perform(*inputs):
            with numba.objmode(ret=ret_sig):
                ret = _perform_registered(key, inputs)
            return ret

        return perform, key

    for op_type in op_types or (ApproxMarginalOp, LatentPredictiveOp):
        register_funcify_and_cache_key(op_type)(funcify)


_register_numba()


def _compiled_ep_function(op, key, numba_njit, ret_sig):
    """The numba implementation of an Op with ``compiles_ep``: ``compiled_ep``'s C function
    answers the common case without Python; the object-mode steps here make the thread's
    block when it has none (``_allocate_block``), run the Python path from the compiled
    warm start where it declined (``_fallback_block``, its result stored back by the second
    C function), and the Op's ``perform`` where its code raised."""
    from . import compiled_ep as C

    evaluate_at, store_at = C.external()
    h = thread_state.key_hash(key)
    kind, n_params = op._lik.kind, op._lik.n_params
    options = op._solver_options()
    tol, max_sweeps = float(options["tol"]), int(options.get("max_sweeps", 300))

    @numba_njit
    def approx_marginal_ep(K, params, y, hyper):
        n, p, q = y.shape[0], hyper.shape[0], params.shape[0]
        if K.shape[0] == n and K.shape[1] == n:  # else the Op's perform: -inf, status 2
            Kc, pc, yc, hc = (np.ascontiguousarray(K), np.ascontiguousarray(params), np.ascontiguousarray(y),
                              np.ascontiguousarray(hyper))
            dK, dth, loo, out = np.empty((n, n)), np.empty(q), np.empty(n), np.zeros(C.OUT)
            tau, nu = np.empty(n), np.empty(n)
            pointers = (Kc.ctypes, pc.ctypes, yc.ctypes, hc.ctypes, dK.ctypes, dth.ctypes, loo.ctypes, out.ctypes,
                        tau.ctypes, nu.ctypes)
            code = evaluate_at(h, kind, n_params, tol, max_sweeps, n, p, q, *pointers)
            if code == C.NO_BLOCK:
                _allocate_block(key, n, p, q)
                code = evaluate_at(h, kind, n_params, tol, max_sweeps, n, p, q, *pointers)
            if code == C.DONE:
                return np.asarray(out[0]), dK, dth, loo, np.asarray(np.int64(out[1])), np.asarray(np.int64(out[2]))
            if code != C.FAILED:  # declined, or no block (a full table): the Python path, from the warm start if any
                log_z, dK2, dth2, loo2, n_iter, status, stored, tau2, nu2, change = _fallback_block(
                    key, Kc, pc, yc, hc, code == C.DECLINED, out[C.HAS_START] > 0.0, tau, nu, out[C.FIRST_CHANGE])
                if code == C.DECLINED and dK2.shape == (n, n) and dth2.size == q and loo2.size == n:
                    out[0], out[1], out[2], out[C.HAS_START], out[C.FIRST_CHANGE] = log_z, n_iter, status, stored, change
                    store_at(h, n, p, q, Kc.ctypes, pc.ctypes, yc.ctypes, hc.ctypes, dK2.ctypes, dth2.ctypes,
                             loo2.ctypes, out.ctypes, tau2.ctypes, nu2.ctypes)
                return np.asarray(log_z), dK2, dth2, loo2, np.asarray(n_iter), np.asarray(status)
        with numba.objmode(ret=ret_sig):  # one block: two in one function failed LLVM's verifier
            ret = _perform_registered(key, (K, params, y, hyper))
        return ret

    return approx_marginal_ep
