"""Run the benchmarks: the maintainer's suite and the paper and peer reproductions, by name.

    python benchmarks/run.py --list                  # every suite, its group and its commands
    python benchmarks/run.py --quick                 # the "suite" group on small problems
    python benchmarks/run.py --full                  # the "suite" group as recorded
    python benchmarks/run.py --quick engine sparse   # suites by name (or a group: suite,
    python benchmarks/run.py --full reproductions    #  reproductions, accelerator, all)

Each suite is one or more calls of a script in ``benchmarks/`` (one process each, from the
repository root, one BLAS thread), and each script writes its results file with the
provenance header of ``_provenance.py``.

* ``--full`` runs the commands that made the results files and rewrites those files in
  ``benchmarks/results/`` in place (their history is git's). Reproductions take from
  minutes to hours; the accelerator group needs a GPU.
* ``--quick`` runs each suite on small problems, to check that it still runs (seconds to a
  few minutes each on two cores); the figures mean little, so the results files go to a
  scratch folder (``--results DIR``, default a new temporary folder, printed) through
  ``$PYMC_GPC_BENCH_RESULTS`` (``_provenance.results_path``), and the recorded files are
  left alone. A suite without quick arguments is skipped in quick mode, saying so.

A suite whose script is not in the tree is reported as missing and skipped, not failed (so
the list can name scripts before they land). The exit status is 1 when a suite failed.
"""

import argparse
import dataclasses
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from _provenance import RESULTS_DIR_VARIABLE  # noqa: E402


@dataclasses.dataclass(frozen=True)
class Suite:
    """One named benchmark: ``script`` run with ``full`` (a list of argument lists, one process
    each) or with ``quick`` (likewise; None: no quick form)."""

    name: str
    group: str
    script: str
    full: tuple
    quick: tuple | None
    about: str


def _s(name, group, script, full, quick, about):
    return Suite(name, group, script, tuple(tuple(a) for a in full),
                 None if quick is None else tuple(tuple(a) for a in quick), about)


SUITES = [
    # the suite: the engine's cost per evaluation, what a change to the package can move
    _s("engine", "suite", "engine.py", [[]], [["--quick"]],
       "dense EP / Laplace evidence + gradient against the Cholesky floor, scikit-learn, GPy"),
    _s("approximations", "suite", "engine.py", [["approximations"]], [["approximations"]],
       "EP, Laplace, mean field I / II, ADF side by side"),
    _s("dense-floor", "suite", "engine.py", [["dense-floor"]], [["dense-floor", "--sizes", "1000"]],
       "dense logp + gradient as NUTS calls it, against the Cholesky floor"),
    _s("sparse", "suite", "sparse.py", [[], ["--gradient"], ["--threads"]], [["--quick"]],
       "FITC evidence + gradient: time and memory against n and m, accuracy against dense EP"),
    _s("multiclass-timing", "suite", "multiclass.py", [["timing"]], [["timing"]],
       "softmax Laplace and nested EP against c binary evaluations"),
    _s("multiclass-fitc", "suite", "multiclass_fitc.py", [[]], [["--quick"]],
       "multi-class FITC evidence + gradient: time and memory"),
    _s("integration", "suite", "integration.py", [[], ["public"], ["acceptance"]], [["--no-nuts"]],
       "CCD over the hyperparameters against NUTS and MAP-II (Pima, Crabs, HMDA; R's Default and spam7); "
       "NUTS's target acceptance"),
    _s("jax", "suite", "jax_backend.py", [["fitc", "--cpu", "--walk"], ["multiclass"]],
       [["fitc", "--cpu", "--sizes", "2000", "--repeats", "1"],
        ["multiclass", "--sizes", "200", "--classes", "3", "--repeats", "1", "--no-sampler",
         "--fitc-sizes", "1000", "--fitc-m", "50"]],
       "the JAX backend against numba: dense, FITC and multi-class evaluations"),
    # the paper and peer reproductions
    _s("sampling", "reproductions", "sampling.py", [[]],
       [["--data", "crabs", "--seeds", "1", "--draws", "30", "--tune", "30", "--methods", "ep-pymc", "latent"]],
       "NUTS over the hyperparameters against pm.gp.Latent (Barber & Williams' Pima and Crabs)"),
    _s("sampling-hard", "reproductions", "sampling.py", [["hard"]],
       [["hard", "--data", "crabs", "--seeds", "1", "--draws", "30", "--tune", "30",
         "--samplers", "pymc_gpc.sample (PyMC NUTS)"]],
       "sampling where EP is hard: breast cancer, a separable set, Crabs"),
    _s("jax-samplers", "reproductions", "jax_backend.py", [[]],
       [["--data", "crabs", "--draws", "30", "--tune", "30", "--samplers", "pymc", "numpyro"]],
       "numpyro and blackjax on the JAX backend against PyMC's NUTS and nutpie"),
    _s("point-estimates", "reproductions", "point_estimates.py", [[]], [["--quick"]],
       "type-II ML on Pima against scikit-learn and GPy; Kim & Ghahramani's synthetic experiments"),
    _s("cross-validation", "reproductions", "point_estimates.py", [["cv"]],
       [["cv", "--folds", "2", "--no-nuts"]],
       "Kim & Ghahramani's Table 2: 10-fold CV on Pima and Crabs"),
    _s("label-noise", "reproductions", "point_estimates.py", [["label-noise"]], None,
       "Kim & Ghahramani's outlier paper, Table 1 (about ten minutes; no quick form)"),
    _s("sklearn-cv", "reproductions", "point_estimates.py", [["sklearn-cv"]], [["sklearn-cv", "--max-rows", "150"]],
       "5-fold CV of the scikit-learn estimators against scikit-learn's GPC, logistic regression, boosting"),
    _s("gene-expression", "reproductions", "gene_expression.py", [["--splits", "10"]],
       [["--splits", "1", "--tasks", "endometrium vs kidney"]],
       "Tan's Tables 1-2 setting: linear kernels, EP against Laplace and an SVM"),
    _s("multiclass-cv", "reproductions", "multiclass.py", [["cv"]], None,
       "Barber & Williams' Table 2: Forensic Glass, 10 folds (hours; no quick form)"),
    _s("multiclass-nuts", "reproductions", "multiclass.py",
       [["nuts", "--fold", "0", "--draws", "500", "--only", "softmax"],
        ["nuts-cv", "--draws", "200", "--only", "softmax"]], None,
       "NUTS over the multi-class hyperparameters on Forensic Glass (hours; no quick form)"),
    _s("ordinal", "reproductions", "ordinal.py",
       [["--splits", "3", "--binning", "equal_frequency", "equal_length"]],
       [["--splits", "1", "--datasets", "machine_cpu", "--bins", "5", "--methods", "linear", "ordinal-ep"]],
       "Chu & Ghahramani (2005): discretised regression data sets"),
    _s("sparse-default", "reproductions", "sparse_default.py", [[], ["--em-ep"]], [["50"]],
       "FITC type-II and EM-EP on ISLR Default (10^4 rows)"),
    _s("sparse-nuts", "reproductions", "sparse_default.py", [["nuts", "50"]], None,
       "NUTS over a FITC model's hyperparameters on ISLR Default (no quick form)"),
    _s("fitc-hsgp", "reproductions", "sparse_default.py",
       [["fitc-hsgp", "--inducing", "50", "--hsgp-m", "3", "15", "6", "--sklearn", "--sklearn-rows", "2000"]], None,
       "FITC EP + NUTS against pm.gp.HSGP on ISLR Default (no quick form)"),
    _s("hsgp", "reproductions", "sparse_default.py", [["hsgp"]],
       [["hsgp", "--n-train", "1000", "--n-test", "500", "--m", "8", "--fitc-m", "20", "--eval-n", "2000",
         "--repeats", "2", "--nuts-n", "300", "--nuts-m", "6", "--draws", "30", "--tune", "30",
         "--predict-draws", "10", "--more-m", "10"]],
       "approx='HSGP' EP and Laplace on Minneapolis's police stops: MAP-II, n = 1e5, NUTS against pm.gp.HSGP"),
    _s("svgp", "reproductions", "svgp.py", [[]], None,
       "FITC MAP-II against GPyTorch's SVGP on 5 x 10^4 flights (needs gpytorch; no quick form)"),
    _s("multiclass-large", "reproductions", "multiclass_large.py", [[]], None,
       "diamonds, 5 classes, 10^4 rows: softmax FITC against logistic regression and scikit-learn"),
    _s("binary-gold", "reproductions", "binary_gold.py", [["--n-iter", "20000"]], [["--n-iter", "200"]],
       "binary approximations against exact sampling and closed forms"),
    _s("multiclass-gold", "reproductions", "multiclass_gold.py",
       [["gold", "binary", "heldout", "--out", "multiclass_gold.md"]],
       [["gold", "--n-iter", "200", "--out", "multiclass_gold.md"]],
       "softmax Laplace and nested EP against exact sampling; the predictives held out"),
    _s("ordinal-reference", "reproductions", "ordinal_reference.py", [["--check"]],
       [["--draws", "50", "--tune", "50", "--chains", "2"]],
       "long NUTS runs, exact ordinal GP against the EP marginal (also the test's reference data)"),
    # needs an accelerator
    _s("gpu", "accelerator", "gpu_scale.py", [["--budget", "420"]],
       [["--sizes", "2000", "--ms", "20", "--mc-n", "500", "--mc-m", "10", "--nuts-n", "500", "--nuts-m", "10",
         "--budget", "120", "--reserve", "30", "--skip", "nuts"]],
       "the JAX backend at 10^5-10^6 rows on one GPU (the quick form is a dry run on a CPU)"),
]
BY_NAME = {s.name: s for s in SUITES}
GROUPS = {"suite", "reproductions", "accelerator"}
TOOLS = {"ab.py": "paired A/B of the evidence + gradient between two source trees: "
                  "python benchmarks/ab.py --a OLD_TREE --b NEW_TREE"}


def select(names):
    """The suites named (or in the groups named; ``all``: every suite), in the table's order."""
    if not names:
        names = ["suite"]
    unknown = [n for n in names if n not in BY_NAME and n not in GROUPS and n != "all"]
    if unknown:
        raise ValueError(f"unknown suite or group {', '.join(unknown)}; known: "
                         f"{', '.join(BY_NAME)}; groups: {', '.join(sorted(GROUPS))}, all")
    return [s for s in SUITES if "all" in names or s.name in names or s.group in names]


def commands(suite, mode):
    """The argument lists of ``suite`` in ``mode`` ("quick" or "full"); None: no such form."""
    return suite.full if mode == "full" else suite.quick


def run_suite(suite, mode, env, timeout):
    """Run one suite's commands; returns (status, seconds)."""
    script = HERE / suite.script
    if not script.exists():
        print(f"[{suite.name}] benchmarks/{suite.script} is not in this tree (yet): skipped", flush=True)
        return "missing", 0.0
    argvs = commands(suite, mode)
    if argvs is None:
        print(f"[{suite.name}] no quick form ({suite.about}): skipped; run it with --full", flush=True)
        return "skipped", 0.0
    start = time.perf_counter()
    for argv in argvs:
        cmd = [sys.executable, str(script.relative_to(ROOT)), *argv]
        print(f"[{suite.name}] {shlex.join(cmd[1:])}", flush=True)
        try:
            rc = subprocess.run(cmd, cwd=ROOT, env=env, timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            return f"timed out after {timeout:.0f} s", time.perf_counter() - start
        if rc:
            return f"failed (exit {rc})", time.perf_counter() - start
    return "ok", time.perf_counter() - start


def listing():
    lines = []
    for group in ("suite", "reproductions", "accelerator"):
        lines.append(f"{group}:")
        for s in (s for s in SUITES if s.group == group):
            there = "" if (HERE / s.script).exists() else "  [script not in this tree yet]"
            lines.append(f"  {s.name:<18} {s.about}{there}")
            for mode in ("full", "quick"):
                argvs = commands(s, mode)
                shown = "; ".join(shlex.join([s.script, *a]) for a in argvs) if argvs is not None else "(none)"
                lines.append(f"  {'':<18}   {mode}: {shown}")
    lines.append("tools (not suites):")
    lines += [f"  {k}: {v}" for k, v in TOOLS.items()]
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    modes = parser.add_mutually_exclusive_group()
    modes.add_argument("--quick", action="store_true", help="small problems, results to a scratch folder")
    modes.add_argument("--full", action="store_true", help="the recorded runs, results files rewritten in place")
    parser.add_argument("--list", action="store_true", help="list the suites and their commands")
    parser.add_argument("--results", default=None, help="--quick: the scratch folder for the results files")
    parser.add_argument("--timeout", type=float, default=None, help="seconds per command (default: none)")
    parser.add_argument("names", nargs="*", help="suites or groups (default: the suite group)")
    args = parser.parse_args(argv)
    if args.list:
        print(listing())
        return 0
    if not (args.quick or args.full):
        parser.error("give --quick or --full (or --list)")
    try:
        suites = select(args.names)
    except ValueError as e:
        parser.error(str(e))
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    mode = "quick" if args.quick else "full"
    if args.quick:
        folder = Path(args.results) if args.results else Path(tempfile.mkdtemp(prefix="pymc_gpc_bench_"))
        folder.mkdir(parents=True, exist_ok=True)
        env[RESULTS_DIR_VARIABLE] = str(folder.resolve())
        print(f"quick run: results files go to {folder}", flush=True)
    else:
        env.pop(RESULTS_DIR_VARIABLE, None)
    summary = [(s.name, *run_suite(s, mode, env, args.timeout)) for s in suites]
    print("\n| suite | status | seconds |\n|---|---|---|")
    for name, status, seconds in summary:
        print(f"| {name} | {status} | {seconds:.0f} |")
    return 1 if any(status not in ("ok", "missing", "skipped") for _, status, _ in summary) else 0


if __name__ == "__main__":
    sys.exit(main())
