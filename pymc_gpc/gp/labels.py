"""The training labels as the solvers take them, by likelihood family (``registry.family``).

=============  ==========================================  ===================================
family         labels given                                coded as
=============  ==========================================  ===================================
binary         {-1, +1}, {0, 1}, booleans, two strings     -1 / +1 (``as_signed_labels``)
ordinal        0..K-1, an ordered categorical, ``levels``  0..K-1 (``as_ordinal_codes``)
multiclass     integers, strings, booleans, categorical    0..c-1 (``as_class_codes``)
=============  ==========================================  ===================================

Each coder returns (the codes, the classes in ``predict``'s order); a ``pm.Data`` container of
labels is coded by a graph checked wherever it is evaluated (``label_tensor``).
"""

import numpy as np
import pytensor.tensor as pt
from pytensor.raise_op import CheckAndRaise

from ..approximations.registry import family
from ..validation import as_class_codes, as_ordinal_codes, as_signed_labels, binary_classes

__all__ = ["coded_labels", "check_label_container", "label_tensor"]


def coded_labels(likelihood, y, levels=None):
    """(codes as floats, classes in ``predict``'s order) of labels ``y`` for ``likelihood``'s
    family; ``levels`` (the ordinal labels from lowest to highest) serves ordinal likelihoods only."""
    kind = family(likelihood)
    if levels is not None and kind != "ordinal":
        what = "binary" if kind == "binary" else "of several unordered classes"
        raise ValueError("levels= orders the labels of an ordinal likelihood (OrderedProbit, OrderedLogit); "
                         f"{type(likelihood).__name__} is {what}")
    return _CODERS[kind](likelihood, y, levels)


def _binary(likelihood, y, levels):
    return as_signed_labels(y), binary_classes(y)


def _ordinal(likelihood, y, levels):
    if likelihood.n_classes is None:
        raise ValueError(f"{type(likelihood).__name__} needs its cutpoints (K-1 of them for K classes)")
    return as_ordinal_codes(y, likelihood.n_classes, levels)


def _several(likelihood, y, levels):
    codes, classes = as_class_codes(y, n_classes=likelihood.n_classes)
    return codes.astype(float), classes


_CODERS = {"binary": _binary, "ordinal": _ordinal, "multiclass": _several}


def check_label_container(likelihood, values, tensor):
    """ValueError for a ``pm.Data`` container of labels (``tensor``, holding ``values``) that
    ``label_tensor`` cannot code: several unordered classes, or labels that are not numbers."""
    if tensor is None:
        return
    if family(likelihood) == "multiclass":
        raise ValueError("y as a pm.Data container serves binary and ordinal labels; give multi-class labels as "
                         "an array, list or pandas object (X may be pm.Data)")
    if not (np.issubdtype(np.asarray(values).dtype, np.number) or np.asarray(values).dtype == bool):
        raise ValueError("y as a pm.Data container must hold numeric or boolean labels ({0, 1}, {-1, +1})")


def label_tensor(likelihood, y_tensor, classes):
    """A ``pm.Data`` container of labels coded as the solvers take them, checked wherever it is
    evaluated (``_signed_label_tensor``, ``_ordinal_label_tensor``)."""
    if family(likelihood) == "ordinal":
        return _ordinal_label_tensor(y_tensor, likelihood.n_classes)
    return _signed_label_tensor(y_tensor, classes)


def _signed_label_tensor(y_tensor, classes):
    """A ``pm.Data`` container of binary labels as -1 / +1 (values above 0 are +1), checked
    wherever it is evaluated (the evidence, ``predict``, ``conditional``): a ValueError when
    the container holds labels other than the two of ``classes`` it was built with (e.g.
    ``pm.set_data`` to {1, 2}, which the coding would otherwise turn into all +1)."""
    values = pt.flatten(y_tensor).astype("float64")
    low, high = (float(c) for c in classes)
    coded = pt.all(pt.or_(pt.eq(values, low), pt.eq(values, high)))
    message = (f"the labels' pm.Data container {y_tensor.name!r} holds values other than the two classes "
               f"{low:g} and {high:g} it was built with (pm.set_data of labels must keep that coding; "
               "values above 0 are the positive class)")
    values = CheckAndRaise(ValueError, message)(values, coded)
    return pt.switch(pt.gt(values, 0), 1.0, -1.0)


def _ordinal_label_tensor(y_tensor, n_classes):
    """A ``pm.Data`` container of ordinal labels 0..K-1, checked wherever it is evaluated: a
    ValueError when it holds anything else (e.g. after ``pm.set_data``)."""
    values = pt.flatten(y_tensor).astype("float64")
    coded = pt.all(pt.eq(values, pt.round(values)) & pt.ge(values, 0) & pt.le(values, n_classes - 1))
    message = (f"the labels' pm.Data container {y_tensor.name!r} holds values other than the integers "
               f"0..{n_classes - 1} of the ordinal likelihood's {n_classes} classes")
    return CheckAndRaise(ValueError, message)(values, coded)
