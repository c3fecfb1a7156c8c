"""The PyTensor Op of the approximate marginal likelihood, one class for every prior structure.

``ApproxMarginalOp`` maps (kernel inputs, theta, y[, hyper]) to log q(y | K, theta), one
gradient per kernel input and dlog_z/dtheta (from the solver's fixed point, in the same
pass), the LOO terms log q(y_i | y_{-i}, theta) (the pointwise term of PSIS-LOO for a
non-factorising likelihood, Buerkner, Gabry & Vehtari 2021), and ``n_iter`` and ``status``
(0 converged, 1 not converged, 2 failed). ``pullback`` returns cotangent * gradient, so
autodiff carries it into any ``pm.gp.cov`` kernel's hyperparameters and into random
inducing inputs.

Failures never reach the sampler as an exception or a NaN: a non-converged run is retried
along the structure's schedule (``approximations.solve.solve_with_retries``); if the last
run is still not converged the value is used, status is 1 and an
``ApproximationFailedWarning`` names the hyperparameter values; if the solver raises or an
output is not finite, log_z = -inf with a zero gradient and status 2, so NUTS rejects the
point. The sampler's common case (dense binary EP, default schedule) runs through
``ep.ep_warm``.

Backends register their implementations from outside (``pymc_gpc/__init__``); a backend
with solver state of its own attaches it with ``attach_backend_state``. Warm starts are
kept per thread and extrapolated along the sampler's trajectory (``ops.warm_start``); they
move the solution only within the solver's tolerance, and compiling a graph with the Op
clears them (``reset_warm_starts``), so a seeded run repeats itself.
"""

import copy
import uuid
import warnings
import weakref

import numpy as np
import pytensor.tensor as pt
from pytensor.gradient import DisconnectedType, disconnected_type, grad_not_implemented
from pytensor.graph.basic import Apply
from pytensor.graph.op import Op

from ..approximations import registry
from ..approximations.ep import ROUGH_TOL, ep_warm
from ..approximations.solve import solve_with_retries
from ..likelihoods.multiclass import MulticlassLikelihood
from ..structures.select import DENSE_BINARY
from ..validation import trusted_kernel
from .warm_start import PerThread, WarmStarts, new_thread_state

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


def check_structure(structure, approximation, likelihood_type):
    """ValueError unless ``structure`` (a ``structures.base.PriorStructure``) takes the
    family of ``likelihood_type`` (several classes or one latent GP) and is served by
    ``approximation`` (``registry.check_structure``, naming the approximations that are)."""
    if not hasattr(structure, "n_kernel_inputs") or not hasattr(structure, "prior_from"):
        raise ValueError(f"structure must be a prior structure of structures.select.STRUCTURES, got {structure!r}")
    multiclass = isinstance(likelihood_type, type) and issubclass(likelihood_type, MulticlassLikelihood)
    if multiclass != structure.multiclass:
        family = "a multi-class" if multiclass else "a binary or ordinal"
        raise ValueError(f"the {structure.name} prior structure does not take {family} likelihood "
                         f"({getattr(likelihood_type, '__name__', likelihood_type)})")
    registry.check_structure(approximation, structure.name)


def _write_outputs(output_storage, log_z, cotangents, dth, loo, n_iter, status):
    """The Op's outputs, with the dtypes ``make_node`` declares: log_z, one gradient per
    kernel input (``cotangents``), the gradient in theta, the LOO terms, n_iter, status."""
    k = len(cotangents)
    output_storage[0][0] = np.asarray(log_z, dtype=float)
    for j, g in enumerate(cotangents):
        output_storage[1 + j][0] = np.asarray(g, dtype=float)
    output_storage[k + 1][0] = np.asarray(dth, dtype=float).reshape(-1)
    output_storage[k + 2][0] = np.asarray(loo, dtype=float)
    output_storage[k + 3][0] = np.asarray(n_iter, dtype="int64")
    output_storage[k + 4][0] = np.asarray(status, dtype="int64")


def _loo_or_placeholder(result, n):
    """The LOO output: the result's terms, or NaN where they were deferred (``loo_later``)."""
    return np.full(n, np.nan) if result.loo_later is not None else result.loo_log_p


# Every ApproxMarginalOp alive in this process, by id, for ``reset_warm_starts`` (not a
# WeakSet: Ops with equal props are equal and hash alike, and a set would keep one of them).
_LIVE_OPS = weakref.WeakValueDictionary()


class _SharedState(dict):
    """The warm starts, recent results and backend state that the copies of one Op share
    (a dict that a ``WeakValueDictionary`` can hold)."""


# Each Op lineage's shared state in this process, by (lineage, sampling): an Op, its
# ``deferring_loo`` and ``sampling_twin`` copies and the copies that pickling makes share
# one. PyMC gives each chain its own copy of the sampler's compiled function and compiles
# the trace's deterministics (the Op's ``loo``, ``n_iter``, ``status``) apart; with one state,
# the draw's evaluation for the trace finds the trajectory's solutions (a warm start at or
# next to its point, or its result), not the previous draw's.
_SHARED_STATES = weakref.WeakValueDictionary()


def _shared_state(lineage, sampling):
    """(the shared state of ``lineage`` at ``sampling``, whether it is new)."""
    key = (lineage, bool(sampling))
    state = _SHARED_STATES.get(key)
    if state is not None:
        return state, False
    state = _SHARED_STATES[key] = _SharedState()
    return state, True


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
    """log q(y | prior, theta) with its gradient, for one prior structure, approximation and
    likelihood type.

    Inputs: the structure's ``n_kernel_inputs`` kernel tensors (dense: K (n, n); FITC:
    K_uu (m, m), K_uf (m, n), diag K_ff (n,); several classes: one slice per class),
    theta (p,), y (n,) and the optional hyperparameter vector. Outputs: log_z, one gradient
    per kernel input (shaped as it), dlog_z/dtheta (p,), loo (n,), n_iter, status.

    Parameters
    ----------
    approximation : a key of ``approximations.registry.APPROXIMATIONS``: "ep", "laplace",
        "meanfield" or "adf" (a registry name; its solver follows the likelihood's family).
        ValueError unless it serves ``structure``.
    likelihood_type : a ``pymc_gpc.likelihoods.Likelihood`` subclass (a
        ``MulticlassLikelihood`` one for the multi-class structures); its parameter values
        are the theta input, so they may be random variables.
    options : tuple of (name, value) pairs passed to the solver, over the engine's
        defaults (EP's tol 1e-8), or over the registry's ``sampling_defaults`` (EP's tol 1e-2) where
        ``sampling`` is set.
    hyper_names : tuple of (name, size) pairs naming the optional last input, a
        vector of the model's hyperparameter values (gradient-disconnected). It is used
        only to name the point in the non-convergence warning.
    defer_loo : leave the ``loo`` output NaN and keep a function that computes it with the
        recent results; set only by the rewrite ``defer_unused_loo`` (on a copy sharing the
        original's warm starts, so ``y_loo`` at a draw reuses NUTS's result).
    sampling : use the registry's ``sampling_defaults`` under the Op's options; set only by the
        rewrite ``use_sampling_tolerance`` within ``sampling_tolerance()``.
    light : the kernel cotangent outputs are empty, and a point its lineage has solved in this
        thread (the same hyperparameters, parameters and labels) is answered from the recent
        light results without comparing the kernel input; set only on the copies in a
        chain's trace function (``light_twin``, ``estimation.chain_trace``), which runs within
        one sampling run, where the data are fixed.
    structure : the prior structure (``structures.select``: ``DENSE_BINARY``, the default,
        ``FITC_BINARY``, ``DENSE_MULTICLASS``, ``FITC_MULTICLASS``), as
        ``select_structure`` returns it.

    Notes
    -----
    ``counts`` (not a prop, not pickled, not locked) tallies per Op the evaluations, retries,
    non-converged and failed results, those of an attached backend state included.

    Examples
    --------
    The GP classes build this Op; by hand:

    >>> from pymc_gpc.ops import ApproxMarginalOp
    >>> from pymc_gpc.structures.select import FITC_BINARY
    >>> op = ApproxMarginalOp("ep", pymc_gpc.likelihoods.Probit)                    # doctest: +SKIP
    >>> outputs = op(K, params, y)   # log Z first; the LOO terms, iterations and status last  # doctest: +SKIP
    >>> fitc = ApproxMarginalOp("ep", pymc_gpc.likelihoods.Probit, structure=FITC_BINARY)   # doctest: +SKIP
    >>> outputs = fitc(Kuu, Kuf, k_diag, params, y)                                   # doctest: +SKIP
    """

    __props__ = ("structure", "approximation", "likelihood_type", "options", "hyper_names", "defer_loo", "sampling",
                 "light")

    def __init__(self, approximation, likelihood_type, options=(), hyper_names=(), defer_loo=False,
                 sampling=False, structure=DENSE_BINARY, light=False):
        check_structure(structure, approximation, likelihood_type)
        self.structure = structure
        self.approximation = approximation
        self.likelihood_type = likelihood_type
        self.options = tuple(options)
        self.hyper_names = tuple((str(n), int(k)) for n, k in hyper_names)
        self.defer_loo = bool(defer_loo)
        self.sampling = bool(sampling)
        self.light = bool(light)
        self.likelihood = likelihood_type()
        self._lineage = uuid.uuid4().hex  # kept by copies and pickles: ``_shared_state``
        self._start_fresh()

    @property
    def n_kernel_inputs(self):
        """How many kernel tensors come first (the structure's); ``pymc_gpc.fit`` reads a node
        through this, the structure's ``prior_from`` and ``kernel_cotangents``."""
        return self.structure.n_kernel_inputs

    @property
    def loo_output(self):
        """The position of the ``loo`` output (``defer_loo``, ``RecentResults``)."""
        return self.structure.n_kernel_inputs + 2

    def retry_schedule(self, options):
        """The option sets tried after a non-converged run: the registry's schedule for this
        Op's approximation under its structure (one lookup)."""
        return registry.get(self.approximation).retry_schedule(options, self.structure.name)

    def _start_fresh(self):
        """Zero counts, listed for ``reset_warm_starts`` (new or unpickled); the lineage's
        shared state (``_shared_state``), with no warm starts where it is new."""
        self.__dict__.setdefault("_lineage", uuid.uuid4().hex)  # an Op pickled before lineages
        self.__dict__.setdefault("light", False)  # or before light copies
        self._shared, fresh = _shared_state(self._lineage, self.sampling)
        if fresh:
            self.reset_warm_starts()
        self._counts = _new_counts()
        _LIVE_OPS[id(self)] = self

    def attach_backend_state(self, key, reset, evaluations):
        """Attach state that a backend keeps for this Op under ``key`` (shared by the Op's
        ``deferring_loo`` copies): ``reset(key)`` is called by ``reset_warm_starts``, and
        ``evaluations(key)`` (the evaluations answered there) is added to ``counts``.
        Returns whether ``key`` was new; the state is not pickled."""
        attached = self._shared.setdefault("backend", {})
        if key in attached:
            return False
        attached[key] = (reset, evaluations)
        return True

    @property
    def backend_state_keys(self):
        """The keys of the backend state attached with ``attach_backend_state`` (a tuple)."""
        return tuple(self._shared.get("backend", ()))

    @property
    def counts(self):
        """The evaluations, retries, non-converged and failed results (a new dict)."""
        counts = dict(self._counts)
        counts["evaluations"] += sum(evaluations(k) for k, (_, evaluations) in self._shared.get("backend", {}).items())
        return counts

    def __getstate__(self):
        state = self.__dict__.copy()
        state.pop("_shared", None)
        state.pop("_counts", None)
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._start_fresh()

    def make_node(self, *inputs):
        """Inputs: the structure's kernel tensors (ValueError for a wrong number of
        dimensions), theta, y and optionally the hyperparameter vector (None: none)."""
        k = self.structure.n_kernel_inputs
        if len(inputs) == k + 3 and inputs[-1] is None:
            inputs = inputs[:-1]
        if len(inputs) not in (k + 2, k + 3):
            raise TypeError(f"the {self.structure.name} evidence Op takes {k} kernel inputs, theta, y and optionally "
                            f"the hyperparameters: {k + 2} or {k + 3} inputs, got {len(inputs)}")
        ins = [pt.as_tensor_variable(v).astype("float64") for v in inputs]
        for name, v, nd in zip(self.structure.kernel_names, ins, self.structure.kernel_ndims):
            if v.ndim != nd:
                hint = " (one slice per class)" if self.structure.multiclass else ""
                raise ValueError(f"{name} must have {nd} dimensions{hint}, got {v.ndim}")
        if len(ins) == k + 2:
            ins.append(pt.zeros((0,), dtype="float64"))
        kernel_grads = [pt.tensor(dtype="float64", shape=(None,) * nd) for nd in self.structure.kernel_ndims]
        outputs = [pt.dscalar(), *kernel_grads, pt.dvector(), pt.dvector(), pt.lscalar(), pt.lscalar()]
        return Apply(self, ins, outputs)

    def reset_warm_starts(self):
        """Forget the warm starts and recent results of every thread (and of an attached backend
        state): the next evaluation starts cold.

        Called whenever a graph holding this Op is compiled (``prepare_node``, the numba
        ``funcify``), so that every ``pm.sample`` starts from the same state and a seeded run
        repeats its draws (warm starts move the solution within the solver's tolerance).
        """
        self._shared["threads"] = PerThread(new_thread_state)
        for key, (reset, _) in self._shared.get("backend", {}).items():
            reset(key)

    @property
    def _threads(self):
        return self._shared["threads"]

    def deferring_loo(self):
        """This Op with ``defer_loo`` set, sharing its warm starts and recent results."""
        twin = copy.copy(self)  # through __getstate__ / __setstate__: fresh counts, this lineage's state
        twin.defer_loo = True
        return twin

    def light_twin(self):
        """This Op with ``light`` set, sharing its warm starts and recent results."""
        twin = copy.copy(self)
        twin.light = True
        return twin

    @property
    def cotangent_outputs(self):
        """The positions of the kernel cotangent outputs (1 to ``n_kernel_inputs``)."""
        return tuple(range(1, self.structure.n_kernel_inputs + 1))

    def sampling_twin(self):
        """This Op with ``sampling`` set; the sampling copies of one Op (and of its
        ``deferring_loo`` copies) share their warm starts and recent results."""
        twin = copy.copy(self)
        twin.sampling = True
        twin._start_fresh()  # the lineage's sampling state
        return twin

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

    def light_outputs(self, params, y, hyper):
        """The outputs of a ``light`` evaluation at (theta, y, hyper) from this thread's light
        results (the kernel cotangents empty), or None where its lineage has not solved the point
        (``RecentResults.get_light``; no kernel input is compared or needed)."""
        outputs = self._recent().get_light(params, y, hyper, None if self.defer_loo else self.loo_output)
        if outputs is None:
            return None
        kernel_ndims = self.structure.kernel_ndims
        return [np.zeros((0,) * kernel_ndims[i - 1]) if v is None else v for i, v in enumerate(outputs)]

    def perform(self, node, inputs, output_storage):
        key = self._recent_key(inputs)
        recent = self._recent()
        loo_output = None if self.defer_loo else self.loo_output
        outputs = self.light_outputs(*key[1:]) if self.light else None
        if outputs is None:
            outputs = recent.get(*key, loo_output=loo_output)
        if outputs is None:
            # Overflow at extreme hyperparameters is expected and handled: the result is
            # checked below and becomes -inf with status "failed", not a NumPy warning.
            with np.errstate(over="ignore", invalid="ignore", divide="ignore", under="ignore"):
                loo_later = self._perform(inputs, output_storage)
            recent.add(*key, tuple(s[0] for s in output_storage), loo_later, self.cotangent_outputs)
            return
        for storage, value in zip(output_storage, outputs):
            storage[0] = value

    def _recent_key(self, inputs):
        """(the structure's ``point_input``, theta, y, hyper): the values that identify an
        evaluation for ``_recent``."""
        kernels, params, y, hyper = self._split(inputs)
        point = self.structure.point_input
        if isinstance(point, tuple):  # several inputs (HSGP's S and X): their values, concatenated
            return np.concatenate([np.ravel(kernels[i]) for i in point]), params, y, hyper
        return kernels[point], params, y, hyper

    def _describe_point(self, params, hyper):
        """'log_w=[...], log_v0=...' from the hyperparameter input, else the likelihood values."""
        parts, i = [], 0
        if hyper.size == sum(k for _, k in self.hyper_names):
            for name, k in self.hyper_names:
                vals = np.round(hyper[i : i + k], 4).tolist()
                parts.append(f"{name}={vals if k != 1 else vals[0]}")
                i += k
        if not parts:  # no hyperparameter input: name the likelihood parameters at least
            parts = [f"{n}={v:.4g}" for n, v in zip(self.likelihood.param_names, params)]
        return ", ".join(parts)

    def solver_options(self, cold=False):
        """The solver's options (a new dict): the registry's ``sampling_defaults`` (with ``sampling``)
        or ``engine_defaults`` under the Op's, and the LOO deferred where ``defer_loo`` is set.

        ``cold``: for a solve from no warm start, ``tol`` is the smaller of the sampler's and the
        engine's (``backends.numba.thread_state.solve_tolerance``).
        """
        entry = registry.solver_for(self.approximation, self.likelihood_type)
        defaults = entry.sampling_defaults if self.sampling else entry.engine_defaults
        options = {**defaults, **dict(self.options)}
        engine_tol = {**entry.engine_defaults, **dict(self.options)}.get("tol")
        if cold and "tol" in options and engine_tol is not None:
            options["tol"] = min(options["tol"], engine_tol)
        if self.defer_loo:
            options["with_loo"] = "deferred"
        return options

    def _split(self, inputs):
        """(kernel input arrays, theta, y, hyper) from the Op's inputs (hyper empty if absent)."""
        k = self.structure.n_kernel_inputs
        hyper = inputs[k + 2] if len(inputs) > k + 2 else np.zeros(0)
        return tuple(inputs[:k]), inputs[k], inputs[k + 1], hyper

    def _perform(self, inputs, output_storage):
        """Solve and write the outputs; returns the result's ``loo_later`` (None unless the LOO
        output was deferred)."""
        _, _, y, hyper = self._split(inputs)
        warm = self._warm_starts(y.shape[0])
        state, loo_later = self.evaluate(inputs, warm.guess(hyper), output_storage)
        if state is not None:
            warm.add(hyper, state)
        return loo_later

    def evaluate(self, inputs, guess, output_storage):
        """Solve at ``inputs`` from the warm start ``guess`` (a solver state or None) into
        ``output_storage``, without touching this thread's warm starts or recent results: the
        Python path of a backend with its own state. Failures are outputs (-inf, status 2).

        Returns
        -------
        state : the solution's solver state; None after a failure.
        loo_later : the result's deferred LOO function (None unless ``defer_loo``).
        """
        kernels, params, y, hyper = self._split(inputs)
        n = y.shape[0]
        options = self.solver_options(cold=guess is None)
        self._counts["evaluations"] += 1
        fast = self._fast_ep(kernels[0], params, y, guess, options)
        if fast is not None:
            log_z, dK, dth, loo, sweeps, state = fast
            _write_outputs(output_storage, log_z, (dK,), dth, loo, sweeps, STATUS_CONVERGED)
            return state, None
        structure = self.structure
        result, status, retries = None, STATUS_FAILED, 0
        try:  # the solvers (and FITCPrior) reject non-finite or invalid inputs with ValueError
            # at the sampler's tolerances a structure may round its prior's products (FITC's V)
            prior = structure.prior_from(*kernels, rough=options.get("tol", 0.0) >= ROUGH_TOL)
            with trusted_kernel():  # K comes from a covariance function: no extra PSD check
                result, retries = solve_with_retries(self.approximation, prior, y, self.likelihood, params, guess,
                                                      options, self.retry_schedule(options))
            ok = np.isfinite(result.log_z) and (
                result.dlog_z_dK is None  # ADF: no gradient (pullback refuses it)
                or (all(np.all(np.isfinite(g)) for g in structure.kernel_cotangents(result))
                    and np.all(np.isfinite(result.dlog_z_dparams)))
            )
            status = (STATUS_CONVERGED if result.converged else STATUS_NOT_CONVERGED) if ok else STATUS_FAILED
        except (ValueError, ArithmeticError, np.linalg.LinAlgError):
            # NotPositiveDefiniteError is a LinAlgError; a ZeroDivisionError from compiled
            # code (a zero prior variance) is an ArithmeticError: the point is rejected
            status = STATUS_FAILED
        self._counts["retries"] += retries
        if status == STATUS_FAILED:
            self._counts["failed"] += 1
            _write_outputs(output_storage, -np.inf, tuple(np.zeros(np.shape(a)) for a in kernels),
                           np.zeros(len(params)), np.full(n, -np.inf), 0, status)
            return None, None
        if status == STATUS_NOT_CONVERGED:
            self._counts["not_converged"] += 1
            message = structure.not_converged_message(self.approximation, self._describe_point(params, hyper),
                                                      kernels, result, retries)
            warnings.warn(message, ApproximationFailedWarning, stacklevel=2)
        no_grad = result.dlog_z_dK is None  # ADF: NaN, and pullback refuses (below)
        cotangents = (tuple(np.full(np.shape(a), np.nan) for a in kernels) if no_grad
                      else structure.kernel_cotangents(result))
        _write_outputs(output_storage, result.log_z, cotangents,
                       np.full(len(params), np.nan) if no_grad else result.dlog_z_dparams,
                       _loo_or_placeholder(result, n), result.n_iter, status)
        return result.state, result.loo_later

    def _fast_ep(self, K, params, y, state, options):
        """``ep.ep_warm`` where it applies (EP on a structure with ``compiled_ep_loop``, the default
        schedule, labels -1/+1, a finite K, valid parameters, non-negative warm-start sites), else
        None: everything else, and every run ``ep_warm`` declines, goes through ``ep``.
        """
        if (not self.structure.compiled_ep_loop
                or not registry.solver_for(self.approximation, self.likelihood_type).compiled_loop
                or not options.keys() <= {"tol", "max_sweeps"}):
            return None
        n = y.shape[0] if y.ndim == 1 else 0
        if n == 0 or K.shape != (n, n) or y.dtype != np.float64 or not np.all(np.abs(y) == 1.0):
            return None
        if (state is not None and state.tau.min() < 0.0) or not np.isfinite(K).all() or K.diagonal().min() <= 0.0:
            return None
        try:
            th = self.likelihood.check_params(self.likelihood.resolve_params(params))
            return ep_warm(K, y, self.likelihood, th, state, **options)
        except (ValueError, ArithmeticError):
            return None

    def connection_pattern(self, node):
        # inputs: k kernel inputs, theta, y, hyper  x  outputs: log_z, k gradients, dth, loo, n_iter, status
        k = self.structure.n_kernel_inputs
        connected = [True] * (k + 3) + [False, False]
        return [connected] * (k + 1) + [[False] * (k + 5)] * 2

    def pullback(self, inputs, outputs, cotangents):
        k = self.structure.n_kernel_inputs
        differentiable = inputs[: k + 1]  # the kernel inputs and theta
        g = cotangents[0]
        if any(not isinstance(c.type, DisconnectedType) for c in cotangents[1 : k + 3]):
            return [grad_not_implemented(self, i, v, "second derivatives of the evidence")
                    for i, v in enumerate(differentiable)] + [disconnected_type()] * 2
        if isinstance(g.type, DisconnectedType):
            return [disconnected_type()] * (k + 3)
        if not registry.APPROXIMATIONS[self.approximation].has_gradient:
            msg = ("the online (ADF) evidence has no gradient in pymc-gpc; use a gradient-free "
                   "step method, or MarginalEP / MarginalMeanField")
            return [grad_not_implemented(self, i, v, msg) for i, v in enumerate(differentiable)] + \
                [disconnected_type()] * 2
        return [g * outputs[1 + j] for j in range(k + 1)] + [disconnected_type()] * 2
