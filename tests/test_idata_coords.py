"""idata.py keeps only model parameters and their coordinates in the posterior (issue 58's
surviving fault: the posterior kept a stray ``y_obs`` coordinate when the unused
coordinates were no longer dropped after the per-observation LOO terms moved out)."""

import numpy as np
import pymc as pm
import pytensor.tensor as pt
import xarray as xr

import pymc_gpc
from pymc_gpc.likelihoods import Probit


def test_posterior_has_no_observation_coordinate():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(10, 2))
    y = (X[:, 0] > 0).astype(int)
    with pm.Model() as model:
        log_ls = pm.Normal("log_ls", 0.0, 1.0)
        gp = pymc_gpc.MarginalEP(cov_func=pm.gp.cov.ExpQuad(2, ls=pt.exp(log_ls)), likelihood=Probit())
        gp.marginal_likelihood("y", X=X, y=y)
    draws = (1, 4)
    post = xr.Dataset(
        {"log_ls": (("chain", "draw"), rng.normal(size=draws)),
         "y_loo": (("chain", "draw", "y_obs"), -rng.uniform(0.1, 1.0, size=(*draws, 10))),
         "y_n_iter": (("chain", "draw"), np.full(draws, 5)),
         "y_status": (("chain", "draw"), np.zeros(draws, int))},
        coords={"chain": [0], "draw": np.arange(4), "y_obs": np.arange(10)})
    idata = xr.DataTree.from_dict({"posterior": post})
    pymc_gpc.add_log_likelihood(idata, model)
    posterior = idata["posterior"].to_dataset()
    assert sorted(posterior.data_vars) == ["log_ls"]
    assert set(posterior.coords) == {"chain", "draw"}
    assert idata["log_likelihood"]["y"].shape == (1, 4, 10)
