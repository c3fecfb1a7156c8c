"""10-fold cross-validation on Pima.tr and Crabs in the form of Kim & Ghahramani's Table 2.

Run from the repository root (BLAS at one thread; about half an hour here):

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/cross_validation.py

Data: Pima.tr (200 x 7) and all 200 crabs (sex from FL, RW, CL, CW, BD and the
species as a discrete column, as in the paper's Table 1), split into 10 folds
(random, seed 0); inputs standardised on each training part.

Methods, each the mean test error over folds with the standard error of the mean:

* GPC-EP(m,soft), GPC-EP(s,hard), GPC-EP(s,soft): the paper's kernel (``MixedARD``:
  v0 exp(-1/2 sum l_m d_m) + v1 + v2 delta) with the step likelihood and a free label-
  noise rate epsilon; one l per input (m) or one shared (s); v2 free (soft) or fixed at
  1e-6 (hard). Hyperparameters by ``pymc_gpc.fit``: type-II ML (``--method em-ep``
  uses EM-EP as the paper did, capped at ``--em-iter`` iterations).
* SVM-CV(soft): scikit-learn's RBF SVC with C and gamma chosen by 5-fold CV on a grid.
* EP-NUTS: this project's Barber & Williams model (EP + probit, ARD, N(-3, 3^2)
  priors), predictions averaged over 2 chains x 300 draws (``--no-nuts`` skips it).

Writes benchmarks/results/cross_validation.md.
"""

import argparse
import pathlib
import time
import warnings

from _provenance import write_results  # noqa: E402  (benchmarks/_provenance.py)
import numpy as np


import pymc_gpc
from pymc_gpc.datasets import _columns, _read_csv, load_pima
from pymc_gpc.models import ard_classifier, classification_metrics, label_noise_classifier

OUT = pathlib.Path(__file__).parent / "results" / "cross_validation.md"
PAPER = {  # Kim & Ghahramani Table 2 (error rate, sd of the mean)
    "pima": {"GPC-EP(m,soft)": "0.280 ± 0.051", "GPC-EP(s,hard)": "0.325 ± 0.047",
             "GPC-EP(s,soft)": "0.245 ± 0.045", "SVM-CV(soft)": "0.275 ± 0.040"},
    "crabs": {"GPC-EP(m,soft)": "0.025 ± 0.012", "GPC-EP(s,hard)": "0.065 ± 0.016",
              "GPC-EP(s,soft)": "0.065 ± 0.016", "SVM-CV(soft)": "0.055 ± 0.015"},
}


def load_all(name):
    """(X, y, discrete column mask) of Pima.tr or all 200 crabs (species as a 0/1 column)."""
    if name == "pima":
        d = load_pima(standardise=False)
        return d.X_train, d.y_train, np.zeros(7, bool)
    header, rows = _read_csv("crabs.csv")
    X = _columns(header, rows, ("FL", "RW", "CL", "CW", "BD"))
    species = np.array([[1.0 if r[header.index("sp")] == "B" else 0.0] for r in rows])
    y = np.array([1.0 if r[header.index("sex")] == "M" else -1.0 for r in rows])
    return np.hstack([X, species]), y, np.array([False] * 5 + [True])


def standardise(X_train, X_test, discrete):
    mean = np.where(discrete, 0.0, X_train.mean(axis=0))
    sd = np.where(discrete, 1.0, X_train.std(axis=0))
    return (X_train - mean) / sd, (X_test - mean) / sd


def gpc_ep(X, y, Xt, discrete, multiple, soft, method, em_iter):
    model, gp = label_noise_classifier(
        X, y, lengthscales="multiple" if multiple else "single", latent_noise=True if soft else 1e-6,
        discrete=discrete, prior={"log_v1": (-4.0, 3.0), "log_v2": (-3.0, 3.0), "log_l": (-2.0, 3.0)},
    )
    kwargs = dict(maxiter=em_iter, epsilon_rule="errors") if method == "em-ep" else {}
    result = pymc_gpc.fit(model, method=method, start={"epsilon": 0.01}, progressbar=False, **kwargs)
    return gp.predict(Xt, point=result.point, model=model)


def svm_cv(X, y, Xt):
    from sklearn.model_selection import GridSearchCV
    from sklearn.svm import SVC

    grid = {"C": 10.0 ** np.arange(-1, 3.5, 0.5), "gamma": 10.0 ** np.arange(-3, 1.5, 0.5)}
    search = GridSearchCV(SVC(kernel="rbf"), grid, cv=5).fit(X, y)
    return np.where(search.predict(Xt) > 0, 1.0, 0.0)


def ep_nuts(X, y, Xt, seed):
    model, gp = ard_classifier(X, y)
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        idata = pymc_gpc.sample(draws=300, tune=300, chains=2, cores=2, random_seed=seed, progressbar=False,
                                compute_convergence_checks=False)
    return gp.predict(Xt, idata=idata, model=model, max_draws=200)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--method", default="type2", choices=["type2", "em-ep"])
    ap.add_argument("--em-iter", type=int, default=300)
    ap.add_argument("--no-nuts", action="store_true")
    ap.add_argument("--folds", type=int, default=10)
    args = ap.parse_args()
    variants = {"GPC-EP(m,soft)": (True, True), "GPC-EP(s,hard)": (False, False), "GPC-EP(s,soft)": (False, True)}
    lines = [f"GPC hyperparameters by {args.method}; {args.folds} folds; mean test error ± standard error "
             "of the mean over folds (paper: Kim & Ghahramani Table 2).", ""]
    for name in ("pima", "crabs"):
        X_all, y_all, discrete = load_all(name)
        folds = np.array_split(np.random.default_rng(0).permutation(len(y_all)), args.folds)
        errors = {k: [] for k in [*variants, "SVM-CV(soft)"] + ([] if args.no_nuts else ["EP-NUTS (B&W, probit)"])}
        t0 = time.perf_counter()
        for k, test in enumerate(folds):
            train = np.setdiff1d(np.arange(len(y_all)), test)
            X, Xt = standardise(X_all[train], X_all[test], discrete)
            y, yt = y_all[train], y_all[test]
            for label, (multiple, soft) in variants.items():
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    p = gpc_ep(X, y, Xt, discrete, multiple, soft, args.method, args.em_iter)
                errors[label].append(classification_metrics(p, yt)["error_rate"])
            errors["SVM-CV(soft)"].append(classification_metrics(svm_cv(X, y, Xt), yt)["error_rate"])
            if not args.no_nuts:
                p = ep_nuts(X, y, Xt, seed=k)
                errors["EP-NUTS (B&W, probit)"].append(classification_metrics(p, yt)["error_rate"])
            print(name, k, {m: round(v[-1], 3) for m, v in errors.items()}, flush=True)
        lines += [f"### {name} ({len(y_all)} points, {time.perf_counter() - t0:.0f} s)", "",
                  "| method | this run | paper |", "|---|---|---|"]
        for label, errs in errors.items():
            e = np.array(errs)
            lines.append(f"| {label} | {e.mean():.3f} ± {e.std(ddof=1) / np.sqrt(len(e)):.3f} "
                         f"| {PAPER[name].get(label, '-')} |")
        lines.append("")
    text = "\n".join(lines)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    write_results(OUT, text, peers=('scikit-learn',))
    print(text)


if __name__ == "__main__":
    main()
