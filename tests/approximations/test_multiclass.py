"""Multi-class GP classification: softmax Laplace (and multinomial-probit EP) numerics.

Ground truth: brute-force Gauss-Hermite quadrature of the evidence (n <= 2, c = 3), a
dense cn x cn Newton written independently (tests/reference/multiclass_reference.py), and central
finite differences for every gradient.
"""

import numpy as np
import pytest

from pymc_gpc.approximations.ep import ep
from pymc_gpc.approximations.multinomial_probit_ep import multinomial_probit_ep
from pymc_gpc.approximations.softmax_laplace import softmax_laplace
from pymc_gpc.likelihoods import MultinomialProbit, Probit, Softmax
from pymc_gpc.validation import as_class_codes

from ..reference.multiclass_reference import (
    brute_force_log_evidence,
    dense_softmax_laplace,
    dense_softmax_mode,
    gaussian_expectation,
    gaussian_sites_posterior,
    observation_block,
    softmax_probabilities,
    multinomial_probit_log_prob,
    rbf,
    rbf_dK,
    softmax_log_prob,
)

# (X, y, per-class (lengthscale, variance)) for the small exact problems, c = 3
SMALL = [
    (np.array([0.0, 0.7]), np.array([0, 2]), [(1.0, 2.0), (0.5, 1.0), (2.0, 3.0)]),
    (np.array([0.0, 0.3]), np.array([1, 1]), [(1.0, 1.0), (1.0, 1.0), (1.0, 1.0)]),
    (np.array([-1.0, 1.0]), np.array([2, 0]), [(0.7, 4.0), (1.5, 0.5), (1.0, 2.0)]),
    (np.array([0.5]), np.array([1]), [(1.0, 5.0), (1.0, 2.0), (1.0, 1.0)]),
]


def _K(X, hyp):
    return np.array([rbf(X, ls, v) for ls, v in hyp])


def _mp_log_prob(y, F):
    return multinomial_probit_log_prob(y, F)


# Laplace's evidence lies below the truth on these problems, by at most LAPLACE_BOUND nats (observed 0.025-0.086).
LAPLACE_BOUND = 0.15


@pytest.mark.parametrize("case", range(len(SMALL)))
def test_softmax_laplace_evidence_brute_force(case):
    X, y, hyp = SMALL[case]
    K = _K(X, hyp)
    exact = brute_force_log_evidence(K, y, softmax_log_prob, nodes=10 if len(X) == 2 else 40)
    res = softmax_laplace(K, y, tol=1e-12)
    assert res.converged
    assert -LAPLACE_BOUND < res.log_z - exact < 0.0


@pytest.mark.parametrize("case", [0, 2])
def test_softmax_laplace_matches_dense_newton(case):
    X, y, hyp = SMALL[case]
    X = np.concatenate([X, X + 0.35, [2.0]])
    y = np.concatenate([y, y[::-1], [1]])
    K = _K(X, hyp)
    res = softmax_laplace(K, y, tol=1e-13)
    assert abs(res.log_z - dense_softmax_laplace(K, y)) < 1e-9


def _assert_per_class_gradient(solver, X, y, hyp):
    """Each class's (log lengthscale, log amplitude) gradient, through ``dlog_z_dK``,
    against central differences of ``solver``'s log Z (step 1e-5, relative 1e-5)."""
    res = solver(_K(X, hyp), y, tol=1e-14)

    def log_z(h):
        return solver(_K(X, h), y, tol=1e-14).log_z

    for k in range(len(hyp)):
        for j, dKk in enumerate(rbf_dK(X, *hyp[k])):
            analytic = float(np.sum(res.dlog_z_dK[k] * dKk))
            h = 1e-5
            up = [list(p) for p in hyp]
            dn = [list(p) for p in hyp]
            up[k][j] *= np.exp(h)
            dn[k][j] *= np.exp(-h)
            fd = (log_z(up) - log_z(dn)) / (2 * h)
            assert abs(analytic - fd) <= 1e-5 * max(abs(fd), 1e-2), (k, j, analytic, fd)


def test_softmax_laplace_gradient_separate_kernels():
    rng = np.random.default_rng(1)
    X = rng.uniform(-2, 2, 9)
    y = rng.integers(0, 3, 9)
    _assert_per_class_gradient(softmax_laplace, X, y, [(0.8, 2.0), (1.3, 0.7), (0.5, 3.0)])


def test_softmax_laplace_gradient_shared_kernel():
    rng = np.random.default_rng(2)
    X = rng.uniform(-2, 2, 10)
    y = rng.integers(0, 4, 10)
    ls, v = 0.9, 1.7
    res = softmax_laplace(rbf(X, ls, v), y, tol=1e-14)  # one K, shared by the 4 classes
    assert res.dlog_z_dK.shape == (4, 10, 10)
    dls, dv = rbf_dK(X, ls, v)
    for j, dK in enumerate((dls, dv)):
        analytic = float(np.sum(res.dlog_z_dK.sum(axis=0) * dK))
        h = 1e-5
        p_up, p_dn = [ls, v], [ls, v]
        p_up[j] *= np.exp(h)
        p_dn[j] *= np.exp(-h)
        up = softmax_laplace(rbf(X, *p_up), y, tol=1e-14).log_z
        dn = softmax_laplace(rbf(X, *p_dn), y, tol=1e-14).log_z
        fd = (up - dn) / (2 * h)
        assert abs(analytic - fd) <= 1e-5 * max(abs(fd), 1e-2), (j, analytic, fd)


def test_softmax_laplace_warm_start_and_loo():
    rng = np.random.default_rng(3)
    X = rng.uniform(-2, 2, 12)
    y = rng.integers(0, 3, 12)
    K = _K(X, [(1.0, 2.0)] * 3)
    cold = softmax_laplace(K, y, tol=1e-12)
    warm = softmax_laplace(K * 1.01, y, state=cold.state, tol=1e-12)
    again = softmax_laplace(K * 1.01, y, tol=1e-12)
    assert warm.n_iter < again.n_iter
    assert abs(warm.log_z - again.log_z) < 1e-10
    # LA-LOO: the softmax averaged over each cavity of the dense Laplace posterior (sites of
    # precision W_i and location W_i f_i + g_i, tests/approximations/test_multiclass_ground_truth.py), with
    # the package's draws; the LOO terms of a warm-started solve are the same
    from pymc_gpc.approximations.softmax_laplace import LOO_DRAWS

    F, W, g = dense_softmax_mode(K, y)
    h = W @ F.ravel() + g.ravel()
    want = [np.log(Softmax().expected_prob([y[i]], *(a[None] for a in observation_block(
        *gaussian_sites_posterior(K, W, h, drop=i), 3, 12, i)), size=LOO_DRAWS))[0] for i in range(12)]
    np.testing.assert_allclose(cold.loo_log_p, want, atol=1e-7)
    warm_same = softmax_laplace(K, y, state=warm.state, tol=1e-12)
    np.testing.assert_allclose(warm_same.loo_log_p, cold.loo_log_p, atol=1e-8)


# A point L-BFGS visited in the per-class Forensic Glass MAP-II fit (fold 1 of
# ``benchmarks/multiclass.py cv``): ARD + constant kernels, one per class, amplitudes from
# 0.76 to 1043.
_FGL_LOG_W = [[-3.665, 0.045, -4.336, -3.679, -4.102, -5.201, 0.869, -5.958, -4.257],
              [-3.357, -2.55, -2.813, -4.01, -3.57, -5.932, -3.249, -2.528, -3.807],
              [-4.284, -4.218, 0.635, -2.715, -4.424, -2.517, -4.144, -0.702, -4.404],
              [1.37, -3.039, -3.815, -3.254, -3.699, -2.931, -3.055, -3.047, -1.899],
              [11.192, -1.834, -2.071, 6.135, 0.44, -0.048, -2.981, -2.883, 6.939],
              [-7.197, -1.122, -3.78, -10.209, -6.558, -6.264, 0.493, -3.83, -9.978]]
_FGL_LOG_V0 = [5.956, 1.529, 3.378, -0.274, 2.038, 6.95]
_FGL_LOG_V1 = [-2.962, -2.994, -2.969, -3.313, -3.344, -2.957]


def _fgl_fold1_kernels():
    from pymc_gpc.datasets import load_fgl, stratified_folds

    data = load_fgl()
    train = stratified_folds(data.y, 10, seed=0) != 1
    X = (data.X[train] - data.X[train].mean(0)) / data.X[train].std(0)
    y = np.unique(data.y[train], return_inverse=True)[1]
    K = []
    for w, v0, v1 in zip(np.exp(_FGL_LOG_W), np.exp(_FGL_LOG_V0), np.exp(_FGL_LOG_V1)):
        Z = X * np.sqrt(w)
        sq = np.maximum((Z ** 2).sum(1)[:, None] + (Z ** 2).sum(1)[None] - 2 * Z @ Z.T, 0.0)
        K.append(v0 * np.exp(-0.5 * sq) + v1)
    return np.array(K), y


def test_softmax_laplace_stops_at_the_rounding_floor():
    """Newton's change in f stalls near 1e-8 here, above tol (1 + max|f|) = 1.4e-9: the
    iteration used to run to max_iter (100, then the Op's retry 400 more) for a mode
    found after ten; it must stop there and report convergence."""
    K, y = _fgl_fold1_kernels()
    result = softmax_laplace(K, y, with_loo=False)
    loose = softmax_laplace(K, y, tol=1e-7, with_loo=False)
    assert result.converged and result.n_iter <= 20, result.n_iter
    assert abs(result.log_z - loose.log_z) < 1e-6
    assert result.loo_log_p is None
    # a warm start from another problem's mode, worse than a = 0 here, is not kept
    far = softmax_laplace(K, y, state=type(result.state)(-50.0 * result.state.a), with_loo=False)
    assert far.converged and far.n_iter <= result.n_iter + 1
    assert abs(far.log_z - result.log_z) < 1e-6


def test_softmax_predictive_probabilities_against_quadrature():
    rng = np.random.default_rng(4)
    X = rng.uniform(-2, 2, 8)
    y = rng.integers(0, 3, 8)
    hyp = [(1.0, 2.0), (0.6, 1.0), (1.5, 0.5)]
    res = softmax_laplace(_K(X, hyp), y)
    Xs = np.linspace(-3, 3, 5)
    K_cross = np.array([v * np.exp(-0.5 * (X[:, None] - Xs[None]) ** 2 / ls**2) for ls, v in hyp])
    k_star = np.array([np.full(5, v) for _, v in hyp])
    mean, cov = res.posterior.predict(res.a, K_cross, k_star)
    p = Softmax(predictive="integrate").predict(mean.T, cov)
    # E[softmax(f*)] by a tensor Gauss-Hermite rule: the 4096 quasi-random draws are within 1e-3
    want = np.array([gaussian_expectation(softmax_probabilities, mean[:, i], cov[i]) for i in range(5)])
    np.testing.assert_allclose(p, want, atol=1e-3)
    assert np.all(np.linalg.eigvalsh(cov) > -1e-12)
    # the full covariance's diagonal blocks agree with the per-point ones
    K_ss = np.array([v * np.exp(-0.5 * (Xs[:, None] - Xs[None]) ** 2 / ls**2) for ls, v in hyp])
    _, full = res.posterior.predict(res.a, K_cross, K_ss, full_cov=True)
    for i in range(5):
        idx = np.arange(3) * 5 + i
        assert np.allclose(full[np.ix_(idx, idx)], cov[i], atol=1e-12)


@pytest.mark.parametrize("scale", [1.0, 40.0, 900.0])
def test_softmax_log_lik_matches_log_softmax(scale):
    """The compiled log p(y_i | f_i) and pi against scipy's log_softmax, also where exp(f)
    overflows (|f| up to ~3000): equal to rounding, finite, and pi's columns sum to 1."""
    from scipy.special import log_softmax

    rng = np.random.default_rng(int(scale))
    F = scale * rng.normal(size=(5, 60))
    y = rng.integers(0, 5, 60)
    lp, pi = Softmax().log_lik(y, F)
    ref = log_softmax(F, axis=0)
    assert np.all(np.isfinite(lp)) and np.all(np.isfinite(pi))
    np.testing.assert_allclose(lp, ref[y, np.arange(60)], rtol=1e-13, atol=1e-12)
    np.testing.assert_allclose(pi, np.exp(ref), rtol=1e-12, atol=1e-300)
    np.testing.assert_allclose(pi.sum(axis=0), 1.0, rtol=1e-14)
    # the compiled pass does not check bounds: the method refuses what it would misread
    for bad_y, bad_F in ((np.full(60, 5), F), (y[:50], F), (y, F[0])):
        with pytest.raises(ValueError, match="class codes in 0..c-1"):
            Softmax().log_lik(bad_y, bad_F)


def test_class_codes():
    pd = pytest.importorskip("pandas")
    codes, classes = as_class_codes(["b", "a", "c", "a"])
    assert codes.tolist() == [1, 0, 2, 0] and classes.tolist() == ["a", "b", "c"]
    codes, classes = as_class_codes(np.array([True, False, True]))
    assert codes.tolist() == [1, 0, 1] and classes.tolist() == [False, True]
    cat = pd.Series(pd.Categorical(["x", "z", "x"], categories=["z", "y", "x"]))
    codes, classes = as_class_codes(cat)
    assert codes.tolist() == [2, 0, 2] and classes.tolist() == ["z", "y", "x"]
    with pytest.raises(ValueError, match="only one class"):
        as_class_codes([3, 3, 3])
    with pytest.raises(ValueError, match="NaN"):
        as_class_codes([1.0, np.nan, 2.0])
    with pytest.raises(ValueError, match="n_classes"):
        as_class_codes([0, 1, 2], n_classes=4)


def test_softmax_laplace_bad_input():
    K = _K(np.array([0.0, 1.0]), [(1.0, 1.0)] * 3)
    with pytest.raises(ValueError, match="class code"):
        softmax_laplace(K, np.array([0, 3]))
    with pytest.raises(ValueError, match="class codes"):
        softmax_laplace(K, np.array([0.5, 1]))
    with pytest.raises(ValueError, match="multi-class likelihood"):
        softmax_laplace(K, np.array([0, 1]), likelihood=MultinomialProbit())


# Nested EP's evidence lies within EP_BOUND nats of the truth on these problems.
EP_BOUND = 0.03


def _exact(case, log_prob):
    X, y, hyp = SMALL[case]
    return brute_force_log_evidence(_K(X, hyp), y, log_prob, nodes=8 if len(X) == 2 else 40)


def test_multinomial_probit_ep_evidence_brute_force():
    ep_err, la_err = [], []
    for case, (X, y, hyp) in enumerate(SMALL):
        K = _K(X, hyp)
        res = multinomial_probit_ep(K, y, tol=1e-12)
        assert res.converged
        ep_err.append(abs(res.log_z - _exact(case, _mp_log_prob)))
        la_err.append(abs(softmax_laplace(K, y, tol=1e-12).log_z - _exact(case, softmax_log_prob)))
    assert max(ep_err) < EP_BOUND
    assert np.mean(ep_err) <= np.mean(la_err)  # EP at least as close as Laplace on average


def test_multinomial_probit_two_classes_is_binary_probit_ep():
    """c = 2: p(y = 0 | f) = E_u Phi(u + f_0 - f_1) = Phi((f_0 - f_1) / sqrt 2), so with
    g = (f_0 - f_1) / sqrt 2 ~ N(0, (K_0 + K_1) / 2) the model is binary probit on g with
    y = +1 for class 0; nested EP must give binary EP's evidence and LOO terms."""
    rng = np.random.default_rng(0)
    X = rng.uniform(-2, 2, 9)
    y = rng.integers(0, 2, 9)
    K = np.array([rbf(X, 1.0, 2.0), rbf(X, 0.6, 1.0)])
    res = multinomial_probit_ep(K, y, tol=1e-13)
    binary = ep(0.5 * (K[0] + K[1]), np.where(y == 0, 1.0, -1.0), Probit(), tol=1e-13)
    assert abs(res.log_z - binary.log_z) < 1e-8
    assert np.allclose(res.loo_log_p, binary.loo_log_p, atol=1e-8, rtol=0)
    g_mean = (res.mean[0] - res.mean[1]) / np.sqrt(2)
    assert np.allclose(g_mean, binary.mean, atol=1e-8)


def test_multinomial_probit_ep_gradient_separate_kernels():
    rng = np.random.default_rng(5)
    X = rng.uniform(-2, 2, 8)
    y = rng.integers(0, 3, 8)
    _assert_per_class_gradient(multinomial_probit_ep, X, y, [(0.8, 2.0), (1.3, 0.7), (0.5, 3.0)])


def test_multinomial_probit_ep_gradient_shared_kernel_and_warm_start():
    rng = np.random.default_rng(6)
    X = rng.uniform(-2, 2, 10)
    y = rng.integers(0, 4, 10)
    ls, v = 0.9, 1.7
    res = multinomial_probit_ep(rbf(X, ls, v), y, tol=1e-14)
    assert res.dlog_z_dK.shape == (4, 10, 10)
    for j, dK in enumerate(rbf_dK(X, ls, v)):
        analytic = float(np.sum(res.dlog_z_dK.sum(axis=0) * dK))
        h = 1e-5
        p_up, p_dn = [ls, v], [ls, v]
        p_up[j] *= np.exp(h)
        p_dn[j] *= np.exp(-h)
        fd = (multinomial_probit_ep(rbf(X, *p_up), y, tol=1e-14).log_z
              - multinomial_probit_ep(rbf(X, *p_dn), y, tol=1e-14).log_z) / (2 * h)
        assert abs(analytic - fd) <= 1e-5 * max(abs(fd), 1e-2), (j, analytic, fd)
    warm = multinomial_probit_ep(rbf(X, ls * 1.02, v), y, state=res.state, tol=1e-10)
    cold = multinomial_probit_ep(rbf(X, ls * 1.02, v), y, tol=1e-10)
    assert warm.n_iter < cold.n_iter and abs(warm.log_z - cold.log_z) < 1e-8



def test_converged_multinomial_probit_ep_returns_the_posterior_of_its_last_sweep(monkeypatch):
    """A converged solve builds one posterior per sweep (none after the last) and returns it at
    the sites it was built from: the returned state, solved with no sweep, gives the same log Z
    and gradient; the answer is within tol's square of a tight solve."""
    from pymc_gpc.approximations import multinomial_probit_ep as module

    rng = np.random.default_rng(8)
    X = rng.uniform(-2, 2, 25)
    y = rng.integers(0, 3, 25)
    K = np.array([rbf(X, 0.8, 3.0)] * 3)
    built = []
    original = module._posterior
    monkeypatch.setattr(module, "_posterior", lambda *a, **k: built.append(1) or original(*a, **k))
    res = multinomial_probit_ep(K, y, tol=1e-4, with_loo=False)
    assert res.converged and len(built) == res.n_iter
    again = multinomial_probit_ep(K, y, state=res.state, max_sweeps=0, with_loo=False)
    assert again.log_z == res.log_z and np.array_equal(again.dlog_z_dK, res.dlog_z_dK)
    tight = multinomial_probit_ep(K, y, tol=1e-12, with_loo=False)
    assert abs(res.log_z - tight.log_z) < 1e-6


def test_multinomial_probit_ep_rough_gradient_moves_only_by_rounding(monkeypatch):
    """``rough_gradient``: every sweep's H_k in single precision. The same sweeps, log Z within
    1e-9 of the exact run's (the fixed point of a rounded map; measured 1e-13), the
    hyperparameter gradient within 2e-5 relative (measured at most 1e-6), the site
    covariances within 1e-6 (measured 1e-7); and bit for bit the exact run where L_M is too
    ill-conditioned for single precision."""
    from pymc_gpc.structures.multiclass import CoupledBlockPosterior

    rng = np.random.default_rng(31)
    n = 60
    X = rng.uniform(-3, 3, n)
    y = rng.integers(0, 3, n)
    hyp = [(0.8, 4.0), (1.3, 1.0), (0.5, 9.0)]
    K = _K(X, hyp)
    exact = multinomial_probit_ep(K, y, tol=1e-8)
    rough = multinomial_probit_ep(K, y, tol=1e-8, rough_gradient=True)
    assert rough.posterior.rough_H and not exact.posterior.rough_H
    assert rough.n_iter == exact.n_iter and abs(rough.log_z - exact.log_z) < 1e-9
    assert 0 < np.max(np.abs(rough.var - exact.var)) < 1e-6 * np.max(np.abs(exact.var))
    for k in range(3):
        for dKk in rbf_dK(X, *hyp[k]):
            g_exact, g_rough = np.sum(exact.dlog_z_dK[k] * dKk), np.sum(rough.dlog_z_dK[k] * dKk)
            assert abs(g_rough - g_exact) <= 2e-5 * max(abs(g_exact), 1e-2), (k, g_rough, g_exact)
    monkeypatch.setattr(CoupledBlockPosterior, "MAX_COND_ROUGH_GRADIENT", 1.0)
    same = multinomial_probit_ep(K, y, tol=1e-8, rough_gradient=True)
    assert same.posterior.rough_H is False and same.log_z == exact.log_z
    assert np.array_equal(same.dlog_z_dK, exact.dlog_z_dK)


def test_multinomial_probit_ep_rough_sweeps_reach_the_exact_fixed_point(monkeypatch):
    """``rough_sweeps``: the first sweeps from single-precision posteriors, the last exact. The
    converged log Z and gradient equal those of a run with every sweep exact to 1e-8 (both at
    tol 1e-10, so the difference is the fast path's, not the stopping rule's)."""
    from pymc_gpc.approximations import multinomial_probit_ep as module

    rng = np.random.default_rng(41)
    n = 60
    X = rng.uniform(-3, 3, n)
    y = rng.integers(0, 4, n)
    K = _K(X, [(0.8, 4.0), (1.3, 1.0), (0.5, 9.0), (1.0, 20.0)])
    original, kinds = module._posterior, []

    def recording(*args, **kwargs):
        out = original(*args, **kwargs)
        kinds.append(bool(getattr(out[0], "rough", False)))
        return out

    monkeypatch.setattr(module, "_posterior", recording)
    fast = multinomial_probit_ep(K, y, tol=1e-10, with_loo=False, rough_sweeps=True)
    kinds_fast = list(kinds)
    kinds.clear()
    exact = multinomial_probit_ep(K, y, tol=1e-10, with_loo=False)  # the default: every sweep exact
    assert kinds_fast[0] and not kinds_fast[-1] and not any(kinds)
    assert fast.converged and exact.converged and not fast.posterior.rough
    assert abs(fast.log_z - exact.log_z) < 1e-8
    scale = np.max(np.abs(exact.dlog_z_dK))
    np.testing.assert_allclose(fast.dlog_z_dK, exact.dlog_z_dK, rtol=0, atol=1e-8 * scale)
    # warm-started from a neighbouring kernel, as along an optimiser's path
    K2 = _K(X, [(0.82, 4.2), (1.3, 1.0), (0.5, 9.5), (1.0, 19.0)])
    warm_fast = multinomial_probit_ep(K2, y, state=fast.state, tol=1e-10, with_loo=False, rough_sweeps=True)
    warm_exact = multinomial_probit_ep(K2, y, state=exact.state, tol=1e-10, with_loo=False, rough_sweeps=False)
    assert abs(warm_fast.log_z - warm_exact.log_z) < 1e-8
    np.testing.assert_allclose(warm_fast.dlog_z_dK, warm_exact.dlog_z_dK, rtol=0, atol=1e-8 * scale)


def test_multinomial_probit_ep_anderson_keeps_the_fixed_point(monkeypatch):
    """Anderson acceleration of the outer sweeps ends at the plain iteration's fixed point
    in fewer sweeps; an extrapolation with negative site precisions (forced here) is
    replaced by the map's value and the answer is unchanged."""
    from pymc_gpc.approximations import ep as ep_module
    from pymc_gpc.approximations import multinomial_probit_ep as module

    rng = np.random.default_rng(12)
    X = rng.uniform(-2, 2, 30)
    y = rng.integers(0, 3, 30)
    K = np.array([rbf(X, 0.8, 6.0)] * 3)
    fast = multinomial_probit_ep(K, y, tol=1e-10)
    monkeypatch.setattr(module, "ANDERSON_MEMORY", 0)
    plain = multinomial_probit_ep(K, y, tol=1e-10)
    assert fast.converged and plain.converged and fast.n_iter < plain.n_iter
    assert abs(fast.log_z - plain.log_z) < 1e-9
    np.testing.assert_allclose(fast.state.tau, plain.state.tau, atol=1e-7)
    monkeypatch.setattr(module, "ANDERSON_MEMORY", 5)
    monkeypatch.setattr(ep_module.Anderson, "step", lambda self, g, f: -np.abs(g) - 1.0)
    guarded = multinomial_probit_ep(K, y, tol=1e-10)
    assert guarded.converged and abs(guarded.log_z - plain.log_z) < 1e-9


def test_multinomial_probit_ep_converges_at_forensic_glass_amplitudes(monkeypatch):
    """At a point of Forensic Glass's MAP-II path (mean diag K up to 1043) the damped outer
    iteration alone oscillates (change 1.6e-2 after 100 sweeps); accelerated, it converges
    in a few dozen, to the fixed point a more heavily damped plain iteration reaches."""
    from pymc_gpc.approximations import multinomial_probit_ep as module

    K, y = _fgl_fold1_kernels()
    fast = multinomial_probit_ep(K, y, with_loo=False)
    assert fast.converged and fast.n_iter <= 40, fast.n_iter
    monkeypatch.setattr(module, "ANDERSON_MEMORY", 0)
    assert not multinomial_probit_ep(K, y, with_loo=False).converged
    slow = multinomial_probit_ep(K, y, with_loo=False, damping=0.5, max_sweeps=300)
    assert slow.converged
    assert abs(fast.log_z - slow.log_z) < 1e-6


def test_multinomial_probit_likelihood_two_classes_closed_form():
    F = np.array([[0.3, -1.2, 2.0], [0.0, 0.5, -1.0]])
    p = np.exp(MultinomialProbit().log_prob_all(F))
    F3 = np.array([[0.3, -1.2, 2.0], [0.0, 0.5, -1.0], [1.0, 0.2, 0.1]])
    for k in range(3):  # against the reference's own quadrature, c = 3
        ref = multinomial_probit_log_prob(np.full(3, k), F3, u_nodes=60)
        assert np.allclose(MultinomialProbit().log_prob_all(F3)[k], ref, atol=1e-10)
    from scipy.stats import norm

    assert np.allclose(p[0], norm.cdf((F[0] - F[1]) / np.sqrt(2)), atol=1e-12)
    assert np.allclose(p.sum(axis=0), 1.0, atol=1e-12)


# -- the block structure's algebra (structures.multiclass) ------------------------------


def _softmax_weights(rng, c, n, spread):
    F = spread * rng.normal(size=(c, n))
    e = np.exp(F - F.max(axis=0))
    return e / e.sum(axis=0)


def test_site_covariances_match_the_dense_posterior():
    """Sigma_i = the (c x c) blocks of (K^-1 + W)^-1, formed densely (cn x cn), with weights
    spanning 1e-12..1, so that both of ``_G``'s branches run (the identity and, where
    d_j K_jj < 1e-4, the product)."""
    from pymc_gpc.structures.dense import IDENTITY_MIN
    from pymc_gpc.structures.multiclass import CoupledBlockPosterior

    rng = np.random.default_rng(7)
    c, n = 3, 14
    X = rng.uniform(-2, 2, n)
    K = np.array([rbf(X, ls, v) + 0.05 * np.eye(n) for ls, v in [(0.8, 2.0), (1.3, 0.7), (0.5, 3.0)]])
    d = _softmax_weights(rng, c, n, 12.0)
    small = d * np.diagonal(K, axis1=1, axis2=2) < IDENTITY_MIN
    assert 0 < small.sum() < small.size
    S = CoupledBlockPosterior(K, d).site_covariances()
    Kbig = np.zeros((c * n, c * n))
    for k in range(c):
        Kbig[k * n:(k + 1) * n, k * n:(k + 1) * n] = K[k]
    P = d.T  # W_i = diag(pi_i) - pi_i pi_i^T, class-major
    W = np.zeros((c * n, c * n))
    for i in range(n):
        idx = np.arange(c) * n + i
        W[np.ix_(idx, idx)] = np.diag(P[i]) - np.outer(P[i], P[i])
    Sigma = np.linalg.inv(np.linalg.inv(Kbig) + W)
    for i in range(n):
        idx = np.arange(c) * n + i
        np.testing.assert_allclose(S[i], Sigma[np.ix_(idx, idx)], rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("amplitudes", [(4.0, 4.0, 4.0), (4.0, 1.0, 9.0)])
def test_block_preconditioner_solves_newton_steps(amplitudes):
    """CG preconditioned with a posterior at other weights, and at a kernel 3 % away,
    returns the exact Newton update; with too few steps it declines (None). A shared
    kernel (``BlockKernel``'s single product) and per-class kernels."""
    from pymc_gpc.structures.multiclass import BlockKernel, CoupledBlockPosterior, coupled_W_times

    rng = np.random.default_rng(8)
    c, n = 3, 40
    X = rng.uniform(-3, 3, n)
    K0 = np.array([rbf(X, 1.0, v) for v in amplitudes])
    K = np.array([rbf(X, 1.03, v) for v in amplitudes])
    u = rng.normal(size=(c, n))
    np.testing.assert_allclose(BlockKernel(K)(u), np.einsum("kij,kj->ki", K, u), rtol=1e-12, atol=1e-12)
    d0 = _softmax_weights(rng, c, n, 2.0)
    d = np.clip(d0 * np.exp(0.3 * rng.normal(size=d0.shape)), 1e-300, None)
    d /= d.sum(axis=0)
    a = rng.normal(size=(c, n))
    v = coupled_W_times(d, (K @ a[:, :, None])[:, :, 0]) + rng.normal(size=(c, n))
    exact = CoupledBlockPosterior(K, d).weights(v)
    for K_pre in (K, K0):
        pre = CoupledBlockPosterior(K_pre, d0).preconditioner()
        q = pre.solve_other_weights(BlockKernel(K), d, v, a, eps=1e-12, max_iter=60)
        assert q is not None
        np.testing.assert_allclose(q, exact, rtol=1e-8, atol=1e-8 * np.max(np.abs(exact)))
        assert pre.solve_other_weights(BlockKernel(K), d, v, a, eps=1e-12, max_iter=1) is None


def test_rough_block_posterior_serves_newton_steps_only():
    """``CoupledBlockPosterior(rough=True)``: each E_k from single-precision factors, so the
    Newton update differs from the exact one by rounding only; no evidence, gradient,
    site covariances or predictions from it; exact where single precision cannot factorise."""
    from pymc_gpc.structures.multiclass import CoupledBlockPosterior

    rng = np.random.default_rng(12)
    c, n = 3, 80
    X = rng.uniform(-3, 3, n)
    K = np.array([rbf(X, ls, v) + 1e-6 * np.eye(n) for ls, v in [(0.8, 4.0), (1.3, 1.0), (0.5, 9.0)]])
    d = _softmax_weights(rng, c, n, 2.0)
    v = rng.normal(size=(c, n))
    exact, rough = CoupledBlockPosterior(K, d), CoupledBlockPosterior(K, d, rough=True)
    assert rough.rough and not exact.rough
    gap = np.max(np.abs(rough.weights(v) - exact.weights(v))) / np.max(np.abs(exact.weights(v)))
    assert 1e-12 < gap < 1e-4  # rounded in single precision, and only that
    np.testing.assert_allclose(rough.preconditioner().R_times(v), exact.R_times(v), rtol=1e-4,
                               atol=1e-5 * np.max(np.abs(exact.R_times(v))))
    for method in (rough.half_logdet_B, rough.site_covariances, lambda: rough.kernel_gradient([], -0.5),
                   lambda: rough.predict(v, K[:, :, :5], np.ones((c, 5)))):
        with pytest.raises(RuntimeError, match="rough"):
            method()
    # B_k's condition bound far beyond MAX_COND_ROUGH (1 + 1e9 d K_ii would even round away in
    # single precision): the posterior is exact
    big = 1e9 * (1.0 + 1e-3 * K)
    assert not CoupledBlockPosterior(big, d, rough=True).rough


def test_rough_site_covariances_against_the_dense_posterior():
    """``rough_covariances``: the site covariances from single-precision factors are the
    dense (K^-1 + W)^-1's blocks to single-precision rounding (not better: they are rough),
    with coupled weights of nested EP's form (sum_k d_k != 1); no evidence or gradient."""
    from pymc_gpc.structures.multiclass import CoupledBlockPosterior

    rng = np.random.default_rng(17)
    c, n = 3, 30
    X = rng.uniform(-3, 3, n)
    K = np.array([rbf(X, ls, v) + 1e-6 * np.eye(n) for ls, v in [(0.8, 4.0), (1.3, 1.0), (0.5, 9.0)]])
    d = rng.uniform(0.05, 1.5, size=(c, n))
    rough = CoupledBlockPosterior(K, d, rough=True, rough_covariances=True)
    assert rough.rough
    S = rough.site_covariances()
    Kbig = np.zeros((c * n, c * n))
    W = np.zeros((c * n, c * n))
    for k in range(c):
        Kbig[k * n:(k + 1) * n, k * n:(k + 1) * n] = K[k]
    for i in range(n):
        idx = np.arange(c) * n + i
        W[np.ix_(idx, idx)] = np.diag(d[:, i]) - np.outer(d[:, i], d[:, i]) / d[:, i].sum()
    Sigma = np.linalg.inv(np.linalg.inv(Kbig) + W)
    exact = np.array([Sigma[np.ix_(np.arange(c) * n + i, np.arange(c) * n + i)] for i in range(n)])
    gap = np.max(np.abs(S - exact)) / np.max(np.abs(exact))
    assert 1e-10 < gap < 1e-4, gap
    for method in (rough.half_logdet_B, lambda: rough.kernel_gradient([], -0.5)):
        with pytest.raises(RuntimeError, match="rough"):
            method()
    # beyond single precision's condition bound: an exact posterior, the same blocks
    big = 1e4 * K
    assert not CoupledBlockPosterior(big, d, rough=True, rough_covariances=True).rough


def test_softmax_laplace_with_rough_newton_steps_ends_at_the_exact_mode(monkeypatch):
    """Newton steps whose CG declines use a rough posterior; the mode, evidence and gradient
    equal those of a run with every posterior exact."""
    from pymc_gpc.approximations import softmax_laplace as module

    K, y, first = _solved_three_class_problem(seed=13, n=60)
    original, asked = module.CoupledBlockPosterior, []

    def recording(K, d, rough=False, **kwargs):
        asked.append(rough)
        return original(K, d, rough=rough, **kwargs)

    monkeypatch.setattr(module, "CoupledBlockPosterior", recording)
    runs = {}
    for mode in ("rough", "exact"):
        asked.clear()
        if mode == "exact":
            monkeypatch.setattr(module, "CoupledBlockPosterior", lambda K, d, rough=False, **kw: recording(K, d, **kw))
        runs[mode] = (softmax_laplace(K * 3.0, y, state=first.state, tol=1e-10), list(asked))
    (rough, asked_rough), (exact, asked_exact) = runs["rough"], runs["exact"]
    assert True in asked_rough and asked_rough[-1] is False and not any(asked_exact)
    assert rough.converged and exact.converged
    assert abs(rough.log_z - exact.log_z) < 1e-9
    np.testing.assert_allclose(rough.mean, exact.mean, atol=1e-8)
    np.testing.assert_allclose(rough.dlog_z_dK, exact.dlog_z_dK, atol=1e-7 * np.max(np.abs(exact.dlog_z_dK)))


def test_softmax_laplace_rough_gradient_rounds_only_the_gradient():
    """``rough_gradient``: H_k = L_M^{-1} E_k and H_k^T H_k in single precision. log q and the
    mode are bit for bit the exact run's; the gradient and the site covariances differ by
    rounding only (every class's block moved, by less than 1e-5 of its largest entry); the
    hyperparameter gradient (lengthscale, by the chain rule) within 1e-5 relative."""
    rng = np.random.default_rng(21)
    c, n = 4, 90
    X = rng.uniform(-3, 3, n)
    y = rng.integers(0, c, n)
    hyp = [(0.8, 4.0), (1.3, 1.0), (0.5, 9.0), (1.0, 20.0)]
    K = np.array([rbf(X, ls, v) + 1e-8 * np.eye(n) for ls, v in hyp])
    exact, rough = softmax_laplace(K, y), softmax_laplace(K, y, rough_gradient=True)
    assert rough.posterior.rough_H and not exact.posterior.rough_H
    assert rough.log_z == exact.log_z and np.array_equal(rough.mean, exact.mean)
    scale = np.max(np.abs(exact.dlog_z_dK), axis=(1, 2))
    gap = np.max(np.abs(rough.dlog_z_dK - exact.dlog_z_dK), axis=(1, 2)) / scale
    assert np.all(gap > 0) and np.all(gap < 1e-5)
    assert 0 < np.max(np.abs(rough.var - exact.var)) < 1e-5 * np.max(np.abs(exact.var))
    # the gradient asked of a fresh posterior (H not yet formed) is the same rough one
    from pymc_gpc.structures.multiclass import CoupledBlockPosterior

    fresh = CoupledBlockPosterior(K, rough.posterior.d, rough_gradient=True)
    again = fresh.kernel_gradient([(rough.a, rough.a, 0.5)], -0.5)
    assert fresh.rough_H and np.max(np.abs(again - rough.posterior.kernel_gradient([(rough.a, rough.a, 0.5)], -0.5))) == 0
    dK = np.array([rbf_dK(X, ls, v)[0] for ls, v in hyp])  # d K_k / d lengthscale_k
    g_exact, g_rough = np.sum(exact.dlog_z_dK * dK, axis=(1, 2)), np.sum(rough.dlog_z_dK * dK, axis=(1, 2))
    np.testing.assert_allclose(g_rough, g_exact, rtol=1e-5, atol=1e-8)


def test_rough_gradient_is_exact_where_L_M_is_ill_conditioned(monkeypatch):
    """Beyond ``MAX_COND_ROUGH_GRADIENT`` the products stay double: bit for bit the exact run."""
    from pymc_gpc.structures.multiclass import CoupledBlockPosterior

    K, y, _ = _solved_three_class_problem(seed=14, n=50)
    exact = softmax_laplace(K, y)
    monkeypatch.setattr(CoupledBlockPosterior, "MAX_COND_ROUGH_GRADIENT", 1.0)
    rough = softmax_laplace(K, y, rough_gradient=True)
    assert rough.posterior.rough_H is False
    assert np.array_equal(rough.dlog_z_dK, exact.dlog_z_dK) and np.array_equal(rough.var, exact.var)


def _solved_three_class_problem(seed, n):
    """A random 3-class problem on a line with a shared RBF kernel, and its tight solve."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3, 3, n)
    y = rng.integers(0, 3, n)
    K = np.array([rbf(X, 1.0, 3.0)] * 3)
    return K, y, softmax_laplace(K, y, tol=1e-12)


def test_softmax_laplace_warm_start_steps_from_the_last_modes_f(monkeypatch):
    """A warm start from the last mode (a, f): the first Newton step is linearised at f and
    factorises a rough posterior, whose preconditioner serves the later steps' CG, so two
    posteriors are built in all (that one and the mode's). From f it takes fewer Newton
    steps than from K a alone (a state without f) at a kernel 2 % or 3x larger; with CG
    limited to one step, CG declines and a posterior is built at nearly every step. Every
    start ends where a cold solve does."""
    from pymc_gpc.approximations import softmax_laplace as module

    K, y, first = _solved_three_class_problem(seed=9, n=60)
    built = []
    original = module.CoupledBlockPosterior

    def counting(*args, **kwargs):
        built.append(kwargs.get("rough", False))
        return original(*args, **kwargs)

    monkeypatch.setattr(module, "CoupledBlockPosterior", counting)
    a_only = module.SoftmaxLaplaceState(first.state.a)
    assert first.state.f is not None
    for K_next, cg_steps in ((K * 1.02, 20), (K * 3.0, 20), (K * 1.02, 1)):
        monkeypatch.setattr(module, "_CG_STEPS", cg_steps)
        built.clear()
        warm = softmax_laplace(K_next, y, state=first.state, tol=1e-12)
        if cg_steps == 1:  # CG declines every step: a posterior at (nearly) every one
            assert len(built) > 2
        else:
            assert built == [True, False]  # the first step's (rough) and the mode's
            from_a = softmax_laplace(K_next, y, state=a_only, tol=1e-12)
            assert warm.n_iter < from_a.n_iter
            assert abs(from_a.log_z - warm.log_z) < 1e-9
        cold = softmax_laplace(K_next, y, tol=1e-12)
        assert warm.converged
        assert abs(warm.log_z - cold.log_z) < 1e-9
        np.testing.assert_allclose(warm.dlog_z_dK, cold.dlog_z_dK, atol=1e-7 * np.max(np.abs(cold.dlog_z_dK)))
        np.testing.assert_allclose(warm.mean, cold.mean, atol=1e-8)


def test_softmax_laplace_falls_back_to_zero_when_the_f_start_is_bad():
    """A first step from a wildly wrong f (worse than a = 0) is dropped: the solve restarts
    from zero and ends at the cold solve's mode."""
    K, y, first = _solved_three_class_problem(seed=9, n=60)
    from pymc_gpc.approximations.softmax_laplace import SoftmaxLaplaceState

    bad = SoftmaxLaplaceState(first.state.a, -300.0 * first.state.f)
    warm = softmax_laplace(K, y, state=bad, tol=1e-12)
    cold = softmax_laplace(K, y, tol=1e-12)
    assert warm.converged and abs(warm.log_z - cold.log_z) < 1e-9
    np.testing.assert_allclose(warm.mean, cold.mean, atol=1e-8)
    assert warm.n_iter <= cold.n_iter + 2  # the dropped step, then a cold solve (without: 13 against 5)
    with pytest.raises(ValueError, match="state's f has shape"):
        softmax_laplace(K, y, state=SoftmaxLaplaceState(first.state.a, first.state.f[:, :-1]))


def test_softmax_expected_prob_equals_the_generic_average():
    """The compiled softmax LOO average equals the base class's (all classes' probabilities
    averaged over the same draws, then normalised)."""
    from pymc_gpc.likelihoods.multiclass import MulticlassLikelihood

    rng = np.random.default_rng(10)
    for c in (2, 3, 6):
        mean = 3.0 * rng.normal(size=(30, c))
        A = rng.normal(size=(30, c, c))
        cov = A @ A.transpose(0, 2, 1) + 0.1 * np.eye(c)
        y = rng.integers(0, c, 30)
        fast = Softmax().expected_prob(y, mean, cov, size=512)
        generic = MulticlassLikelihood.expected_prob(Softmax(), y, mean, cov, size=512)
        np.testing.assert_allclose(fast, generic, rtol=1e-12)


def test_softmax_laplace_refactorises_after_a_poor_cg_step(monkeypatch):
    """A CG step that needs backtracking is not taken as convergence (backtracking can
    shrink the change in f to nothing): the preconditioner is dropped and the Newton steps
    go on from a new factorisation. Here the first CG answer points downhill (the exact
    step reversed): without the rule the solve would stop at the warm start."""
    from pymc_gpc.structures.multiclass import BlockPreconditioner

    K, y, first = _solved_three_class_problem(seed=11, n=40)
    exact_solve = BlockPreconditioner.solve_other_weights
    calls = []

    def reversed_once(self, K_times, d, v, q, eps, eta=0.0, max_iter=20):
        calls.append(1)
        a_exact = exact_solve(self, K_times, d, v, q, eps, eta, max_iter)
        return q - (a_exact - q) if len(calls) == 1 and a_exact is not None else a_exact

    monkeypatch.setattr(BlockPreconditioner, "solve_other_weights", reversed_once)
    warm = softmax_laplace(K * 1.5, y, state=first.state, tol=1e-8)
    cold = softmax_laplace(K * 1.5, y, tol=1e-8)
    assert calls and warm.converged
    assert abs(warm.log_z - cold.log_z) < 1e-8
    np.testing.assert_allclose(warm.mean, cold.mean, atol=1e-6)
