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
run the Op retries damped and sequential (``approximations.solve.solve_with_retries``); if the last run
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

import copy
import warnings
import weakref

import numpy as np
import pytensor.tensor as pt
from pytensor.gradient import DisconnectedType, disconnected_type, grad_not_implemented
from pytensor.graph.basic import Apply
from pytensor.graph.op import Op

from ..approximations import registry
from ..approximations.ep import ep_warm
from ..approximations.solve import default_retries, prediction_options, solve, solve_with_retries
from ..validation import trusted_kernel
from ..backends.numba import thread_state
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

    Notes
    -----
    ``counts`` (not a prop, not pickled) tallies, per Op instance, the evaluations,
    retries taken, non-converged and failed results since construction (diagnostics:
    increments from concurrent threads are not locked); its evaluations include those of
    the compiled path (``backends.numba.compiled_ep``) under this Op's keys, which equal Ops on
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
        self.likelihood = likelihood_type()
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

    # The option sets tried after a non-converged run (``approximations.solve.solve_with_retries``), by approximation.
    retry_schedule_for = staticmethod(default_retries)

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
        Python and C linkers, the numba ``funcify``: ``backends.numba.dispatch``), so every ``pm.sample`` starts
        from the same state and a run with a given ``random_seed`` repeats its draws exactly
        (its process-based chains fork after the compilation; the docs' diagnostics page,
        "Reproducibility", lists what still depends on history within the tolerance).
        Otherwise a run's warm starts would come from whatever the process evaluated
        before, and since warm starts move the solution within the solver's tolerance,
        the same seed would give different draws.
        """
        self._shared["threads"] = PerThread(new_thread_state)
        for key in self._shared.get("compiled", ()):  # the compiled path's (``backends.numba``)
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
            parts = [f"{n}={v:.4g}" for n, v in zip(self.likelihood.param_names, params)]
        return ", ".join(parts)

    def _solver_options(self):
        """The solver's options: the registry's ``sampling_defaults`` (with ``sampling``) or
        ``engine_defaults`` under the Op's, and the LOO deferred where ``defer_loo`` is set."""
        entry = registry.solver_for(self.approximation, self.likelihood_type)
        defaults = entry.sampling_defaults if self.sampling else entry.engine_defaults
        options = {**defaults, **dict(self.options)}
        if self.defer_loo:
            options["with_loo"] = "deferred"
        return options

    def _split(self, inputs):
        """(kernel input arrays, theta, y, hyper) from the Op's inputs (hyper empty if absent)."""
        k = self.n_kernel_inputs
        hyper = inputs[k + 2] if len(inputs) > k + 2 else np.zeros(0)
        return tuple(inputs[:k]), inputs[k], inputs[k + 1], hyper

    def _perform(self, inputs, output_storage):
        """Solve and write the outputs; returns the result's ``loo_later`` (None unless the LOO
        output was deferred)."""
        _, _, y, hyper = self._split(inputs)
        warm = self._warm_starts(y.shape[0])
        state, loo_later = self._evaluate(inputs, warm.guess(hyper), output_storage)
        if state is not None:
            warm.add(hyper, state)
        return loo_later

    def _evaluate(self, inputs, guess, output_storage):
        """Solve from the warm start ``guess`` (a solver state or None) and write the outputs;
        returns (the solution's state to keep as a warm start, or None after a failure;
        the result's ``loo_later``)."""
        kernels, params, y, hyper = self._split(inputs)
        n = y.shape[0]
        options = self._solver_options()
        self._counts["evaluations"] += 1
        fast = self._fast_ep(kernels[0], params, y, guess, options)
        if fast is not None:
            log_z, dK, dth, loo, sweeps, state = fast
            _write_outputs(output_storage, log_z, (dK,), dth, loo, sweeps, STATUS_CONVERGED)
            return state, None
        result, status, retries = None, STATUS_FAILED, 0
        try:  # the solvers (and FITCPrior) reject non-finite or invalid inputs with ValueError
            prior = self.prior_from(*kernels)
            with trusted_kernel():  # K comes from a covariance function: no extra PSD check
                result, retries = solve_with_retries(self.approximation, prior, y, self.likelihood, params, guess,
                                                      options, self.retry_schedule(options))
            ok = np.isfinite(result.log_z) and (
                result.dlog_z_dK is None  # ADF: no gradient (pullback refuses it)
                or (all(np.all(np.isfinite(g)) for g in self.kernel_cotangents(result))
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
            warnings.warn(self._not_converged_message(self._describe_point(params, hyper), kernels, result, retries),
                          ApproximationFailedWarning, stacklevel=2)
        no_grad = result.dlog_z_dK is None  # ADF: NaN, and pullback refuses (below)
        cotangents = (tuple(np.full(np.shape(a), np.nan) for a in kernels) if no_grad
                      else self.kernel_cotangents(result))
        _write_outputs(output_storage, result.log_z, cotangents,
                       np.full(len(params), np.nan) if no_grad else result.dlog_z_dparams,
                       _loo_or_placeholder(result, n), result.n_iter, status)
        return result.state, result.loo_later

    def _not_converged_message(self, point, kernels, result, retries):
        """The ``ApproximationFailedWarning`` after the retries, naming the point."""
        K = kernels[0]
        return (f"{self.approximation.upper()} did not converge at {point or 'this point'} "
                f"(mean diag(K) {np.mean(np.diagonal(K, axis1=-2, axis2=-1)):.3g}; last change "
                f"{result.max_change:.2e} after {retries} retr{'y' if retries == 1 else 'ies'} with damped/sequential "
                "updates). The value is used; the evaluation's status output is 1.")

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
            th = self.likelihood.check_params(self.likelihood.resolve_params(params))
            return ep_warm(K, y, self.likelihood, th, state, **options)
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
        self.likelihood = likelihood_type()

    def make_node(self, K, params, y, K_cross, K_star):
        ins = [pt.as_tensor_variable(v).astype("float64") for v in (K, params, y, K_cross, K_star)]
        out_cov = pt.dmatrix() if self.full_cov else pt.dvector()
        return Apply(self, ins, [pt.dvector(), out_cov])

    # The prior's inputs come first (here K alone), as for ``ApproxMarginalOp``.
    n_kernel_inputs = 1
    prior_from = staticmethod(ApproxMarginalOp.prior_from)

    def perform(self, node, inputs, output_storage):
        k = self.n_kernel_inputs
        kernels, (params, y, K_cross, K_star) = inputs[:k], inputs[k:]
        m = K_cross.shape[1]
        check_training_sizes(y.shape[0], **self._training_shapes(kernels, K_cross))
        try:
            res = solve(self.approximation, self.prior_from(*kernels), y, self.likelihood, params, None,
                         prediction_options(self.options))
            output_storage[0][0], output_storage[1][0] = self._latent(res, K_cross, K_star)
        except (ValueError, np.linalg.LinAlgError):  # NotPositiveDefiniteError is a LinAlgError
            output_storage[0][0] = np.full(m, np.nan)
            output_storage[1][0] = np.full((m, m) if self.full_cov else m, np.nan)

    @staticmethod
    def _training_shapes(kernels, K_cross):
        """The shapes whose leading dimensions must be the number of training labels."""
        return {"K": kernels[0].shape, "K_cross": K_cross.shape[:1]}

    def _latent(self, res, K_cross, K_star):
        """The mean and the variance (or covariance, with ``full_cov``) of f* from the solve."""
        mean = K_cross.T @ res.a
        if self.full_cov:
            V = res.posterior.R() @ K_cross
            cov = K_star - K_cross.T @ V
            return mean, 0.5 * (cov + cov.T)
        _, var = res.predict_latent(K_cross, K_star)
        return mean, var

    def pullback(self, inputs, outputs, cotangents):
        return [grad_not_implemented(self, i, v, "prediction has no gradient") for i, v in enumerate(inputs)]
