"""Label-noise robustness in the form of Kim & Ghahramani's outlier paper, Table 1.

Run from the repository root (BLAS at one thread; about ten minutes):

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/label_noise.py

Data: scikit-learn's breast-cancer set (569 x 30, standardised on the training part),
200 training and 369 test points (random split, seed 0), with 0, 1, 2, 3, 4 and 5 % of
the training labels flipped (the test labels stay clean). Model: the step likelihood
eps + (1 - 2 eps) H(y f) with Kim & Ghahramani's kernel (one shared inverse squared
lengthscale, v0, v1 and a latent noise v2), hyperparameters by EM-EP from the same
start. "fixed" keeps eps = 0 (the paper's "former" EP); "adapted" updates eps by the
paper's rule r / n and by mean(1 - omega_i).

Writes benchmarks/results/label_noise.md.
"""

import pathlib
import time
import warnings

from _provenance import write_results  # noqa: E402  (benchmarks/_provenance.py)
import numpy as np

from sampling_hard import breast_cancer

import pymc_gpc
from pymc_gpc.datasets.synthetic import flip_labels
from pymc_gpc.models import classification_metrics, label_noise_classifier

OUT = pathlib.Path(__file__).parent / "results" / "label_noise.md"
RATES = (0.0, 0.01, 0.02, 0.03, 0.04, 0.05)
PRIOR = {"log_v1": (-4.0, 3.0), "log_v2": (-3.0, 3.0), "log_l": (-2.0, 3.0)}
START = dict(log_v0=0.0, log_v1=np.log(1e-4), log_v2=np.log(1e-3), log_l=np.log(0.05))


def fit_one(X, y, Xt, yt, epsilon, rule):
    model, gp = label_noise_classifier(X, y, epsilon=epsilon, lengthscales="single", prior=PRIOR)
    start = dict(START, epsilon=0.01) if epsilon is None else START
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = pymc_gpc.fit(model, method="em-ep", start=start, epsilon_rule=rule, progressbar=False)
    m = classification_metrics(gp.predict(Xt, point=r.point, model=model), yt)
    return float(r.point.get("epsilon", 0.0)), r.log_evidence, m["error_rate"], r.n_iter, r.converged, time.perf_counter() - t0


def main():
    data = breast_cancer(n_train=200)
    X, y, Xt, yt = data.X_train, data.y_train, data.X_test, data.y_test
    lines = [
        "Breast cancer (200 train / 369 clean test), training labels flipped at random; EM-EP with the "
        "step likelihood. Columns: estimated eps / log evidence / test error (%).",
        "",
        "| flipped | true rate | fixed eps = 0 | adapted, r / n | adapted, mean(1 - omega) |",
        "|---|---|---|---|---|",
    ]
    for rate in RATES:
        n_flip = int(round(rate * len(y)))
        y_noisy, _ = flip_labels(y, n_flip, np.random.default_rng(1))
        cells = []
        for epsilon, rule in ((0.0, "errors"), (None, "errors"), (None, "omega")):
            eps, ev, err, nit, conv, secs = fit_one(X, y_noisy, Xt, yt, epsilon, rule)
            cells.append(f"{eps:.3f} / {ev:.2f} / {100 * err:.2f}" + ("" if conv else " (not converged)"))
            print(rate, rule if epsilon is None else "fixed", round(eps, 4), round(ev, 2), round(err, 4), nit, conv,
                  f"{secs:.0f}s", flush=True)
        lines.append(f"| {n_flip} | {n_flip / len(y):.3f} | " + " | ".join(cells) + " |")
    text = "\n".join(lines) + "\n"
    OUT.parent.mkdir(parents=True, exist_ok=True)
    write_results(OUT, text, peers=('scikit-learn',))
    print(text)


if __name__ == "__main__":
    main()
