"""A new model's first ``fit``: kernel/pullback graphs compiled by numba against
``estimation.objective.FIT_MODE`` / ``FIT_FORWARD_MODE`` (PyTensor's Python linker; the pullback
with FAST_COMPILE's rewrites and ``python_vm``'s clip rewrite, the kernels with the merge
and clip rewrites only), each in a fresh process.

Each run fits a model numba has not seen (Pima.tr rows subsampled with a fresh seed, so
no on-disk cache holds its graphs; the engine's own numba code is cached), twice: the
first fit includes compilation, the second is the fit on a built model.

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/first_fit.py

Writes benchmarks/results/first_fit.md.
"""

import json
import pathlib
import subprocess
import sys
import time

from _provenance import write_results  # benchmarks/_provenance.py

CHILD = r"""
import json, sys, time
import numpy as np
import pymc_gpc
from pymc_gpc.estimation import objective as point_estimates
from pymc_gpc.datasets import load_pima

mode, seed, approximation = sys.argv[1], int(sys.argv[2]), sys.argv[3]
if mode == "numba":  # both graphs (the kernels' and the pullback's) through numba
    point_estimates.FIT_MODE = point_estimates.FIT_FORWARD_MODE = None
d = load_pima()
rows = np.random.default_rng(seed).choice(len(d.y_train), 190, replace=False)
lik = pymc_gpc.likelihoods.Logistic() if approximation == "laplace" else None
model, _ = pymc_gpc.ard_classifier(d.X_train[rows], d.y_train[rows], approximation=approximation,
                                   likelihood=lik, bias=False)
out = {}
for key in ("first", "second"):
    t = time.perf_counter()
    r = pymc_gpc.fit(model, method="type2", progressbar=False)
    out[key] = time.perf_counter() - t
out.update(log_evidence=r.log_evidence, n_iter=r.n_iter)
print("RESULT", json.dumps(out))
"""


def run(mode, seed, approximation):
    proc = subprocess.run([sys.executable, "-c", CHILD, mode, str(seed), approximation],
                          capture_output=True, text=True, check=True)
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT"))
    return json.loads(line[len("RESULT "):])


def main():
    seed = int(time.time())
    lines = ["# A new model's first fit: numba against FAST_COMPILE", "",
             "| approximation | compiled with | first fit (s) | second fit (s) | log evidence | iterations |",
             "|---|---|---|---|---|---|"]
    print("\n".join(lines[2:]))
    for approximation in ("laplace", "ep"):
        for mode in ("numba", "FAST_COMPILE"):  # the same new model for both
            r = run(mode, seed, approximation)
            lines.append(f"| {approximation} | {mode} | {r['first']:.2f} | {r['second']:.2f} | "
                         f"{r['log_evidence']:.6f} | {r['n_iter']} |")
            print(lines[-1], flush=True)
        seed += 1
    write_results(pathlib.Path(__file__).parent / "results" / "first_fit.md", "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
