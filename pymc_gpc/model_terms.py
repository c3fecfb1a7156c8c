"""What every GP classifier (``gp``, ``gp_multiclass``) adds to a PyMC model: its inputs as a
matrix tensor, and the evidence potential with its deterministics."""

import numpy as np
import pymc as pm
import pytensor.tensor as pt

__all__ = ["as_input_matrix", "add_evidence_terms"]


def as_input_matrix(X):
    """A pm.Data container's tensor as (n, d) float64 (a vector is one input dimension)."""
    X = pt.as_tensor_variable(X).astype("float64")
    return X[:, None] if X.ndim == 1 else X


def add_evidence_terms(model, name, n, log_z, loo, n_iter, status):
    """The potential ``name`` and its deterministics ``{name}_loo`` (dims ``{name}_obs``),
    ``{name}_n_iter`` and ``{name}_status``; returns log_z."""
    obs_dim = f"{name}_obs"
    with model:
        if obs_dim not in model.coords:
            model.add_coord(obs_dim, np.arange(n))
        pm.Potential(name, log_z)
        pm.Deterministic(f"{name}_loo", loo, dims=obs_dim)
        pm.Deterministic(f"{name}_n_iter", n_iter)
        pm.Deterministic(f"{name}_status", status)
    return log_z
