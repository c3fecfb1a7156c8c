"""The synthetic data sets of Kim & Ghahramani (2003, sec. 5.1), and label flipping.

* ``circle``: x uniform on [-1, 1]^2, y = +1 where x1^2 + x2^2 >= 0.5; 40 training
  points of which 2 have their label flipped, 960 clean test points (the paper's
  label-noise experiment, Fig. 2).
* ``relevance``: x1, x2, x3 ~ N(y, 1) and x4, x5, x6 ~ N(0, 1), balanced classes;
  300 training and 100 test points (the paper's ARD experiment).
"""

import numpy as np

from . import Split


def flip_labels(y, n_flipped, rng):
    """A copy of y with ``n_flipped`` randomly chosen labels negated, and their indices."""
    y = np.array(y, dtype=float)
    idx = rng.choice(len(y), size=int(n_flipped), replace=False)
    y[idx] = -y[idx]
    return y, np.sort(idx)


def circle(n_train=40, n_test=960, n_flipped=2, seed=0):
    """Kim & Ghahramani's circle data; ``Split.flipped`` lists the flipped training points."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1.0, 1.0, size=(n_train + n_test, 2))
    y = np.where(np.sum(X**2, axis=1) >= 0.5, 1.0, -1.0)
    y_train, flipped = flip_labels(y[:n_train], n_flipped, rng)
    split = Split("circle", X[:n_train], y_train, X[n_train:], y[n_train:], ("x1", "x2"))
    split.flipped = flipped
    return split


def relevance(n_train=300, n_test=100, seed=0):
    """Kim & Ghahramani's ARD data: three relevant and three irrelevant inputs."""
    rng = np.random.default_rng(seed)
    n = n_train + n_test
    y = np.where(rng.permutation(n) % 2 == 0, 1.0, -1.0)
    X = np.column_stack([rng.normal(y, 1.0), rng.normal(y, 1.0), rng.normal(y, 1.0),
                         rng.normal(0.0, 1.0, n), rng.normal(0.0, 1.0, n), rng.normal(0.0, 1.0, n)])
    return Split("relevance", X[:n_train], y[:n_train], X[n_train:], y[n_train:],
                 tuple(f"x{m}" for m in range(1, 7)))
