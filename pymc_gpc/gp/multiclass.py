r"""GP classifiers with c >= 2 classes: ``MarginalLaplace`` / ``MarginalEP`` given a
multi-class likelihood.

``MarginalLaplace(cov_func=..., likelihood=Softmax())`` and
``MarginalEP(cov_func=..., likelihood=MultinomialProbit())`` build one of the classes
below (``gp._ApproximateMarginal.__new__`` dispatches on the likelihood), with the same
verbs as the binary classifiers. The c latent functions are a priori independent GPs,

.. math::

    f_k \sim GP(0, k_k), \quad k = 1..c, \qquad
    \log q(y \mid X, \theta) \approx \log \int \prod_i p(y_i \mid f_{1..c}(x_i))
        \prod_k N(f_k; 0, K_k)\, df,

with one covariance function shared by all classes or a list of c of them (each may
carry its own random hyperparameters). Laplace with the softmax: Williams & Barber
(1998), R&W Alg. 3.3; nested EP with the multinomial probit: Riihimaki, Jylanki &
Vehtari (2013).

Example
-------
>>> with pm.Model() as model:
...     log_ls = pm.Normal("log_ls", 0, 1, shape=3)
...     covs = [pm.gp.cov.ExpQuad(d, ls=pt.exp(log_ls[k])) for k in range(3)]
...     gp = pymc_gpc.MarginalLaplace(cov_func=covs, likelihood=pymc_gpc.likelihoods.Softmax())
...     gp.marginal_likelihood("y", X=X, y=labels)   # 3 classes: ints, strings, categorical
...     idata = pymc_gpc.sample()                   # plain pm.sample works, more slowly
>>> p = gp.predict(Xnew, idata=idata)                # (m, 3); columns follow gp.classes

Inducing points: ``approx="FITC"`` gives each class the FITC prior K~_k = Q_k + Lambda_k
(``structures.multiclass_fitc``: O(c^2 m^2 n) time and O(c m n) memory per posterior, no
n x n matrix); ``marginal_likelihood(name, X, y, Xu=...)`` then takes the inducing inputs,
one (m, d) set shared by the classes, or one per class (a list of c of them or a (c, m, d)
array), arrays or random variables (which get gradients too).

The softmax predicts at Laplace's latent predictive mean by default
(``Softmax(predictive="mean")``; ``"integrate"`` and ``"probit"`` are the options), the
multinomial probit integrates over nested EP's latent predictive; the ``{name}_loo`` terms
always integrate.
"""

import pymc as pm
import pytensor.tensor as pt
from pymc.gp.util import JITTER_DEFAULT

from .marginal import MarginalEP, MarginalLaplace
from ..likelihoods.multiclass import MulticlassLikelihood
from .model_terms import add_evidence_terms as _add_evidence_terms, checked_input_matrix
from ..ops import LatentPredictiveOp
from ..validation import as_class_codes, check_inputs, check_kernel_columns, data_input


class MulticlassMarginal:
    """Shared machinery of the multi-class classifiers; subclasses set ``approximation``.

    Parameters
    ----------
    cov_func : a ``pm.gp.cov`` covariance shared by the c classes, or a list of c of them.
    likelihood : a ``pymc_gpc.likelihoods.MulticlassLikelihood`` (``Softmax`` for
        Laplace, ``MultinomialProbit`` for EP).
    jitter : added to the diagonal of every K_k (with FITC: of every K_uu,k and diag K_ff,k).
    approx : None (dense n x n kernels) or "FITC" (inducing points: ``marginal_likelihood``
        then needs ``Xu``; module docstring).
    **solver_options : passed to the solver (``softmax_laplace``: tol, max_iter;
        ``multinomial_probit_ep``: tol, damping, max_sweeps, inner_tol).
    """

    approximation = None
    approximation_name = None

    def __init__(self, *, cov_func, likelihood, jitter=JITTER_DEFAULT, approx=None, **solver_options):
        if approx is not None and not (isinstance(approx, str) and approx.upper() == "FITC"):
            raise ValueError(f"approx must be None (dense) or 'FITC', got {approx!r}")
        approx = None if approx is None else "FITC"
        if not isinstance(likelihood, MulticlassLikelihood):
            raise ValueError(f"likelihood must be a multi-class likelihood, got {likelihood!r}")
        funcs = list(cov_func) if isinstance(cov_func, (list, tuple)) else [cov_func]
        if not funcs or not all(callable(f) for f in funcs):
            raise ValueError(f"cov_func must be a pm.gp.cov covariance function or a list of them, got {cov_func!r}")
        if isinstance(cov_func, (list, tuple)) and len(funcs) < 2:
            raise ValueError(f"a list cov_func needs one covariance per class (c >= 2), got {len(funcs)}")
        if not jitter >= 0:
            raise ValueError(f"jitter must be >= 0, got {jitter}")
        self.cov_func = cov_func
        self.cov_funcs = funcs if isinstance(cov_func, (list, tuple)) else None
        self.likelihood = likelihood
        self.jitter = float(jitter)
        self.solver_options = tuple(sorted(solver_options.items()))
        self.approx = approx
        self.X = self.y = self.name = self.classes = self.model = self.Xu = None
        self._n_inputs = None
        self._training_container = None

    @property
    def n_classes(self):
        return None if self.classes is None else len(self.classes)

    # -- building blocks -------------------------------------------------------------

    def class_cov_funcs(self):
        return self.cov_funcs or [self.cov_func] * self.n_classes

    def class_kernels(self, X):
        """The (c, n, n) stack K_k(X) + jitter I (a shared covariance is built once)."""
        eye = self.jitter * pt.eye(X.shape[0])
        if self.cov_funcs is None:
            return pt.stack([self.cov_func(X) + eye] * self.n_classes)
        return pt.stack([f(X) + eye for f in self.cov_funcs])

    def _build_predictive(self, Xnew, full_cov):
        """The predictive Op of this GP's prior structure at ``Xnew`` (no theta input)."""
        structure = self.structure
        op = LatentPredictiveOp(self.approximation, type(self.likelihood), self.solver_options, full_cov,
                                structure=structure)
        X = self._training_inputs()
        K_star = pt.stack([f(Xnew) if full_cov else f(Xnew, diag=True) for f in self.class_cov_funcs()])
        return op(*self._prior_inputs(X), self.y, structure.cross_covariances(self, X, Xnew), K_star)

    # -- public verbs ----------------------------------------------------------------

    def marginal_likelihood(self, name, X, y, Xu=None):
        """Add log q(y | X, theta) to the model as a potential named ``name``.

        Parameters
        ----------
        name : name of the potential; ``{name}_loo`` (per observation, for ``az.loo``),
            ``{name}_n_iter`` and ``{name}_status`` are added as for the binary classifiers.
        X : (n, d) inputs (array, DataFrame, or 1-D for one input dimension), or a
            ``pm.Data`` container of them (checked at its current values).
        y : (n,) labels of c >= 2 classes: integers, strings, booleans or a pandas
            categorical (a Series or a bare ``pd.Categorical``); ``self.classes`` then
            holds them in column order.
        Xu : with ``approx="FITC"`` only (required there): the inducing inputs, one (m, d) set
            shared by the classes, or a list of c sets or a (c, m, d) array (one per class,
            all of one size m <= n); arrays or tensors of random variables (which then get
            gradients too).

        Returns
        -------
        The log-evidence tensor.
        """
        X_values, X_tensor = data_input(X, "X")
        X = check_inputs(X_values)
        check_kernel_columns(self.cov_func, X.shape[1])
        if data_input(y, "y")[1] is not None:
            raise ValueError("y as a pm.Data container serves binary labels; give multi-class labels as an array, "
                             "list or pandas object (X may be pm.Data)")
        codes, classes = as_class_codes(y, n_classes=self.likelihood.n_classes)
        if self.cov_funcs is not None and len(self.cov_funcs) != len(classes):
            raise ValueError(f"cov_func lists {len(self.cov_funcs)} covariances but y holds {len(classes)} classes")
        if X.shape[0] != codes.shape[0]:
            raise ValueError(f"X has {X.shape[0]} rows but y has {codes.shape[0]} labels")
        Xu = self.structure.check_inducing(Xu, X, n_classes=len(classes))
        model = pm.modelcontext(None)
        self._n_inputs = X.shape[1]
        self._record_training_container(X_tensor, X_values)
        if X_tensor is not None:
            X = checked_input_matrix(X_tensor, X.shape[1])
        self.X, self.y, self.name, self.classes, self.model = X, codes.astype(float), name, classes, model
        self._forget_kernel_functions()
        self.Xu = Xu
        priors, params = self._prior_inputs(), self.likelihood.params_tensor()
        hyper_names, hyper = self._hyperparameters(model, priors)
        log_z, *_, loo, n_iter, status = self._op(hyper_names)(*priors, params, self.y, hyper)
        return _add_evidence_terms(model, name, log_z, loo, n_iter, status)

    def conditional(self, name, Xnew, *, jitter=JITTER_DEFAULT, **kwargs):
        """The c latent functions at ``Xnew`` under q: a deterministic ``name`` of shape (m, c),
        columns in the order of ``self.classes`` (as ``predict``'s probabilities), so that
        ``pm.Categorical(..., p=pm.math.softmax(f, axis=-1))`` takes it directly.

        Drawn jointly (with their between-class correlations) as a ``pm.MvNormal`` named
        ``{name}_stacked`` of length c m (class-major); use with
        ``pm.sample_posterior_predictive(idata, var_names=[name])``. ``Xnew`` may be a
        ``pm.Data`` container (``pm.set_data`` then moves the predictions), as for the
        binary ``conditional``, whose note on PyMC's Potentials warning applies here too.
        """
        Xnew = self._check_new_inputs(Xnew, symbolic=True)
        self._check_training_container()
        mean, cov = self._build_predictive(Xnew, full_cov=True)
        cm = self.n_classes * Xnew.shape[0]
        with self._model(kwargs.pop("model", None)):
            f = pm.MvNormal(f"{name}_stacked", mu=mean.reshape((cm,)), cov=cov + jitter * pt.eye(cm), **kwargs)
            return pm.Deterministic(name, f.reshape((self.n_classes, Xnew.shape[0])).T)

    def predict(self, Xnew, *, point=None, idata=None, model=None, return_latent=False, max_draws=None,
                progressbar=True):
        """Class probabilities (m, c) at ``Xnew``, columns in the order of ``self.classes``.

        Parameters
        ----------
        point : dict of variable values (e.g. from ``pm.find_MAP``), or ``pymc_gpc.fit``'s
            ``FitResult``, from whose last solve's state at its point the solve then starts
            (as for the binary ``predict``).
        idata : a sampling result: the probabilities are averaged over its draws.
        model : the model to read the variables from (default: the one
            ``marginal_likelihood`` added the potential to).
        max_draws : with ``idata``, use at most this many draws, evenly thinned.
        return_latent : also return the latent means (c, m) and per-point c x c
            covariances (m, c, c) (with a leading draw axis with idata).
        progressbar : with ``idata``, show PyMC's progress bar over the draws.

        Returns
        -------
        p (rows sum to 1), or (p, mean, cov) with ``return_latent``.

        Notes
        -----
        The probabilities come from ``self.likelihood.predict`` with the likelihood's own
        ``predictive``: for ``Softmax`` the plug-in at Laplace's latent predictive mean
        (``"mean"``, the default) unless it was built with ``predictive="integrate"`` or
        ``"probit"``; for ``MultinomialProbit`` the integral over the latent predictive
        (``"integrate"``). As the binary ``predict``: one compiled kernel function, kept by the GP
        for later calls at other inputs, each draw's approximation warm-started from the
        previous draw's (``pymc_gpc.gp.prediction``).
        """
        return super().predict(Xnew, point=point, idata=idata, model=model, return_latent=return_latent,
                               max_draws=max_draws, progressbar=progressbar)

    def _prediction_inputs(self, Xnew):
        """[prior inputs..., theta, cross-covariances, prior variances (c, n*)]: the prior inputs
        are K (c, n, n), or with FITC K_uu, K_uf and diag K_ff (the crosses then K_u* (c, m, n*))."""
        crosses = self.structure.cross_covariances(self, self.X, Xnew)
        return [*self._prior_inputs(), self.likelihood.params_tensor(), crosses,
                pt.stack([f(Xnew, diag=True) for f in self.class_cov_funcs()])]

    def _probabilities(self, mean, cov, theta):
        """(m, c) probabilities from the latent means (c, m) and covariances (m, c, c)."""
        return self.likelihood.predict(mean.T, cov)


class MulticlassLaplace(MulticlassMarginal, MarginalLaplace):
    """``MarginalLaplace`` with a multi-class likelihood (softmax): see the module docstring."""

    approximation = "laplace-multiclass"


class MulticlassEP(MulticlassMarginal, MarginalEP):
    """``MarginalEP`` with a multi-class likelihood (multinomial probit, nested EP)."""

    approximation = "ep-multiclass"
