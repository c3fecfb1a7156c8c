r"""The evidence lower bound of Laplace's Gaussian: what the quadratic expansion behind Laplace's evidence leaves out.

Laplace's method replaces the posterior by :math:`q(f) = N(\hat f, \Sigma)`, with
:math:`\Sigma = (K^{-1} + W)^{-1}` and W the negative Hessian of :math:`\log p(y \mid f)` at
the mode (Rasmussen & Williams 2006, eqs. 3.20 and 3.32; sec. 3.5 for the softmax), and
the evidence by

.. math:: \log Z_L = \log p(y \mid \hat f) - \tfrac12 \hat f^\top K^{-1} \hat f - \tfrac12 \log |B|,
   \qquad |B| = |I + K W|.

The same Gaussian gives a lower bound on the model's evidence, :math:`\log p(y) \ge
E_q[\log p(y \mid f)] - \mathrm{KL}(q \,\|\, N(0, K))`. Since
:math:`\log|K| - \log|\Sigma| = \log|B|` and :math:`\operatorname{tr}(K^{-1}\Sigma) = N -
\operatorname{tr}(W \Sigma)` (:math:`\Sigma = K (I + W K)^{-1}`), the bound is Laplace's
evidence plus one term per observation:

.. math:: \mathrm{ELBO}(q) = \log Z_L + \sum_i \Big( E_{q_i}[\log p(y_i \mid f_i)] - \log p(y_i \mid \hat f_i)
   + \tfrac12 \operatorname{tr}(W_i \Sigma_{ii}) \Big),

with :math:`q_i = N(\hat f_i, \Sigma_{ii})` the marginal of observation i (its c latent values
with several classes) and W block diagonal by observation. Each term is what the second-order
expansion of :math:`\log p(y_i \mid f_i)` about :math:`\hat f_i` misses under :math:`q_i`: zero
for a quadratic log likelihood, and very negative where :math:`q_i` spreads far over a
likelihood that is flat on one side, as with large amplitudes on nearly separable classes.
The identity holds for any prior covariance, the FITC prior's included (K its
:math:`Q + \Lambda`), and needs no more than the solver's result: the mode, the marginal
covariances and :math:`\log Z_L`. It does not need :math:`\hat f` to be the exact mode, only
one W in :math:`\Sigma`, in :math:`|B|` and in the trace, and :math:`a = K^{-1}\hat f`, as
the solver's result has them. A term can be positive (where the likelihood's curvature grows
away from :math:`\hat f`), so the bound can lie above :math:`\log Z_L`; it stays below the
model's evidence. With ``rough_gradient=True`` the solver's covariances carry
single-precision rounding and the bound with them.

``benchmarks/results/multiclass_svgp.md`` uses it on two public sets with six classes and
10,000 rows: at MAP-II's hyperparameters the bound lies about 940 and 1,530 nats below
Laplace's evidence.
"""

import numpy as np

from ..likelihoods.multiclass import Softmax, gaussian_draws

__all__ = ["softmax_laplace_bound"]

# rows per block of draws: c x rows x size values at a time
_BLOCK = 1 << 21


def softmax_laplace_bound(result, y, size=4096):
    r"""The evidence lower bound of the softmax Laplace Gaussian of ``result`` (module docstring).

    Parameters
    ----------
    result : ApproximationResult
        ``softmax_laplace``'s result, on any prior structure (dense, FITC, HSGP).
    y : array of int, shape (n,)
        The class codes 0..c-1 given to the solver.
    size : int
        Quasi-random draws per observation for :math:`E_{q_i}[\log \pi_{y_i}(f_i)]`
        (``likelihoods.multiclass.gaussian_draws``, the draws of the softmax's integrated
        predictive: antithetic pairs, so an even number; a power of 2 keeps the Sobol sequence
        balanced).

    Returns
    -------
    bound : float
        :math:`\log Z_L` plus the terms below: a lower bound on the model's log evidence.
    left_out : float
        The sum over the observations of what the quadratic expansion behind
        :math:`\log Z_L` leaves out.

    Raises
    ------
    ValueError
        For a result that is not softmax Laplace's (``result.method``; nested EP's has the
        same shapes), shapes that do not match, or an odd or non-positive ``size``.

    Examples
    --------
    >>> import numpy as np
    >>> from pymc_gpc.solvers import softmax_laplace, softmax_laplace_bound
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(60, 2))
    >>> y = np.digitize(X[:, 0], [-0.5, 0.5])                      # 3 classes, coded 0..2
    >>> K = np.exp(-0.5 * ((X[:, None] - X[None]) ** 2).sum(-1)) + 1e-8 * np.eye(60)
    >>> res = softmax_laplace(np.stack([20.0 * K] * 3), y)
    >>> bound, left_out = softmax_laplace_bound(res, y)
    >>> bool(left_out < 0.0)                                          # large amplitudes: far from Gaussian
    True
    """
    if getattr(result, "method", None) != "laplace-softmax":
        raise ValueError(f"softmax_laplace_bound needs a softmax Laplace result (softmax_laplace's), got "
                         f"method {getattr(result, 'method', None)!r}")
    if int(size) != size or size < 2 or size % 2:
        raise ValueError(f"size must be an even number of draws >= 2, got {size!r}")
    F_hat = np.asarray(result.mean, dtype=float)  # (c, n)
    S = np.asarray(result.var, dtype=float)  # (n, c, c)
    y = np.asarray(y, dtype=np.int64)
    c, n = F_hat.shape if F_hat.ndim == 2 else (0, 0)
    if F_hat.ndim != 2 or S.shape != (n, c, c) or y.shape != (n,):
        raise ValueError(f"softmax_laplace_bound needs a softmax Laplace result (mean (c, n), var (n, c, c)) and n "
                         f"labels; got mean {F_hat.shape}, var {S.shape}, y {y.shape}")
    softmax = Softmax()
    log_p_hat, pi = softmax.log_lik(y, F_hat)  # (n,), (c, n)
    # tr(W_i S_ii), W_i = diag(pi_i) - pi_i pi_i^T
    trace = np.einsum("kn,nkk->n", pi, S) - np.einsum("kn,nkl,ln->n", pi, S, pi)
    expected = np.empty(n)
    rows = max(1, _BLOCK // (c * size))
    for r in range(0, n, rows):
        F = gaussian_draws(F_hat[:, r:r + rows].T, S[r:r + rows], size)  # (c, rows, size), the predictive's draws
        block = F.shape[1]
        log_p = softmax.log_lik(np.repeat(y[r:r + rows], size), F.reshape(c, block * size))[0]
        expected[r:r + rows] = log_p.reshape(block, size).mean(axis=1)
    left_out = float(np.sum(expected - log_p_hat + 0.5 * trace))
    return float(result.log_z) + left_out, left_out
