"""What every bundled data set shares: the train/test split record and the CSV reading."""

import gzip
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


def read_csv(filename):
    """Read a bundled CSV (gzipped if its name ends in .gz) into (header, list of rows as strings)."""
    path = resources.files(DATA_PACKAGE).joinpath("data", filename)
    text = gzip.decompress(path.read_bytes()).decode() if filename.endswith(".gz") else path.read_text()
    lines = [line.split(",") for line in text.strip().splitlines()]
    return lines[0], lines[1:]


def columns(header, rows, names):
    """The named columns of ``rows`` as a float array."""
    idx = [header.index(n) for n in names]
    return np.array([[float(r[i]) for i in idx] for r in rows])


def standardise(X_train, X_test):
    """Both sets scaled by the training set's mean and standard deviation."""
    mean, sd = X_train.mean(axis=0), X_train.std(axis=0)
    return (X_train - mean) / sd, (X_test - mean) / sd


def read_numeric(filename):
    """A bundled all-numeric CSV: (header, float array of its rows)."""
    header, rows = read_csv(filename)
    return header, np.array(rows, dtype=float)
