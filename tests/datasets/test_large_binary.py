"""The bundled large binary data set (nycflights13's flights): counts against the source,
the target and inputs as documented, a deterministic disjoint split, bad sizes refused."""

import numpy as np
import pytest

from pymc_gpc.datasets import FLIGHTS_FEATURES, load_flights

N_FLIGHTS = 327_346  # 336,776 flights less the 9,430 without an arrival delay (nycflights13)
N_DELAYED = 77_630  # of them, arrival delay > 15 minutes (counted in the R source with pandas)


@pytest.fixture(scope="module")
def everything():
    """All flights in one training set, unstandardised, in the seed-0 order."""
    return load_flights(n_train=N_FLIGHTS, n_test=0, standardise=False)


def test_flights_counts_match_the_source(everything):
    assert everything.X_train.shape == (N_FLIGHTS, 6) and everything.X_test.shape == (0, 6)
    assert everything.feature_names == FLIGHTS_FEATURES
    assert set(np.unique(everything.y_train)) == {-1.0, 1.0}
    assert int(np.sum(everything.y_train > 0)) == N_DELAYED
    assert everything.X_train[:, 5].sum() == 343_180_156  # total miles, as summed in the source


def test_flights_inputs_are_calendar_clock_and_distance(everything):
    X = everything.X_train
    assert X[:, 0].min() == 1 and X[:, 0].max() == 12
    assert X[:, 1].min() == 1 and X[:, 1].max() == 31
    assert set(np.unique(X[:, 2])) == set(range(7))
    for hours in (X[:, 3], X[:, 4]):  # hhmm turned into hours: minutes are whole sixtieths
        assert hours.min() >= 0 and hours.max() < 24.01
        np.testing.assert_allclose(np.round(hours * 60), hours * 60, atol=1e-9)
    # the first flight of the year (UA 1545, EWR-IAH, 5:15 -> 8:19, 1400 miles, 11 min late)
    first = np.flatnonzero((X[:, 0] == 1) & (X[:, 1] == 1) & (X[:, 3] == 5.25) & (X[:, 4] == 8 + 19 / 60))
    assert first.size >= 1 and np.any(X[first, 5] == 1400)


def test_flights_split_is_seeded_disjoint_and_standardised():
    a, b = load_flights(n_train=2000, n_test=500, seed=3), load_flights(n_train=2000, n_test=500, seed=3)
    np.testing.assert_array_equal(a.X_train, b.X_train)
    np.testing.assert_array_equal(a.y_test, b.y_test)
    assert not np.array_equal(a.y_train, load_flights(n_train=2000, n_test=500, seed=4).y_train)
    np.testing.assert_allclose(a.X_train.mean(axis=0), 0.0, atol=1e-10)
    np.testing.assert_allclose(a.X_train.std(axis=0), 1.0, atol=1e-10)
    big = load_flights(n_train=N_FLIGHTS - 10, n_test=10, seed=3, standardise=False)
    raw = load_flights(n_train=2000, n_test=500, seed=3, standardise=False)
    np.testing.assert_array_equal(raw.X_train, big.X_train[:2000])  # a prefix of one permutation
    np.testing.assert_array_equal(raw.X_test, big.X_train[2000:2500])  # test rows follow: disjoint
    np.testing.assert_array_equal(raw.y_test, big.y_train[2000:2500])


@pytest.mark.parametrize("n_train, n_test", [(0, 10), (10, -1), (N_FLIGHTS, 1)])
def test_flights_refuses_impossible_sizes(n_train, n_test):
    with pytest.raises(ValueError, match=str(N_FLIGHTS)):
        load_flights(n_train=n_train, n_test=n_test)


def test_map_fit_with_a_coarse_first_run_reaches_the_single_runs_optimum(monkeypatch):
    """``fit``'s coarse first L-BFGS-B run (EP at tol 1e-3, ``type2._coarse_stage``) changes the
    path, not the optimum: against one run at the engine's tolerances (the previous behaviour,
    ``COARSE_FTOL = 0``), the same MAP-II point and evidence, a stationary point of the exact
    objective (its gradient checked by PyMC's own dlogp), and a history ending at the evidence."""
    from pymc_gpc import MarginalEP
    from pymc_gpc import likelihoods as L
    from pymc_gpc.estimation import type2
    import pymc as pm
    import pytensor.tensor as pt
    import pymc_gpc

    data = load_flights(n_train=120, n_test=0, seed=1)
    X = data.X_train[:, [3, 5]]  # departure hour, distance
    with pm.Model() as model:
        log_ls = pm.Normal("log_ls", 0, 1, shape=2)
        log_amp = pm.Normal("log_amp", 0, 1)
        cov = pt.exp(log_amp) * pm.gp.cov.ExpQuad(2, ls=pt.exp(log_ls))
        gp = MarginalEP(cov_func=cov, likelihood=L.Probit(), approx="FITC")
        gp.marginal_likelihood("y", X=X, y=data.y_train, Xu=X[:10])
    two = pymc_gpc.fit(model, method="map", progressbar=False)
    monkeypatch.setattr(type2, "COARSE_FTOL", 0.0)
    one = pymc_gpc.fit(model, method="map", progressbar=False)
    assert two.converged and one.converged
    # the same optimum of the objective, the log posterior; the evidence alone trades against
    # the prior along the optimum's flat directions (points 1e-5 apart: evidence 2e-5 apart)
    logp = model.compile_logp()
    points = [{k: r.point[k] for k in ("log_ls", "log_amp")} for r in (two, one)]
    assert logp(points[0]) == pytest.approx(logp(points[1]), abs=1e-7)
    assert two.log_evidence == pytest.approx(one.log_evidence, abs=1e-4)
    for name in ("log_ls", "log_amp"):
        np.testing.assert_allclose(two.point[name], one.point[name], atol=2e-3)
    assert two.history["log_evidence"][-1] == pytest.approx(two.log_evidence, abs=1e-8)
    point = {k: two.point[k] for k in ("log_ls", "log_amp")}
    assert np.max(np.abs(model.compile_dlogp()(point))) < 1e-2
