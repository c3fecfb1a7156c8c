"""The CLI's multi-class path: a CSV target with more than two classes.

``pymc-gpc train.csv --target type --approximation laplace`` (softmax) or ``ep``
(multinomial probit, nested EP) builds ``models.ard_classifier`` with the multi-class
likelihood and one ARD kernel per class (``--shared-kernel``: one for all classes); the
report gains a confusion matrix on the test set and ``predictions.csv`` holds one
probability column per class.
"""

import csv

import numpy as np

from ..likelihoods.multiclass import MultinomialProbit, Softmax

LIKELIHOOD_FOR = {"laplace": Softmax, "ep": MultinomialProbit}
# --likelihood names of the multi-class likelihoods, and the approximation each needs
MULTICLASS_LIKELIHOODS = {"softmax": "laplace", "multinomial-probit": "ep"}


def is_multiclass(y):
    return len(np.unique(np.asarray(y))) > 2


def likelihood_for(approximation, likelihood=None):
    """The multi-class likelihood that ``approximation`` integrates out, or a ValueError; a
    ``--likelihood`` given (``likelihood``) must be that one, not a binary likelihood."""
    if approximation not in LIKELIHOOD_FOR:
        raise ValueError(
            f"the target has more than two classes: use --approximation laplace (softmax) or ep "
            f"(multinomial probit), not {approximation!r}"
        )
    if likelihood is not None and MULTICLASS_LIKELIHOODS.get(likelihood) != approximation:
        fits = {v: k for k, v in MULTICLASS_LIKELIHOODS.items()}[approximation]
        raise ValueError(
            f"the target has more than two classes: --likelihood {likelihood} does not fit it with "
            f"--approximation {approximation}; use --likelihood {fits} (or leave --likelihood out)"
        )
    return LIKELIHOOD_FOR[approximation]()


def confusion_matrix(classes, y_true, y_pred):
    """Counts (c, c): rows are true classes, columns predicted, in the order of ``classes``."""
    index = {c: k for k, c in enumerate(classes)}
    out = np.zeros((len(classes), len(classes)), dtype=int)
    for t, p in zip(y_true, y_pred):
        if t in index:
            out[index[t], index[p]] += 1
    return out


def test_report(p, classes, y_test, path):
    """Write predictions.csv (one column per class) and return the report's test-set lines."""
    classes = [str(c) for c in classes]
    pred = np.array(classes)[np.argmax(p, axis=1)]
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["row", *[f"p_{c}" for c in classes], "predicted"] + (["label"] if y_test is not None else []))
        for i, row in enumerate(p):
            w.writerow([i, *[f"{v:.6f}" for v in row], pred[i]] + ([y_test[i]] if y_test is not None else []))
    if y_test is None:
        return []
    y_test = np.asarray(y_test).astype(str)
    unknown = sorted(set(y_test) - set(classes))
    if unknown:
        return [f"- test labels not seen in training: {unknown} (counted as errors)"]
    errors = int(np.sum(pred != y_test))
    col = {c: k for k, c in enumerate(classes)}
    p_true = np.clip(p[np.arange(len(y_test)), [col[c] for c in y_test]], 1e-300, 1.0)
    cm = confusion_matrix(classes, y_test, pred)
    lines = [
        f"- test errors: {errors} / {len(y_test)} ({100 * errors / len(y_test):.1f} %)",
        f"- mean test log predictive: {float(np.mean(np.log(p_true))):.4f}",
        "",
        "Confusion matrix (rows: true class, columns: predicted):",
        "",
        "| true \\ predicted | " + " | ".join(classes) + " |",
        "|---" * (len(classes) + 1) + "|",
    ]
    lines += [f"| {c} | " + " | ".join(str(v) for v in cm[k]) + " |" for k, c in enumerate(classes)]
    return lines
