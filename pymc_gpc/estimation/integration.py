r"""Deterministic integration over the hyperparameters: ``pymc_gpc.sample(method="ccd")``
and ``method="grid"`` (Rue, Martino & Chopin 2009; Vanhatalo et al. 2013, GPstuff's
``gp_ia``; the user guide's "Deterministic integration" page walks through it).

The posterior of the hyperparameters x (unconstrained) is represented by a few dozen
weighted points around the mode of :math:`\log p(x \mid y)` (``hyper_posterior.LogPosterior``),
placed in the eigenbasis of its Hessian (``designs``), each solve warm-started from the
mode's state (``from_mode``). The result is an ArviZ ``InferenceData`` of draws resampled
from the weighted points, with the points in the group ``integration``;
``predict`` averages exactly with the weights,
:math:`p(y_* \mid y) \approx \sum_k w_k\, p(y_* \mid y, \theta_k)`, and ``loo`` gives
``az.loo`` the design's exact importance weights.
"""

import copy

import numpy as np
import pymc as pm
import xarray as xr

from ..idata import add_log_likelihood, gp_names
from .point_estimates import fit
from . import designs
from .hyper_posterior import LogPosterior, find_mode
from .objective import FIT_FORWARD_MODE, ravel, start_point

__all__ = ["METHODS", "GROUP", "MIN_WEIGHT", "DESIGN_POINT", "integrate", "laplace", "map_start", "from_mode",
           "sample_integrated", "predict", "design_path", "loo", "loo_design"]

METHODS = ("ccd", "grid")


# the InferenceData group holding the design points, their weights and log densities
GROUP = "integration"


# points whose normalised weight is below this are dropped (their share of any average is
# below it); GPstuff drops those below 1e-2 / N
MIN_WEIGHT = 1e-10


_INTERNAL = ("weight", "log_density", "z")


# the ``sample_stats`` variable: the design point each posterior draw was resampled from
DESIGN_POINT = "design_point"


# the share of the importance-ratio mass whose tail the Pareto shape is fitted to (PSIS
# fits at most the largest 20 % of the draws; Vehtari et al. 2024)
TAIL_SHARE = 0.2
# ... and to at least this many of the largest ratios
MIN_TAIL = 2


def integrate(model, method="ccd", *, start=None, map_estimate=None, f0=1.1, step=None, threshold=None,
              max_points=5000, progressbar=False):
    """The weighted design points of ``method`` for the model's hyperparameters
    (``sample_integrated``'s arguments).

    Returns
    -------
    dict
        ``x`` (points, unconstrained, raveled), ``z`` (standardised coordinates),
        ``log_density``, ``weight``, ``mode``, ``hessian``, ``target`` (the
        ``LogPosterior``), ``n_evaluations`` (log posterior evaluations, the mode search's
        included), ``dropped`` (points under ``MIN_WEIGHT``).
    """
    _check_options(method, f0, step, threshold, max_points)
    target = LogPosterior(model, start_point(model, start))
    if method == "grid" and target.size > designs.GRID_MAX_DIM:
        raise ValueError(f"method='grid' serves at most {designs.GRID_MAX_DIM} hyperparameters, the model has "
                         f"{target.size}: use method='ccd'")
    if method == "ccd" and target.size > designs.CCD_MAX_DIM:
        raise ValueError(f"method='ccd' serves at most {designs.CCD_MAX_DIM} hyperparameters, the model has "
                         f"{target.size}: use NUTS")
    mode, log_p0, H = laplace(target, start=start, map_estimate=map_estimate, progressbar=progressbar)
    standard = designs.Standardisation(mode, -H)
    log_density = from_mode(target)
    if method == "ccd":
        out = designs.ccd(standard, log_density, log_p0, f0=f0)
    else:
        out = designs.grid(standard, log_density, log_p0, step=step, threshold=threshold, max_points=max_points)
    keep = out["weight"] >= MIN_WEIGHT
    out = {**{k: v[keep] for k, v in out.items() if k in ("x", "z", "log_density", "weight")},
           "scales": out.get("scales"), "dropped": int((~keep).sum())}
    out["weight"] = out["weight"] / out["weight"].sum()
    out.update(mode=mode, hessian=H, target=target, n_evaluations=target.n_evaluations, method=method)
    return out


def laplace(target, *, start=None, map_estimate=None, progressbar=False):
    """The mode of ``target`` (a ``LogPosterior``), found from MAP-II's point
    (``pymc_gpc.fit``, which lacks only the log Jacobian), and the Hessian there: the centre
    and scale of the integration's designs, and of NUTS's start (``sampling.laplace_start``).

    ``map_estimate``: a MAP-II result already at hand (``sample_integrated``), searched from
    instead of running ``fit`` again; ``start`` is then unused.

    Returns (mode, log density there, Hessian), as ``hyper_posterior.find_mode``.
    """
    if map_estimate is None:
        map_estimate = fit(target.model, method="map", start=start, progressbar=progressbar)
    x0 = map_start(target, map_estimate)
    return find_mode(target, x0)


def map_start(target, map_estimate):
    """The raveled unconstrained point of ``map_estimate`` (a ``FitResult`` of
    ``pymc_gpc.fit(method="map")``, or a dict holding every free value variable, as its
    ``point`` does), with ``target``'s solves warm-started from the fit's last solver states
    where it has them (``FitResult.solver_states``: a start changes the sweeps, not the
    fixed point).

    Raises ValueError when the point lacks a free value variable or holds a non-finite value."""
    point = getattr(map_estimate, "point", map_estimate)
    if not isinstance(point, dict):
        raise ValueError("map_estimate must be a result of pymc_gpc.fit(method='map') or a dict point of the "
                         f"model's value variables, got {type(map_estimate).__name__}")
    missing = [v.name for v in target.free if v.name not in point]
    if missing:
        raise ValueError(f"map_estimate lacks the free value variables {missing} (a pymc_gpc.fit result's "
                         "point holds them)")
    values = {v.name: np.asarray(point[v.name], dtype=float) for v in target.free}
    shapes = {n: np.shape(target.point[n]) for n in values}
    if any(values[n].shape != shapes[n] for n in values) or not all(np.all(np.isfinite(v)) for v in values.values()):
        raise ValueError(f"map_estimate's point must hold finite values of the free value variables in their "
                         f"shapes {shapes}")
    x0 = np.asarray(ravel(values, target.free).data, float)
    states = getattr(map_estimate, "solver_states", None) or {}
    for j, node in enumerate(target.objective.nodes):
        if states.get(node.outputs[0].name) is not None:
            target.objective.states[j] = copy.deepcopy(states[node.outputs[0].name])
    return x0


def from_mode(target):
    """``target.value`` for the design points: each solve warm-started from the solver states
    that the evaluation at the mode left (``find_mode``'s last), rather than from the previous
    design point (the mode is the design's centre; the CCD's factorial points lie on opposite
    sides of it in turn), and run at the fit's coarse solver options
    (``Objective.coarse_options``: EP's tol 1e-3 against the engine's 1e-8).

    The coarse tolerance moves a log density by far less than the design's own error: at
    50,000 rows (FITC EP, m = 200), 0.5 from the mode, log q moved by at most 7e-7 between
    tol 1e-8 and 1e-3 (2e-9 at 1e-4), for 0.6 to 0.8 CPU s a point instead of 1.4 to 1.9;
    weights are exponentials of the log densities, so they move by that relative amount."""
    objective = target.objective
    at_mode = copy.deepcopy(objective.states)
    coarse, own = objective.coarse_options(), objective.overrides

    def value(x):
        objective.states = copy.deepcopy(at_mode)
        objective.set_overrides(coarse)
        try:
            return target.value(x)
        finally:
            objective.set_overrides(own)

    return value


def sample_integrated(model=None, method="ccd", *, draws=500, chains=2, random_seed=None, start=None,
                      map_estimate=None, f0=1.1, step=None, threshold=None, max_points=5000, progressbar=True,
                      **unknown):
    """``pymc_gpc.sample(method="ccd" | "grid")``: the design (``integrate``) as an ArviZ
    ``InferenceData``.

    Parameters
    ----------
    model : the ``pm.Model`` (default: the model on the context stack).
    method : "ccd" (central composite design, any number of hyperparameters up to
        ``designs.CCD_MAX_DIM``; 2^(d-p) + 2d + 1 points) or "grid" (at most three).
    draws, chains : the posterior group's size: ``chains`` x ``draws`` draws resampled
        from the weighted points (systematic resampling, then shuffled).
    random_seed : seeds the resampling (an int or a ``numpy.random.Generator``).
    start : starting values of MAP-II's search (as in ``pymc_gpc.fit``).
    map_estimate : a MAP-II result already at hand (``pymc_gpc.fit(model, method="map")``,
        or a dict holding every free value variable, as its ``point`` does): the mode search
        starts from it (and from its solver states) instead of running MAP-II again, which at
        50,000 rows is a tenth of the CCD's cost (``benchmarks/results/integration_large.md``).
        Not with ``start``.
    f0 : the CCD's radius over sqrt(d) (above 1; Rue et al. 2009 use 1.1).
    step, threshold, max_points : the grid's (``designs.grid``).
    progressbar : MAP-II's progress bar.

    Returns
    -------
    arviz.InferenceData
        ``posterior`` (resampled draws), ``log_likelihood`` and ``sample_stats``
        (``pymc_gpc.add_log_likelihood``; ``sample_stats.design_point``: the point each
        draw was resampled from), and the group ``integration``: per design point
        (dimension ``point``) the model's parameters, ``weight``, ``log_density`` (the log
        posterior in the unconstrained space, up to a constant), ``z`` (the standardised
        design coordinates) and each classifier's leave-one-out terms ``{name}_loo``
        (``loo``); its attributes give the method, the number of log posterior
        evaluations, of points dropped for negligible weight, and the classifiers with LOO
        terms (``loo_terms``).

    Raises
    ------
    ValueError
        For an unknown method or argument (e.g. NUTS's ``tune``), non-positive ``draws``
        or ``chains``, ``f0 <= 1``, too many hyperparameters for the method, or a log
        posterior that is not concave at its mode.
    """
    if unknown:
        raise ValueError(f"method={method!r} does not take {sorted(unknown)} (NUTS's arguments); it takes draws, "
                         "chains, random_seed, start, map_estimate, f0, step, threshold, max_points, progressbar")
    if start is not None and map_estimate is not None:
        raise ValueError("give start (MAP-II's starting values) or map_estimate (a MAP-II result, which skips "
                         "that search), not both")
    if int(draws) < 1 or int(chains) < 1:
        raise ValueError(f"draws and chains must be positive, got {draws} and {chains}")
    _check_options(method, f0, step, threshold, max_points)
    model = pm.modelcontext(model)
    clash = sorted(set(_INTERNAL) & set(model.named_vars))
    if clash:
        raise ValueError(f"the model has variables named {clash}, which the {GROUP!r} group uses for the design; "
                         "rename them")
    result = integrate(model, method, start=start, map_estimate=map_estimate, f0=f0, step=step,
                       threshold=threshold, max_points=max_points, progressbar=progressbar)
    return to_inference_data(result, model, int(draws), int(chains), random_seed)


def _check_options(method, f0, step, threshold, max_points):
    if method not in METHODS:
        raise ValueError(f"method must be 'nuts', 'ccd' or 'grid', got {method!r}")
    if not (np.isscalar(f0) and np.isfinite(f0) and f0 > 1):
        raise ValueError(f"f0 must be a number above 1 (the CCD's radius over sqrt(d)), got {f0!r}")
    for name, value in (("step", step), ("threshold", threshold)):
        if value is not None and not (np.isscalar(value) and np.isfinite(value) and value > 0):
            raise ValueError(f"{name} must be a positive number, got {value!r}")
    if int(max_points) < 1:
        raise ValueError(f"max_points must be positive, got {max_points!r}")


def resample(weight, total, random_seed=None):
    """``total`` indices of points drawn with probabilities ``weight``: systematic
    resampling (each point appears floor or ceil of total * w_k times), randomly ordered."""
    rng = np.random.default_rng(random_seed)
    cumulative = np.cumsum(weight)
    cumulative[-1] = 1.0
    positions = (rng.random() + np.arange(total)) / total
    return rng.permutation(np.searchsorted(cumulative, positions, side="right"))


def point_values(model, result):
    """{name: (n_points, ...) array} of the model's free variables and deterministics
    (the GP terms' ``_loo`` etc. included) at the design points; one solve per point, the
    points visited along ``design_path`` (the evidence Op warm-starts each solve from its
    previous one)."""
    outs = model.unobserved_value_vars
    fn = model.compile_fn(outs, inputs=model.value_vars, point_fn=False, on_unused_input="ignore",
                          mode=FIT_FORWARD_MODE)
    target = result["target"]
    order = design_path(result["z"])
    rows = [None] * len(order)
    for k in order:
        point = target.to_point(result["x"][k])
        rows[k] = fn(**{v.name: point[v.name] for v in model.value_vars})
    names = [v.name for v in outs]
    keep = {v.name for v in model.free_RVs + model.deterministics}
    return {n: np.stack([np.asarray(r[i]) for r in rows]) for i, n in enumerate(names) if n in keep}


def to_inference_data(result, model, draws, chains, random_seed=None):
    """The ``InferenceData`` of ``sample_integrated`` from an ``integrate`` result."""
    import arviz as az

    values = point_values(model, result)
    index = resample(result["weight"], draws * chains, random_seed).reshape(chains, draws)
    posterior = {n: v[index] for n, v in values.items()}
    dims = {n: list(model.named_vars_to_dims.get(n, ())) for n in posterior}
    coords = {k: list(v) for k, v in model.coords.items() if v is not None}
    tree = az.from_dict({"posterior": posterior, "sample_stats": {DESIGN_POINT: index}}, coords=coords, dims=dims)
    tree[GROUP] = _design_group(result, values, model, coords)
    return add_log_likelihood(tree, model)


def _design_group(result, values, model, coords):
    """The ``integration`` group: per point the parameters, ``weight``, ``log_density``, ``z``."""
    internal = {f"{g}{s}" for g in gp_names(model) for s in ("_n_iter", "_status")}
    data = {}
    for name, v in values.items():
        if name in internal:
            continue
        dims = list(model.named_vars_to_dims.get(name, ())) or [f"{name}_dim_{i}" for i in range(v.ndim - 1)]
        data[name] = (["point", *dims], v)
    data["weight"] = ("point", result["weight"])
    data["log_density"] = ("point", result["log_density"])
    data["z"] = (["point", "axis"], result["z"])
    used = {d for dims, _ in data.values() for d in ([dims] if isinstance(dims, str) else dims)}
    group = xr.Dataset(data, coords={k: v for k, v in coords.items() if k in used})
    group.attrs.update(method=result["method"], n_points=int(result["weight"].size),
                       n_evaluations=int(result["n_evaluations"]), dropped=int(result["dropped"]),
                       loo_terms=[g for g in gp_names(model) if f"{g}_loo" in data])
    return group


def predict(gp, Xnew, idata, *, model=None):
    r"""Class probabilities at ``Xnew`` averaged exactly with the design's weights,
    :math:`\sum_k w_k\, p(y_* \mid y, \theta_k)`: one ``gp.predict(Xnew, idata=..., weights=...)``
    over the design points as draws, each solve warm-started from the previous point's, at
    the tolerance of predictions over draws (the registry's ``prediction_defaults``: EP's
    tol 1e-3), the points visited in ``design_path`` order so that each start is near.

    Parameters
    ----------
    gp : the classifier (``MarginalEP``, ``MarginalLaplace``, multi-class or ordinal).
    Xnew : new inputs.
    idata : a result of ``pymc_gpc.sample(method="ccd" | "grid")``.
    model : as in ``gp.predict``.

    Returns
    -------
    numpy.ndarray
        What ``gp.predict`` returns (p of the positive class, or one column per class).

    Raises
    ------
    ValueError
        When ``idata`` has no ``integration`` group.
    """
    import arviz as az

    group = _stored_design(idata, "gp.predict(Xnew, idata=idata)")
    weight = np.asarray(group["weight"], float)
    terms = {f"{g}_loo" for g in _loo_names(group)}
    names = [n for n in group.data_vars if n not in _INTERNAL and n not in terms]
    order = design_path(np.asarray(group["z"], float))
    design = az.from_dict({"posterior": {n: np.asarray(group[n])[order][None] for n in names}})
    return gp.predict(Xnew, idata=design, weights=weight[order], model=model, progressbar=False)


def design_path(z):
    """An order of the design points (rows of their standardised coordinates ``z``) that
    starts at the one nearest the mode (the centre, z = 0) and goes on to the nearest point
    not yet visited: a short path for solves warm-started from the previous point (the
    CCD's own order alternates sides of the mode)."""
    z = np.asarray(z, float)
    left = list(range(len(z)))
    order = [left.pop(int(np.argmin(np.sum(z ** 2, axis=1))))]
    while left:
        gaps = np.sum((z[left] - z[order[-1]]) ** 2, axis=1)
        order.append(left.pop(int(np.argmin(gaps))))
    return np.array(order, dtype=int)


def loo_design(idata, var_name=None):
    r"""Leave-one-out predictive densities integrated over the design (the conditional
    predictive ordinates of Rue, Martino & Chopin 2009, sec. 6.3; GPstuff's ``gp_loopred``
    for ``gp_ia``), and a Pareto shape per observation.

    With :math:`\ell_{ik} = \log q(y_i \mid y_{-i}, \theta_k)` the classifier's own LOO
    term at design point k (EP-LOO or LA-LOO, the ``{name}_loo`` variable of the
    ``integration`` group) and weights :math:`w_k \propto p(\theta_k \mid y)`, the
    posterior of the hyperparameters without y_i is
    :math:`p(\theta \mid y_{-i}) \propto p(\theta \mid y) / p(y_i \mid y_{-i}, \theta)`, so

    .. math::

        p(y_i \mid y_{-i}) = \Big(\int \frac{p(\theta \mid y)}{p(y_i \mid y_{-i}, \theta)}
        d\theta\Big)^{-1} \approx \Big(\sum_k w_k\, e^{-\ell_{ik}}\Big)^{-1}.

    The Pareto shape k_i is that of the importance ratios :math:`r_{ik} = e^{-\ell_{ik}}`
    under the weights: a generalised Pareto fit (Zhang & Stephens 2009, with the weak prior
    of Vehtari et al. 2024, weighted as in ArviZ) to the exceedances of the largest ratios,
    down to the one that completes ``TAIL_SHARE`` of the weight (at least ``MIN_TAIL``),
    over the next below. A large k (above 0.7) says the posterior without y_i lies where the design, built around the
    full posterior, has few points; NaN for fewer than three points or two distinct
    exceedances.

    Returns
    -------
    (log_p, k) : arrays with the shape of the observations.
    """
    group, name = _loo_group(idata, var_name)
    w = np.asarray(group["weight"], float)
    terms = np.asarray(group[f"{name}_loo"], float)  # (point, *obs)
    flat = terms.reshape(w.size, -1)
    log_p = -_logsumexp(np.log(w)[:, None] - flat)
    k = np.array([_weighted_pareto_k(-flat[:, i], w) for i in range(flat.shape[1])])
    return log_p.reshape(terms.shape[1:]), k.reshape(terms.shape[1:])


def loo(idata, *, pointwise=None, var_name=None):
    r"""``az.loo`` for a CCD or grid result: the elpd by the design's exact weights.

    Plain ``az.loo(idata)`` treats the posterior draws as a Monte-Carlo sample. Here they are
    resampled copies of a few dozen design points, and within a point every draw has the same
    log-likelihood terms, so the tail of the importance ratios that Pareto smoothing fits is
    a run of ties: ArviZ then returns a NaN shape or raises ("All tail values are the
    same"). This function gives ``az.loo`` the importance weights instead: for a draw from
    design point k, :math:`\mathrm{lw}_{is} = \log(w_k / (n_k W)) - \ell_{ik} + \log p(y_i \mid
    y_{-i})` (n_k: the draws from k, ``sample_stats.design_point``; W: the weight of the points
    that have draws, all but those below 1 / (chains x draws)) with ``loo_design``'s
    :math:`\log p(y_i \mid y_{-i}) = -\log \sum_k w_k e^{-\ell_{ik}}` over every point, so
    that ArviZ's :math:`\log \sum_s e^{\mathrm{lw}_{is} + \ell_{is}}` is that value exactly;
    the Pareto shapes are ``loo_design``'s. ``p_loo`` is ArviZ's: the log of the draws'
    average predictive density less the elpd.

    Parameters
    ----------
    idata : a result of ``pymc_gpc.sample(method="ccd" | "grid")``.
    pointwise : as in ``az.loo``.
    var_name : the classifier's name (default: the only one).

    Returns
    -------
    arviz_stats.ELPDData
        As ``az.loo``'s, for ``az.compare`` and ``az.plot_khat``.

    Raises
    ------
    ValueError
        When ``idata`` has no ``integration`` group or no design-point index.
    """
    import arviz as az

    group, name = _loo_group(idata, var_name)
    try:
        index = np.asarray(idata["sample_stats"][DESIGN_POINT], int)
    except KeyError:
        raise ValueError(f"idata has no sample_stats.{DESIGN_POINT}: give the result of pymc_gpc.sample(method="
                         "'ccd' or 'grid')") from None
    ll = idata["log_likelihood"][name]
    w = np.asarray(group["weight"], float)
    w = w / w.sum()
    counts = np.bincount(index.ravel(), minlength=w.size)
    flat = np.asarray(group[f"{name}_loo"], float).reshape(w.size, -1)  # (point, obs)
    drawn = counts > 0
    log_z = _logsumexp(np.log(w)[:, None] - flat)  # over every point: loo_design's
    share = np.log(w[drawn].sum())  # the drawn points carry the elpd's whole mass (docstring)
    log_ratio = np.log(np.where(drawn, w, 1.0) / np.maximum(counts, 1))[:, None] - share - flat - log_z
    lw = log_ratio[index].reshape(index.shape + tuple(ll.shape[2:]))  # (chain, draw, *obs)
    _, k = loo_design(idata, name)
    log_weights = ll.copy(data=lw)
    pareto_k = ll.isel(chain=0, draw=0, drop=True).copy(data=k)
    return az.loo(idata, pointwise=pointwise, var_name=name, log_weights=log_weights, pareto_k=pareto_k)


def _stored_design(idata, draws_route):
    """``idata``'s design group as an xarray Dataset, or ValueError naming ``draws_route``,
    the call that serves posterior draws instead."""
    try:
        group = idata[GROUP]
    except KeyError:
        raise ValueError(f"idata has no {GROUP!r} group: give the result of pymc_gpc.sample(method='ccd' or "
                         f"'grid'), or use {draws_route} for posterior draws") from None
    return group.to_dataset() if hasattr(group, "to_dataset") else group


def _loo_group(idata, var_name):
    group = _stored_design(idata, "az.loo(idata)")
    names = _loo_names(group)
    if var_name is None:
        if len(names) != 1:
            raise ValueError(f"the design has LOO terms of {names}: name one with var_name")
        var_name = names[0]
    if var_name not in names:
        raise ValueError(f"the design has no LOO terms of {var_name!r}; it has {names}")
    return group, var_name


def _loo_names(group):
    """The classifiers whose LOO terms the design group holds (its ``loo_terms`` attribute)."""
    names = group.attrs.get("loo_terms", [])
    return [names] if isinstance(names, str) else list(names)


def _logsumexp(a):
    """log sum exp over the first axis."""
    m = np.max(a, axis=0)
    return m + np.log(np.sum(np.exp(a - m), axis=0))


def _weighted_pareto_k(log_ratio, weight):
    """The generalised Pareto shape of the ratios exp(``log_ratio``) with probabilities
    ``weight``, fitted to the exceedances of those carrying the largest ``TAIL_SHARE`` of the
    weight (``loo_design``); NaN for fewer than two distinct exceedances."""
    order = np.argsort(log_ratio)
    r = np.exp(log_ratio[order] - log_ratio[order][-1])
    w = weight[order] / weight.sum()
    if r.size < 3:
        return np.nan
    above = np.cumsum(w[::-1])[::-1] - w  # the weight of the larger ratios
    tail = above < TAIL_SHARE  # the largest ratios up to the one that completes the share
    tail[-min(MIN_TAIL, r.size - 1):] = True
    tail[0] = False  # the cutoff: a ratio below the tail
    first = np.argmax(tail)
    x, wt = r[tail] - r[first - 1], w[tail]
    if np.unique(x).size < 2 or x[0] <= 0:
        x, wt = x[x > 0], wt[x > 0]
        if np.unique(x).size < 2:
            return np.nan
    return _gpd_shape(x, wt)


def _gpd_shape(x, weight, prior_bs=3.0, prior_k=10.0):
    """Weighted empirical-Bayes generalised Pareto shape of sorted exceedances ``x``
    (Zhang & Stephens 2009; the prior on k of Vehtari et al. 2024, as ArviZ's PSIS).
    The weights count as ``len(x)`` observations in all."""
    n = x.size
    wt = weight / weight.sum() * n
    m = 30 + int(np.sqrt(n))
    xstar = x[max(int(n / 4 + 0.5) - 1, 0)]
    if xstar <= 0:
        return np.nan
    b = 1.0 / x[-1] + (1.0 - np.sqrt(m / (np.arange(1, m + 1) - 0.5))) / (prior_bs * xstar)
    k = np.log1p(-b[:, None] * x) @ wt / n
    profile = n * (np.log(-b / k) - k - 1.0)
    post = np.exp(profile - profile.max())
    post /= post.sum()
    b_post = post @ b
    k_hat = np.log1p(-b_post * x) @ wt / n
    return float((n * k_hat + prior_k * 0.5) / (n + prior_k))
