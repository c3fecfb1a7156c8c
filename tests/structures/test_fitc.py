"""The inducing-point (FITC) prior structure under EP and Laplace, against ground truth.

* the same approximation run on the dense FITC covariance Q + Lambda (formed here
  independently, with numpy's Cholesky) gives the same evidence to 1e-8 at n = 200;
* with Xu = X (m = n) FITC reproduces the dense approximation on K itself, evidence and
  hyperparameter gradients to 1e-6;
* every gradient (the raw inputs K_uu, K_uf, diag K_ff, the kernel hyperparameters, and
  the inducing inputs Xu) against central finite differences;
* the gradient's column-blocked products against the chain rule applied densely;
* predictions against the dense predictive with the FITC cross-covariance Q_{f*};
* an ill-conditioned K_uu (duplicated inducing inputs) gives a finite evidence.
"""

import numpy as np
import pytest

from pymc_gpc import ep, laplace
from pymc_gpc.structures import FITCPrior
from pymc_gpc.structures.fitc import FITCPosterior

from ..conftest import LIKELIHOOD_CASES, ard_kernel, lik_id, random_problem

RUNS = {
    "ep": lambda K, y, lik, p=None: ep(K, y, lik, p, tol=1e-12),
    "laplace": lambda K, y, lik, p=None: laplace(K, y, lik, p, tol=1e-13),
}
CASES = [(lik, name) for lik in LIKELIHOOD_CASES for name in RUNS if lik.supports_laplace or name != "laplace"]
IDS = [f"{lik_id(lik)}-{name}" for lik, name in CASES]


def se_cross(A, B, log_ls, log_amp):
    """Squared-exponential k(A, B) and its derivatives in (log_ls..., log_amp) and in A."""
    ls = np.exp(log_ls)
    diff = (A[:, None, :] - B[None, :, :]) / ls
    K = np.exp(log_amp) * np.exp(-0.5 * np.sum(diff**2, -1))
    d_hyper = [K * diff[:, :, j] ** 2 for j in range(A.shape[1])] + [K]
    d_A = -K[:, :, None] * diff / ls  # d k(a_i, b_j) / d a_i
    return K, d_hyper, d_A


def fitc_parts(X, Xu, log_ls, log_amp, jitter=1e-8):
    Kuu, _, _ = se_cross(Xu, Xu, log_ls, log_amp)
    Kuf, _, _ = se_cross(Xu, X, log_ls, log_amp)
    return Kuu + jitter * np.eye(len(Xu)), Kuf, np.full(len(X), np.exp(log_amp))


def dense_fitc_cov(Kuu, Kuf, k_diag):
    """Q + diag(k_diag - diag Q), with numpy alone."""
    Q = Kuf.T @ np.linalg.solve(Kuu, Kuf)
    return Q + np.diag(k_diag - np.diag(Q))


def problem(seed, n, m, d=2):
    rng = np.random.default_rng(seed)
    X, y = random_problem(rng, n, d=d)
    Xu = X[rng.choice(n, m, replace=False)] + 0.5 * rng.normal(size=(m, d))
    return X, y, Xu


@pytest.mark.parametrize("lik, approx", CASES, ids=IDS)
def test_evidence_equals_dense_computation_with_fitc_covariance(lik, approx):
    X, y, Xu = problem(0, 200, 25)
    parts = fitc_parts(X, Xu, np.log([0.8, 1.3]), np.log(2.0))
    sparse = RUNS[approx](FITCPrior(*parts), y, lik)
    dense = RUNS[approx](dense_fitc_cov(*parts), y, lik)
    assert sparse.converged and dense.converged
    # The step likelihood's negative sites send the dense reference through chol(K + 1e-10
    # mean(diag K) I) (``IndefiniteSitePosterior``); here the evidence moves by 2.4e-8 per
    # 2e-10 added to diag K~, so the reference itself is good to ~5e-8 only.
    tol = 1e-7 if lik_id(lik) == "StepLabelNoise" else 1e-8
    assert abs(sparse.log_z - dense.log_z) < tol, (sparse.log_z, dense.log_z)
    np.testing.assert_allclose(sparse.mean, dense.mean, atol=1e-7)
    np.testing.assert_allclose(sparse.var, dense.var, rtol=1e-7, atol=1e-10)
    np.testing.assert_allclose(sparse.loo_log_p, dense.loo_log_p, atol=1e-7)


def chained_hyper_gradient(grad, dKuu, dKuf, dk_diag):
    return np.array([np.sum(grad.Kuu * a) + np.sum(grad.Kuf * b) + grad.k_diag @ c
                     for a, b, c in zip(dKuu, dKuf, dk_diag)])


@pytest.mark.parametrize("lik, approx", CASES, ids=IDS)
def test_inducing_inputs_at_the_data_reproduce_the_dense_approximation(lik, approx):
    rng = np.random.default_rng(3)
    X, y = random_problem(rng, 30, d=2)
    log_ls, log_amp = np.log([1.1, 1.6]), np.log(1.5)
    K, dK = ard_kernel(X, log_ls, log_amp, jitter=1e-6)
    dense = RUNS[approx](K, y, lik)
    # K_uu = K(X, X) + 1e-12 I: Q = K up to 1e-12; diag K_ff carries the dense jitter
    Kuu, Kuf, k_diag = fitc_parts(X, X, log_ls, log_amp, jitter=1e-12)
    sparse = RUNS[approx](FITCPrior(Kuu, Kuf, k_diag + 1e-6), y, lik)
    assert abs(sparse.log_z - dense.log_z) < 1e-6
    g_dense = np.array([np.sum(dense.dlog_z_dK * d) for d in dK])
    g_sparse = chained_hyper_gradient(sparse.dlog_z_dK, dK, dK, [np.diag(d) for d in dK])
    np.testing.assert_allclose(g_sparse, g_dense, rtol=1e-6, atol=1e-6 * np.max(np.abs(g_dense)))
    if lik.n_params:
        np.testing.assert_allclose(sparse.dlog_z_dparams, dense.dlog_z_dparams, rtol=1e-6)


def central(f, x, h):
    return np.array([(f(x + h * e) - f(x - h * e)) / (2 * h) for e in np.eye(len(x))])


@pytest.mark.parametrize("lik, approx", CASES, ids=IDS)
def test_gradients_match_finite_differences(lik, approx):
    """Hyperparameters, the likelihood's parameter, the inducing inputs and the raw inputs."""
    X, y, Xu = problem(1, 40, 7)
    log_ls, log_amp = np.log([0.9, 1.4]), np.log(2.5)
    hyper = np.r_[log_ls, log_amp]
    run, p0 = RUNS[approx], lik.params

    def log_z(h=hyper, Z=Xu, p=p0):
        return run(FITCPrior(*fitc_parts(X, Z, h[:2], h[2])), y, lik, p).log_z

    res = run(FITCPrior(*fitc_parts(X, Xu, log_ls, log_amp)), y, lik)
    assert res.converged
    g = res.dlog_z_dK
    _, dKuu, dA_uu = se_cross(Xu, Xu, log_ls, log_amp)
    _, dKuf, dA_uf = se_cross(Xu, X, log_ls, log_amp)
    dk_diag = [np.zeros(len(X)), np.zeros(len(X)), np.full(len(X), np.exp(log_amp))]
    analytic = chained_hyper_gradient(g, dKuu, dKuf, dk_diag)
    fd = central(lambda h: log_z(h=h), hyper, 1e-5)
    np.testing.assert_allclose(analytic, fd, rtol=1e-5, atol=1e-7)
    # inducing inputs: K_uu depends on Xu in both arguments (g.Kuu symmetric), K_uf in the first
    d_Xu = 2.0 * np.einsum("ij,ijk->ik", g.Kuu, dA_uu) + np.einsum("ij,ijk->ik", g.Kuf, dA_uf)
    fd_Xu = central(lambda z: log_z(Z=z.reshape(Xu.shape)), Xu.ravel(), 1e-5).reshape(Xu.shape)
    np.testing.assert_allclose(d_Xu, fd_Xu, rtol=1e-5, atol=1e-7)
    if lik.n_params:
        fd_p = (log_z(p=p0 + 1e-5) - log_z(p=p0 - 1e-5)) / 2e-5
        np.testing.assert_allclose(res.dlog_z_dparams[0], fd_p, rtol=1e-5)
    # the raw inputs, entry by entry (a few of each)
    Kuu, Kuf, k_diag = fitc_parts(X, Xu, log_ls, log_amp)
    h = 1e-6

    def at(a, b, c):
        return run(FITCPrior(a, b, c), y, lik).log_z

    for i, j in [(0, 0), (2, 5)]:
        E = np.zeros_like(Kuu)
        E[i, j] = E[j, i] = h
        fd = (at(Kuu + E, Kuf, k_diag) - at(Kuu - E, Kuf, k_diag)) / (2 * h)
        np.testing.assert_allclose(np.sum(g.Kuu * E) / h, fd, rtol=1e-5, atol=1e-7)
    for i, j in [(1, 3), (6, 30)]:
        E = np.zeros_like(Kuf)
        E[i, j] = h
        fd = (at(Kuu, Kuf + E, k_diag) - at(Kuu, Kuf - E, k_diag)) / (2 * h)
        np.testing.assert_allclose(g.Kuf[i, j], fd, rtol=1e-5, atol=1e-7)
    E = np.zeros(len(X))
    E[11] = h
    fd = (at(Kuu, Kuf, k_diag + E) - at(Kuu, Kuf, k_diag - E)) / (2 * h)
    np.testing.assert_allclose(g.k_diag[11], fd, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("lik", [LIKELIHOOD_CASES[0], LIKELIHOOD_CASES[3]], ids=lik_id)
def test_column_blocked_gradient_equals_the_dense_chain_rule(lik, monkeypatch):
    """The gradient in (K_uu, K_uf, diag K_ff), computed over blocks of 3 columns, against the
    chain rule applied densely (module docstring of structures.fitc) to dense EP's gradient in
    Q + Lambda: d/dK_uf = 2 B G', d/dK_uu = -B G' B^T, d/dk_ff = diag G, B = K_uu^{-1} K_uf.
    The step likelihood has negative site precisions (signed products in the blocks)."""
    from pymc_gpc.structures import fitc

    monkeypatch.setattr(fitc, "_column_blocks", lambda m, n: [slice(j, min(j + 3, n)) for j in range(0, n, 3)])
    X, y, Xu = problem(4, 40, 7)
    parts = fitc_parts(X, Xu, np.log([0.9, 1.4]), np.log(2.5))
    got = RUNS["ep"](FITCPrior(*parts), y, lik)
    G = RUNS["ep"](dense_fitc_cov(*parts), y, lik).dlog_z_dK
    B = np.linalg.solve(parts[0], parts[1])
    G_off = G - np.diag(np.diag(G))
    scale = np.max(np.abs(G))
    np.testing.assert_allclose(got.dlog_z_dK.Kuf, 2 * B @ G_off, atol=1e-7 * scale * np.max(np.abs(B)))
    np.testing.assert_allclose(got.dlog_z_dK.Kuu, -B @ G_off @ B.T, atol=1e-7 * scale * np.max(np.abs(B)) ** 2)
    np.testing.assert_allclose(got.dlog_z_dK.k_diag, np.diag(G), atol=1e-7 * scale)


@pytest.mark.parametrize("approx", ["ep", "laplace"])
def test_prediction_matches_dense_predictive_with_fitc_cross_covariance(approx):
    lik = LIKELIHOOD_CASES[0]
    X, y, Xu = problem(2, 80, 10)
    Xs = np.random.default_rng(5).normal(size=(15, 2))
    log_ls, log_amp = np.log([0.8, 1.3]), np.log(2.0)
    parts = fitc_parts(X, Xu, log_ls, log_amp)
    Kus, _, _ = se_cross(Xu, Xs, log_ls, log_amp)
    k_star = np.full(len(Xs), np.exp(log_amp))
    sparse = RUNS[approx](FITCPrior(*parts), y, lik)
    dense = RUNS[approx](dense_fitc_cov(*parts), y, lik)
    Q_fs = parts[1].T @ np.linalg.solve(parts[0], Kus)
    mean, var = sparse.predict_latent(Kus, k_star)
    mean_d, var_d = dense.predict_latent(Q_fs, k_star)
    np.testing.assert_allclose(mean, mean_d, atol=1e-7)
    np.testing.assert_allclose(var, var_d, atol=1e-7)
    K_star, _, _ = se_cross(Xs, Xs, log_ls, log_amp)
    mean_c, cov = sparse.posterior.predict_cov(sparse.a, Kus, K_star)
    cov_d = K_star - Q_fs.T @ dense.posterior.R() @ Q_fs
    np.testing.assert_allclose(mean_c, mean_d, atol=1e-7)
    np.testing.assert_allclose(cov, cov_d, atol=1e-7)


def test_ill_conditioned_inducing_covariance_falls_back_on_jitter():
    X, y, Xu = problem(4, 50, 6)
    Xu = np.vstack([Xu, Xu[:3]])  # duplicated inducing inputs: K_uu singular
    parts = fitc_parts(X, Xu, np.log([0.8, 1.3]), np.log(2.0), jitter=0.0)
    prior = FITCPrior(*parts)
    assert prior.jitter > 0.0
    for run in RUNS.values():
        res = run(prior, y, LIKELIHOOD_CASES[0])
        assert np.isfinite(res.log_z) and res.converged
        assert all(np.all(np.isfinite(g)) for g in res.dlog_z_dK)


def test_structure_inputs_are_checked():
    X, y, Xu = problem(5, 20, 4)
    Kuu, Kuf, k_diag = fitc_parts(X, Xu, np.log([1.0, 1.0]), 0.0)
    with pytest.raises(ValueError, match="shapes do not match"):
        FITCPrior(Kuu, Kuf, k_diag[:-1])
    bad = Kuf.copy()
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="Kuf contains NaN"):
        FITCPrior(Kuu, bad, k_diag)
    with pytest.raises(ValueError, match="has 20 points, y has 19"):
        ep(FITCPrior(Kuu, Kuf, k_diag), y[:-1], LIKELIHOOD_CASES[0])
    with pytest.raises(ValueError, match="sequential EP needs a dense K"):
        ep(FITCPrior(Kuu, Kuf, k_diag), y, LIKELIHOOD_CASES[0], method="sequential")


def test_triangular_factor_uses_the_inverse_only_where_well_conditioned():
    """``_TriangularFactor``: products with L^{-1} where cond(L) <= 1e6, solves otherwise;
    both against SciPy's triangular solve, also in single precision."""
    from scipy.linalg import solve_triangular

    from pymc_gpc.structures.fitc import _TriangularFactor

    rng = np.random.default_rng(7)
    B = rng.normal(size=(12, 30))
    X, _, Xu = problem(6, 20, 12)
    well = np.linalg.cholesky(fitc_parts(X, Xu, np.log([1.0, 1.0]), 0.0, jitter=1e-3)[0])
    Xu_close = Xu.copy()
    Xu_close[1] = Xu_close[0] + 1e-6  # nearly duplicated: cond(L) ~ 1e6 / 1e-6 scale
    ill = np.linalg.cholesky(fitc_parts(X, Xu_close, np.log([1.0, 1.0]), 0.0, jitter=1e-14)[0])
    for L, by_inverse in ((well, True), (ill, False)):
        factor = _TriangularFactor(np.asfortranarray(L))
        assert factor.by_inverse is by_inverse
        for trans in (0, 1):
            want = solve_triangular(L, B, lower=True, trans=trans)
            got = factor.solve(np.asfortranarray(B), trans=trans, alpha=2.0)
            np.testing.assert_allclose(got, 2.0 * want, rtol=1e-9, atol=1e-9 * np.max(np.abs(want)))
    single = _TriangularFactor(np.asfortranarray(well)).solve(np.asfortranarray(B, dtype=np.float32))
    assert single.dtype == np.float32
    want = solve_triangular(well, B, lower=True)
    np.testing.assert_allclose(single, want, rtol=1e-4, atol=1e-5 * np.max(np.abs(want)))


def test_rough_posterior_is_single_precision_and_has_no_gradient():
    X, y, Xu = problem(8, 300, 30)
    prior = FITCPrior(*fitc_parts(X, Xu, np.log([0.8, 1.3]), np.log(3.0)))
    w = np.random.default_rng(8).gamma(1.0, 2.0, size=300)
    nu = np.random.default_rng(9).normal(size=300)
    exact, rough = prior.posterior(w), prior.posterior(w, rough=True)
    assert rough.rough and not exact.rough
    var_gap = np.max(np.abs(rough.var_diag() / exact.var_diag() - 1))
    assert 1e-12 < var_gap < 1e-4  # rounded in float32, and only that
    mean_r, b_r = rough.mean_and_weights(nu)
    mean_e, b_e = exact.mean_and_weights(nu)
    np.testing.assert_allclose(mean_r, mean_e, rtol=1e-4, atol=1e-5 * np.max(np.abs(mean_e)))
    np.testing.assert_allclose(rough.half_logdet_B(), exact.half_logdet_B(), rtol=1e-5)
    with pytest.raises(RuntimeError, match="no gradient"):
        rough.ep_gradient(b_r)
    # negative site precisions (the step likelihood): rough is not honoured
    w_neg = w.copy()
    w_neg[:5] = -0.05
    assert not prior.posterior(w_neg, rough=True).rough


def test_single_posterior_rounds_only_its_two_products():
    """``posterior(w, single=True)``: A's column blocks, W = L_A^{-1} V and (for the gradient
    only) E = L_A^{-T} W in float32, the rest in double. Against the double posterior:
    variances within 1e-6 of the prior variance (the bound is about 1e-7 ||V_i||^2), E to
    float32 rounding, the log-determinant, means and weights likewise, the (rough) gradient as
    close as the double posterior's own rough gradient allows; asked for with ``rough`` too it
    is single; negative sites or an ill-conditioned A fall back to double (to rough, with
    ``rough``)."""
    X, y, Xu = problem(8, 300, 30)
    prior = FITCPrior(*fitc_parts(X, Xu, np.log([0.8, 1.3]), np.log(3.0)))
    w = np.random.default_rng(8).gamma(1.0, 2.0, size=300)
    nu = np.random.default_rng(9).normal(size=300)
    exact, single = prior.posterior(w), prior.posterior(w, single=True)
    assert single.single and not single.rough and not exact.single
    var_gap = np.abs(single.var_diag() - exact.var_diag()) / prior.diag()
    assert 1e-13 < np.max(var_gap) < 1e-6  # rounded in float32, and only that
    assert single._E is None and single._W.dtype == np.float32  # E waits for the gradient
    E = single._precision_E()
    assert E.dtype == np.float32 and exact._E.dtype == np.float64 and single._W is None
    np.testing.assert_allclose(E, exact._E, rtol=0, atol=1e-5 * np.max(np.abs(exact._E)))
    both = prior.posterior(w, rough=True, single=True)
    assert both.single and not both.rough
    np.testing.assert_allclose(single.half_logdet_B(), exact.half_logdet_B(), rtol=1e-6)
    mean_s, b_s = single.mean_and_weights(nu)
    mean_e, b_e = exact.mean_and_weights(nu)
    np.testing.assert_allclose(mean_s, mean_e, rtol=1e-5, atol=1e-6 * np.max(np.abs(mean_e)))
    for got, want in zip(single.ep_gradient(b_s, rough=True), exact.ep_gradient(b_e, rough=False)):
        np.testing.assert_allclose(got, want, atol=1e-4 * np.max(np.abs(want)))
    w_neg = w.copy()
    w_neg[:5] = -0.05
    assert not prior.posterior(w_neg, single=True).single
    # near MAX_COND_SINGLE (cond(L_A) above 1e3) single still: the variances within 1e-4 of theirs
    scale = next(s for s in np.geomspace(1.0, 1e5, 41) if 1e3 < 1.0 / prior.posterior(s * w).A_factor.rcond)
    near_limit, exact = prior.posterior(scale * w, single=True), prior.posterior(scale * w)
    assert near_limit.single and 1.0 / near_limit.A_factor.rcond <= FITCPosterior.MAX_COND_SINGLE
    np.testing.assert_allclose(near_limit.var_diag(), exact.var_diag(), rtol=1e-4)
    np.testing.assert_allclose(near_limit.half_logdet_B(), exact.half_logdet_B(), rtol=1e-5)
    stiff = prior.posterior(1e9 * w, single=True)  # cond(L_A) far above MAX_COND_SINGLE
    assert stiff.A_factor.rcond * FITCPosterior.MAX_COND_SINGLE < 1.0 and not stiff.single
    np.testing.assert_allclose(stiff.var_diag(), prior.posterior(1e9 * w).var_diag(), rtol=1e-9)
    between = next(s for s in np.geomspace(1.0, 1e9, 91)  # MAX_COND_SINGLE < cond(L_A) <= MAX_COND_ROUGH
                   if 1.0 / prior.posterior(s * w).A_factor.rcond > 2 * FITCPosterior.MAX_COND_SINGLE)
    fallback = prior.posterior(between * w, rough=True, single=True)
    assert fallback.rough and not fallback.single


def record_rough(monkeypatch, cls, method):
    """The ``rough`` flag of every call of ``cls.method(self, x, rough=...)``, in order, while
    the test runs."""
    asked = []
    original = getattr(cls, method)

    def recording(self, x, rough=False, **options):
        asked.append(rough)
        return original(self, x, rough=rough, **options)

    monkeypatch.setattr(cls, method, recording)
    return asked


@pytest.fixture
def rough_requests(monkeypatch):
    """The ``rough`` flag of every ``FITCPrior.posterior`` call, in order, while the test runs."""
    return record_rough(monkeypatch, FITCPrior, "posterior")


def test_loose_tolerance_sweeps_rough_but_returns_an_exact_fixed_point(monkeypatch, rough_requests):
    """At the sampler's tolerance a warm start's first sweep runs on a rough posterior;
    the returned posterior is exact but for its products' single precision, and its sites pass
    an exact convergence check: the evidence is the one recomputed in double at the returned
    sites to float32 rounding, and one more exact sweep moves them by less than tol. At the engine's tolerance no rough posterior is
    asked for."""
    from pymc_gpc.approximations import ep as ep_module
    from pymc_gpc.likelihoods import Probit

    X, y, Xu = problem(10, 400, 40)
    lik = Probit()
    base = ep(FITCPrior(*fitc_parts(X, Xu, np.log([0.8, 1.3]), np.log(3.0))), y, lik, tol=1e-2)
    prior = FITCPrior(*fitc_parts(X, Xu, np.log([0.8, 1.3]) + 0.05, np.log(3.0) + 0.05))
    asked = rough_requests
    asked.clear()
    res = ep(prior, y, lik, state=base.state, tol=1e-2)
    assert res.converged and asked[0] is True and not res.posterior.rough
    tau, nu = res.state.tau, res.state.nu
    post = prior.posterior(tau)
    var, mean, b, tau_c, nu_c = ep_module._cavities(post, tau, nu, prior)
    tilted = lik.tilted(y, nu_c / tau_c, 1.0 / tau_c, lik.resolve_params(None))
    exact_log_z = ep_module.ep_log_z(post, tau, nu, mean, tau_c, nu_c, tilted.log_z)
    # the last posterior's two m^2 n products in single precision: its evidence is the exact
    # one at the returned sites but for float32 rounding
    assert res.posterior.single and not post.single
    assert 0.0 < abs(exact_log_z - res.log_z) < 1e-6 * abs(exact_log_z)
    change = ep_module.parallel_site_update(lik.kind, y, lik.resolve_params(None), var, mean, tau, nu, prior.diag(), 1.0)[2]
    assert change < 1e-2
    # the fixed point is the exact one's: as close to a tight solve as an all-exact run
    monkeypatch.setattr(ep_module, "ROUGH_TOL", np.inf)
    exact_run = ep(prior, y, lik, state=base.state, tol=1e-2)
    tight = ep(prior, y, lik, tol=1e-10)
    assert abs(res.log_z - tight.log_z) <= max(5 * abs(exact_run.log_z - tight.log_z), 1e-4)
    asked.clear()
    ep(prior, y, lik, state=base.state, tol=1e-8)
    assert asked and not any(asked)


def test_rough_sweeps_are_asked_for_only_where_the_next_change_is_predicted_above_tol():
    from pymc_gpc.approximations.ep import _next_change, _rough_allowed

    assert _rough_allowed(1e-2, np.inf)  # a warm start's first sweep, nothing known
    assert not _rough_allowed(1e-2, 5e-3) and not _rough_allowed(1e-4, 1.0)  # the last; a tight tol
    assert _rough_allowed(1e-2, 1.0, 9) and not _rough_allowed(1e-2, 1.0, 10)  # a slow solve goes on exact
    assert _next_change(0.2, np.inf) == pytest.approx(0.02)  # after a first sweep: rate 0.1
    assert _next_change(0.05, 0.1) == pytest.approx(0.025)  # a slow contraction (0.5)
    assert _next_change(0.05, 1.0) == pytest.approx(0.0025)  # a fast one (0.05)
    assert _next_change(0.2, 0.1) == pytest.approx(0.2)  # growth: no worse than the same
    assert _next_change(0.0, 0.0) == 0.0 and _next_change(0.1, 0.0) == pytest.approx(0.1)  # no division by 0


def test_a_warm_start_that_converged_in_one_sweep_starts_exact(rough_requests):
    """``EPState.first_change`` below tol forecasts a one-sweep solve: the first posterior
    is then exact (a rough one would cost a second sweep), and the result carries its own
    first change forward."""
    from pymc_gpc.likelihoods import Probit

    X, y, Xu = problem(10, 400, 40)
    prior = FITCPrior(*fitc_parts(X, Xu, np.log([0.8, 1.3]), np.log(3.0)))
    tight = ep(prior, y, Probit(), tol=1e-10)
    asked = rough_requests
    asked.clear()
    again = ep(prior, y, Probit(), state=tight.state, tol=1e-2)  # first_change from a cold start: large
    assert asked[0] is True and again.n_iter == 2 and again.state.first_change < 1e-2
    asked.clear()
    once = ep(prior, y, Probit(), state=again.state, tol=1e-2)
    assert asked == [False] and once.n_iter == 1 and once.state.first_change < 1e-2


@pytest.mark.parametrize("lik", [LIKELIHOOD_CASES[0], LIKELIHOOD_CASES[3]], ids=lik_id)
def test_rough_gradient_rounds_only_its_products(lik, monkeypatch):
    """``ep_gradient(b, rough=True)`` (the sampler's tolerances) is the exact gradient with its
    two m^2 n products rounded to single precision: every entry of d/dK_uf and d/dK_uu within
    1e-4 of the largest (and not equal: it is rounded), diag K_ff untouched, the gradient in
    the kernel hyperparameters within 1e-4 relative or 1e-4 of its largest component (the
    step likelihood's evidence does not depend on the amplitude: that component is 0 up to
    rounding). Blocks of 3 columns, so that the step likelihood's negative sites give
    blocks of mixed signs."""
    from pymc_gpc.structures import fitc

    monkeypatch.setattr(fitc, "_column_blocks", lambda m, n: [slice(j, min(j + 3, n)) for j in range(0, n, 3)])
    X, y, Xu = problem(12, 120, 15)
    log_ls, log_amp = np.log([0.9, 1.4]), np.log(2.5)
    res = ep(FITCPrior(*fitc_parts(X, Xu, log_ls, log_amp)), y, lik, tol=1e-10)
    exact, rough = res.posterior.ep_gradient(res.a), res.posterior.ep_gradient(res.a, rough=True)
    for name in ("Kuf", "Kuu"):
        gap = np.max(np.abs(getattr(rough, name) - getattr(exact, name))) / np.max(np.abs(getattr(exact, name)))
        assert 1e-12 < gap < 1e-4, (name, gap)
    np.testing.assert_array_equal(rough.k_diag, exact.k_diag)
    # chained into the hyperparameters (K_uu, K_uf and diag K_ff move together)
    _, dKuu, _ = se_cross(Xu, Xu, log_ls, log_amp)
    _, dKuf, _ = se_cross(Xu, X, log_ls, log_amp)
    dk = [np.zeros(len(X))] * len(log_ls) + [np.full(len(X), np.exp(log_amp))]
    g_exact = chained_hyper_gradient(exact, dKuu, dKuf, dk)
    g_rough = chained_hyper_gradient(rough, dKuu, dKuf, dk)
    np.testing.assert_allclose(g_rough, g_exact, rtol=1e-4, atol=1e-4 * np.max(np.abs(g_exact)))


def test_rough_gradient_is_double_where_the_inducing_factor_is_ill_conditioned():
    """Beyond ``MAX_COND_ROUGH_GRADIENT`` (inducing inputs nearly duplicated, K_uu with a
    tiny jitter) the products stay in double precision: the same gradient, bit for bit."""
    from pymc_gpc.likelihoods import Probit
    from pymc_gpc.structures.fitc import FITCPosterior

    X, y, Xu = problem(13, 120, 12)
    Xu = np.vstack([Xu, Xu[:4] + 1e-7])
    prior = FITCPrior(*fitc_parts(X, Xu, np.log([0.9, 1.4]), np.log(2.5), jitter=1e-13))
    assert prior.L_uu.rcond * FITCPosterior.MAX_COND_ROUGH_GRADIENT < 1.0  # the case is ill-conditioned
    res = ep(prior, y, Probit(), tol=1e-10)
    exact, rough = res.posterior.ep_gradient(res.a), res.posterior.ep_gradient(res.a, rough=True)
    for name in ("Kuu", "Kuf", "k_diag"):
        np.testing.assert_array_equal(getattr(rough, name), getattr(exact, name))


def test_only_the_samplers_tolerances_ask_for_a_rough_gradient(monkeypatch):
    from pymc_gpc.likelihoods import Probit
    from pymc_gpc.structures.fitc import FITCPosterior

    asked = record_rough(monkeypatch, FITCPosterior, "ep_gradient")
    X, y, Xu = problem(10, 200, 20)
    prior = FITCPrior(*fitc_parts(X, Xu, np.log([0.8, 1.3]), np.log(3.0)))
    ep(prior, y, Probit(), tol=1e-2)
    ep(prior, y, Probit(), tol=1e-8)
    laplace(prior, y, Probit())  # Laplace's gradient is always exact
    assert asked == [True, False]


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_precision_columns_by_inverse_and_by_solves_agree(monkeypatch, sign):
    """E = A^{-1} V by a product with the explicit inverse (well-conditioned A) and by two
    triangular solves (the fallback) give the same variances and gradient; negative sites
    (sign -1, small enough to keep K~^{-1} + W positive definite) included."""
    from pymc_gpc.structures.fitc import FITCPosterior

    X, y, Xu = problem(12, 250, 25)
    prior = FITCPrior(*fitc_parts(X, Xu, np.log([0.8, 1.3]), np.log(3.0)))
    rng = np.random.default_rng(13)
    w = rng.gamma(1.0, 1.0, size=250)
    w[:10] = sign * 0.01
    b = rng.normal(size=250)
    by_inverse = prior.posterior(w)
    var_inverse = by_inverse.var_diag()  # E is formed here (lazily): before the patch
    monkeypatch.setattr(FITCPosterior, "MAX_COND_INVERSE", 0.0)
    by_solves = prior.posterior(w)
    np.testing.assert_allclose(var_inverse, by_solves.var_diag(), rtol=1e-11)
    assert by_inverse._A_inv is not None and by_solves._A_inv is None  # the two paths were taken
    g_inv, g_sol = by_inverse.ep_gradient(b), by_solves.ep_gradient(b)
    for a, c in zip(g_inv, g_sol):
        np.testing.assert_allclose(a, c, rtol=1e-9, atol=1e-12 * np.max(np.abs(c)))


def test_rough_posterior_is_refused_where_A_is_ill_conditioned(monkeypatch):
    """Single-precision variances lose up to about 6e-8 cond(L_A) relative: beyond
    cond(L_A) = ``MAX_COND_ROUGH`` the rough request gives the exact posterior (the limit
    lowered to 100 here, between a tame A, cond(L_A) 2.4, and a wild one, 2.5e3)."""
    from pymc_gpc.structures.fitc import FITCPosterior

    monkeypatch.setattr(FITCPosterior, "MAX_COND_ROUGH", 100.0)
    X, y, Xu = problem(14, 300, 30)
    tame = FITCPrior(*fitc_parts(X, Xu, np.log([0.8, 1.3]), np.log(1.0))).posterior(np.full(300, 1e-2), rough=True)
    w = np.full(300, 10.0)
    wild = FITCPrior(*fitc_parts(X, Xu, np.log([0.8, 1.3]), np.log(1e4))).posterior(w, rough=True)
    assert tame.rough and 1.0 / tame.A_factor.rcond < 100.0
    assert not wild.rough and 1.0 / wild.A_factor.rcond > 100.0
    np.testing.assert_allclose(wild.var_diag(), wild.prior.posterior(w).var_diag(), rtol=1e-12)


def test_single_precision_V_for_the_samplers_tolerance():
    """``FITCPrior(single=True)`` (the evidence Op's prior at the sampler's tolerances): V formed
    in float32, its entries within 1e-7 cond(L_uu) of the double V's scale, held as V_single
    without a second rounding, diag K~ still k_diag (Lambda from the rounded V); the EP
    evidence at tol 1e-2 within 1e-4 relative of the double prior's. Above
    ``MAX_COND_SINGLE_V`` the prior is the double one."""
    X, y, Xu = problem(11, 400, 12)
    parts = fitc_parts(X, Xu, np.log([0.5, 0.8]), np.log(3.0))
    double, single = FITCPrior(*parts), FITCPrior(*parts, single=True)
    cond = 1.0 / double.L_uu.rcond
    assert cond <= FITCPrior.MAX_COND_SINGLE_V
    gap = np.max(np.abs(single.V - double.V)) / np.max(np.abs(double.V))
    assert 1e-12 < gap < 1e-7 * cond, (gap, cond)
    np.testing.assert_array_equal(single.V_single(), single.V.astype(np.float32))
    np.testing.assert_allclose(single.diag(), double.diag(), rtol=1e-12)
    from pymc_gpc.likelihoods import Probit
    a, b = ep(double, y, Probit(), tol=1e-2), ep(single, y, Probit(), tol=1e-2)
    assert abs(a.log_z - b.log_z) < 1e-4 * abs(a.log_z)
    Kuu, Kuf, k_diag = parts
    stiff = FITCPrior(Kuu, Kuf, k_diag, single=True)
    stiff.MAX_COND_SINGLE_V = 0.5 * cond  # a limit below this K_uu's condition number
    assert FITCPrior.__init__(stiff, Kuu, Kuf, k_diag, single=True) is None and stiff.V.dtype == np.float64
    np.testing.assert_array_equal(stiff.V, double.V)
