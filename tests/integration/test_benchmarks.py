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

from ..reference.multiclass_reference import svgp_bound

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



def _bound_problem(n=80, m=10, seed=3, draws=256, variational=False, engine="jax"):
    """A three-class model (``multiclass_large.classifier``: per-class ARD with its log lengthscales
    shrunk, FITC with m inducing inputs) and its ``BoundObjective``, at a point with amplitudes of 10
    to 40 (far from Gaussian): (objective, x, y)."""
    import numpy as np

    from pymc_gpc.estimation.objective import ravel

    bench = _module("multiclass_large")
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    y = np.digitize(X[:, 0] + 0.5 * rng.normal(size=n), [-0.5, 0.5])
    model, _ = bench.classifier(X, y, bench.SHRUNK + "1", (-3.0, 3.0), approximation="laplace", inducing=X[:m])
    fun = bench.BoundObjective(model, y, draws, variational, verbose=False, engine=engine)
    point = {**fun.start, "log_w": np.log([[1.0, 0.5], [0.7, 0.3], [1.5, 0.2]]), "log_v0": np.log([20.0, 40.0, 10.0]),
             "log_v1": np.log([0.5, 0.3, 0.8])}
    return fun, ravel(point, fun.objective.targets).data, y


@pytest.mark.parametrize("variational", [False, True], ids=["laplace-fitc", "svgp-type"])
def test_the_bound_maps_gradient_equals_central_differences_with_the_mode_solved_again(variational):
    """``multiclass_large.bound_map`` (issue 61) climbs an evidence lower bound plus the model's log
    hyperprior with ``BoundObjective``'s gradient: ``_bound_terms``' one differentiable Newton step from
    the package solver's mode, pulled back to the model's variables by ``Objective.pullback``. Ground
    truth: central differences of the objective with the mode solved again at each displaced point;
    log Z_L against the solver's evidence (FITC's, or DTC's) and the hyperprior against the model's logp."""
    pytest.importorskip("jax")
    import numpy as np

    fun, x, _ = _bound_problem(variational=variational)
    value, grad = fun(x)
    step = fun.trace[-1]
    point = fun.point(x)
    assert step["mode_gap"] < 1e-6
    # the package's mode is the JAX Newton step's fixed point from the first call (with the JAX side in single
    # precision, as when x64 came on only inside the first trace, it was not, and each call took more steps)
    assert step["polish"] == 0
    assert step["log_z"] == pytest.approx(float(fun.solve(point).log_z), rel=1e-9)
    # the model's logp is the hyperprior plus its evidence potential, FITC Laplace's log Z
    model_logp = float(fun.model.compile_logp(jacobian=False)(point))
    assert -value - step["bound"] == pytest.approx(model_logp - float(fun.solve(point, dtc=False).log_z), abs=1e-6)
    assert step["left_out"] < -1.0  # amplitudes of 10 to 40: the expansion leaves out a visible part

    h = 1e-5
    fd = [(fun(x + h * e)[0] - fun(x - h * e)[0]) / (2 * h) for e in np.eye(len(x))]
    np.testing.assert_allclose(grad, fd, rtol=1e-5, atol=1e-5)


def test_the_package_engine_gives_the_jax_engines_svgp_type_bound_and_gradient():
    """``--bound-engine package`` (``approximations.variational_bound``, its own tests against the
    bound's definition and central differences) against JAX's reverse mode through ``_bound_terms``,
    whose DTC prior keeps Lambda at the jitter where the package's clips it to zero: the same
    objective and gradient to that jitter's effect."""
    pytest.importorskip("jax")
    import numpy as np

    fun, x, _ = _bound_problem(variational=True)
    package, _, _ = _bound_problem(variational=True, engine="package")
    value, grad = fun(x)
    value_p, grad_p = package(x)
    assert value_p == pytest.approx(value, rel=1e-6)
    np.testing.assert_allclose(grad_p, grad, rtol=1e-4, atol=1e-4 * np.max(np.abs(grad)))
    with pytest.raises(ValueError, match="engine"):
        _bound_problem(variational=False, engine="package")


def test_the_fit_engine_is_pymc_gpc_fit_with_method_elbo(monkeypatch):
    """``--bound-engine fit`` runs ``pymc_gpc.fit(model, method="elbo")`` (what a user runs) with the
    package's draws, and refuses other draws."""
    import numpy as np

    import pymc_gpc

    bench = _module("multiclass_large")
    calls = []
    real = pymc_gpc.fit

    def spy(model, **options):
        calls.append(options)
        return real(model, **options)

    monkeypatch.setattr(pymc_gpc, "fit", spy)
    rng = np.random.default_rng(4)
    X = rng.normal(size=(60, 2))
    y = np.digitize(X[:, 0] + 0.5 * rng.normal(size=60), [-0.5, 0.5])
    model, _ = bench.classifier(X, y, bench.SHRUNK + "1", (-3.0, 3.0), approximation="laplace", inducing=X[:6])
    fitted = bench._elbo_fit(model, 5, 256, True, None)
    assert calls and calls[0]["method"] == "elbo" and calls[0]["maxiter"] == 5 and fitted.method == "elbo"
    with pytest.raises(SystemExit, match="--bound-draws 256"):
        bench._elbo_fit(model, 5, 1024, True, None)


def test_the_svgp_type_bound_equals_its_definition_at_the_dtc_laplace_q_u():
    """``_bound_terms(variational=True)`` against the bound's definition, sum_i E_q(f_i)[log p(y_i | f_i)]
    - KL(q(u) || p(u)), formed densely from the model's kernel arrays: q(u) = N(m_u, S_u) DTC Laplace's
    (S_u = (K_uu^-1 + P^T W P)^-1, m_u = K_uu P^T a, P = K_fu K_uu^-1 block diagonal over the classes),
    q(f_i) = N(P_i m_u, P_i S_u P_i^T + diag(K - Q)_i) (``multiclass_reference.svgp_bound``), the expectation by
    400,000 plain Monte Carlo draws a row; the DTC mode from the JAX backend's solver."""
    pytest.importorskip("jax")
    import jax.numpy as jnp
    import numpy as np

    from pymc_gpc.backends.jax.multiclass import softmax_laplace_solve

    bench = _module("multiclass_large")
    fun, x, y = _bound_problem(n=12, m=4, seed=11, draws=4096, variational=True)
    (arrays, _), = fun.objective.kernel_inputs(fun.point(x))[0]
    Kuu, Kuf, k_diag = (np.asarray(a) for a in arrays)
    c = 3
    stack = bench.bound_stack(arrays, True)
    r = softmax_laplace_solve(stack, jnp.asarray(y))
    a = np.asarray(r["a"])
    f_hat = np.asarray(stack.matvec(r["a"]))
    _, (log_z, left_out, _) = bench._bound_terms(y, c, 4096, True)(arrays, jnp.asarray(f_hat))

    definition, se = svgp_bound(Kuu, Kuf, k_diag, y, a, size=400_000)
    assert float(log_z + left_out) == pytest.approx(definition, abs=4 * se + 0.01)
    assert float(left_out) < -1.0  # the widened q(f_i) is visible in the bound


def test_optimal_q_reaches_the_bounds_maximum_over_gaussians():
    """``multiclass_large.optimal_q`` (issue 61, ``--run optimal-q``): its plain-numpy bound at the DTC
    Laplace q(u) equals the package's ``softmax_dtc_bound`` (two estimators of one bound, each with 4,096
    draws a row); from there its steps raise the bound to a point where the mean's gradient vanishes, the
    precision is its own fixed point (I + sum_i P_i^T (-2 dE_i/dSigma_i) P_i), and moving the mean or
    scaling the precision either way lowers the bound."""
    import numpy as np

    from pymc_gpc.solvers import softmax_dtc_bound

    bench = _module("multiclass_large")
    fun, x, y = _bound_problem(n=40, m=6, seed=5, variational=True)
    (arrays, _), = fun.objective.kernel_inputs(fun.point(x))[0]
    arrays = [np.asarray(a, dtype=float) for a in arrays]
    draws = 4096
    q = bench.optimal_q(arrays, y, draws=draws, tol=1e-14, max_steps=200)
    package = softmax_dtc_bound(*arrays, y, draws=draws, with_grad=False).value
    assert q["bound_laplace"] == pytest.approx(package, abs=0.02)
    assert q["bound_optimal"] > q["bound_laplace"] + 0.1
    from pymc_gpc.likelihoods.multiclass import standard_draws
    from pymc_gpc.structures.multiclass_fitc import MulticlassFITCPrior

    V = np.stack(MulticlassFITCPrior(arrays[0], arrays[1], np.zeros_like(arrays[2])).V)
    c, m, _ = V.shape
    Z = standard_draws(c, draws)
    mu_z, A = q["optimal"]
    value, g_mu, S_bar = bench._q_bound(V, q["r"], y, Z, mu_z, A)
    assert value == pytest.approx(q["bound_optimal"], rel=1e-12)
    grad_mean = np.concatenate([V[k] @ g_mu[:, k] for k in range(c)]) - mu_z
    assert np.max(np.abs(grad_mean)) < 1e-3 * max(1.0, np.max(np.abs(mu_z)))
    fixed = bench._q_precision(V, -(S_bar + np.transpose(S_bar, (0, 2, 1))))
    np.testing.assert_allclose(fixed, A, rtol=0, atol=2e-3 * np.max(np.abs(A)))
    direction = np.random.default_rng(0).normal(size=mu_z.shape)
    for moved in ((mu_z + 0.05 * direction, A), (mu_z - 0.05 * direction, A), (mu_z, 1.05 * A), (mu_z, A / 1.05)):
        assert bench._q_bound(V, q["r"], y, Z, *moved)[0] < value


def test_optimal_q_summary_reports_the_rows_differences():
    """``multiclass_large._optimal_q_summary`` (the results file's line per set): the bound's gain, the test
    log p differences and the margins over SVGP's point, from made-up rows with known answers."""
    bench = _module("multiclass_large")

    def test(v):
        return {f"s = {s_}": {"mean_log_p": v + s_} for s_ in (0.0, 0.2, 1.0)}

    runs = [[{"bound_laplace": -100.0, "bound_optimal": -90.0, "test_laplace": test(-0.30), "test_optimal": test(-0.31)},
             {"bound_optimal": -300.0}, {"bound_optimal": -200.0}],
            [{"bound_laplace": -50.0, "bound_optimal": -20.0, "test_laplace": test(-0.40), "test_optimal": test(-0.37)},
             {"bound_optimal": -250.0}, {"bound_optimal": -120.0}]]
    line = bench._optimal_q_summary("storms", runs)
    assert "2 splits" in line and "by 10.0 to 30.0 nats" in line
    assert "integrate +0.0100 (range -0.0100 to +0.0300)" in line
    assert "above SVGP's by 210 to 230 nats with the k-means inducing inputs, 100 to 110 with SVGP's" in line
