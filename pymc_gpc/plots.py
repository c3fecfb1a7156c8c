"""Plots where a person would rather look than read (matplotlib, the ``plot`` extra).

* ``plot_relevance``: ARD relevances, one bar per input (a point estimate) or the
  posterior interval per input (a sampling result).
* ``plot_history``: the log evidence per iteration of ``pymc_gpc.fit`` (with the
  EM-EP bound and the label-noise rate when present).
* ``plot_decision_boundary``: p(y* = +1) over a two-input plane, with the data.
"""

import numpy as np

ARD_NAMES = ("log_w", "log_l", "log_ls")


def _pyplot():
    try:
        import matplotlib.pyplot as plt
    except ImportError as err:  # pragma: no cover - plot extra missing
        raise ImportError("plots need matplotlib: pip install 'pymc-gpc[plot]'") from err
    return plt


def _ard_name(names, var_name):
    if var_name is not None:
        return var_name
    for name in ARD_NAMES:
        if name in names:
            return name
    raise ValueError(f"no ARD variable found (looked for {ARD_NAMES}); pass var_name=")


def plot_relevance(result, *, var_name=None, feature_names=None, ax=None):
    """Bar chart of each input's log inverse squared lengthscale (or log lengthscale).

    ``result``: a ``FitResult`` or point dict (bars), or an ArviZ sampling result
    (posterior mean with a 94 % interval per input).

    Examples
    --------
    >>> result = pymc_gpc.fit(model, method="type2")  # doctest: +SKIP
    >>> pymc_gpc.plots.plot_relevance(result, feature_names=pima.feature_names)  # doctest: +SKIP

    Returns
    -------
    matplotlib.axes.Axes
    """
    plt = _pyplot()
    ax = ax or plt.subplots(figsize=(6, 3))[1]
    if hasattr(result, "point") or isinstance(result, dict):
        point = result.point if hasattr(result, "point") else result
        name = _ard_name(point, var_name)
        values = np.atleast_1d(np.asarray(point[name], float))
        low = high = None
    else:
        post = result["posterior"]
        name = _ard_name(list(post.data_vars), var_name)
        draws = np.asarray(post[name]).reshape(-1, np.asarray(post[name]).shape[-1])
        values = draws.mean(axis=0)
        low, high = np.quantile(draws, [0.03, 0.97], axis=0)
    labels = list(feature_names) if feature_names is not None else [f"x{m}" for m in range(len(values))]
    pos = np.arange(len(values))
    ax.bar(pos, values, color="C0")
    if low is not None:
        ax.errorbar(pos, values, yerr=[values - low, high - values], fmt="none", ecolor="k", capsize=3)
    ax.set_xticks(pos, labels)
    ax.set_ylabel(name)
    ax.set_title("ARD relevance (higher: the input matters more)" if name != "log_ls" else "log lengthscale (lower: matters more)")
    return ax


def plot_history(result, ax=None):
    """Log evidence per iteration of ``fit``; EM-EP adds its bound and epsilon (right axis).

    Examples
    --------
    >>> pymc_gpc.plots.plot_history(pymc_gpc.fit(model, method="em-ep"))  # doctest: +SKIP

    Returns
    -------
    matplotlib.axes.Axes
    """
    plt = _pyplot()
    ax = ax or plt.subplots(figsize=(6, 3))[1]
    history = result.history
    it = np.arange(1, len(history["log_evidence"]) + 1)
    shown = "SVGP-type bound" if result.method == "elbo" else "log evidence"  # what log_evidence holds
    ax.plot(it, history["log_evidence"], label=shown)
    if "bound" in history:
        ax.plot(it, history["bound"], "--", label="bound F (after the M-step)")
    ax.set_xlabel("iteration")
    ax.set_ylabel(shown)
    ax.set_title(f"{result.method}: {'converged' if result.converged else 'not converged'}")
    eps = np.asarray(history.get("epsilon", []), float)
    if eps.size and np.any(np.isfinite(eps)):
        right = ax.twinx()
        right.plot(it, eps, color="C3", label="epsilon")
        right.set_ylabel("epsilon", color="C3")
    ax.legend(loc="lower right")
    return ax


def plot_decision_boundary(gp, X, y, *, point=None, idata=None, model=None, grid=100,
                           max_draws=100, ax=None):
    """Filled contours of p(y* = +1) over the box of two-column inputs X, with the data.

    ``point`` or ``idata`` as for ``gp.predict``; the 0.5 contour is the decision boundary.

    Examples
    --------
    >>> pymc_gpc.plots.plot_decision_boundary(gp, X, y, point=result.point)  # doctest: +SKIP

    Returns
    -------
    matplotlib.axes.Axes
    """
    plt = _pyplot()
    X = np.asarray(X, float)
    if X.ndim != 2 or X.shape[1] != 2:
        raise ValueError(f"plot_decision_boundary needs two input columns, got shape {X.shape}")
    ax = ax or plt.subplots(figsize=(5, 4.5))[1]
    lo, hi = X.min(axis=0), X.max(axis=0)
    pad = 0.05 * (hi - lo)
    g0, g1 = np.meshgrid(np.linspace(lo[0] - pad[0], hi[0] + pad[0], grid),
                         np.linspace(lo[1] - pad[1], hi[1] + pad[1], grid))
    Xg = np.column_stack([g0.ravel(), g1.ravel()])
    p = gp.predict(Xg, point=point, idata=idata, model=model,
                   **({"max_draws": max_draws} if idata is not None else {})).reshape(g0.shape)
    cs = ax.contourf(g0, g1, p, levels=np.linspace(0, 1, 11), cmap="RdBu_r", alpha=0.7)
    ax.contour(g0, g1, p, levels=[0.5], colors="k")
    y = np.asarray(y)
    positive = y > 0
    ax.scatter(*X[positive].T, marker="+", c="k", label="y = +1")
    ax.scatter(*X[~positive].T, marker="o", facecolors="none", edgecolors="k", label="y = -1")
    plt.colorbar(cs, ax=ax, label="p(y* = +1)")
    ax.legend(loc="upper right")
    return ax


def plot_fit(result, relevance_path, history_path, feature_names=None):
    """The CLI's two figures of a point estimate, saved to the given paths; ``feature_names``
    label the relevance bars (``plot_relevance``)."""
    plt = _pyplot()
    ax = plot_relevance(result, feature_names=feature_names)
    ax.figure.tight_layout()
    ax.figure.savefig(relevance_path)
    ax = plot_history(result)
    ax.figure.tight_layout()
    ax.figure.savefig(history_path)
    plt.close("all")
