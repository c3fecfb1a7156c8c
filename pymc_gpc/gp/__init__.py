"""The PyMC classes: a GP classifier whose latent function an approximation integrates out.

``marginal``
    ``MarginalEP``, ``MarginalLaplace``, ``MarginalMeanField``, ``MarginalADF``: the
    ``pm.gp``-shaped classes (``marginal_likelihood``, ``conditional``, ``predict``), for
    binary, ordinal and multi-class likelihoods alike (the likelihood's family chooses the
    registry's solver).
``labels``
    the training labels coded per likelihood family.
``model_terms``, ``prediction``
    what the classes add to a model (the evidence potential, LOO terms) and how they
    predict (compiled predictive functions, averaging over draws).
``models``
    ready-made models: ``ard_classifier``, ``label_noise_classifier``; the test-set
    metrics (``classification_metrics``, ``confusion_matrix``, ``multiclass_report``).
"""

from .marginal import MarginalADF, MarginalEP, MarginalLaplace, MarginalMeanField

__all__ = ["MarginalEP", "MarginalLaplace", "MarginalMeanField", "MarginalADF"]
