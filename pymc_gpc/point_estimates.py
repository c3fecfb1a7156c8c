r"""Point estimates of the hyperparameters, on the same ``pm.Model`` that ``pm.sample`` uses.

``fit(model, method=...)``:

``"type2"``
    type-II maximum likelihood: maximise the approximate log evidence
    log q(y | theta) (the ``MarginalEP`` / ``MarginalLaplace`` potentials, plus any
    observed variables) over the model's continuous free variables in their
    unconstrained space; hyperpriors are ignored.
``"map"``
    MAP-II: the same objective plus the hyperpriors (``model.logp(jacobian=False)``,
    as ``pm.find_MAP`` uses).
``"em-ep"``
    the EM-EP algorithm of Kim & Ghahramani (2003). E-step: the model's approximation
    at the current hyperparameters gives q(f) = N(h, A).
    M-step: with q fixed, maximise the variational lower bound (eq. 13, 15)

    .. math::

        F(\theta) = \sum_i E_q[\log p(y_i \mid f_i, \theta_{lik})]
                    - \tfrac12 \log|K_\theta| - \tfrac12 h^T K_\theta^{-1} h
                    - \tfrac12 \operatorname{tr}(K_\theta^{-1} A) + H(q) + \text{const}

    over the covariance hyperparameters (eq. 16-17; Tan eq. 17-18; for a FITC prior in
    O(n m^2), ``structures.em_bounds``) and any smooth
    likelihood parameter, by L-BFGS; the step likelihood's label-noise rate epsilon,
    when it is a free variable, is set in closed form by one of two rules:
    ``"errors"``: epsilon* = r / n, r the training errors of sign(E f) (eq. 18 and
    appendix); ``"omega"``: epsilon* = mean(1 - omega_i), omega_i = Phi(y_i h_i /
    sqrt(A_ii)), the exact maximiser of the epsilon-part of F (outlier-robust paper,
    sec. 4; the paper writes the cavity variance lambda_i where the derivation of
    F_eps gives the marginal variance A_ii of q, which is what is used here).
    E- and M-steps alternate until the log evidence changes by less than ``tol``;
    SQUAREM extrapolation (Varadhan & Roland 2008) makes that tens of iterations
    instead of thousands. Any approximation with a Gaussian q serves as the E-step
    (EP for ``MarginalEP``; Laplace, mean field or ADF for the other classes).

Every method returns a ``FitResult``: the point (named like ``pm.find_MAP``'s, so
``gp.predict(Xnew, point=result.point)`` works), the approximate log evidence there,
the per-iteration history, and convergence flags; ``to_inference_data()`` gives an
ArviZ ``DataTree`` for ``az.summary`` and plots.
"""

import warnings
import weakref
from dataclasses import dataclass, field

import numpy as np
import pymc as pm
import pytensor.tensor as pt
import scipy.optimize
import xarray as xr
from pymc.blocking import DictToArrayBijection, RaveledVars
from pymc.initial_point import make_initial_point_fn
from pymc.pytensorf import compile as compile_fn
from pytensor.graph.replace import graph_replace
from pytensor.graph.traversal import ancestors

from .likelihoods.binary import StepLabelNoise
from .approximations import registry
from .approximations.solve import solve_with_retries
from .ops.marginal import ApproxMarginalOp
from .progress import Progress
from .python_vm import PYTHON_VM_FORWARD_MODE, PYTHON_VM_MODE
from .structures.dense import NotPositiveDefiniteError
from .structures.fitc import NonFiniteKernelError
from .structures.select import structure_of_op
from .validation import trusted_kernel

__all__ = ["fit", "FitResult", "FitStartError", "METHODS", "EPSILON_RULES", "RunawayHyperparameterWarning"]

METHODS = ("type2", "map", "em-ep")
EPSILON_RULES = ("omega", "errors")
_MAX_LABEL_NOISE = 0.5 - 1e-9
# type2 / map: an unconstrained value beyond RUNAWAY_LIMIT (e.g. a log-amplitude of 10,
# an amplitude of 2e4) along which the objective still does not fall within
# RUNAWAY_STEP further out is reported as drifting without bound (``_runaway``)
RUNAWAY_LIMIT = 10.0
RUNAWAY_STEP = 2.0
RUNAWAY_TOL = 1e-3
RUNAWAY_EFFECT = 1e-3


# The kernel and pullback graphs of ``fit`` are compiled without numba: numba's first call
# of a new graph compiled it for 8-11 s (a new model's first fit: 12.5 s against 1.1 s
# with this mode, Pima, Laplace + logistic). An iteration costs somewhat more (Pima
# type-II with a pm.gp.cov kernel on a built model: EP 0.44 s against 0.30 s
# numba-compiled); see ``python_vm`` for the rewrite that keeps it that close.
FIT_MODE = PYTHON_VM_MODE
# ... and the kernel graph, which has no gradient, with fewer rewrites (``python_vm``)
FIT_FORWARD_MODE = PYTHON_VM_FORWARD_MODE


class FitStartError(ValueError):
    """``fit(method="type2" | "map")`` cannot start: the objective or its gradient is not
    finite at the start point (e.g. a lengthscale whose prior allows 0 or negative values,
    or a kernel that is not positive definite there). The message names the values.

    Examples
    --------
    >>> try:  # doctest: +SKIP
    ...     result = pymc_gpc.fit(model, method="map")
    ... except pymc_gpc.FitStartError as err:
    ...     print(err)  # which values, and whether the evidence or the gradient failed
    """


class RunawayHyperparameterWarning(UserWarning):
    """A type-II / MAP-II optimum that is not one: some hyperparameters drift without bound.

    Examples
    --------
    >>> import warnings
    >>> with warnings.catch_warnings():  # doctest: +SKIP
    ...     warnings.simplefilter("error", pymc_gpc.RunawayHyperparameterWarning)
    ...     pymc_gpc.fit(model, method="type2")
    """


@dataclass
class FitResult:
    """What ``fit`` returns.

    Attributes
    ----------
    method : "type2", "map" or "em-ep".
    point : every free variable (constrained and transformed) and deterministic at the
        optimum, as ``pm.find_MAP`` returns it.
    log_evidence : the approximate log evidence log q(y | theta) at ``point``.
    history : arrays with one entry per iteration: ``log_evidence`` and ``objective``
        (type2 / map), or ``log_evidence``, ``bound`` (F after the M-step) and
        ``epsilon`` (em-ep, NaN where epsilon is not adapted).
    converged : whether the optimiser (or the EM loop) met its tolerance.
    n_iter : optimiser iterations, or EM iterations.
    message : the optimiser's message, or why the EM loop stopped.
    runaway : (type2 / map) the unconstrained free variables, by element
        (``"log_v0"``, ``"log_w[x3]"``), that drifted without bound: beyond
        ``RUNAWAY_LIMIT`` with the objective still not falling further out while the
        model still changes (e.g. the amplitude on separable data, where the evidence
        rises towards a limit as v0 -> infinity; ``_runaway``). ``converged`` is then
        False and a ``RunawayHyperparameterWarning`` names them; the hyperpriors of
        ``method="map"`` keep them finite.

    Examples
    --------
    >>> result = pymc_gpc.fit(model, method="map", progressbar=False)  # doctest: +SKIP
    >>> result.point["log_v0"], result.n_iter, result.runaway  # doctest: +SKIP
    >>> tree = result.to_inference_data()  # doctest: +SKIP
    >>> az.summary(tree)  # doctest: +SKIP
    """

    method: str
    point: dict
    log_evidence: float
    history: dict
    converged: bool
    n_iter: int
    message: str
    model: pm.Model = field(repr=False)
    runaway: tuple = ()

    def to_inference_data(self):
        """An ArviZ ``DataTree``: the point as a one-draw ``posterior`` (the model's parameters),
        its pointwise LOO terms in ``log_likelihood`` and solver diagnostics in
        ``sample_stats`` (``pymc_gpc.add_log_likelihood``), plus ``fit_history``."""
        import arviz as az

        model = self.model
        names = [v.name for v in model.free_RVs + model.deterministics]
        posterior = {n: np.asarray(self.point[n])[None, None] for n in names if n in self.point}
        dims = {n: list(model.named_vars_to_dims.get(n, ())) for n in posterior}
        coords = {k: list(v) for k, v in model.coords.items() if v is not None}
        tree = az.from_dict({"posterior": posterior}, coords=coords, dims=dims)
        history = xr.Dataset({k: ("iteration", np.asarray(v, float)) for k, v in self.history.items()})
        history.attrs.update(
            method=self.method, log_evidence=self.log_evidence, converged=int(self.converged),
            n_iter=self.n_iter, message=self.message, runaway=", ".join(self.runaway),
        )
        tree["fit_history"] = history
        from .idata import add_log_likelihood  # the pointwise terms and diagnostics out of the posterior

        return add_log_likelihood(tree, model)


def fit(model=None, method="type2", *, start=None, epsilon_rule="errors", prior=False,
        accelerate=None, maxiter=None, tol=None, progressbar=True):
    """Point estimates of the hyperparameters of a model built with ``MarginalEP`` / ``MarginalLaplace``.

    Parameters
    ----------
    model : the ``pm.Model`` (default: the model on the context stack).
    method : "type2" (type-II ML), "map" (MAP-II) or "em-ep" (module docstring).
    start : starting values by variable name, in the constrained space (as
        ``pm.sample(initvals=...)``); the model's initial point otherwise.
    epsilon_rule : em-ep only: "errors" (r / n, Kim & Ghahramani eq. 18; default) or
        "omega" (the exact maximiser of the bound's epsilon term).
    prior : em-ep only: add the hyperpriors to the M-step (MAP-EM).
    accelerate : em-ep only: SQUAREM extrapolation of the EM iterations (``_em_ep``).
        Default: on, except with ADF's one-pass q as the E-step, where plain EM
        converges but the extrapolations, safeguarded by an evidence that EM does not
        ascend, were seen running to amplitudes of e^90 on a 40-point problem.
    maxiter : optimiser iterations (type2 / map, default 500) or EM iterations
        (em-ep, default 300).
    tol : convergence tolerance: relative objective change for L-BFGS-B (default
        1e-9), or absolute change of the log evidence between EM iterations
        (default 1e-4).
    progressbar : show a progress bar as PyMC does.

    Returns
    -------
    FitResult

    Raises
    ------
    ValueError
        For an unknown ``method`` or ``epsilon_rule``, a model without a classifier from
        this package, or ADF (no gradient) with "type2" or "map".

    Warns
    -----
    RunawayHyperparameterWarning
        When type-II ML drifts without bound (separable data); ``method="map"`` keeps the
        hyperparameters finite.

    Examples
    --------
    >>> import pymc_gpc
    >>> from pymc_gpc.datasets import load
    >>> pima = load("pima")
    >>> model, gp = pymc_gpc.ard_classifier(pima.X_train, pima.y_train)
    >>> result = pymc_gpc.fit(model, method="type2", progressbar=False)
    >>> result.log_evidence, result.converged  # doctest: +SKIP
    (-99.58..., True)
    >>> p = gp.predict(pima.X_test, point=result.point)
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if epsilon_rule not in EPSILON_RULES:
        raise ValueError(f"epsilon_rule must be one of {EPSILON_RULES}, got {epsilon_rule!r}")
    model = pm.modelcontext(model)
    point = _start_point(model, start)
    if method == "em-ep":
        return _em_ep(model, point, epsilon_rule, prior, 300 if maxiter is None else maxiter,
                      1e-4 if tol is None else tol, progressbar, accelerate)
    return _maximise(model, point, method,
                     500 if maxiter is None else maxiter, 1e-9 if tol is None else tol, progressbar)


# -- the model's pieces ------------------------------------------------------------


class _Objective:
    """The model split into its GP classification terms and everything else.

    ``objective = rest(values) + sum_j log q(y_j | K_j, theta_j)``, where the
    approximations run in NumPy here (so ``fit`` keeps its own warm starts) and PyTensor
    only computes the kernels, ``rest`` and the pullback of the solvers' gradients
    dlog q/dK, dlog q/dtheta to the free variables in ``targets``. Compiled in
    ``FIT_MODE``: these graphs run once per optimiser iteration, so their compilation
    is what matters.
    """

    def __init__(self, model, rest_terms, targets):
        self.model = model
        self.free = list(model.continuous_value_vars)
        if not self.free:
            raise ValueError("the model has no continuous free variables to fit")
        self.nodes = _marginal_nodes(model)
        self.structures = [structure_of_op(node.op) for node in self.nodes]
        self.targets = list(targets)
        # a node's inputs: the prior's (K; or K_uu, K_uf, diag K_ff for FITC), theta, y, ...
        self.sizes = [structure.n_kernel_inputs + 1 for structure in self.structures]
        self.labels = [np.asarray(node.inputs[k].eval(), dtype=float) for node, k in zip(self.nodes, self.sizes)]
        rest = model.logp(vars=rest_terms, jacobian=False) if rest_terms else pt.constant(0.0)
        kernels = [v for node, k in zip(self.nodes, self.sizes) for v in node.inputs[:k]]
        self.forward = compile_fn(self.free, [*kernels, rest], on_unused_input="ignore", mode=FIT_FORWARD_MODE)
        cotangents = [v.type(f"g_{j}") for j, v in enumerate(kernels)]
        pulled = rest + sum((g * v).sum() for g, v in zip(cotangents, kernels))
        grads = pt.grad(pulled, self.targets) if self.targets else []
        self.backward = compile_fn(self.free + cotangents, grads, on_unused_input="ignore", mode=FIT_MODE)
        self.states = [None] * len(self.nodes)

    def _inputs(self, point):
        return [point[v.name] for v in self.free]

    def kernels(self, point):
        """[(K_j, theta_j)] and the value of ``rest`` at ``point``; K_j is what the solver takes
        as the prior (the matrix K, or a ``FITCPrior``: the structure's ``prior_from``)."""
        inputs, rest = self.kernel_inputs(point)
        return [(structure.prior_from(*arrays), theta)
                for structure, (arrays, theta) in zip(self.structures, inputs)], rest

    def kernel_inputs(self, point):
        """[(prior input arrays_j, theta_j)] (K; or K_uu, K_uf, diag K_ff) and ``rest`` at ``point``."""
        out = self.forward(*self._inputs(point))
        pairs, i = [], 0
        for k in self.sizes:
            pairs.append((out[i:i + k - 1], out[i + k - 1]))
            i += k
        return pairs, float(out[-1])

    def solve(self, j, K, theta, with_grad=True):
        """The approximation of term j, warm-started from its last call, with the Op's retry schedule."""
        node = self.nodes[j]
        options = dict(node.op.options, with_grad=with_grad, with_loo=False)
        # K comes from a covariance function, as in the Op: no symmetry or PSD check (one
        # Cholesky factorisation per class and solve); an indefinite K still fails the solve
        with np.errstate(over="ignore", invalid="ignore", divide="ignore", under="ignore"), trusted_kernel():
            result, _ = solve_with_retries(node.op.approximation, K, self.labels[j], node.op._lik, theta,
                                            self.states[j], options,
                                            self.structures[j].retry_schedule(node.op.approximation, options))
        if np.isfinite(result.log_z):
            self.states[j] = result.state
        return result

    def pullback(self, point, cotangents):
        """Gradient of rest + sum <cotangent, (K_j, theta_j)> in the target variables, raveled."""
        args = [c for pair in cotangents for c in pair]
        grads = self.backward(*self._inputs(point), *args)
        return np.concatenate([np.ravel(g) for g in grads]) if grads else np.zeros(0)

    def evidence_and_grad(self, point):
        """objective, log evidence and the objective's gradient in the targets (None if it failed)."""
        try:
            pairs, rest = self.kernels(point)
        except NonFiniteKernelError:  # a prior structure refusing non-finite kernels (FITCPrior); other
            # ValueErrors (e.g. FITC shapes that do not match) are errors of the model: they propagate
            return -np.inf, -np.inf, None
        log_z, cotangents = 0.0, []
        for j, (K, theta) in enumerate(pairs):
            try:
                result = self.solve(j, K, theta)
            except (ValueError, np.linalg.LinAlgError):
                return -np.inf, -np.inf, None
            d_prior = self.structures[j].kernel_cotangents(result)
            if not (np.isfinite(result.log_z) and all(np.all(np.isfinite(c)) for c in d_prior)):
                return -np.inf, -np.inf, None
            log_z += result.log_z
            cotangents.append((*d_prior, np.asarray(result.dlog_z_dparams, float).reshape(theta.shape)))
        return rest + log_z, log_z, self.pullback(point, cotangents)


_compiled = weakref.WeakKeyDictionary()


def _objective_for(model, rest_terms, targets):
    """A compiled ``_Objective``, reused while the model's variables are unchanged."""
    key = (tuple(v.name for v in rest_terms), tuple(v.name for v in targets),
           tuple(v.name for v in model.value_vars), tuple(v.name for v in model.potentials))
    cache = _compiled.setdefault(model, {})
    if key not in cache:
        cache[key] = _Objective(model, rest_terms, targets)
    objective = cache[key]
    objective.states = [None] * len(objective.nodes)
    return objective


def _marginal_nodes(model):
    """The ApproxMarginalOp applications behind the model's potentials (value-variable graphs)."""
    nodes = []
    for var in ancestors(model.replace_rvs_by_values(model.potentials)):
        if var.owner is not None and isinstance(var.owner.op, ApproxMarginalOp) and var.owner not in nodes:
            nodes.append(var.owner)
    if not nodes:
        raise ValueError(
            "the model has no GP classification term: call MarginalEP(...).marginal_likelihood "
            "or MarginalLaplace(...).marginal_likelihood inside it first"
        )
    return nodes


def _other_terms(model, include_priors):
    """Model terms besides the GP potentials: observed variables, other potentials, priors."""
    ours = []
    for pot, value in zip(model.potentials, model.replace_rvs_by_values(model.potentials)):
        depends = any(isinstance(v.owner.op, ApproxMarginalOp) for v in ancestors([value]) if v.owner)
        if not depends:
            continue
        if not (value.owner is not None and isinstance(value.owner.op, ApproxMarginalOp)
                and value is value.owner.outputs[0]):
            raise ValueError(
                f"potential {pot.name!r} transforms a GP classification evidence; fit supports the "
                "potentials added by marginal_likelihood"
            )
        ours.append(pot)
    others = [p for p in model.potentials if p not in ours] + list(model.observed_RVs)
    return others + (list(model.free_RVs) if include_priors else [])


def _start_point(model, start):
    fn = make_initial_point_fn(model=model, overrides=start or None, jitter_rvs=set(), return_transformed=True)
    return fn(0)


def _ravel(point, variables):
    return DictToArrayBijection.map({v.name: point[v.name] for v in variables})


def _unravel(x, layout, point):
    """``point`` with the variables raveled in ``layout`` (a ``_ravel`` result) set from ``x``."""
    return DictToArrayBijection.rmap(RaveledVars(np.asarray(x, float), layout.point_map_info), point)


def _all_values(model, point, objective=None):
    """Free, transformed and deterministic values at ``point`` (as ``pm.find_MAP`` returns).

    With ``objective`` (an ``_Objective`` of the model), the evidence terms'
    outputs (the ``{name}_loo``, ``_n_iter`` and ``_status`` deterministics) are
    evaluated by ``_evidence_outputs`` and enter the graph as constants, so the compiled
    graph holds no kernel and no solve: compiling the model's whole deterministic graph
    took 0.2-0.7 s of a 5-8 s MAP-II fit on Forensic Glass (six ARD kernels), and its
    solve started cold.
    """
    outs = model.unobserved_value_vars
    if objective is not None:
        outs = _evidence_outputs(outs, objective, point)
    fn = model.compile_fn(outs, inputs=model.value_vars, point_fn=False,
                          on_unused_input="ignore", mode=FIT_FORWARD_MODE)
    return dict(zip([v.name for v in outs], fn(**{v.name: point[v.name] for v in model.value_vars})))


def _evidence_outputs(outs, objective, point):
    """``outs`` with the outputs of each evidence Op of ``objective`` replaced by their values at
    ``point``: the Op run on the kernels of ``objective.forward``, warm-started from the
    objective's last solution of that term (its state at the optimum, after ``_maximise``).

    An Op is matched to the objective's term by identity (the graphs of ``outs`` and of
    the objective are separate clones of the model's, sharing the Op instances); one that
    serves several terms is left in the graph.
    """
    pairs, _ = objective.kernel_inputs(point)
    terms = {}
    for j, node in enumerate(objective.nodes):
        terms.setdefault(id(node.op), []).append(j)
    values = {}
    for var in ancestors(outs):
        node = var.owner
        if node is None or not isinstance(node.op, ApproxMarginalOp) or node.outputs[0] in values:
            continue
        if len(terms.get(id(node.op), ())) != 1:
            continue
        j = terms[id(node.op)][0]
        arrays, theta = pairs[j]
        y = objective.labels[j]
        if objective.states[j] is not None:
            node.op.seed_warm_start(y.shape[0], objective.states[j])
        storage = [[None] for _ in node.outputs]
        node.op.perform(node, [*arrays, theta, y, np.zeros(0)][:len(node.inputs)], storage)
        values.update({o: pt.constant(np.asarray(s[0], dtype=o.dtype)) for o, s in zip(node.outputs, storage)})
    return graph_replace(outs, values, strict=False) if values else outs


# -- type-II ML and MAP-II ------------------------------------------------------------


def _maximise(model, point, method, maxiter, tol, progressbar):
    """L-BFGS-B on the objective of ``method`` over the unconstrained free variables."""
    gradient_free = [n.op.approximation for n in _marginal_nodes(model)
                     if not registry.get(n.op.approximation).has_gradient]
    if gradient_free:
        raise ValueError(f"{method} needs the evidence's gradient, which {gradient_free[0].upper()} does not "
                         "provide; use method='em-ep' or another approximation")
    objective = _objective_for(model, _other_terms(model, include_priors=method == "map"), model.continuous_value_vars)
    x0 = _ravel(point, objective.free)
    _check_start(objective, point, method)
    history = {"objective": [], "log_evidence": []}
    last = {}

    def negative(x):
        value, log_z, grad = objective.evidence_and_grad(_unravel(x, x0, point))
        if grad is None or not np.isfinite(value) or not np.all(np.isfinite(grad)):
            return 1e300, np.zeros_like(x)  # outside the evidence's domain: L-BFGS-B backtracks
        last.update(objective=value, log_evidence=log_z)
        return -value, -grad

    label = "type-II ML" if method == "type2" else "MAP-II"
    with Progress(label, maxiter, progressbar) as bar:
        def callback(intermediate_result):
            for key in history:
                history[key].append(last.get(key, np.nan))
            bar.show(len(history["objective"]), f"log evidence {last.get('log_evidence', np.nan):.4f}")

        res = scipy.optimize.minimize(negative, x0.data, jac=True, method="L-BFGS-B", callback=callback,
                                      options=dict(maxiter=maxiter, ftol=tol, gtol=1e-6))
    best = _unravel(res.x, x0, point)
    value, log_z, _ = objective.evidence_and_grad(best)
    runaway = _runaway(objective, res.x, x0, point, value, model)
    message = str(res.message)
    if runaway:
        message += f"; drifting without bound: {', '.join(runaway)}"
        _warn_runaway(method, runaway)
    return FitResult(
        method=method, point=_all_values(model, best, objective), log_evidence=float(log_z),
        history={k: np.asarray(v, float) for k, v in history.items()},
        converged=bool(res.success) and not runaway, n_iter=int(res.nit), message=message, model=model,
        runaway=tuple(runaway),
    )


def _check_start(objective, point, method):
    """Raise ``FitStartError`` where the objective or its gradient is not finite at ``point``:
    L-BFGS-B would stop there at once and report success (a zero gradient)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        value, log_z, grad = objective.evidence_and_grad(point)
    if grad is not None and np.isfinite(value) and np.all(np.isfinite(grad)):
        return
    values = ", ".join(f"{v.name}={np.round(np.asarray(point[v.name], float), 4).tolist()}" for v in objective.free)
    if not np.isfinite(log_z):
        why = ("the GP classification log evidence is -inf there (the approximation failed: e.g. a kernel "
               "that is not positive definite, a zero or negative lengthscale or amplitude)")
    elif not np.isfinite(value):
        why = ("the other terms of the objective are not finite there"
               + (" (the hyperpriors: a value outside a prior's support?)" if method == "map" else ""))
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
    """Elements of ``x`` beyond ``RUNAWAY_LIMIT`` along which the objective does not fall
    although the model still changes.

    An optimum of the objective that exists is a point where moving any coordinate
    further out by ``RUNAWAY_STEP`` lowers it. A coordinate that is already far out,
    along which the objective still rises (or stays within ``RUNAWAY_TOL``) while the
    kernel matrices or likelihood parameters still change (relative change above
    ``RUNAWAY_EFFECT``), is one the optimiser stopped on only because the gains became
    small (L-BFGS's relative tolerance), not at a maximum: e.g. the amplitude on
    separable data. A lengthscale gone to infinity (an input switched off, as ARD does
    for irrelevant inputs) leaves K unchanged further out and is not reported.
    """
    names = _element_names(layout, model)
    here = _unravel(x, layout, point)
    drifting = []
    for i in np.flatnonzero(np.abs(x) > RUNAWAY_LIMIT):
        further = np.array(x, float)
        further[i] += RUNAWAY_STEP * np.sign(x[i])
        there = _unravel(further, layout, point)
        if _relative_change(objective, here, there) < RUNAWAY_EFFECT:
            continue
        beyond, _, _ = objective.evidence_and_grad(there)
        if np.isfinite(beyond) and beyond >= value - RUNAWAY_TOL:
            drifting.append(names[i])
    return drifting


def _relative_change(objective, a, b):
    """The largest relative change of the GP terms' kernels and likelihood parameters from a to b."""
    pairs_a, _ = objective.kernel_inputs(a)
    pairs_b, _ = objective.kernel_inputs(b)
    change = 0.0
    for (arrays_a, tha), (arrays_b, thb) in zip(pairs_a, pairs_b):
        for Ka, Kb in zip(arrays_a, arrays_b):
            change = max(change, np.linalg.norm(Kb - Ka) / max(np.linalg.norm(Ka), 1e-300))
        if np.size(tha):
            change = max(change, float(np.max(np.abs(thb - tha) / np.maximum(np.abs(tha), 1e-300))))
    return change


def _warn_runaway(method, names):
    advice = ("use method='map' (the hyperpriors keep them finite) or fix them" if method == "type2"
              else "use tighter hyperpriors or fix them")
    warnings.warn(
        f"{'type-II ML' if method == 'type2' else 'MAP-II'} has no finite optimum in {', '.join(names)}: "
        f"beyond |{RUNAWAY_LIMIT:g}| in the unconstrained space, the objective still rises (or is flat) "
        f"further out (e.g. an amplitude on separable data); {advice}",
        RunawayHyperparameterWarning, stacklevel=3,
    )



# -- EM-EP ---------------------------------------------------------------------------


def epsilon_update(rule, y, h, a_diag):
    """The closed-form M-step for the step likelihood's label-noise rate (module docstring)."""
    if rule == "errors":
        eps = np.mean(np.sign(h) != y)
    else:
        eps = 1.0 - np.mean(np.exp(StepLabelNoise.log_prob_correct(y, h, a_diag)))
    return float(min(eps, _MAX_LABEL_NOISE))


def _epsilon_variable(model, node):
    """The value variable of a free label-noise rate of the step likelihood, or None if fixed."""
    if not isinstance(node.op._lik, StepLabelNoise):
        return None
    sources = [v for v in ancestors([node.inputs[structure_of_op(node.op).n_kernel_inputs]]) if v in model.value_vars]
    if not sources:
        return None
    if len(sources) != 1 or model.values_to_rvs[sources[0]].ndim != 0:
        raise ValueError(
            "em-ep updates StepLabelNoise's epsilon in closed form, so epsilon must be one scalar "
            f"free variable (e.g. pm.Uniform('epsilon', 0, 0.5)); it depends on {[v.name for v in sources]}"
        )
    return sources[0]


def _set_value(model, point, value_var, value):
    """``point`` with the free variable of ``value_var`` set to the constrained ``value``."""
    rv = model.values_to_rvs[value_var]
    transform = model.rvs_to_transforms.get(rv)
    value = np.asarray(value, float)
    if transform is not None:
        value = transform.forward(pt.as_tensor(value), *rv.owner.inputs).eval()
    return dict(point, **{value_var.name: np.asarray(value, dtype=value_var.dtype)})


class _EMEP:
    """One EM-EP iteration as a map of the free variables: E-step, epsilon, M-step."""

    def __init__(self, model, epsilon_rule, prior):
        nodes = _marginal_nodes(model)
        if len(nodes) != 1:
            raise ValueError(f"em-ep needs exactly one GP classification term, the model has {len(nodes)}")
        self.model, self.rule = model, epsilon_rule
        self.epsilon_var = _epsilon_variable(model, nodes[0])
        self.structure = structure_of_op(nodes[0].op)
        k = self.structure.n_kernel_inputs  # the node's inputs: the prior's k arrays, then theta
        dependent = set(ancestors(nodes[0].inputs[:k + 1]))
        targets = [v for v in model.continuous_value_vars if v in dependent and v is not self.epsilon_var]
        self.objective = _objective_for(model, list(model.free_RVs) if prior else [], targets)
        self.objective.theta_free = any(v in set(ancestors([nodes[0].inputs[k]])) for v in targets)
        self.moving = targets + ([self.epsilon_var] if self.epsilon_var is not None else [])
        self.y = self.objective.labels[0]

    def __call__(self, point):
        """(next point, log evidence at ``point``, bound F after the M-step, epsilon)."""
        objective = self.objective
        [(arrays, theta)], _ = objective.kernel_inputs(point)
        structure = self.structure
        q = _e_step(objective, structure.prior_from(*arrays), theta)
        h, A = q.mean, structure.q_covariance(q)
        eps = np.nan
        if self.epsilon_var is not None:
            eps = epsilon_update(self.rule, self.y, h, structure.marginal_variances(A))
            point = _set_value(self.model, point, self.epsilon_var, eps)
        point, value = _m_step(objective, point, h, A)
        if not objective.theta_free:  # the data term, constant during the M-step
            [(_, theta)], _ = objective.kernel_inputs(point)
            value += float(np.sum(objective.nodes[0].op._lik.expected_log_lik(
                self.y, h, structure.marginal_variances(A), theta)[0]))
        return point, q.log_z, value + _entropy_constant(structure, arrays, q, A), eps

    def log_evidence(self, point):
        [(K, theta)], _ = self.objective.kernels(point)
        return _e_step(self.objective, K, theta).log_z


def _em_ep(model, point, epsilon_rule, prior, max_iter, tol, progressbar, accelerate=None):
    """EM-EP iterations, SQUAREM-accelerated unless ``accelerate=False``.

    SQUAREM (Varadhan & Roland 2008, scheme S3) extrapolates two EM steps
    x1 = G(x0), x2 = G(x1) to x0 - 2 a r + a^2 v (r = x1 - x0, v = x2 - 2 x1 + x0,
    a = -|r| / |v| <= -1) and continues with an EM step from there; an extrapolation
    that lowers the EP evidence, or where EP fails, is dropped for x2. EM alone
    converges linearly and slowly for GP hyperparameters (thousands of iterations on
    Pima); every point visited is still an EM iterate or a safeguarded extrapolation.
    """
    em = _EMEP(model, epsilon_rule, prior)
    if accelerate is None:
        accelerate = em.objective.nodes[0].op.approximation != "adf"
    history = {"log_evidence": [], "bound": [], "epsilon": []}
    state = {"converged": False}

    def step(x_point):
        new, log_z, bound, eps = em(x_point)
        done = bool(history["log_evidence"]) and abs(log_z - history["log_evidence"][-1]) < tol
        for key, value in zip(("log_evidence", "bound", "epsilon"), (log_z, bound, eps)):
            history[key].append(value)
        bar.show(len(history["bound"]), f"log evidence {log_z:.4f}")
        state["converged"] = state["converged"] or done
        return new, log_z

    def stop():
        return state["converged"] or len(history["bound"]) >= max_iter

    with Progress("EM-EP", max_iter, progressbar) as bar:
        x0 = point
        while not stop():
            x1, _ = step(x0)
            if not accelerate or stop():
                x0 = x1
                continue
            x2, ev1 = step(x1)
            if stop():
                x0 = x2
                break
            x0 = _squarem_step(em, x0, x1, x2, ev1, step)
        point = x0
    message = (f"log evidence changed by less than {tol:g}" if state["converged"]
               else f"reached {max_iter} EM iterations")
    final = em.log_evidence(point)
    return FitResult(
        method="em-ep", point=_all_values(model, point, em.objective), log_evidence=float(final),
        history={k: np.asarray(v, float) for k, v in history.items()}, converged=state["converged"],
        n_iter=len(history["bound"]), message=message, model=model,
    )


def _squarem_step(em, x0, x1, x2, ev1, step):
    """The next point of SQUAREM from two EM steps (``_em_ep``), safeguarded by the EP evidence."""
    v0, v1, v2 = (_ravel(x, em.moving) for x in (x0, x1, x2))
    with np.errstate(invalid="ignore", over="ignore"):  # epsilon at 0 is -inf unconstrained
        r = v1.data - v0.data
        v = v2.data - 2.0 * v1.data + v0.data
    if not np.any(v) or not np.all(np.isfinite(v)):
        return x2
    alpha = min(-np.linalg.norm(r) / np.linalg.norm(v), -1.0)
    extrapolated = _unravel(v0.data - 2 * alpha * r + alpha**2 * v, v0, x2)
    try:
        if em.log_evidence(extrapolated) < ev1:
            return x2
        return step(extrapolated)[0]
    except (ValueError, FloatingPointError, np.linalg.LinAlgError):
        return x2


def _e_step(objective, K, theta):
    """q(f) = N(h, A) from the model's approximation (EP for MarginalEP) at the current hyperparameters."""
    result = objective.solve(0, K, theta, with_grad=False)
    if not np.isfinite(result.log_z):
        raise FloatingPointError("the E-step's approximation failed (non-finite log evidence)")
    return result


def _entropy_constant(structure, arrays, q, A):
    """F minus the M-step objective: H(q) - (n/2) log 2 pi = n/2 + log|A| / 2, log|A| = log|K| - log|B|
    (log|K| from the structure's ``log_det_prior``; FITC: log|K~| as ``fitc_covariance_bound`` takes it)."""
    log_det_K = structure.log_det_prior(arrays, q.mean, A)
    return 0.5 * len(q.mean) + 0.5 * (log_det_K - 2.0 * q.posterior.half_logdet_B())


def m_step_objective(objective, point, h, A):
    """The M-step objective and its gradient in the targets (None outside K's domain).

    F_K (the structure's ``covariance_bound``: ``structures.em_bounds``) + sum_i E_q[log p(y_i | f_i, theta)]
    (+ log prior):
    the bound F with q fixed, less its entropy term. The data term is left out when
    no target moves theta (it is then constant, and -inf for the step likelihood at
    eps = 0); ``_em_ep`` adds it back for the recorded bound.
    """
    [(arrays, theta)], rest = objective.kernel_inputs(point)
    structure = objective.structures[0]
    try:
        f_K, d_prior = structure.covariance_bound(arrays, h, A)
    except NotPositiveDefiniteError:
        return -np.inf, None
    ell, d_theta = np.zeros(1), np.zeros((1, theta.size))
    if objective.theta_free:  # otherwise the data term is a constant of the M-step (and -inf at eps = 0)
        ell, d_theta = objective.nodes[0].op._lik.expected_log_lik(objective.labels[0], h,
                                                                   structure.marginal_variances(A), theta)
    grad = objective.pullback(point, [(*d_prior, np.asarray(d_theta.sum(axis=0), float).reshape(theta.shape))])
    return f_K + float(np.sum(ell)) + rest, grad


def _m_step(objective, point, h, A, maxiter=200):
    """Maximise the bound over the target variables with q(f) fixed (L-BFGS-B)."""
    if not objective.targets:
        return point, m_step_objective(objective, point, h, A)[0]
    x0 = _ravel(point, objective.targets)

    def negative(x):
        value, grad = m_step_objective(objective, _unravel(x, x0, point), h, A)
        if grad is None or not np.isfinite(value) or not np.all(np.isfinite(grad)):
            return 1e300, np.zeros_like(x)
        return -value, -grad

    res = scipy.optimize.minimize(negative, x0.data, jac=True, method="L-BFGS-B",
                                  options=dict(maxiter=maxiter, ftol=1e-12, gtol=1e-8))
    return _unravel(res.x, x0, point), -float(res.fun)
