"""The main job, run the way a user runs it (MAP-II keeps it quick)."""

import csv

import numpy as np
import pytest

from pymc_gpc.cli.command import main
from pymc_gpc.datasets import load_crabs


def test_bundled_crabs_map(tmp_path, capsys):
    assert main(["--data", "crabs", "--method", "map", "--no-progress", "--out", str(tmp_path)]) == 0
    report = (tmp_path / "report.md").read_text()
    assert "MAP-II point" in report and "test errors" in report and "log evidence" in report
    assert (tmp_path / "history.png").exists() and (tmp_path / "relevance.png").exists()
    errors = int(report.split("test errors: ")[1].split(" /")[0])
    assert errors <= 12  # Barber & Williams: 3/120 with HMC; MAP-II is a little worse
    rows = list(csv.DictReader(open(tmp_path / "predictions.csv")))
    # p_<positive label>: the bundled set's labels are -1 / +1
    assert len(rows) == 120 and all(0.0 <= float(r["p_1"]) <= 1.0 for r in rows)


def write_csv(path, X, labels, names):
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(list(names) + ["sex"])
        for x, lab in zip(X, labels):
            w.writerow(list(x) + [lab])


def test_user_csv_with_string_labels(tmp_path):
    d = load_crabs(standardise=False)
    lab = lambda y: np.where(y > 0, "M", "F")
    write_csv(tmp_path / "train.csv", d.X_train, lab(d.y_train), d.feature_names)
    write_csv(tmp_path / "test.csv", d.X_test, lab(d.y_test), d.feature_names)
    code = main([str(tmp_path / "train.csv"), "--target", "sex", "--test", str(tmp_path / "test.csv"),
                 "--method", "map", "--approximation", "laplace", "--likelihood", "logistic",
                 "--no-progress", "--out", str(tmp_path / "out")])
    assert code == 0
    report = (tmp_path / "out" / "report.md").read_text()
    assert int(report.split("test errors: ")[1].split(" /")[0]) <= 12


def test_bad_csv_is_a_clear_error(tmp_path, capsys):
    path = tmp_path / "bad.csv"
    path.write_text("a,b,label\n1,2,x\n3,4,y\n5,6,z\n")
    assert main([str(path), "--target", "label", "--method", "map", "--approximation", "meanfield-ensemble",
                 "--out", str(tmp_path)]) == 2
    assert "more than two classes: use --approximation laplace (softmax) or ep" in capsys.readouterr().err
    assert main([str(path), "--target", "nope", "--out", str(tmp_path)]) == 2
    assert "no column 'nope'" in capsys.readouterr().err


def test_multiclass_shared_kernel_and_likelihood_check(tmp_path, capsys):
    """A 3-class column: --shared-kernel fits one kernel for all classes; a binary
    --likelihood on it is an error, not ignored."""
    rng = np.random.default_rng(5)
    X = rng.normal(size=(30, 2))
    y = np.array(["p", "q", "r"])[np.argmax(X @ np.array([[2.0, -2.0, 0.0], [0.0, 1.0, -2.0]]), axis=1)]
    path = tmp_path / "train.csv"
    path.write_text("a,b,kind\n" + "".join(f"{u:.5f},{v:.5f},{k}\n" for (u, v), k in zip(X, y)))
    args = [str(path), "--target", "kind", "--method", "map", "--approximation", "laplace", "--no-progress"]
    assert main(args + ["--shared-kernel", "--out", str(tmp_path / "out")]) == 0
    report = (tmp_path / "out" / "report.md").read_text()
    assert "classes: 3, one ARD kernel shared by the classes" in report
    assert main(args + ["--lengthscale-spread", "1", "--out", str(tmp_path / "spread")]) == 0
    assert "one ARD kernel per class (log lengthscales shrunk toward a shared value, sd 1)" in (
        tmp_path / "spread" / "report.md").read_text()
    assert main(args + ["--shared-kernel", "--lengthscale-spread", "1", "--out", str(tmp_path / "both")]) == 2
    assert "--lengthscale-spread serves" in capsys.readouterr().err
    assert main(args + ["--lengthscale-spread", "-1", "--out", str(tmp_path / "neg")]) == 2
    assert "lengthscale_spread must be a finite number > 0" in capsys.readouterr().err
    assert main(args + ["--likelihood", "logistic", "--out", str(tmp_path / "bad")]) == 2
    assert "--likelihood logistic does not fit it" in capsys.readouterr().err


def test_multiclass_inducing(tmp_path):
    """--inducing on a 3-class column: one ARD kernel per class with the FITC prior (the
    report names it), MAP-II, test errors on separable-ish data, probabilities per class."""
    rng = np.random.default_rng(6)
    X = rng.normal(size=(90, 2))
    y = np.array(["p", "q", "r"])[np.argmax(X @ np.array([[2.0, -2.0, 0.0], [0.0, 1.0, -2.0]]), axis=1)]
    for name, rows in (("train.csv", slice(0, 60)), ("test.csv", slice(60, 90))):
        (tmp_path / name).write_text("a,b,kind\n" + "".join(f"{u:.5f},{v:.5f},{k}\n"
                                                            for (u, v), k in zip(X[rows], y[rows])))
    out = tmp_path / "out"
    assert main([str(tmp_path / "train.csv"), "--target", "kind", "--test", str(tmp_path / "test.csv"), "--method",
                 "map", "--approximation", "laplace", "--inducing", "10", "--no-progress", "--out", str(out)]) == 0
    report = (out / "report.md").read_text()
    assert "classes: 3" in report and "FITC prior with 10 inducing inputs" in report
    assert int(report.split("test errors: ")[1].split(" /")[0]) <= 5  # 30 test points, linear boundaries
    rows = list(csv.DictReader(open(out / "predictions.csv")))
    assert len(rows) == 30
    assert all(abs(sum(float(r[f"p_{c}"]) for c in "pqr") - 1.0) < 1e-5 for r in rows)  # 6 decimals


def _ordinal_csv(path, n, seed, labels):
    r = np.random.default_rng(seed)
    X = r.normal(size=(n, 2))
    y = np.digitize(X[:, 0] + 0.3 * r.normal(size=n), [-0.5, 0.5])
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["a", "b", "grade"])
        for x, k in zip(X, y):
            w.writerow(list(x) + [labels[k]])


def test_ordinal_target(tmp_path, capsys):
    """--ordinal: numeric labels in numeric order, strings in the order of --levels; the
    report has the test errors and predictions.csv one probability column per level."""
    _ordinal_csv(tmp_path / "train.csv", 40, 0, ["low", "mid", "high"])
    _ordinal_csv(tmp_path / "test.csv", 30, 1, ["low", "mid", "high"])
    code = main([str(tmp_path / "train.csv"), "--target", "grade", "--test", str(tmp_path / "test.csv"),
                 "--ordinal", "--levels", "low,mid,high", "--method", "map", "--no-progress",
                 "--out", str(tmp_path / "out")])
    assert code == 0
    report = (tmp_path / "out" / "report.md").read_text()
    assert "OrderedProbit" in report and "ordered (low, mid, high)" in report
    assert int(report.split("test errors: ")[1].split(" /")[0]) <= 12  # chance: about 20 of 30
    rows = list(csv.DictReader(open(tmp_path / "out" / "predictions.csv")))
    assert len(rows) == 30 and abs(sum(float(rows[0][f"p_{c}"]) for c in ("low", "mid", "high")) - 1) < 2e-6  # 6 decimals each
    # strings without --levels, and a binary target, are clear errors
    assert main([str(tmp_path / "train.csv"), "--target", "grade", "--ordinal", "--no-progress",
                 "--out", str(tmp_path / "o2")]) == 2
    assert "--levels" in capsys.readouterr().err
    _ordinal_csv(tmp_path / "num.csv", 30, 2, ["1", "2", "10"])
    assert main([str(tmp_path / "num.csv"), "--target", "grade", "--ordinal", "--likelihood", "ordered-logit",
                 "--approximation", "laplace", "--method", "map", "--no-progress", "--out", str(tmp_path / "o3")]) == 0
    assert "ordered (1, 2, 10)" in (tmp_path / "o3" / "report.md").read_text()
    assert main(["--data", "crabs", "--ordinal", "--method", "map", "--no-progress", "--out", str(tmp_path / "o4")]) == 2
    assert "binary likelihood" in capsys.readouterr().err


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the lost KeyboardInterrupt
def test_a_lost_interrupt_stops_the_draws_through_the_samplers_callback(monkeypatch):
    """The fast sibling of ``test_cli_outputs``'s sampling run: ``_sample`` gives the sampler a
    callback that raises KeyboardInterrupt after the draw once SIGINT arrived, also when the
    handler's own KeyboardInterrupt was lost in a finalizer (where Python ignores exceptions).
    The sampler here is a stand-in with PyMC's contract: the callback after each draw, and on
    KeyboardInterrupt the draws made so far. Without the callback all 100 draws are made."""
    import os
    import signal
    import types

    import arviz as az
    import pymc as pm

    from pymc_gpc.cli import command
    from pymc_gpc.estimation import sampling

    class SendsSigint:
        def __del__(self):
            os.kill(os.getpid(), signal.SIGINT)  # the CLI's handler raises here, and it is lost

    def stand_in(draws, callback=None, **kwargs):
        made = 0
        try:
            for draw in range(draws):
                made += 1
                if made == 12:
                    SendsSigint()  # made and dropped at once: its finalizer runs now
                if callback is not None:
                    callback(trace=None, draw=None)
        except KeyboardInterrupt:
            pass
        return az.from_dict({"posterior": {"x": np.zeros((1, made))}})

    monkeypatch.setattr(sampling, "sample", stand_in)
    args = types.SimpleNamespace(draws=100, tune=0, chains=1, seed=0, no_progress=True, sampler="pymc")
    idata, interrupted = command._sample(args, model=pm.Model())
    assert interrupted and idata["posterior"].sizes["draw"] == 12
