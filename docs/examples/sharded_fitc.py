"""NUTS on a FITC classifier with the training points split over several devices.

The FITC evidence and its gradient run on PyMC's JAX sampler (numpyro), with the n
training points split over every device JAX sees (``pymc_gpc.backends.jax.sharding``).
On a machine without accelerators the script asks XLA for 4 CPU devices, so it runs
anywhere (slowly: the point is the set-up, not the speed)::

    python docs/examples/sharded_fitc.py [n] [m]

Several hosts: start this script on every host with ``jax.distributed.initialize()``
(coordinator address, number of processes, process id; automatic on Cloud TPU and SLURM)
before the first use of jax, below; ``shard_rows()`` then spans the devices of all hosts.
"""

import os
import sys

if "XLA_FLAGS" not in os.environ:  # CPU only: 4 host devices (must be set before jax is imported)
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"

import jax  # noqa: E402
import numpy as np  # noqa: E402
import pymc as pm  # noqa: E402
import pytensor.tensor as pt  # noqa: E402

import pymc_gpc  # noqa: E402
from pymc_gpc.backends.jax.sharding import shard_rows  # noqa: E402

# jax.distributed.initialize()  # several hosts: uncomment (see the module docstring)


def main(n=4000, m=50):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(n, 2))
    y = np.where(np.sin(2 * X[:, 0]) + X[:, 1] + 0.3 * rng.normal(size=n) > 0, 1, -1)
    with pm.Model() as model:
        log_ls = pm.Normal("log_ls", 0.0, 1.0)
        log_amp = pm.Normal("log_amp", 0.0, 1.0)
        cov = pt.exp(log_amp) * pm.gp.cov.ExpQuad(2, ls=pt.exp(log_ls))
        gp = pymc_gpc.MarginalEP(cov_func=cov, likelihood=pymc_gpc.likelihoods.Probit(), approx="FITC")
        gp.marginal_likelihood("y", X=X, y=y, Xu=pm.gp.util.kmeans_inducing_points(m, X))
    print(f"{jax.device_count()} devices: {jax.devices()}")
    with model, shard_rows():  # every device JAX sees; shard_rows(jax.devices()[:2]) for two
        idata = pymc_gpc.sample(draws=200, tune=200, chains=2, random_seed=1, nuts_sampler="numpyro",
                                nuts={"chain_method": "vectorized"})
    print(pm.stats.summary(idata, var_names=["log_ls", "log_amp"]))


if __name__ == "__main__":
    main(*map(int, sys.argv[1:3]))
