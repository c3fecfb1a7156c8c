r"""scikit-learn estimators: the package's GP classifiers in pipelines, grid search and
cross-validation (the user guide's scikit-learn page).

``GaussianProcessClassifier`` and ``GaussianProcessOrdinalClassifier`` follow
scikit-learn's conventions (parameters checked in ``fit``, fitted attributes ending in
``_``). Each ``fit`` builds the package's model (``pymc_gpc.ard_classifier``, or one around
a given kernel) and estimates its hyperparameters with ``pymc_gpc.fit`` or integrates over
them with ``pymc_gpc.sample``; the probability of class k is

.. math::

    p(y_* = k \mid x_*, X, y) \approx \int p(y_* = k \mid f_*)\, q(f_* \mid x_*, X, y, \theta)\, df_*

at the point estimate, or averaged over posterior draws (Barber & Williams 1997, eq. 9).
Importing this module needs scikit-learn (``pip install "pymc-gpc[sklearn]"``).
"""

import numpy as np

try:
    from sklearn.base import BaseEstimator, ClassifierMixin
    from sklearn.utils import check_random_state
    from sklearn.utils.multiclass import check_classification_targets
    from sklearn.utils.validation import check_is_fitted, validate_data
except ImportError as err:  # scikit-learn missing, or older than 1.6 (no validate_data / __sklearn_tags__)
    raise ImportError("pymc_gpc.sklearn needs scikit-learn >= 1.6: pip install 'pymc-gpc[sklearn]' "
                      f"({err})") from err

import pymc as pm

from . import likelihoods
from .gp.marginal import MarginalEP, MarginalLaplace
from .estimation.integration import predict as integrated_predict
from .estimation.sampling import sample as _sample_hyperparameters
from .gp.models import ard_classifier, kmeans_centres, multiclass_likelihood
from .estimation.point_estimates import fit as _fit_hyperparameters

__all__ = ["GaussianProcessClassifier", "GaussianProcessOrdinalClassifier"]

# ``method=`` names: point estimates through ``pymc_gpc.fit``, and integration over the
# hyperparameters through ``pymc_gpc.sample`` with these extra keywords. ``"elbo"`` (the SVGP-type
# bound's MAP) serves several classes under softmax Laplace with inducing inputs only (``_check_params``).
POINT_METHODS = ("map", "type2", "elbo")
SAMPLING_METHODS = {"nuts": {}, "ccd": {"method": "ccd"}, "grid": {"method": "grid"}}
INTEGRATION_METHODS = ("ccd", "grid")  # deterministic: a weighted design, no tuning or parallel chains
METHODS = POINT_METHODS + tuple(SAMPLING_METHODS)

APPROXIMATIONS = {"ep": MarginalEP, "laplace": MarginalLaplace}
KERNELS = ("se", "matern52")
BINARY_LIKELIHOODS = {"probit": likelihoods.Probit, "logistic": likelihoods.Logistic}
ORDINAL_LINKS = {"probit": (likelihoods.OrderedProbit, likelihoods.Probit),
                 "logit": (likelihoods.OrderedLogit, likelihoods.Logistic)}


class _GPClassifierBase(ClassifierMixin, BaseEstimator):
    """What both estimators share: validation, estimation, prediction and pickling.

    Subclasses define ``_encode_labels`` (labels to codes 0..c-1 and ``classes_``) and
    ``_likelihood_for`` (the likelihood for c classes, or None for the multi-class default).
    """

    def fit(self, X, y):
        """Build the model on (X, y) and estimate or integrate over its hyperparameters.

        Parameters
        ----------
        X : (n, d) array-like of numbers.
        y : (n,) labels: integers, strings, booleans or a pandas categorical.

        Returns
        -------
        self

        Raises
        ------
        ValueError
            For a bad parameter, inputs that are not finite numbers, fewer than two
            classes, or a label type scikit-learn does not classify (continuous values).
        """
        self._check_params()
        categories = _categories(y)
        X, y = validate_data(self, X, y, dtype=np.float64)
        check_classification_targets(y)
        codes = self._encode_labels(y, categories)
        if len(self.classes_) < 2:
            raise ValueError(f"{type(self).__name__} needs at least two classes; y holds one class "
                             f"({self.classes_.tolist()})")
        if self.method == "elbo" and len(self.classes_) < 3:
            raise ValueError(f"method='elbo' is a fit of several classes; y holds two ({self.classes_.tolist()}): "
                             "use method='map'")
        self._X_train, self._codes = X, codes
        self._model, self._gp = self._build(X, codes)
        self._estimate()
        return self

    @property
    def model_(self):
        """The fitted ``pm.Model`` (rebuilt from the training data after unpickling)."""
        self._ensure_model()
        return self._model

    @property
    def gp_(self):
        """The fitted GP (``MarginalEP`` / ``MarginalLaplace`` or their multi-class variants)."""
        self._ensure_model()
        return self._gp

    def predict_proba(self, X):
        """Class probabilities (n*, c), columns in the order of ``classes_`` (module docstring)."""
        check_is_fitted(self, "classes_")
        X = validate_data(self, X, reset=False, dtype=np.float64)
        self._ensure_model()
        if self.method in POINT_METHODS:  # from the point, not the FitResult's solver state: the same
            p = self._gp.predict(X, point=self.point_, progressbar=False)  # numbers after unpickling
        elif self.method in INTEGRATION_METHODS:  # the design's exact weighted average
            p = integrated_predict(self._gp, X, self.idata_, model=self._model)
        else:
            p = self._gp.predict(X, idata=self.idata_, max_draws=self.max_draws, progressbar=bool(self.verbose))
        p = np.asarray(p, dtype=float)
        if p.ndim == 1:
            p = np.column_stack([1.0 - p, p])
        if p.shape[1] != len(self.classes_):  # the binary fallback of a two-level ordinal model
            raise RuntimeError(f"the GP gave {p.shape[1]} columns for {len(self.classes_)} classes")
        return p

    def predict_log_proba(self, X):
        """The logarithm of ``predict_proba``."""
        with np.errstate(divide="ignore"):
            return np.log(self.predict_proba(X))

    def predict(self, X):
        """The most probable class of each row of X (labels from ``classes_``)."""
        p = self.predict_proba(X)  # first: it raises NotFittedError before classes_ exists
        return self.classes_[np.argmax(p, axis=1)]

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.non_deterministic = self.method in SAMPLING_METHODS
        return tags

    # -- estimation ---------------------------------------------------------------------

    def _estimate(self):
        """``fit_result_`` and ``point_`` (point methods) or ``idata_`` (sampling methods)."""
        self.fit_result_ = self.idata_ = self.point_ = None
        if self.method in POINT_METHODS:
            self.fit_result_ = _fit_hyperparameters(self._model, method=self.method, maxiter=self.maxiter,
                                                    progressbar=bool(self.verbose))
            self.point_ = {k: np.asarray(v) for k, v in self.fit_result_.point.items()}
            return
        seed = check_random_state(self.random_state).randint(np.iinfo(np.int32).max)
        nuts = {} if self.method in INTEGRATION_METHODS else {"tune": self.tune, "cores": self.n_jobs}
        self.idata_ = _sample_hyperparameters(
            model=self._model, draws=self.draws, chains=self.chains, random_seed=seed,
            progressbar=bool(self.verbose), **nuts, **SAMPLING_METHODS[self.method])

    def _keep_params(self, params):
        """The constructor's arguments ``params`` (its ``locals()``) kept unchanged as attributes
        of the same names, scikit-learn's convention (``get_params`` reads them back; checks
        wait for ``fit``)."""
        for name, value in params.items():
            if name != "self":
                setattr(self, name, value)

    _methods = METHODS

    def _check_params(self):
        """ValueError for a parameter no model takes, before any data is touched."""
        _one_of("method", self.method, self._methods)
        _one_of("approximation", self.approximation, tuple(APPROXIMATIONS))
        laplace = APPROXIMATIONS[self.approximation] is MarginalLaplace
        if self.method == "elbo" and not (laplace and self.inducing is not None):
            raise ValueError("method='elbo' (the SVGP-type bound, pymc_gpc.fit's) serves several classes under the "
                             "softmax with inducing inputs: set approximation='laplace' and inducing=m, got "
                             f"approximation={self.approximation!r}, inducing={self.inducing!r}")
        if not (callable(self.kernel) or self.kernel in KERNELS):
            raise ValueError(f"kernel must be one of {KERNELS} or a callable taking the input dimension "
                             f"and returning a pm.gp.cov covariance, got {self.kernel!r}")
        for name in ("draws", "tune", "chains", "n_jobs"):
            _positive_int(name, getattr(self, name))
        for name in ("max_draws", "maxiter", "inducing"):  # None: every draw / the default / dense
            if getattr(self, name) is not None:
                _positive_int(name, getattr(self, name))
        if callable(self.kernel) and not _is_default_prior(self.prior):
            raise ValueError(f"prior={self.prior!r} sets the named kernels' priors; a callable kernel sets the "
                             "priors of the variables it creates: leave prior at its default")

    # -- the model ----------------------------------------------------------------------

    def _build(self, X, codes):
        """(model, gp) for the training data: ``ard_classifier`` for the named kernels,
        the same structure around ``kernel(d)`` for a callable."""
        n_classes = len(self.classes_)
        likelihood = self._likelihood_for(n_classes)
        inducing = None if self.inducing is None else min(int(self.inducing), X.shape[0])
        names = _feature_names(self, X.shape[1])
        if callable(self.kernel):
            return _custom_model(self.kernel, X, codes, n_classes, likelihood, self.approximation, inducing,
                                 getattr(self, "per_class_kernels", True), names)
        options = {"per_class": self.per_class_kernels} if getattr(self, "per_class_kernels", None) is not None \
            and n_classes > 2 and not _is_ordinal(likelihood) else {}
        if n_classes > 2 and not _is_ordinal(likelihood) and self.kernel != "se":
            raise ValueError(f"kernel={self.kernel!r} serves two classes; with {n_classes} classes the named "
                             "kernel is the ARD squared exponential 'se' (or give a callable)")
        levels = {"levels": list(range(n_classes))} if _is_ordinal(likelihood) else {}
        kernel = {"kernel": self.kernel} if n_classes == 2 else {}
        return ard_classifier(X, codes, approximation=self.approximation, likelihood=likelihood,
                              prior=self.prior, feature_names=names, inducing=inducing, **kernel, **levels,
                              **options)

    def _ensure_model(self):
        """Rebuild the model and GP after unpickling (they are not pickled: ``__getstate__``)."""
        if getattr(self, "_model", None) is None and hasattr(self, "_X_train"):
            self._model, self._gp = self._build(self._X_train, self._codes)

    def __getstate__(self):
        """The estimator without its model, GP and fit result (compiled functions do not
        pickle); ``point_`` and the training data rebuild them, ``idata_`` is kept."""
        state = dict(super().__getstate__())
        for key in ("_model", "_gp", "fit_result_"):
            if key in state:
                state[key] = None
        return state


class GaussianProcessClassifier(_GPClassifierBase):
    """GP classification with EP or Laplace, for two classes or more.

    Parameters
    ----------
    kernel : "se" (ARD squared exponential plus a constant, Barber & Williams 1997 eq. 2),
        "matern52" (ARD Matern 5/2, Rasmussen & Williams eq. 4.17; two classes), or a
        callable ``kernel(d)`` returning a ``pm.gp.cov`` covariance whose hyperparameters
        are random variables it creates (it runs inside the model; with several classes
        and ``per_class_kernels`` once per class, in a sub-model named ``class<k>``).
    approximation : "ep" or "laplace". Several classes: nested EP with the multinomial
        probit, or Laplace with the softmax.
    likelihood : two classes: "probit" (default) or "logistic". Several classes take the
        approximation's likelihood: leave it None.
    method : "map" (MAP-II, the default), "type2" (type-II maximum likelihood), "elbo" (MAP
        of the SVGP-type bound instead of the evidence, ``pymc_gpc.fit``'s: several classes with
        ``approximation="laplace"`` and ``inducing``), "nuts" (NUTS over the hyperparameters;
        predictions averaged over the draws), or "ccd" / "grid" (deterministic integration
        over the hyperparameters, ``pymc_gpc.sample``'s ``method``; predictions averaged
        exactly with the design's weights).
    inducing : None (dense) or a number m of inducing inputs (FITC, k-means placed).
    per_class_kernels : several classes: one kernel per class (True) or one shared.
    prior : (mean, sd) of the Normal prior on every log-hyperparameter, or a dict of such
        pairs by group, the others keeping (-3, 3) (``ard_classifier``'s ``prior``, e.g.
        ``{"log_v0": (0.0, 1.0)}``). For the named kernels: a callable kernel sets the
        priors of the variables it creates (any other ``prior`` is then a ValueError).
    draws, tune, chains, n_jobs : NUTS settings (``n_jobs`` chains in parallel).
    max_draws : NUTS: at most this many posterior draws (evenly thinned) in ``predict_proba``; None: all.
    maxiter : point methods: optimiser iterations (None: ``pymc_gpc.fit``'s default).
    random_state : seed, ``RandomState`` or None for the sampler.
    verbose : progress bars (off by default).

    Attributes
    ----------
    classes_, n_features_in_, feature_names_in_ : scikit-learn's.
    model_, gp_ : the PyMC model and the GP.
    fit_result_, point_ : point methods: ``pymc_gpc.FitResult`` and its point.
    idata_ : NUTS: the ``arviz.InferenceData``.
    """

    def __init__(self, kernel="se", approximation="ep", likelihood=None, method="map", inducing=None,
                 per_class_kernels=True, prior=(-3.0, 3.0), draws=500, tune=500, chains=2, n_jobs=1,
                 max_draws=100, maxiter=None, random_state=None, verbose=False):
        self._keep_params(locals())

    def _check_params(self):
        super()._check_params()
        if self.likelihood is not None:
            _one_of("likelihood", self.likelihood, tuple(BINARY_LIKELIHOODS))

    def _encode_labels(self, y, categories):
        """Sorted labels (scikit-learn's order) as ``classes_``; codes 0..c-1."""
        self.classes_, codes = np.unique(y, return_inverse=True)
        return codes

    def _likelihood_for(self, n_classes):
        if n_classes == 2:
            return BINARY_LIKELIHOODS[self.likelihood or "probit"]()
        if self.likelihood is not None:
            raise ValueError(f"likelihood={self.likelihood!r} names a binary likelihood, but y holds {n_classes} "
                             f"classes: leave it None (approximation='ep': multinomial probit; 'laplace': softmax)")
        return multiclass_likelihood(self.approximation)


class GaussianProcessOrdinalClassifier(_GPClassifierBase):
    r"""GP classification of ordered classes: ordered probit or logit (Chu & Ghahramani 2005).

    .. math::

        p(y = k \mid f) = F(b_k - f) - F(b_{k-1} - f)

    with cutpoints :math:`b_1 < \dots < b_{K-1}` estimated with the kernel's
    hyperparameters (:math:`F` the normal or logistic CDF). Two levels reduce to the binary
    model with that link (the kernel's constant term playing the cutpoint). The other
    parameters (``kernel``, ``approximation``, ``method``, ``inducing``, ``prior``,
    ``draws``, ``tune``, ``chains``, ``n_jobs``, ``max_draws``, ``maxiter``,
    ``random_state``, ``verbose``) are as ``GaussianProcessClassifier``'s, but for
    ``method="elbo"``, which serves the softmax only.

    Parameters
    ----------
    classes : the levels from lowest to highest (None: an ordered pandas categorical's
        categories, else the sorted labels). A level need not occur in y.
    link : "probit" or "logit".
    """

    _methods = tuple(m for m in METHODS if m != "elbo")

    def __init__(self, classes=None, link="probit", kernel="se", approximation="ep", method="map", inducing=None,
                 prior=(-3.0, 3.0), draws=500, tune=500, chains=2, n_jobs=1, max_draws=100, maxiter=None,
                 random_state=None, verbose=False):
        self._keep_params(locals())

    def _check_params(self):
        super()._check_params()
        _one_of("link", self.link, tuple(ORDINAL_LINKS))

    def _encode_labels(self, y, categories):
        """``classes_`` from ``classes``, an ordered categorical, or the sorted labels; codes in that order."""
        if self.classes is not None:
            levels = np.asarray(list(self.classes))
            if len(set(levels.tolist())) != len(levels):
                raise ValueError(f"classes must be distinct levels, got {levels.tolist()}")
        elif categories is not None:
            levels = categories
        else:
            levels = np.unique(y)
        lookup = {v: k for k, v in enumerate(levels.tolist())}
        unknown = sorted({str(v) for v in y.tolist() if v not in lookup})
        if unknown:
            raise ValueError(f"y holds labels {unknown[:10]} that are not among classes={levels.tolist()}")
        self.classes_ = levels
        return np.array([lookup[v] for v in y.tolist()], dtype=np.int64)

    def _likelihood_for(self, n_classes):
        ordinal, binary = ORDINAL_LINKS[self.link]
        return ordinal if n_classes > 2 else binary()


# -- helpers ------------------------------------------------------------------------------


def _custom_model(kernel, X, codes, n_classes, likelihood, approximation, inducing, per_class, names):
    """``ard_classifier``'s structure around a user's ``kernel(d)``: binary, multi-class
    (one kernel per class, each in a sub-model ``class<k>``, or one shared) or ordinal (free
    ordered cutpoints, N(0, 3^2), as ``ard_classifier``'s)."""
    d = X.shape[1]
    fitc = {"approx": "FITC"} if inducing is not None else {}
    data = {"Xu": kmeans_centres(inducing, X, seed=0)} if inducing is not None else {}
    with pm.Model(coords={"feature": names}) as model:
        if _is_ordinal(likelihood):
            cut = pm.Normal("cutpoints", 0.0, 3.0, shape=n_classes - 1, transform=pm.distributions.transforms.ordered,
                            initval=np.linspace(-1.0, 1.0, n_classes - 1))
            likelihood, data = likelihood(cut), {**data, "levels": list(range(n_classes))}
        if n_classes > 2 and not isinstance(likelihood, likelihoods.OrdinalLikelihood) and per_class:
            cov = []
            for k in range(n_classes):
                with pm.Model(name=f"class{k}"):
                    cov.append(kernel(d))
        else:
            cov = kernel(d)
        gp = APPROXIMATIONS[approximation](cov_func=cov, likelihood=likelihood, **fitc)
        gp.marginal_likelihood("y", X=X, y=codes, **data)
    return model, gp


def _is_default_prior(prior):
    """Whether ``prior`` is the estimators' default pair (-3, 3)."""
    try:
        return not isinstance(prior, dict) and tuple(float(v) for v in prior) == (-3.0, 3.0)
    except (TypeError, ValueError):
        return False


def _is_ordinal(likelihood):
    return isinstance(likelihood, type) and issubclass(likelihood, likelihoods.OrdinalLikelihood)


def _categories(y):
    """A pandas categorical's categories (their order), else None."""
    if getattr(getattr(y, "dtype", None), "name", None) == "category":
        cat = y.cat if hasattr(y, "cat") else y
        return np.asarray(cat.categories) if cat.ordered else None
    return None


def _feature_names(estimator, d):
    names = getattr(estimator, "feature_names_in_", None)
    return [str(v) for v in names] if names is not None else [f"x{m}" for m in range(d)]


def _one_of(name, value, allowed):
    if not isinstance(value, str) or value not in allowed:
        raise ValueError(f"{name} must be one of {allowed}, got {value!r}")


def _positive_int(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be None or a positive integer, got {value!r}" if name in ("max_draws", "maxiter",
                         "inducing") else f"{name} must be a positive integer, got {value!r}")
