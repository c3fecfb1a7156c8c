"""The ``pymc-gpc`` command: fit, sample or integrate a GP classifier on a CSV file.

``main``
    argument parsing, data loading, the run and its outputs (``command.py``).
``multiclass``
    the likelihoods and reports for several classes.
"""

from .command import main

__all__ = ["main"]
