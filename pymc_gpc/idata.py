"""ArviZ integration: sampling results that carry a pointwise log-likelihood group.

The GP marginal likelihood does not factorise over observations, so the pointwise
term that PSIS-LOO needs is the leave-one-out predictive log q(y_i | y_{-i}, theta)
(Buerkner, Gabry & Vehtari 2021, for non-factorised models): importance weights
1 / q(y_i | y_{-i}, theta) turn posterior draws into draws given y_{-i}. EP and
Laplace give it for free from their cavities, recorded per draw in ``{name}_loo``.
"""

import pymc as pm
import xarray as xr


def gp_names(model=None):
    """Names of the GP classifier potentials in a model (those with a ``{name}_loo``)."""
    model = pm.modelcontext(model)
    return [
        det.name[: -len("_loo")]
        for det in model.deterministics
        if det.name.endswith("_loo") and det.name[: -len("_loo")] in model.named_vars
    ]


def add_log_likelihood(idata, model=None):
    """Add a ``log_likelihood`` group from each classifier's ``{name}_loo`` draws.

    After this, ``az.loo(idata)`` and ``az.compare`` work without refitting. Returns idata.
    """
    model = pm.modelcontext(model)
    post = idata["posterior"]
    data = {}
    for name in gp_names(model):
        da = post[f"{name}_loo"]
        data[name] = da.to_dataset(name=name)[name] if hasattr(da, "to_dataset") else da
    if data:
        idata["log_likelihood"] = xr.Dataset(data)
    return idata


def sample(*args, model=None, **kwargs):
    """``pm.sample`` followed by ``add_log_likelihood``: the result is ready for ``az.loo``.

    Unlike ``pm.sample``, which prefers nutpie when it is installed, this defaults to
    PyMC's own NUTS (``nuts_sampler="pymc"``): its chains run in processes, while
    nutpie's threads share the GIL with the Python parts of the Ops, so PyMC's sampler
    was the faster here (Pima: 7.0 against 4.3 ESS/s, ``benchmarks/sampling.py``).
    """
    model = pm.modelcontext(model)
    kwargs.setdefault("nuts_sampler", "pymc")
    idata = pm.sample(*args, model=model, **kwargs)
    return add_log_likelihood(idata, model)
