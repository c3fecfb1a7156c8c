"""What every bundled data set shares: the train/test split record, the seeded split, the
standardisation and the CSV reading."""

import gzip
import io
from dataclasses import dataclass
from importlib import resources

import numpy as np

DATA_PACKAGE = "pymc_gpc.datasets"


@dataclass
class Labelled:
    """A whole data set with class labels (for cross-validation): X (n, d), y (n,) labels."""

    name: str
    X: np.ndarray
    y: np.ndarray
    feature_names: tuple


@dataclass
class Split:
    """A train/test split with labels in {-1, +1}."""

    name: str
    X_train: np.ndarray
    y_train: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray
    feature_names: tuple


def _text(filename):
    """A bundled file's text (gunzipped if its name ends in .gz)."""
    path = resources.files(DATA_PACKAGE).joinpath("data", filename)
    return gzip.decompress(path.read_bytes()).decode() if filename.endswith(".gz") else path.read_text()


def read_csv(filename):
    """Read a bundled CSV (gzipped if its name ends in .gz) into (header, list of rows as strings)."""
    lines = [line.split(",") for line in _text(filename).strip().splitlines()]
    return lines[0], lines[1:]


def columns(header, rows, names):
    """The named columns of ``rows`` as a float array."""
    idx = [header.index(n) for n in names]
    return np.array([[float(r[i]) for i in idx] for r in rows])


def seeded_split(n, n_first, n_second=None, seed=0):
    """Row indices (first, second) of a seeded random split of ``n`` rows: the first
    ``n_first`` of the permutation ``np.random.default_rng(seed).permutation(n)`` and the
    ``n_second`` after them (``None``: all the rest). ``seed``: anything ``default_rng``
    takes (an int, or a list such as [seed, split number])."""
    order = np.random.default_rng(seed).permutation(n)
    end = n if n_second is None else n_first + n_second
    return order[:n_first], order[n_first:end]


def standardise(X_train, X_test, constant_ok=False):
    """Both sets scaled by the training set's mean and standard deviation. ``constant_ok``:
    a column that is constant on the training rows is only centred (sd taken as 1), as a
    small training set may have one."""
    mean, sd = X_train.mean(axis=0), X_train.std(axis=0)
    if constant_ok:
        sd[sd == 0.0] = 1.0
    return (X_train - mean) / sd, (X_test - mean) / sd


def read_numeric(filename):
    """A bundled all-numeric CSV: (header, float array of its rows), parsed by numpy's reader."""
    text = _text(filename)
    header = text[:text.index("\n")].strip().split(",")
    return header, np.loadtxt(io.StringIO(text), delimiter=",", skiprows=1, ndmin=2)
