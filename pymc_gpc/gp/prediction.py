r"""Latent predictions over many hyperparameter draws, batched (used by ``gp.predict``).

Averaging p(y* = +1 | theta) over S posterior draws (Barber & Williams 1997, eq. 9) needs
one approximation of q(f | y, theta_s) per draw. The kernels of every draw come from one
compiled function (``kernel_fn``), and each draw's solve starts from the previous draw's
state (consecutive draws are close). Then, for each draw (R&W Alg. 3.2 / 3.6,
``ApproximationResult.predict_latent``),

.. math::

    E[f_*] = K_{*}^T a, \qquad
    V[f_*] = k_{**} - \operatorname{diag}(K_*^T (K + W^{-1})^{-1} K_*).

Over draws EP stops at a site change of 1e-3 (the registry's ``prediction_defaults``; one
point: the engine's 1e-8), whose error in the averaged probabilities lies far below the
average's Monte Carlo error; a ``tol`` given to the GP's constructor is used instead. A
multi-class result's (m, c) ``predict_latent`` goes through the same loop.
"""

from typing import Protocol, runtime_checkable

import numpy as np
from ..approximations.solve import prediction_options, solve_with_retries
from ..progress import Progress
from ..backends.python_vm import PYTHON_VM_FORWARD_MODE, PYTHON_VM_MODE
from ..validation import trusted_kernel

__all__ = ["latent_predictions", "FittedPoint", "KERNEL_MODE", "POINT_KERNEL_MODE"]

# The kernels' graph runs on PyTensor's Python VM (numba's first compilation takes seconds);
# for one point only the merge and clip rewrites (``backends.python_vm``; figures:
# docs/design/engine_notes.md, "Prediction's compile modes").
KERNEL_MODE = PYTHON_VM_MODE
POINT_KERNEL_MODE = PYTHON_VM_FORWARD_MODE


@runtime_checkable
class FittedPoint(Protocol):
    """What ``gp.predict(point=...)`` reads of a fit (``pymc_gpc.fit``'s ``FitResult``, a
    layer above, satisfies it): the point, the model fitted and the solver state each
    evidence term's last solve reached there.

    Attributes
    ----------
    point : dict of the fitted variables' values, as ``pm.find_MAP`` returns them.
    model : the ``pm.Model`` fitted.
    """

    point: dict
    model: object

    def solver_state(self, name):
        """The state of the evidence term whose potential is named ``name``, or None."""


def latent_predictions(approximation, likelihood, options, y, kernel_fn, draws, *, progressbar=False,
                       retry_options=None, state=None):
    """Latent predictive means and variances at new inputs, one row per hyperparameter draw.

    Parameters
    ----------
    approximation : "ep", "laplace", "meanfield" or "adf" (``approximations.registry``).
    likelihood : a ``pymc_gpc.likelihoods.Likelihood`` instance.
    options : the solver's keyword options (e.g. ``tol``; ``gp.predict`` puts
        the registry's ``prediction_defaults`` under the GP's own); run through ``prediction_options``
        (no gradient, no LOO terms).
    y : (n,) training labels in {-1, +1}.
    kernel_fn : ``kernel_fn(*args) -> (K, theta, K_cross, k_diag)``: the training prior
        (the (n, n) kernel, or a prior structure such as ``structures.fitc.FITCPrior``),
        the likelihood parameters, the cross-covariances the prior's ``predict_latent``
        takes ((n, m) dense; K_u* for FITC) and the (m,) prior variances at the new
        inputs (``gp.predict``: one compiled function).
    draws : sequence of argument tuples for ``kernel_fn``, one per draw, in sampling
        order (neighbours are close: each draw warm-starts the next).
    progressbar : show PyMC's progress bar.
    retry_options : ``retry_options(options) -> list of option dicts``: the evidence Op's
        ``retry_schedule`` (FITC's differs from the dense one); None: the dense Op's.
    state : the solver state the first draw's solve starts from (e.g. a fit's state at its
        point, ``FitResult.solver_states``); None: a cold start. A start changes the
        number of sweeps, not the solution; one that fails at the first draw's kernel is
        replaced by a cold start (``solve_with_retries``).

    Returns
    -------
    means (S, m), variances (S, m), thetas (S, p). A draw whose approximation fails
    (a kernel that is not positive definite) gets NaN means and variances.

    Raises
    ------
    ValueError
        When a draw's likelihood parameters are invalid (``likelihood.check_params``: e.g.
        ordinal cutpoints that are not increasing), naming the draw, before its solve.
    """
    options = prediction_options(options)
    means, variances, thetas = [], [], []
    with Progress("Predicting", len(draws), progressbar) as bar:
        for args in draws:
            K, theta, K_cross, k_diag = kernel_fn(*args)
            _check_draw_params(likelihood, theta, len(means), len(draws))
            retries = retry_options(options) if retry_options is not None else None
            mean, var, state = _one_draw(approximation, likelihood, options, y, K, theta, K_cross, k_diag, state,
                                         retries)
            means.append(mean)
            variances.append(var)
            thetas.append(np.asarray(theta, float))
            bar.advance()
    return np.array(means), np.array(variances), np.array(thetas)


def _check_draw_params(likelihood, theta, index, n_draws):
    """ValueError naming the draw when the likelihood's parameters there are invalid
    (``likelihood.check_params``: e.g. ordinal cutpoints that are not increasing), which the
    solver would otherwise turn into NaN probabilities without a word."""
    try:
        likelihood.check_params(theta)
    except ValueError as err:
        where = "at the point given" if n_draws == 1 else f"at posterior draw {index} of {n_draws}"
        raise ValueError(f"cannot predict {where}: {err}") from None


def _one_draw(approximation, likelihood, options, y, K, theta, K_cross, k_diag, state, retry_options=None):
    """(mean, var, state for the next draw) at one draw, warm-started from ``state``."""
    try:  # K comes from a covariance function, as in the Op: no extra PSD check
        with trusted_kernel(), np.errstate(over="ignore", invalid="ignore", divide="ignore", under="ignore"):
            result, _ = solve_with_retries(approximation, K, y, likelihood, theta, state, options, retry_options)
        mean, var = result.predict_latent(K_cross, k_diag)
    except (ValueError, np.linalg.LinAlgError):  # NotPositiveDefiniteError is a LinAlgError
        # binary: K_cross (n, m) -> mean, var (m,); c classes: (c, n, m) -> (c, m), (m, c, c)
        classes, m = np.shape(K_cross)[:-2], np.shape(K_cross)[-1]
        return np.full((*classes, m), np.nan), np.full((m, *classes, *classes), np.nan), None
    return mean, var, (result.state if np.isfinite(result.log_z) else None)
