r"""Laplace's approximation for multi-class GP classification with the softmax.

Williams & Barber (1998); R&W sec. 3.5, Alg. 3.3 (mode and evidence) and Alg. 5.2's
implicit gradient, for c classes: Newton's method on Psi(f) = log p(y|f) - f^T K^{-1} f / 2
in the representer weights a (f = K a), on the block structure of W
(``structures.multiclass``: c + 1 n x n Cholesky factorisations, never a cn x cn one).
At the mode

.. math::

    \log q(y) = \sum_i \log \pi_{y_i}(\hat f_i) - \tfrac12 a^T \hat f
        - \tfrac12 \log |I + K W|,

and the gradient in each K_k includes the mode's movement (adjoint form, ``_gradient``).
"""

import functools
from dataclasses import dataclass

import numpy as np

from ..likelihoods.multiclass import MulticlassLikelihood, Softmax
from ..structures import is_structure
from ..structures.multiclass import BlockKernel, CoupledBlockPosterior, coupled_W_times
from ..validation import check_kernel_matrix
from .laplace import newton_converged
from .result import ApproximationResult, WarmStartMismatch, loo_outputs


# Quasi-random draws for the LA-LOO expectations (computed at every evaluation).
LOO_DRAWS = 512

# Newton steps are solved by conjugate gradients preconditioned with the last factorised
# posterior (``BlockPreconditioner.solve_other_weights``), to an error in f below _CG_TOL
# times Newton's tolerance or min(_CG_ETA, the last change) times the step (inexact Newton),
# in at most _CG_STEPS steps; else the posterior at f is factorised in single precision
# (the mode's posterior is exact).
_CG_TOL = 0.01
_CG_ETA = 0.01
_CG_STEPS = 12

# _WARM_START: a warm start is the last mode's (a, f), and its first Newton step is
# linearised at f, not at K a for the new K (the mode's f moves far less with the
# hyperparameters than K a does), and factorises rather than tries CG.


@dataclass
class SoftmaxLaplaceState:
    """The last mode, to warm-start from: a (c, n) and optionally f (c, n), at which the next
    solve's first Newton step is then linearised (``_WARM_START``).
    """

    a: np.ndarray
    f: np.ndarray = None

    def copy(self):
        return SoftmaxLaplaceState(self.a.copy(), None if self.f is None else self.f.copy())


def check_multiclass_inputs(K, y, n_classes=None):
    """K as a (c, n, n) float array (a single (n, n) K is shared) and y as codes 0..c-1 (floats
    allowed). ``n_classes`` defaults to K's first dimension, else max(y) + 1. A prior
    structure (``MulticlassFITCPrior``) is returned as it is, its sizes checked.
    """
    if is_structure(K):
        codes = _class_codes(y)
        c = K.c
        if n_classes is not None and n_classes != c:
            raise ValueError(f"the likelihood has {n_classes} classes but the prior has {c}")
        if K.n != codes.size:
            raise ValueError(f"the prior has {K.n} observations but y has {codes.size} labels")
        if codes.max() >= c:
            raise ValueError(f"y holds class code {codes.max()} but the prior has only {c} classes")
        return K, codes
    codes = _class_codes(y)
    n = codes.size
    K = np.asarray(K, dtype=float)
    if K.ndim == 2:
        c = n_classes or int(codes.max()) + 1
        K = np.broadcast_to(K, (c, *K.shape))
    if K.ndim != 3:
        raise ValueError(f"K must be (c, n, n) or (n, n), got shape {K.shape}")
    c = K.shape[0]
    if c < 2:
        raise ValueError(f"a multi-class model needs c >= 2 latent functions, K has {c}")
    if codes.max() >= c:
        raise ValueError(f"y holds class code {codes.max()} but K has only {c} classes")
    for k in range(c):
        check_kernel_matrix(K[k], n, name=f"K[{k}]")
    # no copy of a C-ordered float K (as the Ops pass it): nothing here writes into K
    return np.ascontiguousarray(K), codes


def coupled_posterior(K, d, **options):
    """q(f) at coupled weights d (c, n) for a (c, n, n) stack K (``CoupledBlockPosterior``)
    or a prior structure (its ``posterior``)."""
    return K.posterior(d, **options) if is_structure(K) else CoupledBlockPosterior(K, d, **options)


def _class_codes(y):
    """y (n,) as int64 class codes (ValueError otherwise)."""
    y = np.asarray(y)
    if y.ndim != 1 or y.size == 0:
        raise ValueError(f"y must be a non-empty vector of class codes, got shape {y.shape}")
    codes = np.asarray(y, dtype=float)
    if not np.all(np.isfinite(codes)) or np.any(codes != np.round(codes)) or codes.min() < 0:
        raise ValueError("y must hold class codes 0..c-1 (see pymc_gpc.validation.as_class_codes)")
    return codes.astype(np.int64)


def _psi(a, f, lp):
    return float(np.sum(lp) - 0.5 * np.sum(a * f))


def _cold_start(likelihood, y, c, n):
    """a = f = 0 (Psi = -n log c): where a warm start is worse than that at this K (as GPML's
    infLaplace).
    """
    a, f = np.zeros((c, n)), np.zeros((c, n))
    lp, pi = likelihood.log_lik(y, f)
    return a, f, lp, pi, _psi(a, f, lp)


def softmax_laplace(K, y, likelihood=None, params=None, *, state=None, tol=1e-10, max_iter=100,
                    with_grad=True, with_loo=True, rough_gradient=False):
    """Find the mode and return Laplace's evidence, its gradient and q(f).

    Parameters
    ----------
    K : (c, n, n) prior covariances (or one (n, n), shared by the c classes), or a prior
        structure such as ``structures.multiclass_fitc.MulticlassFITCPrior`` (each class's
        inducing-point prior; ``dlog_z_dK`` is then a ``MulticlassFITCGradient``).
    y : (n,) class codes 0..c-1.
    likelihood : a ``Softmax`` (the default).
    params : must be empty (the softmax has no parameters).
    state : a ``SoftmaxLaplaceState`` to warm-start from.
    tol, max_iter : Newton stops when the largest change in f is below tol (1 + max|f|), or
        stops shrinking at the rounding level (``laplace.newton_converged``).
    with_grad : compute dlog q / dK (``dlog_z_dK``, (c, n, n)).
    with_loo : compute ``loo_log_p`` (None otherwise; its c-variate expectations cost
        about a fifth of a warm-started solve at n = 193, c = 6); "deferred": return, as
        ``loo_later``, a function that computes it (``ops.marginal``'s ``defer_loo``).
    rough_gradient : form the mode's c products H_k = L_M^{-1} E_k and H_k^T H_k in single
        precision (``CoupledBlockPosterior``'s ``rough_gradient``): the gradient, the site
        covariances ``var`` and the LA-LOO carry single-precision rounding, log q and the
        mode do not. For the sampler (``ops.marginal.SAMPLING_DEFAULTS``).

    Returns
    -------
    ApproximationResult with a, mean (c, n), var (n, c, c) the per-observation
    posterior covariances, and loo_log_p (LA-LOO, ``_loo_log_p``).

    Examples
    --------
    >>> import numpy as np, pymc_gpc
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(60, 2))
    >>> y = np.digitize(X[:, 0], [-0.5, 0.5])                        # 3 classes, coded 0..2
    >>> K = np.exp(-0.5 * ((X[:, None] - X[None]) ** 2).sum(-1))
    >>> res = pymc_gpc.softmax_laplace(np.stack([2.0 * K] * 3), y)    # (c, n, n): one K per class
    """
    likelihood = Softmax() if likelihood is None else likelihood
    if not isinstance(likelihood, MulticlassLikelihood) or "laplace" not in likelihood.approximations:
        raise ValueError(f"softmax_laplace needs a multi-class likelihood with a Laplace approximation "
                         f"(Softmax), got {likelihood!r}")
    if params is not None:
        likelihood.check_params(params)
    K, y = check_multiclass_inputs(K, y, likelihood.n_classes)
    c, n = (K.c if is_structure(K) else K.shape[0]), y.size
    Y = np.zeros((c, n))
    Y[y, np.arange(n)] = 1.0
    a = np.zeros((c, n)) if state is None else np.array(state.a, dtype=float)
    if a.shape != (c, n):
        raise WarmStartMismatch(f"warm-start state has shape {a.shape}, data needs {(c, n)}")
    K_times = K if is_structure(K) else BlockKernel(K)
    from_f = state is not None and state.f is not None
    if from_f:
        # the first Newton step linearised at the last mode's f (``_WARM_START``): taken in
        # full (Psi is not defined there at this K), checked against a = 0 below
        f = np.array(state.f, dtype=float)
        if f.shape != (c, n):
            raise WarmStartMismatch(f"warm-start state's f has shape {f.shape}, data needs {(c, n)}")
        lp, pi = likelihood.log_lik(y, f)
        psi = -np.inf
    else:
        f = K_times(a)
        lp, pi = likelihood.log_lik(y, f)
        psi = _psi(a, f, lp)
    if state is not None and not from_f and not psi >= -n * np.log(c):
        a, f, lp, pi, psi = _cold_start(likelihood, y, c, n)
    change, it, converged = np.inf, 0, False
    pre = None  # the last factorised posterior: CG's preconditioner
    confirm = False  # the next factorised posterior exact: a rough step's convergence is confirmed by it
    while it < max_iter:
        it += 1
        v = coupled_W_times(pi, f) + Y - pi
        scale = 1.0 + np.max(np.abs(f))
        a_newton = None if pre is None else pre.solve_other_weights(
            K_times, pi, v, a, eps=_CG_TOL * tol * scale, eta=min(_CG_ETA, change / scale), max_iter=_CG_STEPS)
        by_cg = a_newton is not None
        rough_step = False
        if not by_cg:
            # a rough (single-precision) posterior: this step and the preconditioner of the
            # next ones only need a direction, and the mode's posterior below is exact
            post = coupled_posterior(K, pi, rough=not confirm)
            pre, rough_step = post.preconditioner(), post.rough
            a_newton = post.weights(v)
        step, a_try, f_try, lp_try, pi_try, psi_try = _line_search(
            likelihood, y, K_times, a, None if from_f else f, lp, psi, a_newton - a)
        change, previous = float(np.max(np.abs(f_try - f))), change
        a, f, lp, pi, psi = a_try, f_try, lp_try, pi_try, psi_try
        if from_f:
            from_f = False
            if not psi >= -n * np.log(c):  # the step from the last mode's f is worse than a = 0
                a, f, lp, pi, psi = _cold_start(likelihood, y, c, n)
                change = np.inf
                continue
        if by_cg and step < 1.0:
            # a CG step that needed backtracking: its preconditioner is too far away
            pre, change = None, previous
            continue
        converged = newton_converged(change, previous, f, tol, full_step=step == 1.0)
        if converged and rough_step:
            # a rough step's direction carries single-precision rounding (relative 1e-6 or
            # so), which the stop's quadratic prediction does not see: one more step, by CG
            # or on an exact posterior, ends the iteration
            converged, confirm = False, True
            continue
        if converged:
            break
    post = coupled_posterior(K, pi, rough_gradient=rough_gradient)
    if with_grad and hasattr(post, "expect_gradient"):  # one pass for S and the gradient (multiclass_fitc)
        post.expect_gradient()
    log_z = psi - post.half_logdet_B()
    S = post.site_covariances()
    dK = _gradient(post, a, S) if with_grad else None
    loo_log_p, loo_later = loo_outputs(functools.partial(_loo_log_p, y, likelihood, f, pi, Y - pi, S), with_loo)
    return ApproximationResult(
        method="laplace-softmax",
        log_z=log_z,
        dlog_z_dK=dK,
        dlog_z_dparams=np.zeros(0) if with_grad else None,
        a=a,
        posterior=post,
        mean=f,
        var=S,
        state=SoftmaxLaplaceState(a, f),
        n_iter=it,
        converged=converged,
        max_change=change,
        loo_log_p=loo_log_p,
        loo_later=loo_later,
    )


def _line_search(likelihood, y, K_times, a, f, lp, psi, da):
    r"""Backtracking along a + t da, t = 1, 1/2, ...: the first t at which Psi does not decrease
    (by more than 1e-12 |Psi|). Returns (t, a_t, f_t, lp_t, pi_t, Psi_t).

    With f = K a given (None after a warm start from f, where Psi(a) is undefined at this K)
    the test uses the increment

    .. math::

        \Psi(a + t\,da) - \Psi(a) = \sum_i (\log p_{t,i} - \log p_i)
            - t\, da^T f - \tfrac{t^2}{2} da^T K da,

    whose terms are the step's own: the difference of two values of Psi carries a rounding
    error that, at a large kernel amplitude, exceeds Newton's last increases.
    """
    Kda = None if f is None else K_times(da)
    quad = None if f is None else (float(np.sum(da * f)), 0.5 * float(np.sum(da * Kda)))
    step = 1.0
    for _ in range(40):
        a_try = a + step * da
        f_try = K_times(a_try) if f is None else f + step * Kda
        lp_try, pi_try = likelihood.log_lik(y, f_try)
        psi_try = _psi(a_try, f_try, lp_try)
        if f is None:
            gain = psi_try - psi
        else:
            gain = float(np.sum(lp_try - lp)) - step * quad[0] - step * step * quad[1]
        if gain >= -1e-12 * abs(psi):
            break
        step *= 0.5
    return step, a_try, f_try, lp_try, pi_try, psi_try


def softmax_W_pullback(pi, X):
    r""":math:`\partial \sum_{jl} X^{(i)}_{jl} W^{(i)}_{jl} / \partial f_{ik}` for the softmax's
    W_i = diag(pi_i) - pi_i pi_i^T at pi = softmax(f), X (n, c, c) symmetric.

    With d pi_j / d f_k = pi_j (delta_jk - pi_k): sum_jl X_jl dW_jl/df_k = pi_k (v_k - pi . v),
    v_j = X_jj - 2 (X pi)_j. pi (c, n); returns (c, n).
    """
    P = pi.T  # (n, c)
    v = np.einsum("ijj->ij", X) - 2.0 * np.einsum("ijl,il->ij", X, P)
    return (P * (v - np.sum(P * v, axis=1, keepdims=True))).T


def _mode_sensitivity(pi, S):
    r"""s_{ik} = -\tfrac12 \sum_{jl} \Sigma^{(i)}_{jl} \partial W^{(i)}_{jl} / \partial f_{ik}
    (``softmax_W_pullback``), (c, n)."""
    return -0.5 * softmax_W_pullback(pi, S)


def _gradient(post, a, S):
    """d log q / dK_k for each class, the mode's movement included: (c, n, n).

    With R = (K + W^{-1})^{-1}, s = d log q / d f (``_mode_sensitivity``) and the adjoint
    u = (I + W K)^{-1} s = s - R K s:
    d/dK_k = a_k a_k^T / 2 - R_kk / 2 + (u_k a_k^T + a_k u_k^T) / 2.
    """
    s = _mode_sensitivity(post.d, S)
    u = s - post.R_times(post.K_times(s))
    return post.kernel_gradient([(a, a, 0.5), (u, a, 1.0)], -0.5)


def _loo_log_p(y, likelihood, f, pi, g, S):
    """LA-LOO log q(y_i | y_-i) (Vehtari et al. 2016) with c-variate cavities: site i has
    precision W_i = diag(pi_i) - pi_i pi_i^T and location W_i f_i + g_i; the cavity precision
    is S_i^{-1} - W_i.
    """
    P = pi.T
    W = np.einsum("ij,jk->ijk", P, np.eye(P.shape[1])) - np.einsum("ij,ik->ijk", P, P)
    F, G = f.T, g.T
    eye = np.eye(P.shape[1])
    # cavity covariance C = (S^-1 - W)^-1 = (I - S W)^-1 S, mean C (S^-1 F - W F - G)
    A = eye - S @ W
    C = np.linalg.solve(A, S)
    m = np.linalg.solve(A, F[:, :, None] - (S @ (W @ F[:, :, None] + G[:, :, None])))[:, :, 0]
    C = 0.5 * (C + np.transpose(C, (0, 2, 1)))
    with np.errstate(divide="ignore"):
        return np.log(likelihood.expected_prob(y, m, C, size=LOO_DRAWS))
