"""nutpie's chains as threads: what one chain costs the other (issue 18).

nutpie runs its chains as Rust threads of one process. Up to 8d270eb each evaluation entered
Python through numba's object-mode blocks (the Op, and the ARD kernel's exponential), and
whatever it did while holding the GIL the other chain waited for: the Op's Python around
the compiled EP loop, numba's dispatch of that loop, and the making and destroying of a
Python thread state at every block (numba's PyGILState_Ensure / Release on a thread Python
did not start). Since then the kernel's exponential runs compiled, and binary EP's common
case too (``backends.numba.compiled_ep``, the default; PYMC_GPC_COMPILED_EP=0 gives the object-mode
Op): an evaluation enters Python only where that declines. ``--paths`` runs both. With
no Python in the Op the two-thread cost on Pima fell from 1.19 to 1.01
(``results/threads_sampling_only.md``). Up to 2026-11-27 each timed call was a whole
``pymc_gpc.sample``, whose wall included compiling nutpie's model (2.5-5 s, counted once per
thread below), which made two threads look 1.6-1.75x as costly on Pima with either Op
(``results/threads.md``, ``results/threads_paths.md``).

For each data set, ``nutpie.sample`` on the model compiled once per process
(``nutpie.compile_pymc_model``; what ``pymc_gpc.sample(nuts_sampler="nutpie")`` runs, less its
compilation), 2 chains x (tune + draws), seed 1, with the chains run one after the other (``cores=1``: one thread at a time) and
side by side (``cores=2``: two threads), alternated ``--repeats`` times in a fresh process
after an untimed 5 + 5 run; with ``--baseline DIR LABEL`` also another version of the
package (through ``PYTHONPATH``), in its own process.

Columns: wall time of the call; Op evaluations (both chains, warm-up included; counted at
the object-mode entry, and by ``backends.numba.thread_state``'s tallies on the compiled path); EP sweeps
per evaluation (the sweeps of the compiled solves, ``ep.ep_warm`` and the compiled path's,
over those evaluations: an answer from the recent results counts as an
evaluation without sweeps, so this is a little below the sampler's own figure, and equal
counts in two rows mean the same trajectories); ms of wall per evaluation per thread (wall x threads / evaluations);
and the two-thread cost relative to one thread (1: the chains do not slow each other).
Medians over the repeats. Two processes side by side, one
chain each, ran at the one-thread figure (2.00 against 2.02 ms per evaluation on Pima,
2026-11-26).
This machine's speed drifts by up to a fifth between processes minutes apart: compare rows
of one run, and versions only over several runs.

Run:  OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/threads.py [--data pima breast-cancer --repeats 3]
      [--baseline DIR LABEL] [--paths --out threads_paths.md]
      (THREADS_CORES=2 runs only the two-thread case, e.g. for a quick A/B of ``--child`` runs)
Writes benchmarks/results/threads.md (or ``--out``).
"""

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse
import json
import pathlib
import subprocess
import sys
import time
import warnings
from _provenance import write_results  # noqa: E402  (benchmarks/_provenance.py)

OUT = pathlib.Path(__file__).parent / "results" / "threads.md"
CORES = [int(c) for c in os.environ.get("THREADS_CORES", "1,2").split(",")]  # the runs of a child, in order
DRAWS = {"pima": 300, "breast-cancer": 150, "crabs": 300}


def child(name, repeats, draws):
    """One variant in this process: the timed runs, as JSON lines on stdout."""
    import pymc_gpc
    from pymc_gpc.backends.numba import dispatch as D
    from pymc_gpc.ops import marginal as M

    sys.path.insert(0, str(pathlib.Path(__file__).parent))
    from sampling_hard import DATASETS  # noqa: E402
    from pymc_gpc.datasets import load

    calls = [0]
    registered = D._perform_registered

    def counting(key, inputs):
        calls[0] += 1
        return registered(key, inputs)

    D._perform_registered = counting
    sweeps, solve = [0], M.ep_warm

    def counting_sweeps(*args, **kwargs):
        out = solve(*args, **kwargs)
        sweeps[0] += 0 if out is None else out[4]
        return out

    M.ep_warm = counting_sweeps
    try:  # the compiled path's tallies (``backends.numba.thread_state``; code before it has none)
        from pymc_gpc.backends.numba import thread_state
    except ImportError:
        thread_state = None

    def compiled_tallies():
        return thread_state.tallies() if thread_state else {"calls": 0, "sweeps": 0}
    data = DATASETS[name]() if name in DATASETS else load(name)
    model, _ = pymc_gpc.ard_classifier(data.X_train, data.y_train)
    warnings.simplefilter("ignore")
    import nutpie

    compiled = nutpie.compile_pymc_model(model)  # once: the timed calls are sampling only
    nutpie.sample(compiled, draws=5, tune=5, chains=2, progress_bar=False, seed=1)
    for _ in range(repeats):
        for cores in CORES:
            calls[0] = sweeps[0] = 0
            before = compiled_tallies()
            t = time.perf_counter()
            nutpie.sample(compiled, draws=draws, tune=draws, chains=2, cores=cores, progress_bar=False, seed=1)
            wall = time.perf_counter() - t
            after = compiled_tallies()
            evaluations = calls[0] + after["calls"] - before["calls"]
            swept = sweeps[0] + after["sweeps"] - before["sweeps"]
            print(json.dumps({"cores": cores, "wall": wall, "evaluations": evaluations, "sweeps": swept}), flush=True)


def run_variant(name, repeats, draws, env=None):
    env = {**os.environ, **env} if env else None
    out = subprocess.run([sys.executable, __file__, "--child", name, str(repeats), str(draws)],
                         capture_output=True, text=True, check=True, env=env)
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", nargs="+", default=["pima", "breast-cancer"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--baseline", nargs=2, metavar=("DIR", "LABEL"),
                        help="also run the pymc_gpc package found in DIR (e.g. `git archive <commit> pymc_gpc` "
                             "unpacked there), as is, labelled LABEL")
    parser.add_argument("--paths", action="store_true",
                        help="run this code twice: binary EP's compiled Op (PYMC_GPC_COMPILED_EP=1) and its "
                             "object-mode Op (=0)")
    parser.add_argument("--out", default=OUT.name, help="results file (in benchmarks/results)")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        name, repeats, draws = args.child
        child(name, int(repeats), int(draws))
        return
    import numpy as np

    rows = []
    for name in args.data:
        draws = DRAWS.get(name, 300)
        variants = ([("compiled EP Op", {"PYMC_GPC_COMPILED_EP": "1"}), ("object-mode Op", {"PYMC_GPC_COMPILED_EP": "0"})]
                    if args.paths else [("this code", None)])
        variants += [(args.baseline[1], {"PYTHONPATH": args.baseline[0]})] if args.baseline else []
        runs_of = {variant: [] for variant, _ in variants}
        for _ in range(args.repeats):  # variants alternated, a process each: the machine's drift falls on all
            for variant, env in variants:
                runs_of[variant] += run_variant(name, 1, draws, env)
        for variant, _ in variants:
            runs = runs_of[variant]
            per = {c: [r["wall"] * c / r["evaluations"] * 1e3 for r in runs if r["cores"] == c] for c in (1, 2)}
            walls = {c: [r["wall"] for r in runs if r["cores"] == c] for c in (1, 2)}
            evals = {c: [r["evaluations"] for r in runs if r["cores"] == c] for c in (1, 2)}
            sweeps = [r["sweeps"] / r["evaluations"] for r in runs]
            rows.append((name, draws, variant, walls, evals, per, sweeps))
            print(name, variant, {c: np.round(v, 2).tolist() for c, v in per.items()}, flush=True)
    text = ["nutpie's two chains as one thread after the other (1) or two threads at once (2), "
            f"`nutpie.sample` on the model compiled once (sampling only), seed 1, medians of {args.repeats} runs "
            "per variant, each in its own process, the variants alternated; `python benchmarks/threads.py` (module docstring).", "",
            "| data | tune + draws | code | wall, 1 / 2 threads (s) | evaluations, 1 / 2 | EP sweeps / evaluation | "
            "ms / evaluation / thread, 1 / 2 | 2 threads / 1 thread |", "|---|---|---|---|---|---|---|---|"]
    for name, draws, variant, walls, evals, per, sweeps in rows:
        m = {c: float(np.median(per[c])) for c in (1, 2)}
        text.append(f"| {name} | {draws} + {draws} | {variant} | {np.median(walls[1]):.1f} / {np.median(walls[2]):.1f} | "
                    f"{int(np.median(evals[1]))} / {int(np.median(evals[2]))} | {np.median(sweeps):.2f} | {m[1]:.2f} / {m[2]:.2f} | "
                    f"{m[2] / m[1]:.2f} |")
    write_results((OUT.parent / args.out), "\n".join(text) + "\n", peers=('nutpie',))
    print("\n".join(text))


if __name__ == "__main__":
    main()
