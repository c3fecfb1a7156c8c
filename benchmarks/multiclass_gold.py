"""Several classes (and two) against a gold standard, and the predictive's choice on held-out data.

``gold``: at fixed hyperparameters, softmax Laplace and nested EP (multinomial probit)
against the exact posterior of their own likelihood (elliptical slice sampling, 4 chains,
R-hat / ESS checked; log evidence by annealed importance sampling; ``tests/reference/gold_sampler.py``)
on three small 3-class problems (a synthetic 2-d set, a Forensic Glass subset, a digits
subset), each at a moderate kernel amplitude and at the large unequal per-class amplitudes
MAP-II chose on digits (e^1.4, e^2.4, e^3.4). Reports log Z, the latent predictive mean
and covariance errors, and the class probabilities of each predictive
(``MulticlassLikelihood.predict``) against the exact ones (Kuss & Rasmussen 2005's form).

``heldout``: MAP-II fits (one isotropic SE kernel per class) on digits (600 / 797, inputs
/ 16), Forensic Glass (a stratified half split), wine (scikit-learn's bundled set, not
used while choosing), iris (likewise, added after wine's result) and Palmer penguins
(``datasets.load_penguins``, added last, its protocol fixed before its first run: stratified
halves, seed 0, the four measurements standardised on the training half); test errors, mean
test log p and fit + predict CPU seconds of every predictive, against scikit-learn's
one-vs-rest GPC and multinomial logistic regression.

``binary``: EP, Laplace and mean field (binary, probit and logistic) against the same
gold standard on a Pima subset, Crabs, and a near-separable synthetic set.

``profile``: nested EP's cost at ten classes (digits-sized), with and without its rough early
sweeps, softmax Laplace beside; ``profile-fit``: whole MAP-II fits and predictions on digits,
softmax Laplace and nested EP (with and without the rough sweeps, and with a coarse first
L-BFGS run).

``diagnose``: at nested EP's MAP-II hyperparameters on wine and Forensic Glass, the exact
posterior predictive (gold sampler) against nested EP's predictives: is a held-out loss the
approximation's or the model's?

Run:  OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/multiclass_gold.py gold
      OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/multiclass_gold.py heldout [--only digits]
      OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/multiclass_gold.py binary
      OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/multiclass_gold.py profile
      OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/multiclass_gold.py profile-fit
      OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/multiclass_gold.py diagnose [--only wine]
Each task prints its markdown section; benchmarks/results/multiclass_gold.md collects them.
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

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from tests.reference import gold_sampler as gs  # noqa: E402

import pymc_gpc  # noqa: E402
from pymc_gpc import multinomial_probit_ep, softmax_laplace  # noqa: E402
from pymc_gpc import likelihoods as L  # noqa: E402

RESULTS = pathlib.Path(__file__).parent / "results"
BIG = np.exp([1.4, 2.4, 3.4])  # digits' MAP-II amplitudes (range), one per class


def se(A, B, ls, amp):
    d = ((A[:, None] - B[None]) ** 2).sum(-1)
    return amp * np.exp(-0.5 * d / ls**2)


def stacks(Xtr, Xte, ls, amps, jitter=1e-8):
    K = np.array([se(Xtr, Xtr, ls, a) + jitter * np.eye(len(Xtr)) for a in amps])
    Kx = np.array([se(Xtr, Xte, ls, a) for a in amps])
    ks = np.array([np.full(len(Xte), a) for a in amps])
    return K, Kx, ks


def _subset(X, y, classes, per_class, n_test, seed):
    rng = np.random.default_rng(seed)
    tr, te = [], []
    for k in classes:
        idx = rng.permutation(np.flatnonzero(y == k))
        tr += list(idx[:per_class])
        te += list(idx[per_class:per_class + n_test // len(classes)])
    codes = {k: j for j, k in enumerate(classes)}
    return X[tr], np.array([codes[v] for v in y[tr]]), X[te], np.array([codes[v] for v in y[te]])


def problems():
    """(name, Xtr, ytr, Xte, yte, lengthscale): three small 3-class problems."""
    rng = np.random.default_rng(0)
    Xs = rng.uniform(-2, 2, size=(105, 2))
    score = np.stack([Xs[:, 0], -0.5 * Xs[:, 0] + Xs[:, 1], -Xs[:, 1] * Xs[:, 0]]) + 0.5 * rng.normal(size=(3, 105))
    ys = np.argmax(score, axis=0)
    out = [("synthetic (2-d)", Xs[:45], ys[:45], Xs[45:], ys[45:], 1.0)]
    from pymc_gpc.datasets import load_fgl

    g = load_fgl()
    Xg = (g.X - g.X.mean(0)) / g.X.std(0)
    out.append(("Forensic Glass (WinF, WinNF, Head)", *_subset(Xg, g.y, ["WinF", "WinNF", "Head"], 15, 60, 1), 2.0))
    from sklearn.datasets import load_digits

    d = load_digits()
    out.append(("digits (3, 5, 8)", *_subset(d.data / 16.0, d.target, [3, 5, 8], 15, 60, 2), 3.0))
    return out


def _contrast(cov):
    """Covariances of the contrasts f_k - mean_j f_j (what the softmax sees): P cov P."""
    c = cov.shape[-1]
    P = np.eye(c) - 1.0 / c
    return P @ cov @ P


def _rel_fro(A, B):
    return float(np.mean(np.linalg.norm(A - B, axis=(1, 2)) / np.linalg.norm(B, axis=(1, 2))))


def gold_case(name, Xtr, ytr, Xte, yte, ls, amps, kind, n_iter=20000, seed=0):
    K, Kx, ks = stacks(Xtr, Xte, ls, amps)
    t = time.perf_counter()
    draws = gs.sample_latents(K, ytr, kind, n_chains=4, n_iter=n_iter, burn=n_iter // 10, thin=10, seed=seed)
    mean_g, cov_g, p_g, p_chain = gs.predictive(K, Kx, ks, draws, kind)
    M = np.einsum("xskn,knm->xsmk", draws, np.array([np.linalg.solve(K[k], Kx[k]) for k in range(len(K))]))
    rhat, ess = gs.rhat_ess(M[:, :, :20])
    log_z, log_z_se = gs.log_evidence_ais(K, ytr, kind, n_particles=32, n_temps=300,
                                          seed=seed + 1)
    t_gold = time.perf_counter() - t
    if kind == "softmax":
        res = softmax_laplace(K, ytr, with_grad=False, with_loo=False)
        lik = L.Softmax()
    else:
        res = multinomial_probit_ep(K, ytr, with_grad=False, with_loo=False)
        lik = L.MultinomialProbit()
    mean_a, cov_a = res.posterior.predict(res.a, Kx, ks)
    mean_a = mean_a.T
    row = dict(name=name, kind=kind, amps=amps, log_z=log_z, log_z_se=log_z_se, log_z_approx=res.log_z,
               rhat=rhat, ess=ess, t_gold=t_gold,
               mean_err=float(np.sqrt(np.mean((mean_a - mean_g) ** 2)) / np.sqrt(np.mean(mean_g**2))),
               cov_err=_rel_fro(cov_a, cov_g), contrast_err=_rel_fro(_contrast(cov_a), _contrast(cov_g)),
               lp_gold=float(np.mean(np.log(p_g[np.arange(len(yte)), yte]))),
               err_gold=int(np.sum(np.argmax(p_g, 1) != yte)), probs={},
               mc_se=float(np.max(p_chain.std(axis=0)) / 2.0))
    for pred in lik.predictives:
        p = lik.predict(mean_a, cov_a, predictive=pred)
        row["probs"][pred] = (float(np.mean(np.abs(p - p_g))), float(np.max(np.abs(p - p_g))),
                              float(np.mean(np.log(p[np.arange(len(yte)), yte]))), int(np.sum(np.argmax(p, 1) != yte)))
    return row


def gold(n_iter=20000):
    rows = []
    for name, Xtr, ytr, Xte, yte, ls in problems():
        for amps in (np.full(3, 4.0), BIG):
            for kind in ("softmax", "probit-multi"):
                r = gold_case(name, Xtr, ytr, Xte, yte, ls, amps, kind, n_iter=n_iter)
                rows.append(r)
                print(name, kind, np.round(np.log(amps), 1), {k: v for k, v in r.items() if k not in ("name",)},
                      flush=True)
    return rows


def gold_markdown(rows):
    lines = ["## Several classes: softmax Laplace and nested EP against exact sampling (fixed hyperparameters)", "",
             "Each approximation against the exact posterior of its own likelihood (Laplace: softmax; nested EP:",
             "multinomial probit). 3 classes x 15 training points, 60 test points; SE kernel with the given",
             "lengthscale, per-class amplitudes (variances) 4, 4, 4 or e^1.4, e^2.4, e^3.4 (digits' MAP-II range).",
             "Gold: elliptical slice sampling, 4 chains (max R-hat and min bulk ESS over 20 test points' latent",
             "means x 3 classes); log Z by AIS (32 particles, 300 temperatures from the dense Gaussian; +- its standard error). Mean error: RMS",
             "(approx - exact) / RMS exact over test points and classes; cov error: mean relative Frobenius",
             "error of the 3 x 3 latent predictive covariances (contrast: of P cov P, P = I - 11^T / 3, the",
             "part the class probabilities depend on). |dp|: mean (max) absolute error of the class",
             "probabilities against the exact predictive; log p: mean test log probability (exact's in the",
             "column 'exact').", "",
             "| problem | amplitudes | approximation | R-hat / ESS | log Z exact | log Z approx | mean err | cov err (contrast) | predictive: mean abs dp (max) | log p: exact / predictives |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        approx = "softmax Laplace" if r["kind"] == "softmax" else "nested EP (MNP)"
        amps = "4, 4, 4" if np.allclose(r["amps"], 4.0) else "e^1.4, e^2.4, e^3.4"
        dp = "; ".join(f"{k} {v[0]:.3f} ({v[1]:.3f})" for k, v in r["probs"].items())
        lp = f"{r['lp_gold']:.3f} / " + "; ".join(f"{k} {v[2]:.3f}" for k, v in r["probs"].items())
        lines.append(f"| {r['name']} | {amps} | {approx} | {r['rhat']:.3f} / {r['ess']:.0f} | "
                     f"{r['log_z']:.2f} +- {r['log_z_se']:.2f} | {r['log_z_approx']:.2f} | {r['mean_err']:.3f} | "
                     f"{r['cov_err']:.3f} ({r['contrast_err']:.3f}) | {dp} | {lp} |")
    return lines


# -- held-out comparison of the predictives ---------------------------------------------


def heldout_data(name):
    from sklearn.datasets import load_digits, load_wine

    from pymc_gpc.datasets import load_fgl

    if name == "digits":
        d = load_digits()
        idx = np.random.default_rng(0).permutation(len(d.target))
        X, y = d.data / 16.0, d.target
        return X[idx[:600]], y[idx[:600]], X[idx[-797:]], y[idx[-797:]]
    if name == "glass":
        g = load_fgl()
        X, y = g.X, g.y
    elif name == "iris":
        from sklearn.datasets import load_iris

        X, y = load_iris(return_X_y=True)
    elif name == "penguins":
        from pymc_gpc.datasets import load_penguins

        p = load_penguins()
        X, y = p.X, p.y
    else:
        w = load_wine()
        X, y = w.data, w.target
    from pymc_gpc.datasets import stratified_folds

    half = stratified_folds(y, 2, seed=0) == 0
    mu, sd = X[half].mean(0), X[half].std(0)
    return (X[half] - mu) / sd, y[half], (X[~half] - mu) / sd, y[~half]


def _gp_fit(Xtr, ytr, Xte, lik, cls):
    import pymc as pm
    import pytensor.tensor as pt

    c, d = len(np.unique(ytr)), Xtr.shape[1]
    t = time.process_time()
    with pm.Model() as model:
        log_ls = pm.Normal("log_ls", np.log(np.sqrt(d)), 1.5, shape=c)
        log_amp = pm.Normal("log_amp", 0.0, 3.0, shape=c)
        covs = [pt.exp(log_amp[k]) * pm.gp.cov.ExpQuad(d, ls=pt.exp(log_ls[k])) for k in range(c)]
        gp = cls(cov_func=covs, likelihood=lik)
        gp.marginal_likelihood("y", X=Xtr, y=ytr)
        fit = pymc_gpc.fit(method="map", progressbar=False)
    _, mean, cov = gp.predict(Xte, point=fit.point, model=model, return_latent=True)
    return gp, mean.T, cov, time.process_time() - t, fit.point


def heldout(names=("digits", "glass", "wine")):
    from sklearn.gaussian_process import GaussianProcessClassifier
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel
    from sklearn.linear_model import LogisticRegression

    lines = []
    for name in names:
        Xtr, ytr, Xte, yte = heldout_data(name)
        classes = np.unique(ytr)
        codes = np.searchsorted(classes, yte)
        rows = []

        def score(label, p, t):
            lp = float(np.mean(np.log(np.maximum(p[np.arange(len(codes)), codes], 1e-300))))
            rows.append((label, int(np.sum(np.argmax(p, 1) != codes)), lp, t))
            print(name, rows[-1], flush=True)

        for lik, cls, label in ((L.Softmax(), pymc_gpc.MarginalLaplace, "softmax Laplace"),
                                (L.MultinomialProbit(), pymc_gpc.MarginalEP, "nested EP (MNP)")):
            gp, mean, cov, t, point = _gp_fit(Xtr, ytr, Xte, lik, cls)
            print(name, label, {k: np.round(v, 2) for k, v in point.items() if "log" in k and "__" not in k})
            for pred in lik.predictives:  # each row: the fit and gp.predict (the default predictive)
                score(f"{label}, predictive={pred!r}", lik.predict(mean, cov, predictive=pred), t)
        t = time.process_time()
        clf = GaussianProcessClassifier(ConstantKernel(1.0) * RBF(1.0), multi_class="one_vs_rest",
                                        random_state=0).fit(Xtr, ytr)
        score("scikit-learn GPC one-vs-rest", clf.predict_proba(Xte), time.process_time() - t)
        t = time.process_time()
        score("multinomial logistic regression", LogisticRegression(max_iter=5000).fit(Xtr, ytr).predict_proba(Xte),
              time.process_time() - t)
        lines += [f"### {name}: {len(ytr)} train / {len(yte)} test, {len(classes)} classes", "",
                  "| method | test errors | mean test log p | fit + predict CPU time (default predictive) |",
                  "|---|---|---|---|"]
        lines += [f"| {a} | {b} | {c:.3f} | {d:.1f} s |" for a, b, c, d in rows] + [""]
    return lines


def _stacks_per_class(Xtr, Xte, ls, amps, jitter=1e-8):
    """(K, Kx, ks) with one lengthscale and one amplitude per class (MAP-II's kernels)."""
    K = np.array([se(Xtr, Xtr, l, a) + jitter * np.eye(len(Xtr)) for l, a in zip(ls, amps)])
    Kx = np.array([se(Xtr, Xte, l, a) for l, a in zip(ls, amps)])
    ks = np.array([np.full(len(Xte), a) for a in amps])
    return K, Kx, ks


def diagnose(names=("wine", "glass"), n_iter=10000):
    """Why a predictive wins or loses held out: at nested EP's MAP-II hyperparameters
    (``_gp_fit``), the exact posterior predictive (``tests/reference/gold_sampler.py``) against
    nested EP's latent moments and its two predictives, per dataset."""
    lines = ["| dataset | MAP-II log lengthscales / log amplitudes | predictive | test errors | "
             "mean test log p | mean abs dp to exact |", "|---|---|---|---|---|---|"]
    for name in names:
        Xtr, ytr, Xte, yte = heldout_data(name)
        classes = np.unique(ytr)
        ytr, yte = np.searchsorted(classes, ytr), np.searchsorted(classes, yte)
        lik = L.MultinomialProbit()
        _, mean, cov, _, point = _gp_fit(Xtr, ytr, Xte, lik, pymc_gpc.MarginalEP)
        ls, amps = np.exp(point["log_ls"]), np.exp(point["log_amp"])
        K, Kx, ks = _stacks_per_class(Xtr, Xte, ls, amps)
        draws = gs.sample_latents(K, ytr, "probit-multi", n_chains=4, n_iter=n_iter, burn=n_iter // 10,
                                  thin=10, seed=0)
        mean_g, cov_g, p_g, _ = gs.predictive(K, Kx, ks, draws, "probit-multi")
        M = np.einsum("xskn,knm->xsmk", draws, np.array([np.linalg.solve(K[k], Kx[k]) for k in range(len(K))]))
        rhat, ess = gs.rhat_ess(M[:, :, :20])
        res = multinomial_probit_ep(K, ytr, with_grad=False, with_loo=False)
        mean_a, cov_a = res.posterior.predict(res.a, Kx, ks)
        mean_a = mean_a.T
        hyp = f"{np.round(np.log(ls), 2).tolist()} / {np.round(np.log(amps), 2).tolist()}"
        print(name, hyp, "R-hat", rhat, "ESS", ess, flush=True)
        print(name, "mean err", float(np.sqrt(np.mean((mean_a - mean_g) ** 2)) / np.sqrt(np.mean(mean_g**2))),
              "cov err", _rel_fro(cov_a, cov_g), "contrast err", _rel_fro(_contrast(cov_a), _contrast(cov_g)),
              "fit's moments vs fixed-hyperparameter EP", float(np.max(np.abs(mean - mean_a))), flush=True)
        rows = [("exact (gold sampler)", p_g)] + [(f"nested EP, {pred!r}", lik.predict(mean_a, cov_a, predictive=pred))
                                                  for pred in lik.predictives]
        rows.append(("exact latent moments, 'integrate'", lik.predict(mean_g, cov_g, predictive="integrate")))
        rows.append(("exact latent moments, 'mean'", lik.predict(mean_g, cov_g, predictive="mean")))
        for label, p in rows:
            lp = float(np.mean(np.log(np.maximum(p[np.arange(len(yte)), yte], 1e-300))))
            err = int(np.sum(np.argmax(p, 1) != yte))
            lines.append(f"| {name} | {hyp} | {label} | {err} | {lp:.3f} | {np.mean(np.abs(p - p_g)):.4f} |")
            print(lines[-1], flush=True)
        worst = np.argsort(np.log(p_g[np.arange(len(yte)), yte]))[:5]
        for i in worst:
            print(name, "worst test point", i, "class", yte[i], "exact p", np.round(p_g[i], 3), "EP mean",
                  np.round(mean_a[i], 2), "sd", np.round(np.sqrt(np.diag(cov_a[i])), 2), flush=True)
    return lines


# -- nested EP's cost at ten classes ------------------------------------------------------


def profile(n=600, repeats=2):
    """Cold and warm (kernel 2 % away) nested-EP evaluations with gradient on digits' first n
    training points (10 classes), at kernels like MAP-II's (per-class amplitudes e^1.4 ..
    e^3.4, lengthscale 3), with and without ``rough_sweeps``, alternated ``repeats`` times:
    wall and CPU seconds (one BLAS thread), sweeps, and the two paths' log Z and gradient
    differences; softmax Laplace beside. Compilation is done before timing."""
    from pymc_gpc.validation import trusted_kernel

    Xtr, ytr, _, _ = heldout_data("digits")
    Xtr, ytr = Xtr[:n], ytr[:n]
    amps = np.exp(np.linspace(1.4, 3.4, 10))
    K = stacks(Xtr, Xtr[:1], 3.0, amps, jitter=1e-6)[0]
    K2 = stacks(Xtr, Xtr[:1], 3.0 * 1.02, amps, jitter=1e-6)[0]

    def timed(f):
        t, cpu = time.perf_counter(), time.process_time()
        r = f()
        return r, time.perf_counter() - t, time.process_time() - cpu

    out, last = [], {}
    with trusted_kernel():
        for solve in (multinomial_probit_ep, softmax_laplace):  # compile
            solve(K[:, :30, :30], ytr[:30], with_loo=False)
        for _ in range(repeats):
            for label, solve in (("nested EP, all sweeps exact",
                                  lambda K, **kw: multinomial_probit_ep(K, ytr, rough_sweeps=False, **kw)),
                                 ("nested EP, rough early sweeps",
                                  lambda K, **kw: multinomial_probit_ep(K, ytr, rough_sweeps=True, **kw)),
                                 ("softmax Laplace", lambda K, **kw: softmax_laplace(K, ytr, **kw))):
                r, w1, c1 = timed(lambda: solve(K, with_loo=False))
                r2, w2, c2 = timed(lambda: solve(K2, state=r.state, with_loo=False))
                last[label] = (r, r2)
                out.append(f"| {label} | {w1:.2f} s / {c1:.2f} s ({r.n_iter}) | {w2:.2f} s / {c2:.2f} s ({r2.n_iter}) |")
                print(out[-1], flush=True)
    (a, a2), (b, b2) = last["nested EP, all sweeps exact"], last["nested EP, rough early sweeps"]
    for x, y, which in ((a, b, "cold"), (a2, b2, "warm")):
        gap = np.max(np.abs(x.dlog_z_dK - y.dlog_z_dK)) / np.max(np.abs(x.dlog_z_dK))
        out.append(f"{which}: |log Z difference| {abs(x.log_z - y.log_z):.1e}, largest gradient difference "
                   f"{gap:.1e} of the largest entry")
        print(out[-1], flush=True)
    return out


FIT_VARIANTS = (
    # label, likelihood, GP class, solver options, the approximation's coarse_fit_defaults for
    # the run (None: the registry's)
    ("softmax Laplace, one run (the default)", L.Softmax, "MarginalLaplace", {}, None),
    ("softmax Laplace, coarse first run at Newton tol 1e-4, rough gradient", L.Softmax, "MarginalLaplace", {},
     {"tol": 1e-4, "rough_gradient": True}),
    ("nested EP, one run", L.MultinomialProbit, "MarginalEP", {}, {}),
    ("nested EP, coarse first run at tol 1e-4 (the default)", L.MultinomialProbit, "MarginalEP", {}, None),
)


def _counting_solves():
    """Wrap the solver dispatch (``approximations.solve.solve``) to count solves and sweeps."""
    from pymc_gpc.approximations import solve as solve_module

    counts = {"solves": 0, "sweeps": 0}
    original = solve_module.solve

    def counted(*args, **kwargs):
        res = original(*args, **kwargs)
        counts["solves"] += 1
        counts["sweeps"] += int(res.n_iter)
        return res

    solve_module.solve = counted
    return counts


def _compile(X, y, n=40):
    """Compile (numba) what the fits and predictions call, on n points, before any timing."""
    from pymc_gpc.validation import trusted_kernel

    K = stacks(X[:n], X[:1], 3.0, np.exp(np.linspace(1.4, 3.4, 10)), jitter=1e-6)[0]
    with trusted_kernel():
        for rough in (False, True):
            multinomial_probit_ep(K, y[:n], rough_sweeps=rough)
        softmax_laplace(K, y[:n])
    cov = np.tile(np.eye(10), (2, 1, 1))
    for lik in (L.MultinomialProbit(), L.Softmax()):
        for pred in lik.predictives:
            lik.predict(np.zeros((2, 10)), cov, predictive=pred)


def profile_fit(n=600, only=None):
    """Whole MAP-II fits on digits' n training points (``_gp_fit``'s model) and the prediction
    at the 797 test points: CPU seconds (one BLAS thread) of the fit and of the prediction
    (``gp.predict`` with the default predictive), the solves and sweeps the fit took, and
    the optimum. Variants (``FIT_VARIANTS``): softmax Laplace and nested EP, each with and
    without a coarse first L-BFGS run (``estimation.type2``'s ``_coarse_stage``, enabled by
    the registry's ``coarse_fit_defaults``; set here for the run only,
    ``registry.APPROXIMATIONS`` is not changed on disk)."""
    import dataclasses

    import pymc as pm
    import pytensor.tensor as pt

    from pymc_gpc.approximations import registry

    Xtr, ytr, Xte, yte = heldout_data("digits")
    Xtr, ytr = Xtr[:n], ytr[:n]
    c, d = len(np.unique(ytr)), Xtr.shape[1]
    _compile(Xtr, ytr)
    counts = _counting_solves()
    out, points = [], {}
    for label, lik_type, cls, options, coarse in FIT_VARIANTS:
        if only and not any(o in label for o in only):
            continue
        name = "ep" if lik_type is L.MultinomialProbit else "laplace"  # their multi-class solvers
        entry = registry.APPROXIMATIONS[name]
        if coarse is not None:
            solver = dataclasses.replace(entry.solvers["multiclass"], coarse_fit_defaults=coarse)
            registry.APPROXIMATIONS[name] = dataclasses.replace(entry, solvers={**entry.solvers, "multiclass": solver})
        try:
            counts.update(solves=0, sweeps=0)
            cpu = time.process_time()
            with pm.Model() as model:
                log_ls = pm.Normal("log_ls", np.log(np.sqrt(d)), 1.5, shape=c)
                log_amp = pm.Normal("log_amp", 0.0, 3.0, shape=c)
                covs = [pt.exp(log_amp[k]) * pm.gp.cov.ExpQuad(d, ls=pt.exp(log_ls[k])) for k in range(c)]
                gp = getattr(pymc_gpc, cls)(cov_func=covs, likelihood=lik_type(), **options)
                gp.marginal_likelihood("y", X=Xtr, y=ytr)
                fit = pymc_gpc.fit(method="map", progressbar=False)
            fit_cpu, solves, sweeps = time.process_time() - cpu, counts["solves"], counts["sweeps"]
            cpu = time.process_time()
            p = gp.predict(Xte, point=fit.point, model=model)
            predict_cpu = time.process_time() - cpu
        finally:
            registry.APPROXIMATIONS[name] = entry
        codes = np.searchsorted(gp.classes, yte)
        lp = float(np.mean(np.log(np.maximum(p[np.arange(len(codes)), codes], 1e-300))))
        errors = int(np.sum(np.argmax(p, 1) != codes))
        hyp = np.concatenate([fit.point["log_ls"], fit.point["log_amp"]])
        ref = points.setdefault(lik_type.__name__, hyp)
        out.append(f"| {label} | {fit_cpu:.1f} s | {predict_cpu:.1f} s | {fit_cpu + predict_cpu:.1f} s | "
                   f"{fit.n_iter} / {solves} / {sweeps} | {fit.log_evidence:.6f} | "
                   f"{np.max(np.abs(hyp - ref)):.1e} | {errors} | {lp:.3f} |")
        print(out[-1], flush=True)
    return ["| variant | fit CPU | predict CPU | total | L-BFGS iterations / solves / sweeps | log evidence at the "
            "optimum | max abs difference of the optimum's log hyperparameters from the first of its likelihood "
            "| test errors | mean test log p |", "|---|---|---|---|---|---|---|---|---|"] + out


# -- binary approximations against the same gold standard ---------------------------------


def binary_problems():
    """(name, Xtr, y (+-1), Xte, yte, lengthscale): Pima and Crabs subsets, a near-separable set."""
    from pymc_gpc.datasets import load_crabs, load_pima

    out = []
    for name, loader, ls in (("Pima (60 train)", load_pima, 2.0), ("Crabs (60 train)", load_crabs, 2.0)):
        d = loader()
        rng = np.random.default_rng(0)
        i = rng.permutation(len(d.y_train))
        j = rng.permutation(len(d.y_test))
        out.append((name, d.X_train[i[:60]], np.where(d.y_train[i[:60]] > 0, 1.0, -1.0), d.X_test[j[:100]],
                    np.where(d.y_test[j[:100]] > 0, 1.0, -1.0), ls))
    rng = np.random.default_rng(1)
    X = rng.uniform(-2, 2, size=(160, 2))
    y = np.where(X[:, 0] + 0.5 * X[:, 1] > 0, 1.0, -1.0)  # noiseless: separable
    out.append(("near-separable synthetic (2-d, 60 train)", X[:60], y[:60], X[60:], y[60:], 1.5))
    return out


def binary_case(name, Xtr, ytr, Xte, yte, ls, amp, lik_name, n_iter=10000):
    from pymc_gpc import ep, laplace, meanfield

    K = se(Xtr, Xtr, ls, amp) + 1e-8 * np.eye(len(Xtr))
    Kx, ks = se(Xtr, Xte, ls, amp), np.full(len(Xte), amp)
    draws = gs.sample_latents(K, ytr, lik_name, n_chains=4, n_iter=n_iter, burn=n_iter // 10, thin=10, seed=0)
    mean_g, cov_g, p_g, _ = gs.predictive(K, Kx, ks, draws, lik_name)
    rhat, ess = gs.rhat_ess(draws[:, :, :, ::4])
    log_z, log_z_se = gs.log_evidence_ais(K, ytr, lik_name, n_particles=32, n_temps=300, seed=1)
    lik = L.Probit() if lik_name == "probit" else L.Logistic()
    lp_g = float(np.mean(np.log(np.where(yte > 0, p_g[:, 0], 1 - p_g[:, 0]))))
    rows = []
    methods = {"EP": lambda: ep(K, ytr, lik, with_grad=False, with_loo=False),
               "Laplace": lambda: laplace(K, ytr, lik, with_grad=False, with_loo=False),
               "mean field (MF-I, ensemble)": lambda: meanfield(K, ytr, lik, with_grad=False, with_loo=False),
               "mean field (MF-II, naive)": lambda: meanfield(K, ytr, lik, variant="naive", with_grad=False,
                                                               with_loo=False)}
    for label, solve in methods.items():
        try:
            res = solve()
        except Exception as e:  # noqa: BLE001 -- an approximation that fails is a row saying so
            rows.append((name, amp, lik_name, label, str(e)[:60]))
            continue
        m, v = res.posterior.predict(res.a, Kx, ks)
        p = lik.predict(m, v)
        lp = float(np.mean(np.log(np.where(yte > 0, p, 1 - p))))
        rows.append((name, amp, lik_name, label, f"{rhat:.3f} / {ess:.0f}", f"{log_z:.2f} +- {log_z_se:.2f}",
                     f"{res.log_z:.2f}", f"{np.sqrt(np.mean((m - mean_g[:, 0]) ** 2)) / np.sqrt(np.mean(mean_g**2)):.3f}",
                     f"{np.mean(np.abs(np.sqrt(v) / np.sqrt(cov_g[:, 0, 0]) - 1)):.3f}",
                     f"{np.mean(np.abs(p - p_g[:, 0])):.4f} ({np.max(np.abs(p - p_g[:, 0])):.4f})",
                     f"{lp_g:.3f} / {lp:.3f}"))
        print(rows[-1], flush=True)
    return rows


def binary(n_iter=10000):
    lines = ["## Two classes: EP, Laplace and mean field against exact sampling (fixed hyperparameters)", "",
             "SE kernel, the given amplitude (variance); 60 training points, up to 100 test points; gold as above",
             "(4 chains of elliptical slice sampling, AIS log Z). Mean err: RMS relative error of the latent",
             "predictive mean; sd err: mean |sd / sd_exact - 1| of the latent predictive standard deviation;",
             "|dp|: mean (max) absolute error of p(y* = +1); log p: mean test log probability, exact / approx.", "",
             "| problem | amplitude | likelihood | approximation | R-hat / ESS | log Z exact | log Z approx | mean err | sd err | mean abs dp (max) | log p exact / approx |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for prob in binary_problems():
        for amp in (1.0, 25.0):
            for lik_name in ("probit", "logistic"):
                for r in binary_case(*prob, amp, lik_name, n_iter=n_iter):
                    lines.append("| " + " | ".join(str(v) for v in r) + " |")
    return lines


def _blocks(text):
    """The blocks of printed markdown: each from a heading ('#' line) to the end of the first
    table after it, as (heading, lines)."""
    out, lines = [], text.splitlines()
    for i, line in enumerate(lines):
        if not line.startswith("#"):
            continue
        j, in_table = i + 1, False
        while j < len(lines) and not lines[j].startswith("#"):
            if lines[j].startswith("|"):
                in_table = True
            elif in_table:
                break
            j += 1
        out.append((line, lines[i:j]))
    return out


def replace_blocks(body, section):
    """``body`` with each block of ``section`` (``_blocks``) put in place of the block with the
    same heading; a heading ``body`` lacks is a ValueError."""
    lines = body.splitlines()
    for heading, new in _blocks(section):
        if heading not in lines:
            raise ValueError(f"the results file has no heading {heading!r} to replace")
        i = lines.index(heading)
        old = dict(_blocks("\n".join(lines[i:])))[heading]
        lines[i:i + len(old)] = new
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("task", nargs="+", choices=["gold", "heldout", "binary", "profile", "profile-fit", "diagnose"])
    parser.add_argument("--n-iter", type=int, default=20000)
    parser.add_argument("--only", nargs="*")
    parser.add_argument("--out", default=None,
                        help="also write what the tasks print to this results file (in benchmarks/results), "
                             "after the provenance header")
    parser.add_argument("--replace", default=None,
                        help="in this results file (in benchmarks/results), replace each block the tasks print "
                             "(from its heading to the end of its first table) by the new one; the rest of the "
                             "file is kept, under a new provenance header")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    sections = []
    for task in args.task:
        if task == "gold":
            sections.append("\n".join(gold_markdown(gold(args.n_iter))))
        elif task == "binary":
            sections.append("\n".join(binary(args.n_iter)))
        elif task == "profile":
            sections.append("\n".join(profile()))
        elif task == "heldout":
            sections.append("\n".join(heldout(args.only or ("digits", "glass", "wine", "iris", "penguins"))))
        elif task == "profile-fit":
            sections.append("\n".join(profile_fit(only=args.only)))
        elif task == "diagnose":
            sections.append("\n".join(diagnose(args.only or ("wine", "glass"), args.n_iter)))
        print(sections[-1], flush=True)
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
    from _provenance import write_results  # benchmarks/_provenance.py

    if args.out:
        write_results(RESULTS / args.out, "\n\n".join(sections) + "\n", peers=("scikit-learn",))
    if args.replace:
        old = (RESULTS / args.replace).read_text()
        body = old[old.index("\n# "):] if old.startswith("<!--") else old
        for section in sections:
            body = replace_blocks(body, section)
        previous = "; ".join(line[2:].replace("**", "") for line in old[:old.index("\n# ")].splitlines()
                             if line.startswith(("- **command**", "- **commit**", "- **date**", "- **note**")))
        note = (f"only the blocks this command prints were re-run; the rest of the file is from the runs of "
                f"the previous header ({previous})")
        write_results(RESULTS / args.replace, body, peers=("scikit-learn",), note=note)
