"""Ready-made classifiers: the ARD model of Barber & Williams (1997) in one call, and
Kim & Ghahramani's label-noise model (``label_noise_classifier``).

.. math::

    k(x, x') = v_0 \\exp\\Big(-\\tfrac12 \\sum_m w_m (x_m - x'_m)^2\\Big) + v_1,
    \\qquad \\log w_m, \\log v_0, \\log v_1 \\sim N(-3, 3^2)

(Barber & Williams, eq. 2 and sec. 5; the same kernel as Kim & Ghahramani's eq. 10
without the jitter term v2, which ``jitter`` plays). ``w_m`` are inverse squared
lengthscales, so ``log_w`` near -inf switches input m off (ARD).
"""

import numpy as np
import pymc as pm
import pytensor.tensor as pt

from .marginal import MarginalADF, MarginalEP, MarginalLaplace, MarginalMeanField
from ..kernels import DEFAULT_PRIOR, MixedARD, ard_kernels, prior_pairs
from ..approximations import registry
from ..likelihoods.binary import Probit
from ..likelihoods.multiclass import MULTICLASS_LIKELIHOODS, MulticlassLikelihood
from ..likelihoods.ordinal import OrdinalLikelihood
from ..structures.select import select_structure
from ..validation import as_class_codes, as_ordinal_codes, check_inputs

# Where the chains start log v0 (``ard_classifier``'s docstring); comparisons that
# build the same model by hand (the benchmark's and the notebook's pm.gp.Latent) use it.
LOG_V0_START = 0.0

# ``approximation=`` names: the registry's entries and the classifier class that builds each
_CLASSES = {cls.__name__: cls for cls in (MarginalEP, MarginalLaplace, MarginalMeanField, MarginalADF)}
APPROXIMATIONS = {a.name: _CLASSES[a.classifier] for a in registry.APPROXIMATIONS.values()}


def multiclass_likelihood(approximation):
    """The multi-class likelihood that ``approximation`` integrates out (the one of
    ``likelihoods.MULTICLASS_LIKELIHOODS`` whose ``approximations`` name it), a new instance:
    ``ard_classifier``'s, the command line's and the scikit-learn estimators' default for a
    target with more than two classes; ValueError naming the pairs otherwise."""
    for likelihood in MULTICLASS_LIKELIHOODS.values():
        if approximation in likelihood.approximations:
            return likelihood()
    pairs = " or ".join(f"{a!r} ({name})" for name, likelihood in MULTICLASS_LIKELIHOODS.items()
                        for a in likelihood.approximations)
    raise ValueError(f"y holds more than two classes: use approximation={pairs}, not {approximation!r}")


def ard_classifier(X, y, *, approximation="ep", likelihood=None, prior=DEFAULT_PRIOR,
                   feature_names=None, bias=True, name="y", inducing="auto", learn_inducing=False, per_class=None,
                   lengthscale_spread=None, levels=None, kernel="se", linear=False, hsgp=None, **solver_options):
    """Build ``pm.Model`` + GP with an ARD kernel (``kernel``, ``linear``), for two classes or more.

    Parameters
    ----------
    X, y : training inputs (n, d) and labels: two classes, or more (then a multi-class
        likelihood, ``per_class`` kernels by default).
    approximation : how the latent functions are integrated out, the registry's name and the
        class built (``MarginalEP.approximation``): "ep", "laplace", "meanfield" (with
        ``variant="ensemble"`` or ``"naive"`` among the solver options) or "adf" (no
        gradient: not for NUTS). More than two classes: "laplace" (softmax) or "ep"
        (multinomial probit, nested EP). The sparse approximation of the prior, the GP
        classes' ``approx``, is chosen by ``inducing``.
    likelihood : a ``pymc_gpc.likelihoods`` instance (default ``Probit()`` for two classes,
        ``Softmax()`` with Laplace and ``MultinomialProbit()`` with EP for more), or an
        ordinal likelihood class (``pymc_gpc.OrderedProbit`` or ``OrderedLogit``, the class
        itself): its K-1 cutpoints are then the model's variable ``cutpoints`` (dims
        ``"cutpoint"``), N(0, 3^2) under the ordered transform, starting evenly spaced in [-1, 1].
    levels : ordinal labels only: the K levels from lowest to highest (``y`` integers
        0..K-1 or an ordered pandas categorical need none).
    per_class : with a multi-class likelihood, one ARD kernel per class (True, the
        default: ``log_w`` has dims ``("class", "feature")``, ``log_v0`` and ``log_v1``
        dims ``"class"``; ``kernels.ard_kernels``), one shared by all classes (False:
        the binary model's variables), or ``"amplitudes"``: the lengthscales shared
        (``log_w`` dims ``"feature"``), ``log_v0`` and ``log_v1`` per class
        (``ard_kernels(shared="lengthscales")``). Not for a binary likelihood.
    lengthscale_spread : with one ARD kernel per class, a number tau > 0: the classes' log
        inverse squared lengthscales are drawn toward a common value per input, log w_kj ~
        N(mu_j, tau^2) with mu_j ~ N(``prior``), mu_j integrated out
        (``lengthscale_shrinkage``: the potential ``log_w_shrinkage``). Between one kernel per
        class (tau infinite) and ``per_class="amplitudes"`` (tau = 0); tau = 1 lets a class's
        lengthscale differ from the common one by a factor of about e^(1/2) at one sd.
    prior : (mean, sd) of the Normal prior on every log-hyperparameter, or a dict from the
        model's variable names to (mean, sd) pairs, one Normal per group, the names not
        given N(-3, 3^2): ``"log_w"``, ``"log_v0"``, ``"log_v1"`` (with ``bias``, not with
        ``hsgp``) and ``"log_a"`` (with ``linear``); e.g. ``{"log_v0": (0.0, 1.0)}`` keeps
        the class amplitudes near 1 and leaves the other priors as they are. With
        ``lengthscale_spread``, ``"log_w"``'s pair is the mean and sd of mu_j.
    feature_names : names for the ``feature`` coordinate of ``log_w``.
    bias : include the constant term v1 (not with ``hsgp``: a constant kernel has no
        spectral density, so that model has no ``log_v1``; the basis' lowest frequencies
        carry an offset, and an ordinal model's cutpoints do).
    kernel : two classes only: "se" (the squared exponential above) or "matern52", the ARD
        Matern 5/2 kernel v0 (1 + sqrt5 r + 5 r^2 / 3) exp(-sqrt5 r), r^2 = sum_m w_m (x_m - x'_m)^2
        (Rasmussen & Williams 2006, eq. 4.17), with the same variables and priors.
    linear : two classes only: add the ARD linear term sum_m a_m x_m x'_m (Rasmussen &
        Williams 2006, eq. 4.19 with Sigma_p = diag(a)), log a_m ~ N(mean, sd) as ``log_a``
        (dims ``"feature"``): a trend in each input besides the SE's local variation.
    inducing : "auto" (the default: ``auto_inducing(n, approximation)``, the dense kernel
        up to ``DENSE_MAX_ROWS`` rows, FITC with m = ``inducing_count(n)`` above, for EP and
        Laplace), None (the dense kernel whatever n), a number m of inducing inputs placed by k-means
        (``pm.gp.util.kmeans_inducing_points``, seeded), or an (m, d) array of them: the
        FITC prior (``approx="FITC"``, EP and Laplace only), O(n m^2) per evaluation.
        k-means (``kmeans_centres``) runs on at most ``KMEANS_ROWS`` rows.
    hsgp : (m, c): the basis-function prior of ``pm.gp.HSGP`` instead (``approx="HSGP"``,
        ``structures.hsgp``; EP and Laplace, two classes or ordinal), m basis functions per
        input dimension (m^d in all) on the box c times the inputs' half-range around their
        midpoint (c > 1; ``pm.gp.HSGP`` recommends c >= 1.2), O(n m^(2d)) per evaluation,
        never an n x n matrix. For inputs of one to three dimensions (maps, time). The
        kernel is then ``pm.gp.cov.ExpQuad`` ("se") or ``Matern52`` with ARD lengthscales
        w^(-1/2), whose spectral densities the basis' prior variances are; ``inducing``
        must be left at "auto" or None.
    learn_inducing : with ``inducing``, make the inducing inputs a free variable ``Xu``
        (dims ``("inducing", "feature")``, a flat prior) starting at those inputs, so that
        ``pymc_gpc.fit`` optimises them with the hyperparameters, through the exact
        gradient of the evidence in K_uu and K_uf (as SVGP learns its inducing inputs).
        For point estimates: the flat prior leaves the posterior of ``Xu`` improper.

    Returns
    -------
    (model, gp)

    Raises
    ------
    ValueError
        For an unknown ``approximation``, a ``prior`` that is not a finite (mean, sd > 0)
        pair or a dict of such pairs keyed by the model's variable names (naming the unknown
        name or the bad pair), bad inputs, ``inducing`` with mean field or ADF, or
        ``per_class`` with a binary likelihood, ``lengthscale_spread`` that is not a number
        > 0 or without one kernel per class, or ``learn_inducing`` without ``inducing``, or
        ``approx=`` (use ``inducing`` or ``hsgp``), or ``hsgp`` that is not a pair (m >= 1, c > 1), with
        more than ``HSGP_MAX_DIMS`` input columns, with inducing inputs, with several classes
        or with ``linear``; the combination is checked by ``approximations.registry.check``.

    Notes
    -----
    The model's initial point (where ``pm.sample`` starts its chains before jitter, and
    ``pm.find_MAP`` / ``pymc_gpc.fit`` their optimisers) is the prior mean for every
    log-hyperparameter except the amplitude: log v0 starts at 0, the latent scale at
    which a probit or logistic likelihood is informative (clipped to within one prior sd
    of the prior mean). At the prior mean e^-3 the latent function is nearly flat and
    NUTS's first tuning iterations travel far. With ``pymc_gpc.sample``'s dense mass
    matrix, starting at 0 saved gradient evaluations on Pima and Crabs
    (``benchmarks/results/mass_matrix.md``; figures in ``docs/design/engine_notes.md``).

    Examples
    --------
    >>> import pymc_gpc
    >>> from pymc_gpc.datasets import load
    >>> pima = load("pima")
    >>> model, gp = pymc_gpc.ard_classifier(pima.X_train, pima.y_train, feature_names=pima.feature_names)
    >>> with model:
    ...     idata = pymc_gpc.sample()  # doctest: +SKIP
    >>> p = gp.predict(pima.X_test, idata=idata)  # doctest: +SKIP

    Several classes (one ARD kernel per class unless ``per_class=False``):

    >>> from pymc_gpc.datasets import load_fgl
    >>> glass = load_fgl()
    >>> model, gp = pymc_gpc.ard_classifier(glass.X, glass.y, approximation="laplace")  # doctest: +SKIP
    >>> result = pymc_gpc.fit(model, method="map")  # doctest: +SKIP
    """
    if "approx" in solver_options:
        raise ValueError("ard_classifier chooses the prior with inducing= (None: the dense kernel; a number m or an "
                         "(m, d) array: FITC, the GP classes' approx='FITC') or hsgp=(m, c) (approx='HSGP'), "
                         "not approx=")
    X = check_inputs(X)
    if hsgp is not None:
        hsgp = _hsgp_options(hsgp, X, inducing, linear)
        inducing = None
    inducing = auto_inducing(X.shape[0], approximation) if _is_auto(inducing) else inducing
    if learn_inducing and inducing is None:
        raise ValueError("learn_inducing=True needs inducing= (a number m of inducing inputs or an (m, d) array)")
    if approximation not in APPROXIMATIONS:
        raise ValueError(f"approximation must be one of {sorted(APPROXIMATIONS)}, got {approximation!r}")
    pairs = prior_pairs(prior, _prior_names(bias and hsgp is None, linear))
    d = X.shape[1]
    names = list(feature_names) if feature_names is not None else [f"x{m}" for m in range(d)]
    if len(names) != d:
        raise ValueError(f"feature_names has {len(names)} names for {d} input columns")
    if likelihood is None and has_several_classes(y):
        likelihood = multiclass_likelihood(approximation)
    likelihood = Probit() if likelihood is None else likelihood
    approx = "HSGP" if hsgp is not None else "FITC" if inducing is not None else None
    if not isinstance(likelihood, type):  # an ordinal class: its instance is checked by the GP class
        registry.check(approximation, likelihood, select_structure(likelihood, approx).name)
    several = isinstance(likelihood, MulticlassLikelihood) or (isinstance(likelihood, type)
                                                               and issubclass(likelihood, OrdinalLikelihood))
    if several and (kernel != "se" or linear):
        raise ValueError("kernel= and linear= serve a binary likelihood; multi-class and ordinal models use "
                         "the ARD squared exponential")
    if isinstance(likelihood, type) and issubclass(likelihood, OrdinalLikelihood):
        return _ordinal_classifier(X, y, likelihood, approximation, pairs, names, bias, name, inducing,
                                   learn_inducing, levels, solver_options, hsgp=hsgp)
    if isinstance(likelihood, MulticlassLikelihood) and hsgp is not None:
        raise ValueError("hsgp serves a target with two classes or ordered ones (ordinal likelihoods); for "
                         "several classes use inducing= (FITC) or the dense prior")
    if lengthscale_spread is not None:
        _check_spread(lengthscale_spread, per_class, isinstance(likelihood, MulticlassLikelihood))
    if isinstance(likelihood, MulticlassLikelihood):
        classes = as_class_codes(y, n_classes=likelihood.n_classes, warn=False)[1]
        with pm.Model(coords={"feature": names}) as model:
            if not (per_class is None or per_class is True or per_class is False or per_class == "amplitudes"):
                raise ValueError(f"per_class must be True, False or 'amplitudes', got {per_class!r}")
            shared = {False: True, "amplitudes": "lengthscales"}.get(per_class, False)
            cov = ard_kernels(d, classes, prior={k: pairs[k] for k in pairs if k != "log_a"}, bias=bias,
                              shared=shared, feature_names=names, log_v0_start=LOG_V0_START)
            if lengthscale_spread is not None:
                pm.Potential("log_w_shrinkage",
                             lengthscale_shrinkage(model["log_w"], lengthscale_spread, pairs["log_w"]))
            gp = APPROXIMATIONS[approximation](cov_func=cov, likelihood=likelihood, approx=approx, **solver_options)
            if inducing is None:
                gp.marginal_likelihood(name, X=X, y=y)
            else:  # multi-class FITC: marginal_likelihood takes Xu where the classifier supports it
                gp.marginal_likelihood(name, X=X, y=y, Xu=_inducing_inputs(inducing, X, learn_inducing))
        return model, gp
    if per_class is not None:
        raise ValueError(f"per_class={per_class!r} serves multi-class likelihoods (Softmax, MultinomialProbit); "
                         f"{type(likelihood).__name__} has one latent function")
    if kernel not in BINARY_KERNELS:
        raise ValueError(f"kernel must be one of {BINARY_KERNELS}, got {kernel!r}")
    with pm.Model(coords={"feature": names}) as model:
        cov = _binary_kernel(d, kernel, linear, bias, pairs, spectral=hsgp is not None)
        gp = APPROXIMATIONS[approximation](cov_func=cov, likelihood=likelihood, approx=approx, **(hsgp or {}),
                                           **solver_options)
        if inducing is None:
            gp.marginal_likelihood(name, X=X, y=y)
        else:
            gp.marginal_likelihood(name, X=X, y=y, Xu=_inducing_inputs(inducing, X, learn_inducing))
    return model, gp


def lengthscale_shrinkage(log_w, spread, prior):
    r"""Log density of the hierarchical prior on per-class log inverse squared lengthscales,
    less the independent N(mean, sd^2) that ``ard_kernels`` puts on each (``ard_classifier``'s
    ``lengthscale_spread``): log w_kj ~ N(mu_j, tau^2), mu_j ~ N(mean, sd^2), each input's
    mu_j integrated out, so that the column log w_.j ~ N(mean 1, tau^2 I + sd^2 1 1^T) over
    the c classes; by Sherman-Morrison its quadratic form is
    (|x|^2 - sd^2 (1^T x)^2 / (tau^2 + c sd^2)) / tau^2 and its log determinant
    c log tau^2 + log(1 + c sd^2 / tau^2), x = log w_.j - mean.

    Parameters
    ----------
    log_w : (c, d) tensor, the classes' log inverse squared lengthscales.
    spread : tau > 0.
    prior : (mean, sd) of the log-hyperparameters' Normal prior.
    """
    mean, sd = prior
    c = pt.cast(log_w.shape[0], "float64")
    s2, t2 = float(sd) ** 2, float(spread) ** 2
    x = log_w - mean
    square = pt.sum(x ** 2, axis=0)
    quad = (square - s2 * pt.sum(x, axis=0) ** 2 / (t2 + c * s2)) / t2
    log_det = c * np.log(t2) + pt.log1p(c * s2 / t2)
    return -0.5 * pt.sum(quad + log_det - square / s2 - c * np.log(s2))


def _check_spread(spread, per_class, several):
    """``ard_classifier``'s ``lengthscale_spread``: a finite number > 0, with one ARD kernel per class."""
    if isinstance(spread, bool) or not isinstance(spread, (int, float, np.number)) or not (
            np.isfinite(spread) and spread > 0):
        raise ValueError(f"lengthscale_spread must be a finite number > 0 (tau of log w_kj ~ N(mu_j, tau^2)), "
                         f"got {spread!r}")
    if not several or per_class not in (None, True):
        raise ValueError("lengthscale_spread shrinks the classes' own lengthscales: it needs several classes and "
                         f"one ARD kernel per class (per_class=True), got per_class={per_class!r}")


# Above this many training rows ``ard_classifier`` (``inducing="auto"``) builds a FITC prior.
# Dense NUTS, 2 x (500 + 500) draws at about 7 gradient evaluations a draw, is some 7,000
# evaluations per core with the chains in parallel; a warm dense EP evaluation costs about
# 2x one Cholesky plus its inverse (``benchmarks/results/dense_floor.md``), 17 ms at
# n = 1,000 on a quiet core (Cholesky 9.3 ms there), growing as n^3: 1,200 rows are about
# 3.5 minutes of sampling, 2,000 rows about 16.
DENSE_MAX_ROWS = 1200
# FITC's m from n: 2 sqrt(n), clipped to [INDUCING_MIN, INDUCING_MAX] (O(n m^2) an evaluation).
INDUCING_MIN, INDUCING_MAX = 100, 300


def _is_auto(inducing):
    if isinstance(inducing, str) and inducing != "auto":
        raise ValueError(f"inducing must be 'auto', None, a number m or an (m, d) array, got {inducing!r}")
    return isinstance(inducing, str)


def inducing_count(n):
    """FITC's number of inducing inputs for n training rows: round(2 sqrt(n)) clipped to
    [``INDUCING_MIN``, ``INDUCING_MAX``] and at most n (100 at n = 2,500, 200 at 10,000,
    300 from 22,500 rows)."""
    return int(min(n, max(INDUCING_MIN, min(INDUCING_MAX, round(2.0 * np.sqrt(n))))))


def auto_inducing(n, approximation="ep"):
    """``ard_classifier``'s ``inducing="auto"``: None (the dense prior) for at most
    ``DENSE_MAX_ROWS`` rows, else ``inducing_count(n)``; always None for approximations
    without FITC (mean field, ADF).

    Override with ``inducing=None`` (dense whatever n) or ``inducing=m``."""
    if approximation not in APPROXIMATIONS or "fitc" not in registry.get(approximation).structures:
        return None
    return inducing_count(n) if n > DENSE_MAX_ROWS else None

# ``ard_classifier``'s ``kernel=`` choices for one latent function
BINARY_KERNELS = ("se", "matern52")


def _prior_names(bias, linear):
    """``ard_classifier``'s log-hyperparameters, the names a ``prior`` dict may give."""
    return ("log_w", "log_v0") + (("log_v1",) if bias else ()) + (("log_a",) if linear else ())


def _log_v0(pairs, **dims):
    """The model's ``log_v0``, N(``pairs["log_v0"]``), starting at ``LOG_V0_START`` clipped to
    within one sd of its mean (see ``ard_classifier``'s docstring)."""
    mu, sd = pairs["log_v0"]
    return pm.Normal("log_v0", mu, sd, initval=float(np.clip(LOG_V0_START, mu - sd, mu + sd)), **dims)


def _binary_kernel(d, kernel, linear, bias, pairs, spectral=False):
    """The binary model's covariance and its variables, in the model on the context stack:
    v0 k_w(x, x') (+ v1) (+ sum_m a_m x_m x'_m), each log-hyperparameter N(``pairs[name]``)
    (``ard_classifier``'s ``kernel`` and ``linear``). ``spectral``: a kernel with a spectral
    density (``ard_classifier``'s ``hsgp``): v0 k_w alone, k_w ``pm.gp.cov.ExpQuad`` for "se"."""
    log_w = pm.Normal("log_w", *pairs["log_w"], dims="feature")
    log_v0 = _log_v0(pairs)
    if spectral:
        base = pm.gp.cov.ExpQuad if kernel == "se" else pm.gp.cov.Matern52
        return pt.exp(log_v0) * base(d, ls=pt.exp(-0.5 * log_w))
    v1 = pt.exp(pm.Normal("log_v1", *pairs["log_v1"])) if bias else 0.0
    if kernel == "se":
        cov = MixedARD(d, v0=pt.exp(log_v0), l=pt.exp(log_w), v1=v1)  # = v0 ExpQuad(ls=w^-1/2) + v1
    else:
        cov = MixedARD(d, v0=pt.exp(log_v0), l=pt.exp(log_w), v1=v1, form="matern52")  # = v0 Matern52(ls=w^-1/2) + v1
    if linear:
        root_a = pt.exp(0.5 * pm.Normal("log_a", *pairs["log_a"], dims="feature"))
        cov = cov + pm.gp.cov.WarpedInput(d, pm.gp.cov.Linear(d, c=0.0), lambda X, s: X * s, args=(root_a,))
    return cov


def _ordinal_classifier(X, y, likelihood_class, approximation, pairs, names, bias, name, inducing, learn_inducing,
                        levels, solver_options, hsgp=None):
    """``ard_classifier``'s ordinal model: the binary model's ARD kernel and free ordered cutpoints
    (with ``hsgp``, the HSGP options: the ARD ExpQuad kernel without v1, as ``_binary_kernel``);
    ``pairs``: each log-hyperparameter's (mean, sd) (``kernels.prior_pairs``)."""
    n_levels = _ordinal_level_count(y, levels)
    codes, classes = as_ordinal_codes(y, n_levels, levels)  # checked before the model is built
    with pm.Model(coords={"feature": names, "cutpoint": [f"{a}|{b}" for a, b in zip(classes[:-1], classes[1:])]}) \
            as model:
        log_w = pm.Normal("log_w", *pairs["log_w"], dims="feature")
        log_v0 = _log_v0(pairs)
        v1 = pt.exp(pm.Normal("log_v1", *pairs["log_v1"])) if bias and hsgp is None else 0.0
        cut = pm.Normal("cutpoints", 0.0, 3.0, dims="cutpoint", transform=pm.distributions.transforms.ordered,
                        initval=np.linspace(-1.0, 1.0, n_levels - 1))
        if hsgp is not None:  # a kernel with a spectral density, no v1 (the cutpoints carry the offset)
            cov = pt.exp(log_v0) * pm.gp.cov.ExpQuad(X.shape[1], ls=pt.exp(-0.5 * log_w))
            extra = {"approx": "HSGP", **hsgp}
        else:
            cov = MixedARD(X.shape[1], v0=pt.exp(log_v0), l=pt.exp(log_w), v1=v1)
            extra = {"approx": "FITC"} if inducing is not None else {}
        gp = APPROXIMATIONS[approximation](cov_func=cov, likelihood=likelihood_class(cut), **extra, **solver_options)
        fitc = {"Xu": _inducing_inputs(inducing, X, learn_inducing)} if inducing is not None else {}
        gp.marginal_likelihood(name, X=X, y=y, levels=levels, **fitc)
    return model, gp


# ``ard_classifier``'s ``hsgp``: at most this many input dimensions (m^d basis functions)
HSGP_MAX_DIMS = 3


def _hsgp_options(hsgp, X, inducing, linear):
    """``ard_classifier``'s ``hsgp`` (m, c) as the GP classes' HSGP options {m: [m] * d, c},
    checked: ValueError naming the problem (not a pair, m not a positive integer, c not a
    number above 1, more than ``HSGP_MAX_DIMS`` input columns, inducing inputs, ``linear``)."""
    try:
        m, c = hsgp
    except (TypeError, ValueError):
        raise ValueError(f"hsgp must be a pair (m, c): m basis functions per input dimension and the box factor c, "
                         f"got {hsgp!r}") from None
    if isinstance(m, bool) or not isinstance(m, (int, np.integer)) or m < 1:
        raise ValueError(f"hsgp's m must be a positive integer (basis functions per input dimension), got {m!r}")
    if isinstance(c, bool) or not isinstance(c, (int, float, np.number)) or not np.isfinite(c) or c <= 1.0:
        raise ValueError(f"hsgp's c must be a number above 1 (the box is c times the inputs' half-range; "
                         f"pm.gp.HSGP recommends c >= 1.2), got {c!r}")
    d = X.shape[1]
    if d > HSGP_MAX_DIMS:
        raise ValueError(f"hsgp serves inputs of at most {HSGP_MAX_DIMS} dimensions (m^d basis functions), X has "
                         f"{d} columns: choose the spatial or temporal columns, or use inducing= (FITC)")
    if not (inducing is None or (isinstance(inducing, str) and inducing == "auto")):
        raise ValueError("give either hsgp= (the basis-function prior) or inducing= (FITC), not both")
    if linear:
        raise ValueError("hsgp needs a kernel with a spectral density: linear=True adds a linear kernel, which has "
                         "none")
    return {"m": [int(m)] * d, "c": float(c)}


def _ordinal_level_count(y, levels):
    """K: the levels given, an ordered categorical's categories, or max + 1 of integer labels."""
    if levels is not None:
        return len(levels)
    if getattr(getattr(y, "dtype", None), "name", None) == "category":
        return len((y.cat if hasattr(y, "cat") else y).categories)
    arr = np.asarray(y.to_numpy() if hasattr(y, "to_numpy") else y)
    if np.issubdtype(arr.dtype, np.number) and arr.size and np.all(np.isfinite(arr)):
        return int(np.max(arr)) + 1
    return 0  # as_ordinal_codes then names what is missing


def has_several_classes(y):
    """Whether labels ``y`` hold more than two distinct values (a pandas categorical: categories)."""
    if getattr(getattr(y, "dtype", None), "name", None) == "category":
        cat = y.cat if hasattr(y, "cat") else y
        return len(cat.categories) > 2
    arr = np.asarray(y.to_numpy() if hasattr(y, "to_numpy") else y)
    if arr.dtype == object:
        arr = arr.astype(str)
    return arr.ndim >= 1 and len(np.unique(arr)) > 2


def _inducing_inputs(inducing, X, learn=False):
    """Xu from a count m (``kmeans_centres`` on X, seeded) or an array (checked by
    ``marginal_likelihood``); with ``learn``, a free variable ``Xu`` of the model on the
    context stack starting there (``ard_classifier``'s ``learn_inducing``)."""
    if np.ndim(inducing) == 0 and (isinstance(inducing, bool) or not float(inducing).is_integer()
                                   or not 1 <= int(inducing) <= X.shape[0]):
        raise ValueError(f"inducing must be a number of inducing inputs in [1, n = {X.shape[0]}] "
                         f"or an (m, d) array, got {inducing!r}")
    Xu = kmeans_centres(int(inducing), X, seed=0) if np.ndim(inducing) == 0 else inducing
    if not learn:
        return Xu
    Xu = np.asarray(Xu, dtype=float)
    if Xu.ndim != 2 or Xu.shape[1] != X.shape[1] or not np.all(np.isfinite(Xu)):
        raise ValueError(f"learn_inducing needs an (m, {X.shape[1]}) array of finite starting inducing inputs "
                         f"(or a count m), got shape {Xu.shape}")
    model = pm.modelcontext(None)
    model.add_coord("inducing", np.arange(Xu.shape[0]))
    # flat: the inducing inputs are a device of the approximation, not a quantity with a prior
    return pm.Flat("Xu", dims=("inducing", "feature"), initval=Xu)


# k-means for the inducing inputs: Lloyd's iterations on a seeded subsample of at most
# KMEANS_ROWS rows (KMEANS_ROWS / m rows per centre at the least), at most KMEANS_ITER of them
KMEANS_ROWS = 50_000
KMEANS_ITER = 30


def kmeans_centres(m, X, seed=0, rows=KMEANS_ROWS, max_iter=KMEANS_ITER):
    """m cluster centres of the rows of X: k-means with k-means++ seeding.

    Arthur & Vassilvitskii (2007), "k-means++: the advantages of careful seeding": the
    first centre is a row drawn uniformly, each next one a row drawn with probability
    proportional to its squared distance to the nearest centre so far (their D^2
    weighting); then Lloyd's iterations (each row to its nearest centre, each centre to
    the mean of its rows; a centre left without rows stays where it is) until no row
    changes cluster or ``max_iter``. Distances are taken on the columns scaled to unit
    standard deviation (as ``pm.gp.util.kmeans_inducing_points`` does; a constant column
    is left unscaled), and only on a seeded subsample of ``rows`` rows where X has more:
    one seeding and at most ``max_iter`` passes of O(rows m d), where scipy's ``kmeans``
    behind pymc's helper keeps the best of 20 randomly started runs over every row.

    Returns
    -------
    (m, d) array of centres, in X's units.
    """
    X = np.asarray(X, dtype=float)
    rng = np.random.default_rng(seed)
    if X.shape[0] > rows:
        X = X[np.sort(rng.choice(X.shape[0], rows, replace=False))]
    scale = np.std(X, axis=0)
    scale[scale <= 1e-6] = 1.0
    Z = X / scale
    centres = _kmeans_pp_seeds(Z, m, rng)
    labels = None
    for _ in range(max_iter):
        new = _nearest(Z, centres)
        if labels is not None and np.array_equal(new, labels):
            break
        labels = new
        counts = np.bincount(labels, minlength=m)
        sums = np.column_stack([np.bincount(labels, weights=z, minlength=m) for z in Z.T])
        filled = counts > 0
        centres[filled] = sums[filled] / counts[filled, None]
    return centres * scale


def _nearest(Z, C):
    """The index of each row's nearest centre: argmin_k ||c_k||^2 - 2 z_i . c_k (||z_i||^2
    is the same for every k)."""
    scores = Z @ (-2.0 * C.T)
    scores += np.sum(C**2, axis=1)
    return np.argmin(scores, axis=1)


def _squared_distances(Z, C):
    """||z_i - c_k||^2 for every row of Z and C (one matrix product)."""
    d2 = np.sum(Z**2, axis=1)[:, None] - 2.0 * (Z @ C.T) + np.sum(C**2, axis=1)[None, :]
    return np.maximum(d2, 0.0)


def _kmeans_pp_seeds(Z, m, rng):
    """k-means++ seeding (``kmeans_centres``): m rows of Z, each next drawn with probability
    proportional to its squared distance to the nearest one drawn so far (uniformly among
    the rows not yet drawn where every row coincides with a centre)."""
    centres = np.empty((m, Z.shape[1]))
    centres[0] = Z[rng.integers(Z.shape[0])]
    d2 = _squared_distances(Z, centres[:1])[:, 0]
    for k in range(1, m):
        total = d2.sum()
        i = rng.choice(Z.shape[0], p=d2 / total) if total > 0 else rng.integers(Z.shape[0])
        centres[k] = Z[i]
        d2 = np.minimum(d2, _squared_distances(Z, centres[k:k + 1])[:, 0])
    return centres


def classification_metrics(p, y):
    """Test errors (threshold 1/2) and mean log predictive probability of labels y."""
    y = np.asarray(y)
    p = np.clip(np.asarray(p, dtype=float), 1e-300, 1 - 1e-16)
    positive = y > 0
    errors = int(np.sum((p > 0.5) != positive))
    mlp = float(np.mean(np.log(np.where(positive, p, 1.0 - p))))
    return {"errors": errors, "n": int(len(y)), "error_rate": errors / len(y), "mean_log_pred": mlp}


def confusion_matrix(classes, y_true, y_pred):
    """Counts (c, c): rows are true classes, columns predicted, in the order of ``classes``
    (true labels outside ``classes`` are left out)."""
    index = {c: k for k, c in enumerate(classes)}
    out = np.zeros((len(classes), len(classes)), dtype=int)
    for t, p in zip(y_true, y_pred):
        if t in index:
            out[index[t], index[p]] += 1
    return out


def multiclass_report(p, classes, y):
    """The test-set lines of a multi-class report (Markdown) from probabilities ``p`` (n, c),
    columns in the order of ``classes``, and the true labels ``y``: errors (the most probable
    class), mean log predictive probability of the true class, and the confusion matrix."""
    classes = [str(c) for c in classes]
    pred = np.array(classes)[np.argmax(p, axis=1)]
    y = np.asarray(y).astype(str)
    unknown = sorted(str(v) for v in set(y) - set(classes))
    if unknown:
        return [f"- test labels not seen in training: {unknown} (counted as errors)"]
    errors = int(np.sum(pred != y))
    col = {c: k for k, c in enumerate(classes)}
    p_true = np.clip(p[np.arange(len(y)), [col[c] for c in y]], 1e-300, 1.0)
    cm = confusion_matrix(classes, y, pred)
    lines = [
        f"- test errors: {errors} / {len(y)} ({100 * errors / len(y):.1f} %)",
        f"- mean test log predictive: {float(np.mean(np.log(p_true))):.4f}",
        "",
        "Confusion matrix (rows: true class, columns: predicted):",
        "",
        "| true \\ predicted | " + " | ".join(classes) + " |",
        "|---" * (len(classes) + 1) + "|",
    ]
    return lines + [f"| {c} | " + " | ".join(str(v) for v in cm[k]) + " |" for k, c in enumerate(classes)]


def label_noise_classifier(X, y, *, epsilon=None, lengthscales="multiple", latent_noise=True,
                           discrete=(), prior=None, name="y", **solver_options):
    r"""Build Kim & Ghahramani's model: their kernel (eq. 10) with the step likelihood and EP.

    .. math::

        k(x, x') = v_0 \exp\Big(-\tfrac12 \sum_m l_m d_m\Big) + v_1 + v_2 \delta,
        \qquad p(y | f) = \epsilon + (1 - 2\epsilon) H(y f)

    Parameters
    ----------
    epsilon : a fixed label-noise rate, or None for a free ``epsilon ~ Uniform(0, 0.5)``
        (``fit(method="em-ep")`` then updates it in closed form).
    lengthscales : "multiple" (one l_m per input, ARD) or "single" (one shared).
    latent_noise : True for a free v2 ("soft" boundary), or a fixed value ("hard": e.g. 1e-6).
    discrete : columns compared by Hamming distance (``kernels.MixedARD``).
    prior : {"log_v0", "log_v1", "log_v2", "log_l"} -> (mean, sd) of Normal priors on the
        logs, N(0, 3^2) where not given; the means are also the default starting point.

    Returns
    -------
    (model, gp)

    Examples
    --------
    >>> import pymc_gpc
    >>> from pymc_gpc.gp.models import label_noise_classifier
    >>> from pymc_gpc.datasets import load
    >>> pima = load("pima")
    >>> model, gp = label_noise_classifier(pima.X_train, pima.y_train)
    >>> result = pymc_gpc.fit(model, method="em-ep", progressbar=False)  # doctest: +SKIP
    """
    from ..likelihoods.binary import StepLabelNoise

    if lengthscales not in ("multiple", "single"):
        raise ValueError(f"lengthscales must be 'multiple' or 'single', got {lengthscales!r}")
    X = check_inputs(X)
    d = X.shape[1]
    prior = {"log_v0": (0.0, 3.0), "log_v1": (0.0, 3.0), "log_v2": (0.0, 3.0), "log_l": (0.0, 3.0), **(prior or {})}
    with pm.Model() as model:
        log_v0 = pm.Normal("log_v0", *prior["log_v0"])
        log_v1 = pm.Normal("log_v1", *prior["log_v1"])
        v2 = pt.exp(pm.Normal("log_v2", *prior["log_v2"])) if latent_noise is True else latent_noise
        log_l = pm.Normal("log_l", *prior["log_l"], shape=d if lengthscales == "multiple" else ())
        eps = pm.Uniform("epsilon", 0, 0.5) if epsilon is None else epsilon
        cov = MixedARD(d, v0=pt.exp(log_v0), v1=pt.exp(log_v1), v2=v2, l=pt.exp(log_l), discrete=discrete)
        gp = MarginalEP(cov_func=cov, likelihood=StepLabelNoise(eps), **solver_options)
        gp.marginal_likelihood(name, X=X, y=y)
    return model, gp
