"""Prediction time over posterior draws: the batched path of ``gp.predict`` against the
per-draw compiled graph it replaced (a cold solve per draw), interleaved, in one process.

The main job's case: Ripley's Pima, the main job's model (``ard_classifier``), 2 chains x
(500 + 500) draws, 332 test points averaged over all 1000 draws.

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/prediction.py

Prints and writes (``benchmarks/results/prediction_batched.md``) the times (median of
``--repeats``) and the largest difference between the two averaged predictions.
"""

import argparse
import pathlib
import time

import numpy as np
from _provenance import write_results  # noqa: E402  (benchmarks/_provenance.py)
import pytensor
import pymc as pm
from pytensor.graph.traversal import ancestors

import pymc_gpc
from pymc_gpc.datasets import load_pima
from pymc_gpc.gp import _posterior_points


def per_draw_graph(gp, model, Xnew, idata):
    """The previous ``predict``: a compiled graph with ``LatentPredictiveOp``, one cold solve per draw."""
    mean, var = gp._build_predictive(gp._check_new_inputs(Xnew), full_cov=False)
    theta = gp.likelihood.params_tensor()
    inputs = [v for v in ancestors([mean, var, theta]) if v in model.named_vars.values()]
    fn = pytensor.function(inputs, [mean, var, theta], on_unused_input="ignore")
    names = [v.name for v in inputs]
    probs = []
    for point in _posterior_points(idata, names, None):
        m, v, th = fn(*[np.asarray(point[n]) for n in names])
        probs.append(gp.likelihood.predict(m, v, th))
    return np.mean(probs, axis=0)


OUT = pathlib.Path(__file__).parent / "results" / "prediction_batched.md"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--idata", help="a pickled sampling result of the Pima model (else sample it)")
    args = parser.parse_args()
    data = load_pima()
    model, gp = pymc_gpc.ard_classifier(data.X_train, data.y_train)
    if args.idata:
        import pickle

        with open(args.idata, "rb") as f:
            idata = pickle.load(f)
    else:
        with model:
            idata = pymc_gpc.sample(draws=500, tune=500, chains=2, random_seed=1, progressbar=False)
    post = idata["posterior"]
    lines = []

    def say(text):
        print(text)
        lines.append(text)

    say(f"{post.sizes['chain'] * post.sizes['draw']} draws, {len(data.X_test)} test points")
    # warm-up: compile both (numba caches) before timing
    gp.predict(data.X_test[:5], idata=idata, max_draws=5, progressbar=False)
    per_draw_graph(gp, model, data.X_test[:5], idata.isel(draw=slice(0, 2)))
    times = {"batched": [], "per-draw graph": []}
    for _ in range(args.repeats):
        t = time.perf_counter()
        p_new = gp.predict(data.X_test, idata=idata, progressbar=False)
        times["batched"].append(time.perf_counter() - t)
        t = time.perf_counter()
        p_old = per_draw_graph(gp, model, data.X_test, idata)
        times["per-draw graph"].append(time.perf_counter() - t)
    for k, v in times.items():
        say(f"{k}: median {np.median(v):.2f} s ({', '.join(f'{x:.2f}' for x in v)})")
    say(f"ratio: {np.median(times['per-draw graph']) / np.median(times['batched']):.1f}x")
    say(f"max |p_batched - p_per_draw| = {np.max(np.abs(p_new - p_old)):.2e}")
    errors = np.sum((p_new > 0.5) != (data.y_test > 0))
    say(f"test errors {errors}/{len(data.y_test)}")
    write_results(OUT, "# Prediction over posterior draws: batched against per-draw graphs\n\n"
                  + "\n\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
