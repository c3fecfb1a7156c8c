"""``datasets.tables.seeded_split``, the one seeded train/test split of the loaders: the
loaders give, bit for bit, the splits they gave when each carried its own copy of it.

The digests below were computed with those copies (before ``seeded_split`` existed): a
SHA-256 of X_train, y_train, X_test and y_test's bytes, for a fixed seed and size.
"""

import hashlib

import numpy as np
import pytest

from pymc_gpc.datasets import load_default, load_diamonds, load_flights, ordinal_split
from pymc_gpc.datasets.tables import seeded_split, standardise


def digest(split):
    h = hashlib.sha256()
    for a in (split.X_train, split.y_train, split.X_test, split.y_test):
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()[:16]


BEFORE = [
    ("default", lambda: load_default(n_test=300, seed=5), "7e9f26b3df6533de"),
    ("default-raw", lambda: load_default(standardise=False, n_test=2000, seed=0), "9d8259924f0bcbcb"),
    ("diamonds", lambda: load_diamonds(n_train=300, n_test=200, seed=2), "40dfe9d828700983"),
    ("flights", lambda: load_flights(n_train=500, n_test=300, seed=1), "7d6fa50206cab73a"),
    ("ordinal", lambda: ordinal_split("boston", split=3, n_bins=10, seed=2), "40ebe3bb9e12f60e"),
]


@pytest.mark.parametrize("case, load, want", BEFORE, ids=[row[0] for row in BEFORE])
def test_loaders_give_the_splits_they_gave_before(case, load, want):
    assert digest(load()) == want


def test_seeded_split_takes_the_first_rows_of_the_seeded_permutation():
    """The indices of default_rng(seed).permutation(n), written out (numpy's generator is
    stable across versions)."""
    first, second = seeded_split(10, 4, 3, seed=0)
    np.testing.assert_array_equal(first, [4, 6, 2, 7])
    np.testing.assert_array_equal(second, [3, 5, 9])
    first, rest = seeded_split(8, 5, seed=[2, 3])  # a list seed: ordinal_split's [seed, split]
    np.testing.assert_array_equal(first, [6, 5, 2, 0, 1])
    np.testing.assert_array_equal(rest, [3, 4, 7])


def test_standardise_centres_a_constant_column_only_when_asked():
    X = np.array([[1.0, 5.0], [3.0, 5.0]])
    a, b = standardise(X, X + 1.0, constant_ok=True)
    np.testing.assert_array_equal(a, [[-1.0, 0.0], [1.0, 0.0]])
    np.testing.assert_array_equal(b, [[0.0, 1.0], [2.0, 1.0]])
    with np.errstate(invalid="ignore", divide="ignore"):
        assert np.all(np.isnan(standardise(X, X)[0][:, 1]))
