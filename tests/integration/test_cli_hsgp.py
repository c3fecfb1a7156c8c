"""The HSGP prior from the command line (``--hsgp M,C``) and from ``ard_classifier(hsgp=(m, c))``:
runs on two columns of Pima and on an ordinal target, the dense prior's test log predictive
as the reference, and every input they cannot serve a clear error before any fitting."""

import csv

import numpy as np
import pytest

import pymc_gpc
from pymc_gpc.cli.command import main
from pymc_gpc.datasets import load

COLUMNS = ("glu", "bmi")


def _write(path, header, rows):
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        w.writerows(rows)


@pytest.fixture(scope="module")
def pima_two_columns(tmp_path_factory):
    """Pima's glucose and BMI columns (raw), train and test CSVs with Yes/No labels."""
    d = load("pima", standardise=False)
    cols = [d.feature_names.index(c) for c in COLUMNS]
    folder = tmp_path_factory.mktemp("pima2")
    for name, X, y in (("train", d.X_train, d.y_train), ("test", d.X_test, d.y_test)):
        _write(folder / f"{name}.csv", [*COLUMNS, "diabetic"],
               [[*x, "Yes" if v > 0 else "No"] for x, v in zip(X[:, cols], y)])
    return folder


def _dense_test_log_p():
    """The dense ARD model's MAP-II mean test log predictive on the same two (standardised) columns."""
    d = load("pima")
    cols = [d.feature_names.index(c) for c in COLUMNS]
    model, gp = pymc_gpc.ard_classifier(d.X_train[:, cols], d.y_train, inducing=None)
    p = gp.predict(d.X_test[:, cols], point=pymc_gpc.fit(model, method="map", progressbar=False))
    return float(np.mean(np.log(np.where(d.y_test > 0, p, 1.0 - p))))


def test_hsgp_map_on_two_pima_columns(pima_two_columns, tmp_path):
    """--hsgp 20,1.5 with MAP-II: the report names the prior, summary.csv has log_w and log_v0
    (no constant term), predictions.csv 332 probabilities, and the test log predictive is
    within 0.01 of the dense prior's (-0.480 against -0.482 when written)."""
    folder, out = pima_two_columns, tmp_path / "out"
    code = main([str(folder / "train.csv"), "--target", "diabetic", "--test", str(folder / "test.csv"),
                 "--hsgp", "20,1.5", "--method", "map", "--no-progress", "--out", str(out)])
    assert code == 0
    report = (out / "report.md").read_text()
    assert "HSGP prior: 20 basis functions per input column on a box 1.5 times" in report
    rows = list(csv.DictReader(open(out / "predictions.csv")))
    assert len(rows) == 332 and all(0.0 <= float(r["p_Yes"]) <= 1.0 for r in rows)
    summary = (out / "summary.csv").read_text()
    assert "log_w[glu]" in summary and "log_v0" in summary and "log_v1" not in summary
    log_p = float(report.split("mean test log predictive: ")[1].split()[0])
    assert log_p >= _dense_test_log_p() - 0.01
    assert (out / "relevance.png").exists() and (out / "history.png").exists()


def test_hsgp_ordinal_target(tmp_path):
    """--hsgp with --ordinal (ordered probit, free cutpoints): fits and predicts better than chance."""
    r = np.random.default_rng(0)
    for name, n in (("train", 60), ("test", 30)):
        X = r.normal(size=(n, 2))
        y = np.digitize(X[:, 0] + 0.3 * r.normal(size=n), [-0.5, 0.5])
        _write(tmp_path / f"{name}.csv", ["a", "b", "grade"], [[*x, k] for x, k in zip(X, y)])
    code = main([str(tmp_path / "train.csv"), "--target", "grade", "--test", str(tmp_path / "test.csv"),
                 "--ordinal", "--hsgp", "12", "--method", "map", "--no-progress", "--out", str(tmp_path / "out")])
    assert code == 0
    report = (tmp_path / "out" / "report.md").read_text()
    assert "HSGP prior: 12 basis functions per input column on a box 1.5 times" in report
    assert int(report.split("test errors: ")[1].split(" /")[0]) <= 12  # chance: about 20 of 30


@pytest.mark.parametrize("value, message", [
    ("abc", "is not M,C"), ("20,1.5,3", "is not M,C"), ("0,1.5", "M must be a positive integer"),
    ("20,0.9", "C a number above 1"), ("20,nan", "C a number above 1"),
])
def test_bad_hsgp_values_are_argument_errors(value, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--hsgp", value, "--method", "map"])
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_inputs_hsgp_cannot_serve_are_clear_errors(pima_two_columns, tmp_path, capsys):
    """Each a ValueError (exit status 2) naming the problem, with nothing written."""
    folder = pima_two_columns
    base = [str(folder / "train.csv"), "--target", "diabetic", "--hsgp", "10,1.5", "--method", "map",
            "--no-progress", "--out", str(tmp_path / "out")]
    r = np.random.default_rng(1)
    _write(tmp_path / "indicator.csv", ["x", "smoker", "y"],
           [[r.normal(), r.integers(2), r.integers(2)] for _ in range(30)])
    _write(tmp_path / "three.csv", ["x", "y"], [[r.normal(), "abc"[k % 3]] for k in range(30)])
    cases = [
        (["--data", "pima", "--hsgp", "10,1.5", "--method", "map", "--out", str(tmp_path / "out")],
         "--hsgp serves at most 3 input columns (M^d basis functions), the data have 7 (npreg, glu"),
        (base + ["--inducing", "50"], "either --hsgp (the basis-function prior) or --inducing"),
        (base + ["--approximation", "adf"], "--hsgp works with --approximation ep or laplace, not adf"),
        ([*base[:-5], "--method", "em-ep", "--out", str(tmp_path / "out")], "EM-EP has no bound for the HSGP prior"),
        ([str(tmp_path / "indicator.csv"), "--target", "y", "--hsgp", "10", "--method", "map",
          "--out", str(tmp_path / "out")], "input column 'smoker' takes 2 distinct values"),
        ([str(tmp_path / "three.csv"), "--target", "y", "--hsgp", "10", "--method", "map",
          "--out", str(tmp_path / "out")], "--hsgp serves a target with two classes"),
    ]
    for argv, message in cases:
        assert main(argv) == 2, argv
        assert message in capsys.readouterr().err, argv
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("kwargs, message", [
    (dict(hsgp=(10,)), "hsgp must be a pair"),
    (dict(hsgp=(2.5, 1.5)), "m must be a positive integer"),
    (dict(hsgp=(10, 1.0)), "c must be a number above 1"),
    (dict(hsgp=(10, 1.5), inducing=20), "either hsgp="),
    (dict(hsgp=(10, 1.5), linear=True), "linear=True adds a linear kernel"),
    (dict(hsgp=(10, 1.5), approximation="meanfield"), "HSGP"),
])
def test_ard_classifier_bad_hsgp_options(kwargs, message):
    X = np.random.default_rng(0).normal(size=(30, 2))
    y = np.where(X[:, 0] > 0, 1, -1)
    with pytest.raises(ValueError, match=message):
        pymc_gpc.ard_classifier(X, y, **kwargs)
    with pytest.raises(ValueError, match="at most 3 dimensions"):
        pymc_gpc.ard_classifier(np.hstack([X, X]), y, hsgp=(10, 1.5))


def test_ard_classifier_hsgp_model():
    """hsgp=(m, c): the HSGP structure with m per column and the box c times the half-range,
    an ExpQuad (or Matern52) kernel with log_w and log_v0 and no log_v1."""
    X = np.random.default_rng(0).uniform(-1.0, 3.0, size=(30, 2))
    y = np.where(X[:, 0] > 1.0, 1, -1)
    for kernel in ("se", "matern52"):
        model, gp = pymc_gpc.ard_classifier(X, y, hsgp=(7, 1.5), kernel=kernel)
        assert gp.structure.name == "hsgp" and gp.structure.basis.M == 49
        np.testing.assert_allclose(gp.structure.basis.L, 1.5 * (X.max(0) - X.min(0)) / 2)
        assert {v.name for v in model.free_RVs} == {"log_w", "log_v0"}
        assert np.isfinite(model.compile_logp()(model.initial_point()))
