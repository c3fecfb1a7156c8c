"""What ``pymc_gpc.fit`` returns (``FitResult``) and what it raises or warns."""

import copy
from dataclasses import dataclass, field

import numpy as np
import pymc as pm
import xarray as xr

__all__ = ["FitResult", "FitStartError", "RunawayHyperparameterWarning", "fitted_states"]


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
    method : "type2", "map", "elbo" or "em-ep".
    point : every free variable (constrained and transformed) and deterministic at the
        optimum, as ``pm.find_MAP`` returns it.
    log_evidence : the approximate log evidence log q(y | theta) at ``point`` (elbo: the
        SVGP-type bound there, which it maximises in its place).
    history : arrays with one entry per iteration: ``log_evidence`` and ``objective``
        (type2 / map / elbo), or ``log_evidence``, ``bound`` (F after the M-step) and
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
    solver_states : per GP evidence term, by its potential's name (``model.name_for`` of
        the name given to ``marginal_likelihood``), the approximation's state (EP's sites,
        Laplace's mode) of the fit's last solve at ``point``
        (``fitted_states``); empty where the method does not record them.
        ``gp.predict(Xnew, point=result)`` starts its solve from it: the same prediction
        as ``point=result.point`` to the solver's tolerance, in fewer sweeps.

    Examples
    --------
    >>> result = pymc_gpc.fit(model, method="map", progressbar=False)  # doctest: +SKIP
    >>> result.point["log_v0"], result.n_iter, result.runaway  # doctest: +SKIP
    >>> p = gp.predict(Xnew, point=result)  # doctest: +SKIP
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
    solver_states: dict = field(default_factory=dict, repr=False, compare=False)

    def solver_state(self, name):
        """The state of the evidence term whose potential is named ``name``, or None."""
        return self.solver_states.get(name)

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
        from ..idata import add_log_likelihood  # the pointwise terms and diagnostics out of the posterior

        return add_log_likelihood(tree, model)


def fitted_states(objective):
    """{potential name: a copy of the last state the objective's solve of that term reached}
    (``Objective.states``; the evidence Op's first output carries the potential's name).

    Taken right after the fit's evaluation at its returned point, these are the states at
    that point; a term whose solve failed there keeps its previous state, which is still a
    valid warm start (a start changes the number of sweeps, not the fixed point)."""
    return {node.outputs[0].name: copy.deepcopy(state)
            for node, state in zip(objective.nodes, objective.states)
            if state is not None and node.outputs[0].name is not None}
