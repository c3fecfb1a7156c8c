"""The trace's values computed in the chains' own processes (``estimation.chain_trace``): with
chains in parallel, ``pm.sample``'s main process records what the chains send and solves
nothing; what they send is the model's value at each draw."""

import numpy as np
import pymc as pm
import pytest

import pymc_gpc
from pymc_gpc.estimation import chain_trace
from pymc_gpc.ops.marginal import ApproxMarginalOp

rng = np.random.default_rng(5)
X = rng.normal(size=(40, 2))
Y = (X[:, 0] + 0.8 * np.sin(2 * X[:, 1]) + 0.5 * rng.normal(size=40) > 0).astype(int)


def test_parallel_chains_send_the_values_and_the_main_process_solves_nothing(monkeypatch):
    """Two chains in two processes: ``ChainTrace.record`` (the main process) makes no evidence
    solve, where PyMC's own trace makes one a draw; the recorded LOO terms, diagnostics and
    hyperparameters are the model's at each draw (recomputed here from a cold start, to the
    solver's tolerance), and ``az.loo`` reads them."""
    model, _ = pymc_gpc.ard_classifier(X, Y, inducing=8)  # FITC: the Op's Python path
    solves = []
    evaluate, record = ApproxMarginalOp.evaluate, chain_trace.ChainTrace.record

    def counted(self, *args):
        solves.append(1)
        return evaluate(self, *args)

    def recording(self, *args, **kwargs):
        before = len(solves)
        record(self, *args, **kwargs)
        assert len(solves) == before, "the main process solved the evidence to record a draw"

    monkeypatch.setattr(ApproxMarginalOp, "evaluate", counted)
    monkeypatch.setattr(chain_trace.ChainTrace, "record", recording)
    with model:
        idata = pymc_gpc.sample(draws=15, tune=15, chains=2, cores=2, random_seed=4, progressbar=False,
                                compute_convergence_checks=False)
    post = idata["posterior"]
    assert post.sizes["chain"] == 2 and post.sizes["draw"] == 15
    assert "y_loo" not in post and np.all(idata["sample_stats"]["y_status"].values == 0)
    loo = idata["log_likelihood"]["y"].values
    assert loo.shape == (2, 15, 40) and np.all(np.isfinite(loo)) and np.all(loo < 0)
    assert np.ptp(post["log_w"].values) > 0  # the chains moved
    # ground truth: the LOO terms at four draws (two a chain), solved afresh in this process
    free = [rv.name for rv in model.free_RVs]
    subset = post.to_dataset()[free].isel(draw=[0, 14])
    fresh = pm.compute_deterministics(subset, var_names=["y_loo"], model=model, progressbar=False)["y_loo"]
    # EP's sampling tolerance (1e-2 on the sites) moves a term by up to 0.8 % (measured: mean
    # absolute difference 2e-4); small terms by more, relatively (two fresh-clone runs, with
    # V = L_uu^-1 K_uf in single precision at that tolerance: -5.5e-4 against -5.2e-4, 6 %;
    # the largest absolute move beyond rtol was 3.4e-4, on -0.0139), hence the absolute part
    np.testing.assert_allclose(loo[:, [0, 14]], fresh.values, rtol=2e-2, atol=5e-4)
    assert np.mean(np.abs(loo[:, [0, 14]] - fresh.values)) < 2e-3


def test_a_trace_of_chosen_variables():
    """``var_names``: the chains send those variables alone. With every free variable the LOO
    terms are computed at the draws afterwards; without one there are none, with a warning
    (not an error that loses the draws); a name the model lacks is a ValueError."""
    model, _ = pymc_gpc.ard_classifier(X, Y, inducing=8)
    free = [rv.name for rv in model.free_RVs]
    options = dict(draws=5, tune=5, chains=1, cores=1, random_seed=1, progressbar=False,
                   compute_convergence_checks=False)
    with model:
        idata = pymc_gpc.sample(var_names=free, **options)
        assert sorted(idata["posterior"].data_vars) == sorted(free)
        assert idata["log_likelihood"]["y"].shape == (1, 5, 40)
        with pytest.warns(UserWarning, match="lacks.*log_v0.*no log_likelihood for 'y'"):
            idata = pymc_gpc.sample(var_names=["log_w"], **options)
        assert list(idata["posterior"].data_vars) == ["log_w"] and "log_likelihood" not in idata.children
        with pytest.raises(ValueError, match="does not have.*'nope'"):
            pymc_gpc.sample(var_names=["log_w", "nope"], **options)


def test_the_draw_is_answered_from_the_light_results_when_no_full_result_is_kept(monkeypatch):
    """At 50,000 rows (FITC, m = 200) the recent full results (with the m x n cotangents) hold
    no point, and the draw is any point of the trajectory: every draw is answered from the
    light results (``LightLookup``: no solve, and not even the trace function, which would
    compute the kernel matrices first), here with the full results cut to none; with the
    Op's full copy in the trace function most draws were solved again."""
    from pymc_gpc.ops.warm_start import RecentResults

    monkeypatch.setattr(RecentResults, "MEMORY", 1.0)  # no full result kept, at any size
    model, _ = pymc_gpc.ard_classifier(X, Y, inducing=8)
    solves, inside, calls = [], [], []
    evaluate, record = ApproxMarginalOp.evaluate, chain_trace.RecordingNUTS.record

    def counted(self, *args):
        solves.append(bool(inside))
        return evaluate(self, *args)

    def recording(self, *args):  # marks the solves made by the trace function
        record(self, *args)
        fn = self._trace_fn

        def traced(*values):
            inside.append(1)
            calls.append(1)
            try:
                return fn(*values)
            finally:
                inside.pop()

        self._trace_fn = traced

    monkeypatch.setattr(ApproxMarginalOp, "evaluate", counted)
    monkeypatch.setattr(chain_trace.RecordingNUTS, "record", recording)
    runs = {}
    for light in (True, False):
        if not light:
            monkeypatch.setattr(chain_trace, "light_evidence", list)
        solves.clear()
        calls.clear()
        with model:
            idata = pymc_gpc.sample(draws=15, tune=15, chains=1, cores=1, random_seed=2, progressbar=False,
                                    compute_convergence_checks=False)
        runs[light] = (sum(solves), idata["log_likelihood"]["y"].values, len(calls))
    assert runs[True][0] == 0 and runs[False][0] >= 10  # solves by the trace function (measured: 0 and 23 of 30 draws)
    assert runs[True][2] == 0 and runs[False][2] == 30  # the trace function's calls: the lookup answered every draw
    assert np.all(np.isfinite(runs[True][1]))


def test_light_results_are_kept_by_point_without_the_cotangents():
    from pymc_gpc.ops.warm_start import RecentResults

    recent = RecentResults()
    K, params, y = np.ones((2, 3)), np.zeros(1), np.array([1.0, -1.0, 1.0])
    outputs = (np.array(-1.5), np.full((2, 3), 7.0), np.zeros(1), np.array([-0.1, -0.2, -0.3]), np.array(3), np.array(0))
    recent.add(K, params, y, np.array([0.5]), outputs, cotangents=(1,))
    got = recent.get_light(params, y, np.array([0.5]), loo_output=3)
    assert got[1] is None and float(got[0]) == -1.5 and np.array_equal(got[3], outputs[3])
    got[3][:] = 0.0  # a copy
    assert np.array_equal(recent.get_light(params, y, np.array([0.5]), 3)[3], outputs[3])
    assert recent.get_light(params, y, np.array([0.6]), 3) is None  # another point
    assert recent.get_light(params, y, np.zeros(0), 3) is None  # no hyperparameter input: nothing kept
    size = int(RecentResults.LIGHT_MEMORY // sum(8 * np.size(v) + 64 for i, v in enumerate(outputs) if i != 1))
    for h in range(min(size, RecentResults.LIGHT_SIZE) + 1):
        recent.add(K, params, y, np.array([float(h)]), outputs, cotangents=(1,))
    assert len(recent.light) == RecentResults.LIGHT_SIZE and recent.get_light(params, y, np.array([0.0]), 3) is None
