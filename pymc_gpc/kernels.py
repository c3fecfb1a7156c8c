r"""The covariance function of the papers, as a ``pm.gp.cov.Covariance``.

Kim & Ghahramani (2003), eq. 10 (Tan, eq. 1):

.. math::

    c(x_i, x_j) = v_0 \exp\Big(-\tfrac12 \sum_m l_m\, d_m(x_i^m, x_j^m)\Big) + v_1 + v_2\, \delta(i, j),

with d_m = (x_i^m - x_j^m)^2 on a continuous column and d_m = 1 - delta(x_i^m, x_j^m)
(Hamming) on a discrete one; l_m is an inverse squared lengthscale, v_1 a bias
variance and v_2 a latent noise variance ("soft" boundary; v_2 -> 0 is "hard").
"""

import numpy as np
import pytensor.tensor as pt
from pymc.gp.cov import Covariance


class MixedARD(Covariance):
    """Kim & Ghahramani's kernel with continuous and discrete (Hamming) columns.

    Parameters
    ----------
    input_dim : number of input columns.
    v0, v1, v2 : signal variance, bias variance, latent noise variance (scalars,
        numbers or PyTensor/PyMC variables).
    l : inverse squared lengthscales, one per column (length ``input_dim``) or one shared.
    discrete : indices (or a boolean mask) of the discrete columns; the rest are continuous.
    active_dims : as for every ``pm.gp.cov`` kernel.
    """

    def __init__(self, input_dim, *, v0, l, v1=0.0, v2=0.0, discrete=(), active_dims=None):
        super().__init__(input_dim, active_dims)
        mask = np.zeros(self.n_dims, dtype=bool)
        disc = np.asarray(discrete)
        if disc.dtype == bool:
            if disc.shape != (self.n_dims,):
                raise ValueError(f"discrete mask must have {self.n_dims} entries, got {disc.shape}")
            mask = disc
        elif disc.size:
            if disc.min() < 0 or disc.max() >= self.n_dims:
                raise ValueError(f"discrete column indices must be in [0, {self.n_dims}), got {disc.tolist()}")
            mask[disc.astype(int)] = True
        self.discrete = mask
        self.v0, self.v1, self.v2 = v0, v1, v2
        self.l = pt.as_tensor_variable(l)

    def _weighted_distance(self, X, Xs):
        cont = np.flatnonzero(~self.discrete)
        disc = np.flatnonzero(self.discrete)
        l = pt.broadcast_to(self.l, (self.n_dims,)) if self.l.ndim == 0 else self.l
        total = pt.zeros((X.shape[0], Xs.shape[0]))
        if cont.size:
            A, B, w = X[:, cont], Xs[:, cont], l[cont]
            total = total + pt.sum(w * (A[:, None, :] - B[None, :, :]) ** 2, axis=-1)
        if disc.size:
            A, B, w = X[:, disc], Xs[:, disc], l[disc]
            total = total + pt.sum(w * pt.neq(A[:, None, :], B[None, :, :]), axis=-1)
        return total

    def full(self, X, Xs=None):
        X, Xs_ = self._slice(X, Xs)
        same = Xs_ is None
        Xs_ = X if same else Xs_
        K = self.v0 * pt.exp(-0.5 * self._weighted_distance(X, Xs_)) + self.v1
        if same:
            K = K + self.v2 * pt.eye(X.shape[0])
        return K

    def diag(self, X):
        X, _ = self._slice(X, None)
        return pt.alloc(self.v0 + self.v1 + self.v2, X.shape[0])
