"""EP schedules, warm starts, reproducibility and diagnostics."""

import numpy as np
import pytest

from pymc_gpc import EPState, LaplaceState, ep, laplace
from pymc_gpc.likelihoods import Probit, StepLabelNoise

from ..conftest import LIKELIHOOD_CASES, ard_kernel, lik_id, random_problem

STEP = StepLabelNoise.kind


@pytest.mark.parametrize("lik", LIKELIHOOD_CASES, ids=lik_id)
def test_sequential_and_parallel_agree(lik):
    rng = np.random.default_rng(3)
    X, y = random_problem(rng, 40, d=3)
    K, _ = ard_kernel(X, np.log([1.0, 2.0, 0.7]), np.log(3.0))
    a = ep(K, y, lik, method="parallel", tol=1e-11)
    b = ep(K, y, lik, method="sequential", tol=1e-11)
    assert a.converged and b.converged
    assert a.log_z == pytest.approx(b.log_z, abs=1e-6)
    np.testing.assert_allclose(a.mean, b.mean, atol=1e-6)
    np.testing.assert_allclose(a.var, b.var, atol=1e-6)
    np.testing.assert_allclose(a.dlog_z_dK, b.dlog_z_dK, atol=1e-6)


@pytest.mark.parametrize("method", ["parallel", "sequential"])
def test_warm_start_converges_to_the_same_point_in_fewer_sweeps(method):
    lik = LIKELIHOOD_CASES[0]
    rng = np.random.default_rng(4)
    X, y = random_problem(rng, 60, d=2)
    K1, _ = ard_kernel(X, np.log([1.0, 1.0]), np.log(2.0))
    K2, _ = ard_kernel(X, np.log([1.02, 0.99]), np.log(2.05))
    first = ep(K1, y, lik, method=method)
    cold = ep(K2, y, lik, method=method)
    state = first.state.copy()
    warm = ep(K2, y, lik, method=method, state=state)
    assert warm.log_z == pytest.approx(cold.log_z, abs=1e-8)
    assert warm.n_iter < cold.n_iter
    np.testing.assert_array_equal(state.tau, first.state.tau)  # input state untouched


def test_laplace_warm_start():
    lik = LIKELIHOOD_CASES[4]
    rng = np.random.default_rng(4)
    X, y = random_problem(rng, 60, d=2)
    K1, _ = ard_kernel(X, np.log([1.0, 1.0]), np.log(2.0))
    K2, _ = ard_kernel(X, np.log([1.02, 0.99]), np.log(2.05))
    cold = laplace(K2, y, lik)
    warm = laplace(K2, y, lik, state=laplace(K1, y, lik).state)
    assert warm.log_z == pytest.approx(cold.log_z, abs=1e-9)
    assert warm.n_iter < cold.n_iter


@pytest.mark.parametrize("structure", ["dense", "fitc"])
def test_laplace_warm_start_steps_from_the_last_modes_f(structure):
    """The state's f: the first Newton step is linearised at the last mode's latent values,
    which move less with the kernel than K a at fixed a. Over 10 random moves of the log
    lengthscales and amplitude (sd 0.5), fewer Newton steps than from a alone (a state
    without f; measured 4.7 against 5.6 on average over 20 dense moves, 4.3 against 5.2
    over 10 with FITC, m = 20), each to the cold solve's answer; an f whose step is worse
    than a = 0 (here NaN, as from an overflowed extrapolation) is dropped: a cold solve
    after one step."""
    from pymc_gpc.approximations.laplace import LaplaceState

    lik = LIKELIHOOD_CASES[0]
    rng = np.random.default_rng(4)
    X, y = random_problem(rng, 100, d=2)
    base = np.log([1.0, 1.0, 3.0])

    def prior(h):
        if structure == "fitc":
            from pymc_gpc.structures.fitc import FITCPrior
            from ..structures.test_fitc import fitc_parts

            return FITCPrior(*fitc_parts(X, X[:20], h[:2], h[2]))
        return ard_kernel(X, h[:2], h[2])[0]

    first = laplace(prior(base), y, lik)
    steps_f, steps_a = [], []
    for _ in range(10):
        h = base + 0.5 * rng.normal(size=3)
        K2 = prior(h)
        cold = laplace(K2, y, lik)
        warm = laplace(K2, y, lik, state=first.state)
        from_a = laplace(K2, y, lik, state=LaplaceState(first.state.a))
        assert warm.log_z == pytest.approx(cold.log_z, abs=1e-9)
        assert from_a.log_z == pytest.approx(cold.log_z, abs=1e-9)
        steps_f.append(warm.n_iter)
        steps_a.append(from_a.n_iter)
    assert np.mean(steps_f) <= np.mean(steps_a) - 0.5
    bad = laplace(K2, y, lik, state=LaplaceState(first.state.a, np.full(y.size, np.nan)))  # without the check: NaN
    assert bad.log_z == pytest.approx(cold.log_z, abs=1e-9)
    assert bad.n_iter <= cold.n_iter + 1
    with pytest.raises(ValueError, match="latent values"):
        laplace(K2, y, lik, state=LaplaceState(first.state.a, first.state.f[:-1]))


def _plain_newton_test(monkeypatch, module):
    """Replace ``module``'s Newton stopping test by the one without the prediction."""
    from pymc_gpc.approximations.laplace import newton_converged

    monkeypatch.setattr(module, "newton_converged",
                        lambda change, previous, f, tol, full_step=True: newton_converged(change, previous, f, tol,
                                                                                          full_step=False))


@pytest.mark.parametrize("solver", ["binary", "softmax"])
def test_newton_skips_the_confirming_step_and_meets_its_tolerance(solver, monkeypatch):
    """``laplace.newton_converged`` predicts the next change from the last contraction: a
    solve stops where the plain test would take one more step only to confirm convergence,
    and its mode is still within tol (1 + max|f|) of the converged mode (tol = 1e-8;
    reference: tol = 1e-13 without the prediction). Stopping one step earlier still, at
    the change before, would leave an error near 1e-7 (binary)."""
    from pymc_gpc import softmax_laplace
    from pymc_gpc.approximations import laplace as laplace_module
    from pymc_gpc.approximations import softmax_laplace as softmax_module

    rng = np.random.default_rng(7)
    X, y = random_problem(rng, 50, d=2)
    K, _ = ard_kernel(X, np.log([0.8, 1.3]), np.log(4.0))
    if solver == "binary":
        module = laplace_module
        solve = lambda tol: laplace(K, y, LIKELIHOOD_CASES[4], tol=tol)
    else:
        module = softmax_module
        codes = (X[:, 0] > 0.3).astype(int) + (X[:, 1] > 0.0).astype(int)
        solve = lambda tol: softmax_laplace(np.array([K, 0.7 * K, 1.3 * K]), codes, tol=tol)
    predicted = solve(1e-8)
    with monkeypatch.context() as m:
        _plain_newton_test(m, module)
        plain, reference = solve(1e-8), solve(1e-13)
    assert predicted.converged and plain.converged
    if solver == "softmax":
        assert predicted.n_iter == plain.n_iter - 1
    else:  # binary Laplace ends in chord steps (linear contraction): the prediction may save no step
        assert predicted.n_iter <= plain.n_iter
    scale = 1.0 + np.max(np.abs(reference.mean))
    assert np.max(np.abs(predicted.mean - reference.mean)) <= 1e-8 * scale
    assert predicted.log_z == pytest.approx(reference.log_z, abs=1e-8)


def test_newton_prediction_needs_a_full_step_after_a_measured_one():
    from pymc_gpc.approximations.laplace import newton_converged

    f = np.zeros(3)  # scale 1
    assert newton_converged(1e-4, 1e-2, f, 2e-6)  # next change predicted 1e-6
    assert not newton_converged(1e-4, 1e-2, f, 2e-6, full_step=False)  # a backtracked step
    assert not newton_converged(1e-4, np.inf, f, 2e-6)  # the first step
    assert not newton_converged(1e-3, 1e-3, f, 1e-6)  # not contracting


def test_results_are_reproducible_and_at_eps_fixed_point():
    """Deterministic (no random sweep order): a repeated call returns the same bits. And the
    answer is EP's: the parallel and the sequential schedules, different iterations, reach
    the same fixed point, where every site's cavity times its likelihood has the posterior
    marginal's moments (by quadrature, ``ground_truth.tilted``)."""
    from ..reference.ground_truth import cavity, gaussian_with_sites, tilted

    lik = LIKELIHOOD_CASES[1]
    rng = np.random.default_rng(5)
    X, y = random_problem(rng, 30)
    K, _ = ard_kernel(X, np.log([1.0, 1.0]), np.log(2.0))
    a, b = ep(K, y, lik, tol=1e-12), ep(K, y, lik, tol=1e-12)
    assert a.log_z == b.log_z
    for name in ("dlog_z_dK", "dlog_z_dparams", "loo_log_p", "mean", "var"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    np.testing.assert_array_equal(a.state.tau, b.state.tau)
    seq = ep(K, y, lik, method="sequential", tol=1e-12)
    assert abs(seq.log_z - a.log_z) < 1e-9
    np.testing.assert_allclose(seq.dlog_z_dK, a.dlog_z_dK, atol=1e-8)
    np.testing.assert_allclose(seq.loo_log_p, a.loo_log_p, atol=1e-9)
    mean, Sigma = gaussian_with_sites(K, a.state.tau, a.state.nu)
    for i in range(0, 30, 5):
        _, t_mean, t_var = tilted(lik, y[i], *cavity(K, a.state.tau, a.state.nu, i))
        assert abs(mean[i] - t_mean) < 1e-6 and abs(Sigma[i, i] - t_var) < 1e-6, i


def test_sweep_limit_reports_non_convergence():
    lik = LIKELIHOOD_CASES[0]
    rng = np.random.default_rng(6)
    X, y = random_problem(rng, 30)
    K, _ = ard_kernel(X, np.log([0.5, 0.5]), np.log(20.0))
    res = ep(K, y, lik, max_sweeps=2)
    assert not res.converged and res.n_iter == 2 and res.max_change > 1e-9
    assert np.isfinite(res.log_z)


def test_loo_predictive_matches_cavity_definition():
    """EP's LOO log p(y_i | y_-i) equals log Z_i at the cavity (Opper & Winther)."""
    from scipy import stats

    lik = LIKELIHOOD_CASES[0]
    rng = np.random.default_rng(8)
    X, y = random_problem(rng, 25)
    K, _ = ard_kernel(X, np.log([1.0, 1.0]), np.log(2.0))
    res = ep(K, y, lik)
    # the returned posterior's sites (res.state holds the warm start, a sweep on):
    # tau~ = w, and nu~ = tau~ mu~ = tau~ (K + S~^-1) b = tau~ mean + b
    tau = res.posterior.w
    nu = tau * res.mean + res.a
    tau_c = 1.0 / res.var - tau
    mu_c = (res.mean / res.var - nu) / tau_c
    want = stats.norm.logcdf(y * mu_c / np.sqrt(1.0 + 1.0 / tau_c))
    np.testing.assert_allclose(res.loo_log_p, want, rtol=1e-10)


def test_predictions_match_dense_formula():
    lik = LIKELIHOOD_CASES[0]
    rng = np.random.default_rng(9)
    X, y = random_problem(rng, 30)
    Xs = rng.normal(size=(7, 2))
    K_all, _ = ard_kernel(np.vstack([X, Xs]), np.log([1.0, 1.0]), np.log(2.0), jitter=0.0)
    K = K_all[:30, :30] + 1e-8 * np.eye(30)
    Ks, kss = K_all[:30, 30:], np.diag(K_all[30:, 30:])
    for res in (ep(K, y, lik), __import__("pymc_gpc").laplace(K, y, lik)):
        W = np.diag(res.posterior.w)
        mean, var = res.predict_latent(Ks, kss)
        # dense: mean = Ks^T a, var = kss - Ks^T (K + W^-1)^-1 Ks, with W^-1 via W(I + K W)^-1
        M = np.linalg.solve(np.eye(30) + W @ K, W)
        np.testing.assert_allclose(mean, Ks.T @ res.a, rtol=1e-10)
        np.testing.assert_allclose(var, kss - np.einsum("ij,ij->j", Ks, M @ Ks), rtol=1e-7, atol=1e-10)



def _python_only(monkeypatch):
    """Make ep() skip the compiled parallel loop, as if it handed back at once."""
    import pymc_gpc.approximations.ep as ep_module

    def handed_back(kind, K, y, th, tau, nu, *rest):
        return (ep_module._HANDED_BACK, 0, np.inf, tau, nu) + (None,) * 8 + (np.inf,)

    monkeypatch.setattr(ep_module, "_parallel_compiled_from", handed_back)


@pytest.mark.parametrize("lik", LIKELIHOOD_CASES, ids=lik_id)
def test_compiled_parallel_loop_matches_the_python_loop(lik, monkeypatch):
    # The compiled loop (non-negative sites) and _parallel, to which it hands back, are
    # two codings of one iteration: same sweeps, same fixed point, to rounding.
    rng = np.random.default_rng(8)
    X, y = random_problem(rng, 70, d=3)
    K, _ = ard_kernel(X, np.log([0.5, 2.0, 1.0]), np.log(4.0))
    warm = ep(ard_kernel(X, np.log([0.55, 2.1, 1.0]), np.log(4.2))[0], y, lik).state
    results = {}
    for mode in ("compiled", "python"):
        if mode == "python":
            _python_only(monkeypatch)
        results[mode] = [ep(K, y, lik, tol=1e-10), ep(K, y, lik, tol=1e-10, state=warm)]
        if lik.kind != STEP:  # not converged: quantities at the returned sites, sweeps counted alike
            results[mode] += [ep(K, y, lik, max_sweeps=2), ep(K, y, lik, max_sweeps=0)]
            # the sampler's tolerance: rough (single-precision) sweeps in both loops
            results[mode] += [ep(K, y, lik, tol=1e-2, state=warm), ep(K, y, lik, tol=1e-2, max_sweeps=1)]
    for a, b in zip(results["compiled"], results["python"]):
        assert a.converged == b.converged
        assert a.max_change == pytest.approx(b.max_change, rel=1e-6, abs=1e-9) or np.isinf(b.max_change)
        if lik.kind != STEP:  # negative sites hand back mid-run, the count may differ
            assert a.n_iter == b.n_iter
        assert a.log_z == pytest.approx(b.log_z, abs=1e-9)
        np.testing.assert_allclose(a.var, b.var, atol=1e-9)
        np.testing.assert_allclose(a.dlog_z_dK, b.dlog_z_dK, atol=1e-9)
        np.testing.assert_allclose(a.dlog_z_dparams, b.dlog_z_dparams, atol=1e-9)
        np.testing.assert_allclose(a.loo_log_p, b.loo_log_p, atol=1e-9)


@pytest.fixture
def compiled_loop_factorisations(monkeypatch):
    """The compiled EP loop run as Python (``py_func``) with its calls of ``factors`` recorded:
    returns (loop, asked), ``asked`` the ``rough`` flag of each factorisation, in order."""
    import pymc_gpc.approximations.ep as ep_module

    asked, factors = [], ep_module.factors

    def recording(K, sw, rough):
        asked.append(bool(rough))
        return factors(K, sw, rough)

    monkeypatch.setattr(ep_module, "factors", recording)
    return ep_module._parallel_compiled.py_func, asked


def test_compiled_loop_sweeps_rough_at_the_sampler_tolerance_and_ends_exact(compiled_loop_factorisations):
    # At tol >= ROUGH_TOL the sweeps predicted not to be the last run on single-precision
    # factors; the returned factors are the exact ones at the returned sites, and the sweep
    # that ended the loop ran on them.
    from pymc_gpc.likelihoods import Probit
    from pymc_gpc.structures.dense import factor_B, inverse_factor

    loop, asked = compiled_loop_factorisations
    lik = Probit()
    th = lik.check_params(lik.resolve_params(None))
    rng = np.random.default_rng(11)
    X, y = random_problem(rng, 120, d=3)
    K, _ = ard_kernel(X, np.log([0.5, 2.0, 1.0]), np.log(8.0))
    warm = ep(ard_kernel(X, np.log([0.6, 2.2, 1.1]), np.log(9.0))[0], y, lik, tol=1e-8).state

    def run(tol, forecast=np.inf, max_sweeps=300):
        asked.clear()
        out = loop(lik.kind, K, y, th, warm.tau.copy(), warm.nu.copy(), 1.0, tol, max_sweeps, 5, forecast)
        return out, list(asked)

    (status, sweeps, change, tau, nu, L, Li, *_, first_change), flags = run(1e-2)
    assert status == 0 and change < 1e-2 and flags[0] and not flags[-1] and len(flags) == sweeps
    want_L = factor_B(K, np.sqrt(tau))[0]
    np.testing.assert_array_equal(L, want_L)
    np.testing.assert_array_equal(Li, inverse_factor(want_L)[0])
    assert ep(K, y, lik, tol=1e-2, state=warm).log_z == pytest.approx(ep(K, y, lik, tol=1e-10).log_z, abs=1e-3)
    # a forecast below tol (a warm start whose own first sweep converged): the first is exact
    assert not run(1e-2, forecast=1e-3)[1][0]
    # the engine's tolerance: no rough sweep
    assert not any(run(1e-8)[1])
    # the sweep limit on a rough sweep: the factors are made exact at the returned sites
    (status, sweeps, _, tau, _, L, Li, *_), flags = run(1e-2, max_sweeps=1)
    assert status == 2 and flags == [True, False] and sweeps == 1
    np.testing.assert_array_equal(L, factor_B(K, np.sqrt(tau))[0])


def test_ill_conditioned_b_is_never_factorised_in_single_precision():
    # At large amplitudes single-precision rounding would hold the site change above the
    # sampler's tol for ever (it did here: 300 sweeps without convergence): such a B,
    # beyond MAX_COND_ROUGH, is factorised in double, and EP converges as with exact sweeps.
    from pymc_gpc.approximations.ep import ANDERSON_MEMORY, _parallel_compiled
    from pymc_gpc.likelihoods import Probit
    from pymc_gpc.structures.dense import MAX_COND_ROUGH, factors, rough_suits

    rng = np.random.default_rng(0)
    n = 200
    X = rng.normal(size=(n, 2))
    y = np.where(np.sin(2 * X[:, 0]) + X[:, 1] > 0, 1.0, -1.0)
    K = 1e5 * np.exp(-0.5 * ((X[:, None] - X[None]) ** 2).sum(-1) / 25) + 1e-3 * np.eye(n)
    lik = Probit()
    res = ep(K, y, lik, tol=1e-2)
    sw = np.sqrt(res.state.tau)
    assert 1.0 + np.sum(res.state.tau * np.diag(K)) > MAX_COND_ROUGH and not rough_suits(K, sw)
    assert not factors(K, sw, True)[3]
    exact_only = _parallel_compiled(lik.kind, K, y, lik.resolve_params(None), np.zeros(n), np.zeros(n), 1.0, 1e-2, 300,
                                    ANDERSON_MEMORY, np.inf, False)
    assert res.converged and res.n_iter <= exact_only[1] + 1
    assert abs(res.log_z - ep(K, y, lik, tol=1e-10).log_z) < 1e-2


def test_zero_tolerance_runs_to_the_sweep_limit():
    # tol = 0 never converges; the change predictions (a division by the last change) must
    # not fail when a change is exactly 0
    res = ep(1e3 * np.eye(2), np.ones(2), Probit(), tol=0.0, max_sweeps=20)
    assert not res.converged and res.n_iter == 20 and np.isfinite(res.log_z)



def _far_warm_start(nu_scale):
    """(K, y, state): sites solved at a nearby kernel, their nu scaled by ``nu_scale`` (the
    means far off, as a wild extrapolation of ``WarmStarts`` makes them), and that kernel."""
    rng = np.random.default_rng(3)
    X, y = random_problem(rng, 80, d=2)
    near = ep(ard_kernel(X, np.log([0.5, 0.5]), np.log(2.0))[0], y, Probit()).state
    K = ard_kernel(X, np.log([0.6, 0.5]), np.log(2.2))[0]
    return K, y, EPState(near.tau.copy(), nu_scale * near.nu, near.first_change)


def _fitc(K, m=20):
    from pymc_gpc.structures import FITCPrior

    return FITCPrior(K[:m, :m] + 1e-8 * np.eye(m), K[:m], np.diag(K).copy())


@pytest.mark.parametrize("path", ["compiled", "python", "fitc", "ep_warm"])
def test_a_warm_start_worse_than_zero_sites_is_abandoned_after_one_sweep(path, monkeypatch):
    # A first sweep that changes a site by more than WARM_GIVE_UP_CHANGE (zero sites' first
    # change is at most about 2) restarts EP from zero sites: the cold solve's result, one
    # sweep more. At 50,000 rows (FITC) such a start took 300 sweeps without converging.
    from pymc_gpc.approximations.ep import WARM_GIVE_UP_CHANGE, ep_warm

    K, y, far = _far_warm_start(100.0)
    if path == "python":
        _python_only(monkeypatch)
    prior = _fitc(K) if path == "fitc" else K
    cold = ep(prior, y, Probit())
    assert cold.state.first_change < 2.5
    if path == "ep_warm":  # the sampler's compiled hot path (dense EP in the Op)
        log_z, dK, _, _, sweeps, state = ep_warm(K, y, Probit(), Probit().resolve_params(None), far, tol=1e-8)
        assert sweeps == cold.n_iter + 1
        assert log_z == pytest.approx(cold.log_z, abs=1e-10)
        np.testing.assert_allclose(dK, cold.dlog_z_dK, atol=1e-10)
        return
    warm = ep(prior, y, Probit(), state=far)
    assert warm.converged and warm.n_iter == cold.n_iter + 1
    assert warm.log_z == pytest.approx(cold.log_z, abs=1e-10)
    np.testing.assert_allclose(warm.var, cold.var, atol=1e-10)
    assert warm.state.first_change == cold.state.first_change  # the restart's, for the next forecast
    # a start below the limit is kept: its own first change is what the state forecasts
    near_enough = ep(prior, y, Probit(), state=_far_warm_start(5.0)[2])
    assert 2.5 < near_enough.state.first_change < WARM_GIVE_UP_CHANGE
    assert near_enough.log_z == pytest.approx(cold.log_z, abs=1e-7)


def test_warm_starts_keep_the_first_change_of_the_nearest_solution():
    # EPState.first_change forecasts a warm start's first sweep; WarmStarts extrapolates the
    # sites, not that forecast
    from pymc_gpc.ops.warm_start import WarmStarts

    warm = WarmStarts()
    warm.add(np.array([0.0]), EPState(np.ones(3), np.zeros(3), 0.5))
    warm.add(np.array([1.0]), EPState(2.0 * np.ones(3), np.ones(3), 0.02))
    guess = warm.guess(np.array([1.5]))
    np.testing.assert_allclose(guess.tau, 2.5, rtol=1e-3)  # extrapolated (ridge: within 1e-4)
    assert guess.first_change == 0.02


def test_compiled_loop_hands_back_negative_sites():
    # A warm start with negative sites never enters the compiled loop, and a step
    # likelihood run that produces them continues in Python (IndefiniteSitePosterior).
    from pymc_gpc.likelihoods import StepLabelNoise
    from pymc_gpc.structures.dense import IndefiniteSitePosterior

    rng = np.random.default_rng(2)
    X, y = random_problem(rng, 50, d=2)
    y[:6] = -y[:6]  # outliers: the noisy step likelihood gives them negative sites
    K, _ = ard_kernel(X, np.log([3.0, 3.0]), np.log(20.0))
    res = ep(K, y, StepLabelNoise(0.1), tol=1e-10)
    assert res.converged and np.min(res.state.tau) < 0.0
    assert isinstance(res.posterior, IndefiniteSitePosterior)
    again = ep(K, y, StepLabelNoise(0.1), tol=1e-10, state=res.state)
    assert again.log_z == pytest.approx(res.log_z, abs=1e-8)
