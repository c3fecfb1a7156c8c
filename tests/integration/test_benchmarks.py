"""The benchmarks folder: a suite behind one runner, and a record whose files say what made them.

``benchmarks/run.py`` runs named suites in a quick mode (results to a scratch folder) and a
full mode (results files rewritten in place). These tests hold the folder to its shape (at
most 20 scripts, each behind the runner), check the runner's behaviour on scripts made
here (a missing script is skipped with a message, a failing one fails the run, quick
results never land in ``benchmarks/results``) and check the record: no dated or variant
file names, and every script a results file names either exists or is named with the
commit that holds it. Nothing here runs a benchmark.
"""

import importlib.util
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"
RESULTS = BENCH / "results"
# scripts the runner lists before they land (none now)
PENDING = set()


def _module(name):
    sys.path.insert(0, str(BENCH))
    try:
        spec = importlib.util.spec_from_file_location(f"_bench_{name}", BENCH / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(BENCH))


@pytest.fixture(scope="module")
def run():
    return _module("run")


def _scripts():
    return sorted(p.name for p in BENCH.glob("*.py") if p.name not in ("_provenance.py", "run.py"))


def test_at_most_twenty_scripts():
    """At most 20 Python files in benchmarks/, the runner and the provenance helper included."""
    assert len(set(_scripts()) | PENDING) + 2 <= 20, _scripts()


def test_every_script_is_behind_the_runner_and_every_suite_names_a_known_script(run):
    listed = {s.script for s in run.SUITES} | set(run.TOOLS)
    assert not [s for s in _scripts() if s not in listed]
    assert not [s for s in listed if not (BENCH / s).exists() and s not in PENDING]
    assert len({s.name for s in run.SUITES}) == len(run.SUITES)
    assert all(s.group in run.GROUPS for s in run.SUITES)


def test_selection_by_name_and_group(run):
    assert [s.name for s in run.select(["sparse", "engine"])] == ["engine", "sparse"]  # table order
    assert {s.group for s in run.select([])} == {"suite"}
    assert len(run.select(["all"])) == len(run.SUITES)
    with pytest.raises(ValueError, match="unknown suite or group nosuch"):
        run.select(["engine", "nosuch"])


def _suite(run, name, script, quick=((),)):
    return run.Suite(name, "suite", script, ((),), quick, "made by the test")


def _fake_tree(run, monkeypatch, tmp_path):
    bench = tmp_path / "benchmarks"
    bench.mkdir()
    (bench / "ok.py").write_text(
        "import os, pathlib, sys\n"
        "sys.path.insert(0, %r)\n"
        "from _provenance import write_results\n"
        "write_results(pathlib.Path(%r) / 'ok.md', 'figures\\n')\n" % (str(BENCH), str(tmp_path / "recorded")))
    (bench / "fails.py").write_text("raise SystemExit(3)\n")
    monkeypatch.setattr(run, "HERE", bench)
    monkeypatch.setattr(run, "ROOT", tmp_path)
    return bench


def test_quick_run_writes_to_the_scratch_folder_and_skips_a_missing_script(run, monkeypatch, tmp_path, capsys):
    _fake_tree(run, monkeypatch, tmp_path)
    suites = [_suite(run, "ok", "ok.py"), _suite(run, "later", "not_yet.py"), _suite(run, "slow", "ok.py", None)]
    monkeypatch.setattr(run, "SUITES", suites)
    monkeypatch.setattr(run, "BY_NAME", {s.name: s for s in suites})
    scratch = tmp_path / "scratch"
    assert run.main(["--quick", "--results", str(scratch), "ok", "later", "slow"]) == 0
    out = capsys.readouterr().out
    assert "benchmarks/not_yet.py is not in this tree (yet): skipped" in out
    assert "[slow] no quick form" in out
    assert re.search(r"\| ok \| ok \|", out) and re.search(r"\| later \| missing \|", out)
    written = (scratch / "ok.md").read_text()
    assert written.startswith("<!-- provenance: written by benchmarks/_provenance.py -->") and "figures" in written
    assert not (tmp_path / "recorded" / "ok.md").exists()  # the recorded file is left alone


def test_full_run_writes_in_place_and_a_failing_suite_fails_the_run(run, monkeypatch, tmp_path, capsys):
    _fake_tree(run, monkeypatch, tmp_path)
    suites = [_suite(run, "ok", "ok.py"), _suite(run, "fails", "fails.py")]
    monkeypatch.setattr(run, "SUITES", suites)
    monkeypatch.setattr(run, "BY_NAME", {s.name: s for s in suites})
    monkeypatch.setenv("PYMC_GPC_BENCH_RESULTS", str(tmp_path / "stale"))  # a full run ignores it
    assert run.main(["--full", "ok", "fails"]) == 1
    assert "| fails | failed (exit 3) |" in capsys.readouterr().out
    assert (tmp_path / "recorded" / "ok.md").read_text().startswith("<!-- provenance")
    assert not (tmp_path / "stale").exists()


def test_results_path_follows_the_variable(monkeypatch, tmp_path):
    prov = _module("_provenance")
    monkeypatch.delenv(prov.RESULTS_DIR_VARIABLE, raising=False)
    assert prov.results_path(RESULTS / "engine.md") == RESULTS / "engine.md"
    monkeypatch.setenv(prov.RESULTS_DIR_VARIABLE, str(tmp_path))
    assert prov.results_path(RESULTS / "engine.md") == tmp_path / "engine.md"


def test_no_dated_or_variant_results_files():
    names = [p.name for p in RESULTS.glob("*.md")]
    assert not [n for n in names if re.search(r"20\d\d-\d\d-\d\d", n)]
    assert not [n for n in names if re.search(r"_(bc\d|\d+seeds|sampling_only|paths)\b|_bc_|_lowrank", n)]
    assert not (RESULTS / "engine_notes.md").exists() and (ROOT / "docs" / "design" / "engine_notes.md").exists()


def _header(text):
    lines = text.splitlines()
    block = lines[:1] if lines and lines[0].startswith("<!-- provenance") else []
    for line in lines[len(block):]:
        if not line.startswith("- **"):
            break
        block.append(line)
    return "\n".join(block)


def test_every_script_a_results_file_names_exists_or_is_named_with_its_commit():
    missing = []
    for path in sorted(RESULTS.glob("*.md")):
        header = _header(path.read_text())
        for script in set(re.findall(r"benchmarks/(\w+\.py)", header)):
            if (BENCH / script).exists():
                continue
            held = re.search(rf"benchmarks/{script}`[^\n]*(commit [0-9a-f]{{7}} holds|merged into it)", header)
            if not (held or re.search(rf"- \*\*made by\*\*:.*benchmarks/{script}", header)):
                missing.append(f"{path.name}: {script}")
    assert not missing
