"""Multi-class classifiers in PyMC models: the potential, its gradient, predictions,
LOO, point estimates and the errors (MarginalLaplace + Softmax, MarginalEP + MultinomialProbit)."""

import numpy as np
import pandas as pd
import pymc as pm
import pytensor
import pytensor.tensor as pt
import pytest

import pymc_gpc
from pymc_gpc.likelihoods import MultinomialProbit, Probit, Softmax

from ..reference.multiclass_reference import (
    gaussian_expectation,
    multinomial_probit_probabilities,
    rbf,
    softmax_probabilities,
)


def _quadrature(lik, mean, cov):
    """E[p(y* = k | f*)] for every point (mean (c, m), cov (m, c, c)) by Gauss-Hermite: (m, c)."""
    prob = softmax_probabilities if lik is Softmax else multinomial_probit_probabilities
    return np.array([gaussian_expectation(prob, mean[:, i], cov[i], nodes=16) for i in range(mean.shape[1])])


def _data(n=24, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3, 3, n)
    y = np.digitize(X + 0.4 * rng.standard_normal(n), [-1.0, 1.0])  # 3 ordered classes
    return X, np.array(["low", "mid", "high"])[y], y


SETUPS = [(pymc_gpc.MarginalLaplace, Softmax, pymc_gpc.softmax_laplace),
          (pymc_gpc.MarginalEP, MultinomialProbit, pymc_gpc.multinomial_probit_ep)]


def _model(cls, lik, X, labels, shared):
    with pm.Model() as model:
        log_ls = pm.Normal("log_ls", 0.0, 1.0, shape=1 if shared else 3)
        log_v = pm.Normal("log_v", 0.5, 1.0)
        if shared:
            cov = pt.exp(log_v) * pm.gp.cov.ExpQuad(1, ls=pt.exp(log_ls[0]))
        else:
            cov = [pt.exp(log_v) * pm.gp.cov.ExpQuad(1, ls=pt.exp(log_ls[k])) for k in range(3)]
        gp = cls(cov_func=cov, likelihood=lik())
        gp.marginal_likelihood("y", X=X, y=labels)
    return model, gp


@pytest.mark.parametrize("setup", range(2))
@pytest.mark.parametrize("shared", [True, False])
def test_potential_value_and_gradient(setup, shared):
    cls, lik, solver = SETUPS[setup]
    X, labels, _ = _data()
    model, gp = _model(cls, lik, X, labels, shared)
    assert isinstance(gp, cls) and gp.classes.tolist() == ["high", "low", "mid"]
    point = {"log_ls": np.array([0.2] if shared else [0.2, -0.3, 0.5]), "log_v": np.array(0.7)}
    ls = np.exp(point["log_ls"])
    K = np.array([np.exp(0.7) * rbf(X, ls[0] if shared else ls[k], 1.0, jitter=0) + 1e-6 * np.eye(len(X))
                  for k in range(3)])
    codes = np.searchsorted(gp.classes, labels)
    expected = solver(K, codes, tol=1e-12).log_z
    pot = model.compile_logp(vars=model.potentials, jacobian=False)
    assert abs(float(pot(point)) - expected) < 1e-3  # sampling tolerance
    # gradient of the whole model's logp against central differences
    logp = model.compile_logp()
    dlogp = model.compile_dlogp()
    ip = {"log_ls": point["log_ls"], "log_v": point["log_v"]}
    g = dlogp(ip)
    fd, h = [], 1e-5
    for name in ("log_ls", "log_v"):
        for j in range(np.size(ip[name])):
            up = {k: np.array(v, dtype=float) for k, v in ip.items()}
            dn = {k: np.array(v, dtype=float) for k, v in ip.items()}
            np.reshape(up[name], -1)[j] += h
            np.reshape(dn[name], -1)[j] -= h
            fd.append((logp(up) - logp(dn)) / (2 * h))
    assert np.allclose(g, fd, rtol=2e-3, atol=2e-3), (g, fd)  # the Op runs at the sampling tolerance


@pytest.mark.parametrize("key, cls, lik", [("laplace", pymc_gpc.MarginalLaplace, Softmax),
                                           ("ep", pymc_gpc.MarginalEP, MultinomialProbit)])
def test_sampler_asks_for_a_rough_gradient_and_fit_does_not(monkeypatch, key, cls, lik):
    """The Op's solves in ``pymc_gpc.sample``'s sampler (graphs compiled within
    ``sampling_tolerance()``) ask ``softmax_laplace`` and ``multinomial_probit_ep`` for the
    rough gradient (the registry's ``sampling_defaults``); ``model.compile_dlogp()`` elsewhere, the gradients
    ``pymc_gpc.fit``'s optimiser uses and predictions are exact."""
    import dataclasses

    from pymc_gpc.approximations.registry import APPROXIMATIONS
    from pymc_gpc.ops.rewrites import sampling_tolerance

    entry = APPROXIMATIONS[key]
    original, asked = entry.solvers["multiclass"].solve, []

    def recording(*args, **kwargs):
        # (rough?, called by fit or predict: they pass with_grad, the Op does not)
        asked.append((kwargs.get("rough_gradient", False), "with_grad" in kwargs))
        return original(*args, **kwargs)

    solvers = {**entry.solvers, "multiclass": dataclasses.replace(entry.solvers["multiclass"], solve=recording)}
    monkeypatch.setitem(APPROXIMATIONS, key, dataclasses.replace(entry, solvers=solvers))
    X, labels, _ = _data()
    model, gp = _model(cls, lik, X, labels, shared=True)
    point = {"log_ls": np.array([0.2]), "log_v": np.array(0.7)}
    model.compile_dlogp()(point)  # a third-party consumer: the engine's accuracy
    assert asked and not any(rough for rough, _ in asked)
    asked.clear()
    with sampling_tolerance():
        sampler_dlogp = model.compile_dlogp()
    sampler_dlogp(point)
    assert asked and all(rough and not direct for rough, direct in asked)
    asked.clear()
    with model:
        fit = pymc_gpc.fit(method="map", maxiter=5, progressbar=False)
    optimiser = [rough for rough, direct in asked if direct]
    assert len(optimiser) >= 3 and not any(optimiser)
    asked.clear()
    gp.predict(X[:3], point=fit.point, model=model)
    assert asked and not any(rough for rough, _ in asked)


@pytest.mark.parametrize("setup", range(2))
def test_predict_loo_and_fit(setup):
    cls, lik, solver = SETUPS[setup]
    X, labels, y = _data(30, seed=1)
    model, gp = _model(cls, lik, X, labels, shared=False)
    with model:
        fit = pymc_gpc.fit(method="map")
        type2 = pymc_gpc.fit(method="type2")
    assert type2.converged and type2.log_evidence >= fit.log_evidence - 1e-6  # type-II maximises it
    Xs = np.array([-2.5, 0.0, 2.5])
    p = gp.predict(Xs, point=fit.point, model=model)
    cols = list(gp.classes)
    assert np.argmax(p[0]) == cols.index("low") and np.argmax(p[1]) == cols.index("mid")
    assert np.argmax(p[2]) == cols.index("high")
    p2, mean, cov = gp.predict(Xs, point=fit.point, model=model, return_latent=True)
    np.testing.assert_array_equal(p2, p)
    # the latent predictive is the engine's at the fit's kernels (NumPy), and p the likelihood
    # averaged over it (tensor Gauss-Hermite; the package's quasi-random draws within 2e-3)
    ls, v = np.exp(fit.point["log_ls"]), np.exp(fit.point["log_v"])
    K = np.array([v * rbf(X, ls[k], 1.0, jitter=0) + 1e-6 * np.eye(len(X)) for k in range(3)])
    K_cross = np.array([v * np.exp(-0.5 * (X[:, None] - Xs[None, :]) ** 2 / ls[k] ** 2) for k in range(3)])
    res = solver(K, np.searchsorted(gp.classes, labels), tol=1e-12)
    m_ref, S_ref = res.posterior.predict(res.a, K_cross, np.full((3, 3), v))
    np.testing.assert_allclose(mean, m_ref, atol=1e-5)
    np.testing.assert_allclose(cov, S_ref, atol=1e-5)
    if lik is Softmax:  # the softmax's default predictive: the plug-in at the latent mean
        np.testing.assert_allclose(p, softmax_probabilities(mean).T, atol=1e-12)
    else:  # the multinomial probit's: averaged over the latent predictive
        np.testing.assert_allclose(p, _quadrature(lik, mean, cov), atol=2e-3)
    # the MAP point's evidence gradient vanishes (prior included): fit converged
    assert np.isfinite(fit.log_evidence)
    # fixed draws near the MAP point stand in for a posterior sample (what is checked below
    # is the handling of draws, not the sampler)
    import arviz as az

    rng = np.random.default_rng(5)
    n_draws = 30  # az.loo smooths the tail of at least 5 of them (n / 5)
    idata = az.from_dict({"posterior": {
        "log_ls": (fit.point["log_ls"] + 0.1 * rng.standard_normal((1, n_draws, 3))),
        "log_v": (fit.point["log_v"] + 0.1 * rng.standard_normal((1, n_draws)))}})
    pymc_gpc.add_log_likelihood(idata, model)
    loo = az.loo(idata)
    assert np.isfinite(float(loo.elpd))
    assert idata["log_likelihood"]["y"].shape == (1, n_draws, 30)
    pi, means, covs = gp.predict(Xs, idata=idata, model=model, max_draws=5, return_latent=True)
    assert len(means) == len(covs) == 5
    if lik is Softmax:  # the average over the draws of the plug-in at each draw's latent mean
        np.testing.assert_allclose(pi, np.mean([softmax_probabilities(m).T for m in means], axis=0), atol=1e-12)
    else:  # the average over the draws of the likelihood averaged over each draw's latent predictive
        np.testing.assert_allclose(pi, np.mean([_quadrature(lik, m, S) for m, S in zip(means, covs)], axis=0),
                                   atol=2e-3)
    with model:
        gp.conditional("fstar", Xs)
        pp = pm.sample_posterior_predictive(idata.sel(draw=slice(0, 3)), var_names=["fstar"],
                                            random_seed=2, progressbar=False)
    assert pp.posterior_predictive["fstar"].shape[-2:] == (3, 3)


def test_labels_of_every_kind():
    X = np.linspace(-2, 2, 9)
    for labels in ([0, 1, 2] * 3, np.array(list("abc") * 3),
                   pd.Series(pd.Categorical(list("abc") * 3, categories=["c", "b", "a"]))):
        with pm.Model():
            gp = pymc_gpc.MarginalLaplace(cov_func=pm.gp.cov.ExpQuad(1, ls=1.0), likelihood=Softmax())
            gp.marginal_likelihood("y", X=X, y=labels)
        assert len(gp.classes) == 3
    with pm.Model():
        gp = pymc_gpc.MarginalLaplace(cov_func=pm.gp.cov.ExpQuad(1, ls=1.0), likelihood=Softmax())
        gp.marginal_likelihood("y", X=X[:4], y=[True, False, True, True])
    assert gp.classes.tolist() == [False, True]


def test_errors():
    X = np.linspace(-2, 2, 9)
    cov = pm.gp.cov.ExpQuad(1, ls=1.0)
    with pm.Model():
        gp = pymc_gpc.MarginalEP(cov_func=cov, likelihood=Probit())
        with pytest.raises(ValueError, match="found values .*Softmax"):
            gp.marginal_likelihood("y", X=X, y=np.arange(9) % 3)
    with pytest.raises(ValueError, match="MarginalEP cannot integrate out the multi-class likelihood Softmax"):
        pymc_gpc.MarginalEP(cov_func=cov, likelihood=Softmax())
    with pytest.raises(ValueError, match="MarginalLaplace cannot"):
        pymc_gpc.MarginalLaplace(cov_func=cov, likelihood=MultinomialProbit())
    with pytest.raises(ValueError, match="MarginalMeanField cannot"):
        pymc_gpc.MarginalMeanField(cov_func=cov, likelihood=Softmax())
    with pm.Model():
        gp = pymc_gpc.MarginalLaplace(cov_func=[cov, cov], likelihood=Softmax())
        with pytest.raises(ValueError, match="2 covariances but y holds 3 classes"):
            gp.marginal_likelihood("y", X=X, y=np.arange(9) % 3)
    with pm.Model():
        gp = pymc_gpc.MarginalLaplace(cov_func=cov, likelihood=Softmax())
        with pytest.raises(ValueError, match="only one class"):
            gp.marginal_likelihood("y", X=X, y=np.zeros(9))
        with pytest.raises(ValueError, match="marginal_likelihood"):
            gp.predict(X, point={})


@pytest.mark.parametrize("cls, lik", [(pymc_gpc.MarginalLaplace, Softmax), (pymc_gpc.MarginalEP, MultinomialProbit)])
def test_several_classes_are_the_likelihood_not_a_class(cls, lik):
    """The class built is the class named (no subclass swapped in), its approximation the
    registry's entry; a shared kernel and a list of c kernels stack as (c, n, n), the shared one
    repeated, against the kernels computed directly."""
    X, labels, _ = _data(9)
    with pm.Model():
        gp = cls(cov_func=pm.gp.cov.ExpQuad(1, ls=1.3), likelihood=lik())
        gp.marginal_likelihood("y", X=X, y=labels)
    assert type(gp) is cls and gp.approximation == ("laplace" if lik is Softmax else "ep")
    assert gp.several_classes and gp.n_classes == 3 and list(gp.classes) == ["high", "low", "mid"]
    K = rbf(X, 1.3, 1.0, jitter=0.0)
    np.testing.assert_allclose(gp.class_kernels(pt.as_tensor(X[:, None])).eval(),
                               np.stack([K + gp.jitter * np.eye(9)] * 3), atol=1e-12)
    covs = [pm.gp.cov.ExpQuad(1, ls=ls) for ls in (0.5, 1.0, 2.0)]
    with pm.Model():
        gp = cls(cov_func=covs, likelihood=lik())
        gp.marginal_likelihood("y", X=X, y=labels)
    expected = [rbf(X, ls, 1.0, jitter=0.0) + gp.jitter * np.eye(9) for ls in (0.5, 1.0, 2.0)]
    np.testing.assert_allclose(gp.class_kernels(pt.as_tensor(X[:, None])).eval(), np.stack(expected), atol=1e-12)


def test_cli_multiclass_confusion_matrix(tmp_path):
    from pymc_gpc.cli.command import main
    from pymc_gpc.datasets import load_fgl

    data = load_fgl()
    keep = np.isin(data.y, ["WinF", "WinNF", "Head"])
    X, y = data.X[keep], data.y[keep]
    rng = np.random.default_rng(0)
    idx = rng.permutation(len(y))
    header = ",".join(data.feature_names) + ",type\n"
    for name, rows in (("train.csv", idx[:90]), ("test.csv", idx[90:130])):
        body = "".join(",".join(f"{v:g}" for v in X[i]) + f",{y[i]}\n" for i in rows)
        (tmp_path / name).write_text(header + body)
    code = main([str(tmp_path / "train.csv"), "--target", "type", "--test", str(tmp_path / "test.csv"),
                 "--method", "map", "--approximation", "laplace", "--no-progress", "--out", str(tmp_path / "out")])
    assert code == 0
    report = (tmp_path / "out" / "report.md").read_text()
    assert "Confusion matrix" in report and "| Head |" in report
    errors = int(report.split("test errors: ")[1].split(" /")[0])
    assert errors <= 14  # 40 test fragments of 3 classes; the majority class alone gets ~21 wrong
    header = (tmp_path / "out" / "predictions.csv").read_text().splitlines()[0]
    assert header.startswith("row,p_Head,p_WinF,p_WinNF,predicted")


def test_confusion_matrix_and_report_count_by_hand():
    """``gp.models.confusion_matrix`` and ``multiclass_report`` on six labels counted by hand."""
    from pymc_gpc.gp.models import confusion_matrix, multiclass_report

    classes = ["a", "b", "c"]
    y = ["a", "a", "b", "c", "c", "c"]
    p = np.array([[0.7, 0.2, 0.1], [0.2, 0.5, 0.3], [0.1, 0.8, 0.1], [0.2, 0.2, 0.6], [0.5, 0.1, 0.4],
                  [0.1, 0.1, 0.8]])
    pred = np.array(classes)[p.argmax(axis=1)]
    np.testing.assert_array_equal(confusion_matrix(classes, y, pred), [[1, 1, 0], [0, 1, 0], [1, 0, 2]])
    lines = multiclass_report(p, classes, y)
    assert lines[0] == "- test errors: 2 / 6 (33.3 %)"
    expected = np.mean(np.log([0.7, 0.2, 0.8, 0.6, 0.4, 0.8]))
    assert lines[1] == f"- mean test log predictive: {expected:.4f}"
    assert lines[-1] == "| c | 1 | 0 | 2 |"
    assert multiclass_report(p, classes, ["a", "a", "b", "c", "c", "z"]) == [
        "- test labels not seen in training: ['z'] (counted as errors)"]


@pytest.mark.slow  # a sampling run: CI only, not the between-edits tier
def test_nuts_recovers_the_grid_posterior():
    """NUTS over (log lengthscale, log amplitude) of a softmax-Laplace model against the
    exact posterior of the same potential, by quadrature on a 2-D grid (a reference with
    no Monte Carlo error): means within 4 Monte Carlo standard errors, sds within 15 %."""
    import arviz as az

    from pymc.gp.util import JITTER_DEFAULT
    from scipy.stats import norm

    X, labels, _ = _data(15, seed=3)
    with pm.Model() as model:
        log_ls = pm.Normal("log_ls", 0.0, 1.0)
        log_v = pm.Normal("log_v", 0.5, 1.0)
        cov = pt.exp(log_v) * pm.gp.cov.ExpQuad(1, ls=pt.exp(log_ls))
        gp = pymc_gpc.MarginalLaplace(cov_func=cov, likelihood=Softmax())
        gp.marginal_likelihood("y", X=X, y=labels)
        idata = pm.sample(draws=500, tune=300, chains=2, cores=1, random_seed=3, progressbar=False,
                          compute_convergence_checks=False)
    codes = np.searchsorted(gp.classes, labels)
    a = np.linspace(-3.0, 3.0, 41)
    b = np.linspace(-1.5, 5.5, 41)
    logpost = np.empty((a.size, b.size))
    for i, la in enumerate(a):
        for j, lv in enumerate(b):
            K = np.exp(lv) * rbf(X, np.exp(la), 1.0, jitter=0) + JITTER_DEFAULT * np.eye(len(X))
            logpost[i, j] = (pymc_gpc.softmax_laplace(K, codes).log_z + norm.logpdf(la, 0, 1)
                             + norm.logpdf(lv, 0.5, 1))
    w = np.exp(logpost - logpost.max())
    w /= w.sum()
    grid = {"log_ls": (a, w.sum(axis=1)), "log_v": (b, w.sum(axis=0))}
    summary = az.summary(idata, var_names=["log_ls", "log_v"])
    assert int(idata.sample_stats["diverging"].sum()) == 0
    for name, (x, px) in grid.items():
        mean = float(px @ x)
        sd = float(np.sqrt(px @ (x - mean) ** 2))
        row = summary.loc[name]
        assert abs(row["mean"] - mean) < 4 * row["mcse_mean"] + 0.01, (name, row["mean"], mean)
        assert abs(row["sd"] / sd - 1) < 0.15, (name, row["sd"], sd)


def test_op_warns_and_fails_cleanly():
    """Not converged: the value is used with status 1 and a warning naming the point (the
    warning path handles a (c, n, n) K); a K that is not positive definite: -inf, status 2."""
    from pymc_gpc.ops import ApproximationFailedWarning, ApproxMarginalOp
    from pymc_gpc.structures.select import DENSE_MULTICLASS

    X, labels, y = _data(12)
    K = np.array([rbf(X, 1.0, 4.0)] * 3)
    op = ApproxMarginalOp("laplace", Softmax, (("max_iter", 1),), structure=DENSE_MULTICLASS)
    Kv = pt.dtensor3("K")
    out = op(Kv, pt.zeros((0,)), y.astype(float))
    fn = pytensor.function([Kv], [out[0], out[5]])
    with pytest.warns(ApproximationFailedWarning, match="did not converge"):
        value, status = fn(K)
    assert np.isfinite(value) and int(status) == 1
    bad = K.copy()
    bad[1] = -bad[1]
    value, status = fn(bad)
    assert value == -np.inf and int(status) == 2


@pytest.mark.parametrize("setup", range(2))
def test_predict_over_draws_equals_cold_solves_per_draw(setup):
    """Batched, warm-started prediction over draws (``prediction.latent_predictions``)
    against a cold solve with the NumPy kernel at each draw: latent means and per-point
    c x c covariances to 1e-6, the averaged probabilities to 1e-6."""
    cls, lik, solver = SETUPS[setup]
    X, labels, _ = _data(20, seed=3)
    model, gp = _model(cls, lik, X, labels, shared=False)
    rng = np.random.default_rng(4)
    draws = [{"log_ls": rng.normal(0.0, 0.2, 3), "log_v": np.array(rng.normal(0.5, 0.2))} for _ in range(4)]
    import arviz as az

    idata = az.from_dict({"posterior": {k: np.array([[d[k] for d in draws]]) for k in ("log_ls", "log_v")}})
    Xs = np.array([-2.0, 0.3, 2.2])
    p, means, covs = gp.predict(Xs, idata=idata, model=model, return_latent=True, progressbar=False)
    codes = np.searchsorted(gp.classes, labels)
    probs = []
    for s, d in enumerate(draws):
        ls, v = np.exp(d["log_ls"]), np.exp(d["log_v"])
        K = np.array([v * rbf(X, ls[k], 1.0, jitter=0) + 1e-6 * np.eye(len(X)) for k in range(3)])
        K_cross = np.array([v * np.exp(-0.5 * (X[:, None] - Xs[None, :]) ** 2 / ls[k] ** 2) for k in range(3)])
        res = solver(K, codes, tol=1e-12)
        m, S = res.posterior.predict(res.a, K_cross, np.full((3, 3), v))
        np.testing.assert_allclose(means[s], m, atol=1e-6)
        np.testing.assert_allclose(covs[s], S, atol=1e-6)
        probs.append(gp.likelihood.predict(m.T, S))
    np.testing.assert_allclose(p, np.mean(probs, axis=0), atol=1e-6)


def test_gene_expression_linear_kernel_with_more_genes_than_samples():
    """The bundled dslabs tissue data (500 genes, 7 tissues) with a linear kernel on 21
    centred training samples (rank 20 < n: only the constant term makes K regular):
    softmax Laplace MAP-II must classify the 168 held-out samples nearly as well as the
    nearest-centroid rule on the same genes, with probabilities that sum to one."""
    from pymc_gpc.datasets import load_tissue_gene_expression

    data = load_tissue_gene_expression()
    assert data.X.shape == (189, 500) and len(data.feature_names) == 500
    classes, counts = np.unique(data.y, return_counts=True)
    assert dict(zip(classes, counts)) == {"cerebellum": 38, "colon": 34, "endometrium": 15, "hippocampus": 31,
                                          "kidney": 39, "liver": 26, "placenta": 6}
    rng = np.random.default_rng(0)
    train = np.zeros(189, dtype=bool)
    for cls in classes:
        train[rng.permutation(np.flatnonzero(data.y == cls))[:3]] = True
    mean = data.X[train].mean(axis=0)
    Xtr, Xte = data.X[train] - mean, data.X[~train] - mean
    with pm.Model() as model:
        log_v0 = pm.Normal("log_v0", -3.0, 3.0)
        log_v1 = pm.Normal("log_v1", -3.0, 3.0)
        cov = pt.exp(log_v0) * pm.gp.cov.Linear(500, c=0.0) + pm.gp.cov.Constant(pt.exp(log_v1))
        gp = pymc_gpc.MarginalLaplace(cov_func=cov, likelihood=Softmax())
        gp.marginal_likelihood("y", X=Xtr, y=data.y[train])
        fit = pymc_gpc.fit(method="map", progressbar=False)
    assert np.isfinite(fit.log_evidence) and fit.converged
    p, mean, cov = gp.predict(Xte, point=fit.point, return_latent=True)
    # p is the softmax of the latent predictive mean (the default); its average over the
    # latent predictive, checked by plain Monte Carlo with independent draws (7 classes,
    # 50000 per point: standard error below 2.3e-3)
    np.testing.assert_allclose(p, softmax_probabilities(mean).T, atol=1e-12)
    integrated = gp.likelihood.predict(mean.T, cov, predictive="integrate")
    z = np.random.default_rng(1).standard_normal((50000, 7))
    for i in range(len(Xte)):
        draws = mean[:, i] + z @ np.linalg.cholesky(cov[i] + 1e-12 * np.eye(7)).T
        e = np.exp(draws - draws.max(axis=1, keepdims=True))
        np.testing.assert_allclose(integrated[i], (e / e.sum(axis=1, keepdims=True)).mean(axis=0), atol=0.012)
    errors = int(np.sum(gp.classes[np.argmax(p, axis=1)] != data.y[~train]))
    centroids = np.array([Xtr[data.y[train] == c].mean(axis=0) for c in gp.classes])
    nearest = gp.classes[np.argmin(((Xte[:, None, :] - centroids) ** 2).sum(axis=-1), axis=1)]
    centroid_errors = int(np.sum(nearest != data.y[~train]))
    assert errors <= centroid_errors + 3 and errors <= 17  # 10 % of 168


def _mixed_ard(A, w, v0, v1):
    """v0 exp(-sum_m w_m (a_m - b_m)^2 / 2) + v1 written out in NumPy."""
    d2 = (((A[:, None, :] - A[None]) ** 2) * w).sum(-1)
    return v0 * np.exp(-0.5 * d2) + v1


def test_shared_lengthscales_per_class_amplitudes():
    """ard_kernels(shared="lengthscales") / ard_classifier(per_class="amplitudes"): one log_w
    (dims "feature"), per-class log_v0 and log_v1; each class's kernel is the NumPy formula, and
    the evidence equals the per-class model's at a point whose log_w rows are all the same."""
    rng = np.random.default_rng(3)
    X = rng.normal(size=(18, 2))
    y = np.argmax(X @ rng.normal(size=(2, 3)) + 0.3 * rng.normal(size=(18, 3)), axis=1)
    w, v0, v1 = np.array([0.7, 2.0]), np.array([0.5, 1.5, 3.0]), np.array([0.1, 0.2, 0.05])
    with pm.Model() as model:
        covs = pymc_gpc.kernels.ard_kernels(2, 3, shared="lengthscales")
    assert model.named_vars_to_dims == {"log_w": ("feature",), "log_v0": ("class",), "log_v1": ("class",)}
    values = {model["log_w"]: np.log(w), model["log_v0"]: np.log(v0), model["log_v1"]: np.log(v1)}
    for k, cov in enumerate(covs):
        np.testing.assert_allclose(cov(X).eval(values), _mixed_ard(X, w, v0[k], v1[k]), rtol=1e-12)
    shared, _ = pymc_gpc.ard_classifier(X, y, approximation="laplace", per_class="amplitudes", inducing=None)
    per_class, _ = pymc_gpc.ard_classifier(X, y, approximation="laplace", per_class=True, inducing=None)
    assert {k: v.shape for k, v in shared.initial_point().items()} == {"log_w": (2,), "log_v0": (3,), "log_v1": (3,)}
    point = {"log_w": np.log(w), "log_v0": np.log(v0), "log_v1": np.log(v1)}
    evidence = [m.compile_fn(m.replace_rvs_by_values([m["y"]])[0], point_fn=True)(p)
                for m, p in ((shared, point), (per_class, {**point, "log_w": np.tile(np.log(w), (3, 1))}))]
    assert np.isfinite(evidence[0]) and evidence[0] < 0
    np.testing.assert_allclose(evidence[0], evidence[1], rtol=1e-10)
    with pytest.raises(ValueError, match="shared must be"):
        with pm.Model():
            pymc_gpc.kernels.ard_kernels(2, 3, shared="amplitudes")
    with pytest.raises(ValueError, match="per_class must be"):
        pymc_gpc.ard_classifier(X, y, approximation="laplace", per_class="lengthscales")
