"""Writes ``pima_nuts.json``: a long NUTS run of ``pymc_gpc.sample`` on Pima (Ripley's split,
the README's ARD model ``ard_classifier``): posterior means and sds of the hyperparameters
(flattened, in the order of ``ard_classifier``'s variables) and the mean test log
predictive with predictions averaged over 1000 evenly thinned draws. The reference of
``tests/estimation/test_integration_pima.py``.

Run from the repository root (a few minutes on 2 cores):

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python tests/reference/pima_nuts.py
"""

import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import pymc_gpc  # noqa: E402
from pymc_gpc.datasets import load  # noqa: E402

DRAWS, TUNE, CHAINS, SEED = 1000, 1000, 4, 20261205


def hyperparameters(model):
    """The names of the model's free variables, in order (the reference's keys)."""
    return [rv.name for rv in model.free_RVs]


def test_log_p(p, y):
    """Mean log predictive of labels y in {-1, +1} given p(y = +1)."""
    p = np.clip(p, 1e-300, 1 - 1e-16)
    return float(np.mean(np.where(y > 0, np.log(p), np.log1p(-p))))


def main():
    pima = load("pima")
    model, gp = pymc_gpc.ard_classifier(pima.X_train, pima.y_train)
    start = time.time()
    with model:
        idata = pymc_gpc.sample(draws=DRAWS, tune=TUNE, chains=CHAINS, cores=2, random_seed=SEED,
                                progressbar=False)
    wall = time.time() - start
    post = idata["posterior"]
    out = {"command": "OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python tests/reference/pima_nuts.py",
           "draws": DRAWS, "tune": TUNE, "chains": CHAINS, "random_seed": SEED, "wall_s": round(wall, 1),
           "divergences": int(np.asarray(idata["sample_stats"]["diverging"]).sum()),
           "mean": {}, "sd": {}}
    for name in hyperparameters(model):
        values = np.asarray(post[name])
        flat = values.reshape(values.shape[0] * values.shape[1], -1)
        out["mean"][name] = flat.mean(axis=0).tolist()
        out["sd"][name] = flat.std(axis=0, ddof=1).tolist()
    p = gp.predict(pima.X_test, idata=idata, max_draws=1000, progressbar=False)
    out["test_log_p"] = test_log_p(p, pima.y_test)
    Path(__file__).with_name("pima_nuts.json").write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
