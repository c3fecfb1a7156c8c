"""The solver layer: the approximations run directly on a kernel matrix, without a PyMC model.

Each takes a prior covariance (a matrix or a prior structure, ``pymc_gpc.structures``), the
labels and a likelihood, and returns an ``ApproximationResult`` (log evidence, its gradients,
the latent posterior, diagnostics and a warm-start state). The PyMC classes
(``pymc_gpc.MarginalEP`` and its kin) call them through PyTensor Ops; use them directly to
test a likelihood, compare approximations, or build another interface.

Examples
--------
>>> import numpy as np
>>> from pymc_gpc.likelihoods import Probit
>>> from pymc_gpc.solvers import ep
>>> K = np.exp(-0.5 * np.subtract.outer(np.arange(6.0), np.arange(6.0)) ** 2) + 1e-8 * np.eye(6)
>>> res = ep(2.0 * K, np.array([-1, -1, -1, 1, 1, 1]), Probit())
>>> bool(res.converged)
True
"""

from .approximations.adf import adf
from .approximations.ep import EPState, ep
from .approximations.laplace import LaplaceState, laplace
from .approximations.meanfield import MeanFieldState, meanfield
from .approximations.multinomial_probit_ep import multinomial_probit_ep
from .approximations.result import ApproximationResult
from .approximations.laplace_bound import softmax_laplace_bound
from .approximations.softmax_laplace import softmax_laplace
from .approximations.variational_bound import softmax_dtc_bound

__all__ = ["ep", "laplace", "meanfield", "adf", "softmax_laplace", "softmax_laplace_bound", "softmax_dtc_bound",
           "multinomial_probit_ep",
           "ApproximationResult", "EPState", "LaplaceState", "MeanFieldState"]
