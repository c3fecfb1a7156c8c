"""gp.py's coding of binary labels held in a ``pm.Data`` container (issue 58's surviving fault
``pt.gt`` -> ``pt.ge``, which codes the class 0 as +1 too): the evidence and the predictions
of a model whose labels are a container equal those of the same model with the labels as
an array (coded by ``validation.as_signed_labels``, another path)."""

import numpy as np
import pymc as pm
import pytensor.tensor as pt

import pymc_gpc
from pymc_gpc.likelihoods import Probit


def _model(X, y, container):
    with pm.Model() as model:
        labels = pm.Data("labels", y) if container else y
        log_ls = pm.Normal("log_ls", 0.0, 1.0)
        gp = pymc_gpc.MarginalEP(cov_func=pm.gp.cov.ExpQuad(2, ls=pt.exp(log_ls)), likelihood=Probit())
        gp.marginal_likelihood("y", X=X, y=labels)
    return model, gp


def test_container_labels_coded_as_array_labels():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(12, 2))
    y = (X[:, 0] + 0.5 * rng.normal(size=12) > 0).astype(int)
    assert 0 < y.sum() < y.size
    Xnew = rng.normal(size=(3, 2))
    values = []
    for container in (True, False):
        model, gp = _model(X, y, container)
        point = model.initial_point()
        values.append((model.compile_logp()(point), gp.predict(Xnew, point=point)))
    (lp_c, p_c), (lp_a, p_a) = values
    np.testing.assert_allclose(lp_c, lp_a, rtol=1e-9)
    np.testing.assert_allclose(np.asarray(p_c), np.asarray(p_a), rtol=1e-9)
