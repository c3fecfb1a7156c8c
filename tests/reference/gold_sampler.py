r"""Gold standard for GP classification at fixed hyperparameters, written without the package.

The exact posterior of the latent values f (c classes x n points, class-major) under the
block-diagonal prior N(0, blockdiag K_k) and a likelihood prod_i p(y_i | f_i) is sampled by
elliptical slice sampling (Murray, Adams & MacKay 2010): from f, draw nu ~ N(0, K) and a
threshold log t = log L(f) + log U, then shrink an angle bracket around the ellipse
f cos(theta) + nu sin(theta) until log L exceeds log t. The move leaves the posterior
invariant exactly (no step size, no gradient, no approximation), so long runs of several
chains, checked by R-hat and effective sample size, give the posterior expectations.

The log evidence log Z = log int L(f) N(f; 0, K) df is estimated by annealed importance
sampling (Neal 2001) along pi_b(f) ~ L(f)^b N(f; 0, K), b from 0 to 1, with elliptical
slice moves at each temperature (exact for the tempered target, whose prior part is still
N(0, K)): log Z = log mean_p exp(sum_t (b_t - b_{t-1}) log L(f_p,t-1)).

Latent predictive at new points: given f, the c functions at x* are independent Gaussians
f_k* | f_k ~ N(K*_k^T K_k^{-1} f_k, k**_k - K*_k^T K_k^{-1} K*_k); the posterior predictive
mean and covariance of f* follow by the law of total (co)variance over the draws, and the
class probabilities as the draw average of E[p(y* = k | f*)] over that conditional Gaussian
(by Monte Carlo, a few draws of f* per draw of f).

Likelihoods (``kind``): "softmax" p(k | f) = exp f_k / sum_j exp f_j; "probit-multi" the
multinomial probit E_u prod_{j != k} Phi(u + f_k - f_j), u ~ N(0, 1) (a 24-node
Gauss-Hermite rule in u); binary (c = 1, y in {0, 1} for classes -1 / +1) "probit"
Phi(y f) and "logistic" 1 / (1 + exp(-y f)).

Used by tests/integration/test_multiclass_gold.py and benchmarks/multiclass_gold.py.
"""

import math

import numpy as np
from numba import njit

from .multiclass_reference import multinomial_probit_probabilities, softmax_probabilities

KINDS = {"softmax": 0, "probit-multi": 1, "probit": 2, "logistic": 3}

_U, _UW = np.polynomial.hermite_e.hermegauss(24)
_LOG_UW = np.log(_UW / np.sqrt(2.0 * np.pi))


@njit(cache=True)
def _log_phi(z):
    if z > -30.0:
        return math.log(0.5 * math.erfc(-z / math.sqrt(2.0)))
    w = 1.0 / (z * z)
    return -0.5 * z * z - math.log(-z) - 0.5 * math.log(2.0 * math.pi) + math.log(1.0 - w + 3.0 * w * w)


@njit(cache=True)
def _log_lik_point(kind, yi, F, i, u, log_uw):
    c = F.shape[0]
    if kind == 0:
        m = F[0, i]
        for k in range(1, c):
            m = max(m, F[k, i])
        s = 0.0
        for k in range(c):
            s += math.exp(F[k, i] - m)
        return F[yi, i] - m - math.log(s)
    if kind == 1:
        # sum_q w_q prod_j Phi(u_q + f_y - f_j) directly; in logs only where that underflows
        p = 0.0
        for q in range(u.shape[0]):
            t = 1.0
            for j in range(c):
                if j != yi:
                    t *= 0.5 * math.erfc(-(u[q] + F[yi, i] - F[j, i]) / math.sqrt(2.0))
            p += math.exp(log_uw[q]) * t
        if p > 1e-280:
            return math.log(p)
        best = -np.inf
        terms = np.empty(u.shape[0])
        for q in range(u.shape[0]):
            t = log_uw[q]
            for j in range(c):
                if j != yi:
                    t += _log_phi(u[q] + F[yi, i] - F[j, i])
            terms[q] = t
            best = max(best, t)
        s = 0.0
        for q in range(u.shape[0]):
            s += math.exp(terms[q] - best)
        return best + math.log(s)
    sign = 1.0 if yi == 1 else -1.0
    if kind == 2:
        return _log_phi(sign * F[0, i])
    z = sign * F[0, i]  # logistic: -log(1 + exp(-z))
    if z > 0:
        return -math.log1p(math.exp(-z))
    return z - math.log1p(math.exp(z))


@njit(cache=True)
def _log_lik(kind, y, F, u, log_uw):
    tot = 0.0
    for i in range(F.shape[1]):
        tot += _log_lik_point(kind, y[i], F, i, u, log_uw)
    return tot


@njit(cache=True)
def _log_target(kind, y, L, z, zm, A, u, log_uw, F):
    """log R(z) = log L(L z) - z^T z / 2 + (z - zm)^T A (z - zm) / 2: the target N(0, I) L(L z)
    (whitened, f_k = L_k z_k) divided by the Gaussian N(zm, A^{-1})."""
    c, n, _ = L.shape
    for k in range(c):
        F[k] = L[k] @ z[k]
    d = (z - zm).ravel()
    return _log_lik(kind, y, F, u, log_uw) - 0.5 * np.sum(z * z) + 0.5 * d @ (A @ d)


@njit(cache=True)
def _ess_step(kind, y, L, z, logr, beta, zm, A, LA, u, log_uw, zp, F):
    """One elliptical slice move on N(z; zm, A^{-1}) R(z)^beta (Murray et al. 2010, Fig. 2;
    Nishihara et al. 2014's Gaussian other than the prior): z in place; returns log R(z)."""
    c, n = z.shape
    xi = np.random.standard_normal(c * n)
    # nu ~ N(0, A^{-1}) with A = LA LA^T: nu = LA^{-T} xi
    nu = np.linalg.solve(LA.T, xi).reshape(c, n)
    log_t = beta * logr + math.log(np.random.random())
    theta = np.random.random() * 2.0 * math.pi
    lo, hi = theta - 2.0 * math.pi, theta
    while True:
        ct, st = math.cos(theta), math.sin(theta)
        zp[:] = zm + (z - zm) * ct + nu * st
        lr = _log_target(kind, y, L, zp, zm, A, u, log_uw, F)
        if beta * lr > log_t or beta == 0.0:
            z[:] = zp
            return lr
        if theta < 0.0:
            lo = theta
        else:
            hi = theta
        theta = lo + np.random.random() * (hi - lo)


@njit(cache=True)
def _chains(kind, y, L, zm, A, LA, n_chains, n_iter, burn, thin, seed, u, log_uw):
    np.random.seed(seed)
    c, n, _ = L.shape
    keep = (n_iter - burn) // thin
    out = np.empty((n_chains, keep, c, n))
    zp, F = np.empty((c, n)), np.empty((c, n))
    for ch in range(n_chains):
        # over-dispersed start: the Gaussian's draw, doubled about its mean
        z = zm + 2.0 * np.linalg.solve(LA.T, np.random.standard_normal(c * n)).reshape(c, n)
        logr = _log_target(kind, y, L, z, zm, A, u, log_uw, F)
        j = 0
        for it in range(n_iter):
            logr = _ess_step(kind, y, L, z, logr, 1.0, zm, A, LA, u, log_uw, zp, F)
            if it >= burn and (it - burn) % thin == 0 and j < keep:
                for k in range(c):
                    out[ch, j, k] = L[k] @ z[k]
                j += 1
    return out


@njit(cache=True)
def _ais(kind, y, L, zm, A, LA, betas, n_particles, n_moves, seed, u, log_uw):
    """AIS from q = N(zm, A^{-1}) (normalised) to the posterior along q R^b: log weights."""
    np.random.seed(seed)
    c, n, _ = L.shape
    logw = np.zeros(n_particles)
    zp, F = np.empty((c, n)), np.empty((c, n))
    for p in range(n_particles):
        z = zm + np.linalg.solve(LA.T, np.random.standard_normal(c * n)).reshape(c, n)
        logr = _log_target(kind, y, L, z, zm, A, u, log_uw, F)
        for t in range(1, betas.shape[0]):
            logw[p] += (betas[t] - betas[t - 1]) * logr
            for _ in range(n_moves):
                logr = _ess_step(kind, y, L, z, logr, betas[t], zm, A, LA, u, log_uw, zp, F)
    return logw


@njit(cache=True)
def _point_derivatives(kind, y, F, u, log_uw, h):
    """Gradient (c, n) and Hessian (n, c, c) of log p(y_i | f_i) by central differences."""
    c, n = F.shape
    g = np.empty((c, n))
    H = np.empty((n, c, c))
    G = F.copy()
    for i in range(n):
        f0 = _log_lik_point(kind, y[i], G, i, u, log_uw)
        for a in range(c):
            G[a, i] += h
            fp = _log_lik_point(kind, y[i], G, i, u, log_uw)
            G[a, i] -= 2 * h
            fm = _log_lik_point(kind, y[i], G, i, u, log_uw)
            G[a, i] += h
            g[a, i] = (fp - fm) / (2 * h)
            H[i, a, a] = (fp - 2 * f0 + fm) / (h * h)
            for b in range(a):
                G[a, i] += h
                G[b, i] += h
                fpp = _log_lik_point(kind, y[i], G, i, u, log_uw)
                G[b, i] -= 2 * h
                fpm = _log_lik_point(kind, y[i], G, i, u, log_uw)
                G[a, i] -= 2 * h
                fmm = _log_lik_point(kind, y[i], G, i, u, log_uw)
                G[b, i] += 2 * h
                fmp = _log_lik_point(kind, y[i], G, i, u, log_uw)
                G[a, i] += h
                G[b, i] -= h
                H[i, a, b] = H[i, b, a] = (fpp - fpm - fmp + fmm) / (4 * h * h)
    return g, H


def _gaussian(L, y, kind, iters=60):
    """A Gaussian close to the whitened posterior, for the sampler's efficiency only (its
    exactness does not depend on it): Newton on log L(L z) - z^T z / 2 with the likelihood's
    derivatives by finite differences, on the dense cn x cn system (independent of the
    package's block algebra). Returns zm (c, n), A = I + L^T W L and its Cholesky factor."""
    c, n, _ = L.shape
    k = KINDS[kind]
    Lf = np.zeros((c * n, c * n))
    for j in range(c):
        Lf[j * n:(j + 1) * n, j * n:(j + 1) * n] = L[j]
    z = np.zeros(c * n)
    for _ in range(iters):
        F = (Lf @ z).reshape(c, n)
        g, H = _point_derivatives(k, y, F, _U, _LOG_UW, 1e-4)
        W = np.zeros((c * n, c * n))
        for i in range(n):
            idx = np.arange(c) * n + i
            W[np.ix_(idx, idx)] = -H[i]
        W = 0.5 * (W + W.T)
        A = np.eye(c * n) + Lf.T @ W @ Lf
        step = np.linalg.solve(A, Lf.T @ g.ravel() - z)
        z = z + step
        if np.max(np.abs(step)) < 1e-8:
            break
    A = 0.5 * (A + A.T)
    return np.ascontiguousarray(z.reshape(c, n)), A, np.linalg.cholesky(A)


def _labels(y, kind):
    y = np.asarray(y)
    if KINDS[kind] >= 2:  # binary: +-1 or 0/1 labels to 0/1
        y = (y > 0).astype(np.int64)
    return np.ascontiguousarray(y, dtype=np.int64)


def _factors(K):
    K = np.asarray(K, float)
    if K.ndim == 2:
        K = K[None]
    return np.ascontiguousarray(np.linalg.cholesky(K)), K


def sample_latents(K, y, kind, *, n_chains=4, n_iter=20000, burn=2000, thin=10, seed=0):
    """Draws of f from the exact posterior: (chains, draws, c, n) (c = 1 for binary kinds)."""
    L, _ = _factors(K)
    y = _labels(y, kind)
    zm, A, LA = _gaussian(L, y, kind)
    return _chains(KINDS[kind], y, L, zm, A, LA, n_chains, n_iter, burn, thin, seed, _U, _LOG_UW)


def log_evidence_ais(K, y, kind, *, n_particles=64, n_temps=2000, n_moves=1, seed=0):
    """AIS estimate of log Z and its standard error (delta method over the particles)."""
    L, _ = _factors(K)
    y = _labels(y, kind)
    zm, A, LA = _gaussian(L, y, kind)
    betas = np.linspace(0.0, 1.0, n_temps) ** 2
    logw = _ais(KINDS[kind], y, L, zm, A, LA, betas, n_particles, n_moves, seed, _U, _LOG_UW)
    # q is normalised: log Z = log E_q[R] = log int N(0, I) L(L z) dz, plus R's constant
    # (R = N(0,I) L / N(zm, A^-1) with the Gaussians' normalisers: -log|A|/2 from q's)
    logw = logw - np.sum(np.log(np.diag(LA)))
    m = logw.max()
    w = np.exp(logw - m)
    est = m + np.log(w.mean())
    se = w.std(ddof=1) / np.sqrt(len(w)) / w.mean()
    return float(est), float(se)


def class_probabilities(kind, F):
    """p(y = k | f) for F (c, s): (c, s); binary kinds give p(y = +1) (1, s)."""
    F = np.asarray(F, float)
    if kind == "softmax":
        return softmax_probabilities(F)
    from scipy.special import log_ndtr

    if kind == "probit-multi":  # the sampler's 24-node u-rule, normalised over the classes
        out = multinomial_probit_probabilities(F, u_nodes=len(_U))
        return out / out.sum(axis=0)
    if kind == "probit":
        return np.exp(log_ndtr(F))
    return 1.0 / (1.0 + np.exp(-F))


def predictive(K, K_cross, k_star, draws, kind, *, per_draw=8, seed=1):
    """Exact latent predictive moments and class probabilities from posterior draws.

    K (c, n, n); K_cross (c, n, m); k_star (c, m) prior variances; draws (chains, s, c, n).
    Returns mean (m, c), cov (m, c, c), probabilities (m, c) (binary: (m, 1), p(+1)) and
    the per-chain probabilities (chains, m, c) for R-hat.
    """
    K = np.asarray(K, float)
    if K.ndim == 2:
        K, K_cross, k_star = K[None], np.asarray(K_cross)[None], np.asarray(k_star)[None]
    c, n, m = K_cross.shape
    A = np.array([np.linalg.solve(K[k], K_cross[k]) for k in range(c)])  # (c, n, m)
    cond_var = k_star - np.einsum("knm,knm->km", K_cross, A)  # (c, m)
    ch, s = draws.shape[:2]
    M = np.einsum("xskn,knm->xsmk", draws, A)  # (chains, s, m, c) conditional means
    flat = M.reshape(-1, m, c)
    mean = flat.mean(axis=0)
    dev = flat - mean
    cov = np.einsum("smk,sml->mkl", dev, dev) / flat.shape[0]
    cov[:, np.arange(c), np.arange(c)] += np.maximum(cond_var.T, 0.0)
    rng = np.random.default_rng(seed)
    probs = np.zeros((ch, m, c))
    sd = np.sqrt(np.maximum(cond_var.T, 0.0))  # (m, c)
    for r in range(per_draw):
        Fs = M + sd * rng.standard_normal(M.shape)  # (chains, s, m, c)
        P = class_probabilities(kind, np.moveaxis(Fs.reshape(-1, m, c), -1, 0).reshape(c, -1))
        probs += np.moveaxis(P.reshape(c, ch, s, m), 0, -1).mean(axis=1)
    probs /= per_draw
    return mean, cov, probs.mean(axis=0), probs


def rhat_ess(per_chain_draws):
    """Largest rank-normalised split R-hat and smallest bulk ESS (ArviZ) over the
    quantities in the last axes of (chains, draws, ...)."""
    import arviz as az

    x = np.asarray(per_chain_draws, float)
    x = x.reshape(x.shape[0], x.shape[1], -1)
    ds = az.convert_to_dataset({"q": x})
    r = az.rhat(ds)["q"].values
    e = az.ess(ds)["q"].values
    return float(np.nanmax(r)), float(np.nanmin(e))
