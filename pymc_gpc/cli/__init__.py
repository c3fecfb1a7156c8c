"""The ``pymc-gpc`` command: fit, sample or integrate a GP classifier on a CSV file.

``main``
    argument parsing, data loading, the run and its outputs (``command.py``); a target with
    more than two classes gets the multi-class likelihood its ``--approximation`` integrates
    out (``likelihoods.MULTICLASS_LIKELIHOODS`` by ``--likelihood`` name) and a confusion
    matrix (``gp.models.multiclass_report``).
"""

from .command import main

__all__ = ["main"]
