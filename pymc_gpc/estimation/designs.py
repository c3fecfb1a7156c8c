r"""Integration rules over the hyperparameters around the mode of their log posterior:
the central composite design (CCD) and a regular grid, both in the standardised
coordinates z of the Gaussian approximation at the mode.

With the mode :math:`\hat x` and the precision :math:`P = -\nabla^2 \log p(\hat x \mid y)
= V \Lambda V^T` of the log posterior in the unconstrained space,

.. math::

    x(z) = \hat x + V \Lambda^{-1/2} z ,

so that a Gaussian posterior is the standard normal in z. Both rules return design
points and normalised weights :math:`w_k`; posterior expectations are
:math:`E[g(x)] \approx \sum_k w_k\, g(x_k)`.

These functions see the log posterior only through a callable ``log_density(x)`` (the
model's, ``hyper_posterior.LogPosterior``; a test's Gaussian); they are pure NumPy.

References
----------
Rue, H., Martino, S. & Chopin, N. (2009). Approximate Bayesian inference for latent
Gaussian models by using integrated nested Laplace approximations. JRSS B 71, 319-392,
sec. 6.5 (CCD, its weights).
Vanhatalo, J. et al. (2013). GPstuff: Bayesian modeling with Gaussian processes. JMLR 14,
1175-1179 (``gp_ia``: CCD with per-half-axis scaling, grid).
Sanchez, S. M. & Sanchez, P. J. (2005). Very large fractional factorial and central
composite designs. ACM TOMACS 15, 362-377 (resolution V designs from Walsh indices).
"""

import itertools

import numpy as np

__all__ = ["WALSH_INDICES", "CCD_MAX_DIM", "GRID_MAX_DIM", "factorial_design", "ccd_design", "ccd_log_weights",
           "axis_scales", "stretch_log_jacobian", "Standardisation", "ccd", "grid", "weighted_moments"]


# Beyond this many hyperparameters the CCD's factorial part (2^(d-p) points, 512 at d = 30)
# costs as much as a short NUTS run: use NUTS
CCD_MAX_DIM = 30


def _walsh_indices(count):
    """Columns of a Sylvester-Hadamard matrix (Walsh functions) whose first d columns form a
    2^(d-p) fractional factorial of resolution V for every d <= count, chosen greedily as
    Sanchez & Sanchez (2005) do: the smallest index that is not the XOR of at most three
    indices already chosen (so no defining word has fewer than five letters: main effects
    and two-factor interactions are not aliased with each other). The sequence starts
    1, 2, 4, 8, 15, 16, 32, 51, 64, 85, ...; GPstuff's ``gp_ia`` table agrees up to d = 24
    but lists 597 (= 85 XOR 512, a word of three letters) at d = 25 and 898 at d = 29."""
    chosen, forbidden, candidate = [], {0}, 1
    while len(chosen) < count:
        if candidate not in forbidden:
            forbidden.update([candidate] + [candidate ^ a for a in chosen]
                             + [candidate ^ a ^ b for a, b in itertools.combinations(chosen, 2)])
            chosen.append(candidate)
        candidate += 1
    return tuple(chosen)


WALSH_INDICES = _walsh_indices(CCD_MAX_DIM)


# A grid's point count grows as (range / step)^d: beyond three hyperparameters use the CCD.
GRID_MAX_DIM = 3


def factorial_design(d):
    r"""The 2^(d-p) fractional factorial of resolution V for d factors, a (2^k, d) matrix of
    +-1: row r, column j is :math:`(-1)^{\mathrm{popcount}(r \wedge w_j)}` for the Walsh
    index :math:`w_j` (``WALSH_INDICES``), 2^k the smallest Sylvester-Hadamard order above
    the largest index used. The columns are orthogonal and balanced."""
    if not 1 <= d <= CCD_MAX_DIM:
        raise ValueError(f"the CCD serves 1 to {CCD_MAX_DIM} hyperparameters, got {d}")
    walsh = np.asarray(WALSH_INDICES[:d])
    runs = 1 << int(walsh.max()).bit_length()
    rows = np.arange(runs)[:, None] & walsh[None, :]
    parity = np.array([[bin(v).count("1") & 1 for v in row] for row in rows])
    return 1.0 - 2.0 * parity


def ccd_design(d):
    r"""The CCD in standardised units, before the radius f0 and the axis scales: the centre
    (row 0), the factorial points (``factorial_design``, norm :math:`\sqrt d`) and the 2d
    axial points :math:`\pm\sqrt d\, e_i`. With one hyperparameter the factorial points
    would repeat the axial ones and are left out (three points)."""
    axial = np.sqrt(d) * np.concatenate([np.eye(d), -np.eye(d)])
    parts = [np.zeros((1, d))] + ([factorial_design(d)] if d > 1 else []) + [axial]
    return np.concatenate(parts)


def ccd_log_weights(design, log_density, f0):
    r"""Unnormalised log weights of the CCD points (Rue et al. 2009, sec. 6.5): with N
    non-central points on the sphere of radius :math:`f_0\sqrt d`,

    .. math::

        \log w_0 = \log p_0 - \log p_0 ,\qquad
        \log w_k = \log p_k - \log p_0 + \tfrac{d f_0^2}{2} - \log(N f_0^2) - \log(1 - f_0^{-2}),

    i.e. the density at each point divided by the standard normal density there, times the
    design's volume weights :math:`1 - f_0^{-2}` (centre) and :math:`1 / (N f_0^2)` (others).
    For a Gaussian posterior the weights are exactly those volume weights, and the rule
    gives the Gaussian's mean and covariance exactly."""
    d = design.shape[1]
    n_outer = design.shape[0] - 1
    log_w = np.asarray(log_density, float) - log_density[0]
    log_w[1:] += 0.5 * d * f0 ** 2 - np.log(n_outer * f0 ** 2) - np.log(1.0 - f0 ** -2)
    return log_w


class Standardisation:
    """The map z -> x = mode + V Lambda^(-1/2) z of the module docstring.

    Parameters
    ----------
    mode : (d,) array, the mode of the log posterior.
    precision : (d, d) array, minus its Hessian there.

    Raises
    ------
    ValueError
        When the precision is not symmetric positive definite (the log posterior is not
        concave at the mode: a saddle, or a flat direction such as a hyperparameter
        drifting without bound).
    """

    def __init__(self, mode, precision):
        self.mode = np.asarray(mode, float)
        precision = np.asarray(precision, float)
        d = self.mode.size
        if precision.shape != (d, d) or not np.all(np.isfinite(precision)):
            raise ValueError(f"the precision must be a finite ({d}, {d}) matrix, got shape {precision.shape}")
        eigval, eigvec = np.linalg.eigh(0.5 * (precision + precision.T))
        if eigval.min() <= 1e-12 * max(abs(eigval.max()), 1.0):
            raise ValueError(
                f"the log posterior is not concave at its mode (Hessian eigenvalues {np.round(-eigval, 6).tolist()}):"
                " a flat or rising direction; deterministic integration needs a proper mode: use NUTS, or "
                "tighter hyperpriors")
        self.eigval, self.eigvec = eigval, eigvec
        self.scale = eigvec / np.sqrt(eigval)

    def __call__(self, z):
        """Points x for rows of z."""
        return self.mode + np.atleast_2d(z) @ self.scale.T


def axis_scales(standard, log_density, log_p0, lo=1.0 / 3.0, hi=3.0):
    r"""Per half-axis scale factors for skewed posteriors (GPstuff's ``gp_ia`` autoscaling,
    the first-order rule of INLA): at :math:`z = \pm\sqrt 2\, e_i` a Gaussian posterior's
    log density has fallen by 1; where it fell by :math:`\Delta`, the half-axis is
    stretched by :math:`s = \Delta^{-1/2}` (clipped to [lo, hi]; 1 where it did not fall).
    Returns (d, 2) scales: column 0 for +, 1 for -, and the 2d log densities evaluated."""
    d = standard.mode.size
    scales, values = np.ones((d, 2)), np.empty((d, 2))
    for i, (col, sign) in itertools.product(range(d), ((0, 1.0), (1, -1.0))):
        z = np.zeros(d)
        z[i] = sign * np.sqrt(2.0)
        values[i, col] = value = log_density(standard(z)[0])
        drop = log_p0 - value
        scales[i, col] = np.clip(1.0 / np.sqrt(drop), lo, hi) if drop > 0 else 1.0
    return scales, values


def stretch_log_jacobian(design, scales):
    r"""log of the volume factor of each design point under the per-half-axis stretch.

    The scaled design integrates against the continuous density
    :math:`q(x) \propto \phi(u(x))`, u the design coordinates before the stretch; with
    :math:`x = x(u)`, :math:`E_q[g] = \int g\, \phi(u) J(u)\, du / \int \phi(u) J(u)\, du`,
    J(u) the product of the scales of u's orthant. So each point's weight carries J: the
    product of its coordinates' half-axis scales, a zero coordinate (the centre, the axial
    points) the mean of its two. For a split normal in one dimension this makes the
    rule's second moment exact (without it, the mean moves only half way to the long
    tail: GPstuff's ``gp_ia`` leaves J out)."""
    per_axis = np.where(design > 0, scales[:, 0], np.where(design < 0, scales[:, 1], scales.mean(axis=1)))
    return np.log(per_axis).sum(axis=1)


def ccd(standard, log_density, log_p0, f0=1.1):
    """The CCD of the module docstring, scaled per half-axis (``axis_scales``).

    Returns
    -------
    dict with ``z`` (design points in standardised units, scales applied), ``x`` (the
    points), ``log_density`` at each, ``weight`` (normalised), ``scales`` and
    ``n_evaluations`` (including the scaling's 2d).
    """
    if not np.isfinite(f0) or f0 <= 1.0:
        raise ValueError(f"f0 must be a number above 1 (the design's radius over sqrt(d)), got {f0}")
    d = standard.mode.size
    scales, _ = axis_scales(standard, log_density, log_p0)
    design = ccd_design(d)
    z = f0 * design * np.where(design >= 0, scales[:, 0], scales[:, 1])
    x = standard(z)
    log_p = np.array([log_p0] + [log_density(xk) for xk in x[1:]])
    log_w = ccd_log_weights(design, log_p, f0) + stretch_log_jacobian(design, scales)
    return _finish({"z": z, "x": x, "log_density": log_p, "scales": scales,
                    "n_evaluations": len(x) - 1 + 2 * d}, log_w)


def grid(standard, log_density, log_p0, step=None, threshold=None, max_points=5000):
    r"""A regular grid in z, explored outwards from the mode (GPstuff's ``gp_ia`` grid): a
    point's neighbours (one step along each axis) are evaluated while its log density lies
    within ``threshold`` of the mode's. Weights are proportional to the density (equal
    volumes). The rectangle rule on a lattice converges fast for smooth densities (its error
    falls as :math:`\exp(-2\pi^2/h^2)` in the step h for a Gaussian); the truncation at the
    threshold costs the mass beyond it (a drop of 10: about 4.5 sd, 8e-6 of a 1-d Gaussian's).

    Parameters
    ----------
    step : lattice spacing in standardised units (default 0.5, 0.75, 1.0 for d = 1, 2, 3).
    threshold : the largest drop of the log density below the mode's at which a point's
        neighbours are still explored (default 10 for d <= 2, 8 for d = 3).
    max_points : a ValueError when the exploration exceeds it.
    """
    d = standard.mode.size
    if d > GRID_MAX_DIM:
        raise ValueError(f"method='grid' serves at most {GRID_MAX_DIM} hyperparameters (its point count grows as "
                         f"range^d), the model has {d}: use method='ccd'")
    step = {1: 0.5, 2: 0.75, 3: 1.0}[d] if step is None else float(step)
    threshold = (10.0 if d <= 2 else 8.0) if threshold is None else float(threshold)
    if not (np.isfinite(step) and step > 0 and np.isfinite(threshold) and threshold > 0):
        raise ValueError(f"step and threshold must be positive numbers, got {step} and {threshold}")
    origin = (0,) * d
    values, frontier = {origin: log_p0}, [origin]
    while frontier:
        nxt = []
        for node in frontier:
            if log_p0 - values[node] >= threshold:
                continue
            for i, sign in itertools.product(range(d), (1, -1)):
                nb = tuple(c + (sign if j == i else 0) for j, c in enumerate(node))
                if nb not in values:
                    if len(values) >= max_points:
                        raise ValueError(f"the grid exceeded max_points={max_points} points: a wide or flat "
                                         "posterior; raise step or max_points, or use method='ccd'")
                    values[nb] = log_density(standard(step * np.array(nb, float))[0])
                    nxt.append(nb)
        frontier = nxt
    nodes = np.array(list(values), float)
    log_p = np.array(list(values.values()))
    z = step * nodes
    return _finish({"z": z, "x": standard(z), "log_density": log_p, "n_evaluations": len(log_p) - 1},
                   log_p - log_p0)


def _finish(out, log_w):
    """``out`` with normalised weights from unnormalised log weights (points whose density
    is not finite get weight 0)."""
    log_w = np.where(np.isfinite(log_w), log_w, -np.inf)
    w = np.exp(log_w - log_w.max())
    out["weight"] = w / w.sum()
    return out


def weighted_moments(x, weight):
    """Mean and covariance of the points x (rows) under the weights."""
    mean = weight @ x
    centred = x - mean
    return mean, (centred * weight[:, None]).T @ centred
