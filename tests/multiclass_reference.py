"""Independent references for the multi-class tests: brute-force quadrature of the
evidence and a dense (cn x cn) Laplace, written without the package's block algebra."""

import itertools

import numpy as np
from scipy.special import log_softmax


def rbf(X, ls, v, jitter=1e-9):
    d = (np.asarray(X)[:, None] - np.asarray(X)[None]) ** 2
    return v * np.exp(-0.5 * d / ls**2) + jitter * np.eye(len(X))


def rbf_dK(X, ls, v):
    """d K / d log ls and d K / d log v of ``rbf``."""
    d = (np.asarray(X)[:, None] - np.asarray(X)[None]) ** 2
    k = v * np.exp(-0.5 * d / ls**2)
    return k * d / ls**2, k


def brute_force_log_evidence(K, y, log_prob, nodes=10):
    """log int prod_i p(y_i | f_i) N(f; 0, blockdiag K) df by a tensor Gauss-Hermite rule in
    the whitened variables (f_k = L_k z_k). ``log_prob(y, F)`` takes F (c, s) per observation."""
    c, n, _ = K.shape
    z, w = np.polynomial.hermite_e.hermegauss(nodes)
    w = w / np.sqrt(2 * np.pi)
    L = np.linalg.cholesky(K)
    grid = np.array(list(itertools.product(range(nodes), repeat=c * n)))
    total = 0.0
    for chunk in np.array_split(grid, max(1, len(grid) // 200000)):
        Z = z[chunk].reshape(-1, c, n)
        F = np.einsum("kij,skj->ski", L, Z)
        lp = sum(log_prob(np.full(len(F), y[i]), F[:, :, i].T) for i in range(n))
        total += np.sum(np.prod(w[chunk], axis=1) * np.exp(lp))
    return float(np.log(total))


def softmax_log_prob(y, F):
    return log_softmax(F, axis=0)[np.asarray(y, int), np.arange(F.shape[1])]


def multinomial_probit_log_prob(y, F, u_nodes=20):
    """log E_u prod_{j != y} Phi(u + f_y - f_j), u ~ N(0, 1), by its own Gauss-Hermite rule."""
    from scipy.special import log_ndtr

    u, w = np.polynomial.hermite_e.hermegauss(u_nodes)
    y = np.asarray(y, int)
    cols = np.arange(F.shape[1])
    diff = F[y, cols][None] - F  # (c, s); the j = y row is 0 and is left out below
    mask = np.arange(F.shape[0])[:, None] != y[None]
    s = np.sum(np.where(mask[None], log_ndtr(u[:, None, None] + diff[None]), 0.0), axis=1)
    with np.errstate(divide="ignore"):  # far tails: probability 0, weight 0 in the sum
        return np.log(np.exp(s).T @ (w / np.sqrt(2 * np.pi)))


def dense_softmax_laplace(K, y, iters=60):
    """Laplace's evidence by plain Newton in f on the full cn x cn matrices (f class-major)."""
    c, n, _ = K.shape
    Kf = np.zeros((c * n, c * n))
    for k in range(c):
        Kf[k * n:(k + 1) * n, k * n:(k + 1) * n] = K[k]
    Y = np.zeros((c, n))
    Y[y, np.arange(n)] = 1.0
    f = np.zeros(c * n)
    Kinv = np.linalg.inv(Kf)
    for _ in range(iters):
        F = f.reshape(c, n)
        P = np.exp(log_softmax(F, axis=0))
        W = np.zeros((c * n, c * n))
        for i in range(n):
            idx = np.arange(c) * n + i
            W[np.ix_(idx, idx)] = np.diag(P[:, i]) - np.outer(P[:, i], P[:, i])
        g = (Y - P).ravel()
        f = f + np.linalg.solve(Kinv + W, g - Kinv @ f)
    F = f.reshape(c, n)
    psi = softmax_log_prob(y, F).sum() - 0.5 * f @ Kinv @ f
    _, logdet = np.linalg.slogdet(np.eye(c * n) + Kf @ W)
    return psi - 0.5 * logdet
