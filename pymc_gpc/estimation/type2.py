"""Type-II maximum likelihood and MAP-II: L-BFGS-B on the objective over the model's
unconstrained free variables, with a check of the start and of hyperparameters drifting
without bound (``RunawayHyperparameterWarning``)."""

import warnings

import numpy as np
import scipy.optimize

from ..progress import Iterations
from .objective import all_values, check_gradient, objective_for, other_terms, ravel, unravel
from .result import FitResult, FitStartError, RunawayHyperparameterWarning, fitted_states

__all__ = ["maximise", "RUNAWAY_LIMIT", "RUNAWAY_STEP", "RUNAWAY_TOL", "RUNAWAY_EFFECT",
           "STALL_TOL", "STALL_RATIO", "STALL_WINDOW", "LBFGS_MEMORY"]


# type2 / map: an unconstrained value beyond RUNAWAY_LIMIT (e.g. a log-amplitude of 10,
# an amplitude of 2e4) along which the objective still does not fall within
# RUNAWAY_STEP further out is reported as drifting without bound (``_runaway``)
RUNAWAY_LIMIT = 10.0


RUNAWAY_STEP = 2.0


RUNAWAY_TOL = 1e-3


RUNAWAY_EFFECT = 1e-3


# the relative objective change that ends the coarse first run (``_coarse_stage``)
COARSE_FTOL = 1e-7


# a run also ends when the objective (log evidence plus, for MAP-II, the log hyperprior)
# rose by less than min(STALL_TOL, STALL_RATIO * tol) times its size over its last
# STALL_WINDOW iterations (``_Stall``): at the default tol 1e-9, STALL_TOL; a tighter tol
# asked for by the user tightens the rule with it
STALL_TOL = 1e-6
STALL_RATIO = 1e3


STALL_WINDOW = 10


# L-BFGS-B's memory (scipy's ``maxcor``): the curvature pairs its Hessian estimate keeps; scipy's
# default is 10. With 30, MAP-II of the per-class ARD models of benchmarks/results/multiclass_svgp.md
# (54 hyperparameters) reached the same optima in 0.69 to 0.97 of the iterations (its section
# "L-BFGS-B's memory"); a pair costs O(dimension), nothing beside one evaluation of the evidence
LBFGS_MEMORY = 30


def maximise(model, point, method, maxiter, tol, progressbar, callback=None):
    """L-BFGS-B on the objective of ``method`` over the unconstrained free variables: the log
    evidence ("type2"), plus the log hyperprior ("map"), or the SVGP-type bound in place of the
    evidence plus the log hyperprior ("elbo", ``Objective.bound_term``).

    A run stops at L-BFGS-B's tests (relative objective change ``tol`` in one iteration,
    largest projected gradient element 1e-6), at ``maxiter`` iterations in all, or by the
    stall rule: the objective rose by less than min(``STALL_TOL``, ``STALL_RATIO`` * tol)
    times max(|objective|, 1) over the last ``STALL_WINDOW`` iterations (``_Stall``); the
    first and the stall rule count as converged.

    ``callback(point, objective, log_evidence)``, if given, is called after each L-BFGS-B
    iteration (of both runs, ``_coarse_stage``) with the iterate, as a point of the model's
    value variables, and the objective and log evidence last evaluated (e.g. a benchmark's
    curve of test log p against time)."""
    check_gradient(model, f"{method} needs", "use method='em-ep' or another approximation")
    objective = objective_for(model, other_terms(model, include_priors=method in ("map", "elbo")),
                              model.continuous_value_vars, bound=method == "elbo")
    x0 = ravel(point, objective.free)
    evaluate = _Remembered(objective, x0, point)
    _check_start(objective, evaluate, x0.data, point, method)
    history = {"objective": [], "log_evidence": []}
    last = {}

    def negative(x):
        value, log_z, grad = evaluate(x)
        if grad is None or not np.isfinite(value) or not np.all(np.isfinite(grad)):
            return 1e300, np.zeros_like(x)  # outside the evidence's domain: L-BFGS-B backtracks
        last.update(objective=value, log_evidence=log_z)
        return -value, -grad

    label = {"type2": "type-II ML", "map": "MAP-II", "elbo": "ELBO MAP"}[method]
    shown = "log evidence" if method == "type2" else "log posterior"
    with Iterations(label, progressbar) as bar:
        def after_iteration(intermediate_result):
            for key in history:
                history[key].append(last.get(key, np.nan))
            bar.show(len(history["objective"]), last.get("objective", np.nan), shown)
            if callback is not None:
                callback(unravel(intermediate_result.x, x0, point), last.get("objective", np.nan),
                         last.get("log_evidence", np.nan))

        def lbfgs(x, iterations, ftol):
            stall = _Stall(ftol)

            def step(intermediate_result):
                after_iteration(intermediate_result)
                stall.check(-float(intermediate_result.fun))

            res = scipy.optimize.minimize(negative, x, jac=True, method="L-BFGS-B", callback=step,
                                          options=dict(maxiter=iterations, ftol=ftol, gtol=1e-6,
                                                       maxcor=LBFGS_MEMORY))
            res.stall = stall
            return res

        x, coarse_iter = _coarse_stage(objective, lbfgs, x0.data, maxiter, tol)
        res = lbfgs(x, max(maxiter - coarse_iter, 1), tol)
    best = unravel(res.x, x0, point)
    value, log_z, _ = evaluate(res.x)
    # the solves of this evaluation at res.x (as a rule the run's last, remembered) are the
    # states predict starts from; _runaway below evaluates other points
    states = fitted_states(objective)
    runaway = _runaway(objective, res.x, x0, point, value, model)
    message = (f"CONVERGENCE: the objective rose by less than {res.stall.tol:g} of its size over the last "
               f"{STALL_WINDOW} iterations" if res.stall.stopped else str(res.message))
    if runaway:
        message += f"; drifting without bound: {', '.join(runaway)}"
        _warn_runaway(method, runaway)
    return FitResult(
        method=method, point=all_values(model, best, objective), log_evidence=float(log_z),
        history={k: np.asarray(v, float) for k, v in history.items()},
        converged=bool(res.success or res.stall.stopped) and not runaway, n_iter=coarse_iter + int(res.nit),
        message=message, model=model, runaway=tuple(runaway), solver_states=states,
    )


class _Stall:
    """The stall rule of ``maximise``'s L-BFGS-B runs: ``check(objective)`` after each iteration
    raises ``StopIteration`` once the objective has risen by less than
    ``tol * max(|objective|, 1)`` over the last ``STALL_WINDOW`` iterations, with
    ``tol = min(STALL_TOL, STALL_RATIO * ftol)``.

    L-BFGS-B's own tests look at one iteration, and on a large data set with a flat direction
    it can creep for tens of iterations; the rule is ftol over a window, relative because the
    objective's size and curvature grow with n (an absolute rule stopped a softmax fit on a
    plateau: ``benchmarks/results/multiclass_large.md``, "The stopping rule").
    """

    def __init__(self, ftol=1e-9):
        self.tol = min(STALL_TOL, STALL_RATIO * ftol)
        self.values = []
        self.stopped = False

    def check(self, objective):
        self.values.append(objective)
        if (len(self.values) > STALL_WINDOW
                and self.values[-1] - self.values[-1 - STALL_WINDOW] < self.tol * max(abs(objective), 1.0)):
            self.stopped = True
            raise StopIteration


def _coarse_stage(objective, lbfgs, x, maxiter, tol):
    """The first of two L-BFGS-B runs: the evidence terms solved at their approximation's
    ``coarse_fit_defaults`` (``Objective.coarse_options``; EP: site change 1e-3), to a relative
    objective change ``COARSE_FTOL``. Far from the optimum only the evidence's trend counts;
    the second run converges at the engine's tolerances, so the returned optimum is that of
    exact solves. Returns (start of the exact run, iterations used); one run where no term has
    coarse options.
    """
    coarse = objective.coarse_options()
    if not any(coarse) or tol >= COARSE_FTOL:
        return x, 0
    objective.set_overrides(coarse)
    try:
        res = lbfgs(x, maxiter, COARSE_FTOL)
    finally:
        objective.set_overrides([{} for _ in coarse])
    return (res.x if np.isfinite(res.fun) and res.fun < 1e300 else x), int(res.nit)


class _Remembered:
    """``objective.evidence_and_grad`` at a raveled x, remembering its last call: L-BFGS-B's
    first evaluation is at the start point that ``_check_start`` evaluated, and its last
    iterate is (as a rule) the last point it evaluated, which ``maximise`` evaluates again.
    The solver options in force (``Objective.set_overrides``) are part of the key."""

    def __init__(self, objective, layout, point):
        self.objective, self.layout, self.point = objective, layout, point
        self.key, self.out = None, None

    def __call__(self, x):
        x = np.array(x, dtype=float)
        key = (x.tobytes(), repr(self.objective.overrides))
        if key != self.key:
            self.out = self.objective.evidence_and_grad(unravel(x, self.layout, self.point))
            self.key = key
        return self.out


def _check_start(objective, evaluate, x, point, method):
    """Raise ``FitStartError`` where the objective or its gradient is not finite at ``point``
    (raveled: ``x``; ``evaluate``: a ``_Remembered``): L-BFGS-B would stop there at once and
    report success (a zero gradient)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        value, log_z, grad = evaluate(x)
    if grad is not None and np.isfinite(value) and np.all(np.isfinite(grad)):
        return
    values = ", ".join(f"{v.name}={np.round(np.asarray(point[v.name], float), 4).tolist()}" for v in objective.free)
    if not np.isfinite(log_z):
        why = ("the GP classification log evidence is -inf there (the approximation failed: e.g. a kernel "
               "that is not positive definite, a zero or negative lengthscale or amplitude)")
    elif not np.isfinite(value):
        why = ("the other terms of the objective are not finite there"
               + (" (the hyperpriors: a value outside a prior's support?)" if method in ("map", "elbo") else ""))
    else:
        why = "the gradient is not finite there"
    raise FitStartError(
        f"fit(method={method!r}) cannot start: the objective is {value} at the start point ({values}; unconstrained "
        f"values); {why}. Give start= values inside the domain, or priors whose initial point is valid "
        "(e.g. a lengthscale as pt.exp of a Normal, or a positive distribution)."
    )


def _element_names(layout, model):
    """A name per element of the raveled unconstrained vector, with coordinate labels."""
    names = []
    for name, shape, size, _ in layout.point_map_info:
        if not shape:
            names.append(name)
            continue
        dims = model.named_vars_to_dims.get(name, ())
        labels = (list(model.coords[dims[0]]) if len(shape) == 1 and dims and model.coords.get(dims[0]) is not None
                  else None)
        for k, index in enumerate(np.ndindex(*shape)):
            key = labels[k] if labels is not None else ",".join(map(str, index))
            names.append(f"{name}[{key}]")
    return names


def _runaway(objective, x, layout, point, value, model):
    """Elements of ``x`` beyond ``RUNAWAY_LIMIT`` along which the objective does not fall although
    the model still changes: moving such a coordinate out by ``RUNAWAY_STEP`` raises the
    objective (or keeps it within ``RUNAWAY_TOL``) while the kernels or likelihood parameters
    change by more than ``RUNAWAY_EFFECT`` (e.g. the amplitude on separable data). A
    lengthscale gone to infinity leaves K unchanged and is not reported. Where the objective
    cannot be evaluated ``RUNAWAY_STEP`` further out (a log amplitude near 709 overflows the
    kernel), the step is halved, down to ``RUNAWAY_STEP / 64``, until it can.
    """
    names = _element_names(layout, model)
    here = unravel(x, layout, point)
    drifting = []
    for i in np.flatnonzero(np.abs(x) > RUNAWAY_LIMIT):
        step = np.zeros_like(x, dtype=float)
        step[i] = RUNAWAY_STEP * np.sign(x[i])
        there = unravel(x + step, layout, point)
        if _relative_change(objective, here, there) < RUNAWAY_EFFECT:
            continue
        for _ in range(7):
            beyond, _, _ = objective.evidence_and_grad(there)
            if np.isfinite(beyond):
                if beyond >= value - RUNAWAY_TOL:
                    drifting.append(names[i])
                break
            step *= 0.5
            there = unravel(x + step, layout, point)
    return drifting


def _relative_change(objective, a, b):
    """The largest relative change of the GP terms' kernels and likelihood parameters from a to b."""
    pairs_a, _ = objective.kernel_inputs(a)
    pairs_b, _ = objective.kernel_inputs(b)
    change = 0.0
    for (arrays_a, tha), (arrays_b, thb) in zip(pairs_a, pairs_b):
        for Ka, Kb in zip(arrays_a, arrays_b):
            change = max(change, _scaled_change(np.asarray(Ka, float), np.asarray(Kb, float)))
        if np.size(tha):
            change = max(change, float(np.max(np.abs(thb - tha) / np.maximum(np.abs(tha), 1e-300))))
    return change


def _scaled_change(a, b):
    """||b - a|| / ||a|| (Frobenius) computed on a / max|a| and b / max|a|: the squares of a
    runaway amplitude's kernel (log v0 near 375, entries near 1e163) overflow the plain norm, whose
    NaN then read as no change. Infinite where b is not finite but a is (the model did change)."""
    if not np.all(np.isfinite(b)):
        return np.inf if np.all(np.isfinite(a)) else 0.0
    scale = float(np.max(np.abs(a), initial=0.0))
    if scale == 0.0 or not np.isfinite(scale):
        return 0.0 if np.array_equal(a, b) else np.inf
    return float(np.linalg.norm((b - a) / scale) / np.linalg.norm(a / scale))


def _warn_runaway(method, names):
    advice = ("use method='map' (the hyperpriors keep them finite) or fix them" if method == "type2"
              else "use tighter hyperpriors or fix them")
    warnings.warn(
        f"{'type-II ML' if method == 'type2' else 'MAP-II'} has no finite optimum in {', '.join(names)}: "
        f"beyond |{RUNAWAY_LIMIT:g}| in the unconstrained space, the objective still rises (or is flat) "
        f"further out (e.g. an amplitude on separable data); {advice}",
        RunawayHyperparameterWarning, stacklevel=3,
    )
