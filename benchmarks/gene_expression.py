"""High-dimensional gene expression with a linear kernel: EP against Laplace against an SVM.

The setting of Tan's Tables 1-2 (tan-ep-gpc-likelihoods.txt, section 5.3: colon cancer,
62 samples x 2000 genes, 10 random splits into 42 training and 20 test samples, linear
kernels, SVM / Laplace-MAP / EP), on a data set that can be shipped: R's dslabs
``tissue_gene_expression`` (189 samples x 500 genes, 7 tissues; bundled,
``pymc_gpc.datasets.load_tissue_gene_expression``).

Tasks: two binary ones (cerebellum vs hippocampus, two brain regions; endometrium vs
kidney, the pair a linear SVM finds hardest) and all 7 tissues. With Tan's proportions
(2/3 of the samples for training) every method classifies every test sample correctly,
so the comparison is also run where it can fail: k = 2 and k = 5 training samples per
class, the rest for testing. 10 random splits per setting (seeds 0-9), the same splits for
every method. Inputs: log2 expression, centred on the training samples (no per-gene
scaling: with 2 samples per class a gene's sd is not estimable).

Methods (the GPs: kernel v0 x^T x' + v1, log v0 and log v1 ~ N(-3, 3^2), hyperparameters
by MAP-II, ``pymc_gpc.fit(method="map")``, as Tan's "Laplace-MAP"):

* binary: probit EP (``MarginalEP``), probit Laplace (``MarginalLaplace``), and
  scikit-learn's ``SVC(kernel="linear")`` (C = 1; Tan does not report C);
* 7 classes: multinomial probit with nested EP (``MarginalEP`` + ``MultinomialProbit``),
  softmax Laplace (``MarginalLaplace`` + ``Softmax``), and the SVM (one-vs-one).

Reported per task and setting: mean test error over the splits (with its standard error),
the mean test log predictive probability of the true class (GPs only: the SVM gives no
probabilities), Tan's "predictive variance" as the mean latent predictive variance at the
test points (binary GPs), and the median fit + predict time per split.

Run:  OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/gene_expression.py [--splits 10]
Writes benchmarks/results/gene_expression.md.
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

import pymc_gpc
from pymc_gpc import likelihoods as L
from pymc_gpc.datasets import load_tissue_gene_expression

OUT = pathlib.Path(__file__).parent / "results" / "gene_expression.md"
TASKS = {
    "cerebellum vs hippocampus": ("cerebellum", "hippocampus"),
    "endometrium vs kidney": ("endometrium", "kidney"),
    "7 tissues": None,
}
SETTINGS = ("k = 2 per class", "k = 5 per class", "2/3 for training (Tan)")
TAN = {  # Tan, Tables 1-2: colon cancer, 10 splits 42 / 20 (test error rate, predictive variance)
    "all 2000 genes": {"SVM": "0.226", "Laplace-MAP": "0.219 (3.49)", "EP": "0.19 (6.72)"},
    "373 ARD-selected genes": {"SVM": "0.216", "Laplace-MAP": "0.133 (3.16)", "EP": "0.133 (4.15)"},
}


def training_mask(y, setting, rng):
    """k training samples of every class, or (Tan) 2/3 of every class; the rest test."""
    train = np.zeros(len(y), dtype=bool)
    for cls in np.unique(y):
        idx = rng.permutation(np.flatnonzero(y == cls))
        k = 2 if setting.startswith("k = 2") else 5 if setting.startswith("k = 5") else int(round(2 * idx.size / 3))
        train[idx[:k]] = True
    return train


def gp_model(X, y, likelihood, cls):
    """Linear kernel v0 x^T x' + v1 with N(-3, 3^2) priors on log v0, log v1."""
    import pymc as pm
    import pytensor.tensor as pt

    with pm.Model() as model:
        log_v0 = pm.Normal("log_v0", -3.0, 3.0)
        log_v1 = pm.Normal("log_v1", -3.0, 3.0)
        cov = pt.exp(log_v0) * pm.gp.cov.Linear(X.shape[1], c=0.0) + pm.gp.cov.Constant(pt.exp(log_v1))
        gp = cls(cov_func=cov, likelihood=likelihood)
        gp.marginal_likelihood("y", X=X, y=y)
    return model, gp


def fit_gp(Xtr, ytr, Xte, likelihood, cls, binary):
    """MAP-II fit; returns (probabilities of the test points' classes as a function of the
    labels, mean latent predictive variance or NaN, time)."""
    t = time.perf_counter()
    model, gp = gp_model(Xtr, ytr, likelihood, cls)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = pymc_gpc.fit(model, method="map", progressbar=False)
    if binary:
        p, mean, var = gp.predict(Xte, point=fit.point, return_latent=True, progressbar=False)
        return np.column_stack([1.0 - p, p]), float(np.mean(var)), time.perf_counter() - t
    p = gp.predict(Xte, point=fit.point, progressbar=False)
    return p, float("nan"), time.perf_counter() - t


def fit_svm(Xtr, ytr, Xte):
    from sklearn.svm import SVC

    t = time.perf_counter()
    pred = SVC(kernel="linear").fit(Xtr, ytr).predict(Xte)
    return pred, time.perf_counter() - t


def run_split(X, y, classes, train):
    """Every method on one split; y holds class indices into ``classes``."""
    mean = X[train].mean(axis=0)
    Xtr, Xte, ytr, yte = X[train] - mean, X[~train] - mean, y[train], y[~train]
    binary = len(classes) == 2
    if binary:
        signs = np.where(ytr == 1, 1.0, -1.0)
        gps = {"EP (probit)": (L.Probit(), pymc_gpc.MarginalEP, signs),
               "Laplace (probit)": (L.Probit(), pymc_gpc.MarginalLaplace, signs)}
    else:
        gps = {"nested EP (multinomial probit)": (L.MultinomialProbit(), pymc_gpc.MarginalEP, ytr),
               "Laplace (softmax)": (L.Softmax(), pymc_gpc.MarginalLaplace, ytr)}
    out = {}
    for name, (lik, cls, labels) in gps.items():
        p, var, t = fit_gp(Xtr, labels, Xte, lik, cls, binary)
        p_true = p[np.arange(len(yte)), yte]
        out[name] = {"errors": int(np.sum(np.argmax(p, axis=1) != yte)), "n": len(yte),
                     "log_p": float(np.mean(np.log(np.clip(p_true, 1e-300, None)))), "var": var, "time": t}
    pred, t = fit_svm(Xtr, ytr, Xte)
    out["SVM (linear, C = 1)"] = {"errors": int(np.sum(pred != yte)), "n": len(yte),
                                  "log_p": float("nan"), "var": float("nan"), "time": t}
    return out


def summarise(rows):
    rates = np.array([r["errors"] / r["n"] for r in rows])
    return {"rate": rates.mean(), "se": rates.std(ddof=1) / np.sqrt(len(rates)) if len(rates) > 1 else float("nan"),
            "errors": sum(r["errors"] for r in rows), "n": sum(r["n"] for r in rows),
            "log_p": np.mean([r["log_p"] for r in rows]), "var": np.mean([r["var"] for r in rows]),
            "time": np.median([r["time"] for r in rows])}


def fmt(x, spec):
    return "-" if np.isnan(x) else format(x, spec)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--splits", type=int, default=10)
    ap.add_argument("--tasks", nargs="*", default=list(TASKS), help="a subset of: " + ", ".join(TASKS))
    args = ap.parse_args()
    data = load_tissue_gene_expression()
    lines = [
        "# Gene expression, linear kernel: EP, Laplace and a linear SVM (Tan, Tables 1-2)",
        "",
        f"Generated by `OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/gene_expression.py"
        f" --splits {args.splits}` (see its docstring). dslabs `tissue_gene_expression`, 500 genes;"
        f" {args.splits} random splits per row (seeds 0-{args.splits - 1}), the same for every method;"
        " GPs by MAP-II with the kernel v0 x^T x' + v1. Error: mean test error rate over the splits"
        " ± its standard error (total errors / total test samples); log p: mean test log"
        " predictive probability of the true class; var: mean latent predictive variance at the"
        " test points (Tan's 'predictive variance'); time: median fit + predict per split (one BLAS thread).",
        "",
        "| task | training set | method | error | errors | log p | var | time (s) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for task in args.tasks:
        pair = TASKS[task]
        keep = np.isin(data.y, pair) if pair else np.ones(len(data.y), dtype=bool)
        classes = np.array(pair) if pair else np.unique(data.y)
        X = data.X[keep]
        y = np.array([list(classes).index(label) for label in data.y[keep]])  # class indices
        for setting in SETTINGS:
            per_method = {}
            for seed in range(args.splits):
                train = training_mask(y, setting, np.random.default_rng(seed))
                for name, r in run_split(X, y, classes, train).items():
                    per_method.setdefault(name, []).append(r)
            for name, rows in per_method.items():
                s = summarise(rows)
                lines.append(f"| {task} | {setting} ({int(train.sum())} samples) | {name} | "
                             f"{s['rate']:.3f} ± {fmt(s['se'], '.3f')} | {s['errors']} / {s['n']} | "
                             f"{fmt(s['log_p'], '.3f')} | {fmt(s['var'], '.2f')} | {s['time']:.2f} |")
                print(lines[-1], flush=True)
    lines += ["", "Tan's Tables 1-2 (colon cancer, 42 training / 20 test samples, 10 splits; error rate,"
              " predictive variance in brackets):", "", "| genes | SVM | Laplace-MAP | EP |", "|---|---|---|---|"]
    for genes, r in TAN.items():
        lines.append(f"| {genes} | {r['SVM']} | {r['Laplace-MAP']} | {r['EP']} |")
    write_results(OUT, "\n".join(lines) + "\n", peers=('scikit-learn',))
    print(OUT.read_text())


if __name__ == "__main__":
    main()
