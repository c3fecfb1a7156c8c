"""Shared kernel against one kernel per class on one Forensic Glass split.

A fixed random split of MASS fgl (214 fragments, 9 inputs, 6 classes): 150 training and
64 test fragments (``numpy.random.default_rng(SEED).permutation``), inputs standardised
on the training part. ``pymc_gpc.ard_classifier`` builds Barber & Williams' ARD model
(log-hyperparameters ~ N(-3, 3^2)) with one kernel shared by the classes
(``per_class=False``: 11 hyperparameters) or one per class (the default: 66), for
softmax Laplace and for the multinomial probit with nested EP; ``pymc_gpc.fit(method=
"map")`` gives the MAP-II point. Reported: test errors, mean test log predictive
probability of the true class, the approximate log evidence at the MAP-II point and
the fit time; scikit-learn's one-vs-rest GaussianProcessClassifier (ARD RBF x
constant, type-II ML, Laplace) is the peer.

Run:  OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/per_class.py
Writes benchmarks/results/per_class.md.
"""

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse
import pathlib
import time
import warnings

from _provenance import header  # noqa: E402  (benchmarks/_provenance.py)
import numpy as np

import pymc_gpc
from pymc_gpc.datasets import load_fgl

RESULTS = pathlib.Path(__file__).parent / "results"
SEED = 0
N_TRAIN = 150


def split(seed=SEED, n_train=N_TRAIN):
    data = load_fgl()
    idx = np.random.default_rng(seed).permutation(len(data.y))
    tr, te = idx[:n_train], idx[n_train:]
    mean, sd = data.X[tr].mean(axis=0), data.X[tr].std(axis=0)
    return (data.X[tr] - mean) / sd, data.y[tr], (data.X[te] - mean) / sd, data.y[te], data.feature_names


def _scores(p, classes, y_test):
    col = {c: k for k, c in enumerate(classes)}
    true = np.array([col[c] for c in y_test])
    errors = int(np.sum(np.asarray(classes)[np.argmax(p, axis=1)] != y_test))
    log_p = float(np.mean(np.log(np.clip(p[np.arange(len(y_test)), true], 1e-300, 1.0))))
    return errors, log_p


def gp_fit(Xtr, ytr, Xte, yte, names, approximation, per_class):
    t = time.perf_counter()
    model, gp = pymc_gpc.ard_classifier(Xtr, ytr, approximation=approximation, per_class=per_class,
                                        feature_names=names)
    with model:
        result = pymc_gpc.fit(method="map", progressbar=False)
    p = gp.predict(Xte, point=result.point, model=model)
    seconds = time.perf_counter() - t
    errors, log_p = _scores(p, gp.classes, yte)
    n_hyper = sum(np.size(model.initial_point()[k]) for k in model.initial_point())
    return {"errors": errors, "log_p": log_p, "log_evidence": float(result.log_evidence), "seconds": seconds,
            "n_hyper": n_hyper, "converged": bool(result.converged), "n_iter": int(result.n_iter)}


def sklearn_fit(Xtr, ytr, Xte, yte):
    from sklearn.gaussian_process import GaussianProcessClassifier
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel

    t = time.perf_counter()
    kernel = ConstantKernel(1.0) * RBF(np.ones(Xtr.shape[1]))
    clf = GaussianProcessClassifier(kernel, multi_class="one_vs_rest", random_state=0).fit(Xtr, ytr)
    p = clf.predict_proba(Xte)
    seconds = time.perf_counter() - t
    errors, log_p = _scores(p, clf.classes_, yte)
    return {"errors": errors, "log_p": log_p, "log_evidence": None, "seconds": seconds,
            "n_hyper": 6 * (Xtr.shape[1] + 1), "converged": True, "n_iter": None}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--only", nargs="*", help="run only the methods whose label contains one of these")
    parser.add_argument("--out", default="per_class.md")
    args = parser.parse_args(argv)
    provenance = header(peers=("scikit-learn",))  # now: the commit whose code this process imported
    Xtr, ytr, Xte, yte, names = split(args.seed)
    methods = {
        "softmax Laplace, shared kernel": lambda: gp_fit(Xtr, ytr, Xte, yte, names, "laplace", False),
        "softmax Laplace, one kernel per class": lambda: gp_fit(Xtr, ytr, Xte, yte, names, "laplace", None),
        "nested EP, shared kernel": lambda: gp_fit(Xtr, ytr, Xte, yte, names, "ep", False),
        "nested EP, one kernel per class": lambda: gp_fit(Xtr, ytr, Xte, yte, names, "ep", None),
        "scikit-learn one-vs-rest (Laplace, type-II)": lambda: sklearn_fit(Xtr, ytr, Xte, yte),
    }
    if args.only:
        methods = {k: v for k, v in methods.items() if any(o in k for o in args.only)}
    rows = {}
    for label, run in methods.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            rows[label] = run()
        print(label, rows[label], flush=True)
    lines = [
        "# Forensic Glass, one split: shared kernel against one kernel per class",
        "",
        f"MASS fgl, {len(ytr)} training and {len(yte)} test fragments "
        f"(`numpy.random.default_rng({args.seed}).permutation`), 9 inputs standardised on the",
        "training part, 6 classes. GP rows: `pymc_gpc.ard_classifier(..., per_class=...)` and",
        "`pymc_gpc.fit(method=\"map\")` (MAP-II; log-hyperparameters ~ N(-3, 3^2)); log evidence is",
        "the approximation's log q(y | theta) at the MAP-II point. Test log p: mean log predictive",
        "probability of the true class. Time: build + fit + predict, one BLAS thread, on a",
        "machine shared with other jobs.",
        "",
        "| method | hyperparameters | test errors | test log p | log evidence | fit iterations | time |",
        "|---|---|---|---|---|---|---|",
    ]
    for label, r in rows.items():
        ev = "" if r["log_evidence"] is None else f"{r['log_evidence']:.1f}"
        conv = "" if r["converged"] else " (fit not converged)"
        it = "" if r["n_iter"] is None else str(r["n_iter"])
        lines.append(f"| {label} | {r['n_hyper']} | {r['errors']} / {len(yte)} | {r['log_p']:.3f} | {ev}{conv} | "
                     f"{it} | {r['seconds']:.0f} s |")
    (RESULTS / args.out).write_text(provenance + "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
