"""approx="HSGP" in the GP classes (issue 62): the compiled model's evidence, gradient and
predictions against the dense computation on the same approximate kernel
K~ = Phi diag(S) Phi^T, formed explicitly (``structures.hsgp``'s basis and ``pymc_gpc.ep``
/ ``pymc_gpc.laplace`` on a dense matrix)."""

import pickle

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
import pytest

import pymc_gpc
from pymc_gpc import likelihoods as L
from pymc_gpc.approximations import registry
from pymc_gpc.structures.hsgp import LaplacianBasis
from pymc_gpc.structures.select import HSGP_BINARY, select_structure

N, M, C = 40, 60, 2.0
POINT = {"log_ls": -0.3, "log_eta": 0.2}


def _data(ordinal=False):
    rng = np.random.default_rng(0)
    X = np.sort(rng.uniform(-2.0, 2.0, N))[:, None]
    f = np.sin(2.0 * X[:, 0]) + 0.3 * rng.normal(size=N)
    if ordinal:
        return X, np.digitize(f, [-0.4, 0.4])
    return X, np.where(f > 0, 1, -1)


def _kernel(log_ls, log_eta):
    return pt.exp(2.0 * log_eta) * pm.gp.cov.ExpQuad(1, ls=pt.exp(log_ls))


def _model(cls, likelihood, ordinal=False):
    X, y = _data(ordinal)
    with pm.Model() as model:
        log_ls, log_eta = pm.Normal("log_ls", 0, 1), pm.Normal("log_eta", 0, 1)
        gp = cls(cov_func=_kernel(log_ls, log_eta), likelihood=likelihood, approx="HSGP", m=[M], c=C)
        gp.marginal_likelihood("y", X=X, y=y)
    return model, gp, X, y


def _dense_kernel(X, point, Xnew=None):
    """Phi diag(S) Phi^T at the training X (and the cross and new-input blocks), formed."""
    basis = LaplacianBasis(X, [M], c=C)
    S = basis.variances(_kernel(point["log_ls"], point["log_eta"])).eval()
    Phi = basis(X)
    if Xnew is None:
        return Phi @ (S[:, None] * Phi.T)
    Phi_new = basis(Xnew)
    return Phi @ (S[:, None] * Phi.T), Phi @ (S[:, None] * Phi_new.T), np.einsum("ij,ij,j->i", Phi_new, Phi_new, S)


def _dense_evidence(solver, likelihood, X, y, point):
    return solver(_dense_kernel(X, point), y, likelihood).log_z


def _log_prior(point):
    return sum(float(pm.logp(pm.Normal.dist(0.0, 1.0), v).eval()) for v in point.values())


CASES = [
    (pymc_gpc.MarginalEP, L.Probit(), pymc_gpc.ep, False),
    (pymc_gpc.MarginalLaplace, L.Logistic(), pymc_gpc.laplace, False),
    (pymc_gpc.MarginalEP, L.OrderedProbit(cutpoints=[-0.5, 0.5]), pymc_gpc.ep, True),
]
IDS = ["ep-probit", "laplace-logit", "ep-ordered-probit"]


@pytest.mark.parametrize("cls, likelihood, solver, ordinal", CASES, ids=IDS)
def test_logp_and_gradient_match_the_dense_approximate_kernel(cls, likelihood, solver, ordinal):
    model, gp, X, y = _model(cls, likelihood, ordinal)
    coded = gp._labels()
    logp = model.compile_logp(jacobian=False)
    dlogp = model.compile_dlogp(jacobian=False)
    value = logp(POINT) - _log_prior(POINT)
    assert value == pytest.approx(_dense_evidence(solver, likelihood, X, coded, POINT), abs=1e-8)

    h = 1e-5
    fd = []
    for name in ["log_ls", "log_eta"]:  # model.value_vars order
        up, down = dict(POINT), dict(POINT)
        up[name] += h
        down[name] -= h
        fd.append((_dense_evidence(solver, likelihood, X, coded, up)
                   - _dense_evidence(solver, likelihood, X, coded, down)) / (2 * h) - POINT[name])
    names = [v.name for v in model.value_vars]
    order = [names.index(n) for n in ["log_ls", "log_eta"]]
    np.testing.assert_allclose(dlogp(POINT)[order], fd, atol=1e-5)


def test_predict_matches_the_dense_predictive():
    model, gp, X, y = _model(pymc_gpc.MarginalEP, L.Probit())
    Xnew = np.linspace(-2.5, 2.5, 17)[:, None]
    p, mean, var = gp.predict(Xnew, point=POINT, return_latent=True)
    K, K_cross, k_diag = _dense_kernel(X, POINT, Xnew)
    ref = pymc_gpc.ep(K, gp._labels(), L.Probit())
    ref_mean, ref_var = ref.predict_latent(K_cross, k_diag)
    np.testing.assert_allclose(mean, ref_mean, atol=1e-8)
    np.testing.assert_allclose(var, ref_var, atol=1e-8)
    np.testing.assert_allclose(p, L.Probit().predict(ref_mean, ref_var, None), atol=1e-8)


def test_conditional_mean_and_covariance_match_the_dense_predictive():
    model, gp, X, y = _model(pymc_gpc.MarginalEP, L.Probit())
    Xnew = np.linspace(-2.5, 2.5, 9)[:, None]
    mean, cov = gp._build_predictive(pt.as_tensor_variable(Xnew), full_cov=True)
    values = [model.rvs_to_values[model[name]] for name in POINT]
    fn = pytensor.function(values, model.replace_rvs_by_values([mean, cov]))
    mean_v, cov_v = fn(*POINT.values())
    K, K_cross, _ = _dense_kernel(X, POINT, Xnew)
    basis = LaplacianBasis(X, [M], c=C)
    S = basis.variances(_kernel(POINT["log_ls"], POINT["log_eta"])).eval()
    Phi_new = basis(Xnew)
    K_star = Phi_new @ (S[:, None] * Phi_new.T)
    ref = pymc_gpc.ep(K, gp._labels(), L.Probit())
    R = np.linalg.inv(K + np.diag(1.0 / ref.state.tau))  # (K + S~^-1)^-1, R&W eq. 3.61
    np.testing.assert_allclose(mean_v, K_cross.T @ ref.a, atol=1e-8)
    np.testing.assert_allclose(cov_v, K_star - K_cross.T @ R @ K_cross, atol=1e-7)


def test_fit_map_runs_and_raises_the_posterior():
    model, gp, X, y = _model(pymc_gpc.MarginalEP, L.Probit())
    result = pymc_gpc.fit(model, method="map", start=POINT)
    logp = model.compile_logp()
    fitted = {name: result.point[name] for name in POINT}
    assert np.isfinite(logp(fitted))
    assert logp(fitted) > logp(POINT)
    assert np.all(np.isfinite(gp.predict(X[:5], point=result)))


def test_em_ep_is_a_clear_error():
    model, gp, X, y = _model(pymc_gpc.MarginalEP, L.Probit())
    with pytest.raises(ValueError, match="EM-EP has no bound for approx='HSGP'"):
        pymc_gpc.fit(model, method="em-ep", start=POINT)


def test_kernel_without_spectral_density_is_a_value_error_at_construction():
    cov = pm.gp.cov.ExpQuad(1, ls=1.0) * pm.gp.cov.Linear(1, c=0.0)
    with pytest.raises(ValueError, match="Prod has no power_spectral_density"):
        pymc_gpc.MarginalEP(cov_func=cov, likelihood=L.Probit(), approx="HSGP", m=[20])


@pytest.mark.parametrize("kwargs, match", [
    (dict(approx="HSGP"), "needs m"),
    (dict(approx="HSGP", m=[10, 10]), "one positive integer per active dimension"),
    (dict(approx="HSGP", m=[10], L=[3.0], c=1.5), "at most one of L"),
    (dict(m=[10]), "m: options of approx='HSGP'"),
    (dict(approx="hsgpx", m=[10]), "'FITC' or 'HSGP'"),
])
def test_bad_hsgp_options_are_value_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        pymc_gpc.MarginalEP(cov_func=pm.gp.cov.ExpQuad(1, ls=1.0), likelihood=L.Probit(), **kwargs)


def test_unserved_combinations_name_what_works():
    cov = pm.gp.cov.ExpQuad(1, ls=1.0)
    with pytest.raises(ValueError, match="approx='HSGP' is available for MarginalEP and MarginalLaplace"):
        pymc_gpc.MarginalMeanField(cov_func=cov, likelihood=L.Probit(), approx="HSGP", m=[10])
    X, y = _data()
    gp = pymc_gpc.MarginalEP(cov_func=cov, likelihood=L.Probit(), approx="HSGP", m=[10])
    with pm.Model(), pytest.raises(ValueError, match="Xu .* is for approx='FITC'"):
        gp.marginal_likelihood("y", X=X, y=y, Xu=X[:5])


def test_registry_lists_hsgp_with_fitc_retries_on_both_backends():
    for name in ("ep", "laplace"):
        for lik in (L.Probit(), L.OrderedProbit(cutpoints=[0.0, 1.0])):
            assert "hsgp" in registry.solver_for(name, lik).structures
    ep_hsgp = registry.get("ep").retry_schedule({}, "hsgp")
    assert ep_hsgp == registry.get("ep").retry_schedule({}, "fitc")
    assert [o.get("damping") for o in ep_hsgp] == [0.5, 0.25]
    assert all(o.get("method", "parallel") == "parallel" for o in ep_hsgp)
    for backend in ("numba", "jax"):  # the JAX implementation: tests/backends/test_jax_hsgp.py
        registry.check("ep", L.Probit(), "hsgp", backend=backend)


def test_structure_is_data_compared_hashed_and_pickled_by_its_basis():
    model, gp, X, y = _model(pymc_gpc.MarginalEP, L.Probit())
    s = gp.structure
    assert s != HSGP_BINARY and s.name == HSGP_BINARY.name == "hsgp"
    assert select_structure(L.Probit(), "HSGP") is HSGP_BINARY
    restored = pickle.loads(pickle.dumps(s))
    assert restored == s and hash(restored) == hash(s)
    other = HSGP_BINARY.for_training_inputs(gp, X * 2.0)
    assert other != s


def test_new_training_inputs_are_answered_at_those_inputs():
    """pm.set_data's new X keeps the basis fixed at the first X (as pm.gp.HSGP's box) and is
    answered at the new X, by neither the basis operator kept for the old X nor the Op's
    recent results at the same hyperparameters: against EP on Phi(X') diag(S) Phi(X')^T,
    formed, with Phi the basis of the first X."""
    X, y = _data()
    with pm.Model() as model:
        X_data = pm.Data("X", X)
        log_ls, log_eta = pm.Normal("log_ls", 0, 1), pm.Normal("log_eta", 0, 1)
        gp = pymc_gpc.MarginalEP(cov_func=_kernel(log_ls, log_eta), likelihood=L.Probit(), approx="HSGP", m=[M], c=C)
        gp.marginal_likelihood("y", X=X_data, y=y)
    logp = model.compile_logp(jacobian=False)
    basis = LaplacianBasis(X, [M], c=C)
    S = basis.variances(_kernel(POINT["log_ls"], POINT["log_eta"])).eval()

    def dense(Xe):
        Phi = basis(Xe)
        return pymc_gpc.ep(Phi @ (S[:, None] * Phi.T), y, L.Probit()).log_z + _log_prior(POINT)

    for Xe in (X, 0.9 * X, X):  # the same point each time: only X changes
        with model:
            pm.set_data({"X": Xe})
        np.testing.assert_allclose(logp(POINT), dense(Xe), rtol=1e-8)


def test_kept_basis_follows_inputs_changed_in_place_and_is_not_pickled():
    """The structure's basis at the training inputs, kept between evaluations, is formed anew
    for inputs whose values change (the same array changed in place included), and is not
    part of the structure's pickle; prior variances against the basis formed densely."""
    _, gp, X, _ = _model(pymc_gpc.MarginalEP, L.Probit())
    s = gp.structure
    S = s.basis.variances(_kernel(POINT["log_ls"], POINT["log_eta"])).eval()
    inputs = X.copy()
    first = s.prior_from(S, inputs)
    assert s.prior_from(S, X.copy()).basis is first.basis  # equal values: kept
    inputs *= 0.9
    Phi = LaplacianBasis(X, [M], c=C)(inputs)
    np.testing.assert_allclose(s.prior_from(S, inputs).diag(), np.einsum("ij,ij,j->i", Phi, Phi, S), rtol=1e-10)
    restored = pickle.loads(pickle.dumps(s))
    assert restored == s and "_kept_basis" not in vars(restored)
