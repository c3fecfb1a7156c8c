"""The bundled large multi-class data set (ggplot2's diamonds): shapes, classes, a deterministic split."""

import numpy as np
import pytest

from pymc_gpc.datasets import DIAMONDS_CLASSES, DIAMONDS_FEATURES, load_diamonds


def test_diamonds_shapes_classes_and_standardisation():
    data = load_diamonds()
    assert data.X_train.shape == (10_000, 9) and data.X_test.shape == (5000, 9)
    assert data.y_train.shape == (10_000,) and data.y_test.shape == (5000,)
    assert data.feature_names == DIAMONDS_FEATURES and data.class_names == DIAMONDS_CLASSES
    assert set(np.unique(data.y_train)) == set(range(5)) == set(np.unique(data.y_test))
    assert np.all(np.isfinite(data.X_train)) and np.all(np.isfinite(data.X_test))
    np.testing.assert_allclose(data.X_train.mean(axis=0), 0.0, atol=1e-10)
    np.testing.assert_allclose(data.X_train.std(axis=0), 1.0, atol=1e-10)


def test_diamonds_class_counts_over_the_whole_set():
    data = load_diamonds(n_train=53_940, n_test=0)
    assert data.X_test.shape == (0, 9)
    np.testing.assert_array_equal(np.bincount(data.y_train), [1610, 4906, 12082, 13791, 21551])


def test_diamonds_split_is_deterministic_and_disjoint():
    a, b = load_diamonds(seed=3), load_diamonds(seed=3)
    np.testing.assert_array_equal(a.X_train, b.X_train)
    np.testing.assert_array_equal(a.y_test, b.y_test)
    c = load_diamonds(seed=4)
    assert not np.array_equal(a.y_train, c.y_train)
    raw = load_diamonds(n_train=200, n_test=100, seed=3, standardise=False)
    train = {tuple(r) for r in raw.X_train}
    assert len(train & {tuple(r) for r in raw.X_test}) <= 1  # disjoint rows (up to duplicated diamonds)
    np.testing.assert_array_equal(raw.y_train, a.y_train[:200])


def test_diamonds_refuses_a_split_larger_than_the_data():
    with pytest.raises(ValueError, match="53940"):
        load_diamonds(n_train=50_000, n_test=5000)
