r"""One entry per approximation: what it is, what it supports, and how it is run.

Every table that used to match approximation names as strings (the solvers, which have a
gradient, the sampler's and the engine's tolerances, prediction's, the retry schedules,
which LOO terms are deferred, which prior structures and backends each serves) is a field
of one frozen ``Approximation`` here, looked up by name in ``APPROXIMATIONS``. A
combination that does not exist (mean field with ``approx="FITC"``, a multi-class
likelihood with mean field, the JAX backend with FITC) is an ``UnsupportedCombinationError``
raised here, naming what works.

Names are the ``approximation`` attribute of the GP classes (``gp.MarginalEP.approximation
== "ep"``) and the first argument of the Ops (``ops.marginal.ApproxMarginalOp``). The prior
structures are named as in ``structures.select`` ("dense", "fitc", "dense-multiclass", "fitc-multiclass").
"""

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from .adf import adf
from .ep import ep
from .laplace import laplace
from .meanfield import meanfield
from .multinomial_probit_ep import multinomial_probit_ep
from .softmax_laplace import softmax_laplace

__all__ = ["Approximation", "APPROXIMATIONS", "SOLVERS", "UnsupportedCombinationError", "get", "check_approx",
           "check_structure", "check_backend", "multiclass_variant"]

BACKENDS = ("numba", "jax")
# the prior structures each backend implements (PyTensor's Python VM runs the numba Ops' perform)
BACKEND_STRUCTURES = {"numba": ("dense", "fitc", "dense-multiclass", "fitc-multiclass"),
                      "jax": ("dense", "fitc", "dense-multiclass", "fitc-multiclass")}


class UnsupportedCombinationError(ValueError, NotImplementedError):
    """An approximation asked for with a prior structure, a likelihood or a backend it does
    not serve. A ValueError for the constructors' argument checks; also a
    NotImplementedError, what the JAX backend's registration raises for a model it cannot run."""


# -- retry schedules (``approximations.solve.solve_with_retries``) ----------------------------


def no_retries(options):
    """ADF is one pass: nothing to retry."""
    return []


def newton_retries(options):
    """Newton (Laplace, mean field, softmax Laplace): four times the iterations."""
    return [dict(options, max_iter=4 * options.get("max_iter", 100))]


def ep_dense_retries(options):
    """Dense EP: damped, then sequential."""
    sweeps = options.get("max_sweeps", 300)
    return [dict(options, damping=0.5, max_sweeps=2 * sweeps),
            dict(options, method="sequential", damping=0.7, max_sweeps=2 * sweeps)]


def ep_fitc_retries(options):
    """EP with the FITC prior (no sequential schedule): damped 0.5, then 0.25."""
    sweeps = options.get("max_sweeps", 300)
    return [dict(options, damping=0.5, max_sweeps=2 * sweeps), dict(options, damping=0.25, max_sweeps=4 * sweeps)]


def nested_ep_retries(options):
    """Nested EP (multinomial probit): damped."""
    return [dict(options, damping=0.5, max_sweeps=2 * options.get("max_sweeps", 100))]


def _frozen(**values):
    return MappingProxyType(values)


@dataclass(frozen=True)
class Approximation:
    """One approximation of the evidence.

    Attributes
    ----------
    name : the key in ``APPROXIMATIONS`` and the Ops' ``approximation``.
    solver : ``solver(prior, y, likelihood, params, state=None, **options)`` ->
        ``ApproximationResult`` (``pymc_gpc.ep`` and its kin).
    classifier : the GP class that builds it (for messages).
    retries : prior structure name -> ``schedule(options)``, the option dicts tried after
        a non-converged run; the first structure's is the default.
    has_gradient : whether the evidence has a gradient (ADF's has none).
    sampling_defaults : solver options inside ``pymc_gpc.sample``'s sampler, under the
        user's (``ops.rewrites.sampling_tolerance``).
    engine_defaults : the engine's defaults that compiled paths need explicitly
        (``ep_warm`` and ``backends.numba.compiled_ep`` take tol as an argument).
    prediction_defaults : solver options when predicting over posterior draws
        (``pymc_gpc.gp.prediction``).
    coarse_fit_defaults : solver options of the first, coarse L-BFGS-B run of
        ``fit(method="type2" | "map")`` (``estimation.type2._coarse_stage``), which only
        has to find the optimum's neighbourhood; the second run solves at the Op's own
        options, so the returned optimum is that of exact solves. Empty: one run at the
        Op's options. Only the fit's first run reads it (predictions keep
        ``prediction_defaults``).
    deferred_loo : whether its LOO terms cost enough of an evaluation to be computed only
        when a deterministic asks for them (``ops.rewrites.defer_unused_loo``).
    backends : the backends that implement it (``BACKENDS``).
    multiclass : the name of its variant for multi-class likelihoods, if any.
    """

    name: str
    solver: Callable
    classifier: str
    retries: Mapping
    has_gradient: bool = True
    sampling_defaults: Mapping = field(default_factory=_frozen)
    engine_defaults: Mapping = field(default_factory=_frozen)
    prediction_defaults: Mapping = field(default_factory=_frozen)
    coarse_fit_defaults: Mapping = field(default_factory=_frozen)
    deferred_loo: bool = False
    backends: tuple = ("numba",)
    multiclass: str | None = None

    @property
    def structures(self):
        """The prior structures it serves, the default first."""
        return tuple(self.retries)

    def retry_schedule(self, options, structure=None):
        """The retries after a non-converged run with ``options`` under ``structure``
        (default: its first structure)."""
        return self.retries[structure or self.structures[0]](options)


APPROXIMATIONS = {a.name: a for a in (
    Approximation(
        "ep", ep, "MarginalEP", _frozen(dense=ep_dense_retries, fitc=ep_fitc_retries),
        # the sampler's tolerance: why 1e-2 suffices is in docs/design/engine_notes.md, "Sampler tolerances"
        sampling_defaults=_frozen(tol=1e-2),
        engine_defaults=_frozen(tol=inspect.signature(ep).parameters["tol"].default),
        prediction_defaults=_frozen(tol=1e-3), coarse_fit_defaults=_frozen(tol=1e-3),
        backends=("numba", "jax"), multiclass="ep-multiclass"),
    Approximation(
        "laplace", laplace, "MarginalLaplace", _frozen(dense=newton_retries, fitc=newton_retries),
        deferred_loo=True, backends=("numba", "jax"), multiclass="laplace-multiclass"),
    Approximation("meanfield", meanfield, "MarginalMeanField", _frozen(dense=newton_retries)),
    Approximation("adf", adf, "MarginalADF", _frozen(dense=no_retries), has_gradient=False),
    Approximation(
        "laplace-multiclass", softmax_laplace, "MarginalLaplace", 
        _frozen(**{"dense-multiclass": newton_retries, "fitc-multiclass": newton_retries}),
        # the mode's n^3 products for the gradient in single precision; log q stays double
        sampling_defaults=_frozen(rough_gradient=True), deferred_loo=True, backends=("numba", "jax")),
    Approximation(
        "ep-multiclass", multinomial_probit_ep, "MarginalEP", 
        _frozen(**{"dense-multiclass": nested_ep_retries, "fitc-multiclass": nested_ep_retries}),
        # nested EP's tol is on the inner site parameters; its log Z converges more slowly in
        # the site change than binary EP's (docs/design/engine_notes.md, "Sampler tolerances")
        sampling_defaults=_frozen(tol=1e-4, rough_gradient=True),
        # the fit's first run at the sampler's site tolerance (multiclass_gold.md, "Nested EP at
        # ten classes"); its predictions over draws stay exact (prediction_defaults empty)
        coarse_fit_defaults=_frozen(tol=1e-4), backends=("numba", "jax")),
)}


class _SolverView(Mapping):
    """name -> solver, read from ``APPROXIMATIONS`` at each lookup."""

    def __getitem__(self, name):
        return APPROXIMATIONS[name].solver

    def __iter__(self):
        return iter(APPROXIMATIONS)

    def __len__(self):
        return len(APPROXIMATIONS)


SOLVERS = _SolverView()


def get(name):
    """The entry of ``name``; ValueError naming the known ones otherwise."""
    if name not in APPROXIMATIONS:
        raise ValueError(f"approximation must be one of {sorted(APPROXIMATIONS)}, got {name!r}")
    return APPROXIMATIONS[name]


def _serving(structure):
    return [a for a in APPROXIMATIONS.values() if structure in a.structures]


def check_structure(name, structure):
    """``UnsupportedCombinationError`` unless approximation ``name`` serves ``structure``."""
    if structure not in get(name).structures:
        names = tuple(a.name for a in _serving(structure))
        label = {"fitc": "FITC", "fitc-multiclass": "multi-class FITC"}.get(structure, structure)
        raise UnsupportedCombinationError(f"the {label} prior supports {names}, got {name!r}")


def check_approx(approx, name):
    """``approx`` given to a classifier of approximation ``name``: None (the dense kernel) or
    "FITC" (the inducing-point prior), which only some approximations serve."""
    if approx is None:
        return None
    if not isinstance(approx, str) or approx.upper() != "FITC":
        raise ValueError(f"approx must be None (dense) or 'FITC', got {approx!r}")
    if "fitc" not in get(name).structures:
        classifiers = " and ".join(a.classifier for a in _serving("fitc"))
        raise UnsupportedCombinationError(f"approx='FITC' is available for {classifiers}, not {name!r}")
    return "FITC"


def multiclass_variant(name, likelihood, classifier):
    """The approximation that integrates out the multi-class ``likelihood`` for the classifier
    class named ``classifier`` of approximation ``name``, or ``UnsupportedCombinationError``."""
    variant = get(name).multiclass
    if variant is not None and name in likelihood.approximations:
        return variant
    raise UnsupportedCombinationError(
        f"{classifier} cannot integrate out the multi-class likelihood {likelihood!r}: use "
        "MarginalLaplace(likelihood=Softmax()) or MarginalEP(likelihood=MultinomialProbit())"
    )


def check_backend(name, structure, backend, op_name):
    """``UnsupportedCombinationError`` unless ``backend`` runs approximation ``name`` with the
    prior ``structure`` (``op_name``: the Op's type, for the message)."""
    if structure not in BACKEND_STRUCTURES[backend]:
        served = ", ".join(BACKEND_STRUCTURES[backend])
        raise UnsupportedCombinationError(
            f"{op_name} has no {backend} implementation: that backend serves the prior structures "
            f"{served} (the others run on the default numba backend, pymc_gpc.sample() / pm.sample() "
            "with nuts_sampler='pymc' or 'nutpie')"
        )
    if backend not in get(name).backends:
        served = [a for a in APPROXIMATIONS.values() if backend in a.backends and a.multiclass]  # binary records
        raise UnsupportedCombinationError(
            f"the JAX backend implements {' and '.join(_title(a.name) for a in served)} "
            f"({', '.join(a.classifier for a in served)}), not {name!r}; "
            "sample that model with PyMC's NUTS or nutpie (nuts_sampler='pymc' or 'nutpie')")


def _title(name):
    return "EP" if name == "ep" else name.capitalize()
