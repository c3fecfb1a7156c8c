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
``"elbo"``
    MAP of the evidence lower bound that sparse variational GP classification (SVGP;
    Hensman, Matthews & Ghahramani 2015) maximises, in place of the evidence, plus the
    hyperpriors: the bound on the exact GP model's evidence, taken at the softmax Laplace
    Gaussian of the inducing values under the DTC prior, each q(f_i) widened by the
    conditional variance diag(K - Q)_i that no data shrink
    (``pymc_gpc.solvers.softmax_dtc_bound``: its exact gradient in closed form, the
    expectation over 256 fixed quasi-random draws a row, ``objective.BOUND_DRAWS``). For
    several classes with the softmax's Laplace approximation and ``approx="FITC"`` only.
    Unlike the evidence, the bound does not reward the large amplitudes that MAP-II can fit
    at many rows (``benchmarks/results/multiclass_svgp.md``: on one public set of 10,000 rows
    it predicted better than MAP-II by 0.014 nats per test row, on another 0.003 worse, with
    the predictive's covariance scaled by 0.2; at 1.8 to 5 times MAP-II's CPU, median 2.2). Predictions use the model's own approximation (FITC
    Laplace) at the point found; ``FitResult.log_evidence`` holds the bound there.
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
``gp.predict(Xnew, point=result.point)`` works; ``point=result`` also starts the
prediction's solve from the fit's state there), the approximate log evidence there,
the per-iteration history, and convergence flags; ``to_inference_data()`` gives an
ArviZ ``DataTree`` for ``az.summary`` and plots.
"""

import pymc as pm

from .em_ep import EPSILON_RULES, epsilon_update, fit_em_ep
from .objective import start_point
from .result import FitResult, FitStartError, RunawayHyperparameterWarning
from .type2 import maximise

__all__ = ["fit", "FitResult", "FitStartError", "METHODS", "EPSILON_RULES", "RunawayHyperparameterWarning",
           "epsilon_update"]

METHODS = ("type2", "map", "elbo", "em-ep")


def fit(model=None, method="type2", *, start=None, epsilon_rule="errors", prior=False,
        accelerate=None, maxiter=None, tol=None, progressbar=True):
    """Point estimates of the hyperparameters of a model built with ``MarginalEP`` / ``MarginalLaplace``.

    Parameters
    ----------
    model : the ``pm.Model`` (default: the model on the context stack).
    method : "type2" (type-II ML), "map" (MAP-II), "elbo" (MAP of SVGP's bound: several
        classes, softmax Laplace, FITC) or "em-ep" (module docstring).
    start : starting values by variable name, in the constrained space (as
        ``pm.sample(initvals=...)``); the model's initial point otherwise.
    epsilon_rule : em-ep only: "errors" (r / n, Kim & Ghahramani eq. 18; default) or
        "omega" (the exact maximiser of the bound's epsilon term).
    prior : em-ep only: add the hyperpriors to the M-step (MAP-EM).
    accelerate : em-ep only: SQUAREM extrapolation of the EM iterations (``fit_em_ep``).
        Default: on, except with ADF's one-pass q as the E-step (EM does not ascend its
        evidence, so the extrapolation has no safeguard).
    maxiter : optimiser iterations (type2 / map / elbo, default 500) or EM iterations
        (em-ep, default 300).
    tol : convergence tolerance: relative objective change for L-BFGS-B (default
        1e-9; type2 / map / elbo also stop, as converged, when the objective rose by less
        than min(1e-6, 1000 tol) times its size over the last 10 iterations:
        ``estimation.type2.STALL_TOL``, ``STALL_RATIO``, ``STALL_WINDOW``), or
        absolute change of the log evidence between EM iterations (default 1e-4).
    progressbar : show a progress bar as PyMC does.

    Returns
    -------
    FitResult

    Raises
    ------
    ValueError
        For an unknown ``method`` or ``epsilon_rule``, a model without a classifier from
        this package, ADF (no gradient) with "type2" or "map", or "elbo" with a model other
        than several classes under softmax Laplace with ``approx="FITC"``.

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
    >>> p = gp.predict(pima.X_test, point=result)
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if epsilon_rule not in EPSILON_RULES:
        raise ValueError(f"epsilon_rule must be one of {EPSILON_RULES}, got {epsilon_rule!r}")
    model = pm.modelcontext(model)
    point = start_point(model, start)
    if method == "em-ep":
        return fit_em_ep(model, point, epsilon_rule, prior, 300 if maxiter is None else maxiter,
                         1e-4 if tol is None else tol, progressbar, accelerate)
    return maximise(model, point, method,
                    500 if maxiter is None else maxiter, 1e-9 if tol is None else tol, progressbar)
