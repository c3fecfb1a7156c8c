"""What every GP classifier (``gp.marginal``) adds to a PyMC model: its inputs as a
matrix tensor, and the evidence potential with its deterministics."""

import pymc as pm
import pytensor.tensor as pt

from ..validation import INPUT_MAGNITUDE_LIMIT

__all__ = ["as_input_matrix", "checked_input_matrix", "checked_label_count", "add_evidence_terms", "label_dims"]


def as_input_matrix(X):
    """A pm.Data container's tensor as (n, d) float64 (a vector is one input dimension)."""
    X = pt.as_tensor_variable(X).astype("float64")
    return X[:, None] if X.ndim == 1 else X


def checked_input_matrix(X, n_columns):
    """``as_input_matrix`` of a training ``pm.Data`` container, checked wherever it is evaluated
    (the evidence, ``predict``, ``conditional``): a ValueError when ``pm.set_data`` gave it another
    number of columns than the ``n_columns`` the model was built with (the kernel would read the
    first columns and keep the old evidence), or values that are not finite or too large for a
    covariance function (``validation.INPUT_MAGNITUDE_LIMIT``: the evidence would be -inf)."""
    from pytensor.raise_op import CheckAndRaise

    name = getattr(X, "name", None) or "X"
    X = as_input_matrix(X)
    columns = (f"the training inputs' pm.Data container {name!r} no longer has the {n_columns} column"
               f"{'s' if n_columns != 1 else ''} the model was built with (pm.set_data with other columns?): "
               "rebuild the model for other input columns")
    X = CheckAndRaise(ValueError, columns)(X, pt.eq(X.shape[1], n_columns))
    values = (f"the training inputs' pm.Data container {name!r} holds NaN, inf or values above "
              f"{INPUT_MAGNITUDE_LIMIT:g} in magnitude, for which the kernel overflows (pm.set_data?)")
    limit = pt.constant(INPUT_MAGNITUDE_LIMIT, dtype="float64")  # a float64 constant: no cast that overflows
    return CheckAndRaise(ValueError, values)(X, pt.all(pt.le(pt.abs(X), limit)))


def checked_label_count(labels, X, name):
    """``labels`` (a ``pm.Data`` container's coded values) checked wherever they are evaluated: a
    ValueError when their number is not the number of rows of the inputs ``X`` (e.g. the labels
    shortened by ``pm.set_data``: the evidence would be -inf and the predictions NaN)."""
    from pytensor.raise_op import CheckAndRaise

    message = (f"the labels' pm.Data container {name!r} no longer holds one label per row of the training "
               "inputs X (pm.set_data on the labels alone?): give labels and inputs of the same length")
    return CheckAndRaise(ValueError, message)(labels, pt.eq(labels.shape[0], X.shape[0]))


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
