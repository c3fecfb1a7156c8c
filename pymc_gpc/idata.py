"""ArviZ integration: sampling results that carry a pointwise log-likelihood group.

The GP marginal likelihood does not factorise over observations, so the pointwise
term that PSIS-LOO needs is the leave-one-out predictive log q(y_i | y_{-i}, theta)
(Buerkner, Gabry & Vehtari 2021, for non-factorised models): importance weights
1 / q(y_i | y_{-i}, theta) turn posterior draws into draws given y_{-i}. EP and
Laplace give it for free from their cavities, recorded per draw in ``{name}_loo``.
"""

import functools
import os
import warnings

import numpy as np
import pymc as pm
import xarray as xr
from pytensor.graph.traversal import ancestors

from .backends.jax.registration import JAX_SAMPLERS, jax_available, missing_jax_message
from .ops.rewrites import sampling_tolerance
from .progress import sampler_log_lines


def gp_names(model=None):
    """Names of the GP classifier potentials in a model (those with a ``{name}_loo``)."""
    model = pm.modelcontext(model)
    return [
        det.name[: -len("_loo")]
        for det in model.deterministics
        if det.name.endswith("_loo") and det.name[: -len("_loo")] in model.named_vars
    ]


# The per-evaluation outputs that ``marginal_likelihood`` records as deterministics and that
# ``add_log_likelihood`` moves: ``{name}_loo`` to ``log_likelihood`` (as ``name``), these to
# ``sample_stats`` (solver diagnostics, as a sampler's tree depth).
DIAGNOSTICS = ("_n_iter", "_status")


def _group(idata, group):
    """An xarray Dataset of ``group`` (DataTree node or Dataset), or None."""
    try:
        node = idata[group]
    except KeyError:
        return None
    return node.to_dataset() if hasattr(node, "to_dataset") else node


def _drop_unused_coords(ds, keep=("chain", "draw")):
    used = {d for v in ds.data_vars.values() for d in v.dims} | set(keep)
    return ds.drop_vars([c for c in ds.coords if c not in used and not set(ds[c].dims) & used])


def _pointwise_terms(idata, name, model):
    """``{name}_loo`` draws: from the posterior where PyMC recorded them, else computed at the
    draws; None (with a warning) where the posterior lacks a free variable."""
    post = _group(idata, "posterior")
    if post is None:
        raise ValueError("idata has no posterior group")
    if f"{name}_loo" in post:
        return post[f"{name}_loo"]
    free = [rv.name for rv in model.free_RVs]
    missing = [n for n in free if n not in post]
    if missing:  # a trace of chosen variables (pm.sample's var_names) without all that the terms need
        warnings.warn(f"the posterior lacks {missing} (var_names?): no log_likelihood for {name!r}, so az.loo "
                      f"cannot use it; trace every free variable or {name}_loo", UserWarning, stacklevel=3)
        return None
    computed = pm.compute_deterministics(post[free], var_names=[f"{name}_loo"],
                                         model=model, progressbar=False)
    return computed[f"{name}_loo"]


def add_log_likelihood(idata, model=None):
    """Give the sampling result the layout ArviZ expects for a GP classifier; returns idata.

    * ``log_likelihood``: the pointwise leave-one-out terms ``log q(y_i | y_-i, theta)`` of each
      classifier, as variable ``name`` (from its ``{name}_loo`` draws, or computed at the
      posterior draws where the posterior lacks them), and the elementwise log density of
      the model's other observed variables (``pm.compute_log_likelihood``), so
      ``az.loo(idata)`` and ``az.compare`` work;
    * ``sample_stats``: the solver diagnostics ``{name}_n_iter`` and ``{name}_status``;
    * ``posterior``: the model's parameters only (``{name}_loo``, ``_n_iter`` and
      ``_status`` removed), so ``az.summary(idata)`` and ``az.plot_trace(idata)`` show
      the hyperparameters.

    ``pymc_gpc.sample`` calls it; call it on the result of a plain ``pm.sample``. Calling it
    twice changes nothing.

    Parameters
    ----------
    idata : arviz.InferenceData
        A sampling result of a model with one or more classifiers from this package.
    model : pm.Model, optional
        The model (default: the model on the context stack).

    Returns
    -------
    arviz.InferenceData
        ``idata``, with the ``log_likelihood`` group added and the diagnostics moved.

    Examples
    --------
    >>> with model:
    ...     idata = pm.sample()  # doctest: +SKIP
    ...     pymc_gpc.add_log_likelihood(idata)  # doctest: +SKIP
    >>> az.loo(idata)  # doctest: +SKIP
    """
    model = pm.modelcontext(model)
    names = gp_names(model)
    if not names:
        return idata
    post = _group(idata, "posterior")
    ll = _group(idata, "log_likelihood")
    data = dict(ll.data_vars) if ll is not None else {}
    for name in names:
        if name not in data:
            terms = _pointwise_terms(idata, name, model)
            if terms is not None:
                data[name] = terms.rename(name)
    observed = [rv.name for rv in model.observed_RVs if rv.name not in data]
    if observed:  # the model's other observed variables, by PyMC's own elementwise log density
        data.update(pm.compute_log_likelihood(idata, var_names=observed, extend_inferencedata=False, model=model,
                                              progressbar=False).data_vars)
    if data:
        idata["log_likelihood"] = xr.Dataset(data)
    stats = _group(idata, "sample_stats")
    moved = {f"{name}{suffix}": post[f"{name}{suffix}"] for name in names for suffix in DIAGNOSTICS
             if f"{name}{suffix}" in post}
    if moved:
        stats = xr.Dataset(moved) if stats is None else stats.assign(moved)
        idata["sample_stats"] = stats
    drop = [v for name in names for v in (f"{name}_loo", *(f"{name}{s}" for s in DIAGNOSTICS)) if v in post]
    if drop:
        idata["posterior"] = _drop_unused_coords(post.drop_vars(drop))
    return idata


def _compute_log_density(original):
    """PyMC's ``compute_log_density`` (behind ``pm.compute_log_likelihood`` and
    ``pm.sample(idata_kwargs={"log_likelihood": True})``), extended to the GP classifiers'
    pointwise terms: PyMC computes the elementwise log density of observed variables, and
    a classifier's evidence is a potential, not one, so PyMC alone would return an empty
    group. Models without a classifier, and ``kind="prior"``, go to PyMC unchanged."""

    @functools.wraps(original)
    def compute_log_density(idata, *, var_names=None, extend_inferencedata=True, model=None, kind="likelihood",
                            **kwargs):
        model = pm.modelcontext(model)
        names = gp_names(model) if kind == "likelihood" else []
        ours = [n for n in names if var_names is None or n in var_names]
        if not ours:
            return original(idata, var_names=var_names, extend_inferencedata=extend_inferencedata, model=model,
                            kind=kind, **kwargs)
        theirs = None if var_names is None else [n for n in var_names if n not in names]
        if theirs is None:
            theirs = [rv.name for rv in model.observed_RVs]
        data = {}
        if theirs:
            data.update(original(idata, var_names=theirs, extend_inferencedata=False, model=model, kind=kind,
                                 **kwargs).data_vars)
        for name in ours:
            terms = _pointwise_terms(idata, name, model)
            if terms is None:
                raise ValueError(f"the posterior lacks free variables that {name!r}'s pointwise terms need")
            data[name] = terms.rename(name)
        dataset = xr.Dataset(data)
        if extend_inferencedata:
            idata["log_likelihood"] = dataset
            return idata
        return dataset

    compute_log_density._pymc_gpc = True
    return compute_log_density


def install_log_likelihood_route():
    """Route PyMC's log-likelihood functions to the classifiers' pointwise terms (once)."""
    import pymc.stats.log_density as log_density

    if not getattr(log_density.compute_log_density, "_pymc_gpc", False):
        log_density.compute_log_density = _compute_log_density(log_density.compute_log_density)


install_log_likelihood_route()


def sample_posterior_predictive(idata, model=None, **kwargs):
    """``pm.sample_posterior_predictive`` without its warning that Potentials are ignored,
    where that is harmless: every potential of the model is a GP classifier's evidence and
    ``idata``'s posterior holds every free variable the potentials depend on, so the draws
    (e.g. of ``gp.conditional``) use hyperparameters that the evidence already shaped.
    Otherwise the warning is PyMC's, shown as usual.

    Parameters
    ----------
    idata : arviz.InferenceData or xarray.Dataset
        The posterior draws (e.g. from ``pymc_gpc.sample``).
    model : pm.Model, optional
        The model (default: the model on the context stack); second positional parameter,
        as in ``pm.sample_posterior_predictive``.
    **kwargs
        Passed on to ``pm.sample_posterior_predictive`` (e.g. ``var_names``).

    Returns
    -------
    arviz.InferenceData
        What ``pm.sample_posterior_predictive`` returns.

    Examples
    --------
    >>> with model:  # doctest: +SKIP
    ...     X_new = pm.Data("X_new", X_test)          # new inputs, apart from the training X
    ...     f_new = gp.conditional("f_new", X_new)
    ...     pp = pymc_gpc.sample_posterior_predictive(idata, var_names=["f_new"])
    ...     pm.set_data({"X_new": X_other})          # other inputs, any number of rows
    ...     pp = pymc_gpc.sample_posterior_predictive(idata, var_names=["f_new"])
    """
    model = pm.modelcontext(model)
    names = set(gp_names(model))
    post = _group(idata, "posterior") if not isinstance(idata, xr.Dataset) else idata
    # free variables missing from the posterior are drawn afresh: harmless where the
    # potentials do not depend on them (``gp.conditional``'s latents)
    shaping = set(ancestors(model.potentials))
    harmless = (post is not None and all(p.name in names for p in model.potentials)
                and all(rv.name in post or rv not in shaping for rv in model.free_RVs))
    with warnings.catch_warnings():
        if harmless:
            warnings.filterwarnings("ignore", message="The effect of Potentials on other parameters is ignored",
                                    category=UserWarning)
        return pm.sample_posterior_predictive(idata, model=model, **kwargs)


# Up to this many sampled values, ``sample`` gives PyMC's NUTS a dense mass matrix.
DENSE_MASS_MAX = 50


def default_init(model=None):
    """PyMC's NUTS initialisation that ``sample`` uses: a dense mass matrix
    (``"jitter+adapt_full"``) for a model of at most ``DENSE_MASS_MAX`` continuous sampled
    values, PyMC's own default (``"jitter+adapt_diag"``) above that. (With discrete
    variables PyMC builds a compound step and ignores ``init``.)

    A GP classifier's few hyperparameters are correlated, which a dense metric follows
    (more ESS per gradient evaluation: ``benchmarks/results/mass_matrix.md``); with many
    values a dense estimate from a few hundred tuning draws is poor.

    Returns
    -------
    str
        ``"jitter+adapt_full"`` or ``"jitter+adapt_diag"``.

    Examples
    --------
    >>> from pymc_gpc.idata import default_init
    >>> pm.sample(init=default_init(model), model=model)  # doctest: +SKIP
    """
    return "jitter+adapt_full" if _sampled_size(model) <= DENSE_MASS_MAX else "jitter+adapt_diag"


def _sampled_size(model=None):
    """The number of continuous values NUTS samples in ``model``."""
    model = pm.modelcontext(model)
    point = model.initial_point()
    return sum(int(np.size(point[v.name])) for v in model.continuous_value_vars)


# Above this many sampled values, ``sample`` runs nutpie (where it is installed).
PYMC_NUTS_MAX = 10


def default_sampler(model=None):
    """The NUTS implementation ``sample`` uses when none is given: PyMC's, with the dense mass
    matrix of ``default_init``, for at most ``PYMC_NUTS_MAX`` sampled values; nutpie above
    that, where it is installed (else PyMC's).

    The boundary is where the two samplers' ESS per second crossed on the benchmark models
    (``benchmarks/results/sampling_hard.md``).

    Returns
    -------
    str
        ``"pymc"`` or ``"nutpie"``.

    Examples
    --------
    >>> from pymc_gpc.idata import default_sampler
    >>> default_sampler(model)  # doctest: +SKIP
    'pymc'
    """
    if _sampled_size(model) <= PYMC_NUTS_MAX:
        return "pymc"
    try:
        import nutpie  # noqa: F401
    except ImportError:
        return "pymc"
    return "nutpie"


def available_cores():
    """The CPU cores this process may run on (its affinity mask where the platform has
    one, else ``os.cpu_count()``)."""
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except AttributeError:  # no affinity on this platform (macOS, Windows)
        return os.cpu_count() or 1


# At most this many chains in parallel unless ``cores`` is given (PyMC's own cap).
MAX_DEFAULT_CORES = 4


def parallel_defaults(kwargs, sampler):
    """``kwargs`` for ``pm.sample`` with the chains run in parallel on the available cores: ``cores``
    defaults to min(chains, ``available_cores()``, ``MAX_DEFAULT_CORES``) (PyMC's own default
    counts half the CPUs: one on a 2-core machine), ``chains`` to PyMC's max(2, cores), and
    PyMC's process-based chains start by ``mp_ctx="forkserver"`` (forking the multi-threaded
    parent may deadlock). Given values are kept. Returns a new dict.
    """
    kwargs = dict(kwargs)
    chains = kwargs.get("chains")
    if kwargs.get("cores") is None:
        kwargs["cores"] = max(1, min(chains or MAX_DEFAULT_CORES, available_cores(), MAX_DEFAULT_CORES))
    if chains is None:
        kwargs["chains"] = max(2, kwargs["cores"])
    if sampler == "pymc" and kwargs["cores"] > 1 and min(kwargs["cores"], kwargs["chains"]) > 1:
        kwargs.setdefault("mp_ctx", "forkserver")
    return kwargs


def sample_nuts(*args, model=None, **kwargs):
    """NUTS over the hyperparameters with this package's defaults: what
    ``pymc_gpc.sample(method="nuts")`` runs (``pymc_gpc.estimation.sampling.sample``, which documents the
    defaults and adds the warning for large dense priors).

    Parameters
    ----------
    *args, **kwargs
        Passed to ``pm.sample`` over the defaults.
    model : pm.Model, optional
        The model (default: the model on the context stack).

    Returns
    -------
    arviz.InferenceData
        ``pm.sample``'s result with the ``log_likelihood`` group added.
    """
    model = pm.modelcontext(model)
    kwargs["nuts_sampler"] = kwargs.get("nuts_sampler") or default_sampler(model)
    if kwargs["nuts_sampler"] in JAX_SAMPLERS and not jax_available():
        raise ImportError(missing_jax_message(f"nuts_sampler={kwargs['nuts_sampler']!r}"))
    if kwargs["nuts_sampler"] == "pymc" and kwargs.get("init") is None and kwargs.get("step") is None:
        kwargs["init"] = default_init(model)
    kwargs = parallel_defaults(kwargs, kwargs["nuts_sampler"])
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="QuadPotentialFullAdapt is an experimental feature")
        with sampling_tolerance(), sampler_log_lines(args, kwargs) as kwargs:
            idata = pm.sample(*args, model=model, **kwargs)
    return add_log_likelihood(idata, model)
