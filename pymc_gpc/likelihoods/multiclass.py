r"""Observation models for c >= 2 classes: c latent values per observation.

One contract for every multi-class likelihood (the GPML / GPstuff convention: the
approximations ask a likelihood only for what they need):

``approximations``
    the approximations that can integrate it out ("laplace": log p(y|f) concave with
    the derivatives below; "ep": tilted moments).
``log_lik(y, F)``
    Laplace: log p(y_i | f_i) (n,) and the class probabilities (c, n) from which the
    gradient g = Y - pi and the negative Hessian W = diag(pi) - pi pi^T follow (softmax).
``predict(mean, cov, predictive=None)``
    (m, c) class probabilities, rows summing to 1, from the latent predictive N(mean, cov):
    p(y* = k) = E[p(k | f*)] ("integrate"), p(k | mean) ("mean") or, for the softmax, a
    probit-style approximation ("probit"); each likelihood's default ``predictive`` is the
    one closest to exact sampling (its class docstring has the figures).
``expected_prob(y, mean, cov)``
    E[p(y_i | f_i)] under c-variate Gaussians (the LOO predictive over a cavity).

Labels are class codes 0..c-1 (``pymc_gpc.validation.as_class_codes``); latent values are
stored class-major, F[k, i] = f_k(x_i), so that each class's n values form one GP.
Expectations of the softmax over a Gaussian have no closed form: they use a fixed set of
antithetic quasi-random normal draws (Rasmussen & Williams 2006, Alg. 3.4, line 10, with
scrambled Sobol points), the same at every call, so results are deterministic and
smooth in the Gaussian's parameters.
"""

import math

import numpy as np
from numba import njit

from ..numerics.special import log_ndtr, log_ndtr_array

# Draws for Gaussian expectations (per dimension c and number, cached).
_DRAWS = {}
_BLOCK = 1 << 18  # latent values (classes x rows x draws) per block of ``predict``

# Gauss-Hermite rule (probabilists') for the integral over u in the multinomial probit.
_U_NODES, _U_WEIGHTS = np.polynomial.hermite_e.hermegauss(32)
_U_WEIGHTS = _U_WEIGHTS / np.sqrt(2.0 * np.pi)
_INV_SQRT2 = 1.0 / math.sqrt(2.0)


def standard_draws(c, size):
    """``size`` fixed antithetic quasi-random draws from N(0, I_c), shape (size, c):
    a scrambled Sobol sequence (fixed seed) through the normal quantile function."""
    if (c, size) not in _DRAWS:
        from scipy.special import ndtri
        from scipy.stats import qmc

        u = qmc.Sobol(d=c, scramble=True, seed=20260 + c).random(size // 2)
        z = ndtri(np.clip(u, 1e-12, 1.0 - 1e-12))
        _DRAWS[c, size] = np.concatenate([z, -z])
    return _DRAWS[c, size]


def _cov_factor(cov):
    """Cholesky factors (m, c, c) of m covariances, with a 1e-12 relative jitter."""
    cov = np.asarray(cov, float)
    c = cov.shape[-1]
    jitter = 1e-12 * np.maximum(np.trace(cov, axis1=1, axis2=2) / c, 1e-300)
    return np.linalg.cholesky(cov + jitter[:, None, None] * np.eye(c))


@njit(nogil=True, cache=True)
def _draw(mean, L, Z, i, s, f):
    """f <- mean_i + L_i z_s (f (c,)): draw s of N(mean_i, L_i L_i^T) from the standard draws Z
    (``standard_draws``), L_i lower triangular (``_cov_factor``)."""
    for k in range(f.shape[0]):
        v = mean[i, k]
        for j in range(k + 1):
            v += L[i, k, j] * Z[s, j]
        f[k] = v


@njit(nogil=True, cache=True)
def _softmax_expected_prob(y, mean, L, Z):
    """mean over the draws z of pi_{y_i}(mean_i + L_i z): the softmax's ``expected_prob``
    in one compiled pass (only class y_i's probability, no (c, m, size) array)."""
    m, c = mean.shape
    out = np.empty(m)
    f = np.empty(c)
    for i in range(m):
        yi = y[i]
        acc = 0.0
        for s in range(Z.shape[0]):
            _draw(mean, L, Z, i, s, f)
            tot = 1.0
            for k in range(c):
                if k != yi:
                    tot += np.exp(f[k] - f[yi])
            acc += 1.0 / tot
        out[i] = acc / Z.shape[0]
    return out


def gaussian_draws(mean, cov, size):
    """Draws of f ~ N(mean[i], cov[i]) for each of m Gaussians, class-major: (c, m, size).

    F[k] = mean[:, k] + L[:, k, :] Z^T, one BLAS product per class; class-major keeps the
    reductions over classes elementwise across c contiguous slabs."""
    mean = np.asarray(mean, float)
    c = mean.shape[1]
    L = _cov_factor(cov)
    Zt = standard_draws(c, size).T
    F = np.empty((c, mean.shape[0], size))
    for k in range(c):
        np.matmul(L[:, k, :], Zt, out=F[k])
        F[k] += mean[:, k, None]
    return F


def pairwise_probit_softmax(mean, cov):
    r"""Probit-style approximation of :math:`E[\operatorname{softmax}(f)]`, :math:`f \sim N(\mu_i, \Sigma_i)`,
    through the pairwise differences: (m, c) rows summing to 1.

    Derivation. With :math:`d_{kj} = f_k - f_j` and the logistic sigmoid :math:`\sigma`,
    :math:`1/\sigma(d) = 1 + e^{-d}`, so

    .. math:: \operatorname{softmax}_k(f) = \frac{1}{1 + \sum_{j \ne k} e^{-d_{kj}}}
              = \frac{1}{2 - c + \sum_{j \ne k} 1 / \sigma(d_{kj})}.

    Each :math:`d_{kj} \sim N(\mu_k - \mu_j,\ v_{kj})`, :math:`v_{kj} = \Sigma_{kk} + \Sigma_{jj}
    - 2 \Sigma_{kj}`; replacing each :math:`\sigma(d_{kj})` by MacKay's (1992) approximation of its
    expectation, :math:`E[\sigma(d_{kj})] \approx \sigma(\kappa_{kj} (\mu_k - \mu_j))`,
    :math:`\kappa_{kj} = (1 + \pi v_{kj} / 8)^{-1/2}` (Daunizeau 2017, "Semi-analytical
    approximations to statistical moments of sigmoid and softmax mappings", sec. 3), gives

    .. math:: \tilde p_k = \Big(1 + \sum_{j \ne k} e^{-\kappa_{kj} (\mu_k - \mu_j)}\Big)^{-1},
              \qquad p_k = \tilde p_k / \textstyle\sum_l \tilde p_l.

    Only differences of the means and the differences' variances enter, so
    :math:`p(\mu + a \mathbf 1) = p(\mu)` for any common shift :math:`a` (the softmax's own
    invariance, which scaling each :math:`\mu_k` by its own :math:`(1 + \pi \Sigma_{kk}/8)^{-1/2}`
    breaks); with no variance it is the softmax of :math:`\mu`, and for c = 2 it is MacKay's
    binary approximation :math:`\sigma(\kappa_{12} (\mu_1 - \mu_2))` exactly. Computed in logs:
    :math:`\log \tilde p_k = -\operatorname{logsumexp}_j(-\kappa_{kj}(\mu_k - \mu_j))` (the
    j = k term is 0).

    mean : (m, c); cov : (m, c, c).
    """
    from scipy.special import logsumexp

    mean, cov = np.asarray(mean, float), np.asarray(cov, float)
    if mean.ndim != 2 or cov.shape != mean.shape + mean.shape[1:]:
        raise ValueError(f"pairwise_probit_softmax needs mean (m, c) and cov (m, c, c); got {mean.shape}, {cov.shape}")
    diag = np.diagonal(cov, axis1=1, axis2=2)
    var = np.maximum(diag[:, :, None] + diag[:, None, :] - 2.0 * cov, 0.0)  # v_kj (m, c, c)
    diff = mean[:, :, None] - mean[:, None, :]  # mu_k - mu_j
    log_p = -logsumexp(-diff / np.sqrt(1.0 + np.pi / 8.0 * var), axis=2)
    p = np.exp(log_p - log_p.max(axis=1, keepdims=True))
    return p / p.sum(axis=1, keepdims=True)


class MulticlassLikelihood:
    r"""Base class of likelihoods with one latent function per class.

    ``n_classes`` is set from the data (``marginal_likelihood``), or given here.
    Subclasses set ``approximations`` and implement ``log_prob(y, F)``
    (:math:`\log p(y_i \mid f_i)` for latent values of shape (c, ...)) and
    ``probabilities(F)`` ((c, ...) class probabilities).

    Examples
    --------
    >>> import pymc_gpc
    >>> isinstance(pymc_gpc.likelihoods.Softmax(), pymc_gpc.likelihoods.MulticlassLikelihood)
    True
    """

    approximations: tuple = ()
    param_names: tuple = ()
    n_params = 0
    log_concave = True  # as ``Likelihood.log_concave``: softmax and the multinomial probit are log-concave in f
    n_draws = 4096  # draws for Gaussian expectations (``predict``)
    predictives = ("integrate", "mean")  # what ``predict`` can return (its docstring)
    predictive = "integrate"  # the default (set per subclass, by the measurements there)

    cov_scale = 1.0  # the latent predictive covariance's factor in ``predict`` (its docstring)

    def __init__(self, n_classes=None, predictive=None, cov_scale=1.0):
        if n_classes is not None and (int(n_classes) != n_classes or n_classes < 2):
            raise ValueError(f"n_classes must be an integer >= 2, got {n_classes!r}")
        self.n_classes = None if n_classes is None else int(n_classes)
        if predictive is not None:
            self.predictive = self._check_predictive(predictive)
        try:
            scale = float(cov_scale)
        except (TypeError, ValueError):
            raise ValueError(f"cov_scale must be a number >= 0, got {cov_scale!r}") from None
        if not (np.isfinite(scale) and scale >= 0.0):
            raise ValueError(f"cov_scale must be a finite number >= 0, got {cov_scale!r}")
        self.cov_scale = scale

    def params_tensor(self):
        """No parameters: an empty PyTensor vector (the Op's parameter input)."""
        import pytensor.tensor as pt

        return pt.zeros((0,), dtype="float64")

    def check_params(self, params):
        params = np.asarray(params, dtype=float).reshape(-1)
        if params.size:
            raise ValueError(f"{type(self).__name__} has no parameters, got {params.size}")
        return params

    def probabilities(self, F):
        raise NotImplementedError

    def predict(self, mean, cov, size=None, predictive=None):
        r"""Class probabilities (m, c) at m new points from the latent predictive :math:`N(\mu_i, \Sigma_i)`.

        mean : (m, c), the :math:`\mu_i`; cov : (m, c, c), the :math:`\Sigma_i`; size : number of
        draws (default ``n_draws``); predictive : one of ``predictives`` (default: this
        likelihood's ``predictive``):

        * "integrate": :math:`p_k = E[p(k \mid f_*)]` under :math:`f_* \sim N(\mu_i, \Sigma_i)`
          (R&W 2006, sec. 3.5 and Alg. 3.4, line 10), by the fixed quasi-random draws;
        * "mean": :math:`p_k = p(k \mid \mu_i)`, the plug-in at the latent predictive mean (the
          "MAP prediction" of R&W 2006, sec. 3.4.2);
        * "probit" (softmax only): the probit-style approximation of the Gaussian-softmax
          integral on the pairwise differences (``pairwise_probit_softmax``), invariant to a
          shift common to all classes as the softmax is.

        "integrate" and "probit" use :math:`s \Sigma_i`, s the likelihood's ``cov_scale``
        (default 1): s = 0 gives the plug-in, and an s between 0 and 1, chosen on held-out
        rows, tempers a latent variance that MAP-II's large amplitudes inflate.
        """
        cov = np.asarray(cov, float)
        return self._predict(mean, cov * self.cov_scale if self.cov_scale != 1.0 else cov, size, predictive)

    def _predict(self, mean, cov, size, predictive):
        """``predict`` with the covariance as given (no ``cov_scale``)."""
        predictive = self._check_predictive(predictive)
        mean = np.asarray(mean, float)
        if predictive == "mean":
            p = self.probabilities(mean.T).T
        elif predictive == "probit":
            p = pairwise_probit_softmax(mean, np.asarray(cov, float))
        else:
            # in blocks of rows, so that the draws and the u-quadrature stay a few MB
            p = self._integrated(mean, np.asarray(cov, float), size or self.n_draws)
        return p / p.sum(axis=1, keepdims=True)

    def _integrated(self, mean, cov, size):
        """(m, c): the mean over the fixed draws f of ``probabilities(f)``, f ~ N(mean[i], cov[i])."""
        rows = max(1, _BLOCK // (mean.shape[1] * size))
        blocks = [self.probabilities(gaussian_draws(mean[r:r + rows], cov[r:r + rows], size)).mean(axis=-1).T
                  for r in range(0, mean.shape[0], rows)]
        return np.concatenate(blocks or [np.empty((0, mean.shape[1]))])

    def _check_predictive(self, predictive):
        predictive = self.predictive if predictive is None else predictive
        if predictive not in self.predictives:
            raise ValueError(f"predictive must be one of {self.predictives} for {type(self).__name__}, "
                             f"got {predictive!r}")
        return predictive

    def expected_prob(self, y, mean, cov, size=None):
        r""":math:`E[p(y_i \mid f_i)]` under :math:`f_i \sim N(\mu_i, \Sigma_i)` (``mean[i]``, ``cov[i]``): (m,)."""
        p = self._predict(mean, np.asarray(cov, float), size, "integrate")  # the cavity's own covariance
        return p[np.arange(p.shape[0]), np.asarray(y, dtype=int)]

    def __repr__(self):
        own = [f"predictive={self.predictive!r}"] if self.predictive != type(self).predictive else []
        own += [f"cov_scale={self.cov_scale!r}"] if self.cov_scale != 1.0 else []
        return f"{type(self).__name__}({', '.join(own)})"


@njit(nogil=True, cache=True)
def _softmax_log_lik(y, F):
    """log pi_{y_i}(f_i) (n,) and pi (c, n), column by column with the largest f_k subtracted
    (log-sum-exp), in one compiled pass (called at every Newton step and line-search trial)."""
    c, n = F.shape
    lp = np.empty(n)
    pi = np.empty((c, n))
    for i in range(n):
        m = F[0, i]
        for k in range(1, c):
            m = max(m, F[k, i])
        total = 0.0
        for k in range(c):
            e = math.exp(F[k, i] - m)
            pi[k, i] = e
            total += e
        lse = m + math.log(total)
        for k in range(c):
            pi[k, i] /= total
        lp[i] = F[y[i], i] - lse
    return lp, pi


class Softmax(MulticlassLikelihood):
    r"""Softmax likelihood, :math:`p(y = k \mid f) = e^{f_k} / \sum_j e^{f_j}` (Williams & Barber 1998).

    Log-concave; integrated out by Laplace's method (``MarginalLaplace``), with
    :math:`W = \operatorname{diag}(\pi) - \pi \pi^\top` per observation (Rasmussen & Williams
    2006, sec. 3.5).

    Parameters
    ----------
    n_classes : int, optional
        The number of classes c (default: from the labels given to ``marginal_likelihood``).
    predictive : {"mean", "integrate", "probit"}, optional
        What ``predict`` returns (default ``"mean"``): the softmax of Laplace's latent
        predictive mean, :math:`\pi(E_q[f_*])`; the average of the softmax over Laplace's latent
        predictive Gaussian (R&W 2006, sec. 3.5); or the probit-style approximation of
        that average on the classes' pairwise differences (``pairwise_probit_softmax``).
    cov_scale : float >= 0, optional
        The factor s on the latent predictive covariance for ``"integrate"`` and ``"probit"``
        (default 1): the softmax averaged over :math:`N(\mu_*, s \Sigma_*)`, between the
        plug-in (s = 0) and the full average (s = 1); choose it on held-out rows
        (docs: "Large data", several classes).

    Notes
    -----
    Why the plug-in is the default: Laplace's mode lies closer to zero than the posterior
    mean, and its Gaussian is centred there (Kuss & Rasmussen 2005, sec. 7), so integrating
    the softmax over it pulls the probabilities further towards uniform than the exact
    predictive does; the plug-in at the mean ignores the spread, and the two errors partly
    cancel: against exact sampling it was the closest of the three
    (benchmarks/results/multiclass_gold.md).

    Examples
    --------
    >>> import pymc as pm, pymc_gpc
    >>> lik = pymc_gpc.likelihoods.Softmax()
    >>> covs = [pm.gp.cov.ExpQuad(2, ls=1.0) for _ in range(3)]  # one kernel per class
    >>> gp = pymc_gpc.MarginalLaplace(cov_func=covs, likelihood=lik)
    """

    approximations = ("laplace",)
    predictives = ("integrate", "mean", "probit")
    predictive = "mean"

    def log_lik(self, y, F):
        r""":math:`\log p(y_i \mid f_i)` (n,) and the class probabilities :math:`\pi` (c, n) (``_softmax_log_lik``)."""
        y, F = np.asarray(y, dtype=np.int64), np.asarray(F, dtype=float)
        if F.ndim != 2 or y.shape != (F.shape[1],) or (y.size and not 0 <= y.min() <= y.max() < F.shape[0]):
            raise ValueError(f"log_lik needs F (c, n) and n class codes in 0..c-1; got F {F.shape}, y {y.shape} "
                             f"with codes {np.unique(y)[:10].tolist()}")
        return _softmax_log_lik(y, F)

    def probabilities(self, F):
        e = np.exp(F - F.max(axis=0))
        e /= e.sum(axis=0)
        return e

    def expected_prob(self, y, mean, cov, size=None):
        r""":math:`E[\pi_{y_i}(f_i)]` under :math:`f_i \sim N(\mu_i, \Sigma_i)` with the same draws as ``predict``
        (whose rows sum to 1 draw by draw for the softmax, so no normalisation): (m,)."""
        mean = np.ascontiguousarray(mean, dtype=float)
        Z = standard_draws(mean.shape[1], size or self.n_draws)
        return _softmax_expected_prob(np.asarray(y, dtype=np.int64), mean, _cov_factor(cov), Z)


# The u-rule's nodes by decreasing weight, with the log weights: ``_probit_log_prob`` meets
# the heaviest nodes first and can pass over those that cannot reach the running maximum.
_U_ORDER = np.argsort(-_U_WEIGHTS)
_U_ORDER_NODES, _U_ORDER_WEIGHTS = _U_NODES[_U_ORDER], _U_WEIGHTS[_U_ORDER]
_U_ORDER_LOG_WEIGHTS = np.log(_U_ORDER_WEIGHTS)
_U_ORDER_TAIL = np.cumsum(_U_ORDER_WEIGHTS[::-1])[::-1].copy()
# A term of ``_probit_prob`` below this fraction of the running sum is dropped: 32 of them
# stay under 2^-60 of the sum.
_SKIP = 2.0**-65
# A node term below the running maximum by more than this is passed over: e^-45 < 3e-20,
# so all 32 nodes' passed-over terms together stay below 1e-18 of the sum, under the rounding
# of a double.
_NEGLIGIBLE_LOG = 45.0
# Phi(z) rounds to 1.0 in double precision from here on (1 - Phi(8.3) < 6e-17, under half
# the spacing of doubles below 1).
_PHI_IS_ONE = 8.3
# Below this a class's u-integral is redone in logs (``_probit_log_prob``): the products of
# Phi's may have lost digits to underflow.
_TINY = 1e-250


@njit(nogil=True, cache=True)
def _probit_log_prob(f, k, nodes, log_w, s):
    """log p(y = k | f) = log sum_q w_q prod_{j != k} Phi(u_q + f_k - f_j) (``log_prob_all``),
    the node terms in s (work buffer), those that cannot reach the sum's precision skipped
    (each factor is at most 1, so a term only falls as its factors accumulate)."""
    c = f.shape[0]
    top = -np.inf
    for q in range(nodes.shape[0]):
        acc = log_w[q]
        if acc < top - _NEGLIGIBLE_LOG:
            s[q] = -np.inf
            continue
        for j in range(c):
            if j != k:
                acc += log_ndtr(nodes[q] + f[k] - f[j])
                if acc < top - _NEGLIGIBLE_LOG:
                    break
        s[q] = acc
        top = max(top, acc)
    total = 0.0
    for q in range(nodes.shape[0]):
        total += math.exp(s[q] - top)
    return top + math.log(total)


@njit(nogil=True, cache=True)
def _probit_prob(f, k, nodes, w, tail):
    """p(y = k | f) = sum_q w_q prod_{j != k} Phi(u_q + f_k - f_j) by products of Phi (no
    logarithms; Phi(z) = erfc(-z / sqrt 2) / 2, 1 from ``_PHI_IS_ONE`` on), the nodes by
    decreasing weight (``tail[q]``: the weight of node q and all after it). A term that has
    fallen below ``_SKIP`` of the running sum is dropped (each factor is at most 1, so it
    cannot rise again), and so are all later nodes once their whole weight is below that:
    at most 32 such terms, together under 2^-60 of the sum, below a double's rounding."""
    c = f.shape[0]
    total = 0.0
    for q in range(nodes.shape[0]):
        floor = _SKIP * total
        if tail[q] < floor:
            break
        prod = w[q]
        for j in range(c):
            if j != k:
                z = nodes[q] + f[k] - f[j]
                if z < _PHI_IS_ONE:
                    prod *= 0.5 * math.erfc(-z * _INV_SQRT2)
                    if prod < floor:
                        prod = 0.0
                        break
        total += prod
    return total


@njit(nogil=True, cache=True)
def _probit_expected_probs(mean, L, Z, nodes, w, tail, log_w):
    """(m, c): for each i, the mean over the draws z of p(. | f) normalised over the classes
    (``MultinomialProbit.probabilities``), f = mean_i + L_i z: ``MulticlassLikelihood.predict``'s
    "integrate" for the multinomial probit without its (draws, classes, nodes) arrays."""
    m, c = mean.shape
    out = np.zeros((m, c))
    f, lp, s = np.empty(c), np.empty(c), np.empty(nodes.shape[0])
    for i in range(m):
        for d in range(Z.shape[0]):
            _draw(mean, L, Z, i, d, f)
            top = -np.inf
            for k in range(c):
                p = _probit_prob(f, k, nodes, w, tail)
                lp[k] = math.log(p) if p > _TINY else _probit_log_prob(f, k, nodes, log_w, s)
                top = max(top, lp[k])
            total = 0.0
            for k in range(c):
                lp[k] = math.exp(lp[k] - top)
                total += lp[k]
            for k in range(c):
                out[i, k] += lp[k] / total
        for k in range(c):
            out[i, k] /= Z.shape[0]
    return out


class MultinomialProbit(MulticlassLikelihood):
    r"""Multinomial probit likelihood (Riihimaki, Jylanki & Vehtari 2013, eq. 3).

    .. math::

        p(y = k \mid f) = E_u\Big[\prod_{j \ne k} \Phi(u + f_k - f_j)\Big], \qquad u \sim N(0, 1);

    integrated out by nested EP
    (``MarginalEP``). Here the u-integral is a 32-node Gauss-Hermite rule.

    Parameters
    ----------
    n_classes : int, optional
        The number of classes c (default: from the labels given to ``marginal_likelihood``).
    predictive : {"integrate", "mean"}, optional
        What ``predict`` returns (default ``"integrate"``): the probabilities averaged over
        nested EP's latent predictive Gaussian, which is close to the exact one, or the
        plug-in at its mean (further from exact sampling;
        benchmarks/results/multiclass_gold.md).
    cov_scale : float >= 0, optional
        The factor on the latent predictive covariance for ``"integrate"`` (default 1), as
        ``Softmax``'s.

    Examples
    --------
    >>> import pymc as pm, pymc_gpc
    >>> lik = pymc_gpc.likelihoods.MultinomialProbit()
    >>> gp = pymc_gpc.MarginalEP(cov_func=pm.gp.cov.ExpQuad(2, ls=1.0), likelihood=lik)
    """

    approximations = ("ep",)
    n_draws = 1024  # each draw costs a u-quadrature

    def _integrated(self, mean, cov, size):
        """(m, c): ``probabilities`` averaged over the fixed draws, in one compiled pass
        (``_probit_expected_probs``) instead of arrays of draws x classes x nodes."""
        mean = np.ascontiguousarray(mean, dtype=float)
        return _probit_expected_probs(mean, _cov_factor(cov), standard_draws(mean.shape[1], size),
                                      _U_ORDER_NODES, _U_ORDER_WEIGHTS, _U_ORDER_TAIL,
                                      _U_ORDER_LOG_WEIGHTS)

    def log_prob_all(self, F):
        r""":math:`\log p(y = k \mid f)` for every class k: shape (c, ...)."""
        F = np.asarray(F, float)
        c = F.shape[0]
        out = np.empty_like(F)
        for k in range(c):
            d = F[k][None] - np.delete(F, k, axis=0)  # (c-1, ...)
            z = _U_NODES.reshape((-1,) + (1,) * d.ndim) + d[None]
            s = log_ndtr_array(z.ravel()).reshape(z.shape).sum(axis=1)  # (nodes, ...)
            m = s.max(axis=0)
            out[k] = m + np.log(np.tensordot(_U_WEIGHTS, np.exp(s - m), axes=1))
        return out

    def log_lik(self, y, F):
        r""":math:`\log p(y_i \mid f_i)` (n,) and the class probabilities (c, n)."""
        lp = self.log_prob_all(F)
        y = np.asarray(y, dtype=int)
        return lp[y, np.arange(F.shape[1])], np.exp(lp)

    def probabilities(self, F):
        p = np.exp(self.log_prob_all(F))
        return p / p.sum(axis=0, keepdims=True)


MULTICLASS_LIKELIHOODS = {"softmax": Softmax, "multinomial-probit": MultinomialProbit}
