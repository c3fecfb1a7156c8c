"""What every GP classifier (``gp``, ``gp_multiclass``) adds to a PyMC model: its inputs as a
matrix tensor, and the evidence potential with its deterministics."""

import pymc as pm
import pytensor.tensor as pt

__all__ = ["as_input_matrix", "add_evidence_terms", "label_dims"]


def as_input_matrix(X):
    """A pm.Data container's tensor as (n, d) float64 (a vector is one input dimension)."""
    X = pt.as_tensor_variable(X).astype("float64")
    return X[:, None] if X.ndim == 1 else X


def label_dims(model, y_tensor):
    """The dims of a ``pm.Data`` label container (one name for its one axis), or None."""
    if y_tensor is None or getattr(y_tensor, "name", None) is None:
        return None
    dims = model.named_vars_to_dims.get(y_tensor.name)
    return dims[0] if dims is not None and len(dims) == 1 and dims[0] is not None else None


def add_evidence_terms(model, name, log_z, loo, n_iter, status, dims=None):
    """The potential ``name`` and its deterministics ``{name}_loo``, ``{name}_n_iter`` and
    ``{name}_status``; returns log_z.

    ``{name}_loo`` takes ``dims`` (the labels' ``pm.Data`` container's dimension, see
    ``label_dims``) when given; otherwise the package adds no coordinate or dimension to the
    model, and ArviZ names the axis ``{name}_loo_dim_0``, a name that cannot clash with the
    model's variables or ``pm.Data`` containers (``{name}_obs`` did, with ``pm.Data("y_obs", y)``)."""
    with model:
        pm.Potential(name, log_z)
        pm.Deterministic(f"{name}_loo", loo, dims=dims)
        pm.Deterministic(f"{name}_n_iter", n_iter)
        pm.Deterministic(f"{name}_status", status)
    return log_z
