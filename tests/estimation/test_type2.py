"""``estimation.type2.maximise``: the stall rule (a run ends once the objective has risen by
less than ``STALL_TOL`` times its size over the last ``STALL_WINDOW`` L-BFGS-B
iterations), no point evaluated twice in a row, and the runaway check (``_runaway``,
``_scaled_change``) at amplitudes whose kernel overflows."""

import numpy as np
import pymc as pm
import pytensor.tensor as pt
import pytest

import pymc_gpc
from pymc_gpc.estimation import objective as OBJ
from pymc_gpc.estimation import type2
from pymc_gpc.likelihoods import Logistic


def _feed(values, ftol=1e-9):
    """The iteration after which ``_Stall`` stops on the objective sequence ``values`` (None: never)."""
    stall = type2._Stall(ftol)
    for k, value in enumerate(values, start=1):
        try:
            stall.check(value)
        except StopIteration:
            assert stall.stopped
            return k
    assert not stall.stopped
    return None


def test_stall_stops_when_the_window_gains_less_than_the_tolerance():
    w, tol, size = type2.STALL_WINDOW, type2.STALL_TOL, 5000.0
    rising = -size + np.arange(3 * w) * (1.01 * tol * size / w)  # gains just above the tolerance: never stops
    assert _feed(rising) is None
    creeping = -size + np.arange(3 * w) * (0.99 * tol * size / w)  # just below: stops once a whole window is seen
    assert _feed(creeping) == w + 1
    # the tolerance is relative: the same creep on an objective 100 times smaller goes on
    assert _feed(-size / 100 + np.arange(3 * w) * (0.99 * tol * size / w)) is None
    # a fast start then a plateau: stops when the window no longer reaches back to the climb
    climb_then_flat = np.concatenate([np.linspace(-50.0, -1.0, 5), np.full(2 * w, -1.0)])
    assert _feed(climb_then_flat) == 5 + w


def test_a_tighter_tol_tightens_the_stall_rule():
    """At the default ftol the rule is STALL_TOL; a user's tighter tol (here 1e-12) lowers it
    to STALL_RATIO * tol, so a creep that the default would stop goes on; a looser tol
    leaves it at STALL_TOL (L-BFGS-B's own ftol test is the looser one then)."""
    w, size = type2.STALL_WINDOW, 5000.0
    assert type2._Stall(1e-9).tol == type2.STALL_TOL
    assert type2._Stall(1e-12).tol == pytest.approx(type2.STALL_RATIO * 1e-12)
    assert type2._Stall(1e-4).tol == type2.STALL_TOL
    creeping = -size + np.arange(3 * w) * (0.5 * type2.STALL_TOL * size / w)
    assert _feed(creeping) == w + 1
    assert _feed(creeping, ftol=1e-12) is None


@pytest.fixture(scope="module")
def laplace_model():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(30, 2))
    y = np.where(X[:, 0] - 0.5 * X[:, 1] + 0.5 * rng.normal(size=30) > 0, 1.0, -1.0)
    with pm.Model() as model:
        log_ls = pm.Normal("log_ls", 0.0, 1.0, shape=2)
        log_amp = pm.Normal("log_amp", 0.0, 1.0)
        cov = pt.exp(log_amp) * pm.gp.cov.ExpQuad(2, ls=pt.exp(log_ls))
        pymc_gpc.MarginalLaplace(cov_func=cov, likelihood=Logistic()).marginal_likelihood("y", X=X, y=y)
    return model


def test_no_point_is_evaluated_twice_in_a_row(laplace_model, monkeypatch):
    seen = []
    real = OBJ.Objective.evidence_and_grad

    def spy(self, point):
        seen.append(np.concatenate([np.ravel(point[k]) for k in sorted(point)]))
        return real(self, point)

    monkeypatch.setattr(OBJ.Objective, "evidence_and_grad", spy)
    result = pymc_gpc.fit(laplace_model, method="map", progressbar=False)
    assert result.converged and len(seen) >= 5
    # the start check's point is L-BFGS-B's first, the last iterate the point maximise reads
    assert not any(np.array_equal(a, b) for a, b in zip(seen, seen[1:]))


def test_maximise_reports_a_stalled_run_as_converged(laplace_model, monkeypatch):
    model = laplace_model
    exact = pymc_gpc.fit(model, method="map", progressbar=False)
    assert exact.converged and exact.n_iter > 3
    monkeypatch.setattr(type2, "STALL_WINDOW", 2)
    monkeypatch.setattr(type2, "STALL_TOL", 1e9)  # every window gains too little
    monkeypatch.setattr(type2, "STALL_RATIO", 1e20)
    stalled = pymc_gpc.fit(model, method="map", progressbar=False)
    assert stalled.n_iter == 3 and stalled.converged and "rose by less than" in stalled.message
    assert stalled.log_evidence != pytest.approx(exact.log_evidence, abs=1e-8)


def test_the_kernel_change_survives_a_runaway_amplitude():
    """``_runaway`` asks whether moving a coordinate changes the kernel: with log v0 near 375 (as
    type-II ML on Crabs reached with 30 L-BFGS-B pairs) the entries are ~1e163 and their squares
    overflow, so an unscaled Frobenius norm read NaN as no change and the runaway went unreported."""
    K = np.exp(375.0) * np.array([[1.0, 0.3], [0.3, 1.0]])
    with np.errstate(over="ignore", invalid="ignore"):
        assert np.isnan(np.linalg.norm(np.exp(2.0) * K - K) / np.linalg.norm(K))  # the old form's failure
    assert type2._scaled_change(K, np.exp(2.0) * K) == pytest.approx(np.exp(2.0) - 1.0, rel=1e-12)
    assert type2._scaled_change(K, K) == 0.0
    assert type2._scaled_change(K, K * np.inf) == np.inf  # further out the kernel overflows: changed
    assert type2._scaled_change(np.zeros((2, 2)), np.zeros((2, 2))) == 0.0
    assert type2._scaled_change(np.zeros((2, 2)), np.eye(2)) == np.inf


class _Overflowing:
    """An objective in one log amplitude: rising towards 0 as it grows, evaluable only below
    ``edge`` (beyond it the kernel overflows), with the kernel its exponential."""

    def __init__(self, edge, peak=None):
        self.edge, self.peak = edge, peak

    def kernel_inputs(self, point):
        with np.errstate(over="ignore"):
            return [((np.exp(np.array([[float(point["log_amp"])]])),), np.zeros(0))], 0.0

    def evidence_and_grad(self, point):
        a = float(point["log_amp"])
        if a >= self.edge:
            return -np.inf, -np.inf, None
        value = -np.exp(-a) if self.peak is None else -(a - self.peak) ** 2
        return value, value, np.zeros(1)


def _one_coordinate():
    import types
    from pymc_gpc.estimation.objective import ravel
    variable = types.SimpleNamespace(name="log_amp")
    point = {"log_amp": np.array(0.0)}
    model = types.SimpleNamespace(named_vars_to_dims={}, coords={})
    return ravel(point, [variable]), point, model


@pytest.mark.parametrize("objective, at, reported", [
    (_Overflowing(edge=709.0), 708.0, True),    # rising up to where it cannot be evaluated (a halved step)
    (_Overflowing(edge=np.inf), 40.0, True),    # rising (within RUNAWAY_TOL of flat) further out
    (_Overflowing(edge=np.inf, peak=40.0), 40.0, False),  # a finite optimum beyond RUNAWAY_LIMIT
    (_Overflowing(edge=709.0, peak=708.0), 708.0, False),  # a finite optimum just inside the overflow edge
    (_Overflowing(edge=708.01, peak=None), 708.0, False),  # not evaluable within RUNAWAY_STEP / 64: not reported
])
def test_runaway_reports_a_coordinate_rising_to_where_the_model_overflows(objective, at, reported):
    layout, point, model = _one_coordinate()
    x = np.array([at])
    value, _, _ = objective.evidence_and_grad({"log_amp": at})
    names = type2._runaway(objective, x, layout, point, value, model)
    assert names == (["log_amp"] if reported else [])
