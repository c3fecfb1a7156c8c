r"""GP classifiers for PyMC whose latent function is integrated out (EP, Laplace, mean field, ADF).

Shaped like ``pm.gp.Marginal``: construct with a covariance function and a
likelihood, then ``marginal_likelihood(name, X, y)`` adds

.. math::

    \log q(y \mid X, \theta) \approx \log \int \prod_i p(y_i \mid f_i)\,
        N(f; 0, K_\theta(X, X))\, df

to the model as a ``pm.Potential``. NUTS then samples the kernel and likelihood
hyperparameters only (Barber & Williams 1997; Kim & Ghahramani 2003), and
``predict`` averages p(y* = 1) over the posterior draws (Barber & Williams eq. 9).

Example
-------
>>> with pm.Model() as model:
...     log_w = pm.Normal("log_w", -3, 3, shape=d)   # inverse squared lengthscales
...     log_v0 = pm.Normal("log_v0", -3, 3)
...     cov = pt.exp(log_v0) * pm.gp.cov.ExpQuad(d, ls=pt.exp(-0.5 * log_w))
...     gp = pymc_gpc.MarginalEP(cov_func=cov, likelihood=pymc_gpc.likelihoods.Probit())
...     gp.marginal_likelihood("y", X=X, y=y)
...     idata = pm.sample()
>>> p = gp.predict(Xnew, idata=idata)
"""

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
from pymc.gp.util import JITTER_DEFAULT
from pytensor.graph.traversal import ancestors

from .likelihoods.binary import Likelihood, laplace_unsupported_message
from .ops.marginal import ApproxMarginalOp, LatentPredictiveOp
from .validation import as_signed_labels, check_inputs

__all__ = ["MarginalEP", "MarginalLaplace", "MarginalMeanField", "MarginalADF"]


class _ApproximateMarginal:
    """Shared machinery; subclasses set ``approximation``."""

    approximation = None

    def __new__(cls, *args, **kwargs):
        """A multi-class likelihood (``likelihoods.multiclass``) builds the multi-class
        variant of this classifier (``gp_multiclass``), or raises ValueError if this
        approximation cannot integrate it out."""
        from .likelihoods.multiclass import MulticlassLikelihood

        likelihood = kwargs.get("likelihood")
        if isinstance(likelihood, MulticlassLikelihood) and not hasattr(cls, "n_classes"):
            from .gp_multiclass import multiclass_class

            cls = multiclass_class(cls, likelihood)
        return super().__new__(cls)

    def __init__(self, *, cov_func, likelihood, jitter=JITTER_DEFAULT, **solver_options):
        if not isinstance(likelihood, Likelihood):
            raise ValueError(
                f"likelihood must be a pymc_gpc.likelihoods.Likelihood instance, got {likelihood!r}"
            )
        if not callable(cov_func):
            raise ValueError(f"cov_func must be a pm.gp.cov covariance function, got {cov_func!r}")
        if not jitter >= 0:
            raise ValueError(f"jitter must be >= 0, got {jitter}")
        self.cov_func = cov_func
        self.likelihood = likelihood
        self.jitter = float(jitter)
        self.solver_options = tuple(sorted(solver_options.items()))
        self.X = self.y = self.name = None

    # -- building blocks -------------------------------------------------------------

    def _kernel(self, X):
        n = X.shape[0]
        return self.cov_func(X) + self.jitter * pt.eye(n)

    def _op(self, hyper_names=()):
        return ApproxMarginalOp(self.approximation, type(self.likelihood), self.solver_options, hyper_names)

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

    def _check_new_inputs(self, Xnew):
        self._check_fitted()
        Xnew = check_inputs(Xnew, name="Xnew")
        if Xnew.shape[1] != self.X.shape[1]:
            raise ValueError(
                f"Xnew has {Xnew.shape[1]} columns but the training inputs X have {self.X.shape[1]}"
            )
        return Xnew

    def _build_predictive(self, Xnew, full_cov):
        op = LatentPredictiveOp(self.approximation, type(self.likelihood), self.solver_options, full_cov)
        K_cross = self.cov_func(self.X, Xnew)
        K_star = self.cov_func(Xnew) if full_cov else self.cov_func(Xnew, diag=True)
        return op(self._kernel(self.X), self.likelihood.params_tensor(), self.y, K_cross, K_star)

    # -- public verbs ----------------------------------------------------------------

    def marginal_likelihood(self, name, X, y):
        """Add log q(y | X, theta) to the model as a potential named ``name``.

        Parameters
        ----------
        name : name of the potential; diagnostics are added as deterministics
            ``{name}_n_iter`` and ``{name}_status`` (0 converged, 1 not converged after
            the retries: the value is used and an ``ApproximationFailedWarning`` names
            the hyperparameter values; 2 failed: log q = -inf, the sampler rejects), and
            the per-observation log predictive as ``{name}_loo`` (used by
            ``pymc_gpc.add_log_likelihood`` for ``az.loo``).
        X : (n, d) inputs (array, DataFrame, or 1-D for one input dimension).
        y : (n,) binary labels: {-1, +1}, {0, 1}, booleans, or two distinct strings
            (more classes: a multi-class likelihood, ``gp_multiclass``).

        Returns
        -------
        The log-evidence tensor.
        """
        X = check_inputs(X)
        y = as_signed_labels(y)
        if X.shape[0] != y.shape[0]:
            raise ValueError(f"X has {X.shape[0]} rows but y has {y.shape[0]} labels")
        model = pm.modelcontext(None)
        self.X, self.y, self.name = X, y, name
        K, params = self._kernel(X), self.likelihood.params_tensor()
        hyper_names, hyper = self._hyperparameters(model, [K, params])
        log_z, _, _, loo, n_iter, status = self._op(hyper_names)(K, params, y, hyper)
        obs_dim = f"{name}_obs"
        if obs_dim not in model.coords:
            model.add_coord(obs_dim, np.arange(y.shape[0]))
        pm.Potential(name, log_z)
        pm.Deterministic(f"{name}_loo", loo, dims=obs_dim)
        pm.Deterministic(f"{name}_n_iter", n_iter)
        pm.Deterministic(f"{name}_status", status)
        return log_z

    def conditional(self, name, Xnew, *, jitter=JITTER_DEFAULT, **kwargs):
        """The latent f* at ``Xnew`` under q, as a ``pm.MvNormal`` (for posterior predictive).

        Use with ``pm.sample_posterior_predictive(idata, var_names=[name])``; class
        probabilities follow as ``likelihood.predict`` of the draws' mean and variance,
        or directly from ``predict``.
        """
        Xnew = self._check_new_inputs(Xnew)
        mean, cov = self._build_predictive(Xnew, full_cov=True)
        cov = cov + jitter * pt.eye(Xnew.shape[0])
        return pm.MvNormal(name, mu=mean, cov=cov, **kwargs)

    def predict(self, Xnew, *, point=None, idata=None, model=None, return_latent=False, max_draws=None):
        """Class probabilities p(y* = +1) at ``Xnew``.

        Parameters
        ----------
        point : dict of variable values (e.g. from ``pm.find_MAP`` or ``pymc_gpc.fit``).
        idata : a sampling result: p is averaged over its posterior draws
            (Barber & Williams eq. 9).
        max_draws : with ``idata``, use at most this many draws, evenly thinned.
        return_latent : also return the latent mean and variance (per draw with idata).

        Returns
        -------
        p, or (p, mean, var) with ``return_latent``.
        """
        if (point is None) == (idata is None):
            raise ValueError("give exactly one of point= or idata=")
        Xnew = self._check_new_inputs(Xnew)
        model = pm.modelcontext(model)
        mean, var = self._build_predictive(Xnew, full_cov=False)
        theta = self.likelihood.params_tensor()
        inputs = [v for v in ancestors([mean, var, theta]) if v in model.named_vars.values()]
        fn = pytensor.function(inputs, [mean, var, theta], on_unused_input="ignore")
        names = [v.name for v in inputs]
        points = [point] if point is not None else _posterior_points(idata, names, max_draws)
        means, vars_, probs = [], [], []
        for pt_ in points:
            missing = [n for n in names if n not in pt_]
            if missing:
                raise ValueError(f"point is missing values for {missing}")
            m, v, th = fn(*[np.asarray(pt_[n]) for n in names])
            means.append(m)
            vars_.append(v)
            probs.append(self.likelihood.predict(m, v, th))
        p = np.mean(probs, axis=0)
        if return_latent:
            return p, np.squeeze(np.array(means)), np.squeeze(np.array(vars_))
        return p


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
    """GP classifier whose latent function is integrated out by Expectation Propagation.

    Parameters
    ----------
    cov_func : any ``pm.gp.cov`` covariance (sums and products included).
    likelihood : a ``pymc_gpc.likelihoods`` instance; its parameters may be random variables.
    jitter : added to the diagonal of K.
    **solver_options : passed to ``pymc_gpc.ep`` (method, damping, tol, max_sweeps);
        while sampling, tol defaults to 1e-2 (``pymc_gpc.ops.marginal.SAMPLING_DEFAULTS``),
        while ``pymc_gpc.fit`` and prediction use the engine's 1e-8.
    """

    approximation = "ep"


class MarginalLaplace(_ApproximateMarginal):
    """GP classifier whose latent function is integrated out by Laplace's method.

    Parameters as for ``MarginalEP``; solver options go to ``pymc_gpc.laplace``.
    The step likelihood has no Laplace approximation (ValueError).
    """

    approximation = "laplace"

    def __init__(self, *, cov_func, likelihood, jitter=JITTER_DEFAULT, **solver_options):
        if isinstance(likelihood, Likelihood) and not likelihood.supports_laplace:
            raise ValueError(laplace_unsupported_message(likelihood))
        super().__init__(cov_func=cov_func, likelihood=likelihood, jitter=jitter, **solver_options)


class MarginalMeanField(_ApproximateMarginal):
    """GP classifier whose latent function is integrated out by a mean-field method.

    Csato, Fokoue, Opper, Schottky & Winther (2000), sec. 3-4 (``pymc_gpc.meanfield``).

    Parameters
    ----------
    cov_func, likelihood, jitter : as for ``MarginalEP``; every likelihood is supported.
    variant : "ensemble" (mean field I: the potential is -F of eq. 7, a lower bound on
        the log evidence) or "naive" (mean field II: -F of eq. 10, not a bound).
    **solver_options : passed to ``pymc_gpc.meanfield`` (damping, tol, max_sweeps).
    """

    approximation = "meanfield"

    def __init__(self, *, cov_func, likelihood, variant="ensemble", jitter=JITTER_DEFAULT, **solver_options):
        if variant not in ("ensemble", "naive"):
            raise ValueError(f"variant must be 'ensemble' or 'naive', got {variant!r}")
        super().__init__(cov_func=cov_func, likelihood=likelihood, jitter=jitter, variant=variant,
                         **solver_options)


class MarginalADF(_ApproximateMarginal):
    """GP classifier with the sequential online (ADF) approximation (Csato et al. 2000, sec. 5).

    The potential is sum_t log <p(y_t | a)>_{t-1} from one pass in data order
    (``sweeps=1``), or EP's log Z after revisits (``sweeps > 1``). It has **no
    gradient**: asking for one (``pytensor.grad``, an explicit ``pm.NUTS``) raises
    ``NullTypeGradError`` naming ADF, so ``pm.sample`` assigns a gradient-free step
    (Slice) by itself and ``pm.find_MAP`` falls back to Powell with a warning. Use it
    to evaluate and compare evidences, or with gradient-free samplers.

    Parameters
    ----------
    cov_func, likelihood, jitter : as for ``MarginalEP``; every likelihood is supported.
    sweeps : passes through the data (``pymc_gpc.adf``).
    """

    approximation = "adf"

    def __init__(self, *, cov_func, likelihood, sweeps=1, jitter=JITTER_DEFAULT, **solver_options):
        super().__init__(cov_func=cov_func, likelihood=likelihood, jitter=jitter, sweeps=sweeps,
                         **solver_options)
