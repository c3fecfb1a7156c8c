"""Approximations of the marginal likelihood: EP (``ep``), Laplace (``laplace``), mean
field I/II (``meanfield``) and online ADF (``adf``). Each returns an
``ApproximationResult`` (``result``): log Z, its gradient pieces, the posterior summary
and diagnostics."""
