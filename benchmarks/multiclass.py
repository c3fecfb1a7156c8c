"""Multi-class benchmark: evidence + gradient cost, and Forensic Glass 10-fold CV.

``timing``: evidence + gradient of softmax Laplace and of nested EP (multinomial probit)
for c classes at n points, against c binary evaluations at the same n (binary Laplace
with the logistic, binary EP with the probit, one-vs-rest labels), each from a cold
start and warm-started from the solution at a kernel 2 % away, without the LOO terms
(``with_loo=False``: the sampler's logp graph defers them, ``ops.marginal.defer_unused_loo``). Synthetic 5-d data,
RBF kernel (lengthscale 1.5, amplitude 2), interleaved repeats, medians.

``cv``: Forensic Glass (MASS fgl, 214 x 9, 6 classes), 10 stratified folds, inputs
standardised on each training fold, in the form of Barber & Williams (1997) Table 2:
softmax Laplace MAP-II and multinomial-probit EP MAP-II (``pymc_gpc.fit``, shared ARD
RBF kernel + constant, log-hyperparameters with N(-3, 3^2) priors as B&W; the
amplitude and constant N(0, 3^2)), scikit-learn's one-vs-rest GaussianProcessClassifier
(ARD RBF x constant, type-II ML) and a multinomial logistic regression; with ``--nuts
FOLD`` also NUTS-averaged predictions on that fold (2 chains x (500 + 500)).

Run:  OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/multiclass.py timing
      OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/multiclass.py cv [--nuts 0] [--only NAME ...] [--out FILE]
      OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/multiclass.py nuts --fold 0 --draws 500 --only softmax
      OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/multiclass.py nuts-cv --draws 200 --only softmax
      OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/multiclass.py nuts-cv --draws 200 --only softmax --per-class --out multiclass_nuts_cv_per_class.md  (merged into multiclass_nuts_cv.md as a section)
Writes benchmarks/results/multiclass_timing.md / multiclass.md / multiclass_nuts.md /
multiclass_nuts_cv.md.
``nuts-cv``: NUTS on every fold (or ``--folds``), the
NUTS-averaged and MAP-II test errors side by side; ``--per-class``: one ARD kernel per class
(66 sampled values) instead of the shared one (11).
"""

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse
import pathlib
import time
import warnings

from _provenance import write_results  # noqa: E402  (benchmarks/_provenance.py)
import numpy as np
from engine import rbf

import pymc_gpc
from pymc_gpc import ep, laplace, multinomial_probit_ep, softmax_laplace
from pymc_gpc import likelihoods as L
from pymc_gpc.validation import trusted_kernel

RESULTS = pathlib.Path(__file__).parent / "results"


def _classes_data(n, c, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 5))
    score = X[:, :c] + 0.5 * rng.normal(size=(n, c)) if c <= 5 else rng.normal(size=(n, c))
    return X, np.argmax(score, axis=1)


def _time(fn):
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def timing(ns=(200, 400), cs=(3, 6), repeats=9):
    """Evidence + gradient, multi-class against c binary problems, as the Ops evaluate them:
    inside ``trusted_kernel`` (no PSD check of each K, which would add a Cholesky
    factorisation per class to both sides)."""
    with trusted_kernel():
        return _timing(ns, cs, repeats)


def _timing(ns, cs, repeats):
    rows = []
    for n in ns:
        X, _ = _classes_data(n, 1)
        K = rbf(X, np.full(5, 1.5), 2.0) + 1e-8 * np.eye(n)
        K2 = rbf(X, np.full(5, 1.5 * 1.02), 2.0) + 1e-8 * np.eye(n)
        for c in cs:
            _, y = _classes_data(n, c)
            Kc, Kc2 = np.array([K] * c), np.array([K2] * c)
            signs = [np.where(y == k, 1.0, -1.0) for k in range(c)]
            no_loo = {"with_loo": False}  # as the sampler's logp graph runs them (``defer_unused_loo``)
            pairs = {
                "softmax Laplace": (lambda s=None: softmax_laplace(Kc, y, state=s, **no_loo),
                                    lambda s=None: softmax_laplace(Kc2, y, state=s, **no_loo)),
                f"{c} x binary Laplace (logistic)": (
                    lambda s=None: [laplace(K, t, L.Logistic(), state=None if s is None else s[k], **no_loo)
                                    for k, t in enumerate(signs)],
                    lambda s=None: [laplace(K2, t, L.Logistic(), state=None if s is None else s[k], **no_loo)
                                    for k, t in enumerate(signs)]),
                "nested EP (multinomial probit)": (lambda s=None: multinomial_probit_ep(Kc, y, state=s, **no_loo),
                                                   lambda s=None: multinomial_probit_ep(Kc2, y, state=s, **no_loo)),
                f"{c} x binary EP (probit)": (
                    lambda s=None: [ep(K, t, L.Probit(), state=None if s is None else s[k], **no_loo)
                                    for k, t in enumerate(signs)],
                    lambda s=None: [ep(K2, t, L.Probit(), state=None if s is None else s[k], **no_loo)
                                    for k, t in enumerate(signs)]),
            }
            cold = {k: [] for k in pairs}
            warm = {k: [] for k in pairs}
            iters = {}
            for _ in range(repeats):  # interleaved: the machine's load hits every method alike
                for name, (first, second) in pairs.items():
                    t, res = _time(first)
                    cold[name].append(t)
                    state = [r.state for r in res] if isinstance(res, list) else res.state
                    t, res2 = _time(lambda: second(state))
                    warm[name].append(t)
                    iters[name] = (np.mean([r.n_iter for r in res]) if isinstance(res, list) else res.n_iter,
                                   np.mean([r.n_iter for r in res2]) if isinstance(res2, list) else res2.n_iter)
            for name in pairs:
                rows.append((n, c, name, 1e3 * np.median(cold[name]), 1e3 * np.median(warm[name]), *iters[name]))
            print(rows[-4:], flush=True)
    lines = [
        "# Multi-class evidence + gradient cost against c binary evaluations",
        "",
        "Synthetic 5-d data, shared RBF kernel (lengthscale 1.5, amplitude 2), one BLAS thread;",
        "medians of interleaved repeats (ms); warm = started from the solution at lengthscale",
        "1.02 x; iterations = Newton steps or outer EP sweeps (binary: mean over the c problems).",
        "Timed as the Ops run them in the sampler's logp graph (``trusted_kernel``: no PSD check of K;",
        "no LOO terms, ``defer_unused_loo``). Compare ratios within a",
        "row group, not absolute times (this machine's speed drifts between runs).",
        "",
        "| n | c | method | cold (ms) | warm (ms) | iterations cold / warm | ratio to c binary (cold / warm) |",
        "|---|---|---|---|---|---|---|",
    ]
    for i, (n, c, name, tc, tw, ic, iw) in enumerate(rows):
        base = rows[i + 1] if i % 2 == 0 else None
        ratio = f"{tc / base[3]:.2f} / {tw / base[4]:.2f}" if base else ""
        lines.append(f"| {n} | {c} | {name} | {tc:.1f} | {tw:.1f} | {ic:.1f} / {iw:.1f} | {ratio} |")
    write_results((RESULTS / "multiclass_timing.md"), "\n".join(lines) + "\n", peers=('scikit-learn', 'nutpie'))
    print("\n".join(lines))


# -- Forensic Glass cross-validation ---------------------------------------------------


def _gp_model(X, y, likelihood, cls, per_class=False):
    """One ARD kernel shared by the classes, or (``per_class``) one per class, each with its
    own hyperparameters (then the variables have a leading class axis)."""
    import pymc as pm
    import pytensor.tensor as pt

    d = X.shape[1]
    c = len(np.unique(y)) if per_class else None
    shape = (c, d) if per_class else d
    with pm.Model() as model:
        log_w = pm.Normal("log_w", -3.0, 3.0, shape=shape)  # inverse squared lengthscales (B&W)
        log_v0 = pm.Normal("log_v0", 0.0, 3.0, shape=c)
        log_v1 = pm.Normal("log_v1", -3.0, 3.0, shape=c)

        def ard(w, v0, v1):
            return pt.exp(v0) * pm.gp.cov.ExpQuad(d, ls=pt.exp(-0.5 * w)) + pm.gp.cov.Constant(pt.exp(v1))

        cov = [ard(log_w[k], log_v0[k], log_v1[k]) for k in range(c)] if per_class else ard(log_w, log_v0, log_v1)
        gp = cls(cov_func=cov, likelihood=likelihood)
        gp.marginal_likelihood("y", X=X, y=y)
    return model, gp


def _gp_map(Xtr, ytr, Xte, likelihood, cls, per_class=False):
    t = time.perf_counter()
    model, gp = _gp_model(Xtr, ytr, likelihood, cls, per_class)
    with model:
        fit = pymc_gpc.fit(method="map", progressbar=False)
    p = gp.predict(Xte, point=fit.point, model=model)
    return gp.classes[np.argmax(p, axis=1)], time.perf_counter() - t, model, gp


def _sklearn_gpc(Xtr, ytr, Xte):
    from sklearn.gaussian_process import GaussianProcessClassifier
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel

    t = time.perf_counter()
    kernel = ConstantKernel(1.0) * RBF(np.ones(Xtr.shape[1]))
    clf = GaussianProcessClassifier(kernel, multi_class="one_vs_rest", random_state=0).fit(Xtr, ytr)
    return clf.predict(Xte), time.perf_counter() - t


def _logistic(Xtr, ytr, Xte):
    from sklearn.linear_model import LogisticRegression

    t = time.perf_counter()
    clf = LogisticRegression(max_iter=5000).fit(Xtr, ytr)
    return clf.predict(Xte), time.perf_counter() - t


def cv(nuts_fold=None, folds=10, only=None, out="multiclass.md"):
    from pymc_gpc.datasets import load_fgl, stratified_folds

    data = load_fgl()
    fold = stratified_folds(data.y, folds, seed=0)
    methods = {
        "GP softmax Laplace, MAP-II (pymc_gpc.fit)":
            lambda a, b, c: _gp_map(a, b, c, L.Softmax(), pymc_gpc.MarginalLaplace)[:2],
        "GP softmax Laplace, per-class kernels, MAP-II (pymc_gpc.fit)":
            lambda a, b, c: _gp_map(a, b, c, L.Softmax(), pymc_gpc.MarginalLaplace, per_class=True)[:2],
        "GP multinomial probit nested EP, MAP-II (pymc_gpc.fit)":
            lambda a, b, c: _gp_map(a, b, c, L.MultinomialProbit(), pymc_gpc.MarginalEP)[:2],
        "GP multinomial probit nested EP, per-class kernels, MAP-II (pymc_gpc.fit)":
            lambda a, b, c: _gp_map(a, b, c, L.MultinomialProbit(), pymc_gpc.MarginalEP, per_class=True)[:2],
        "scikit-learn GPC one-vs-rest (Laplace, type-II)": _sklearn_gpc,
        "multinomial logistic regression (scikit-learn)": _logistic,
    }
    if only:
        methods = {k: v for k, v in methods.items() if any(o in k for o in only)}
    errors = {k: 0 for k in methods}
    times = {k: [] for k in methods}
    for f in range(folds):
        Xtr, ytr, Xte, yte = _fold_data(data, fold, f)
        for name, method in methods.items():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                pred, t = method(Xtr, ytr, Xte)
            errors[name] += int(np.sum(pred != yte))
            times[name].append(t)
        print(f"fold {f}: " + ", ".join(f"{k[:22]} {errors[k]}" for k in methods), flush=True)
    n = len(data.y)
    lines = [
        "# Forensic Glass: 10-fold cross-validation (Barber & Williams 1997, Table 2)",
        "",
        f"MASS fgl, n = {n}, 9 inputs, 6 classes; stratified folds (seed 0), inputs standardised",
        "on each training fold. Fit time: median per fold, one BLAS thread, on a machine shared",
        "with other jobs. Barber & Williams report 23.3 % for their softmax GP (MAP).",
        "",
        "| method | test errors | error rate | fit + predict time per fold (median) |",
        "|---|---|---|---|",
    ]
    for name in methods:
        lines.append(f"| {name} | {errors[name]} / {n} | {100 * errors[name] / n:.1f} % | "
                     f"{np.median(times[name]):.2f} s |")
    lines.append("| Barber & Williams (1997), GP softmax MAP | | 23.3 % | ~24 h (1997 hardware) |")
    if nuts_fold is not None:
        lines += ["", *nuts(data, fold, nuts_fold)]
    write_results((RESULTS / out), "\n".join(lines) + "\n", peers=('scikit-learn', 'nutpie'))
    print("\n".join(lines))


LIKELIHOODS = (("softmax Laplace", L.Softmax, pymc_gpc.MarginalLaplace),
               ("multinomial probit EP", L.MultinomialProbit, pymc_gpc.MarginalEP))


def _fold_data(data, fold, f):
    tr, te = fold != f, fold == f
    mean, sd = data.X[tr].mean(axis=0), data.X[tr].std(axis=0)
    return (data.X[tr] - mean) / sd, data.y[tr], (data.X[te] - mean) / sd, data.y[te]


def nuts_fold(data, fold, f, lik, cls, draws=500, tune=500, per_class=False):
    """NUTS (2 chains, ``pm.sample``'s default sampler) on fold f after MAP-II: time,
    diagnostics and the test errors of the NUTS-averaged and the MAP-II predictions.
    ``per_class``: one ARD kernel per class (66 sampled values) instead of one shared (11)."""
    import arviz as az
    import pymc as pm

    Xtr, ytr, Xte, yte = _fold_data(data, fold, f)
    pred_map, _, model, gp = _gp_map(Xtr, ytr, Xte, lik(), cls, per_class)
    t = time.perf_counter()
    with model:
        idata = pm.sample(draws=draws, tune=tune, chains=2, cores=2, random_seed=1, progressbar=False)
    elapsed = time.perf_counter() - t
    n_steps = int(idata.sample_stats["n_steps"].sum()) if "n_steps" in idata.sample_stats else None
    summ = az.summary(idata, var_names=["log_w", "log_v0", "log_v1"])
    p = gp.predict(Xte, idata=idata, model=model, max_draws=100)
    return {"time": elapsed, "div": int(idata.sample_stats["diverging"].sum()),
            "ess": float(summ["ess_bulk"].min()), "rhat": float(summ["r_hat"].max()),
            "err": int(np.sum(gp.classes[np.argmax(p, axis=1)] != yte)),
            "err_map": int(np.sum(pred_map != yte)), "n_test": int(yte.size),
            "steps_per_draw": n_steps / (2 * draws) if n_steps else float("nan")}


def _kernels(per_class):
    return "one kernel per class (66 values)" if per_class else "shared kernel (11 values)"


def nuts(data, fold, f, draws=500, tune=500, only=None, per_class=False):
    out = [f"NUTS on fold {f} ({(fold == f).sum()} test points), {_kernels(per_class)}, 2 chains x ({tune} + {draws}), "
           "`pm.sample`'s default sampler (nutpie; its chains are threads; the machine's load is not recorded):", "",
           "| likelihood | sampling time | divergences | min bulk ESS | max r-hat | test errors (NUTS-averaged) | test errors (MAP-II) |",
           "|---|---|---|---|---|---|---|"]
    for label, lik, cls in LIKELIHOODS:
        if only and not any(o in label for o in only):
            continue
        r = nuts_fold(data, fold, f, lik, cls, draws, tune, per_class)
        out.append(f"| {label} | {r['time']:.0f} s | {r['div']} | {r['ess']:.0f} | {r['rhat']:.3f} | "
                   f"{r['err']} / {r['n_test']} | {r['err_map']} / {r['n_test']} |")
        print(out[-1], flush=True)
    return out


def nuts_cv(data, fold, draws, tune, only=None, per_class=False, folds=None):
    """NUTS-averaged 10-fold test errors beside MAP-II on the same folds (B&W Table 2's form),
    one row per fold and the totals."""
    out = []
    for label, lik, cls in LIKELIHOODS:
        if only and not any(o in label for o in only):
            continue
        out += [f"{label}, {_kernels(per_class)}: NUTS 2 chains x ({tune} + {draws}) per fold (`pm.sample`'s default "
                "sampler), predictions averaged over 100 draws", "",
                "| fold | `pm.sample` time (compilation included) | divergences | min bulk ESS | max r-hat | NUTS steps / draw | test errors (NUTS-averaged) | test errors (MAP-II) |",
                "|---|---|---|---|---|---|---|---|"]
        rows = []
        for f in folds if folds is not None else range(int(fold.max()) + 1):
            r = nuts_fold(data, fold, f, lik, cls, draws, tune, per_class)
            rows.append(r)
            out.append(f"| {f} | {r['time']:.0f} s | {r['div']} | {r['ess']:.0f} | {r['rhat']:.3f} | "
                       f"{r['steps_per_draw']:.1f} | {r['err']} / {r['n_test']} | {r['err_map']} / {r['n_test']} |")
            print(out[-1], flush=True)
        n = sum(r["n_test"] for r in rows)
        err, err_map = sum(r["err"] for r in rows), sum(r["err_map"] for r in rows)
        out += [f"| all | {sum(r['time'] for r in rows):.0f} s | {sum(r['div'] for r in rows)} | "
                f"{min(r['ess'] for r in rows):.0f} | {max(r['rhat'] for r in rows):.3f} | "
                f"{np.median([r['steps_per_draw'] for r in rows]):.1f} (median) | {err} / {n} ({100 * err / n:.1f} %) | {err_map} / {n} ({100 * err_map / n:.1f} %) |", ""]
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("task", choices=["timing", "cv", "nuts", "nuts-cv"])
    parser.add_argument("--fold", type=int, default=0, help="nuts: the fold")
    parser.add_argument("--draws", type=int, default=500, help="nuts: draws (and as many tuning steps)")
    parser.add_argument("--nuts", type=int, default=None, help="also run NUTS on this fold")
    parser.add_argument("--per-class", action="store_true",
                        help="nuts, nuts-cv: one ARD kernel per class (66 sampled values) instead of a shared one")
    parser.add_argument("--folds", type=int, nargs="*", default=None, help="nuts-cv: only these folds")
    parser.add_argument("--only", nargs="*", help="cv: only methods whose name contains one of these")
    parser.add_argument("--out", default=None, help="the results file in benchmarks/results (default: the task's, "
                        "multiclass.md / multiclass_nuts.md / multiclass_nuts_cv.md)")
    args = parser.parse_args()
    if args.task == "timing":
        timing()
    elif args.task == "nuts":
        from pymc_gpc.datasets import load_fgl, stratified_folds

        data = load_fgl()
        lines = nuts(data, stratified_folds(data.y, 10, seed=0), args.fold, args.draws, args.draws, args.only,
                     args.per_class)
        write_results((RESULTS / (args.out or "multiclass_nuts.md")), "\n".join(lines) + "\n", peers=('scikit-learn', 'nutpie'))
        print("\n".join(lines))
    elif args.task == "nuts-cv":
        from pymc_gpc.datasets import load_fgl, stratified_folds

        data = load_fgl()
        lines = nuts_cv(data, stratified_folds(data.y, 10, seed=0), args.draws, args.draws, args.only,
                        args.per_class, args.folds)
        write_results((RESULTS / (args.out or "multiclass_nuts_cv.md")), "\n".join(lines) + "\n", peers=('scikit-learn', 'nutpie'))
        print("\n".join(lines))
    else:
        cv(args.nuts, only=args.only, out=args.out or "multiclass.md")
