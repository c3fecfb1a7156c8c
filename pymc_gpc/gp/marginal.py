r"""GP classifiers for PyMC whose latent functions are integrated out (EP, Laplace, mean field, ADF).

Shaped like ``pm.gp.Marginal``: construct with a covariance function and a likelihood,
then ``marginal_likelihood(name, X, y)`` adds

.. math::

    \log q(y \mid X, \theta) \approx \log \int \prod_i p(y_i \mid f_i)\,
        N(f; 0, K_\theta(X, X))\, df

to the model as a ``pm.Potential``. NUTS then samples the hyperparameters only (Barber &
Williams 1997; Kim & Ghahramani 2003), and ``predict`` averages p(y* = gp.classes[1]) over
the posterior draws (Barber & Williams eq. 9). With a multi-class likelihood the same
classes integrate out c a priori independent latent GPs, f_k ~ GP(0, k_k), with one
covariance function shared by the classes or a list of c of them, and ``predict`` gives an
(m, c) array; the registry (``approximations.registry``) holds each approximation's solver
per likelihood family and checks every combination.

``approximation`` (a class attribute) is how the latent functions are integrated out;
``approx`` (a constructor argument, as in ``pm.gp.MarginalApprox``) the sparse approximation
of the prior: None, "FITC" or "HSGP".

Example
-------
>>> with pm.Model() as model:
...     log_w = pm.Normal("log_w", -3, 3, shape=d)   # inverse squared lengthscales
...     log_v0 = pm.Normal("log_v0", -3, 3)
...     cov = pt.exp(log_v0) * pm.gp.cov.ExpQuad(d, ls=pt.exp(-0.5 * log_w))
...     gp = pymc_gpc.MarginalEP(cov_func=cov, likelihood=pymc_gpc.likelihoods.Probit())
...     gp.marginal_likelihood("y", X=X, y=y)
...     idata = pymc_gpc.sample()   # NUTS at the sampler's EP tolerance
>>> p = gp.predict(Xnew, idata=idata)

Several classes, one kernel per class:

>>> with pm.Model() as model:
...     log_ls = pm.Normal("log_ls", 0, 1, shape=3)
...     covs = [pm.gp.cov.ExpQuad(d, ls=pt.exp(log_ls[k])) for k in range(3)]
...     gp = pymc_gpc.MarginalLaplace(cov_func=covs, likelihood=pymc_gpc.likelihoods.Softmax())
...     gp.marginal_likelihood("y", X=X, y=labels)   # 3 classes: ints, strings, categorical
...     idata = pymc_gpc.sample()
>>> p_classes = gp.predict(Xnew, idata=idata)        # (m, 3); columns follow gp.classes
"""

import functools
import threading

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
from pymc.gp.util import JITTER_DEFAULT
from pytensor.compile.sharedvalue import SharedVariable
from pytensor.graph.traversal import ancestors
from pytensor.tensor.random.op import RandomVariable

from ..approximations import registry
from ..ops.training_check import checked_training_tensor
from ..ops import ApproxMarginalOp, LatentPredictiveOp
from ..structures.select import select_structure
from ..validation import check_inputs, check_kernel_columns, check_training_values, data_input
from .labels import check_label_container, coded_labels, label_tensor
from .model_terms import add_evidence_terms, as_input_matrix, checked_input_matrix, checked_label_count, label_dims
from .prediction import KERNEL_MODE, POINT_KERNEL_MODE, FittedPoint, latent_predictions

__all__ = ["MarginalEP", "MarginalLaplace", "MarginalMeanField", "MarginalADF"]

# Compiled kernel functions a GP keeps (one per model it predicted a point with).
_KERNEL_CACHE_SIZE = 8


class _ApproximateMarginal:
    """Shared machinery; subclasses set ``approximation`` (the registry's name of how the
    latent functions are integrated out)."""

    approximation = None

    def __init__(self, *, cov_func, likelihood, jitter=JITTER_DEFAULT, approx=None, m=None, L=None, c=None,
                 drop_first=False, scale=None, boundary=None, **solver_options):
        if "approximation" in solver_options:
            raise ValueError(f"approximation= is not an option of {type(self).__name__} (whose approximation is "
                             f"{self.approximation!r}): choose the class (MarginalEP, MarginalLaplace, ...); approx= "
                             "names the sparse approximation of the prior (None, 'FITC' or 'HSGP')")
        self.approx = registry.approx_option(approx)
        registry.check(self.approximation, likelihood, select_structure(likelihood, self.approx).name)
        self._structure = None  # the structure bound to the training inputs (marginal_likelihood)
        self.several_classes = registry.family(likelihood) == "multiclass"
        self.cov_funcs = _class_cov_funcs(cov_func, self.several_classes)
        self.prior_options = select_structure(likelihood, self.approx).prior_options(
            cov_func, m=m, L=L, c=c, drop_first=drop_first, scale=scale, boundary=boundary)
        if not jitter >= 0:
            raise ValueError(f"jitter must be >= 0, got {jitter}")
        self.cov_func = cov_func
        self.likelihood = likelihood
        self.jitter = float(jitter)
        self.solver_options = tuple(sorted(solver_options.items()))
        self.X = self.y = self.name = self.Xu = self.model = self.classes = None
        self._n_inputs = None
        self._training_container = None  # (pm.Data tensor of X, its values at marginal_likelihood)

    # -- building blocks -------------------------------------------------------------

    @property
    def structure(self):
        """The prior structure (``structures.select``) of this GP's likelihood and ``approx``, bound
        to the training inputs once ``marginal_likelihood`` has them (``for_training_inputs``)."""
        return self._structure or select_structure(self.likelihood, self.approx)

    @property
    def n_classes(self):
        """The number of classes of the labels ``marginal_likelihood`` was given (None before)."""
        return None if self.classes is None else len(self.classes)

    def class_cov_funcs(self):
        """The c classes' covariance functions (a shared one repeated); several classes only."""
        return self.cov_funcs or [self.cov_func] * self.n_classes

    def class_kernels(self, X):
        """The (c, n, n) stack K_k(X) + jitter I of several classes (a shared covariance is built once)."""
        eye = self.jitter * pt.eye(X.shape[0])
        if self.cov_funcs is None:
            return pt.stack([self.cov_func(X) + eye] * self.n_classes)
        return pt.stack([f(X) + eye for f in self.cov_funcs])

    def _per_latent(self, build):
        """``build(cov_func)`` of the one latent function, or its (c, ...) stack over the classes'."""
        if not self.several_classes:
            return build(self.cov_func)
        return pt.stack([build(f) for f in self.class_cov_funcs()])

    def _op(self, hyper_names=()):
        """The evidence Op of this GP's prior structure."""
        return ApproxMarginalOp(self.approximation, type(self.likelihood), self.solver_options, hyper_names,
                                structure=self.structure)

    @staticmethod
    def _hyperparameters(model, outputs):
        """The model's free random variables that ``outputs`` depend on, as one flat
        vector with their (name, size): passed to the Op, gradient-disconnected, so its
        non-convergence warning can name the point."""
        graph = set(ancestors(outputs))
        rvs = [rv for rv in model.free_RVs if rv in graph]
        if not rvs:
            return (), None
        sizes = []
        for rv in rvs:
            shape = rv.type.shape
            if None in shape:  # e.g. dims from model coordinates: fold the shape graph
                try:
                    shape = tuple(rv.shape.eval())
                except Exception:  # a shape that needs data: name the point by likelihood only
                    return (), None
            sizes.append((rv.name, int(np.prod(shape, dtype=int))))
        return tuple(sizes), pt.concatenate([pt.flatten(rv).astype("float64") for rv in rvs])

    def _check_fitted(self):
        if self.X is None:
            raise ValueError("call marginal_likelihood(name, X, y) before predicting")

    def _model(self, model=None):
        """``model`` if given, else the model ``marginal_likelihood`` added the potential to,
        else the one on the context stack."""
        if model is not None:
            return pm.modelcontext(model)
        return self.model if self.model is not None else pm.modelcontext(None)

    def _check_new_inputs(self, Xnew, symbolic=False):
        """Xnew checked (finite, 2-D, the training inputs' columns) as an array, or with
        ``symbolic`` a ``pm.Data`` container's tensor (checked at its current values)."""
        self._check_fitted()
        values, tensor = data_input(Xnew, "Xnew")
        Xnew = check_inputs(values, name="Xnew")
        if Xnew.shape[1] != self._n_inputs:
            raise ValueError(
                f"Xnew has {Xnew.shape[1]} columns but the training inputs X have {self._n_inputs}"
            )
        if symbolic and tensor is not None:
            return as_input_matrix(tensor)
        return Xnew

    def _record_training_container(self, X_tensor, X_values):
        """Record a training ``pm.Data`` container of X and its values at ``marginal_likelihood``."""
        changeable = isinstance(X_tensor, SharedVariable)  # a constant tensor cannot change
        self._training_container = (X_tensor, np.array(X_values, copy=True)) if changeable else None

    def _check_training_container(self):
        """ValueError when the training ``pm.Data`` container of X no longer holds the values the
        evidence was built with (``pm.set_data`` on it): new inputs go in a separate container."""
        if self._training_container is not None:
            tensor, values = self._training_container
            check_training_values(tensor.name, values, tensor.get_value())

    def _training_inputs(self):
        """The training X for the predictive graph: a ``pm.Data`` container's tensor passed
        through a check that raises ValueError when it is evaluated at other values than
        those the evidence was built with."""
        if self._training_container is None:
            return self.X
        tensor, values = self._training_container
        return as_input_matrix(checked_training_tensor(tensor, values))

    def _labels(self):
        """The training labels as an array (a ``pm.Data`` container's current values)."""
        y = self.y
        return np.asarray(y.eval() if isinstance(y, pytensor.graph.basic.Variable) else y, dtype=float)

    def _prior_inputs(self, X=None):
        """The evidence Op's kernel inputs at the training X (or ``X``): the structure's
        ``kernel_inputs`` ([K], with FITC [K_uu, K_uf, diag K_ff]; (c, ...) stacks for several classes)."""
        return self.structure.kernel_inputs(self, self.X if X is None else X)

    def _build_predictive(self, Xnew, full_cov):
        """The latent predictive Op of this GP's prior structure at ``Xnew``: (mean, cov)."""
        structure = self.structure
        op = LatentPredictiveOp(self.approximation, type(self.likelihood), self.solver_options, full_cov,
                                structure=structure)
        X = self._training_inputs()
        K_cross = structure.cross_covariances(self, X, Xnew)
        K_star = self._per_latent(lambda f: f(Xnew) if full_cov else f(Xnew, diag=True))
        theta = [] if self.several_classes else [self.likelihood.params_tensor()]  # the multi-class Op takes none
        return op(*self._prior_inputs(X), *theta, self.y, K_cross, K_star)

    # -- public verbs ----------------------------------------------------------------

    def marginal_likelihood(self, name, X, y, Xu=None, levels=None):
        """Add log q(y | X, theta) to the model as a potential named ``name``.

        Parameters
        ----------
        name : name of the potential; diagnostics are added as deterministics
            ``{name}_n_iter`` and ``{name}_status`` (0 converged, 1 not converged after
            the retries: the value is used and an ``ApproximationFailedWarning`` names
            the hyperparameter values; 2 failed: log q = -inf, the sampler rejects), and
            the per-observation log predictive as ``{name}_loo`` (used by
            ``pymc_gpc.add_log_likelihood`` for ``az.loo``).
        X : (n, d) inputs (array, DataFrame, or 1-D for one input dimension), or a
            ``pm.Data`` container of them (checked at its current values; its values are
            recorded: ``predict`` and ``conditional`` raise ValueError after a
            ``pm.set_data`` on it, since new inputs go in a separate container passed to them).
        y : (n,) labels, coded by the likelihood's family (``gp.labels``).
            Binary: {-1, +1}, {0, 1}, booleans, or two distinct strings; or a ``pm.Data``
            container of numeric or boolean labels (values above 0 are the positive class;
            a ``pm.set_data`` to labels outside the two it was built with raises ValueError
            where the container is evaluated). ``self.classes`` then holds the two labels,
            the one ``predict`` gives the probability of last.
            Ordinal (``OrderedProbit``, ``OrderedLogit``): integers 0..K-1, an ordered pandas
            categorical, or any labels with ``levels``; at least 3 levels
            (``validation.as_ordinal_codes``); also as a ``pm.Data`` container of codes.
            Several classes (``Softmax``, ``MultinomialProbit``): c >= 2 classes as integers,
            strings, booleans or a pandas categorical (a Series or a bare ``pd.Categorical``),
            not a ``pm.Data`` container. ``self.classes`` then holds the K levels or c
            classes, in the order of ``predict``'s columns.
        Xu : (m, d) inducing inputs, with ``approx="FITC"`` only (required there): an
            array (e.g. ``pm.gp.util.kmeans_inducing_points(m, X)``) or a tensor of random
            variables, which then get gradients too. m <= n. With several classes also a
            list of c sets or a (c, m, d) array (one per class, all of one size m).
        levels : ordinal likelihoods only: the K labels from lowest to highest (for labels
            such as strings that carry no order of their own).

        Returns
        -------
        The log-evidence tensor.
        """
        X_values, X_tensor = data_input(X, "X")
        X = check_inputs(X_values)
        check_kernel_columns(self.cov_func, X.shape[1])
        y_values, y_tensor = data_input(y, "y")
        check_label_container(self.likelihood, y_values, y_tensor)
        coded, classes = coded_labels(self.likelihood, y_values, levels)
        if self.cov_funcs is not None and len(self.cov_funcs) != len(classes):
            raise ValueError(f"cov_func lists {len(self.cov_funcs)} covariances but y holds {len(classes)} classes")
        if X.shape[0] != coded.shape[0]:
            raise ValueError(f"X has {X.shape[0]} rows but y has {coded.shape[0]} labels")
        Xu = self.structure.check_inducing(Xu, X, n_classes=len(classes))
        self._structure = select_structure(self.likelihood, self.approx).for_training_inputs(self, X)
        self.classes = classes
        self._n_inputs = X.shape[1]
        self._record_training_container(X_tensor, X_values)
        if X_tensor is not None:
            X = checked_input_matrix(X_tensor, X.shape[1])
        if y_tensor is not None:
            coded = checked_label_count(label_tensor(self.likelihood, y_tensor, classes), X, y_tensor.name)
        model = pm.modelcontext(None)
        self.X, self.y, self.name, self.Xu, self.model = X, coded, name, Xu, model
        self._forget_kernel_functions()
        priors, params = self._prior_inputs(), self.likelihood.params_tensor()
        hyper_names, hyper = self._hyperparameters(model, [*priors, params])
        log_z, *_, loo, n_iter, status = self._op(hyper_names)(*priors, params, self.y, hyper)
        return add_evidence_terms(model, name, log_z, loo, n_iter, status,
                                  dims=label_dims(model, y_tensor))

    def conditional(self, name, Xnew, *, jitter=JITTER_DEFAULT, **kwargs):
        """The latent f* at ``Xnew`` under q, as a ``pm.MvNormal`` (for posterior predictive).

        Use with ``pm.sample_posterior_predictive(idata, var_names=[name])``; class
        probabilities follow as ``likelihood.predict`` of the draws' mean and variance,
        or directly from ``predict``. The variable is added to ``model=`` if given, else
        to the model that ``marginal_likelihood`` added the potential to (so it may be
        called after the ``with pm.Model()`` block).

        With several classes, ``name`` is a deterministic of shape (m, c), the c latent
        functions in the order of ``self.classes`` (as ``predict``'s columns), so that
        ``pm.Categorical(..., p=pm.math.softmax(f, axis=-1))`` takes it directly; they are
        drawn jointly (with their between-class correlations) as a ``pm.MvNormal`` named
        ``{name}_stacked`` of length c m (class-major).

        ``Xnew`` may be a ``pm.Data`` container: ``pm.set_data({"Xnew": ...})`` then moves the
        predictions to other inputs (any number of rows), as for a GLM.

        PyMC's ``sample_posterior_predictive`` warns that Potentials are ignored. For these
        draws that is harmless: they depend only on the hyperparameters, whose posterior
        draws the evidence potential already shaped (the warning is about variables drawn
        afresh from their priors). ``pymc_gpc.sample_posterior_predictive`` runs it without
        that warning where every potential is a classifier's and the posterior holds every
        free variable.
        """
        Xnew = self._check_new_inputs(Xnew, symbolic=True)
        self._check_training_container()
        mean, cov = self._build_predictive(Xnew, full_cov=True)
        size = Xnew.shape[0] * (self.n_classes if self.several_classes else 1)
        with self._model(kwargs.pop("model", None)):
            if not self.several_classes:
                return pm.MvNormal(name, mu=mean, cov=cov + jitter * pt.eye(size), **kwargs)
            f = pm.MvNormal(f"{name}_stacked", mu=mean.reshape((size,)), cov=cov + jitter * pt.eye(size), **kwargs)
            return pm.Deterministic(name, f.reshape((self.n_classes, Xnew.shape[0])).T)

    def predict(self, Xnew, *, point=None, idata=None, model=None, return_latent=False, max_draws=None,
                weights=None, progressbar=True):
        """Class probabilities p(y* = gp.classes[1]) at ``Xnew``: of the positive class, the
        label coded +1 (True, 1, +1, or the later of two strings in sorted order). With an
        ordinal likelihood or several classes, an (n*, K) array: p(y* = gp.classes[k]) in
        column k, rows summing to one.

        Parameters
        ----------
        point : dict of variable values (e.g. from ``pm.find_MAP``, or ``pymc_gpc.fit``'s
            ``result.point``), or the ``FitResult`` of ``pymc_gpc.fit`` itself: the
            prediction at its point then starts from the approximation's state of the
            fit's last solve there (``FitResult.solver_states``), and gives the same
            probabilities to the solver's tolerance in fewer sweeps.
        idata : a sampling result: p is averaged over its posterior draws
            (Barber & Williams eq. 9).
        model : the model to read the variables from (default: the model
            ``marginal_likelihood`` added the potential to, so ``predict`` works after the
            ``with pm.Model()`` block).
        max_draws : with ``idata``, use at most this many draws, evenly thinned.
        weights : with ``idata``, one weight per draw (chain-major; not with ``max_draws``):
            p is the weighted average over the draws instead of their mean (the design
            points of ``pymc_gpc.sample(method="ccd")``: ``estimation.integration.predict``).
        return_latent : also return the latent mean and variance (per draw with idata);
            with several classes the means (c, n*) and per-point c x c covariances (n*, c, c).
        progressbar : with ``idata``, show PyMC's progress bar over the draws.

        Returns
        -------
        p ((n*,), or (n*, K) for an ordinal likelihood or several classes), or (p, mean, var)
        with ``return_latent``.

        Notes
        -----
        The kernels of every draw come from one compiled function (with ``point=``, kept
        for later calls with the same ``model``), and each draw's solve is warm-started
        from the previous draw's. Over draws EP stops at a site change of 1e-3, at one point
        at the engine's 1e-8, unless ``tol`` was given to the constructor
        (``pymc_gpc.gp.prediction``). After ``pymc_gpc.fit`` pass ``point=result``: a cold
        start at the fitted point repeats the fit's sweeps. With several classes the
        probabilities come from ``self.likelihood.predict`` with its own ``predictive``.
        """
        if (point is None) == (idata is None):
            raise ValueError("give exactly one of point= or idata=")
        if weights is not None:
            weights = np.asarray(weights, dtype=float)
            size = idata["posterior"].sizes["chain"] * idata["posterior"].sizes["draw"] if idata is not None else 0
            if idata is None or max_draws is not None or weights.shape != (size,) or not (
                    np.all(weights >= 0) and np.sum(weights) > 0):
                raise ValueError(f"weights needs idata= without max_draws and one non-negative weight per draw "
                                 f"({size}), not all zero; got shape {weights.shape}")
        Xnew = self._check_new_inputs(Xnew)  # a pm.Data container: its current values
        self._check_training_container()
        model = self._model(model)
        state = None
        if isinstance(point, FittedPoint):
            point, state = point.point, self._fitted_state(point)
        fn, names = self._compile_kernels(model, KERNEL_MODE) if idata is not None else self._kernel_function(model)
        points = [point] if point is not None else _posterior_points(idata, names, max_draws)
        for pt_ in points[:1]:
            missing = [n for n in names if n not in pt_]
            if missing:
                raise ValueError(f"point is missing values for {missing}")
        draws = [tuple(np.asarray(pt_[n]) for n in names) for pt_ in points]
        solver = registry.solver_for(self.approximation, self.likelihood)
        defaults = solver.prediction_defaults if idata is not None else {}
        means, vars_, thetas = latent_predictions(
            self.approximation, self.likelihood, {**defaults, **dict(self.solver_options)}, self._labels(),
            functools.partial(fn, Xnew), draws,
            progressbar=progressbar and idata is not None,
            retry_options=functools.partial(registry.get(self.approximation).retry_schedule,
                                            structure=self.structure.name), state=state,
        )
        probs = [self._probabilities(m, v, th) for m, v, th in zip(means, vars_, thetas)]
        p = np.mean(probs, axis=0) if weights is None else np.tensordot(weights / np.sum(weights), probs, axes=1)
        if return_latent:
            return p, np.squeeze(means), np.squeeze(vars_)
        return p

    def _fitted_state(self, result):
        """The solver state ``result`` (a ``FitResult``) holds for this GP's evidence term,
        found by its potential's name; None when the fit was of a model that does not hold
        this GP (the GP's own model or one it is nested in), or recorded no state
        (``FitResult.solver_states``)."""
        model = self.model
        while model is not None and model is not result.model:
            model = model.parent
        if model is None:
            return None
        return result.solver_state(self.model.name_for(self.name))

    def _prediction_inputs(self, Xnew):
        """Tensors [prior inputs..., theta, cross-covariances, prior variances at Xnew].

        The prior inputs are the (n, n) kernel K, or with FITC K_uu, K_uf and diag K_ff
        (the cross-covariances are then K_u*, (m, n*)); (c, ...) stacks for several classes.
        """
        crosses = self.structure.cross_covariances(self, self.X, Xnew)
        variances = self._per_latent(lambda f: f(Xnew, diag=True))
        return [*self._prior_inputs(), self.likelihood.params_tensor(), crosses, variances]

    def _probabilities(self, mean, var, theta):
        """Class probabilities from one draw's latent predictive: mean and variance (n*,), or
        with several classes means (c, n*) and covariances (n*, c, c)."""
        if self.several_classes:
            return self.likelihood.predict(mean.T, var)
        return self.likelihood.predict(mean, var, theta)

    def _kernel_function(self, model):
        """``_compile_kernels(model, POINT_KERNEL_MODE)``, compiled at the first call for this
        model and evidence term, then cached: it takes the new inputs as its first argument and
        reads ``pm.Data`` containers when called. ``predict`` over draws compiles its own
        (``KERNEL_MODE``) and does not keep it: that mode folds constants of the training
        data's size (the jitter's n x n identity) into the function."""
        cache = vars(self).setdefault("_kernel_functions", [])
        owners = self._kernel_graph_owners(model)
        for cached_owners, fn, names in cache:
            if all(a is b for a, b in zip(cached_owners, owners)):
                return fn, names
        fn, names = self._compile_kernels(model, POINT_KERNEL_MODE)
        cache.append((owners, fn, names))
        del cache[:-_KERNEL_CACHE_SIZE]  # the oldest, beyond the last few models
        return fn, names

    def _forget_kernel_functions(self):
        """Drop the cached kernel functions (a new evidence term: they can no longer match)."""
        vars(self).pop("_kernel_functions", None)

    def __getstate__(self):
        """The GP's attributes without its compiled kernel functions (compiled again when needed)."""
        state = dict(vars(self))
        state.pop("_kernel_functions", None)
        return state

    def _kernel_graph_owners(self, model):
        """The objects whose identity fixes the kernel graph: the model, the training inputs
        and labels (new objects at every ``marginal_likelihood`` call), the inducing inputs,
        the covariance function and the likelihood."""
        return (model, self.X, self.y, self.Xu, self.cov_func, self.likelihood, self.jitter)

    def _compile_kernels(self, model, mode=KERNEL_MODE):
        """One function from (Xnew, the model variables...) to (prior, theta, K_cross, k_diag);
        the prior is what the solver takes (the structure's ``prior_from``: K, or a
        ``structures.fitc.FITCPrior``). Xnew is a symbolic (n*, d) matrix of the training
        inputs' column count and dtype, so the function serves any new inputs; returns the
        function and the names of the model variables it takes after Xnew."""
        Xnew = pt.tensor("Xnew", dtype=str(self.X.dtype), shape=(None, self._n_inputs))  # as the training X
        outputs = self._prediction_inputs(Xnew)
        outputs = [pt.as_tensor_variable(o).astype("float64") for o in outputs]
        graph = list(ancestors(outputs))
        named = set(model.named_vars.values())
        inputs = [v for v in graph if v in named and not isinstance(v, SharedVariable)]  # pm.Data: its values
        foreign = [v.name or str(v) for v in graph if v.owner is not None and isinstance(v.owner.op, RandomVariable)
                   and v not in model.named_vars.values()]
        if foreign:
            raise ValueError(f"the covariance or likelihood depends on {foreign}, which are not variables of "
                             "the model given (model=); give the model the GP was added to")
        fn = pytensor.function([Xnew, *inputs], outputs, on_unused_input="ignore", mode=mode)
        return self.structure.prior_function(_OneCallAtATime(fn)), [v.name for v in inputs]


class _OneCallAtATime:
    """A compiled PyTensor function behind a lock: it holds its intermediate storage, so two
    threads must not run it at once, and ``predict`` calls from several threads share the
    GP's cached function (``_kernel_function``). Its attributes (``maker``, ...) are the
    function's."""

    def __init__(self, fn):
        self._fn, self._lock = fn, threading.Lock()

    def __call__(self, *args):
        with self._lock:
            return self._fn(*args)

    def __getattr__(self, name):
        if name.startswith("_"):  # not yet set (copy, unpickling): no lookup through _fn
            raise AttributeError(name)
        return getattr(self._fn, name)


def _class_cov_funcs(cov_func, several_classes):
    """The list of the c classes' covariance functions a multi-class GP was given, or None
    (one covariance function, shared by the classes); ValueError for anything else."""
    if several_classes and isinstance(cov_func, (list, tuple)):
        funcs = list(cov_func)
        if not funcs or not all(callable(f) for f in funcs):
            raise ValueError(f"cov_func must be a pm.gp.cov covariance function or a list of them, got {cov_func!r}")
        if len(funcs) < 2:
            raise ValueError(f"a list cov_func needs one covariance per class (c >= 2), got {len(funcs)}")
        return funcs
    if not callable(cov_func):
        lists = " or a list of them" if several_classes else ""
        raise ValueError(f"cov_func must be a pm.gp.cov covariance function{lists}, got {cov_func!r}")
    return None


def _posterior_points(idata, names, max_draws):
    post = idata["posterior"]
    missing = [n for n in names if n not in post]
    if missing:
        raise ValueError(f"idata's posterior has no variables {missing}; was it sampled from this model?")
    total = post.sizes["chain"] * post.sizes["draw"]
    stacked = {}
    for n in names:
        values = np.asarray(post[n])
        stacked[n] = values.reshape(total, *values.shape[2:])
    idx = np.arange(total)
    if max_draws is not None and total > max_draws:
        idx = np.linspace(0, total - 1, max_draws).round().astype(int)
    return [{n: stacked[n][i] for n in names} for i in idx]


class MarginalEP(_ApproximateMarginal):
    r"""GP classifier whose latent function is integrated out by Expectation Propagation.

    Parameters
    ----------
    cov_func : any ``pm.gp.cov`` covariance (sums and products included); with a multi-class
        likelihood, one shared by the c classes or a list of c of them.
    likelihood : a ``pymc_gpc.likelihoods`` instance; its parameters may be random variables.
        Binary, ordinal (``OrderedProbit``, ``OrderedLogit``) or, for several classes,
        ``MultinomialProbit`` (nested EP, Riihimaki et al. 2013): the likelihood's family
        chooses the registry's solver (``approximations.registry``).
    jitter : added to the diagonal of :math:`K` (with FITC: of :math:`K_{uu}` and
        :math:`\operatorname{diag} K_{ff}`; with several classes: of every class's).
    approx : the sparse approximation of the prior, as in ``pm.gp.MarginalApprox``: None
        (the dense :math:`n \times n` kernel); "FITC", the inducing-point prior
        :math:`K \approx Q + \Lambda` (Snelson & Ghahramani 2006; Naish-Guzman & Holden 2008),
        :math:`O(n m^2)` time and :math:`O(n m)` memory, ``marginal_likelihood`` then taking
        the inducing inputs ``Xu``; or "HSGP", the basis-function prior
        :math:`K \approx \Phi\,\mathrm{diag}(S)\,\Phi^\top` of ``pm.gp.HSGP`` (Solin & Sarkka
        2020; ``structures.hsgp``; no jitter), the basis fixed at the training inputs (for
        ``pm.gp.cov.Periodic`` the expansion of ``pm.gp.HSGPPeriodic``).
    m, L, c, drop_first, boundary : with ``approx="HSGP"`` only, ``pm.gp.HSGP``'s meanings: m
        the number of basis functions per active input dimension (required), L the box's
        half-widths or c a factor on the inputs' half-range (default c = 1.5), drop_first
        to drop the first basis function, boundary the boundary condition (default
        "dirichlet"). The kernel needs a ``power_spectral_density`` (ValueError naming it,
        here). With several kernels (one per class) they read the same input columns.
    scale : with ``approx="HSGP"`` and a ``pm.gp.cov.Periodic`` kernel only (whose m is then an
        int, ``pm.gp.HSGPPeriodic``'s): the expansion's standard deviation, a number or a
        random variable (default 1).
    **solver_options : passed to ``pymc_gpc.ep`` (method, damping, tol, max_sweeps), or for
        several classes to ``pymc_gpc.multinomial_probit_ep`` (tol, damping, max_sweeps,
        inner_tol); unset, tol is the sampler's inside ``pymc_gpc.sample``
        (``ops.rewrites.sampling_tolerance``), 1e-3 in ``predict`` over posterior draws, and
        the engine's 1e-8 everywhere else.

    Attributes
    ----------
    approximation : "ep", the registry's name (``approximations.registry.APPROXIMATIONS``).
    classes : the labels ``marginal_likelihood`` was given, in ``predict``'s order.

    Raises
    ------
    ValueError
        When the likelihood is not an instance of ``pymc_gpc.likelihoods`` or is a multi-class
        likelihood EP does not integrate out (``Softmax``: use ``MarginalLaplace``), ``approx``
        is not None, "FITC" or "HSGP", or ``marginal_likelihood`` is given bad inputs (non-finite
        values, labels that do not fit the likelihood, mismatched lengths); the checks are
        the registry's ``check``.

    Notes
    -----
    The potential is EP's approximation of the log marginal likelihood (Rasmussen &
    Williams eq. 3.65, in the stable form of their Alg. 3.5), with the gradient at the
    fixed point (their eq. 5.27)

    .. math::

        \frac{\partial \log Z_{EP}}{\partial K}
        = \tfrac12 \left(b b^\top - (K + \tilde S^{-1})^{-1}\right),
        \qquad b = (K + \tilde S^{-1})^{-1} \tilde\mu,

    with :math:`\tilde\mu` the site means and :math:`\tilde S` the diagonal matrix of the
    site precisions.

    Examples
    --------
    >>> import pymc as pm, pytensor.tensor as pt, pymc_gpc
    >>> from pymc_gpc.datasets import load
    >>> pima = load("pima")
    >>> X, y, d = pima.X_train, pima.y_train, pima.X_train.shape[1]
    >>> with pm.Model() as model:
    ...     log_ls = pm.Normal("log_ls", 0, 1, shape=d)
    ...     cov = pm.gp.cov.ExpQuad(d, ls=pt.exp(log_ls))
    ...     gp = pymc_gpc.MarginalEP(cov_func=cov, likelihood=pymc_gpc.likelihoods.Probit())
    ...     log_q = gp.marginal_likelihood("y", X=X, y=y)
    ...     idata = pymc_gpc.sample()  # doctest: +SKIP
    >>> p = gp.predict(pima.X_test, idata=idata)  # doctest: +SKIP
    """

    approximation = "ep"


class MarginalLaplace(_ApproximateMarginal):
    """GP classifier whose latent function is integrated out by Laplace's method.

    Parameters as for ``MarginalEP``; solver options go to ``pymc_gpc.laplace`` (tol,
    max_iter), or for several classes to ``pymc_gpc.softmax_laplace``. The multi-class
    likelihood it integrates out is ``Softmax`` (Williams & Barber 1998; R&W Alg. 3.3).
    The step likelihood has no Laplace approximation (ValueError).

    The potential is Laplace's approximation at the posterior mode (Rasmussen & Williams
    eq. 3.32, Alg. 3.1); its gradient includes the mode's implicit dependence on K
    (Alg. 5.1), in adjoint form (Margossian et al. 2020).

    Attributes
    ----------
    approximation : "laplace", the registry's name.
    classes : the labels ``marginal_likelihood`` was given, in ``predict``'s order.

    Raises
    ------
    ValueError
        For the step likelihood (piecewise constant: no Laplace approximation), a
        multi-class likelihood other than ``Softmax``, or bad inputs as for ``MarginalEP``.

    Examples
    --------
    >>> import pymc as pm, pytensor.tensor as pt, pymc_gpc
    >>> from pymc_gpc.datasets import load
    >>> pima = load("pima")
    >>> X, y, d = pima.X_train, pima.y_train, pima.X_train.shape[1]
    >>> with pm.Model() as model:
    ...     log_ls = pm.Normal("log_ls", 0, 1, shape=d)
    ...     cov = pm.gp.cov.ExpQuad(d, ls=pt.exp(log_ls))
    ...     gp = pymc_gpc.MarginalLaplace(cov_func=cov, likelihood=pymc_gpc.likelihoods.Logistic())
    ...     log_q = gp.marginal_likelihood("y", X=X, y=y)
    >>> result = pymc_gpc.fit(model, method="type2", progressbar=False)
    >>> p = gp.predict(pima.X_test, point=result)  # from the fit's state at its point
    """

    approximation = "laplace"


class MarginalMeanField(_ApproximateMarginal):
    """GP classifier whose latent function is integrated out by a mean-field method.

    Csato, Fokoue, Opper, Schottky & Winther (2000), sec. 3-4 (``pymc_gpc.meanfield``).

    Parameters
    ----------
    cov_func, likelihood, jitter : as for ``MarginalEP``; every likelihood is supported.
    variant : "ensemble" (mean field I: the potential is -F of eq. 7, a lower bound on
        the log evidence) or "naive" (mean field II: -F of eq. 10, not a bound).
    **solver_options : passed to ``pymc_gpc.meanfield`` (damping, tol, max_sweeps).

    Raises
    ------
    ValueError
        For a ``variant`` other than "ensemble" or "naive", ``approx="FITC"``, an ordinal
        or a multi-class likelihood.

    Examples
    --------
    >>> import pymc as pm, pytensor.tensor as pt, pymc_gpc
    >>> from pymc_gpc.datasets import load
    >>> pima = load("pima")
    >>> X, y, d = pima.X_train, pima.y_train, pima.X_train.shape[1]
    >>> with pm.Model() as model:
    ...     log_ls = pm.Normal("log_ls", 0, 1, shape=d)
    ...     cov = pm.gp.cov.ExpQuad(d, ls=pt.exp(log_ls))
    ...     gp = pymc_gpc.MarginalMeanField(cov_func=cov, likelihood=pymc_gpc.likelihoods.Probit(), variant="naive")
    ...     log_q = gp.marginal_likelihood("y", X=X, y=y)
    >>> result = pymc_gpc.fit(model, method="type2", progressbar=False)
    """

    approximation = "meanfield"

    def __init__(self, *, cov_func, likelihood, variant="ensemble", jitter=JITTER_DEFAULT, **solver_options):
        if variant not in ("ensemble", "naive"):
            raise ValueError(f"variant must be 'ensemble' or 'naive', got {variant!r}")
        super().__init__(cov_func=cov_func, likelihood=likelihood, jitter=jitter, variant=variant,
                         **solver_options)


class MarginalADF(_ApproximateMarginal):
    r"""GP classifier with the sequential online (ADF) approximation (Csato et al. 2000, section 5).

    The potential is :math:`\sum_t \log \langle p(y_t \mid a) \rangle_{t-1}` from one pass in data order
    (``sweeps=1``), or EP's log Z after revisits (``sweeps > 1``). It has **no
    gradient**: asking for one (``pytensor.grad``, an explicit ``pm.NUTS``) raises
    ``NullTypeGradError`` naming ADF, so ``pm.sample`` assigns a gradient-free step
    (Slice) by itself and ``pm.find_MAP`` falls back to Powell with a warning. Use it
    to evaluate and compare evidences, or with gradient-free samplers.

    Parameters
    ----------
    cov_func, likelihood, jitter : as for ``MarginalEP``; every likelihood is supported.
    sweeps : passes through the data (``pymc_gpc.adf``).

    Raises
    ------
    ValueError
        For ``approx="FITC"``, an ordinal or a multi-class likelihood.

    Examples
    --------
    >>> import pymc as pm, pytensor.tensor as pt, pymc_gpc
    >>> from pymc_gpc.datasets import load
    >>> pima = load("pima")
    >>> X, y, d = pima.X_train, pima.y_train, pima.X_train.shape[1]
    >>> with pm.Model() as model:
    ...     log_ls = pm.Normal("log_ls", 0, 1, shape=d)
    ...     cov = pm.gp.cov.ExpQuad(d, ls=pt.exp(log_ls))
    ...     gp = pymc_gpc.MarginalADF(cov_func=cov, likelihood=pymc_gpc.likelihoods.Probit())
    ...     log_q = gp.marginal_likelihood("y", X=X, y=y)
    >>> result = pymc_gpc.fit(model, method="em-ep", progressbar=False)  # doctest: +SKIP
    """

    approximation = "adf"

    def __init__(self, *, cov_func, likelihood, sweeps=1, jitter=JITTER_DEFAULT, **solver_options):
        super().__init__(cov_func=cov_func, likelihood=likelihood, jitter=jitter, sweeps=sweeps,
                         **solver_options)
