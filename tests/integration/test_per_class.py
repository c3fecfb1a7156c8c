"""One kernel per class as the easy path: ``kernels.per_class``, ``kernels.ard_kernels``,
``ard_classifier`` with several classes, and the CLI on a multi-class target."""

import numpy as np
import pymc as pm
import pytensor.tensor as pt
import pytest

import pymc_gpc
from pymc_gpc import likelihoods as L
from pymc_gpc.kernels import MixedARD, ard_kernels, per_class

RNG = np.random.default_rng(43)
X3 = RNG.normal(size=(24, 2))
Y3 = np.array(["a", "b", "c"])[np.argmax(X3 @ RNG.normal(size=(2, 3)) + 0.3 * RNG.normal(size=(24, 3)), axis=1)]


def _graph_inputs(cov):
    """The named random variables a kernel's matrix depends on."""
    from pytensor.graph.traversal import ancestors

    return {v.name for v in ancestors([cov(X3)]) if v.name}


def test_per_class_gives_one_kernel_per_row_of_the_class_variables():
    with pm.Model(coords={"class": ["a", "b", "c"], "feature": ["x0", "x1"]}) as model:
        log_ls = pm.Normal("log_ls", 0, 1, dims=("class", "feature"))
        log_amp = pm.Normal("log_amp", 0, 3, dims="class")
        covs = per_class(lambda ls, amp: pt.exp(amp) * pm.gp.cov.ExpQuad(2, ls=pt.exp(ls)), log_ls, log_amp)
    assert len(covs) == 3 and all(isinstance(k, pm.gp.cov.Covariance) for k in covs)
    point = {"log_ls": np.log([[0.5, 1.0], [1.0, 2.0], [3.0, 0.7]]), "log_amp": np.log([0.5, 1.0, 2.0])}
    for k, cov in enumerate(covs):
        assert _graph_inputs(cov) >= {"log_ls", "log_amp"}
        K = cov(X3).eval({model["log_ls"]: point["log_ls"], model["log_amp"]: point["log_amp"]})
        ref = np.exp(point["log_amp"][k]) * pm.gp.cov.ExpQuad(2, ls=np.exp(point["log_ls"][k]))(X3).eval()
        np.testing.assert_allclose(K, ref, rtol=1e-12)
    with pytest.raises(ValueError, match="leading \\(class\\) lengths differ"):
        per_class(lambda a, b: None, np.zeros(3), np.zeros(4))
    with pytest.raises(ValueError, match="scalar"):
        per_class(lambda a: None, 1.0)


def test_ard_kernels_creates_class_dimensioned_variables():
    with pm.Model() as model:
        covs = ard_kernels(2, ["a", "b", "c"])
    assert len(covs) == 3 and all(isinstance(k, MixedARD) for k in covs)
    assert model.named_vars_to_dims == {"log_w": ("class", "feature"), "log_v0": ("class",), "log_v1": ("class",)}
    assert model.coords["class"] == ("a", "b", "c")
    ip = model.initial_point()
    assert ip["log_w"].shape == (3, 2) and ip["log_v0"].shape == (3,) and ip["log_v1"].shape == (3,)
    with pm.Model() as shared_model:
        cov = ard_kernels(2, 3, shared=True)
    assert isinstance(cov, MixedARD)
    assert shared_model.initial_point()["log_w"].shape == (2,)


@pytest.mark.parametrize("cls, lik", [(pymc_gpc.MarginalLaplace, L.Softmax), (pymc_gpc.MarginalEP, L.MultinomialProbit)])
def test_per_class_evidence_equals_the_hand_built_list_of_kernels(cls, lik):
    """ard_classifier's per-class model and c kernels written out by hand, at one point."""
    model, gp = pymc_gpc.ard_classifier(X3, Y3, approximation="laplace" if lik is L.Softmax else "ep")
    assert isinstance(gp.likelihood, lik)
    rng = np.random.default_rng(1)
    point = {"log_w": rng.normal(-1.0, 0.5, size=(3, 2)), "log_v0": rng.normal(0.0, 0.5, size=3),
             "log_v1": rng.normal(-2.0, 0.5, size=3)}
    with pm.Model() as by_hand:
        log_w = pm.Normal("log_w", -3, 3, shape=(3, 2))
        log_v0 = pm.Normal("log_v0", -3, 3, shape=3)
        log_v1 = pm.Normal("log_v1", -3, 3, shape=3)
        covs = [pt.exp(log_v0[k]) * pm.gp.cov.ExpQuad(2, ls=pt.exp(-0.5 * log_w[k])) + pm.gp.cov.Constant(pt.exp(log_v1[k]))
                for k in range(3)]
        cls(cov_func=covs, likelihood=lik()).marginal_likelihood("y", X=X3, y=Y3)
    ours, theirs = (m.compile_fn(m.replace_rvs_by_values([m["y"]])[0], point_fn=True)(point)  # log q(y | theta)
                    for m in (model, by_hand))
    assert np.isfinite(ours) and ours < 0
    np.testing.assert_allclose(ours, theirs, rtol=1e-6)
    # and the whole log density (the priors are the same N(-3, 3^2))
    np.testing.assert_allclose(model.compile_logp()(point), by_hand.compile_logp()(point), rtol=1e-6)


def test_ard_classifier_three_classes_builds_per_class_variables():
    model, gp = pymc_gpc.ard_classifier(X3, Y3, approximation="laplace", feature_names=["u", "v"])
    assert model.named_vars_to_dims["log_w"] == ("class", "feature")
    assert model.coords["class"] == ("a", "b", "c") and list(gp.classes) == ["a", "b", "c"]
    assert {k: v.shape for k, v in model.initial_point().items()} == {"log_w": (3, 2), "log_v0": (3,), "log_v1": (3,)}
    assert np.all(model.initial_point()["log_v0"] == 0.0)  # as the binary model's (LOG_V0_START)
    shared, _ = pymc_gpc.ard_classifier(X3, Y3, approximation="ep", per_class=False)
    assert {k: v.shape for k, v in shared.initial_point().items()} == {"log_w": (2,), "log_v0": (), "log_v1": ()}


def test_cli_on_a_multiclass_target(tmp_path):
    from pymc_gpc.cli.command import main

    header = "u,v,kind\n"
    rows = [f"{x[0]:.6f},{x[1]:.6f},{lab}\n" for x, lab in zip(X3, Y3)]
    (tmp_path / "train.csv").write_text(header + "".join(rows[:18]))
    (tmp_path / "test.csv").write_text(header + "".join(rows[18:]))
    code = main([str(tmp_path / "train.csv"), "--target", "kind", "--test", str(tmp_path / "test.csv"),
                 "--method", "map", "--approximation", "laplace", "--no-progress", "--out", str(tmp_path / "out")])
    assert code == 0
    report = (tmp_path / "out" / "report.md").read_text()
    assert "classes: 3, one ARD kernel per class" in report and "Confusion matrix" in report
    assert "| a |" in report and (tmp_path / "out" / "relevance.png").exists()
