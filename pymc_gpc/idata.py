"""ArviZ integration: sampling results that carry a pointwise log-likelihood group.

The GP marginal likelihood does not factorise over observations, so the pointwise
term that PSIS-LOO needs is the leave-one-out predictive log q(y_i | y_{-i}, theta)
(Buerkner, Gabry & Vehtari 2021, for non-factorised models): importance weights
1 / q(y_i | y_{-i}, theta) turn posterior draws into draws given y_{-i}. EP and
Laplace give it for free from their cavities, recorded per draw in ``{name}_loo``.
"""

import warnings

import numpy as np
import pymc as pm
import xarray as xr

from .ops.jax_registration import JAX_SAMPLERS, jax_available, missing_jax_message


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

    Parameters
    ----------
    idata : arviz.InferenceData
        A sampling result of a model with one or more classifiers from this package.
    model : pm.Model, optional
        The model (default: the model on the context stack).

    Returns
    -------
    arviz.InferenceData
        ``idata``, with the ``log_likelihood`` group added.

    Examples
    --------
    >>> with model:
    ...     idata = pm.sample()  # doctest: +SKIP
    ...     pymc_gpc.add_log_likelihood(idata)  # doctest: +SKIP
    >>> az.loo(idata)  # doctest: +SKIP
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


# Up to this many sampled values, ``sample`` gives PyMC's NUTS a dense mass matrix.
DENSE_MASS_MAX = 50


def default_init(model=None):
    """PyMC's NUTS initialisation that ``sample`` uses: a dense mass matrix
    (``"jitter+adapt_full"``) for a model of at most ``DENSE_MASS_MAX`` continuous sampled
    values, PyMC's own default (``"jitter+adapt_diag"``) above that. (With discrete
    variables PyMC builds a compound step and ignores ``init``.)

    A GP classifier's free variables are its few hyperparameters (d + 2 for the ARD
    kernel), and they are correlated: on Pima the amplitude log v0 and the glucose
    lengthscale log w_2 have posterior correlation -0.62. With a dense metric estimated
    from the tuning draws the min bulk ESS per gradient evaluation is higher
    (``benchmarks/mass_matrix.py``, Pima, 5 seeds x 2 chains x
    (500 + 500), from ``ard_classifier``'s initial point: 52.3 against 32.2 per 1000
    evaluations, medians). With many values (a latent function sampled alongside) the dense
    estimate from a few hundred tuning draws is poor, so there the diagonal default stays.

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

    Measured (``benchmarks/sampling_hard.py``, ``benchmarks/results/sampling_size.md``; ESS/s, medians
    of two seeds): with 4-9 hyperparameters PyMC's NUTS with the dense mass matrix was
    1.2-1.6x faster than nutpie (Pima, Crabs, a separable circle: more ESS per draw); with
    12, 22 and 32 (breast cancer's first 10, 20 and all 30 inputs, the same 300 rows)
    nutpie was 1.3-1.7x faster (less time per evaluation, and fewer steps per draw).
    The boundary lies somewhere between 9 and 12 values; which of the dimension and the
    cost of an evaluation decides it is not separated by these data.

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


def sample(*args, model=None, **kwargs):
    """``pm.sample`` with this package's defaults, then ``add_log_likelihood``: the result
    is ready for ``az.loo``.

    ``nuts_sampler="numpyro"`` or ``"blackjax"`` runs PyMC's JAX samplers on the Ops' JAX
    implementation (``ops/jax.py``; needs ``pip install pymc-gpc[jax]``).

    Defaults: the sampler measured faster for the model's size (``default_sampler``):
    PyMC's own NUTS (``nuts_sampler="pymc"``, chains in processes) for at most
    ``PYMC_NUTS_MAX`` sampled values, nutpie (chains as threads) above, where it is
    installed; with PyMC's NUTS and no ``init`` or ``step`` given,
    ``init=default_init(model)``, a dense mass matrix for the usual few hyperparameters.
    (Plain ``pm.sample`` prefers nutpie whenever it is installed.)
    PyMC's warning that its dense adaptation is experimental is not shown (a
    ``warnings.catch_warnings`` block, which is not thread-safe: concurrent calls from
    several threads may leave the warning filters of one of them in place).

    Parameters
    ----------
    *args, **kwargs
        Passed to ``pm.sample`` (``draws``, ``tune``, ``chains``, ``random_seed``,
        ``nuts_sampler``, ``init``, ...), over the defaults above.
    model : pm.Model, optional
        The model (default: the model on the context stack).

    Returns
    -------
    arviz.InferenceData
        ``pm.sample``'s result with the ``log_likelihood`` group added.

    Raises
    ------
    ImportError
        For ``nuts_sampler="numpyro"`` or ``"blackjax"`` without the ``jax`` extra.

    Examples
    --------
    >>> with model:  # a model with a pymc_gpc classifier
    ...     idata = pymc_gpc.sample(draws=500, tune=500, random_seed=1)  # doctest: +SKIP
    >>> az.loo(idata)  # doctest: +SKIP
    """
    model = pm.modelcontext(model)
    kwargs["nuts_sampler"] = kwargs.get("nuts_sampler") or default_sampler(model)
    if kwargs["nuts_sampler"] in JAX_SAMPLERS and not jax_available():
        raise ImportError(missing_jax_message(f"nuts_sampler={kwargs['nuts_sampler']!r}"))
    if kwargs["nuts_sampler"] == "pymc" and kwargs.get("init") is None and kwargs.get("step") is None:
        kwargs["init"] = default_init(model)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="QuadPotentialFullAdapt is an experimental feature")
        idata = pm.sample(*args, model=model, **kwargs)
    return add_log_likelihood(idata, model)
