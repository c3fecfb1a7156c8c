"""One entry per approximation: what it is, which likelihoods it serves, and how it is run.

``APPROXIMATIONS`` maps a name (the GP classes' ``approximation``, the Ops' first argument)
to a frozen ``Approximation``, with one ``Solver`` per likelihood family it integrates out
("binary", "ordinal", "multiclass": ``family``): the solver, its retries, its sampler,
engine, prediction and coarse-fit options. Several classes are a property of the likelihood
(``likelihood.approximations``): ``MarginalLaplace`` with ``Softmax`` is Laplace's entry with
its multi-class solver.

``check`` is the one validator of (approximation, likelihood, prior structure, backend); a
combination that does not exist is an ``UnsupportedCombinationError`` naming what works.
Prior structures are named as in ``structures.select``.
"""

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from ..likelihoods.base import Likelihood, laplace_unsupported_message
from ..likelihoods.multiclass import MULTICLASS_LIKELIHOODS, MulticlassLikelihood
from ..likelihoods.ordinal import OrdinalLikelihood
from .adf import adf
from .ep import ep
from .laplace import laplace
from .meanfield import meanfield
from .multinomial_probit_ep import multinomial_probit_ep
from .softmax_laplace import softmax_laplace

__all__ = ["Approximation", "Solver", "APPROXIMATIONS", "SOLVERS", "FAMILIES", "UnsupportedCombinationError",
           "get", "family", "solver_for", "check", "approx_option", "check_approx", "check_structure",
           "check_backend"]

BACKENDS = ("numba", "jax")
# approx= (as ``approx_option`` returns it) -> the name of the binary structure it selects
SPARSE_PRIORS = {"FITC": "fitc", "HSGP": "hsgp"}
# the prior structures each backend implements (PyTensor's Python VM runs the numba Ops' perform)
BACKEND_STRUCTURES = {"numba": ("dense", "fitc", "dense-multiclass", "fitc-multiclass", "hsgp", "hsgp-multiclass"),
                      "jax": ("dense", "fitc", "dense-multiclass", "fitc-multiclass", "hsgp", "hsgp-multiclass")}
# the likelihood families (``family``): one latent function with two labels, one with K
# ordered labels, c latent functions
FAMILIES = ("binary", "ordinal", "multiclass")


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
class Solver:
    """How one approximation integrates out the likelihoods of one family.

    Attributes
    ----------
    solve : ``solve(prior, y, likelihood, params, state=None, **options)`` ->
        ``ApproximationResult`` (``pymc_gpc.ep`` and its kin).
    retries : prior structure name -> ``schedule(options)``, the option dicts tried after
        a non-converged run; the first structure's is the default.
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
    compiled_loop : whether the numba backend's compiled EP loop (``ep.ep_warm``,
        ``backends.numba.compiled_ep``) solves this solver's common case on a structure
        whose ``compiled_ep_loop`` is set (binary and ordinal EP).
    """

    solve: Callable
    retries: Mapping
    sampling_defaults: Mapping = field(default_factory=_frozen)
    engine_defaults: Mapping = field(default_factory=_frozen)
    prediction_defaults: Mapping = field(default_factory=_frozen)
    coarse_fit_defaults: Mapping = field(default_factory=_frozen)
    compiled_loop: bool = False

    @property
    def structures(self):
        """The prior structures it serves, the default first."""
        return tuple(self.retries)

    def retry_schedule(self, options, structure=None):
        """The retries after a non-converged run with ``options`` under ``structure``
        (default: its first structure)."""
        return self.retries[structure or self.structures[0]](options)


@dataclass(frozen=True)
class Approximation:
    """One approximation of the evidence.

    Attributes
    ----------
    name : the key in ``APPROXIMATIONS`` and the Ops' ``approximation``.
    classifier : the GP class that builds it (for messages).
    solvers : likelihood family (``FAMILIES``) -> ``Solver``, the families it integrates
        out; a multi-class likelihood also names the approximation among its own
        ``approximations``.
    has_gradient : whether the evidence has a gradient (ADF's has none).
    deferred_loo : whether its LOO terms cost enough of an evaluation to be computed only
        when a deterministic asks for them (``ops.rewrites.defer_unused_loo``).
    backends : the backends that implement it (``BACKENDS``).
    needs_log_density : whether it needs log p(y | f) and its derivatives in f (Laplace's
        Newton steps), which a piecewise constant likelihood does not have
        (``Likelihood.supports_laplace``).
    """

    name: str
    classifier: str
    solvers: Mapping
    has_gradient: bool = True
    deferred_loo: bool = False
    backends: tuple = ("numba",)
    needs_log_density: bool = False

    @property
    def structures(self):
        """The prior structures it serves over every family, the default (dense binary) first."""
        return tuple(dict.fromkeys(s for solver in self.solvers.values() for s in solver.structures))

    # The binary family's options, read where the likelihood is binary by construction
    # (the compiled EP path, binary benchmarks); ``solver_for`` gives any family's.
    sampling_defaults = property(lambda self: self.solvers["binary"].sampling_defaults)
    engine_defaults = property(lambda self: self.solvers["binary"].engine_defaults)
    prediction_defaults = property(lambda self: self.solvers["binary"].prediction_defaults)
    coarse_fit_defaults = property(lambda self: self.solvers["binary"].coarse_fit_defaults)

    def solver_for(self, likelihood):
        """The ``Solver`` of ``likelihood``'s family (an instance or a class), or
        ``UnsupportedCombinationError``."""
        kind = family(likelihood)
        if kind not in self.solvers:
            raise UnsupportedCombinationError(f"{self.classifier} does not integrate out {kind} likelihoods")
        return self.solvers[kind]

    def solver(self, prior, y, likelihood, params, state=None, **options):
        """Run the solver of ``likelihood``'s family (``approximations.solve.solve``)."""
        return self.solver_for(likelihood).solve(prior, y, likelihood, params, state=state, **options)

    def retry_schedule(self, options, structure=None):
        """The retries after a non-converged run with ``options`` under ``structure``
        (default: the dense binary prior), from the family's solver that serves it."""
        structure = structure or self.structures[0]
        solver = next((s for s in self.solvers.values() if structure in s.retries), None)
        if solver is None:
            check_structure(self.name, structure)
        return solver.retry_schedule(options, structure)


def _dense_and_fitc(schedule, fitc_schedule=None, multiclass=False, hsgp=False):
    """{structure name: schedule} for the dense and FITC priors (their multi-class blocks), and
    with ``hsgp`` the basis-function prior (its multi-class block), which takes FITC's schedule
    (no dense Sigma: no sequential sweeps)."""
    suffix = "-multiclass" if multiclass else ""
    schedules = {f"dense{suffix}": schedule, f"fitc{suffix}": fitc_schedule or schedule}
    if hsgp:
        schedules[f"hsgp{suffix}"] = fitc_schedule or schedule
    return _frozen(**schedules)


def _one_latent(solve, retries, **defaults):
    """The binary and ordinal families' solver: one latent function, the same engine."""
    solver = Solver(solve, retries, **defaults)
    return {"binary": solver, "ordinal": solver}


_EP_ONE_LATENT = _one_latent(
    ep, _dense_and_fitc(ep_dense_retries, ep_fitc_retries, hsgp=True),
    sampling_defaults=_frozen(tol=1e-2), engine_defaults=_frozen(tol=inspect.signature(ep).parameters["tol"].default),
    prediction_defaults=_frozen(tol=1e-3), coarse_fit_defaults=_frozen(tol=1e-3), compiled_loop=True)
_NESTED_EP = Solver(
    multinomial_probit_ep, _dense_and_fitc(nested_ep_retries, multiclass=True, hsgp=True),
    # tol on the inner site parameters, whose log Z converges more slowly than binary EP's
    sampling_defaults=_frozen(tol=1e-4, rough_gradient=True),
    coarse_fit_defaults=_frozen(tol=1e-4))
_SOFTMAX_LAPLACE = Solver(
    softmax_laplace, _dense_and_fitc(newton_retries, multiclass=True, hsgp=True),
    # the mode's n^3 products for the gradient in single precision; log q stays double
    sampling_defaults=_frozen(rough_gradient=True))

APPROXIMATIONS = {a.name: a for a in (
    Approximation("ep", "MarginalEP", MappingProxyType({**_EP_ONE_LATENT, "multiclass": _NESTED_EP}),
                  backends=("numba", "jax")),
    Approximation("laplace", "MarginalLaplace",
                  MappingProxyType({**_one_latent(laplace, _dense_and_fitc(newton_retries, hsgp=True)),
                                    "multiclass": _SOFTMAX_LAPLACE}),
                  deferred_loo=True, backends=("numba", "jax"), needs_log_density=True),
    Approximation("meanfield", "MarginalMeanField", MappingProxyType(
        {"binary": Solver(meanfield, _frozen(dense=newton_retries))})),
    Approximation("adf", "MarginalADF", MappingProxyType(
        {"binary": Solver(adf, _frozen(dense=no_retries))}), has_gradient=False),
)}


class _SolverView(Mapping):
    """name -> the entry's ``solver`` (which runs the solver of the likelihood's family),
    read from ``APPROXIMATIONS`` at each lookup."""

    def __getitem__(self, name):
        return APPROXIMATIONS[name].solver

    def __iter__(self):
        return iter(APPROXIMATIONS)

    def __len__(self):
        return len(APPROXIMATIONS)


SOLVERS = _SolverView()


# The names the multi-class solvers had as entries of their own, for the message that says where they went.
_FORMER_NAMES = {"laplace-multiclass": "laplace", "ep-multiclass": "ep"}


def get(name):
    """The entry of ``name``; ValueError naming the known ones otherwise."""
    if name not in APPROXIMATIONS:
        former = (f" ({name!r} is now {_FORMER_NAMES[name]!r}: a multi-class likelihood chooses its solver)"
                  if name in _FORMER_NAMES else "")
        raise ValueError(f"approximation must be one of {sorted(APPROXIMATIONS)}, got {name!r}{former}")
    return APPROXIMATIONS[name]


def family(likelihood):
    """The family of ``likelihood`` (an instance or a class): "multiclass" (c latent
    functions), "ordinal" (one latent function, K ordered labels) or "binary"."""
    kind = likelihood if isinstance(likelihood, type) else type(likelihood)
    if issubclass(kind, MulticlassLikelihood):
        return "multiclass"
    return "ordinal" if issubclass(kind, OrdinalLikelihood) else "binary"


def solver_for(name, likelihood):
    """The ``Solver`` with which approximation ``name`` integrates out ``likelihood`` (an
    instance or a class): its function, retries and tolerances."""
    return get(name).solver_for(likelihood)


def _multiclass_pairs():
    """'MarginalLaplace(likelihood=Softmax()) or MarginalEP(likelihood=MultinomialProbit())':
    each multi-class likelihood with the classifiers its ``approximations`` name."""
    return " or ".join(f"{APPROXIMATIONS[a].classifier}(likelihood={cls.__name__}())"
                       for cls in MULTICLASS_LIKELIHOODS.values() for a in cls.approximations)


def _check_likelihood(entry, likelihood):
    """``likelihood`` (an instance) of a family that ``entry`` integrates out, or ValueError
    naming the classifiers that do."""
    if not isinstance(likelihood, (Likelihood, MulticlassLikelihood)):
        raise ValueError(f"likelihood must be a pymc_gpc.likelihoods.Likelihood instance, got {likelihood!r}")
    kind = type(likelihood)
    fam = family(likelihood)
    if fam == "multiclass" and not (fam in entry.solvers and entry.name in kind.approximations):
        raise UnsupportedCombinationError(
            f"{entry.classifier} cannot integrate out the multi-class likelihood {likelihood!r}: use "
            f"{_multiclass_pairs()}")
    if fam not in entry.solvers:
        serving = " or ".join(a.classifier for a in APPROXIMATIONS.values() if fam in a.solvers)
        raise UnsupportedCombinationError(
            f"{entry.classifier} does not integrate out the {fam} likelihood {kind.__name__}; use {serving}")
    if entry.needs_log_density and not getattr(kind, "supports_laplace", True):
        raise UnsupportedCombinationError(laplace_unsupported_message(likelihood))


def check(approximation, likelihood, structure="dense", backend=None):
    """The one check of a combination, before any heavy work: ``UnsupportedCombinationError``
    (a ValueError) naming what works unless approximation ``approximation`` integrates out
    ``likelihood`` (a ``pymc_gpc.likelihoods`` instance) under the prior
    ``structure`` (a ``structures.select`` name: "dense", "fitc", "dense-multiclass",
    "fitc-multiclass") on ``backend`` (None: any the structure has; "numba" or "jax").

    The likelihood is checked first (the multi-class likelihoods name their
    approximations), then the prior structure, then the backend. Returns the ``Solver``.
    """
    entry = get(approximation)
    _check_likelihood(entry, likelihood)
    solver = entry.solver_for(likelihood)
    if structure not in solver.structures:
        if structure.startswith("fitc") or structure.startswith("hsgp"):
            classifiers = " and ".join(a.classifier for a in APPROXIMATIONS.values()
                                       if structure in a.structures)
            if structure.startswith("hsgp"):
                raise UnsupportedCombinationError(
                    f"approx='HSGP' is available for {classifiers}, not {approximation!r} with {likelihood!r}")
            raise UnsupportedCombinationError(
                f"approx='FITC' is available for {classifiers}, not {approximation!r}")
        check_structure(approximation, structure)
        raise UnsupportedCombinationError(
            f"the {structure} prior does not serve the {family(likelihood)} likelihood {likelihood!r}")
    if backend is not None:
        check_backend(approximation, structure, backend, entry.classifier)
    return solver


def approx_option(approx):
    """``approx`` (the sparse approximation of the prior, as in ``pm.gp.MarginalApprox``) as the
    GP classes keep it: None (the dense kernel), "FITC" or "HSGP" (any case); ValueError otherwise,
    which for the name of an approximation of the latent functions ("laplace") says where
    that name goes (the class, or ``approximation=``)."""
    if approx is None:
        return None
    if isinstance(approx, str) and (approx in APPROXIMATIONS or approx in _FORMER_NAMES):
        entry = APPROXIMATIONS[_FORMER_NAMES.get(approx, approx)]
        raise ValueError(
            f"approx must be None (dense) or 'FITC' or 'HSGP', got {approx!r}: approx is the sparse approximation of the "
            f"prior (as in pm.gp.MarginalApprox); {entry.name!r} integrates out the latent functions, chosen by "
            f"the class ({entry.classifier}) or ard_classifier(approximation={entry.name!r})")
    if not isinstance(approx, str) or approx.upper() not in SPARSE_PRIORS:
        raise ValueError(f"approx must be None (dense) or 'FITC' or 'HSGP', got {approx!r}")
    return approx.upper()


def _serving(structure):
    return [a for a in APPROXIMATIONS.values() if structure in a.structures]


def check_structure(name, structure):
    """``UnsupportedCombinationError`` unless approximation ``name`` serves ``structure``."""
    if structure not in get(name).structures:
        names = tuple(a.name for a in _serving(structure))
        label = {"fitc": "FITC", "fitc-multiclass": "multi-class FITC", "hsgp": "HSGP",
                 "hsgp-multiclass": "multi-class HSGP"}.get(structure, structure)
        raise UnsupportedCombinationError(f"the {label} prior supports {names}, got {name!r}")


def check_approx(approx, name):
    """``approx`` given to a classifier of approximation ``name``: None (the dense kernel) or
    "FITC" (the inducing-point prior), which only some approximations serve (``approx_option``
    and the structure part of ``check``)."""
    approx = approx_option(approx)
    if approx is not None and SPARSE_PRIORS[approx] not in get(name).structures:
        classifiers = " and ".join(a.classifier for a in _serving(SPARSE_PRIORS[approx]))
        raise UnsupportedCombinationError(f"approx={approx!r} is available for {classifiers}, not {name!r}")
    return approx


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
        served = [a for a in APPROXIMATIONS.values() if backend in a.backends]
        raise UnsupportedCombinationError(
            f"the JAX backend implements {' and '.join(_title(a.name) for a in served)} "
            f"({', '.join(a.classifier for a in served)}), not {name!r}; "
            "sample that model with PyMC's NUTS or nutpie (nuts_sampler='pymc' or 'nutpie')")


def _title(name):
    return "EP" if name == "ep" else name.capitalize()
