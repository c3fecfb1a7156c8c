r"""The log posterior of the hyperparameters in the unconstrained space, as NUTS targets
it: the approximate log evidence of each GP term (EP or Laplace, at the engine's
tolerances), plus the hyperpriors and the other terms of the model, plus the log
Jacobian of the transforms,

.. math::

    \log p(x \mid y) = \sum_j \log q(y_j \mid \theta_j(x)) + \log p(\theta(x))
                       + \log\left|\det \partial\theta / \partial x\right| + \text{const},

with its exact gradient (``Objective``'s pullback of the solvers' gradients, plus the
Jacobian's); its mode (``find_mode``) and its Hessian there by central differences of the
exact gradient (``hessian``)."""

import warnings

import numpy as np
import pytensor.tensor as pt
import scipy.optimize
from pymc.pytensorf import compile as compile_fn

from ..structures.fitc import NonFiniteKernelError
from .objective import FIT_MODE, check_gradient, objective_for, other_terms, ravel, unravel

__all__ = ["LogPosterior", "find_mode", "start_scale", "hessian", "HESSIAN_STEP", "START_WITHIN"]


# the step of the central differences of the gradient (unconstrained units: log scales)
HESSIAN_STEP = 1e-3


class LogPosterior:
    """``value(x)`` and ``value_and_grad(x)`` of the module docstring at raveled unconstrained
    vectors x (the layout of ``ravel(point, self.free)``).

    Parameters
    ----------
    model : a ``pm.Model`` with at least one GP classification term of this package.
    point : a point of the model's value variables (the start; fixes the layout).

    Raises
    ------
    ValueError
        For discrete free variables, or an approximation without a gradient (ADF).
    """

    def __init__(self, model, point):
        if model.discrete_value_vars:
            raise ValueError("deterministic integration serves continuous hyperparameters only; the model has "
                             f"discrete ones: {[v.name for v in model.discrete_value_vars]}")
        check_gradient(model, "the integration's mode and Hessian need", "use EP or Laplace")
        self.model = model
        self.objective = objective_for(model, other_terms(model, include_priors=True), model.continuous_value_vars)
        self.free = self.objective.free
        self.point = dict(point)
        self.layout = ravel(point, self.free)
        # whether a free variable is sampled through a transform (its log Jacobian is then in
        # the density, and MAP-II's point, which lacks it, is not this density's mode)
        self.transformed = any(model.rvs_to_transforms.get(rv) is not None for rv in model.free_RVs)
        jacobian = model.logp(vars=model.free_RVs, jacobian=True) - model.logp(vars=model.free_RVs, jacobian=False)
        self._jacobian = compile_fn(self.free, [jacobian, *pt.grad(jacobian, self.free)], on_unused_input="ignore",
                                    mode=FIT_MODE)
        self.n_evaluations = 0

    @property
    def size(self):
        return self.layout.data.size

    def to_point(self, x):
        """The point of the value variables at x."""
        return unravel(x, self.layout, self.point)

    def _log_jacobian(self, point):
        out = self._jacobian(*[point[v.name] for v in self.free])
        return float(out[0]), np.concatenate([np.ravel(g) for g in out[1:]])

    def value(self, x):
        """log p(x | y) up to a constant (-inf where a solve failed), without the gradient's cost."""
        self.n_evaluations += 1
        point = self.to_point(x)
        try:
            pairs, rest = self.objective.kernels(point)
            log_z = 0.0
            for j, (K, theta) in enumerate(pairs):
                log_z += self.objective.solve(j, K, theta, with_grad=False).log_z
        except (NonFiniteKernelError, ValueError, np.linalg.LinAlgError):
            return -np.inf
        value = rest + log_z + self._log_jacobian(point)[0]
        return float(value) if np.isfinite(value) else -np.inf

    def value_and_grad(self, x):
        """log p(x | y) and its gradient in x (-inf and None where a solve failed)."""
        self.n_evaluations += 1
        point = self.to_point(x)
        value, _, grad = self.objective.evidence_and_grad(point)
        if grad is None or not np.isfinite(value):
            return -np.inf, None
        jac, d_jac = self._log_jacobian(point)
        return float(value + jac), grad + d_jac


def find_mode(target, x0, maxiter=200):
    """The mode of ``target`` (a ``LogPosterior``) by L-BFGS-B from x0 (e.g. MAP-II's point,
    which lacks only the Jacobian), then Newton steps with the finite-difference Hessian
    while they raise the log density (L-BFGS-B stops at a gradient of about 1e-6; the
    Newton steps bring a near-quadratic mode to the solver's accuracy).

    Returns (mode, log density there by ``value``, as at the design points; the Hessian)."""
    def negative(x):
        value, grad = target.value_and_grad(x)
        if grad is None or not np.all(np.isfinite(grad)):
            return 1e300, np.zeros_like(x)
        return -value, -grad

    res = scipy.optimize.minimize(negative, np.asarray(x0, float), jac=True, method="L-BFGS-B",
                                  options=dict(maxiter=maxiter, ftol=1e-12, gtol=1e-8))
    x, value = res.x, -float(res.fun)
    if not np.isfinite(value) or value <= -1e299:
        raise ValueError("the log posterior of the hyperparameters is not finite at the start of the mode search")
    H = hessian(target, x)
    for _ in range(3):
        value_x, grad = target.value_and_grad(x)
        try:
            step = -np.linalg.solve(H, grad)
        except np.linalg.LinAlgError:
            break
        if not np.all(np.isfinite(step)):
            break
        new_value, _ = target.value_and_grad(x + step)
        if not new_value > value_x:
            break
        x, value = x + step, new_value
        if np.max(np.abs(step)) < 1e-10:
            break
    # the Hessian at L-BFGS-B's point: the Newton steps move by about 1e-6 or less
    return x, target.value(x), H


# ``start_scale`` keeps a start whose Newton step to the mode is at most this many posterior sds
START_WITHIN = 0.1


def start_scale(target, x0):
    """(centre, Hessian) of the normal that NUTS starts from (``sampling.laplace_start``): x0
    moved by one Newton step, and the Hessian at x0, where that step is at most ``START_WITHIN``
    posterior sds (its length in the metric of -H); else ``find_mode``'s mode and Hessian.

    From MAP-II's point (a gradient of about 1e-6) the start is then the Hessian's 2d
    gradients and one more, where ``find_mode``'s search to a gradient of 1e-8 and its Newton
    steps add about 25 evaluations at the engine's tolerance (at 50,000 rows with FITC, m = 200:
    about 25 CPU s): NUTS's start needs the posterior's scale, not the mode's last digits
    (its chains start at draws from the normal, its mass matrix at (-H)^{-1}). Where the model
    has transformed variables MAP-II's point lacks the log Jacobian (on Pima with LogNormal
    and HalfNormal priors the step was above the limit), so ``find_mode`` runs directly."""
    near = None if target.transformed else _short_newton_step(target, x0)
    if near is not None:
        return near
    mode, _, H = find_mode(target, x0)
    return mode, H


def _short_newton_step(target, x0):
    """(x0 + the Newton step, the Hessian at x0) where -H is positive definite and the step is
    at most ``START_WITHIN`` posterior sds long; else None."""
    H = hessian(target, x0)
    value, grad = target.value_and_grad(x0)
    if grad is None or not np.isfinite(value):
        return None
    try:
        np.linalg.cholesky(-H)
        step = np.linalg.solve(-H, grad)
    except np.linalg.LinAlgError:
        return None
    return (x0 + step, H) if np.sqrt(max(float(grad @ step), 0.0)) <= START_WITHIN else None


def hessian(target, x, step=HESSIAN_STEP):
    """The Hessian of ``target`` at x by central differences of its exact gradient,
    symmetrised: column i = (g(x + h e_i) - g(x - h e_i)) / 2h (2d gradient evaluations).

    Raises ValueError where a gradient near x cannot be evaluated."""
    d = x.size
    H = np.empty((d, d))
    for i in range(d):
        e = np.zeros(d)
        e[i] = step
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            _, up = target.value_and_grad(x + e)
            _, down = target.value_and_grad(x - e)
        if up is None or down is None:
            raise ValueError(f"the log posterior's gradient failed within {step} of the mode (element {i}); "
                             "deterministic integration needs it there")
        H[:, i] = (up - down) / (2.0 * step)
    return 0.5 * (H + H.T)
