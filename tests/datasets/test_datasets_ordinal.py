"""The ordinal benchmark loaders (``pymc_gpc.datasets.ordinal``): the documented shapes and
split sizes of Chu & Ghahramani (2005, Table 1), equal-frequency ranks checked against the
sorted targets, equal-length ranks against the rank counts of the paper's own partition
files, no NaN, standardisation on the training rows, and bad input."""

import doctest

import numpy as np
import pytest

from pymc_gpc.datasets import (ORDINAL_DATASETS, equal_frequency_bins, load_ordinal, ordinal_split,
                               ordinal_splits)
from pymc_gpc.datasets import ordinal as ordinal_module
from pymc_gpc.datasets.ordinal import equal_length_bins

# (rows, inputs, training rows) as in Chu & Ghahramani (2005), Table 1
SHAPES = {"machine_cpu": (209, 6, 150), "auto_mpg": (392, 7, 200), "boston": (506, 13, 300)}

# Rank counts (lowest rank first) of training + test rows of partition 1 of the benchmark
# files on Chu's data page (www.gatsby.ucl.ac.uk/~chuwei/ordinalregression.html), as copied
# unaltered into github.com/bb515/probit (commit bc52eed, probit/data/auto/{quantile,decile}/
# auto.data.npz and probit/data/bostonhousing/{quantile,decile}/housing.npz; "quantile" holds
# the 5-rank and "decile" the 10-rank files).
CHU_RANK_COUNTS = {
    ("auto_mpg", 5): [91, 131, 101, 59, 10],
    ("auto_mpg", 10): [13, 78, 73, 58, 53, 48, 37, 22, 4, 6],
    ("boston", 5): [77, 239, 123, 36, 31],
    ("boston", 10): [22, 55, 85, 154, 84, 39, 29, 7, 10, 21],
}


def test_every_bundled_set_is_described():
    assert set(ORDINAL_DATASETS) == set(SHAPES)


@pytest.mark.parametrize("name", sorted(SHAPES))
@pytest.mark.parametrize("n_bins", [5, 10])
def test_whole_set_has_documented_shape_and_equal_frequency_ranks(name, n_bins):
    n, d, _ = SHAPES[name]
    data = load_ordinal(name, n_bins)
    assert data.X.shape == (n, d) and data.y.shape == (n,) and len(data.feature_names) == d
    assert np.all(np.isfinite(data.X)) and np.all(np.isfinite(data.target))
    counts = np.bincount(data.y, minlength=n_bins)
    assert counts.size == n_bins and counts.max() - counts.min() <= 1 and counts.sum() == n
    # the ranks follow the target: every value of rank k is <= every value of rank k + 1
    for k in range(n_bins - 1):
        assert data.target[data.y == k].max() <= data.target[data.y == k + 1].min()


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_split_sizes_standardisation_and_disjointness(name):
    n, d, n_train = SHAPES[name]
    raw = load_ordinal(name, 5)
    s = ordinal_split(name, split=2, n_bins=5)
    assert s.X_train.shape == (n_train, d) and s.X_test.shape == (n - n_train, d)
    assert s.y_train.shape == (n_train,) and s.y_test.shape == (n - n_train,)
    assert not np.isnan(s.X_train).any() and not np.isnan(s.X_test).any()
    np.testing.assert_allclose(s.X_train.mean(axis=0), 0.0, atol=1e-10)
    np.testing.assert_allclose(s.X_train.std(axis=0), 1.0, atol=1e-10)
    # train and test rows partition the data set: their labels add up to the whole set's
    np.testing.assert_array_equal(np.bincount(np.r_[s.y_train, s.y_test], minlength=5), np.bincount(raw.y))
    unscaled = ordinal_split(name, split=2, n_bins=5, standardise=False)
    rows = {tuple(r) for r in raw.X}
    assert all(tuple(r) in rows for r in unscaled.X_train[:10])


def test_splits_are_seeded_and_differ():
    a, b = ordinal_splits("machine_cpu", n_splits=2)
    again = ordinal_split("machine_cpu", split=1)
    np.testing.assert_array_equal(b.X_train, again.X_train)
    assert not np.array_equal(a.X_train, b.X_train) and (a.split, b.split) == (0, 1)


def test_equal_frequency_bins_against_a_hand_count():
    np.testing.assert_array_equal(equal_frequency_bins([3.0, 1.0, 2.0, 5.0, 4.0, 0.0], 3), [1, 0, 1, 2, 2, 0])
    # 7 values in 3 ranks: sizes 3, 2, 2 (floor(j * 3 / 7) for j = 0..6)
    np.testing.assert_array_equal(np.bincount(equal_frequency_bins(np.arange(7.0)[::-1], 3)), [3, 2, 2])


@pytest.mark.parametrize("name, n_bins", sorted(CHU_RANK_COUNTS))
def test_equal_length_ranks_reproduce_the_papers_partitions(name, n_bins):
    data = load_ordinal(name, n_bins, binning="equal_length")
    np.testing.assert_array_equal(np.bincount(data.y, minlength=n_bins), CHU_RANK_COUNTS[name, n_bins])


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_equal_length_ranks_are_intervals_of_the_target(name):
    data = load_ordinal(name, 5, binning="equal_length")
    lo, hi = data.target.min(), data.target.max()
    width = (hi - lo) / 5
    for k in range(5):
        t = data.target[data.y == k]
        # right-closed: (lo + k w, lo + (k + 1) w], the minimum itself in rank 0
        assert np.all(t <= lo + (k + 1) * width + 1e-9 * hi) and np.all((t > lo + k * width - 1e-9 * hi) | (k == 0))
    s = ordinal_split(name, split=1, n_bins=5, binning="equal_length")
    np.testing.assert_array_equal(np.bincount(np.r_[s.y_train, s.y_test], minlength=5), np.bincount(data.y))


def test_equal_length_bins_against_a_hand_count():
    np.testing.assert_array_equal(equal_length_bins([0.0, 1.0, 2.0, 3.0, 10.0], 5), [0, 0, 0, 1, 4])
    # on the boundary lo + w: the lower interval (right-closed), as in the paper's files
    np.testing.assert_array_equal(equal_length_bins([0.0, 2.0, 2.5, 4.0], 2), [0, 0, 1, 1])


@pytest.mark.parametrize("call, message", [
    (lambda: load_ordinal("abalone"), "unknown ordinal data set 'abalone'"),
    (lambda: load_ordinal("boston", n_bins=1), "n_bins must be between 2"),
    (lambda: ordinal_split("boston", split=-1), "split must be a non-negative integer"),
    (lambda: equal_frequency_bins([1.0, np.nan, 2.0], 2), "finite"),
    (lambda: equal_length_bins([1.0, np.inf, 2.0], 2), "finite"),
    (lambda: equal_length_bins([3.0, 3.0, 3.0], 2), "single distinct value"),
    (lambda: equal_length_bins([1.0, 2.0], 3), "n_bins must be between 2"),
    (lambda: load_ordinal("boston", binning="quantile"), "unknown binning 'quantile'"),
])
def test_bad_input_is_a_value_error(call, message):
    with pytest.raises(ValueError, match=message):
        call()


@pytest.mark.parametrize("attr", ["equal_frequency_bins", "equal_length_bins", "load_ordinal", "ordinal_split"])
def test_docstring_examples_run(attr):
    obj = getattr(ordinal_module, attr)
    tests = doctest.DocTestFinder(recurse=False).find(obj, attr, globs={})
    assert tests and tests[0].examples
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
    for test in tests:
        runner.run(test)
    assert runner.summarize(verbose=False).failed == 0
