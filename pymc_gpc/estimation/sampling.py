"""``pymc_gpc.sample``: integration over a GP classifier's hyperparameters, by NUTS (the
default, ``idata.sample_nuts``) or deterministically by a central composite design or a
grid (``estimation.integration``).

This module sits above both routes (and ``models``, whose row count for dense priors the
NUTS route warns about), so that neither imports the other.
"""

import warnings

import numpy as np
import pymc as pm
from pymc.step_methods.hmc.quadpotential import QuadPotentialFullAdapt
from pytensor.graph.traversal import ancestors

from .chain_trace import RecordingNUTS, record_in_chains
from .hyper_posterior import LogPosterior, start_scale
from .integration import map_start, sample_integrated
from .point_estimates import fit
from ..idata import default_sampler, parallel_defaults, sample_nuts
from ..gp.models import DENSE_MAX_ROWS
from ..ops.marginal import ApproxMarginalOp
from ..ops.rewrites import sampling_tolerance

__all__ = ["sample", "laplace_start", "nuts_options", "TrajectoryCache", "NUTS_OPTIONS", "LAPLACE_WEIGHT",
           "LAPLACE_TARGET_ACCEPT", "DenseSamplingWarning", "warn_dense_size"]

METHODS = ("nuts", "ccd", "grid")


def sample(*args, model=None, method="nuts", map_estimate=None, **kwargs):
    """``pm.sample`` with this package's defaults, then ``add_log_likelihood``: the result
    is ready for ``az.loo``, ``az.summary`` and ``az.plot_trace`` (the pointwise terms in
    ``log_likelihood``, the solver diagnostics in ``sample_stats``).

    ``method="ccd"`` or ``"grid"`` integrates over the hyperparameters deterministically
    instead (a central composite design or a grid around the mode, a few dozen evidence
    evaluations; ``pymc_gpc.estimation.integration.sample_integrated``, which takes the
    keyword arguments then) and returns draws resampled from the weighted design points,
    with the points in the group ``integration``.

    The sampler evaluates the evidence at the sampling tolerances (the registry's
    ``sampling_defaults``: EP's tol 1e-2; ``ops.rewrites.sampling_tolerance``); every other
    use of the model's logp and gradient (plain ``pm.sample`` included) gets the engine's.
    ``nuts_sampler="numpyro"`` or ``"blackjax"`` runs the Ops' JAX implementation (needs
    ``pip install pymc-gpc[jax]``).

    Defaults: ``idata.default_sampler`` (PyMC's NUTS for at most ``PYMC_NUTS_MAX`` sampled
    values, nutpie above where installed). With PyMC's NUTS and no ``step``, ``init`` or
    ``initvals``, the chains start from the Laplace approximation of the hyperparameters'
    posterior (``laplace_start``; its step size targets an acceptance of 0.65, where PyMC's
    default is 0.8: ``LAPLACE_TARGET_ACCEPT``; NUTS's own options, ``target_accept=0.9``,
    ``max_treedepth`` or ``nuts={...}``, reach the step it builds), else
    ``init=idata.default_init(model)``. Chains run in
    parallel on the available cores (``idata.parallel_defaults``); without a terminal,
    progress is a plain line every ``progress.LOG_EVERY`` seconds. A dense prior over more
    than ``models.DENSE_MAX_ROWS`` rows warns (``DenseSamplingWarning``) once a process.
    PyMC's warning that dense adaptation is experimental is filtered (``catch_warnings``,
    not thread-safe).

    Parameters
    ----------
    *args, **kwargs
        Passed to ``pm.sample`` (``draws``, ``tune``, ``chains``, ``random_seed``,
        ``nuts_sampler``, ``init``, ...), over the defaults above.
    model : pm.Model, optional
        The model (default: the model on the context stack).
    method : str, optional
        "nuts" (default), "ccd" or "grid".
    map_estimate : FitResult or dict, optional
        A MAP-II result already at hand (``pymc_gpc.fit(model, method="map")``): the mode
        search of the CCD, the grid or NUTS's Laplace start begins there instead of running
        MAP-II again (``integration.map_start``). Ignored where NUTS does not start from the
        Laplace approximation (``step``, ``init`` or ``initvals`` given, or nutpie).

    Returns
    -------
    arviz.InferenceData
        ``pm.sample``'s result with the ``log_likelihood`` group added.

    Raises
    ------
    ValueError
        For an unknown ``method``, or positional arguments with ``method="ccd"`` or ``"grid"``.
    ImportError
        For ``nuts_sampler="numpyro"`` or ``"blackjax"`` without the ``jax`` extra.

    Examples
    --------
    >>> with model:  # a model with a pymc_gpc classifier
    ...     idata = pymc_gpc.sample(draws=500, tune=500, random_seed=1)  # doctest: +SKIP
    >>> az.loo(idata)  # doctest: +SKIP
    """
    if method not in METHODS:
        raise ValueError(f"method must be 'nuts', 'ccd' or 'grid', not {method!r}")
    if method != "nuts":
        if args:
            raise ValueError(f"method={method!r} takes keyword arguments only")
        return sample_integrated(model=model, method=method, map_estimate=map_estimate, **kwargs)
    model = pm.modelcontext(model)
    warn_dense_size(model)
    if _laplace_applies(model, kwargs):
        rest, options = nuts_options(kwargs)
        start = laplace_start(model, parallel_defaults(kwargs, "pymc")["chains"], kwargs.get("random_seed"),
                              map_estimate=map_estimate, **options)
        if start:  # else PyMC's own start, which takes the options as given
            kwargs = {**rest, **start}
            if kwargs.get("trace") is None:  # the chains evaluate what is traced (chain_trace)
                kwargs["trace"] = record_in_chains(start["step"], model, kwargs.get("var_names"))
    return sample_nuts(*args, model=model, **kwargs)


# ``pm.NUTS``'s own arguments that ``pm.sample`` takes at the top level (``target_accept=0.9``)
# or in ``nuts={...}``: they reach the step it builds, which the Laplace start builds instead.
NUTS_OPTIONS = ("target_accept", "max_treedepth", "early_max_treedepth", "step_scale", "adapt_step_size",
                "Emax", "gamma", "k", "t0")


def nuts_options(kwargs):
    """Split ``pm.sample``'s keyword arguments into the rest and the options of the NUTS
    step (``NUTS_OPTIONS`` given at the top level, and the ``nuts`` dict), for a step built
    here: ``pm.sample`` given a ``step`` rejects them.

    Raises
    ------
    ValueError
        For an option given both at the top level and in ``nuts`` (as ``pm.sample`` does).
    """
    rest = dict(kwargs)
    options = dict(rest.pop("nuts", None) or {})
    for key in NUTS_OPTIONS:
        if key in rest:
            if key in options:
                raise ValueError(f"{key!r} was given twice: as a keyword argument and in nuts={{...}}")
            options[key] = rest.pop(key)
    return rest, options


# The weight, in draws, of the Laplace covariance in the mass matrix's running estimate
# (PyMC's own ``jitter+adapt_full`` gives its unit matrix a weight of 10).
LAPLACE_WEIGHT = 10

# The step size's target acceptance from the Laplace start (PyMC's and Stan's default: 0.8).
# The mass matrix starts at the posterior covariance, so in NUTS's metric the target is close
# to a standard normal, where 0.651 is the optimal acceptance of HMC (Beskos et al. 2013,
# Bernoulli 19(5A)); NUTS's cost moves in doublings of the trajectory, and the larger step
# often saves one (``benchmarks/integration.py acceptance``: ESS per gradient evaluation).
LAPLACE_TARGET_ACCEPT = 0.65


def _laplace_applies(model, kwargs):
    """Whether ``sample`` starts PyMC's NUTS from the Laplace approximation: PyMC's sampler
    (given, or ``default_sampler``'s choice), no ``step``, ``init`` or ``initvals`` given,
    and a Laplace start that ``laplace_start`` can build (continuous hyperparameters, an
    evidence with a gradient)."""
    if any(kwargs.get(k) is not None for k in ("step", "init", "initvals")):
        return False
    return (kwargs.get("nuts_sampler") or default_sampler(model)) == "pymc"


def laplace_start(model, chains, random_seed=None, map_estimate=None, **nuts_options):
    r"""NUTS's start from the Laplace approximation of the hyperparameters' posterior,
    :math:`x \sim N(\hat x, (-H)^{-1})` in the unconstrained space: the mode
    :math:`\hat x` of the log posterior NUTS targets and its Hessian H there, from MAP-II's
    point (``hyper_posterior.start_scale``: one Newton step from there where that is within
    0.1 posterior sd, else the CCD's mode search, ``find_mode``).

    Each chain starts at its own draw from that normal (over-dispersed starts would not
    hold more information; draws from it keep R-hat meaningful), and the dense mass matrix
    starts at :math:`(-H)^{-1}` with the weight of ``LAPLACE_WEIGHT`` draws in the
    adaptation's running estimate, where PyMC's ``jitter+adapt_full`` starts at the unit
    matrix from jittered initial values: the first adaptation window then already moves in
    the posterior's scales and correlations instead of spending its draws finding them.

    ``nuts_options`` (``target_accept``, ``max_treedepth``, ...; ``NUTS_OPTIONS``) go to the
    ``pm.NUTS`` step; ``target_accept`` defaults to ``LAPLACE_TARGET_ACCEPT`` (0.65).

    Returns
    -------
    dict
        ``step`` (a ``pm.NUTS`` with that mass matrix) and ``initvals`` (one point per
        chain), for ``pm.sample``; empty (PyMC's own initialisation) where the model has
        no such start: discrete variables, an evidence without a gradient, a mode search
        that fails, or a Hessian that is not negative definite.
    """
    try:
        target = LogPosterior(model, model.initial_point())
    except ValueError:
        return {}
    # a bad map_estimate is the caller's ValueError, raised here rather than read as a failed start
    x0 = None if map_estimate is None else map_start(target, map_estimate)
    try:
        if x0 is None:  # MAP-II's point, as the CCD's ``integration.laplace`` starts from
            x0 = map_start(target, fit(model, method="map", progressbar=False))
        mode, H = start_scale(target, x0)
        cov = np.linalg.inv(-H)
        chol = np.linalg.cholesky(cov)
    except (ValueError, np.linalg.LinAlgError):
        return {}
    rng = np.random.default_rng(random_seed if not isinstance(random_seed, (list, tuple)) else random_seed[0])
    starts = [_constrained(model, target.to_point(mode + chol @ rng.standard_normal(mode.size)))
              for _ in range(int(chains))]
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="QuadPotentialFullAdapt is an experimental feature")
        potential = QuadPotentialFullAdapt(mode.size, mode, cov, LAPLACE_WEIGHT, rng=rng)
        with model, sampling_tolerance():  # the step compiles its logp and gradient here
            step = RecordingNUTS(vars=target.free, potential=potential,
                                 **{"target_accept": LAPLACE_TARGET_ACCEPT, **nuts_options})
    step.integrator._logp_dlogp_func = TrajectoryCache(step.integrator._logp_dlogp_func)
    return {"step": step, "initvals": starts}


class TrajectoryCache:
    """The log posterior and gradient of the last ``size`` positions, by value, in front of a
    NUTS integrator's function.

    PyMC's NUTS starts each iteration by evaluating the model at its position
    (``BaseHMC.astep``'s ``compute_state``), a point its last trajectory already evaluated:
    one full evidence solve an iteration, about one in eight of the sampler's evaluations
    at 50,000 rows. Here it is a lookup. A trajectory has at most 2^10 points (PyMC's
    ``max_treedepth``), so 2,048 positions hold the last one; each costs two small arrays.
    """

    def __init__(self, func, size=2048):
        self.func, self.size, self.entries = func, size, {}

    def __call__(self, q, point_map_info):
        key = q.tobytes()
        hit = self.entries.get(key)
        if hit is None:
            logp, grad = self.func(q, point_map_info)
            hit = self.entries[key] = (np.array(logp, copy=True), np.array(grad, copy=True))
            if len(self.entries) > self.size:
                self.entries.pop(next(iter(self.entries)))  # the oldest (dicts keep order)
        return hit[0].copy(), hit[1].copy()


def _constrained(model, point):
    """``initvals`` for ``pm.sample`` (keyed by the free variables' names, in their own
    space) from a point of the value variables."""
    out = {}
    for rv in model.free_RVs:
        value_var = model.rvs_to_values[rv]
        value = point[value_var.name]
        transform = model.rvs_to_transforms.get(rv)
        out[rv.name] = np.asarray(transform.backward(value, *rv.owner.inputs).eval()) if transform else value
    return out


class DenseSamplingWarning(UserWarning):
    """NUTS on a dense GP prior with more training rows than ``models.DENSE_MAX_ROWS``."""


_dense_warned = []  # the warning is given once a process


def warn_dense_size(model):
    """Warn once a process when ``model`` has a dense GP prior (binary or multi-class) over
    more than ``models.DENSE_MAX_ROWS`` rows: NUTS there takes more than a few minutes;
    name the ways that scale (a FITC prior; deterministic integration by CCD)."""
    if _dense_warned:
        return
    rows = [_rows(node) for node in _marginal_nodes(model) if node.op.structure.dense_kernel]
    rows = [n for n in rows if n is not None and n > DENSE_MAX_ROWS]
    if rows:
        _dense_warned.append(True)
        warnings.warn(
            f"NUTS on a dense GP prior over {max(rows)} rows (more than {DENSE_MAX_ROWS}): each evaluation "
            "is O(n^3) and sampling may take hours. Use a FITC prior (ard_classifier(..., inducing='auto' or m); "
            "approx='FITC' with Xu) or deterministic integration over the hyperparameters "
            "(pymc_gpc.sample(method='ccd')).", DenseSamplingWarning, stacklevel=3)


def _marginal_nodes(model):
    values = model.replace_rvs_by_values(model.potentials)
    return [v.owner for v in ancestors(values) if v.owner is not None and isinstance(v.owner.op, ApproxMarginalOp)]


def _rows(node):
    """The number of training rows of an evidence node (its labels' length), or None."""
    try:
        return int(node.inputs[2].shape[-1].eval())
    except Exception:  # noqa: BLE001 - a size we cannot read gives no warning
        return None
