"""Input checks: every problem is a ValueError that names it, raised before heavy work."""

import contextlib
import threading
import warnings

import numpy as np

# Relative tolerance of the positive semi-definiteness check: K is accepted when
# K + PSD_TOLERANCE * max(diag K) I has a Cholesky factor, i.e. its smallest
# eigenvalue is above -PSD_TOLERANCE * max(diag K) ("PSD up to jitter").
PSD_TOLERANCE = 1e-8

_trust = threading.local()

# The largest input magnitude accepted: the covariance functions form squared distances
# sum_m (x_m - x'_m)^2 / l_m^2, which overflow float64 (max 1.8e308) for |x| near 1e154 at
# unit lengthscales; the limit leaves room for d <= 1e6 columns and lengthscales down to 1e-10
# (4 d |x|^2 / l^2 < 1.8e308). Beyond it the kernel is inf or NaN at every hyperparameter.
INPUT_MAGNITUDE_LIMIT = 1e140

_MULTICLASS_HINT = ("; for more than two classes use a multi-class likelihood: "
                    "MarginalLaplace(likelihood=pymc_gpc.likelihoods.Softmax()) or "
                    "MarginalEP(likelihood=pymc_gpc.likelihoods.MultinomialProbit())")


class SingleMemberClassWarning(UserWarning):
    """A class has a single member in the training labels: its latent function is fitted
    to one point, its predictive probabilities and any per-class hyperparameters rest on
    it alone, and a cross-validation fold or test split may hold no member of it."""


def warn_single_member_classes(labels, counts, name="y"):
    """``SingleMemberClassWarning`` naming every class (label) with exactly one member."""
    single = [labels[k] for k in range(len(labels)) if counts[k] == 1]
    if single:
        shown = ", ".join(repr(v.item() if hasattr(v, "item") else v) for v in single[:10])
        many = len(single) > 1
        warnings.warn(
            f"{name}: class{'es' if many else ''} {shown} ha{'ve' if many else 's'} a single member in the training "
            f"labels; {'their latent functions rest' if many else 'its latent function rests'} on one point "
            "(merge or drop rare classes, or collect more data)", SingleMemberClassWarning, stacklevel=3)


def check_kernel_columns(cov_func, n_columns, name="cov_func"):
    """ValueError when a ``pm.gp.cov`` covariance (or any of a list of them) reads more
    columns than X has: its ``input_dim`` above ``n_columns``, or an ``active_dims`` index
    outside ``range(n_columns)``. Raised where the model is built, before PyMC's IndexError
    from slicing X. Kernels without ``input_dim`` (``Constant``, ``WhiteNoise``) pass."""
    funcs = list(cov_func) if isinstance(cov_func, (list, tuple)) else [cov_func]
    for k, f in enumerate(funcs):
        label = f"{name}[{k}]" if isinstance(cov_func, (list, tuple)) else name
        input_dim = getattr(f, "input_dim", None)
        if input_dim is None:
            continue
        if int(input_dim) > n_columns:
            raise ValueError(f"{label} has input_dim = {int(input_dim)} but X has {n_columns} column"
                             f"{'s' if n_columns != 1 else ''}: give the kernel input_dim = {n_columns} "
                             "(and active_dims for a subset of the columns)")
        active = np.asarray(getattr(f, "active_dims", ()), dtype=int)
        if active.size and (active.max() >= n_columns or active.min() < -n_columns):
            raise ValueError(f"{label} reads columns {active.tolist()} (active_dims) but X has {n_columns} "
                             f"column{'s' if n_columns != 1 else ''}")


@contextlib.contextmanager
def trusted_kernel():
    """Within this block ``check_kernel_matrix`` skips its symmetry and PSD checks.

    Used by the Op, whose K comes from a covariance function at every evaluation: there
    an indefinite K makes the solver fail and the point is rejected (-inf), and the
    extra factorisation would cost a sweep's worth of time at every evaluation.
    """
    previous = getattr(_trust, "on", False)
    _trust.on = True
    try:
        yield
    finally:
        _trust.on = previous


def _reject_symbolic(x, name):
    try:
        from pytensor.graph.basic import Variable
    except ImportError:  # pragma: no cover
        return
    if isinstance(x, Variable):
        raise ValueError(
            f"{name} must be data (a NumPy array, pandas object or pm.Data container), not a "
            f"PyTensor variable such as an expression or random variable ({x!r}): the EP/Laplace "
            "Op needs the values to check them when the model is built"
        )


def data_input(x, name):
    """(values, tensor): a ``pm.Data`` container (a shared variable) or a constant tensor gives
    its current values and itself, anything else (arrays, pandas) itself and None. Other
    PyTensor variables (random variables, expressions) are refused: the classifiers need
    the values to check them before any heavy work."""
    try:
        from pytensor.compile.sharedvalue import SharedVariable
        from pytensor.graph.basic import Constant
    except ImportError:  # pragma: no cover
        return x, None
    if isinstance(x, SharedVariable):
        return x.get_value(), x
    if isinstance(x, Constant):
        return x.data, x
    _reject_symbolic(x, name)
    return x, None


def _label_vector(y, name):
    """Labels (array, list, pandas) as a non-empty 1-D array; a (n, 1) column is squeezed."""
    if hasattr(y, "to_numpy"):  # pandas
        y = y.to_numpy()
    arr = np.asarray(y)
    if arr.ndim != 1:
        arr = np.squeeze(arr)
        if arr.ndim != 1:
            raise ValueError(f"{name} must be one-dimensional, got shape {np.shape(y)}")
    if arr.size == 0:
        raise ValueError(f"{name} is empty")
    return arr


def as_signed_labels(y, name="y", require_both=True):
    """Return binary labels as a float array of -1.0 / +1.0.

    Accepts {-1, +1}, {0, 1}, booleans (False -> -1) and two distinct strings (the
    later in sorted order is +1). Raises ValueError for anything else: NaN/inf, one
    class only (unless ``require_both`` is False: the evidence of one-class labels is
    well defined, a classifier trained on them is not), more than two values, wrong shape.
    """
    _reject_symbolic(y, name)
    arr = _label_vector(y, name)
    if arr.dtype == bool:
        if require_both and (arr.all() or not arr.any()):
            raise ValueError(f"{name} holds only one class; a classifier needs two")
        if require_both:
            warn_single_member_classes([False, True], [int((~arr).sum()), int(arr.sum())], name)
        return np.where(arr, 1.0, -1.0)
    if not np.issubdtype(arr.dtype, np.number):
        # two distinct non-numeric labels (e.g. "No"/"Yes"): sorted, the second is +1
        values = np.unique(arr.astype(str))
        if len(values) != 2:
            raise ValueError(
                f"{name} must hold exactly two classes; found {len(values)}: {values[:10].tolist()}"
                + (_MULTICLASS_HINT if len(values) > 2 else "")
            )
        if require_both:
            warn_single_member_classes(values, [int(np.sum(arr.astype(str) == v)) for v in values], name)
        return np.where(arr.astype(str) == values[1], 1.0, -1.0)
    arr = arr.astype(float)
    if not require_both and np.all(np.abs(arr) == 1.0):  # already signed (the solvers' hot path)
        return arr
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains NaN or inf at positions {np.flatnonzero(~np.isfinite(arr))[:10].tolist()}")
    values = set(np.unique(arr).tolist())
    if values <= {-1.0, 1.0}:
        out = arr
    elif values <= {0.0, 1.0}:
        out = 2.0 * arr - 1.0
    else:
        raise ValueError(
            f"{name} must hold two classes coded as {{-1, +1}}, {{0, 1}} or booleans; "
            f"found values {sorted(values)[:10]}" + (_MULTICLASS_HINT if len(values) > 2 else "")
        )
    if require_both and len(np.unique(out)) != 2:
        raise ValueError(f"{name} holds only one class ({sorted(values)}); a classifier needs two")
    if require_both:
        labels = sorted(values)
        warn_single_member_classes([int(v) if float(v).is_integer() else v for v in labels],
                                   [int(np.sum(arr == v)) for v in labels], name)
    return out


def binary_classes(y, name="y"):
    """The two labels of binary ``y`` in the order of the signed coding: (label coded -1,
    label coded +1), as ``as_signed_labels`` codes them (False / True, 0 / 1, -1 / +1, or two
    strings in sorted order). ``y`` must be valid labels (``as_signed_labels`` first)."""
    if getattr(getattr(y, "dtype", None), "name", None) == "category":
        y = np.asarray(y)
    arr = _label_vector(y, name)
    if arr.dtype == bool:
        return np.array([False, True])
    if not np.issubdtype(arr.dtype, np.number):
        return np.unique(arr.astype(str))
    values = set(np.unique(arr.astype(float)).tolist())
    return np.array([-1, 1]) if values <= {-1.0, 1.0} and -1.0 in values else np.array([0, 1])


def check_kernel_matrix(K, n, name="K"):
    """Check that K is a finite, symmetric, PSD (up to jitter) n x n matrix; return it as float64.

    Inside ``trusted_kernel()`` (K built by a covariance function, once per sampler
    step) the O(n^2) symmetry check and the PSD check (one Cholesky factorisation, see
    ``PSD_TOLERANCE``) are skipped; a negative diagonal, which the solvers' variance
    floors would otherwise hide, is still an error.
    """
    _reject_symbolic(K, name)
    try:
        K = np.asarray(K, dtype=float)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name} must be a numeric matrix: {err}") from None
    if K.shape != (n, n):
        raise ValueError(f"{name} must have shape ({n}, {n}) to match y, got {K.shape}")
    if not np.all(np.isfinite(K)):
        raise ValueError(f"{name} contains NaN or inf")
    if getattr(_trust, "on", False):
        if n and np.min(np.diag(K)) < 0.0:
            raise ValueError(f"{name} has a negative diagonal entry ({np.min(np.diag(K)):.3g}): "
                             "not a covariance matrix")
        return K
    scale = max(np.max(np.abs(K)), 1e-300)
    if np.max(np.abs(K - K.T)) > 1e-8 * scale:
        raise ValueError(f"{name} is not symmetric (max |K - K^T| = {np.max(np.abs(K - K.T)):.3g})")
    _check_psd(K, name)
    return K


def _check_psd(K, name):
    n = K.shape[0]
    delta = PSD_TOLERANCE * max(float(np.max(np.diag(K))), 1e-300)
    shifted = K + delta * np.eye(n) if n else K
    try:
        np.linalg.cholesky(shifted)
    except np.linalg.LinAlgError:
        lam = float(np.linalg.eigvalsh(K)[0])
        raise ValueError(
            f"{name} is not positive semi-definite: smallest eigenvalue {lam:.3g}, below "
            f"-{delta:.3g} (= -{PSD_TOLERANCE:g} max diag); check the covariance or add jitter"
        ) from None


def check_inputs(X, name="X"):
    """Return inputs as a finite 2-D float array; a 1-D X is one input dimension."""
    _reject_symbolic(X, name)
    if hasattr(X, "to_numpy"):  # pandas
        X = X.to_numpy()
    try:
        arr = np.asarray(X, dtype=float)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name} must be numeric: {err}") from None
    if arr.ndim == 1:
        arr = arr[:, None]
    if arr.ndim != 2:
        raise ValueError(f"{name} must be 2-D (n, d) or 1-D, got shape {arr.shape}")
    if arr.shape[0] == 0:
        raise ValueError(f"{name} is empty")
    bad = ~np.isfinite(arr)
    if bad.any():
        rows = np.flatnonzero(bad.any(axis=1))[:10].tolist()
        raise ValueError(f"{name} contains NaN or inf (rows {rows})")
    check_input_magnitude(arr, name)
    return arr


def check_input_magnitude(X, name="X"):
    """ValueError when finite inputs are so large that the kernel's squared distances
    overflow (``INPUT_MAGNITUDE_LIMIT``): the evidence would be -inf with a NaN gradient
    and every prediction NaN, at any hyperparameters."""
    big = np.abs(X) > INPUT_MAGNITUDE_LIMIT
    if big.any():
        rows, cols = np.nonzero(big)
        raise ValueError(
            f"{name} holds values too large for a covariance function ({X[rows[0], cols[0]]:.3g} in row "
            f"{rows[0]}, column {cols[0]}; rows {np.unique(rows)[:10].tolist()}): squared distances between "
            f"inputs overflow float64 beyond |x| = {INPUT_MAGNITUDE_LIMIT:g}; standardise or rescale the inputs"
        )


def as_class_codes(y, name="y", n_classes=None, warn=True):
    """Class labels as integer codes 0..c-1 and the labels in code (column) order.

    Accepts integers, strings, booleans or a pandas categorical (whose categories, in
    their order, are the classes: a category without observations is still a class).
    Other labels are sorted. ``n_classes``, if given, must match the number found (the
    likelihood's). Raises ValueError for NaN/inf, fewer than two classes, wrong shape;
    with ``warn``, a ``SingleMemberClassWarning`` names every class with one member.

    Returns
    -------
    codes : (n,) int64 array; classes : (c,) array of the labels.
    """
    _reject_symbolic(y, name)
    categories = None
    if getattr(getattr(y, "dtype", None), "name", None) == "category":
        cat = y.cat if hasattr(y, "cat") else y  # a Series' accessor, or a bare pd.Categorical
        categories = np.asarray(cat.categories)
        codes = np.asarray(cat.codes, dtype=np.int64)
        if np.any(codes < 0):
            raise ValueError(f"{name} contains missing values at positions {np.flatnonzero(codes < 0)[:10].tolist()}")
        y = codes
    arr = _label_vector(y, name)
    if categories is not None:
        classes, codes = categories, arr.astype(np.int64)
    else:
        if np.issubdtype(arr.dtype, np.number) and not np.all(np.isfinite(arr.astype(float))):
            bad = np.flatnonzero(~np.isfinite(arr.astype(float)))[:10].tolist()
            raise ValueError(f"{name} contains NaN or inf at positions {bad}")
        if arr.dtype == object:
            arr = arr.astype(str)
        classes, codes = np.unique(arr, return_inverse=True)
    c = len(classes)
    if c < 2:
        raise ValueError(f"{name} holds only one class ({classes.tolist()}); a classifier needs two")
    if n_classes is not None and c != n_classes:
        raise ValueError(f"{name} holds {c} classes but the likelihood was given n_classes={n_classes}")
    if warn:
        warn_single_member_classes(classes, np.bincount(codes.astype(np.int64), minlength=c), name)
    return codes.astype(np.int64), classes


BINARY_HINT = ("; for two classes use a binary likelihood (pymc_gpc.likelihoods.Probit, ProbitBias or "
               "Logistic)")


def check_ordinal_levels(n_classes, what):
    """ValueError unless an ordinal model has at least three ordered levels."""
    if n_classes < 3:
        raise ValueError(f"an ordinal likelihood needs at least 3 ordered levels; {what} gives {n_classes}"
                         + BINARY_HINT)


def as_ordinal_codes(y, n_classes, levels=None, name="y"):
    """Ordinal labels as float codes 0..K-1 and the levels in code order.

    Accepts integers 0..K-1 (the levels are then 0..K-1), an ordered pandas categorical
    (its categories, in their order, are the levels), or any labels with ``levels``, the
    K labels from lowest to highest. ``n_classes`` is K, the likelihood's number of
    classes (its cutpoints plus one). Raises ValueError for fewer than 3 levels, a label
    outside the levels (or outside 0..K-1), an unordered categorical or strings without
    ``levels``, NaN/inf and wrong shapes.

    Returns
    -------
    codes : (n,) float array of 0..K-1; levels : (K,) array.
    """
    _reject_symbolic(y, name)
    check_ordinal_levels(n_classes, f"the likelihood's {n_classes - 1} cutpoint(s)")
    is_category = getattr(getattr(y, "dtype", None), "name", None) == "category"
    if levels is not None:
        levels = _label_vector(levels, "levels")
        if len(np.unique(levels.astype(str))) != len(levels):
            raise ValueError(f"levels must be distinct, got {levels.tolist()}")
        if len(levels) != n_classes:
            raise ValueError(f"levels has {len(levels)} entries but the likelihood has {n_classes} classes "
                             f"({n_classes - 1} cutpoints)")
        arr = _label_vector(np.asarray(y, dtype=object) if is_category else y, name)
        lookup = {str(v): k for k, v in enumerate(levels)}
        keys = arr.astype(str)
        unknown = sorted(set(keys.tolist()) - set(lookup))
        if unknown:
            raise ValueError(f"{name} holds labels {unknown[:10]} that are not among the levels {levels.tolist()}")
        return np.array([lookup[k] for k in keys], dtype=float), levels
    if is_category:
        cat = y.cat if hasattr(y, "cat") else y
        if not cat.ordered:
            raise ValueError(f"{name} is an unordered categorical: make it ordered "
                             "(pd.Categorical(..., ordered=True)) or give levels= from lowest to highest")
        categories = np.asarray(cat.categories)
        codes = np.asarray(cat.codes, dtype=np.int64)
        if np.any(codes < 0):
            raise ValueError(f"{name} contains missing values at positions {np.flatnonzero(codes < 0)[:10].tolist()}")
        if len(categories) != n_classes:
            raise ValueError(f"{name} has {len(categories)} ordered levels but the likelihood has {n_classes} "
                             f"classes ({n_classes - 1} cutpoints)")
        return _label_vector(codes, name).astype(float), categories
    arr = _label_vector(y, name)
    if arr.dtype == bool or not np.issubdtype(arr.dtype, np.number):
        raise ValueError(f"{name} must hold integers 0..{n_classes - 1}, an ordered pandas categorical, or labels "
                         f"with levels= giving their order; got {arr.dtype} values {np.unique(arr)[:5].tolist()}")
    arr = arr.astype(float)
    bad = ~(np.isfinite(arr) & (arr == np.round(arr)) & (arr >= 0) & (arr <= n_classes - 1))
    if np.any(bad):
        raise ValueError(f"{name} holds labels outside the integers 0..{n_classes - 1} of the likelihood's "
                         f"{n_classes} classes: {np.unique(arr[bad])[:10].tolist()} at positions "
                         f"{np.flatnonzero(bad)[:10].tolist()}")
    return arr, np.arange(n_classes)


def _changed_training_message(name, recorded, current):
    """The ValueError message for a training ``pm.Data`` container whose value changed."""
    shape, built = np.shape(current), np.shape(recorded)
    if shape[1:] != built[1:]:
        what = f"has shape {shape}, not the shape {built} the evidence was built with (other columns)"
    elif shape != built:
        what = f"has {shape[0]} rows, not the {built[0]} the evidence was built with"
    else:
        what = "holds other values than the evidence was built with"
    return (f"the training inputs' pm.Data container {name!r} {what} (pm.set_data after marginal_likelihood?): "
            "predictions condition on the training inputs of marginal_likelihood; put new inputs in a separate "
            "pm.Data container (e.g. pm.Data(\"X_new\", ...)) and pass it to gp.conditional or gp.predict")


def check_training_values(name, recorded, current):
    """ValueError unless ``current`` (a training container's value now) equals ``recorded``
    (its value when ``marginal_likelihood`` built the evidence)."""
    current = np.asarray(current)
    if current.shape != recorded.shape or not np.array_equal(current, recorded):
        raise ValueError(_changed_training_message(name, recorded, current))
