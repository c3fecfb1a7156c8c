"""Paired A/B of the evidence + gradient evaluation between two source trees.

``python benchmarks/ab.py --a OLD_TREE --b NEW_TREE`` times, for each (data set,
approximation, prior), one compiled ``[logp, dlogp]`` function of ``ard_classifier``'s model
along a seeded random walk from the start (every point new, warm-started as under a
sampler), in a fresh
process per tree and round, the trees alternating (A B A B ...) so that the machine's drift
falls on both. Reports the median seconds per evaluation of each tree and their ratio B/A,
and writes ``benchmarks/results/ab.md``. Used to check that a refactor did not slow an
evaluation (the issue's bound: B/A <= 1.05).

Data: Pima (Ripley's 200 training rows, 7 inputs), Crabs (80 rows, 5 inputs) and
scikit-learn's breast cancer (569 rows, 30 inputs, standardised).
"""

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _provenance import write_results  # noqa: E402

CASES = [("pima", "ep", None), ("pima", "laplace", None), ("pima", "ep", 30), ("crabs", "ep", None),
         ("crabs", "laplace", None), ("breast_cancer", "ep", None), ("breast_cancer", "laplace", None)]

CHILD = r"""
import json, sys, time, warnings
import numpy as np
import pymc_gpc
from pymc_gpc.datasets import load

def data(name):
    if name == "breast_cancer":
        from sklearn.datasets import load_breast_cancer
        X, y = load_breast_cancer(return_X_y=True)
        return (X - X.mean(0)) / X.std(0), np.where(y > 0, 1, -1)
    d = load(name)
    return d.X_train, d.y_train

out = []
for name, approx, m in json.loads(sys.argv[1]):
    X, y = data(name)
    model, gp = pymc_gpc.ard_classifier(X, y, approximation=approx, **({"inducing": m} if m else {}))
    fn = model.compile_fn([model.logp(), model.dlogp()], inputs=model.value_vars, point_fn=False)
    ip = model.initial_point()
    names = [v.name for v in model.value_vars]
    base = [np.asarray(ip[n], dtype=float) for n in names]
    rng = np.random.default_rng(0)
    points, current = [], base
    for _ in range(8 * (int(sys.argv[2]) + 1)):  # a random walk: every point new (no recent-result hits)
        current = [c + 0.02 * rng.normal(size=c.shape) for c in current]
        points.append(current)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for p in points[:8]:  # warm-up: compilation, the first warm starts
            fn(*p)
        times = []
        for p in points[8:]:
            t = time.perf_counter()
            fn(*p)
            times.append(time.perf_counter() - t)
    out.append(float(np.median(times)))
print(json.dumps(out))
"""


def run(tree, rounds_inner):
    env = dict(os.environ, PYTHONPATH=str(tree), OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
               MKL_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-c", CHILD, json.dumps(CASES), str(rounds_inner)], cwd=tree, env=env,
                          capture_output=True, text=True, timeout=1800)
    if proc.returncode:
        raise RuntimeError(proc.stderr[-3000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--a", required=True, help="the old source tree (a checkout's root)")
    parser.add_argument("--b", required=True, help="the new source tree")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds (A B) of fresh processes")
    parser.add_argument("--inner", type=int, default=5, help="timed evaluations per process, in eights")
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / "ab.md"))
    args = parser.parse_args(argv)
    a, b = [], []
    for r in range(args.rounds):
        a.append(run(args.a, args.inner))
        b.append(run(args.b, args.inner))
        print(f"round {r + 1}: A {a[-1]} B {b[-1]}", flush=True)
    a, b = np.median(a, axis=0), np.median(b, axis=0)
    label = lambda s: s.strip("/").split("/")[-1]
    lines = ["# Paired A/B: evidence + gradient per evaluation", "",
             f"A = `{label(args.a)}`, B = `{label(args.b)}`: {args.rounds} alternating rounds of fresh processes, "
             f"each timing {8 * args.inner} evaluations along a seeded random walk (steps of 0.02 in every "
             "unconstrained parameter) from `ard_classifier`'s start, after 8 warm-up steps: every point is "
             "new (no recent-result hits), warm-started from the last, as under a sampler. One BLAS thread; "
             "median seconds per evaluation.", "",
             "| data | approximation | prior | A ms | B ms | B / A |", "|---|---|---|---|---|---|"]
    for (name, approx, m), ta, tb in zip(CASES, a, b):
        prior = f"FITC, m = {m}" if m else "dense"
        lines.append(f"| {name} | {approx} | {prior} | {1e3 * ta:.2f} | {1e3 * tb:.2f} | {tb / ta:.3f} |")
    ratio = b / a
    lines += ["", f"Largest B / A: {ratio.max():.3f}; median {np.median(ratio):.3f}."]
    text = "\n".join(lines) + "\n"
    print(text)
    write_results(args.out, text, command=" ".join(["python", "benchmarks/ab.py", *(argv or sys.argv[1:])]))


if __name__ == "__main__":
    main()
