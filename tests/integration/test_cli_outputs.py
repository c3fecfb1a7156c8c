"""The CLI's outputs as a user meets them (issues 58 and 64): the user's labels in
predictions.csv and the report, defaults in --help, missing values named, a non-empty
--out refused without --overwrite, and Ctrl-C during the draws (a subprocess sent SIGINT):
exit status 130 and outputs that state exactly the draws they hold, or none."""

import csv
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from pymc_gpc.cli import command as cli

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def labelled_csv(path, n=24, seed=0, labels=("no", "yes")):
    r = np.random.default_rng(seed)
    X = r.normal(size=(n, 2))
    y = np.where(X[:, 0] + 0.5 * r.normal(size=n) > 0, labels[1], labels[0])
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["age", "dose", "outcome"])
        w.writerows([f"{a:.4f}", f"{b:.4f}", lab] for (a, b), lab in zip(X, y))
    return path


def map_args(tmp_path, out="out"):
    return [str(labelled_csv(tmp_path / "train.csv")), "--target", "outcome",
            "--test", str(labelled_csv(tmp_path / "test.csv", n=10, seed=1)),
            "--method", "map", "--approximation", "laplace", "--likelihood", "logistic", "--no-progress",
            "--out", str(tmp_path / out)]


def test_user_labels_and_the_output_folder(tmp_path, capsys, monkeypatch):
    """predictions.csv: p_<positive label>, predicted and label in the user's labels; the report
    names the positive class; relevance.png is drawn with the column names. A second run into
    the folder is refused (files untouched) unless --overwrite, which replaces the package's
    files (an earlier NUTS run's trace.png included) and keeps the user's."""
    from pymc_gpc import plots

    drawn = {}
    original = plots.plot_fit
    monkeypatch.setattr(plots, "plot_fit", lambda *a, **k: (drawn.update(k), original(*a, **k)))
    assert cli.main(map_args(tmp_path)) == 0
    out = tmp_path / "out"
    rows = list(csv.DictReader(open(out / "predictions.csv")))
    assert list(rows[0]) == ["row", "p_yes", "predicted", "label"]
    assert {r["predicted"] for r in rows} <= {"yes", "no"} and {r["label"] for r in rows} <= {"yes", "no"}
    assert all((float(r["p_yes"]) > 0.5) == (r["predicted"] == "yes") for r in rows)
    report = (out / "report.md").read_text()
    assert "- classes: 'no' (negative) and 'yes' (positive)" in report
    assert tuple(drawn["feature_names"]) == ("age", "dose")
    assert sorted(p.name for p in out.iterdir()) == ["history.png", "predictions.csv", "relevance.png",
                                                     "report.md", "summary.csv"]
    capsys.readouterr()

    before = (out / "report.md").read_text()
    assert cli.main(map_args(tmp_path)) == 2
    err = capsys.readouterr().err
    assert "is not empty" in err and "--overwrite" in err
    assert (out / "report.md").read_text() == before
    (out / "trace.png").write_text("an earlier NUTS run's")
    (out / "notes.txt").write_text("the user's")
    assert cli.main(map_args(tmp_path) + ["--overwrite"]) == 0
    assert not (out / "trace.png").exists() and (out / "notes.txt").read_text() == "the user's"
    assert not [p for p in tmp_path.iterdir() if "partial" in p.name]  # no staging folder left


def test_help_shows_defaults(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    for default in ("(default: pima)", "(default: nuts)", "(default: ep)", "(default: 500)", "(default: 2)",
                    "(default: 0)", "(default: pymc-gpc-output,"):
        assert default in text, default
    assert "(default: None)" not in text and "(default: False)" not in text


def test_inducing_option_auto_none_or_a_count():
    assert cli._inducing_option("auto") == "auto" and cli._inducing_option("None") is None
    assert cli._inducing_option("12") == 12
    with pytest.raises(Exception, match="inducing inputs"):
        cli._inducing_option("x")
    assert cli._inducing_option("0") == 0  # out of range: ard_classifier says so (test_fitc_api)
    args = cli._parser().parse_args([])
    assert args.inducing == "auto"
    assert "dense GP prior (--inducing auto" in cli._prior_line(args, 200)
    assert "FITC prior with 100 inducing inputs (k-means) (--inducing auto" in cli._prior_line(args, 2000)
    assert cli._prior_line(cli._parser().parse_args(["--inducing", "none"]), 5000) == ", dense GP prior"


def test_the_default_folder_is_never_overwritten_silently(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert cli._output_folder(None, overwrite=False).name == "pymc-gpc-output"  # missing: used
    (tmp_path / "pymc-gpc-output").mkdir()
    assert cli._output_folder(None, overwrite=False).name == "pymc-gpc-output"  # empty: used
    (tmp_path / "pymc-gpc-output" / "report.md").write_text("first run")
    (tmp_path / "pymc-gpc-output-2").mkdir()
    (tmp_path / "pymc-gpc-output-2" / "report.md").write_text("second run")
    assert cli._output_folder(None, overwrite=False).name == "pymc-gpc-output-3"
    assert "writing to pymc-gpc-output-3/" in capsys.readouterr().err
    assert cli._output_folder(None, overwrite=True).name == "pymc-gpc-output"
    assert cli._output_folder("mine", overwrite=False).name == "mine"  # an explicit --out is checked, not moved
    with pytest.raises(ValueError, match="not empty"):
        cli._check_out(tmp_path / "pymc-gpc-output", overwrite=False)


@pytest.mark.parametrize("cell, column, advice", [("", "age", "fill them in"), ("NA", "age", "fill them in"),
                                                  ("", "outcome", "drop those rows before")])
def test_a_missing_value_is_named_as_such(tmp_path, capsys, cell, column, advice):
    path = labelled_csv(tmp_path / "train.csv")
    lines = path.read_text().splitlines()
    fields = lines[3].split(",")
    fields[{"age": 0, "outcome": 2}[column]] = cell
    lines[3] = ",".join(fields)
    path.write_text("\n".join(lines) + "\n")
    assert cli.main([str(path), "--target", "outcome", "--method", "map", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert f"{column!r} has missing values (1 of 24 rows; lines 4)" in err and advice in err, err
    assert not (tmp_path / "out").exists()


def cpu_seconds(pid):
    """User + system CPU seconds of a process (Linux /proc): how much work it has done, whatever
    the machine's load."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.slow  # a sampling run: CI only, not the between-edits tier
@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="reads a process's CPU time from /proc")
def test_ctrl_c_during_the_draws(tmp_path):
    """SIGINT while NUTS draws (sent once the sampler has used 8 CPU seconds: thousands of
    draws of this 24-point model): exit status 130 and outputs whose report states the draws it
    holds (fewer than asked), the same count in every line; or, if the machine was too slow to
    make 10 draws, nothing written. Before, the status was 0 and the report stated 200000 draws."""
    env = {**os.environ, "PYTHONPATH": ROOT, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-m", "pymc_gpc.cli", str(labelled_csv(tmp_path / "train.csv")), "--target", "outcome",
         "--draws", "200000", "--tune", "20", "--chains", "1", "--no-progress", "--out", str(out)],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        seen = ""
        while "sampling (" not in seen:  # PyMC logs "Sequential sampling (1 chains in 1 job)" as it starts
            line = proc.stderr.readline()
            assert line or proc.poll() is None, seen
            seen += line
        start = cpu_seconds(proc.pid)
        while cpu_seconds(proc.pid) - start < 8.0:
            assert proc.poll() is None
            time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=1200)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr[-2000:]
    if not out.exists():
        assert "nothing written" in stderr
        return
    report = (out / "report.md").read_text()
    held = re.search(r"hold 1 chain x (\d+) draws, not the 1 x 200000 asked for", report)
    assert "**INTERRUPTED**" in report and held, report
    draws = int(held.group(1))
    assert cli.MIN_KEPT_DRAWS <= draws < 200000
    assert f"(20 tune + {draws} draws)" in report and "200000 draws)" not in report
    assert "the outputs hold the draws made until then" in stderr
    assert sorted(p.name for p in out.iterdir()) == ["relevance.png", "report.md", "summary.csv", "trace.png"]


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the lost interrupt, printed
def test_an_interrupt_lost_in_a_finalizer_still_stops_the_draws(monkeypatch):
    """The SIGINT handler's KeyboardInterrupt, raised inside a finalizer (where Python prints
    and ignores it), used to leave the draws running to the end, and the report then said
    "interrupted" beside every draw asked for. Here a finalizer sends SIGINT after draw 40 of
    2,000: the draws stop after the next one, and the run counts as interrupted."""
    import types

    import pymc as pm
    from pymc.sampling import mcmc

    import pymc_gpc

    r = np.random.default_rng(0)
    X = r.normal(size=(24, 2))
    y = (X[:, 0] + 0.5 * r.normal(size=24) > 0).astype(int)
    with pm.Model() as model:
        ls = pm.LogNormal("ls", 0.0, 0.5)
        gp = pymc_gpc.MarginalLaplace(cov_func=pm.gp.cov.ExpQuad(2, ls=ls),
                                      likelihood=pymc_gpc.likelihoods.Logistic())
        gp.marginal_likelihood("y", X=X, y=y)

    class SendsSigint:
        def __del__(self):
            os.kill(os.getpid(), signal.SIGINT)  # the handler runs here, in the finalizer

    calls = []
    log_warning_stats = mcmc.log_warning_stats

    def after_each_draw(stats):  # called by PyMC's sampling loop after each recorded draw
        calls.append(1)
        if len(calls) == 40:
            SendsSigint()  # made and dropped at once: its finalizer runs now
        return log_warning_stats(stats)

    monkeypatch.setattr(mcmc, "log_warning_stats", after_each_draw)
    args = types.SimpleNamespace(draws=2000, tune=20, chains=1, seed=0, no_progress=True, sampler="pymc")
    idata, interrupted = cli._sample(args, model)
    kept = int(idata["posterior"].sizes["draw"])
    assert interrupted and cli.MIN_KEPT_DRAWS <= kept < 30, kept
