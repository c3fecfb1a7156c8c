"""The provenance header every results file in ``benchmarks/results/`` starts with.

``write_results(path, text, peers=...)`` writes ``text`` after a header that says how the
figures were made: the command, the commit (and whether the tree had changes), the date,
the machine, NumPy's BLAS and its thread settings, and the versions of pymc-gpc's
dependencies and of the peers compared. The docs' benchmark pages show the header as it
is; the README and the docs quote the latest figure and link to the file, so a results
file is rewritten in place when re-measured and its history is git's.
"""

import datetime
import importlib.metadata
import os
import platform
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORE = ("pymc-gpc", "pymc", "pytensor", "numpy", "scipy", "numba", "arviz")
MARKER = "<!-- provenance: written by benchmarks/_provenance.py -->"
# ``run.py --quick`` sets this to a scratch folder, so that a smoke run of the suite leaves
# the recorded results files alone
RESULTS_DIR_VARIABLE = "PYMC_GPC_BENCH_RESULTS"


def _git(*args):
    try:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def _version(dist):
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _blas():
    """NumPy's BLAS as its build configuration names it, with the thread settings."""
    name = "unknown"
    try:
        import numpy as np

        info = np.show_config(mode="dicts").get("Build Dependencies", {}).get("blas", {})
        name = " ".join(str(info.get(k, "")) for k in ("name", "version")).strip() or name
    except Exception:  # noqa: BLE001 - a header must never stop a benchmark
        pass
    threads = ", ".join(f"{k}={os.environ[k]}" for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
                        if k in os.environ) or "thread variables unset"
    return f"{name} ({threads})"


# the 1-minute load when the script imported this module (its start), not when it writes
_START_LOAD = os.getloadavg()[0] if hasattr(os, "getloadavg") else None


def _machine():
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = "" if _START_LOAD is None else f", load {_START_LOAD:.1f} at the start"
    return f"{platform.node()}: {cpu}, {os.cpu_count()} logical cores{load}; {platform.system()} {platform.release()}"


def header(peers=(), command=None, note=None):
    """The provenance block (Markdown) for a results file written now.

    Parameters
    ----------
    peers : distribution names of the other packages compared (e.g. ``("scikit-learn", "GPy")``).
    command : the command line; default: this process's, from the repository root.
    note : one more line, e.g. what else ran on the machine.
    """
    if command is None:
        argv = [os.path.relpath(sys.argv[0], ROOT) if sys.argv and sys.argv[0] else "python", *sys.argv[1:]]
        command = "python " + " ".join(shlex.quote(a) for a in argv)
    commit = _git("rev-parse", "--short", "HEAD") or "unknown"
    # the results files themselves are left out: a script rewrites its own file as it goes
    if _git("status", "--porcelain", "--untracked-files=no", "--", "pymc_gpc", "benchmarks", ":(exclude)benchmarks/results"):
        commit += " (with uncommitted changes)"
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    versions = ", ".join(f"{d} {v}" for d in CORE if (v := _version(d)))
    peer_versions = ", ".join(f"{d} {_version(d) or 'not installed'}" for d in peers) or "none"
    lines = [
        MARKER,
        f"- **command**: `{command}`",
        f"- **commit**: {commit}",
        f"- **date**: {now}",
        f"- **machine**: {_machine()}",
        f"- **BLAS**: {_blas()}",
        f"- **versions**: Python {platform.python_version()}, {versions}",
        f"- **peers**: {peer_versions}",
    ]
    if note:
        lines.append(f"- **note**: {note}")
    return "\n".join(lines) + "\n\n"


def results_path(path):
    """Where the results file ``path`` is written: ``path`` itself, or the file of the same
    name in the folder ``$PYMC_GPC_BENCH_RESULTS`` names, when it is set."""
    folder = os.environ.get(RESULTS_DIR_VARIABLE)
    return Path(folder) / Path(path).name if folder else Path(path)


def write_results(path, text, peers=(), command=None, note=None):
    """Write ``text`` to ``path`` (a results file; see ``results_path``) after its provenance
    header; returns the path written."""
    path = results_path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(header(peers, command=command, note=note) + text.lstrip("\n"))
    return path
