"""A new user's path (issue 20): predict after the model block, the README's snippets as
written, batched predictions over draws, runaway type-II hyperparameters, CLI labels."""

import re
import textwrap
import tomllib
import warnings
from pathlib import Path

import arviz as az
import numpy as np
import pymc as pm
import pytensor
import pytensor.scalar
import pytensor.tensor as pt
import pytest
from scipy import stats

import pymc_gpc
from pymc_gpc import likelihoods as L
from pymc_gpc import progress
from pymc_gpc.gp import prediction
from pymc_gpc.datasets import load

from ..conftest import random_problem
from ..conftest import se_kernel as rbf

ROOT = Path(__file__).resolve().parents[2]


def small_model(X, y, **options):
    with pm.Model() as model:
        log_ls = pm.Normal("log_ls", 0, 1, shape=X.shape[1])
        log_amp = pm.Normal("log_amp", 0, 1)
        cov = pt.exp(log_amp) * pm.gp.cov.ExpQuad(X.shape[1], ls=pt.exp(log_ls))
        gp = pymc_gpc.MarginalEP(cov_func=cov, likelihood=L.Probit(), **options)
        gp.marginal_likelihood("y", X=X, y=y)
    return model, gp


def draws_idata(rng, n_chains=2, n_draws=15):
    """A posterior of nearby hyperparameter draws (a random walk per chain), as sampling gives."""
    steps = rng.normal(scale=0.08, size=(n_chains, n_draws, 3))
    walk = np.cumsum(steps, axis=1) + np.array([0.1, -0.2, 0.3])
    return az.from_dict({"posterior": {"log_ls": walk[..., :2], "log_amp": walk[..., 2]}})


# -- 1. the GP remembers its model ---------------------------------------------------


def test_predict_and_conditional_work_after_the_model_block():
    rng = np.random.default_rng(0)
    X, y = random_problem(rng, 25)
    model, gp = small_model(X, y)
    point = {"log_ls": np.array([0.1, 0.3]), "log_amp": np.array(0.2)}
    p = gp.predict(X[:4], point=point)  # outside `with model`: was "No model on context stack"
    np.testing.assert_allclose(p, gp.predict(X[:4], point=point, model=model), atol=1e-12)
    idata = draws_idata(rng, n_chains=1, n_draws=3)
    assert gp.predict(X[:4], idata=idata, progressbar=False).shape == (4,)
    f_star = gp.conditional("f_star", X[:3])
    assert model["f_star"] is f_star
    with pm.Model() as other:  # model= still overrides; the other model lacks the variables
        pm.Normal("z")
    with pytest.raises(ValueError, match=r"depends on \[.*'log_ls'.*\].*not variables of the model"):
        gp.predict(X[:4], point={"z": 0.0}, model=other)


def _python_blocks(text):
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def _docstring_example(module):
    lines = [ln.strip()[4:] for ln in module.__doc__.splitlines() if ln.strip().startswith((">>> ", "... "))]
    return "\n".join(lines)


@pytest.fixture
def cheap_sampling(monkeypatch):
    """pymc_gpc.sample / pm.sample with a few draws, so the README's code runs in seconds."""
    small = dict(draws=8, tune=8, chains=1, random_seed=1, progressbar=False, compute_convergence_checks=False)
    real_gpc, real_pm = pymc_gpc.sample, pm.sample
    monkeypatch.setattr(pymc_gpc, "sample", lambda *a, **k: real_gpc(*a, **{**small, **k}))
    monkeypatch.setattr(pm, "sample", lambda *a, **k: real_pm(*a, **{**small, "nuts_sampler": "pymc", **k}))


def test_every_python_snippet_in_the_readme_runs_as_written(cheap_sampling):
    """The README's fenced python blocks, in order, in one namespace with small data for
    the placeholders X, y, Xnew, d; and the gp module's docstring example."""
    blocks = _python_blocks((ROOT / "README.md").read_text())
    assert len(blocks) >= 2
    rng = np.random.default_rng(1)
    X, y = random_problem(rng, 120)  # the FITC snippet places 100 inducing inputs
    labels = np.digitize(X[:, 0], [-0.5, 0.5])  # three classes for the multi-class snippets
    data = {"X": X, "y": y, "labels": labels, "Xnew": X[:5], "d": X.shape[1]}
    namespace = dict(data)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # short runs: too few draws for PyMC's diagnostics
        for block in blocks:
            namespace.pop("p", None)
            exec(compile(textwrap.dedent(block), "README.md", "exec"), namespace)
            if "p" in namespace:  # binary (m,) or multi-class (5, c) probabilities
                p = namespace["p"]
                assert p.ndim in (1, 2) and np.all((p >= 0) & (p <= 1)), block
                assert p.ndim == 1 or p.shape[0] == 5, block
                assert p.ndim == 1 or np.allclose(p.sum(axis=1), 1.0)
        example = {**data, "pm": pm, "pt": pt, "pymc_gpc": pymc_gpc}  # two classes, then three
        exec(compile(_docstring_example(pymc_gpc.gp.marginal), "pymc_gpc.gp.marginal", "exec"), example)
        assert example["p"].shape == (5,) and example["p_classes"].shape == (5, 3)


# -- 2. batched predictions ---------------------------------------------------------


@pytest.mark.parametrize("options, atol, atol_p", [({}, 1e-3, 1e-4), ({"tol": 1e-10}, 1e-8, 1e-8)])
def test_batched_predictions_equal_independent_per_draw_solves(options, atol, atol_p):
    """Ground truth: for every draw, a cold EP at 1e-10 on a NumPy kernel, the latent
    predictive and Phi(m / sqrt(1 + v)), averaged (Barber & Williams eq. 9). At the
    prediction default (EP to a site change of 1e-3) the latent moments within 1e-3 and the
    probabilities within 1e-4; at 1e-10, both to 1e-8."""
    rng = np.random.default_rng(2)
    X, y = random_problem(rng, 40)
    Xs = rng.normal(size=(7, 2))
    model, gp = small_model(X, y, **options)
    idata = draws_idata(rng)
    p, means, variances = gp.predict(Xs, idata=idata, return_latent=True, progressbar=False)
    post = idata["posterior"]
    ls = np.exp(np.asarray(post["log_ls"]).reshape(-1, 2))
    amp = np.exp(np.asarray(post["log_amp"]).reshape(-1))
    assert means.shape == variances.shape == (len(amp), 7)
    probs = []
    for s in range(len(amp)):
        res = pymc_gpc.ep(rbf(X, X, ls[s], amp[s]) + 1e-6 * np.eye(40), y, L.Probit(), tol=1e-10)
        m, v = res.predict_latent(rbf(X, Xs, ls[s], amp[s]), np.full(7, amp[s]))
        np.testing.assert_allclose(means[s], m, atol=atol)
        np.testing.assert_allclose(variances[s], v, atol=atol)
        probs.append(stats.norm.cdf(m / np.sqrt(1 + v)))
    np.testing.assert_allclose(p, np.mean(probs, axis=0), atol=atol_p)


def test_batched_predictions_warm_start_each_draw_from_the_previous(monkeypatch):
    from pymc_gpc.approximations.registry import APPROXIMATIONS

    calls = []
    real = prediction.solve_with_retries

    def spy(approximation, K, y, lik, params, state, options, *rest):
        calls.append((state, options))
        return real(approximation, K, y, lik, params, state, options, *rest)

    monkeypatch.setattr(prediction, "solve_with_retries", spy)
    rng = np.random.default_rng(3)
    X, y = random_problem(rng, 30)
    _, gp = small_model(X, y)
    gp.predict(X[:3], idata=draws_idata(rng, n_chains=1, n_draws=6), progressbar=False)
    assert len(calls) == 6 and calls[0][0] is None
    assert all(state is not None for state, _ in calls[1:])
    assert all(opts["tol"] == APPROXIMATIONS["ep"].prediction_defaults["tol"] and not opts["with_grad"]
               for _, opts in calls)


def test_predictions_show_pymc_progress_bar_over_draws(monkeypatch):
    shown = []
    real = progress.create_simple_progress
    monkeypatch.setattr(progress, "create_simple_progress", lambda flag: shown.append(flag) or real(False))
    rng = np.random.default_rng(4)
    X, y = random_problem(rng, 20)
    _, gp = small_model(X, y)
    gp.predict(X[:3], idata=draws_idata(rng, n_chains=1, n_draws=3))
    gp.predict(X[:3], idata=draws_idata(rng, n_chains=1, n_draws=3), progressbar=False)
    gp.predict(X[:3], point={"log_ls": np.zeros(2), "log_amp": 0.0})
    assert shown == [True, False, False]


# -- 3. runaway type-II hyperparameters ------------------------------------------------


def separable_model():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 2))
    y = np.where(X[:, 0] > 0, 1, -1)
    return small_model(X, y)[0]


def test_type2_on_separable_data_warns_of_the_runaway_amplitude():
    model = separable_model()
    with pytest.warns(pymc_gpc.RunawayHyperparameterWarning, match=r"log_amp.*method='map'"):
        result = pymc_gpc.fit(model, method="type2", progressbar=False)
    assert result.runaway == ("log_amp",) and not result.converged
    assert result.point["log_amp"] > 10  # the evidence rises towards its limit as the amplitude grows
    tree = result.to_inference_data()
    assert tree["fit_history"].attrs["runaway"] == "log_amp" and tree["fit_history"].attrs["converged"] == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error", pymc_gpc.RunawayHyperparameterWarning)
        result = pymc_gpc.fit(model, method="map", progressbar=False)  # the prior keeps it finite
    assert result.runaway == () and result.converged and abs(result.point["log_amp"]) < 5


@pytest.mark.parametrize("name, expected", [("crabs", ("log_v0",)), ("pima", ())])
def test_type2_runaway_on_the_bundled_data(name, expected):
    """Crabs: log v0 runs out (to about 375 with L-BFGS-B's 30 pairs, the evidence still rising
    by 1e-11 a step: ``_runaway`` must measure the overflowing kernel's change); Pima's type-II optimum is
    well-posed (irrelevant inputs' inverse lengthscales go to zero, leaving K unchanged)."""
    data = load(name)
    model, _ = pymc_gpc.ard_classifier(data.X_train, data.y_train)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = pymc_gpc.fit(model, method="type2", progressbar=False)
    runaway = [w for w in caught if issubclass(w.category, pymc_gpc.RunawayHyperparameterWarning)]
    assert result.runaway == expected and len(runaway) == (1 if expected else 0)
    if expected:
        assert result.point["log_v0"] > 20 and "log_v0" in str(runaway[0].message)
    else:
        assert result.converged


# -- 5. CLI labels and packaging -------------------------------------------------------


def test_cli_rejects_a_test_class_that_is_not_in_the_training_file(tmp_path, capsys):
    from pymc_gpc.cli.command import main

    rng = np.random.default_rng(5)
    X = rng.normal(size=(30, 2))
    (tmp_path / "train.csv").write_text("a,b,label\n" + "".join(
        f"{x[0]},{x[1]},{'yes' if x[0] > 0 else 'no'}\n" for x in X))
    (tmp_path / "test.csv").write_text("a,b,label\n0.1,0.2,yes\n0.3,0.1,maybe\n-1,0,no\n")
    code = main([str(tmp_path / "train.csv"), "--target", "label", "--test", str(tmp_path / "test.csv"),
                 "--method", "map", "--no-progress", "--out", str(tmp_path / "out")])
    assert code == 2
    assert "['maybe']" in capsys.readouterr().err


def test_pyproject_license_is_an_spdx_string():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["license"] == "Apache-2.0"
    requires = project["build-system"]["requires"]
    assert any(r.replace(" ", "").startswith("setuptools>=") and int(r.split(">=")[1].split(".")[0]) >= 77
               for r in requires)  # PEP 639 license strings need setuptools >= 77


# -- 4. first-fit compilation ---------------------------------------------------------


def test_fit_and_predict_compile_their_graphs_without_numba():
    """numba compiled a new model's kernel and pullback graphs for 8-12 s at their first
    call; FAST_COMPILE takes a fraction of a second (measured by benchmarks/first_fit.py, a
    one-off since deleted: ``git show a5b833e:benchmarks/first_fit.py``)."""
    from pymc_gpc.estimation import objective

    rng = np.random.default_rng(6)
    X, y = random_problem(rng, 15)
    model, gp = small_model(X, y)
    objective = objective.objective_for(model, objective.other_terms(model, include_priors=False), model.continuous_value_vars)
    from pymc_gpc.gp.prediction import POINT_KERNEL_MODE

    fn, _ = gp._compile_kernels(model)
    fn_point, _ = gp._compile_kernels(model, POINT_KERNEL_MODE)
    for f in (objective.forward, objective.backward, fn, fn_point):
        assert "numba" not in type(f.maker.linker).__name__.lower()
        # the kernels' clipped squared distances run as NumPy ufuncs (python_vm), not as
        # the Python loop of an elementwise Clip
        clips = [n for n in f.maker.fgraph.apply_nodes
                 if isinstance(getattr(n.op, "scalar_op", None), pytensor.scalar.Clip)]
        assert not clips


def test_python_vm_clip_rewrite_keeps_values_and_gradients():
    """clip -> minimum(maximum) in PYTHON_VM_MODE: the same values and gradients as the
    plain Clip (FAST_COMPILE), below, inside and above the bounds and exactly at them."""
    from pymc_gpc.backends.python_vm import PYTHON_VM_MODE

    x = pt.dvector("x")
    lo, hi = pt.dscalar("lo"), pt.dscalar("hi")
    w = np.array([0.3, -1.2, 2.0, 0.7, -0.4, 1.1, 0.9])
    out = pt.clip(x**2 - 1.0, lo, hi)
    cost = (w * out).sum()
    grads = pytensor.grad(cost, [x, lo, hi])
    args = [np.array([-2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 1.5]), 0.0, 1.25]  # ties at x^2 - 1 = 0
    want = pytensor.function([x, lo, hi], [out, *grads], mode="FAST_COMPILE")(*args)
    f = pytensor.function([x, lo, hi], [out, *grads], mode=PYTHON_VM_MODE)
    assert not [n for n in f.maker.fgraph.apply_nodes
                if isinstance(getattr(n.op, "scalar_op", None), pytensor.scalar.Clip)]
    for got, ref in zip(f(*args), want):
        np.testing.assert_array_equal(got, ref)
    # the stationary kernels' own clip, at zero distance (K's diagonal) and with an inf bound
    X = pt.dmatrix("X")
    ls = pt.dvector("ls")
    K = pm.gp.cov.ExpQuad(2, ls=ls)(X)
    g = pytensor.grad((K * np.arange(16.0).reshape(4, 4)).sum(), ls)
    Xv = np.array([[0.0, 1.0], [0.5, -1.0], [0.0, 1.0], [2.0, 0.3]])  # a repeated row
    ref = pytensor.function([X, ls], [K, g], mode="FAST_COMPILE")(Xv, [0.7, 1.3])
    got = pytensor.function([X, ls], [K, g], mode=PYTHON_VM_MODE)(Xv, [0.7, 1.3])
    np.testing.assert_allclose(got[0], ref[0], rtol=1e-15, atol=0)
    np.testing.assert_allclose(got[1], ref[1], rtol=1e-13, atol=1e-15)


def test_python_vm_forward_mode_merges_and_keeps_values():
    """PYTHON_VM_FORWARD_MODE (the kernels of fit and predict): the merge and clip rewrites
    only. The kernels equal FAST_COMPILE's, a subexpression built twice is computed once,
    and no Clip is left."""
    from pymc_gpc.backends.python_vm import PYTHON_VM_FORWARD_MODE

    X = pt.dmatrix("X")
    ls = pt.dvector("ls")
    Xv = np.array([[0.0, 1.0], [0.5, -1.0], [0.0, 1.0], [2.0, 0.3]])
    # two classes' kernels built separately from the same inputs, as a user's list of covariances is
    K1, K2 = (pm.gp.cov.ExpQuad(2, ls=ls)(X) for _ in range(2))
    f = pytensor.function([X, ls], [K1, 2.0 * K2], mode=PYTHON_VM_FORWARD_MODE)
    nodes = f.maker.fgraph.apply_nodes
    assert not [n for n in nodes if isinstance(getattr(n.op, "scalar_op", None), pytensor.scalar.Clip)]
    assert sum(isinstance(getattr(n.op, "scalar_op", None), pytensor.scalar.Exp) for n in nodes) == 1
    ref = pytensor.function([X, ls], [K1, 2.0 * K2], mode="FAST_COMPILE")(Xv, [0.7, 1.3])
    for got, want in zip(f(Xv, [0.7, 1.3]), ref):
        np.testing.assert_allclose(got, want, rtol=1e-15, atol=0)
