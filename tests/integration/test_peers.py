"""Agreement with independent implementations at the same fixed kernel.

* Laplace + Logistic == scikit-learn's GaussianProcessClassifier (Laplace, logistic).
* EP + Probit == GPy's EP with a Bernoulli (probit) likelihood, on Pima.
"""

import warnings

import numpy as np
import pytest

from pymc_gpc import ep, laplace
from pymc_gpc import likelihoods as L
from pymc_gpc.datasets import load_crabs, load_pima

LS = np.array([1.5, 2.0, 3.0, 2.5, 1.8, 2.2, 1.7])
AMP = 2.0


def rbf(X, ls, amp):
    D = (((X[:, None, :] - X[None, :, :]) / ls) ** 2).sum(-1)
    return amp * np.exp(-0.5 * D)


@pytest.mark.parametrize("data, ls, amp", [(load_pima(), LS, AMP), (load_crabs(), LS[:5] * 0.8, 5.0)])
def test_laplace_logistic_equals_scikit_learn(data, ls, amp):
    from sklearn.gaussian_process import GaussianProcessClassifier
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel

    X, y = data.X_train, data.y_train
    kernel = ConstantKernel(amp, "fixed") * RBF(ls, "fixed")
    gpc = GaussianProcessClassifier(kernel=kernel, optimizer=None).fit(X, (y > 0).astype(int))
    ours = laplace(rbf(X, ls, amp), y, L.Logistic())
    assert ours.log_z == pytest.approx(gpc.log_marginal_likelihood_value_, abs=1e-6)
    # and the predictive class probabilities agree too (sklearn uses the probit
    # approximation of the logistic average; we integrate exactly, so compare the
    # latent mean only, which both compute as k*^T grad log p(f^))
    Ks = amp * np.exp(-0.5 * (((X[:, None, :] - data.X_test[None, :, :]) / ls) ** 2).sum(-1))
    mean, _ = ours.predict_latent(Ks, np.full(len(data.X_test), amp))
    f_star = gpc.base_estimator_.kernel_(data.X_test, X) @ (gpc.base_estimator_.y_train_ - gpc.base_estimator_.pi_)
    np.testing.assert_allclose(mean, f_star, atol=1e-6)


def test_ep_probit_equals_gpy_on_pima():
    import GPy

    d = load_pima()
    X, y = d.X_train, d.y_train
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        kern = GPy.kern.RBF(7, variance=AMP, lengthscale=LS, ARD=True)
        m = GPy.core.GP(
            X,
            (y[:, None] > 0).astype(float),
            kernel=kern,
            likelihood=GPy.likelihoods.Bernoulli(),
            inference_method=GPy.inference.latent_function_inference.EP(ep_mode="nested"),
        )
        gpy_log_z = float(m.log_likelihood())
    ours = ep(rbf(X, LS, AMP), y, L.Probit())
    assert ours.converged
    assert ours.log_z == pytest.approx(gpy_log_z, abs=1e-4)
