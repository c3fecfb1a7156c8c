"""The bundled Palmer penguins (``datasets.penguins``): shape, classes, no missing values."""

import numpy as np

from pymc_gpc.datasets import PENGUINS_CLASSES, PENGUINS_FEATURES, load_penguins


def test_penguins_shape_classes_and_no_missing_values():
    data = load_penguins()
    assert data.X.shape == (342, 4) and data.y.shape == (342,)
    assert data.feature_names == PENGUINS_FEATURES
    assert np.all(np.isfinite(data.X))
    # the species counts of the source (Gorman et al. 2014) less the two unmeasured birds
    # (one Adelie, one Gentoo)
    names, counts = np.unique(data.y, return_counts=True)
    assert tuple(names) == PENGUINS_CLASSES and counts.tolist() == [151, 68, 123]
    # the first recorded bird (an Adelie on Torgersen): 39.1 mm, 18.7 mm, 181 mm, 3750 g
    np.testing.assert_array_equal(data.X[0], [39.1, 18.7, 181.0, 3750.0])
    # plausible ranges: bills 30-60 mm long, flippers 170-235 mm, 2.7-6.3 kg
    assert 30 < data.X[:, 0].min() and data.X[:, 0].max() < 60
    assert 170 < data.X[:, 2].min() and data.X[:, 2].max() < 235
    assert 2700 <= data.X[:, 3].min() and data.X[:, 3].max() <= 6300
