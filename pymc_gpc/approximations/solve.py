"""Solving one approximation at one point: the registry's solver by name, and the retries
after a non-converged run (``approximations.registry``: one schedule per prior structure).

Used by the evidence Ops (``ops.marginal``), ``pymc_gpc.fit`` (``point_estimates``) and
prediction over posterior draws (``prediction``).
"""

import dataclasses

import numpy as np

from .registry import APPROXIMATIONS, get
from .result import WarmStartMismatch

__all__ = ["solve", "solve_with_retries", "highest_converged", "default_retries", "prediction_options", "max_log_evidence"]


def prediction_options(options):
    """``options`` for a solve whose result only predicts: no gradient and no LOO terms."""
    return dict(options, with_grad=False, with_loo=False)


def solve(approximation, K, y, lik, params, state, options):
    return APPROXIMATIONS[approximation].solver(K, y, lik, params, state=state, **options)


# The bound on log p(y) for a likelihood that states none (``max_log_evidence``): every
# likelihood of the package (binary, ordinal, several classes) models discrete labels, so
# p(y) <= 1 and log p(y) <= 0.
DISCRETE_LABELS_MAX_LOG_EVIDENCE = 0.0


def max_log_evidence(lik):
    """The largest log evidence ``lik`` admits: its ``max_log_evidence``, else 0 (discrete
    labels, p(y) <= 1: the multi-class likelihoods, softmax and multinomial probit)."""
    return getattr(lik, "max_log_evidence", DISCRETE_LABELS_MAX_LOG_EVIDENCE)


def _bounded(result, lik):
    """``result``, or where its log evidence is NaN or above ``max_log_evidence(lik)`` (0 for
    discrete labels) a failed copy of it (log_z = -inf, not converged: status 2), which the
    retries replace. Such values come from runs that reached no fixed point (EP sites
    oscillating with a nearly singular K^-1 + S).
    """
    bound = max_log_evidence(lik)
    if np.isnan(result.log_z) or result.log_z > bound:
        return dataclasses.replace(result, log_z=-np.inf, converged=False)
    return result


def default_retries(approximation, options):
    """The fallback schedule after a non-converged run: the registry's for the approximation's
    default structure (dense EP: damped, then sequential)."""
    return get(approximation).retry_schedule(options)


def highest_converged(approximation, K, y, lik, params, options, schedule):
    """The rule for a likelihood that is not log-concave: every run of the schedule (``options``,
    then each retry, all cold), and of the converged runs with a finite value the one with the
    highest log evidence; if none converged, a failed copy of the last run (status 2).

    Where EP has several fixed points, which one a run reaches depends on its path; this rule
    is one both backends apply (``backends.jax.engine.ep_solve``), so they agree. Returns
    (result, number of runs after the first).
    """
    best, last = None, None
    for run in [options, *schedule]:
        try:
            last = _bounded(solve(approximation, K, y, lik, params, None, run), lik)
        except np.linalg.LinAlgError:
            continue
        if last.converged and np.isfinite(last.log_z) and (best is None or last.log_z > best.log_z):
            best = last
    if best is not None:
        return best, len(schedule)
    if last is None:
        raise np.linalg.LinAlgError("no run of the schedule had a posterior (K^-1 + S indefinite)")
    return dataclasses.replace(last, log_z=-np.inf, converged=False), len(schedule)


def solve_with_retries(approximation, K, y, lik, params, state, options, retry_options=None):
    """Solve, falling back on a cold start and then on ``default_retries``.

    A warm-started run that raises a LinAlgError or ``WarmStartMismatch`` or gives a non-finite
    value is repeated cold (a state fitted to another K or other data). After a non-converged
    run the retry schedule is tried (cold starts; a retry that raises is skipped). Returns
    (result, number of retries taken); other exceptions, and a cold start's, propagate.
    ``retry_options``: a schedule replacing ``default_retries``. A likelihood that is not
    log-concave runs ``highest_converged`` instead.
    """
    schedule = default_retries(approximation, options) if retry_options is None else retry_options
    if not lik.log_concave:
        return highest_converged(approximation, K, y, lik, params, options, schedule)
    retries = 0
    result = None
    try:
        result = _bounded(solve(approximation, K, y, lik, params, state, options), lik)
    except (np.linalg.LinAlgError, WarmStartMismatch):
        if state is None:
            raise
    if state is not None and (result is None or not np.isfinite(result.log_z)):
        retries += 1
        result = _bounded(solve(approximation, K, y, lik, params, None, options), lik)
    for retry in schedule if not result.converged else []:
        retries += 1
        try:
            attempt = _bounded(solve(approximation, K, y, lik, params, None, retry), lik)
        except np.linalg.LinAlgError:
            continue
        if np.isfinite(attempt.log_z) or not np.isfinite(result.log_z):
            result = attempt
        if result.converged:
            break
    return result, retries
