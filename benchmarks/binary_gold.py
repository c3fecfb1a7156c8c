"""Binary approximations (EP, Laplace, mean field I / II, ADF) against a gold standard.

At fixed hyperparameters (SE kernel, probit likelihood, jitter 1e-8), each approximation's
log evidence, latent predictive mean and variance, class probabilities and mean test log p
are compared with the exact ones:

* the 2-point problem of ``tests/integration/test_posterior_gold.py``: exact evidence and predictive
  class probabilities in closed form (orthant probabilities), the exact latent posterior
  moments by 2-D quadrature;
* the 30-point problem of ``tests/integration/test_posterior_gold.py`` (sin(2x) labels, 30 % flips
  by noise), a near-separable 2-d synthetic set (noiseless linear labels, 60 training
  points) and Crabs (60 training points): elliptical slice sampling (4 chains, R-hat and
  bulk ESS reported) and annealed importance sampling for log Z
  (``tests/reference/gold_sampler.py``, written without the package's code).

A second table explains mean field I's loose bound: it carries the term
KL0 = (sum_i log [K^-1]_ii + log|K|) / 2, the KL divergence from the factorised Gaussian
prod_i N(0, 1/[K^-1]_ii) to the prior N(0, K), which no likelihood can recover and which
grows without bound as K approaches singularity (small jitter, smooth kernel, dense inputs).

Run:  OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/binary_gold.py [--n-iter 10000]
Writes benchmarks/results/binary_gold.md.
"""

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse
import pathlib
import sys
import time
import warnings

import numpy as np
from scipy import stats
from scipy.special import log_ndtr

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from benchmarks._provenance import write_results  # noqa: E402
from tests import gold_sampler as gs  # noqa: E402

from pymc_gpc import adf, ep, laplace, meanfield  # noqa: E402
from pymc_gpc import likelihoods as L  # noqa: E402

RESULTS = pathlib.Path(__file__).parent / "results"
JITTER = 1e-8
AIS = (64, 1000)  # particles, temperatures
LIK = L.Probit()


def se(A, B, ls, amp):
    d = ((A[:, None] - B[None]) ** 2).sum(-1)
    return amp * np.exp(-0.5 * d / ls**2)


# -- problems --------------------------------------------------------------------------


def two_point():
    """tests/integration/test_posterior_gold.py's X, Y and XS (test labels: the sign of x, as the training labels)."""
    X = np.array([[-0.8], [0.6]])
    Y = np.array([-1.0, 1.0])
    XS = np.array([[-1.5], [0.0], [0.3], [2.0]])
    return X, Y, XS, np.where(XS[:, 0] > 0, 1.0, -1.0)


def thirty_point():
    """tests/integration/test_posterior_gold.py's 30-point set; 200 test points drawn the same way."""
    rng = np.random.default_rng(3)
    X = rng.uniform(-3, 3, size=(30, 1))
    y = np.where(np.sin(2.0 * X[:, 0]) + 0.3 * rng.normal(size=30) > 0, 1.0, -1.0)
    rt = np.random.default_rng(103)
    Xt = rt.uniform(-3, 3, size=(200, 1))
    yt = np.where(np.sin(2.0 * Xt[:, 0]) + 0.3 * rt.normal(size=200) > 0, 1.0, -1.0)
    return X, y, Xt, yt


def near_separable():
    """benchmarks/multiclass_gold.py's near-separable set: noiseless linear labels in 2-d."""
    rng = np.random.default_rng(1)
    X = rng.uniform(-2, 2, size=(160, 2))
    y = np.where(X[:, 0] + 0.5 * X[:, 1] > 0, 1.0, -1.0)
    return X[:60], y[:60], X[60:], y[60:]


def crabs():
    from pymc_gpc.datasets import load_crabs

    d = load_crabs()
    rng = np.random.default_rng(0)
    i, j = rng.permutation(len(d.y_train)), rng.permutation(len(d.y_test))
    return (d.X_train[i[:60]], np.where(d.y_train[i[:60]] > 0, 1.0, -1.0), d.X_test[j[:100]],
            np.where(d.y_test[j[:100]] > 0, 1.0, -1.0))


PROBLEMS = [  # name, loader, lengthscale, amplitudes
    ("2 points (test_posterior_gold)", two_point, [(0.5, 0.7), (3.0, 1.5), (10.0, 0.3), (25.0, 1.0)]),
    ("30 points, 1-d (test_posterior_gold)", thirty_point, [(1.0, 1.0), (25.0, 1.0)]),
    ("near-separable 2-d (60 train)", near_separable, [(1.0, 1.5), (25.0, 1.5), (100.0, 1.5)]),
    ("Crabs (60 train)", crabs, [(1.0, 2.0), (25.0, 2.0), (100.0, 2.0)]),
]


# -- gold standards --------------------------------------------------------------------


def exact_two_point(X, Y, XS, amp, ls):
    """Closed-form log evidence and p(y* = +1 | D); latent moments by 2-D quadrature."""
    K = se(X, X, ls, amp) + JITTER * np.eye(2)

    def corr(C):
        d = np.sqrt(np.diag(C))
        return C / np.outer(d, d)

    C = np.diag(Y) @ (K + np.eye(2)) @ np.diag(Y)
    z = 0.25 + np.arcsin(corr(C)[0, 1]) / (2 * np.pi)
    probs = []
    for xs in XS:
        Z = np.vstack([X, xs[None]])
        yy = np.append(Y, 1.0)
        R = corr(np.diag(yy) @ (se(Z, Z, ls, amp) + JITTER * np.eye(3) * np.array([1, 1, 0]) + np.eye(3)) @ np.diag(yy))
        probs.append((0.125 + (np.arcsin(R[0, 1]) + np.arcsin(R[0, 2]) + np.arcsin(R[1, 2])) / (4 * np.pi)) / z)
    # posterior moments of f on a grid in whitened coordinates f = Lc u
    Lc = np.linalg.cholesky(K)
    g = np.linspace(-9, 9, 1201)
    U1, U2 = np.meshgrid(g, g, indexing="ij")
    F1, F2 = Lc[0, 0] * U1, Lc[1, 0] * U1 + Lc[1, 1] * U2
    logw = stats.norm.logpdf(U1) + stats.norm.logpdf(U2) + log_ndtr(Y[0] * F1) + log_ndtr(Y[1] * F2)
    w = np.exp(logw - logw.max())
    w /= w.sum()
    m = np.array([np.sum(w * F1), np.sum(w * F2)])
    S = np.array([[np.sum(w * (F1 - m[0]) ** 2), np.sum(w * (F1 - m[0]) * (F2 - m[1]))], [0, np.sum(w * (F2 - m[1]) ** 2)]])
    S[1, 0] = S[0, 1]
    Kx, ks = se(X, XS, ls, amp), np.full(len(XS), amp)
    A = np.linalg.solve(K, Kx)
    mean = A.T @ m
    var = ks - np.einsum("ij,ij->j", Kx, A) + np.einsum("ij,ik,kj->j", A, S, A)
    return dict(log_z=float(np.log(z)), log_z_se=0.0, mean=mean, var=var, p=np.array(probs), rhat=None, ess=None)


def sampled(Xtr, ytr, Xte, amp, ls, n_iter):
    K = se(Xtr, Xtr, ls, amp) + JITTER * np.eye(len(Xtr))
    Kx, ks = se(Xtr, Xte, ls, amp), np.full(len(Xte), amp)
    draws = gs.sample_latents(K, ytr, "probit", n_chains=4, n_iter=n_iter, burn=n_iter // 10, thin=10, seed=0)
    mean, cov, p, _ = gs.predictive(K, Kx, ks, draws, "probit")
    rhat, ess = gs.rhat_ess(draws[:, :, :, ::2])
    log_z, log_z_se = gs.log_evidence_ais(K, ytr, "probit", n_particles=AIS[0], n_temps=AIS[1], seed=1)
    return dict(log_z=log_z, log_z_se=log_z_se, mean=mean[:, 0], var=cov[:, 0, 0], p=p[:, 0], rhat=rhat, ess=ess)


# -- approximations --------------------------------------------------------------------

METHODS = {
    "EP": lambda K, y: ep(K, y, LIK, with_grad=False, with_loo=False),
    "Laplace": lambda K, y: laplace(K, y, LIK, with_grad=False, with_loo=False),
    "MF-I (ensemble)": lambda K, y: meanfield(K, y, LIK, with_grad=False, with_loo=False),
    "MF-II (naive)": lambda K, y: meanfield(K, y, LIK, variant="naive", with_grad=False, with_loo=False),
    "ADF (1 pass)": lambda K, y: adf(K, y, LIK),
}


def prior_term(K):
    """KL0 = (sum_i log [K^-1]_ii + log|K|) / 2 >= 0 (Hadamard): KL(prod_i N(0, 1/[K^-1]_ii) || N(0, K))."""
    Kinv = np.linalg.inv(K)
    return 0.5 * (np.sum(np.log(np.diag(Kinv))) + np.linalg.slogdet(K)[1])


def case(name, Xtr, ytr, Xte, yte, amp, ls, n_iter):
    t = time.perf_counter()
    gold = exact_two_point(Xtr, ytr, Xte, amp, ls) if len(ytr) == 2 else sampled(Xtr, ytr, Xte, amp, ls, n_iter)
    t_gold = time.perf_counter() - t
    K = se(Xtr, Xtr, ls, amp) + JITTER * np.eye(len(Xtr))
    Kx, ks = se(Xtr, Xte, ls, amp), np.full(len(Xte), amp)
    lp_g = float(np.mean(np.log(np.where(yte > 0, gold["p"], 1 - gold["p"]))))
    rows = []
    for label, solve in METHODS.items():
        res = solve(K, ytr)
        m, v = res.posterior.predict(res.a, Kx, ks)
        p = LIK.predict(m, v)
        rows.append(dict(
            name=name, amp=amp, ls=ls, method=label, gold=gold, t_gold=t_gold, log_z=res.log_z,
            converged=res.converged,
            mean_err=float(np.sqrt(np.mean((m - gold["mean"]) ** 2) / np.mean(gold["mean"] ** 2))),
            var_err=float(np.mean(np.abs(v / gold["var"] - 1))),
            dp=float(np.mean(np.abs(p - gold["p"]))), dp_max=float(np.max(np.abs(p - gold["p"]))),
            lp=float(np.mean(np.log(np.where(yte > 0, p, 1 - p)))), lp_gold=lp_g))
        r = rows[-1]
        print(f"{name} amp {amp}: {label:16s} dlogZ {r['log_z'] - gold['log_z']:+8.3f} mean {r['mean_err']:.3f} "
              f"var {r['var_err']:.3f} dp {r['dp']:.4f} lp {r['lp']:.3f}/{lp_g:.3f} ({t_gold:.0f} s gold)", flush=True)
    # mean field I's gap against its prior term, and at larger jitters
    la = laplace(K, ytr, LIK, with_grad=False, with_loo=False)
    z = ytr * la.mean
    r = np.exp(stats.norm.logpdf(z) - log_ndtr(z))
    W = r * (z + r)  # -d2 log Phi(y f) / df2 at Laplace's mode
    limit = la.log_z + 0.5 * np.linalg.slogdet(np.eye(len(K)) + W[:, None] * K)[1] - prior_term(K)
    mf = dict(name=name, amp=amp, gap=gold["log_z"] - rows[2]["log_z"], kl0=prior_term(K), jit={},
              limit=rows[2]["log_z"] - limit,
              mode=float(np.max(np.abs(meanfield(K, ytr, LIK, with_grad=False).mean - la.mean))))
    for jit in (1e-4, 1e-2):
        Kj = K + (jit - JITTER) * np.eye(len(K))
        mf["jit"][jit] = (gold["log_z"] - meanfield(Kj, ytr, LIK, with_grad=False).log_z, prior_term(Kj),
                          ep(Kj, ytr, LIK, with_grad=False).log_z - rows[0]["log_z"])
    return rows, mf


def markdown(rows, mfs, n_iter):
    out = ["# Binary approximations against a gold standard: EP, Laplace, mean field, ADF", "",
           "Probit likelihood, SE kernel with the given amplitude (variance) and lengthscale, jitter 1e-8,",
           "fixed hyperparameters. Gold: for the 2-point problem of `tests/integration/test_posterior_gold.py`, the exact",
           "evidence and class probabilities in closed form and the latent moments by 2-D quadrature; for the",
           f"others, elliptical slice sampling ({n_iter} iterations x 4 chains, thinned by 10, max R-hat and min",
           f"bulk ESS over the training latents) and annealed importance sampling for log Z ({AIS[0]} particles,",
           f"{AIS[1]} temperatures; +- its standard error over the particles), `tests/reference/gold_sampler.py`.", "",
           "Columns: dlog Z = approximation - exact; mean err = RMS(m - m_exact) / RMS(m_exact) of the latent",
           "predictive mean at the test points; var err = mean |v / v_exact - 1| of the latent predictive",
           "variance; |dp| = mean (max) absolute error of p(y* = +1); log p = mean test log probability",
           "(approximation / exact predictive). Mean field's predictive variance is the package's heuristic",
           "N(K alpha, (K^-1 + W)^-1) (see `pymc_gpc/approximations/meanfield.py`); ADF is one pass of",
           "assumed-density filtering in data order.", "",
           "| problem | amplitude, lengthscale | gold log Z (R-hat / ESS) | approximation | dlog Z | mean err | var err | mean abs dp (max) | test log p approx / exact |",
           "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        g = r["gold"]
        gz = f"{g['log_z']:.3f}" + (f" +- {g['log_z_se']:.3f} ({g['rhat']:.3f} / {g['ess']:.0f})" if g["rhat"] else " (exact)")
        conv = "" if r["converged"] else " (not converged)"
        out.append(f"| {r['name']} | {r['amp']:g}, {r['ls']:g} | {gz} | {r['method']}{conv} | "
                   f"{r['log_z'] - g['log_z']:+.3f} | {r['mean_err']:.3f} | {r['var_err']:.3f} | "
                   f"{r['dp']:.4f} ({r['dp_max']:.4f}) | {r['lp']:.3f} / {r['lp_gold']:.3f} |")
    out += ["", "## Mean field I: where its gap comes from", "",
            "MF-I's bound is -F = sum_i log Z_i - KL0 - (1/2) m^T K^-1 m + (1/2) sum_i [K^-1]_ii (m_i - c_i)^2",
            "with KL0 = (sum_i log [K^-1]_ii + log|K|) / 2 >= 0, the KL divergence from the best factorised",
            "Gaussian to the prior itself (derivation in `docs/user_guide/approximations.md`). KL0 depends",
            "on K alone and grows as K nears singularity, so the bound loosens with a smaller jitter while",
            "the exact evidence barely moves. Gap = gold log Z - MF-I's bound (nats), at the jitter of the",
            "table above and with the jitter raised to 1e-4 and 1e-2, against the same gold log Z; the",
            "exact evidence's own change with the jitter is estimated by EP's (last column: EP's log Z at",
            "jitter 1e-2 minus at 1e-8).",
            "",
            "As s_i^2 = 1 / [K^-1]_ii -> 0 the fixed point becomes Laplace's mode f^ (m = K grad log p(y | m))",
            "and -F -> log Z_Laplace + log|I + W K| / 2 - KL0 (W at f^). Last two columns, at jitter 1e-8:",
            "max_i |m_i - f^_i| and MF-I's bound minus that limit.", "",
            "| problem | amplitude | gap (jitter 1e-8) | KL0 | gap / KL0 (jitter 1e-4) | gap / KL0 (jitter 1e-2) | EP's change at 1e-2 | max abs (m - f^) | bound - limit |",
            "|---|---|---|---|---|---|---|---|---|"]
    for m in mfs:
        j4, j2 = m["jit"][1e-4], m["jit"][1e-2]
        out.append(f"| {m['name']} | {m['amp']:g} | {m['gap']:.2f} | {m['kl0']:.2f} | {j4[0]:.2f} / {j4[1]:.2f} | "
                   f"{j2[0]:.2f} / {j2[1]:.2f} | {j2[2]:+.3f} | {m['mode']:.1e} | {m['limit']:+.3f} |")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--n-iter", type=int, default=10000)
    parser.add_argument("--out", default=str(RESULTS / "binary_gold.md"))
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    rows, mfs = [], []
    for name, loader, settings in PROBLEMS:
        data = loader()
        for amp, ls in settings:
            r, m = case(name, *data, amp, ls, args.n_iter)
            rows += r
            mfs.append(m)
    text = markdown(rows, mfs, args.n_iter)
    print(text)
    write_results(args.out, text, note="2 cores shared with three other engineers' jobs")
