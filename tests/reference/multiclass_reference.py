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


def block_diag(K):
    """The class-major block-diagonal matrix of a stack K (c, n, p): (c n, c p)."""
    c, n, p = K.shape
    out = np.zeros((c * n, c * p))
    for k in range(c):
        out[k * n:(k + 1) * n, k * p:(k + 1) * p] = K[k]
    return out


def softmax_W(P):
    """W = blockdiag over observations of diag(pi_i) - pi_i pi_i^T, class-major (c n, c n)."""
    c, n = P.shape
    W = np.zeros((c * n, c * n))
    for i in range(n):
        idx = np.arange(c) * n + i
        W[np.ix_(idx, idx)] = np.diag(P[:, i]) - np.outer(P[:, i], P[:, i])
    return W


def dense_softmax_mode(K, y, iters=60):
    """The mode of log p(y | f) - f^T K^-1 f / 2 by plain Newton in f on the full cn x cn
    matrices (f class-major): returns F (c, n), W (cn, cn) and g = Y - pi (c, n) there."""
    c, n, _ = K.shape
    Kf = block_diag(K)
    Y = np.zeros((c, n))
    Y[y, np.arange(n)] = 1.0
    f = np.zeros(c * n)
    Kinv = np.linalg.inv(Kf)
    for _ in range(iters):
        P = np.exp(log_softmax(f.reshape(c, n), axis=0))
        W = softmax_W(P)
        f = f + np.linalg.solve(Kinv + W, (Y - P).ravel() - Kinv @ f)
    P = np.exp(log_softmax(f.reshape(c, n), axis=0))
    return f.reshape(c, n), softmax_W(P), Y - P


def dense_softmax_laplace(K, y, iters=60):
    """Laplace's evidence from ``dense_softmax_mode``: log p(y|f^) - f^T K^-1 f^ / 2 - log|I + K W| / 2."""
    c, n, _ = K.shape
    Kf = block_diag(K)
    F, W, _ = dense_softmax_mode(K, y, iters)
    f = F.ravel()
    psi = softmax_log_prob(y, F).sum() - 0.5 * f @ np.linalg.solve(Kf, f)
    _, logdet = np.linalg.slogdet(np.eye(c * n) + Kf @ W)
    return psi - 0.5 * logdet


def gaussian_sites_posterior(K, T, h, drop=None):
    """Mean (cn,) and covariance of N(0, blockdiag K) exp(-f^T T f / 2 + h^T f) (class-major),
    through K^-1: the observation ``drop``'s c x c block of T and its c entries of h left
    out (the cavity of that observation)."""
    c, n, _ = K.shape
    T, h = np.array(T, float), np.array(h, float)
    if drop is not None:
        idx = np.arange(c) * n + drop
        T[np.ix_(idx, idx)] = 0.0
        h[idx] = 0.0
    Sigma = np.linalg.inv(np.linalg.inv(block_diag(K)) + T)
    Sigma = 0.5 * (Sigma + Sigma.T)
    return Sigma @ h, Sigma


def observation_block(mean, Sigma, c, n, i):
    """(mean (c,), covariance (c, c)) of observation i's c latent values."""
    idx = np.arange(c) * n + i
    return mean[idx], Sigma[np.ix_(idx, idx)]


def dense_latent_predictive(K, f_hat, Sigma, K_cross, K_star):
    """f* | y for f ~ N(f^, Sigma) (cn) and f* | f ~ N(Kx^T K^-1 f, K** - Kx^T K^-1 Kx):
    mean Kx^T K^-1 f^, covariance K** - Kx^T K^-1 Kx + Kx^T K^-1 Sigma K^-1 Kx, all
    class-major and dense; K_cross (c, n, m), K_star (c, m, m). Returns (c m,), (c m, c m)."""
    Kx = block_diag(K_cross)
    A = np.linalg.solve(block_diag(K), Kx)
    cov = block_diag(K_star) - Kx.T @ A + A.T @ Sigma @ A
    return A.T @ f_hat, 0.5 * (cov + cov.T)


def gaussian_expectation(fun, mean, cov, nodes=24):
    """E[fun(f)] for f ~ N(mean, cov) in c dimensions by a tensor Gauss-Hermite rule in the
    whitened variables; ``fun`` maps F (c, s) to (..., s)."""
    c = len(mean)
    z, w = np.polynomial.hermite_e.hermegauss(nodes)
    w = w / np.sqrt(2 * np.pi)
    Z = np.array(list(itertools.product(z, repeat=c))).T
    Wt = np.prod(np.array(list(itertools.product(w, repeat=c))), axis=1)
    L = np.linalg.cholesky(cov + 1e-14 * np.eye(c))
    return fun(mean[:, None] + L @ Z) @ Wt


def softmax_probabilities(F):
    return np.exp(log_softmax(F, axis=0))


def multinomial_probit_probabilities(F, u_nodes=40):
    c = F.shape[0]
    return np.exp(np.array([multinomial_probit_log_prob(np.full(F.shape[1], k), F, u_nodes) for k in range(c)]))


def multinomial_probit_outer_site(k, tau, nu, c):
    """The Gaussian site over f_i (c values) that the inner sites exp(-tau_j t_j^2 / 2 + nu_j t_j),
    t_j = u + f_k - f_j for the classes j != k in order, make once u ~ N(0, 1) is integrated
    out: the joint precision and location over w = (f, u), then u marginalised (Schur
    complement). Returns (precision (c, c), location (c,))."""
    P = np.zeros((c + 1, c + 1))
    P[c, c] = 1.0
    loc = np.zeros(c + 1)
    for jj, j in enumerate(j for j in range(c) if j != k):
        b = np.zeros(c + 1)
        b[k], b[j], b[c] = 1.0, -1.0, 1.0
        P += tau[jj] * np.outer(b, b)
        loc += nu[jj] * b
    T = P[:c, :c] - np.outer(P[:c, c], P[c, :c]) / P[c, c]
    return T, loc[:c] - P[:c, c] * loc[c] / P[c, c]


def probit_factors_ep_log_z(m0, S0, B, tol=1e-13, max_sweeps=500):
    """log Z_EP for N(w; m0, S0) prod_j Phi(b_j^T w) (B's columns are the b_j) by sequential
    EP with sites exp(-tau_j t^2 / 2 + nu_j t) on t_j = b_j^T w (Minka 2001), the posterior
    recomputed densely at every update:

    log Z_EP = log int N(w; m0, S0) prod_j exp(-tau_j t_j^2 / 2 + nu_j t_j) dw
               + sum_j [log Phi(z_j) - log int N(t; mc_j, vc_j) exp(-tau_j t^2 / 2 + nu_j t) dt],

    the cavities N(mc_j, vc_j) and z_j = mc_j / sqrt(1 + vc_j) at the fixed point."""
    from scipy.special import log_ndtr

    d, J = B.shape
    P0 = np.linalg.inv(S0)
    tau, nu = np.zeros(J), np.zeros(J)

    def cavities():
        S = np.linalg.inv(P0 + (B * tau) @ B.T)
        m = S @ (P0 @ m0 + B @ nu)
        v, mt = np.einsum("dj,de,ej->j", B, S, B), B.T @ m
        vc = 1.0 / (1.0 / v - tau)
        return vc * (mt / v - nu), vc

    for _ in range(max_sweeps):
        change = 0.0
        for j in range(J):
            mc, vc = (a[j] for a in cavities())
            z = mc / np.sqrt(1.0 + vc)
            r = np.exp(-0.5 * z * z - 0.5 * np.log(2 * np.pi) - log_ndtr(z))
            mean = mc + vc * r / np.sqrt(1.0 + vc)
            var = vc - vc * vc * r * (z + r) / (1.0 + vc)
            new_tau, new_nu = 1.0 / var - 1.0 / vc, mean / var - mc / vc
            change = max(change, abs(new_tau - tau[j]), abs(new_nu - nu[j]))
            tau[j], nu[j] = new_tau, new_nu
        if change < tol:
            break
    mc, vc = cavities()
    P, l = (B * tau) @ B.T, B @ nu
    _, logdet = np.linalg.slogdet(np.eye(d) + S0 @ P)
    a = P0 @ m0 + l
    gauss = -0.5 * logdet - 0.5 * m0 @ P0 @ m0 + 0.5 * a @ np.linalg.solve(P0 + P, a)
    site = -0.5 * np.log1p(vc * tau) - 0.5 * mc**2 / vc + 0.5 * (mc / vc + nu) ** 2 / (1.0 / vc + tau)
    return gauss + float(np.sum(log_ndtr(mc / np.sqrt(1.0 + vc)) - site))


def nested_ep_tilted_log_z(k, m, C):
    """The inner EP's log normaliser of N(f; m, C) p(y = k | f) for the multinomial probit:
    w = (f, u) ~ N((m, 0), blockdiag(C, 1)) times Phi(u + f_k - f_j) for every j != k."""
    c = len(m)
    B = np.zeros((c + 1, c - 1))
    for jj, j in enumerate(j for j in range(c) if j != k):
        B[k, jj], B[j, jj], B[c, jj] = 1.0, -1.0, 1.0
    S0 = np.zeros((c + 1, c + 1))
    S0[:c, :c], S0[c, c] = C, 1.0
    return probit_factors_ep_log_z(np.append(m, 0.0), S0, B)


def svgp_bound(Kuu, Kuf, k_diag, y, a, size, seed=0):
    """The bound SVGP maximises, sum_i E_q(f_i)[log softmax_{y_i}(f_i)] - KL(q(u) || p(u)), at
    q(u) = N(m_u, S_u) the softmax Laplace Gaussian of the DTC prior with representer weights a
    (c, n): S_u = (K_uu^-1 + P^T W P)^-1, m_u = K_uu P^T a, P = K_fu K_uu^-1 block diagonal over
    the classes (class-major), W at f^ = P m_u; q(f_i) = N(P_i m_u, P_i S_u P_i^T + diag(K - Q)_i).
    The expectations by ``size`` plain Monte Carlo draws a row. Returns (bound, its Monte Carlo
    standard error)."""
    from scipy.linalg import block_diag as dense_block_diag
    from scipy.special import logsumexp

    c, m, n = Kuf.shape
    P = dense_block_diag(*[np.linalg.solve(A, B).T for A, B in zip(Kuu, Kuf)])  # (c n, c m)
    resid = np.concatenate([kd - np.sum(B * np.linalg.solve(A, B), axis=0) for A, B, kd in zip(Kuu, Kuf, k_diag)])
    Kb = dense_block_diag(*Kuu)
    m_u = Kb @ P.T @ np.asarray(a).ravel()
    f_hat = (P @ m_u).reshape(c, n)
    pi = np.exp(f_hat - logsumexp(f_hat, axis=0))
    Pi = np.vstack([np.diag(p) for p in pi])  # (c n, n)
    W = np.diag(pi.ravel()) - Pi @ Pi.T
    S_u = np.linalg.inv(np.linalg.inv(Kb) + P.T @ W @ P)
    kl = 0.5 * (np.trace(np.linalg.solve(Kb, S_u)) + m_u @ np.linalg.solve(Kb, m_u) - c * m
                + np.linalg.slogdet(Kb)[1] - np.linalg.slogdet(S_u)[1])
    cov = P @ S_u @ P.T + np.diag(resid)
    rng = np.random.default_rng(seed)
    expected, se2 = 0.0, 0.0
    for i in range(n):
        idx = np.arange(c) * n + i
        F = rng.multivariate_normal(f_hat[:, i], cov[np.ix_(idx, idx)], size=size)
        lp = F[:, y[i]] - logsumexp(F, axis=1)
        expected += lp.mean()
        se2 += lp.var() / len(lp)
    return expected - kl, float(np.sqrt(se2))
