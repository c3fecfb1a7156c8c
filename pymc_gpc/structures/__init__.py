"""Prior structures: the linear algebra of the Gaussian q(f) for a given prior covariance.

``dense``: a dense n x n kernel matrix K, through B = I + W^1/2 K W^1/2 (and through
chol K for negative site precisions). The approximations reach the prior only through
these objects, so a new structure of the prior is a new module here.
"""
