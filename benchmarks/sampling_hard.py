"""Hyperparameter sampling where EP is hard: near-separable data, large amplitudes (issue 18).

Data: scikit-learn's breast-cancer data (569 x 30, a fixed 300-row training subset,
inputs standardised with the training rows' statistics), a separable synthetic set (Kim &
Ghahramani's circle without label flips, 200 training points) and Crabs (80 rows, posterior
amplitudes log v0 near 5). Model: ``ard_classifier`` (ARD squared exponential + bias,
probit, EP, log-hyperparameters ~ N(-3, 3^2)). Samplers, 2 chains x (tune + draws), each
first run for 5+5 draws to fill the compile caches:

* ``pymc_gpc.sample`` (PyMC's NUTS in 2 processes, dense mass matrix: the package default),
* ``pymc_gpc.sample(nuts_sampler="nutpie")`` (nutpie's Rust NUTS, chains as threads),
* plain ``pm.sample`` (picks nutpie when it is installed; PyMC's diagonal-mass defaults);
* on request (``--samplers``), nutpie with its diagonal (gradient-based, its default),
  draw-based diagonal or low-rank mass-matrix adaptation named explicitly
  (``nuts_sampler_kwargs={"adaptation": ...}``), or with a lower target acceptance rate
  (0.65 instead of 0.8: longer steps, fewer per draw).

Columns: wall time of the call, min bulk ESS over the hyperparameters and ESS/s,
the sampling time alone (``idata.posterior.attrs["sampling_time"]``, which both PyMC's NUTS
and nutpie stamp: without the model's compilation, which nutpie repeats at every call
and PyMC's NUTS mostly loads from PyTensor's cache) and ESS per second of it,
divergences, NUTS steps per draw (gradient evaluations), ms of wall time per gradient
evaluation (wall / all steps of both chains, x 2 processes or threads running at once),
EP sweeps per evaluation at the kept draws (the ``y_n_iter`` deterministic).

Run:  OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/sampling_hard.py [--seeds 1 2 --draws 500 --tune 500]
      [--data breast-cancer-10 breast-cancer-20 --samplers ... --tol 3e-2 --out FILE]
Writes benchmarks/results/sampling_hard.md.
"""

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse
import dataclasses
import pathlib
import time
import warnings

import arviz as az
from _provenance import write_results  # noqa: E402  (benchmarks/_provenance.py)
import numpy as np
import pymc as pm

import pymc_gpc
from pymc_gpc.datasets import Split, load
from pymc_gpc.datasets.synthetic import circle

OUT = pathlib.Path(__file__).parent / "results" / "sampling_hard.md"
HYPER = ["log_w", "log_v0", "log_v1"]


def diagnostic(idata, name, missing=None):
    """A solver diagnostic (``y_n_iter``, ``y_status``) at the kept draws: in ``sample_stats``
    after ``pymc_gpc.sample`` (or ``add_log_likelihood``), in the posterior after a plain
    ``pm.sample``; ``missing`` (as an array) where neither has it, if given."""
    for group in ("sample_stats", "posterior"):
        if group in idata and name in idata[group]:
            return np.asarray(idata[group][name])
    if missing is not None:
        return np.asarray(missing)
    raise KeyError(f"{name} is in neither sample_stats nor the posterior")


def breast_cancer(n_train=300, seed=0, n_inputs=30):
    """scikit-learn's breast-cancer data, a fixed random 300-row training subset, standardised;
    only its first ``n_inputs`` columns (the same rows: the number of hyperparameters
    changes, the data's difficulty little)."""
    from sklearn.datasets import load_breast_cancer

    data = load_breast_cancer()
    X, y = data.data[:, :n_inputs], np.where(data.target == 1, 1.0, -1.0)
    idx = np.random.default_rng(seed).permutation(len(y))
    tr, te = idx[:n_train], idx[n_train:]
    mu, sd = X[tr].mean(axis=0), X[tr].std(axis=0)
    names = tuple(f"x{m}" for m in range(X.shape[1]))
    name = "breast-cancer" if n_inputs == 30 else f"breast-cancer, first {n_inputs} inputs"
    return Split(name, (X[tr] - mu) / sd, y[tr], (X[te] - mu) / sd, y[te], names)


DATASETS = {
    "breast-cancer": breast_cancer,
    "breast-cancer-10": lambda: breast_cancer(n_inputs=10),
    "breast-cancer-20": lambda: breast_cancer(n_inputs=20),
    "separable": lambda: dataclasses.replace(circle(n_train=200, n_test=800, n_flipped=0), name="separable circle"),
    "crabs": lambda: load("crabs"),
    "pima": lambda: load("pima"),  # the easy case, for comparison
}

SAMPLERS = {  # label -> (sampling function, nuts_sampler, nuts_sampler_kwargs)
    "pymc_gpc.sample (PyMC NUTS)": (pymc_gpc.sample, "pymc", None),
    "pymc_gpc.sample (nutpie)": (pymc_gpc.sample, "nutpie", None),
    "nutpie, diagonal mass matrix": (pymc_gpc.sample, "nutpie", {"adaptation": "diag"}),
    "nutpie, low-rank mass matrix": (pymc_gpc.sample, "nutpie", {"adaptation": "low_rank"}),
    "nutpie, draw-based diagonal mass matrix": (pymc_gpc.sample, "nutpie", {"adaptation": "draw_diag"}),
    "nutpie, target_accept 0.65": (pymc_gpc.sample, "nutpie", {"target_accept": 0.65}),
    "pm.sample (default: nutpie)": (pm.sample, None, None),
}

DEFAULT_SAMPLERS = ["pymc_gpc.sample (PyMC NUTS)", "pymc_gpc.sample (nutpie)", "pm.sample (default: nutpie)"]


def run(data, label, seed, draws, tune, tol=None):
    sample, sampler, sampler_kwargs = SAMPLERS[label]
    options = {} if tol is None else {"tol": tol}  # EP's tolerance while sampling (default 1e-2)
    model, _ = pymc_gpc.ard_classifier(data.X_train, data.y_train, **options)
    kwargs = dict(chains=2, cores=2, random_seed=seed, progressbar=False, compute_convergence_checks=False)
    if sampler is not None:
        kwargs["nuts_sampler"] = sampler
    if sampler_kwargs is not None:
        kwargs["nuts_sampler_kwargs"] = sampler_kwargs
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sample(draws=5, tune=5, **kwargs)
        t = time.perf_counter()
        idata = sample(draws=draws, tune=tune, **kwargs)
        wall = time.perf_counter() - t
    stats = idata["sample_stats"]
    steps = np.asarray(stats["n_steps"])
    ess = float(az.summary(idata, var_names=HYPER)["ess_bulk"].min())
    # all gradient evaluations of the run, tuning included, are not in the trace: the kept
    # draws' mean steps times all iterations is the estimate
    evals = float(steps.mean()) * (draws + tune) * 2
    sampling = float(idata["posterior"].attrs.get("sampling_time", np.nan))
    return {
        "data": data.name, "method": label, "seed": seed, "wall": wall, "ess": ess, "ess_s": ess / wall,
        "sampling": sampling, "ess_sampling": ess / sampling,
        "div": int(np.asarray(stats["diverging"]).sum()), "steps": float(steps.mean()),
        "ms_eval": 1e3 * wall * 2 / evals,
        "sweeps": float(diagnostic(idata, "y_n_iter").mean()),
        "log_v0": float(np.asarray(idata["posterior"]["log_v0"]).mean()),
    }


def table(rows):
    lines = [
        "| data | method | wall (s) | min bulk ESS | ESS/s | sampling alone (s) | ESS per s of sampling | divergent | NUTS steps / draw | ms / evaluation | EP sweeps / evaluation | posterior mean log v0 |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for key in dict.fromkeys((r["data"], r["method"]) for r in rows):
        mine = [r for r in rows if (r["data"], r["method"]) == key]
        med = {k: float(np.median([r[k] for r in mine]))
               for k in ("wall", "ess", "ess_s", "sampling", "ess_sampling", "steps", "ms_eval", "sweeps", "log_v0")}
        lines.append(
            f"| {key[0]} | {key[1]} | {med['wall']:.0f} | {med['ess']:.0f} | {med['ess_s']:.2f} | "
            f"{med['sampling']:.1f} | {med['ess_sampling']:.2f} | "
            f"{sum(r['div'] for r in mine)} | {med['steps']:.1f} | {med['ms_eval']:.2f} | {med['sweeps']:.2f} | {med['log_v0']:.2f} |"
        )
    return lines


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--draws", type=int, default=500)
    parser.add_argument("--tune", type=int, default=500)
    parser.add_argument("--data", nargs="+", default=["breast-cancer", "separable", "crabs"], choices=list(DATASETS))
    parser.add_argument("--samplers", nargs="+", default=DEFAULT_SAMPLERS, choices=list(SAMPLERS))
    parser.add_argument("--tol", type=float, default=None, help="EP's tolerance while sampling (default: the package's)")
    parser.add_argument("--out", default=OUT.name, help="results file (in benchmarks/results)")
    args = parser.parse_args()
    rows = []
    for name in args.data:
        data = DATASETS[name]()
        for seed in args.seeds:
            for label in args.samplers:
                rows.append(run(data, label, seed, args.draws, args.tune, args.tol))
                r = rows[-1]
                print(f"{r['data']} seed {seed} {label}: {r['wall']:.0f} s ({r['sampling']:.0f} s sampling), ESS {r['ess']:.0f}, {r['ess_s']:.2f} ESS/s, "
                      f"{r['div']} div, {r['steps']:.1f} steps/draw, {r['ms_eval']:.2f} ms/eval, {r['sweeps']:.2f} sweeps", flush=True)
    text = [
        f"2 chains x ({args.tune} tune + {args.draws} draws), seeds {args.seeds}; medians over the seeds "
        "(divergent: the sum). BLAS at one thread. `python benchmarks/sampling_hard.py`.",
        "",
        *table(rows),
        "",
        "Every run:",
        "",
        "| data | seed | method | wall (s) | min bulk ESS | ESS/s | sampling alone (s) | divergent | steps / draw | ms / eval | sweeps |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
        *(f"| {r['data']} | {r['seed']} | {r['method']} | {r['wall']:.0f} | {r['ess']:.0f} | {r['ess_s']:.2f} | {r['sampling']:.1f} | "
          f"{r['div']} | {r['steps']:.1f} | {r['ms_eval']:.2f} | {r['sweeps']:.2f} |" for r in rows),
    ]
    write_results((OUT.parent / args.out), "\n".join(text) + "\n", peers=('nutpie', 'scikit-learn'))
    print("\n".join(text))


if __name__ == "__main__":
    main()
