r"""Ordinal observation models: K ordered classes from one latent value per observation.

.. math::

    p(y = k \mid f) = F\Big(\frac{b_{k+1} - f}{s}\Big) - F\Big(\frac{b_k - f}{s}\Big),
    \qquad k = 0, \dots, K-1, \quad b_0 = -\infty,\ b_K = +\infty,

with ordered cutpoints b_1 < ... < b_{K-1} (Chu & Ghahramani 2005, "Gaussian processes for
ordinal regression", JMLR 6, eq. 4): F = Phi with a noise scale s = sigma (``OrderedProbit``,
their eq. 4 with Gaussian noise), or F the logistic function with s = 1 (``OrderedLogit``).
Labels are coded 0..K-1 (``validation.as_ordinal_codes``).

They join the binary engine's contract (``binary.py``): one latent value per site, the kinds
``ORDERED_PROBIT`` / ``ORDERED_LOGIT`` of the compiled dispatch ``tilted_site`` /
``log_lik_site``, and the parameters th = (b_1, ..., b_{K-1}[, sigma]). A site's likelihood
depends on at most three of them (its two cutpoints and sigma): the kernels return the
derivatives in those, and ``ordinal_tilted_dparams`` / ``ordinal_log_lik_dparams`` scatter
them into the (n, p) gradients the approximations sum. The compiled kernels live with the
dispatch that calls them, in ``binary.py``'s ordinal section (so that the dispatch module
imports nothing from here); this module holds the classes.

Every derivative comes from the partial derivatives of
g(u_1, u_2) = log(F(u_1) - F(u_2)) at u_1 = (b_hi - f)/s, u_2 = (b_lo - f)/s, written
with the ratios a_j = F'(u_j) / D, D = F(u_1) - F(u_2) (``_interval_partials``).
"""

import numpy as np

from .binary import (
    ORDERED_LOGIT,
    ORDERED_PROBIT,
    Likelihood,
    LogLikDerivatives,
    TiltedMoments,
    _is_symbolic,
    log_lik_map,
    ordinal_log_lik_dparams,
    ordinal_tilted_dparams,
    tilted_map,
)

# ---------------------------------------------------------------------------------
# The likelihood classes
# ---------------------------------------------------------------------------------


class OrdinalLikelihood(Likelihood):
    """Base of the ordinal likelihoods: K ordered classes, labels coded 0, ..., K-1.

    Constructed with the K-1 cutpoints (fixed numbers, a list of numbers or PyMC
    variables, or one vector-valued PyMC variable, e.g. with
    ``transform=pm.distributions.transforms.ordered``). Without cutpoints it is the
    template the evidence Ops build from the class (``ops.marginal``): its parameter
    vector then arrives at evaluation time, any number of cutpoints.
    """

    _abstract = True
    has_sigma = False

    def __init__(self, cutpoints=None, sigma=None):
        self._cutpoints = None if cutpoints is None else _as_cutpoints(cutpoints, type(self).__name__)
        self._sigma = sigma
        if self._cutpoints is None:
            self.param_names = ()
            self._values, self._params = (), None
            return
        n_cut = _cutpoint_count(self._cutpoints)
        self.param_names = tuple(f"cutpoint_{j + 1}" for j in range(n_cut)) + (("sigma",) if self.has_sigma else ())
        values = (self._cutpoints,) + ((sigma,) if self.has_sigma else ())
        self._values = values
        if any(_is_symbolic(v) for v in values):
            self._params = None
        else:
            flat = np.concatenate([np.asarray(self._cutpoints, float).reshape(-1)]
                                  + ([np.atleast_1d(np.asarray(sigma, float))] if self.has_sigma else []))
            self._params = self.check_params(flat)

    @property
    def n_classes(self):
        """K, the number of ordered classes (None for the Ops' template)."""
        return None if self._cutpoints is None else len(self.param_names) - self.has_sigma + 1

    def n_classes_of(self, th):
        """K for the parameter vector ``th``."""
        return np.size(th) - self.has_sigma + 1

    def params_tensor(self):
        r"""The parameters :math:`(b_1, \dots, b_{K-1})`, then :math:`\sigma` where the class has
        it, as one PyTensor vector."""
        import pytensor.tensor as pt

        cut = self._cutpoints
        if isinstance(cut, (list, tuple)):
            cut = pt.stack([pt.as_tensor_variable(v).astype("float64") for v in cut])
        parts = [pt.flatten(pt.as_tensor_variable(cut)).astype("float64")]
        if self.has_sigma:
            parts.append(pt.reshape(pt.as_tensor_variable(self._sigma).astype("float64"), (1,)))
        return pt.concatenate(parts)

    def check_params(self, params):
        r"""``params`` as a float array, or ValueError: finite, at least one cutpoint, the
        cutpoints strictly increasing, :math:`\sigma > 0`."""
        name = type(self).__name__
        try:
            params = np.asarray(params, dtype=float).reshape(-1)
        except (TypeError, ValueError):
            raise ValueError(f"{name} parameters must be numbers or PyTensor/PyMC variables, got {params!r}") from None
        if self.param_names and params.size != len(self.param_names):
            raise ValueError(f"{name} takes {len(self.param_names)} parameters {self.param_names}, got {params.size}")
        cut = params[: params.size - self.has_sigma]
        if cut.size < 1:
            raise ValueError(f"{name} needs at least one cutpoint, got {params.size} parameter(s)")
        if not np.all(np.isfinite(params)):
            raise ValueError(f"{name} parameters must be finite, got {params}")
        if not np.all(np.diff(cut) > 0.0):
            raise ValueError(f"{name} cutpoints must be strictly increasing, got {cut}")
        if self.has_sigma and not params[-1] > 0.0:
            raise ValueError(f"{name} needs sigma > 0, got sigma={params[-1]:g}")
        return params

    def check_labels(self, y, params=None):
        """Labels as floats 0..K-1 (K from the parameters), or ValueError naming the first bad one."""
        y = np.asarray(y, dtype=float).reshape(-1)
        k = self.n_classes_of(self.resolve_params(params))
        bad = ~((y == np.round(y)) & (y >= 0) & (y <= k - 1))
        if np.any(bad):
            raise ValueError(f"{type(self).__name__} labels must be integers 0..{k - 1} (K = {k} classes), "
                             f"got {y[np.flatnonzero(bad)[:5]].tolist()}")
        return y

    def tilted(self, y, mu, s2, params=None):
        r"""EP tilted moments at cavities :math:`N(\mu_i, s^2_i)`, with
        :math:`\partial \log Z_i / \partial \theta` as an (n, p) array."""
        th = self.resolve_params(params)
        y, mu, s2 = (np.ascontiguousarray(a, dtype=float).reshape(-1) for a in (y, mu, s2))
        out = tilted_map(self.kind, y, mu, s2, th)
        return TiltedMoments(out, th.size, ordinal_tilted_dparams(self.kind, y, mu, s2, th))

    def tilted_moments(self, out, y, mu, s2, th):
        """``TiltedMoments`` of ``tilted_map``'s rows ``out`` at cavities N(mu, s2), with the
        (n, p) parameter derivatives the rows do not hold."""
        y, mu, s2 = (np.ascontiguousarray(a, dtype=float).reshape(-1) for a in (y, mu, s2))
        return TiltedMoments(out, th.size, ordinal_tilted_dparams(self.kind, y, mu, s2, np.asarray(th, float)))

    def log_lik(self, y, f, params=None):
        r""":math:`\log p(y_i \mid f_i)` with its f-derivatives to third order and the
        :math:`\theta`-derivatives of the first three (Laplace)."""
        th = self.resolve_params(params)
        y, f = (np.ascontiguousarray(a, dtype=float).reshape(-1) for a in (y, f))
        out = log_lik_map(self.kind, y, f, th)
        return LogLikDerivatives(out, th.size, ordinal_log_lik_dparams(self.kind, y, f, th))

    def predict(self, mu, s2, params=None):
        r"""(n*, K) class probabilities :math:`p(y_* = k \mid \mu_*, s^2_*) = Z_k`, the likelihood
        of class k averaged over :math:`N(\mu_*, s^2_*)` (Chu & Ghahramani 2005, eq. 20); rows
        sum to one."""
        th = self.resolve_params(params)
        mu = np.asarray(mu, dtype=float).reshape(-1)
        s2 = np.asarray(s2, dtype=float).reshape(-1)
        k = self.n_classes_of(th)
        cols = [np.exp(tilted_map(self.kind, np.full(mu.size, float(c)), mu, s2, th)[0]) for c in range(k)]
        return np.column_stack(cols)

    def __repr__(self):
        if self._cutpoints is None:
            return f"{type(self).__name__}()"
        cut = self._cutpoints if self._params is None else self._params[: self._params.size - self.has_sigma]
        sig = f", sigma={self._sigma}" if self.has_sigma else ""
        return f"{type(self).__name__}(cutpoints={cut}{sig})"


def _as_cutpoints(cutpoints, name):
    """Cutpoints as given (symbolic vector or list of variables) or as a float array."""
    if _is_symbolic(cutpoints) or (isinstance(cutpoints, (list, tuple)) and any(_is_symbolic(v) for v in cutpoints)):
        return cutpoints if not isinstance(cutpoints, tuple) else list(cutpoints)
    try:
        arr = np.asarray(cutpoints, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(f"{name} cutpoints must be numbers or PyMC variables, got {cutpoints!r}") from None
    if arr.ndim > 1:
        raise ValueError(f"{name} cutpoints must be one-dimensional, got shape {arr.shape}")
    return arr.reshape(-1)


def _cutpoint_count(cutpoints):
    """The number of cutpoints (of a symbolic vector: its static length, else its shape's value)."""
    if isinstance(cutpoints, list):
        return len(cutpoints)
    if _is_symbolic(cutpoints):
        if cutpoints.type.ndim == 0:
            return 1
        if cutpoints.type.ndim != 1:
            raise ValueError(f"cutpoints must be a vector, got a {cutpoints.type.ndim}-D variable")
        length = cutpoints.type.shape[0]
        return int(length) if length is not None else int(cutpoints.shape[0].eval())
    return int(np.size(cutpoints))


class OrderedProbit(OrdinalLikelihood):
    r"""Ordered probit likelihood: K ordered classes from one latent value (Chu & Ghahramani 2005, eq. 4).

    .. math::

        p(y = k \mid f) = \Phi\Big(\frac{b_{k+1} - f}{\sigma}\Big) - \Phi\Big(\frac{b_k - f}{\sigma}\Big),
        \qquad b_0 = -\infty,\ b_K = +\infty.

    EP's tilted moments are in closed form (their sec. 3.2).

    Parameters
    ----------
    cutpoints : the K-1 strictly increasing cutpoints :math:`b_1 < \dots < b_{K-1}`:
        numbers, or PyMC variables (one vector, e.g.
        ``pm.Normal("c", 0, 3, shape=K-1, transform=pm.distributions.transforms.ordered)``,
        or a list of scalars).
    sigma : the latent noise scale :math:`\sigma > 0` (default 1); a number or a PyMC
        variable. The kernel amplitude, the cutpoints and sigma are only jointly
        identified: fix sigma or give it a prior.

    Examples
    --------
    >>> import pymc as pm, pymc_gpc
    >>> lik = pymc_gpc.OrderedProbit([-1.0, 1.0])          # three classes
    >>> lik.n_classes
    3
    >>> with pm.Model():
    ...     c = pm.Normal("c", 0, 3, shape=2, transform=pm.distributions.transforms.ordered,
    ...                   initval=[-1.0, 1.0])
    ...     lik = pymc_gpc.OrderedProbit(c, sigma=1.0)
    """

    kind = ORDERED_PROBIT
    has_sigma = True

    def __init__(self, cutpoints=None, sigma=1.0):
        super().__init__(cutpoints, sigma)


class OrderedLogit(OrdinalLikelihood):
    r"""Ordered logit likelihood: the proportional-odds model for K ordered classes.

    .. math::

        p(y = k \mid f) = \ell(b_{k+1} - f) - \ell(b_k - f), \qquad b_0 = -\infty,\ b_K = +\infty,

    with the logistic function :math:`\ell(u) = 1 / (1 + e^{-u})`. EP's tilted moments and the
    predictive by a composite Gauss-Legendre rule around the tilted mode, exact to about 1e-13
    at any latent variance up to 1e6 (``binary._ordered_logit_tilted_local``); Laplace in
    closed form.

    Parameters
    ----------
    cutpoints : the K-1 strictly increasing cutpoints, as for ``OrderedProbit``.

    Examples
    --------
    >>> import pymc_gpc
    >>> lik = pymc_gpc.OrderedLogit([-1.0, 0.0, 2.0])       # four classes
    >>> lik.predict([0.0], [1.0]).shape
    (1, 4)
    """

    kind = ORDERED_LOGIT

    def __init__(self, cutpoints=None):
        super().__init__(cutpoints)


ORDINAL_LIKELIHOODS = (OrderedProbit, OrderedLogit)
