r"""Deterministic integration over the hyperparameters: ``pymc_gpc.sample(method="ccd")``
and ``method="grid"``.

The posterior of the hyperparameters x (the model's free variables in their unconstrained
space) is represented by a few dozen weighted points around its mode, instead of the
thousands of gradient evaluations of a NUTS run (Rue, Martino & Chopin 2009; Vanhatalo et
al. 2013, GPstuff's ``gp_ia``):

1. the mode of :math:`\log p(x \mid y)` (evidence + hyperpriors + log Jacobian, what NUTS
   targets: ``hyper_posterior.LogPosterior``), from MAP-II's point (``pymc_gpc.fit``);
2. the Hessian there by central differences of the exact gradient;
3. the points of a central composite design or of a grid in the Hessian's eigenbasis, and
   their weights (``designs``);
4. an ArviZ ``InferenceData``: posterior draws resampled from the weighted points (so that
   ``gp.predict(Xnew, idata=idata)``, ``az.summary``, ``az.plot_posterior`` and ``az.loo``
   work unchanged), and the points themselves in the group ``integration``.

Predictions averaged exactly with the weights, :math:`p(y_* \mid y) \approx \sum_k w_k\,
p(y_* \mid y, \theta_k)`: ``predict(gp, Xnew, idata)``. ``gp.predict(Xnew, idata=idata)``
averages over the resampled draws instead, a Monte-Carlo version of the same sum.
"""

import numpy as np
import pymc as pm
import xarray as xr

from ..idata import add_log_likelihood, gp_names
from .point_estimates import fit
from . import designs
from .hyper_posterior import LogPosterior, find_mode
from .objective import FIT_FORWARD_MODE, ravel, start_point

__all__ = ["METHODS", "GROUP", "MIN_WEIGHT", "integrate", "sample_integrated", "predict"]

METHODS = ("ccd", "grid")


# the InferenceData group holding the design points, their weights and log densities
GROUP = "integration"


# points whose normalised weight is below this are dropped (their share of any average is
# below it); GPstuff drops those below 1e-2 / N
MIN_WEIGHT = 1e-10


_INTERNAL = ("weight", "log_density", "z")


def integrate(model, method="ccd", *, start=None, f0=1.1, step=None, threshold=None, max_points=5000,
              progressbar=False):
    """The weighted design points of ``method`` for the model's hyperparameters.

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
    map_ii = fit(model, method="map", start=start, progressbar=progressbar)
    mode, log_p0, H = find_mode(target, ravel(map_ii.point, target.free).data)
    standard = designs.Standardisation(mode, -H)
    if method == "ccd":
        out = designs.ccd(standard, target.value, log_p0, f0=f0)
    else:
        out = designs.grid(standard, target.value, log_p0, step=step, threshold=threshold, max_points=max_points)
    keep = out["weight"] >= MIN_WEIGHT
    out = {**{k: v[keep] for k, v in out.items() if k in ("x", "z", "log_density", "weight")},
           "scales": out.get("scales"), "dropped": int((~keep).sum())}
    out["weight"] = out["weight"] / out["weight"].sum()
    out.update(mode=mode, hessian=H, target=target, n_evaluations=target.n_evaluations, method=method)
    return out


def sample_integrated(model=None, method="ccd", *, draws=500, chains=2, random_seed=None, start=None, f0=1.1,
                      step=None, threshold=None, max_points=5000, progressbar=True, **unknown):
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
    f0 : the CCD's radius over sqrt(d) (above 1; Rue et al. 2009 use 1.1).
    step, threshold, max_points : the grid's (``designs.grid``).
    progressbar : MAP-II's progress bar.

    Returns
    -------
    arviz.InferenceData
        ``posterior`` (resampled draws), ``log_likelihood`` and ``sample_stats``
        (``pymc_gpc.add_log_likelihood``), and the group ``integration``: per design
        point (dimension ``point``) the model's parameters, ``weight``, ``log_density``
        (the log posterior in the unconstrained space, up to a constant) and ``z`` (the
        standardised design coordinates); its attributes give the method, the number of
        log posterior evaluations and of points dropped for negligible weight.

    Raises
    ------
    ValueError
        For an unknown method or argument (e.g. NUTS's ``tune``), non-positive ``draws``
        or ``chains``, ``f0 <= 1``, too many hyperparameters for the method, or a log
        posterior that is not concave at its mode.
    """
    if unknown:
        raise ValueError(f"method={method!r} does not take {sorted(unknown)} (NUTS's arguments); it takes draws, "
                         "chains, random_seed, start, f0, step, threshold, max_points, progressbar")
    if int(draws) < 1 or int(chains) < 1:
        raise ValueError(f"draws and chains must be positive, got {draws} and {chains}")
    _check_options(method, f0, step, threshold, max_points)
    model = pm.modelcontext(model)
    clash = sorted(set(_INTERNAL) & set(model.named_vars))
    if clash:
        raise ValueError(f"the model has variables named {clash}, which the {GROUP!r} group uses for the design; "
                         "rename them")
    result = integrate(model, method, start=start, f0=f0, step=step, threshold=threshold, max_points=max_points,
                       progressbar=progressbar)
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
    (the GP terms' ``_loo`` etc. included) at the design points; one solve per point."""
    outs = model.unobserved_value_vars
    fn = model.compile_fn(outs, inputs=model.value_vars, point_fn=False, on_unused_input="ignore",
                          mode=FIT_FORWARD_MODE)
    target = result["target"]
    rows = []
    for x in result["x"]:
        point = target.to_point(x)
        rows.append(fn(**{v.name: point[v.name] for v in model.value_vars}))
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
    tree = az.from_dict({"posterior": posterior}, coords=coords, dims=dims)
    tree[GROUP] = _design_group(result, values, model, coords)
    return add_log_likelihood(tree, model)


def _design_group(result, values, model, coords):
    """The ``integration`` group: per point the parameters, ``weight``, ``log_density``, ``z``."""
    internal = {f"{g}{s}" for g in gp_names(model) for s in ("_loo", "_n_iter", "_status")}
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
                       n_evaluations=int(result["n_evaluations"]), dropped=int(result["dropped"]))
    return group


def predict(gp, Xnew, idata, *, model=None):
    r"""Class probabilities at ``Xnew`` averaged exactly with the design's weights,
    :math:`\sum_k w_k\, p(y_* \mid y, \theta_k)`, each term by ``gp.predict(Xnew, point=...)``
    at the engine's accuracy.

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
    try:
        group = idata[GROUP]
    except KeyError:
        raise ValueError(f"idata has no {GROUP!r} group: give the result of pymc_gpc.sample(method='ccd' or "
                         "'grid'), or use gp.predict(Xnew, idata=idata) for posterior draws") from None
    group = group.to_dataset() if hasattr(group, "to_dataset") else group
    weight = np.asarray(group["weight"], float)
    names = [n for n in group.data_vars if n not in _INTERNAL]
    probs = [gp.predict(Xnew, point={n: np.asarray(group[n][k]) for n in names}, model=model)
             for k in range(weight.size)]
    return np.tensordot(weight / weight.sum(), np.stack(probs), axes=1)
