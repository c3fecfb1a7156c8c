"""The model as ``pymc_gpc.fit`` sees it: its GP evidence terms, solved in NumPy with their
own warm starts, and everything else, compiled by PyTensor with the pullback of the
solvers' gradients (``Objective``); and the conversions between points and vectors."""

import weakref

import numpy as np
import pytensor.tensor as pt
from pymc.blocking import DictToArrayBijection, RaveledVars
from pymc.initial_point import make_initial_point_fn
from pymc.pytensorf import compile as compile_fn
from pytensor.graph.replace import graph_replace
from pytensor.graph.traversal import ancestors

from ..approximations import registry
from ..approximations.solve import solve_with_retries
from ..ops.marginal import ApproxMarginalOp
from ..backends.python_vm import PYTHON_VM_FORWARD_MODE, PYTHON_VM_MODE
from ..approximations.softmax_laplace import softmax_laplace
from ..approximations.variational_bound import check_dtc_inputs, softmax_dtc_bound
from ..structures.fitc import NonFiniteKernelError
from ..structures.select import FITC_MULTICLASS
from ..validation import trusted_kernel

__all__ = ["Objective", "objective_for", "marginal_nodes", "other_terms", "start_point", "ravel", "unravel",
           "all_values", "check_bound_terms", "FIT_MODE", "FIT_FORWARD_MODE", "BOUND_DRAWS"]


# The kernel and pullback graphs of ``fit`` on PyTensor's Python VM (``backends.python_vm``:
# numba's compilation of a new graph is not won back); the kernel graph with fewer rewrites.
FIT_MODE = PYTHON_VM_MODE
FIT_FORWARD_MODE = PYTHON_VM_FORWARD_MODE

# fixed quasi-random draws a row in the SVGP-type bound's expectation (``fit(method="elbo")``): at
# 10^4 rows, 256 predicted as 1,024 did (benchmarks/results/multiclass_svgp.md)
BOUND_DRAWS = 256


class Objective:
    """The model split into its GP classification terms and everything else.

    ``objective = rest(values) + sum_j log q(y_j | K_j, theta_j)``, where the
    approximations run in NumPy here (so ``fit`` keeps its own warm starts) and PyTensor
    only computes the kernels, ``rest`` and the pullback of the solvers' gradients
    dlog q/dK, dlog q/dtheta to the free variables in ``targets``. Compiled in
    ``FIT_MODE``: these graphs run once per optimiser iteration, so their compilation
    is what matters.
    """

    def __init__(self, model, rest_terms, targets, bound=False):
        self.model, self.bound = model, bool(bound)
        self.free = list(model.continuous_value_vars)
        if not self.free:
            raise ValueError("the model has no continuous free variables to fit")
        self.nodes = marginal_nodes(model)
        self.structures = [node.op.structure for node in self.nodes]
        if self.bound:
            check_bound_terms(self.nodes)
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
        self.overrides = [{} for _ in self.nodes]

    def coarse_options(self):
        """Per term, the solver options of the fit's coarse first run (the registry's
        ``coarse_fit_defaults``, e.g. EP's tol 1e-3 against the engine's 1e-8), or {} where
        there are none or they are the term's own; ``set_overrides`` applies them."""
        out = []
        for node in self.nodes:
            own = dict(node.op.options)
            loose = dict(registry.solver_for(node.op.approximation, node.op.likelihood_type).coarse_fit_defaults)
            out.append({} if all(own.get(k) == v for k, v in loose.items()) else loose)
        return out

    def set_overrides(self, overrides):
        """Solve term j with ``overrides[j]`` over its Op's options from now on ([{}, ...]: none)."""
        self.overrides = [dict(o) for o in overrides]

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
        options = {**dict(node.op.options), **self.overrides[j], "with_grad": with_grad, "with_loo": False}
        # K comes from a covariance function, as in the Op: no symmetry or PSD check (one
        # Cholesky factorisation per class and solve); an indefinite K still fails the solve
        with np.errstate(over="ignore", invalid="ignore", divide="ignore", under="ignore"), trusted_kernel():
            result, _ = solve_with_retries(node.op.approximation, K, self.labels[j], node.op.likelihood, theta,
                                            self.states[j], options,
                                            node.op.retry_schedule(options))
        if np.isfinite(result.log_z):
            self.states[j] = result.state
        return result

    def pullback(self, point, cotangents):
        """Gradient of rest + sum <cotangent, (K_j, theta_j)> in the target variables, raveled."""
        args = [c for pair in cotangents for c in pair]
        grads = self.backward(*self._inputs(point), *args)
        return np.concatenate([np.ravel(g) for g in grads]) if grads else np.zeros(0)

    def bound_term(self, j, arrays):
        """Term j's SVGP-type bound at the kernel input values ``arrays`` (``softmax_dtc_bound``, with
        ``BOUND_DRAWS`` draws a row and the Op's Newton tol and max_iter), warm-started from its last
        DTC solve: (value, kernel cotangents). LinAlgError where the mode is not found."""
        options = {k: v for k, v in dict(self.nodes[j].op.options).items() if k in ("tol", "max_iter")}
        with np.errstate(over="ignore", invalid="ignore", divide="ignore", under="ignore"):
            b = softmax_dtc_bound(*arrays, self.labels[j], state=self.states[j], draws=BOUND_DRAWS, **options)
        if np.isfinite(b.value):
            self.states[j] = b.result.state
        return b.value, tuple(b.gradient)

    def evidence_and_grad(self, point):
        """objective, log evidence and the objective's gradient in the targets (None if it failed);
        with ``bound``, each term's SVGP-type bound in place of its log evidence (``bound_term``)."""
        inputs, rest = self.kernel_inputs(point)
        log_z, cotangents = 0.0, []
        for j, (structure, (arrays, theta)) in enumerate(zip(self.structures, inputs)):
            try:
                prior = check_dtc_inputs(*arrays) if self.bound else structure.prior_from(*arrays)
            except NonFiniteKernelError:  # a prior structure refusing non-finite kernels (FITCPrior); other
                # ValueErrors (e.g. FITC shapes that do not match) are errors of the model: they propagate
                return -np.inf, -np.inf, None
            try:
                if self.bound:
                    value, d_prior = self.bound_term(j, prior)
                else:
                    result = self.solve(j, prior, theta)
            except (ValueError, np.linalg.LinAlgError):
                return -np.inf, -np.inf, None
            if self.bound:
                d_theta = np.zeros_like(theta)
            else:
                value, d_prior = result.log_z, structure.kernel_cotangents(result)
                d_theta = np.asarray(result.dlog_z_dparams, float).reshape(theta.shape)
            if not (np.isfinite(value) and all(np.all(np.isfinite(c)) for c in d_prior)):
                return -np.inf, -np.inf, None
            log_z += value
            cotangents.append((*d_prior, d_theta))
        return rest + log_z, log_z, self.pullback(point, cotangents)


_compiled = weakref.WeakKeyDictionary()


def objective_for(model, rest_terms, targets, bound=False):
    """A compiled ``Objective``, reused while the model's variables are unchanged."""
    key = (tuple(v.name for v in rest_terms), tuple(v.name for v in targets),
           tuple(v.name for v in model.value_vars), tuple(v.name for v in model.potentials), bool(bound))
    cache = _compiled.setdefault(model, {})
    if key not in cache:
        cache[key] = Objective(model, rest_terms, targets, bound)
    objective = cache[key]
    objective.states = [None] * len(objective.nodes)
    objective.set_overrides([{} for _ in objective.nodes])
    return objective


def marginal_nodes(model):
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


def check_bound_terms(nodes):
    """ValueError, before any heavy work, unless every evidence term (``nodes``) is one the SVGP-type
    bound serves (``solvers.softmax_dtc_bound``): several classes, the softmax's Laplace approximation
    (the registry's solver ``softmax_laplace``) and the inducing-point prior."""
    for node in nodes:
        solver = registry.solver_for(node.op.approximation, node.op.likelihood_type)
        if solver.solve is not softmax_laplace or node.op.structure != FITC_MULTICLASS:
            raise ValueError(
                f"fit(method='elbo') takes several classes with the softmax's Laplace approximation and "
                f"approx='FITC' (MarginalLaplace(likelihood=Softmax(), approx='FITC')); this model's term "
                f"{node.outputs[0].name or ''!r} is {node.op.approximation!r} with {node.op.likelihood!r} on the "
                f"{node.op.structure.name} prior. Use method='map' for it.")


def check_gradient(model, needs, remedy):
    """ValueError, before any heavy work, where an evidence term of ``model`` has no gradient
    (the registry's ``has_gradient``: ADF): "``needs`` the evidence's gradient, which ADF does
    not provide; ``remedy``"."""
    gradient_free = [n.op.approximation for n in marginal_nodes(model)
                     if not registry.get(n.op.approximation).has_gradient]
    if gradient_free:
        raise ValueError(f"{needs} the evidence's gradient, which {gradient_free[0].upper()} does not provide; "
                         f"{remedy}")


def other_terms(model, include_priors):
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


def start_point(model, start):
    fn = make_initial_point_fn(model=model, overrides=start or None, jitter_rvs=set(), return_transformed=True)
    return fn(0)


def ravel(point, variables):
    return DictToArrayBijection.map({v.name: point[v.name] for v in variables})


def unravel(x, layout, point):
    """``point`` with the variables raveled in ``layout`` (a ``ravel`` result) set from ``x``."""
    return DictToArrayBijection.rmap(RaveledVars(np.asarray(x, float), layout.point_map_info), point)


def all_values(model, point, objective=None):
    """Free, transformed and deterministic values at ``point`` (as ``pm.find_MAP`` returns).

    With ``objective``, the evidence terms' outputs (``{name}_loo``, ``_n_iter``, ``_status``)
    are evaluated warm-started by ``_evidence_outputs`` and enter the graph as constants, so
    the compiled graph holds no kernel and no solve.
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
    objective's last solution of that term (its state at the optimum, after ``maximise``).

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
