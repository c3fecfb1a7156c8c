r"""EM-EP (Kim & Ghahramani 2003): the model's approximation as the E-step, the bound's
M-step over the covariance hyperparameters (``structures.em_bounds``, through the prior
structure), the step likelihood's label-noise rate in closed form, SQUAREM acceleration
(Varadhan & Roland 2008). ``point_estimates``'s docstring states the bound."""

import numpy as np
import pytensor.tensor as pt
import scipy.optimize
from pytensor.graph.traversal import ancestors

from ..approximations import registry
from ..likelihoods.binary import StepLabelNoise
from ..progress import Iterations
from ..structures.dense import NotPositiveDefiniteError
from .objective import all_values, marginal_nodes, objective_for, ravel, unravel
from .result import FitResult, fitted_states

__all__ = ["fit_em_ep", "epsilon_update", "m_step_objective", "e_step", "m_step", "EPSILON_RULES"]

EPSILON_RULES = ("omega", "errors")
_MAX_LABEL_NOISE = 0.5 - 1e-9


def epsilon_update(rule, y, h, a_diag):
    """The closed-form M-step for the step likelihood's label-noise rate (``point_estimates``'s docstring)."""
    if rule == "errors":
        eps = np.mean(np.sign(h) != y)
    else:
        eps = 1.0 - np.mean(np.exp(StepLabelNoise.log_prob_correct(y, h, a_diag)))
    return float(min(eps, _MAX_LABEL_NOISE))


def _epsilon_variable(model, node):
    """The value variable of a free label-noise rate of the step likelihood, or None if fixed."""
    if not isinstance(node.op.likelihood, StepLabelNoise):
        return None
    sources = [v for v in ancestors([node.inputs[node.op.structure.n_kernel_inputs]]) if v in model.value_vars]
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
        nodes = marginal_nodes(model)
        if len(nodes) != 1:
            raise ValueError(f"em-ep needs exactly one GP classification term, the model has {len(nodes)}")
        self.model, self.rule = model, epsilon_rule
        self.epsilon_var = _epsilon_variable(model, nodes[0])
        self.structure = nodes[0].op.structure
        k = self.structure.n_kernel_inputs  # the node's inputs: the prior's k arrays, then theta
        dependent = set(ancestors(nodes[0].inputs[:k + 1]))
        targets = [v for v in model.continuous_value_vars if v in dependent and v is not self.epsilon_var]
        self.objective = objective_for(model, list(model.free_RVs) if prior else [], targets)
        self.objective.theta_free = any(v in set(ancestors([nodes[0].inputs[k]])) for v in targets)
        self.moving = targets + ([self.epsilon_var] if self.epsilon_var is not None else [])
        self.y = self.objective.labels[0]

    def __call__(self, point):
        """(next point, log evidence at ``point``, bound F after the M-step, epsilon)."""
        objective = self.objective
        [(arrays, theta)], _ = objective.kernel_inputs(point)
        structure = self.structure
        q = e_step(objective, structure.prior_from(*arrays), theta)
        h, A = q.mean, structure.q_covariance(q)
        eps = np.nan
        if self.epsilon_var is not None:
            eps = epsilon_update(self.rule, self.y, h, structure.marginal_variances(A))
            point = _set_value(self.model, point, self.epsilon_var, eps)
        point, value = m_step(objective, point, h, A)
        if not objective.theta_free:  # the data term, constant during the M-step
            [(_, theta)], _ = objective.kernel_inputs(point)
            value += float(np.sum(objective.nodes[0].op.likelihood.expected_log_lik(
                self.y, h, structure.marginal_variances(A), theta)[0]))
        return point, q.log_z, value + _entropy_constant(structure, arrays, q, A), eps

    def log_evidence(self, point):
        [(K, theta)], _ = self.objective.kernels(point)
        return e_step(self.objective, K, theta).log_z


def fit_em_ep(model, point, epsilon_rule, prior, max_iter, tol, progressbar, accelerate=None):
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
        # SQUAREM's safeguard compares evidences at a fixed point: not for ADF's single,
        # order-dependent pass, the registry's one approximation without a gradient
        accelerate = registry.get(em.objective.nodes[0].op.approximation).has_gradient
    history = {"log_evidence": [], "bound": [], "epsilon": []}
    state = {"converged": False}

    def step(x_point):
        new, log_z, bound, eps = em(x_point)
        done = bool(history["log_evidence"]) and abs(log_z - history["log_evidence"][-1]) < tol
        for key, value in zip(("log_evidence", "bound", "epsilon"), (log_z, bound, eps)):
            history[key].append(value)
        bar.show(len(history["bound"]), log_z, "log evidence")
        state["converged"] = state["converged"] or done
        return new, log_z

    def stop():
        return state["converged"] or len(history["bound"]) >= max_iter

    with Iterations("EM-EP", progressbar) as bar:
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
    states = fitted_states(em.objective)  # solved at exactly the returned point
    return FitResult(
        method="em-ep", point=all_values(model, point, em.objective), log_evidence=float(final),
        history={k: np.asarray(v, float) for k, v in history.items()}, converged=state["converged"],
        n_iter=len(history["bound"]), message=message, model=model, solver_states=states,
    )


def _squarem_step(em, x0, x1, x2, ev1, step):
    """The next point of SQUAREM from two EM steps (``fit_em_ep``), safeguarded by the EP evidence."""
    v0, v1, v2 = (ravel(x, em.moving) for x in (x0, x1, x2))
    with np.errstate(invalid="ignore", over="ignore"):  # epsilon at 0 is -inf unconstrained
        r = v1.data - v0.data
        v = v2.data - 2.0 * v1.data + v0.data
    if not np.any(v) or not np.all(np.isfinite(v)):
        return x2
    alpha = min(-np.linalg.norm(r) / np.linalg.norm(v), -1.0)
    extrapolated = unravel(v0.data - 2 * alpha * r + alpha**2 * v, v0, x2)
    try:
        if em.log_evidence(extrapolated) < ev1:
            return x2
        return step(extrapolated)[0]
    except (ValueError, FloatingPointError, np.linalg.LinAlgError):
        return x2


def e_step(objective, K, theta):
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
    eps = 0); ``fit_em_ep`` adds it back for the recorded bound.
    """
    [(arrays, theta)], rest = objective.kernel_inputs(point)
    structure = objective.structures[0]
    try:
        f_K, d_prior = structure.covariance_bound(arrays, h, A)
    except NotPositiveDefiniteError:
        return -np.inf, None
    ell, d_theta = np.zeros(1), np.zeros((1, theta.size))
    if objective.theta_free:  # otherwise the data term is a constant of the M-step (and -inf at eps = 0)
        ell, d_theta = objective.nodes[0].op.likelihood.expected_log_lik(objective.labels[0], h,
                                                                   structure.marginal_variances(A), theta)
    grad = objective.pullback(point, [(*d_prior, np.asarray(d_theta.sum(axis=0), float).reshape(theta.shape))])
    return f_K + float(np.sum(ell)) + rest, grad


def m_step(objective, point, h, A, maxiter=200):
    """Maximise the bound over the target variables with q(f) fixed (L-BFGS-B)."""
    if not objective.targets:
        return point, m_step_objective(objective, point, h, A)[0]
    x0 = ravel(point, objective.targets)

    def negative(x):
        value, grad = m_step_objective(objective, unravel(x, x0, point), h, A)
        if grad is None or not np.isfinite(value) or not np.all(np.isfinite(grad)):
            return 1e300, np.zeros_like(x)
        return -value, -grad

    res = scipy.optimize.minimize(negative, x0.data, jac=True, method="L-BFGS-B",
                                  options=dict(maxiter=maxiter, ftol=1e-12, gtol=1e-8))
    return unravel(res.x, x0, point), -float(res.fun)
