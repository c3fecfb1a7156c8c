"""Bad input, in one table: every case is a ValueError naming the problem, before heavy work.

``BAD`` rows are (case id, callable, regex the ValueError message must match); they
cover the engine API (``ep``, ``laplace`` with a user K), the likelihood constructors,
the PyMC classes (constructor, ``marginal_likelihood``, ``predict``, ``conditional``)
and ``ard_classifier``. ``CLI_BAD`` rows run ``pymc-gpc`` and expect exit code 2 with
the message on stderr. While a bad row runs, the solvers and ``pm.sample`` are replaced
by tripwires, so a check that came after heavy work would fail the row.

``WORKS`` rows are inputs a user would reasonably pass (pandas objects, integer or
boolean arrays, 1-D X, string labels, ...): they must be accepted, with the expected
coding of the labels.

Random variables as likelihood parameters are checked where they take values: an
out-of-range value drawn at sampling time gives log p = -inf with a finite gradient
and status 2 (``test_out_of_range_random_parameter_is_minus_inf_not_an_error``).
"""

import functools
import re
import sys

import numpy as np
import pandas as pd
import pymc as pm
import pytest
import xarray as xr
from scipy import special

import pymc_gpc
from pymc_gpc import ep, laplace
from pymc_gpc.cli import command as cli
from pymc_gpc import likelihoods as L
from pymc_gpc.approximations.ep import EPState
from pymc_gpc.approximations.laplace import LaplaceState
from pymc_gpc.ops import STATUS_FAILED
from pymc_gpc.structures.hsgp import HSGPPrior, LaplacianBasis
from pymc_gpc.structures.multiclass_hsgp import MulticlassHSGPPrior
from pymc_gpc.validation import as_signed_labels

RNG = np.random.default_rng(20261122)
X0 = RNG.normal(size=(10, 2))
Y0 = np.array([1.0, -1.0] * 5)
K0 = np.exp(-0.5 * ((X0[:, None, :] - X0[None, :, :]) ** 2).sum(-1)) + 1e-6 * np.eye(10)
POINT = {"log_amp": np.array(0.0)}


def build(X, y, cls=pymc_gpc.MarginalEP, likelihood=None, d=2, **kwargs):
    """A small model: amplitude exp(log_amp) times a fixed-lengthscale ExpQuad."""
    with pm.Model() as model:
        log_amp = pm.Normal("log_amp", 0, 1)
        cov = pm.math.exp(log_amp) * pm.gp.cov.ExpQuad(d, ls=1.0)
        gp = cls(cov_func=cov, likelihood=likelihood or L.Probit(), **kwargs)
        gp.marginal_likelihood("y", X=X, y=y)
    return model, gp


@functools.cache
def fitted():
    return build(X0, Y0)


def build_fitc(X, y, d=2):
    """``build`` with the FITC prior (4 inducing inputs from the rows of X)."""
    with pm.Model() as model:
        cov = pm.math.exp(pm.Normal("log_amp", 0, 1)) * pm.gp.cov.ExpQuad(d, ls=1.0)
        gp = pymc_gpc.MarginalEP(cov_func=cov, likelihood=L.Probit(), approx="FITC")
        gp.marginal_likelihood("y", X=X, y=y, Xu=np.asarray(X)[:4])
    return model, gp


def build_multiclass(X, y, dims=(2, 2, 2), cls=pymc_gpc.MarginalLaplace, likelihood=None):
    """Three classes, one ExpQuad per class with input_dim ``dims[k]``."""
    with pm.Model() as model:
        amp = pm.math.exp(pm.Normal("log_amp", 0, 1))
        covs = [amp * pm.gp.cov.ExpQuad(d, ls=1.0) for d in dims]
        gp = cls(cov_func=covs, likelihood=likelihood or L.Softmax())
        gp.marginal_likelihood("y", X=X, y=y)
    return model, gp


Y3 = np.arange(10) % 3


def build_hsgp(X, y, d=2, likelihood=None, cls=pymc_gpc.MarginalEP, cov=None, **options):
    """``build`` with the basis-function prior (``approx="HSGP"``, m = 6 per dimension unless given)."""
    options.setdefault("m", [6] * d)
    with pm.Model() as model:
        cov = cov if cov is not None else pm.math.exp(pm.Normal("log_amp", 0, 1)) * pm.gp.cov.ExpQuad(d, ls=1.0)
        gp = cls(cov_func=cov, likelihood=likelihood or L.Probit(), approx="HSGP", **options)
        gp.marginal_likelihood("y", X=X, y=y)
    return model, gp


def hsgp(**options):
    """Only the constructor, with ``approx="HSGP"`` on a 2-D ExpQuad unless ``cov`` is given."""
    cov = options.pop("cov", pm.gp.cov.ExpQuad(2, ls=1.0))
    return pymc_gpc.MarginalEP(cov_func=cov, likelihood=L.Probit(), approx="HSGP", **options)


PHI0 = LaplacianBasis(X0, [3, 3], c=1.5)(X0)  # (10, 9)
S0 = np.linspace(1.0, 0.1, 9)


def predict_hsgp(Xnew):
    model, gp = build_hsgp(X0, Y0)
    return gp.predict(Xnew, model=model, point=POINT)


PERIODIC = pm.gp.cov.Periodic(1, period=1.0, ls=1.0)


def with_nan(a, where=(0, 0), value=np.nan):
    a = np.array(a, dtype=float)
    a[where] = value
    return a


def predict(Xnew, **kwargs):
    model, gp = fitted()
    kwargs.setdefault("point", POINT)
    return gp.predict(Xnew, model=model, **kwargs)


def conditional(Xnew):
    model, gp = fitted()
    with model:
        return gp.conditional("f_star_" + str(id(Xnew)), Xnew)


def pm_data_X():
    """A random variable as X (pm.Data containers are accepted, checked at their values)."""
    with pm.Model():
        Xd = pm.Normal("Xd", size=X0.shape)
        gp = pymc_gpc.MarginalEP(cov_func=pm.gp.cov.ExpQuad(2, ls=1.0), likelihood=L.Probit())
        gp.marginal_likelihood("y", X=Xd, y=Y0)


def fresh_gp_predict():
    gp = pymc_gpc.MarginalEP(cov_func=pm.gp.cov.ExpQuad(2, ls=1.0), likelihood=L.Probit())
    return gp.predict(X0, point=POINT)


def idata_without(names):
    post = xr.Dataset({n: (("chain", "draw"), np.zeros((1, 3))) for n in names})
    return {"posterior": post}


NOT_PSD = K0.copy()
NOT_PSD[0, 1] = NOT_PSD[1, 0] = 1.5  # |correlation| > 1: an eigenvalue < 0
NOT_SYM = K0.copy()
NOT_SYM[0, 1] += 0.1

ENGINES = {"ep": ep, "laplace": laplace}

# (case id, callable, regex of the ValueError message)
BAD = []
for _name, _run in ENGINES.items():
    BAD += [
        (f"{_name}-K-nan", lambda r=_run: r(with_nan(K0), Y0, L.Probit()), "K contains NaN or inf"),
        (f"{_name}-K-inf", lambda r=_run: r(with_nan(K0, value=np.inf), Y0, L.Probit()), "K contains NaN or inf"),
        (f"{_name}-K-shape", lambda r=_run: r(K0[:9, :9], Y0, L.Probit()), r"shape \(10, 10\) to match y"),
        (f"{_name}-K-not-square", lambda r=_run: r(K0[:, :9], Y0, L.Probit()), r"shape \(10, 10\)"),
        (f"{_name}-K-not-symmetric", lambda r=_run: r(NOT_SYM, Y0, L.Probit()), "not symmetric"),
        (f"{_name}-K-not-psd", lambda r=_run: r(NOT_PSD, Y0, L.Probit()), "not positive semi-definite: smallest eigenvalue"),
        (f"{_name}-K-negative-definite", lambda r=_run: r(-K0, Y0, L.Probit()), "not positive semi-definite"),
        (f"{_name}-K-strings", lambda r=_run: r([["a", "b"], ["c", "d"]], Y0[:2], L.Probit()), "K must be a numeric matrix"),
        (f"{_name}-K-symbolic", lambda r=_run: r(pm.math.constant(K0), Y0, L.Probit()), "not a PyTensor variable"),
        (f"{_name}-y-three-values", lambda r=_run: r(K0, np.arange(10) % 3, L.Probit()), "two classes"),
        (f"{_name}-y-three-strings", lambda r=_run: r(K0, np.array(list("abc") * 3 + ["a"]), L.Probit()), "exactly two classes; found 3"),
        (f"{_name}-y-nan", lambda r=_run: r(K0, with_nan(Y0, 3), L.Probit()), r"y contains NaN or inf at positions \[3\]"),
        (f"{_name}-y-inf", lambda r=_run: r(K0, with_nan(Y0, 3, np.inf), L.Probit()), "y contains NaN or inf"),
        (f"{_name}-y-empty", lambda r=_run: r(np.zeros((0, 0)), np.array([]), L.Probit()), "y is empty"),
        (f"{_name}-y-2d", lambda r=_run: r(K0, np.ones((10, 2)), L.Probit()), "one-dimensional"),
        (f"{_name}-y-length", lambda r=_run: r(K0, Y0[:9], L.Probit()), r"shape \(9, 9\) to match y"),
        (f"{_name}-params-too-many", lambda r=_run: r(K0, Y0, L.Probit(), params=[0.1]), r"takes 0 parameter"),
        (f"{_name}-sigma-zero", lambda r=_run: r(K0, Y0, L.ProbitNoise(), params=[0.0]), "sigma > 0"),
        (f"{_name}-bias-nan", lambda r=_run: r(K0, Y0, L.ProbitBias(), params=[np.nan]), "must be finite"),
    ]
BAD += [
    ("ep-epsilon-0.7", lambda: ep(K0, Y0, L.StepLabelNoise(), params=[0.7]), r"0 <= epsilon < 0.5, got epsilon=0.7"),
    ("ep-warm-state-size", lambda: ep(K0, Y0, L.Probit(), state=EPState(np.zeros(2), np.zeros(2))), "warm-start state has 2 sites"),
    ("ep-method", lambda: ep(K0, Y0, L.Probit(), method="fast"), "method must be"),
    ("ep-damping-0", lambda: ep(K0, Y0, L.Probit(), damping=0.0), r"damping must be in \(0, 1\]"),
    ("laplace-step", lambda: laplace(K0, Y0, L.StepLabelNoise(0.1)), "no Laplace approximation"),
    ("laplace-warm-state-size", lambda: laplace(K0, Y0, L.Probit(), state=LaplaceState(np.zeros(4))), "warm-start state has 4 weights"),
    # likelihood constructors (fixed values are checked at construction)
    ("step-epsilon-0.5", lambda: L.StepLabelNoise(0.5), "0 <= epsilon < 0.5"),
    ("step-epsilon-negative", lambda: L.StepLabelNoise(-0.1), "0 <= epsilon < 0.5"),
    ("step-epsilon-nan", lambda: L.StepLabelNoise(np.nan), "must be finite"),
    ("noise-sigma-0", lambda: L.ProbitNoise(0.0), "sigma > 0"),
    ("noise-sigma-negative", lambda: L.ProbitNoise(-1.0), "sigma > 0"),
    ("noise-sigma-inf", lambda: L.ProbitNoise(np.inf), "must be finite"),
    ("noise-sigma-string", lambda: L.ProbitNoise("abc"), r"must be numbers or PyTensor/PyMC variables"),
    ("bias-nan", lambda: L.ProbitBias(np.nan), "must be finite"),
    ("bias-vector", lambda: L.ProbitBias(np.array([0.1, 0.2])), r"takes 1 parameter\(s\)"),
    # PyMC classes: constructors
    ("gp-likelihood-class-not-instance", lambda: pymc_gpc.MarginalEP(cov_func=pm.gp.cov.ExpQuad(1, ls=1.0), likelihood=L.Probit), "Likelihood instance"),
    ("gp-cov-not-callable", lambda: pymc_gpc.MarginalEP(cov_func=1.0, likelihood=L.Probit()), "cov_func must be"),
    ("gp-jitter-negative", lambda: pymc_gpc.MarginalEP(cov_func=pm.gp.cov.ExpQuad(1, ls=1.0), likelihood=L.Probit(), jitter=-1.0), "jitter must be >= 0"),
    ("gp-laplace-step", lambda: pymc_gpc.MarginalLaplace(cov_func=pm.gp.cov.ExpQuad(1, ls=1.0), likelihood=L.StepLabelNoise(0.1)), "no Laplace approximation"),
    # marginal_likelihood
    ("ml-X-nan", lambda: build(with_nan(X0, (3, 1)), Y0), r"X contains NaN or inf \(rows \[3\]\)"),
    ("ml-X-inf", lambda: build(with_nan(X0, (3, 1), np.inf), Y0), "X contains NaN or inf"),
    ("ml-y-nan", lambda: build(X0, with_nan(Y0, 2)), "y contains NaN or inf"),
    ("ml-y-one-class", lambda: build(X0, np.ones(10)), "only one class"),
    ("ml-y-one-class-bool", lambda: build(X0, np.ones(10, dtype=bool)), "only one class"),
    ("ml-y-one-class-string", lambda: build(X0, np.array(["a"] * 10)), "exactly two classes; found 1"),
    ("ml-y-three-values", lambda: build(X0, np.arange(10) % 3), "two classes"),
    ("ml-y-1-2-coding", lambda: build(X0, np.arange(10) % 2 + 1), r"coded as \{-1, \+1\}, \{0, 1\}"),
    ("ml-y-three-strings", lambda: build(X0, pd.Series(list("abcabcabca"))), "exactly two classes; found 3"),
    ("ml-length-mismatch", lambda: build(X0, Y0[:9]), "X has 10 rows but y has 9 labels"),
    ("ml-empty", lambda: build(X0[:0], Y0[:0]), "X is empty"),
    ("ml-X-3d", lambda: build(np.ones((10, 2, 2)), Y0), "2-D"),
    ("ml-y-2d", lambda: build(X0, np.ones((10, 2))), "one-dimensional"),
    ("ml-X-string-column", lambda: build(pd.DataFrame({"a": X0[:, 0], "b": ["u"] * 10}), Y0), "X must be numeric"),
    ("ml-X-pm-data", pm_data_X, "X must be data .* not a PyTensor variable"),
    # a kernel that reads more columns than X has: named before PyMC's IndexError
    ("ml-kernel-input-dim", lambda: build(X0, Y0, d=3), "cov_func has input_dim = 3 but X has 2 columns"),
    ("ml-kernel-input-dim-1d-X", lambda: build(X0[:, 0], Y0), "cov_func has input_dim = 2 but X has 1 column:"),
    ("ml-kernel-input-dim-fitc", lambda: build_fitc(X0, Y0, d=5), "cov_func has input_dim = 5 but X has 2 columns"),
    ("ml-kernel-input-dim-softmax", lambda: build_multiclass(X0, Y3, dims=(2, 4, 2)),
     r"cov_func\[1\] has input_dim = 4 but X has 2 columns"),
    ("ml-kernel-input-dim-nested-ep", lambda: build_multiclass(X0, Y3, dims=(3, 3, 3), cls=pymc_gpc.MarginalEP,
                                                               likelihood=L.MultinomialProbit()),
     r"cov_func\[0\] has input_dim = 3 but X has 2 columns"),
    # predict / conditional
    ("predict-Xnew-columns", lambda: predict(np.zeros((4, 3))), "Xnew has 3 columns but the training inputs X have 2"),
    ("predict-Xnew-1d-for-2-columns", lambda: predict(np.zeros(4)), "Xnew has 1 columns but the training inputs X have 2"),
    ("predict-Xnew-nan", lambda: predict(with_nan(X0[:3])), "Xnew contains NaN or inf"),
    ("predict-Xnew-empty", lambda: predict(X0[:0]), "Xnew is empty"),
    ("predict-no-point-no-idata", lambda: predict(X0, point=None), "exactly one of point= or idata="),
    ("predict-point-and-idata", lambda: predict(X0, idata=idata_without(["log_amp"])), "exactly one of point= or idata="),
    ("predict-point-missing", lambda: predict(X0, point={"other": 0.0}), r"point is missing values for \['log_amp'\]"),
    ("predict-idata-missing", lambda: predict(X0, point=None, idata=idata_without(["other"])), r"no variables \['log_amp'\]"),
    ("predict-before-fit", fresh_gp_predict, r"call marginal_likelihood\(name, X, y\) before predicting"),
    ("conditional-Xnew-columns", lambda: conditional(np.zeros((4, 3))), "Xnew has 3 columns"),
    ("conditional-Xnew-nan", lambda: conditional(with_nan(X0[:3])), "Xnew contains NaN or inf"),
    # ard_classifier
    ("ard-approximation", lambda: pymc_gpc.ard_classifier(X0, Y0, approximation="vi"), "approximation must be one of"),
    ("ard-feature-names", lambda: pymc_gpc.ard_classifier(X0, Y0, feature_names=["a"]), "feature_names has 1 names for 2 input columns"),
    ("ard-X-nan", lambda: pymc_gpc.ard_classifier(with_nan(X0), Y0), "X contains NaN or inf"),
    ("ard-length-mismatch", lambda: pymc_gpc.ard_classifier(X0, Y0[:8]), "X has 10 rows but y has 8 labels"),
    ("ard-one-class", lambda: pymc_gpc.ard_classifier(X0, np.zeros(10)), "only one class"),
    ("ard-laplace-step", lambda: pymc_gpc.ard_classifier(X0, Y0, approximation="laplace", likelihood=L.StepLabelNoise(0.1)), "no Laplace approximation"),
    ("ard-prior-sd-0", lambda: pymc_gpc.ard_classifier(X0, Y0, prior=(-3.0, 0.0)), r"finite sd > 0"),
    ("ard-prior-not-pair", lambda: pymc_gpc.ard_classifier(X0, Y0, prior=3.0), r"prior must be a pair \(mean, sd\)"),
    ("ard-per-class-binary", lambda: pymc_gpc.ard_classifier(X0, Y0, per_class=True), "per_class=True serves multi-class"),
    ("ard-three-classes-adf", lambda: pymc_gpc.ard_classifier(X0, Y3, approximation="adf"),
     "more than two classes: use approximation='laplace'"),
    ("ard-three-classes-binary-likelihood", lambda: pymc_gpc.ard_classifier(X0, Y3, likelihood=L.Probit()),
     "two classes"),
    # approx="HSGP": its options at construction, the inputs at marginal_likelihood
    ("hsgp-m-missing", lambda: hsgp(), "needs m"),
    ("hsgp-m-too-many", lambda: hsgp(m=[6, 6, 6]), r"one positive integer per active dimension \(2\)"),
    ("hsgp-m-zero", lambda: hsgp(m=[6, 0]), "one positive integer per active dimension"),
    ("hsgp-m-fraction", lambda: hsgp(m=[6, 6.5]), "one positive integer per active dimension"),
    ("hsgp-c-negative", lambda: hsgp(m=[6, 6], c=-1.5), "c must be positive and finite"),
    ("hsgp-c-nan", lambda: hsgp(m=[6, 6], c=np.nan), "c must be positive and finite"),
    ("hsgp-c-three-for-two-dims", lambda: hsgp(m=[6, 6], c=[1.5, 1.5, 1.5]), "c must be positive and finite"),
    ("hsgp-L-zero", lambda: hsgp(m=[6, 6], L=[0.0, 2.0]), "L must be positive and finite"),
    ("hsgp-L-inf", lambda: hsgp(m=[6, 6], L=np.inf), "L must be positive and finite"),
    ("hsgp-L-and-c", lambda: hsgp(m=[6, 6], L=[2.0, 2.0], c=1.5), "at most one of L"),
    ("hsgp-boundary", lambda: hsgp(m=[6, 6], boundary="periodic"), "boundary must be one of"),
    ("hsgp-no-spectral-density", lambda: hsgp(m=[6, 6], cov=pm.gp.cov.Linear(2, c=0.0)),
     "Linear has no power_spectral_density"),
    ("hsgp-scale-not-periodic", lambda: hsgp(m=[6, 6], scale=2.0), "scale is for a periodic kernel"),
    ("hsgp-periodic-c", lambda: hsgp(m=6, c=1.5, cov=PERIODIC), "c: options of pm.gp.HSGP's Laplacian basis"),
    ("hsgp-periodic-m-list", lambda: hsgp(m=[6], cov=PERIODIC), "positive integer for the periodic expansion"),
    ("hsgp-options-without-hsgp", lambda: pymc_gpc.MarginalEP(cov_func=pm.gp.cov.ExpQuad(2, ls=1.0),
                                                              likelihood=L.Probit(), m=[6, 6]),
     "m: options of approx='HSGP'"),
    ("ml-hsgp-X-nan", lambda: build_hsgp(with_nan(X0, (3, 1)), Y0), r"X contains NaN or inf \(rows \[3\]\)"),
    ("ml-hsgp-X-inf", lambda: build_hsgp(with_nan(X0, (3, 1), np.inf), Y0), "X contains NaN or inf"),
    ("ml-hsgp-kernel-input-dim", lambda: build_hsgp(X0, Y0, d=3), "cov_func has input_dim = 3 but X has 2 columns"),
    ("ml-hsgp-constant-column", lambda: build_hsgp(np.column_stack([X0[:, 0], np.ones(10)]), Y0),
     "constant input column"),
    ("ml-hsgp-softmax-X-nan", lambda: build_hsgp(with_nan(X0), Y3, cls=pymc_gpc.MarginalLaplace,
                                                likelihood=L.Softmax()), "X contains NaN or inf"),
    ("predict-hsgp-Xnew-columns", lambda: predict_hsgp(np.zeros((4, 3))),
     "Xnew has 3 columns but the training inputs X have 2"),
    ("predict-hsgp-Xnew-nan", lambda: predict_hsgp(with_nan(X0[:3])), "Xnew contains NaN or inf"),
    ("predict-hsgp-Xnew-inf", lambda: predict_hsgp(with_nan(X0[:3], value=-np.inf)), "Xnew contains NaN or inf"),
    ("ml-hsgp-ordinal-X-inf", lambda: build_hsgp(with_nan(X0, (2, 0), np.inf), Y3, likelihood=L.OrderedProbit([-1.0, 1.0])),
     "X contains NaN or inf"),
    # the HSGP priors given to the engines directly (``structures.hsgp``, ``structures.multiclass_hsgp``)
    ("engine-hsgp-S-negative", lambda: ep(HSGPPrior(PHI0, -S0), Y0, L.Probit()), "S .* has a negative entry"),
    ("engine-hsgp-S-nan", lambda: laplace(HSGPPrior(PHI0, with_nan(S0, 2)), Y0, L.Probit()), "S .* contains NaN or inf"),
    ("engine-hsgp-S-length", lambda: ep(HSGPPrior(PHI0, S0[:8]), Y0, L.Probit()), "HSGP shapes do not match"),
    ("engine-hsgp-Phi-inf", lambda: ep(HSGPPrior(with_nan(PHI0, value=np.inf), S0), Y0, L.Probit()), "Phi contains NaN or inf"),
    ("engine-hsgp-y-length", lambda: ep(HSGPPrior(PHI0, S0), Y0[:9], L.Probit()), "10 points, y has 9 labels"),
    ("engine-hsgp-multiclass-shapes", lambda: MulticlassHSGPPrior(PHI0, np.ones((3, 8))), "multi-class HSGP shapes do not match"),
    ("engine-hsgp-multiclass-one-class", lambda: MulticlassHSGPPrior(PHI0, S0[None]), "c >= 2 latent functions"),
    # ordinal likelihoods
    ("ordinal-cutpoints-equal", lambda: L.OrderedProbit([0.5, 0.5]), "strictly increasing"),
    ("ordinal-cutpoints-decreasing", lambda: L.OrderedLogit([1.0, -1.0]), "strictly increasing"),
    ("ordinal-cutpoints-nan", lambda: L.OrderedLogit([np.nan, 1.0]), "must be finite"),
    ("ordinal-cutpoints-2d", lambda: L.OrderedLogit(np.zeros((2, 2))), "one-dimensional"),
    ("ordinal-sigma-0", lambda: L.OrderedProbit([-1.0, 1.0], sigma=0.0), "sigma > 0"),
    ("ordinal-sigma-negative", lambda: L.OrderedProbit([-1.0, 1.0], sigma=-1.0), "sigma > 0"),
    ("ordinal-ep-label-outside", lambda: ep(K0, np.arange(10) % 4, L.OrderedProbit([-1.0, 1.0])),
     r"labels must be integers 0..2"),
    ("ordinal-laplace-label-fraction", lambda: laplace(K0, np.full(10, 0.5), L.OrderedLogit([-1.0, 1.0])),
     r"labels must be integers 0..2"),
    ("ordinal-ml-label-outside", lambda: build(X0, np.arange(10) % 4, likelihood=L.OrderedLogit([-1.0, 1.0])),
     r"outside the integers 0..2"),
    ("ordinal-ml-two-levels", lambda: build(X0, np.arange(10) % 2, likelihood=L.OrderedProbit([0.0])),
     "at least 3 ordered levels.*binary likelihood"),
    ("ordinal-ml-no-cutpoints", lambda: build(X0, Y3, likelihood=L.OrderedProbit()), "needs its cutpoints"),
    ("ordinal-ml-strings-without-levels", lambda: build(X0, np.array(list("abc"))[Y3], likelihood=L.OrderedProbit([-1.0, 1.0])),
     "levels="),
    ("ordinal-ml-unordered-categorical",
     lambda: build(X0, pd.Categorical(np.array(list("abc"))[Y3]), likelihood=L.OrderedProbit([-1.0, 1.0])),
     "unordered categorical"),
    ("ordinal-meanfield", lambda: build(X0, Y3, cls=pymc_gpc.MarginalMeanField, likelihood=L.OrderedProbit([-1.0, 1.0])),
     "MarginalEP or MarginalLaplace"),
]


class HeavyWork(AssertionError):
    pass


@pytest.fixture
def tripwires(monkeypatch):
    """Fail if a solver or the sampler starts before the input check has raised."""

    def trip(*args, **kwargs):
        raise HeavyWork("heavy work started before the input was rejected")

    import pymc_gpc.approximations.ep as ep_mod

    monkeypatch.setattr(ep_mod, "latent_posterior", trip)
    from pymc_gpc.structures import DensePrior, FITCPrior
    from pymc_gpc.structures.hsgp import HSGPPrior
    from pymc_gpc.structures.multiclass_hsgp import MulticlassHSGPPrior

    monkeypatch.setattr(DensePrior, "posterior", trip)  # the Python EP loop and Newton
    monkeypatch.setattr(FITCPrior, "posterior", trip)
    monkeypatch.setattr(HSGPPrior, "posterior", trip)
    monkeypatch.setattr(MulticlassHSGPPrior, "posterior", trip)
    monkeypatch.setattr(ep_mod, "_parallel_compiled_from", trip)  # the compiled EP loop
    monkeypatch.setattr(pm, "sample", trip)
    monkeypatch.setattr(pm, "find_MAP", trip)


@pytest.mark.parametrize("case, call, match", BAD, ids=[row[0] for row in BAD])
def test_bad_input_is_a_clear_value_error(case, call, match, tripwires):
    with pytest.raises(ValueError, match=match):
        call()


def write(path, text):
    path.write_text(text)
    return str(path)


CLI_BAD = [
    ("cli-missing-file", lambda tmp: ["/nonexistent/train.csv", "--target", "y"], "cannot read /nonexistent/train.csv"),
    ("cli-no-target", lambda tmp: [write(tmp / "a.csv", "a,y\n1,0\n2,1\n")], "--target is required"),
    ("cli-unknown-target", lambda tmp: [write(tmp / "a.csv", "a,y\n1,0\n2,1\n"), "--target", "z"], "no column 'z'"),
    ("cli-no-rows", lambda tmp: [write(tmp / "a.csv", "a,y\n"), "--target", "y"], "no data rows"),
    ("cli-ragged-row", lambda tmp: [write(tmp / "a.csv", "a,b,y\n1,2,0\n3,1\n"), "--target", "y"], "line 3 has 2 fields, the header has 3"),
    ("cli-three-classes-adf", lambda tmp: [write(tmp / "a.csv", "a,y\n1,x\n2,y\n3,z\n"), "--target", "y", "--approximation", "adf"], "more than two classes"),
    ("cli-one-class", lambda tmp: [write(tmp / "a.csv", "a,y\n1,1\n2,1\n"), "--target", "y"], "only one class"),
    ("cli-text-column", lambda tmp: [write(tmp / "a.csv", "a,b,y\n1,u,0\n2,v,1\n"), "--target", "y"], "column 'b' is not numeric"),
    ("cli-missing-value", lambda tmp: [write(tmp / "a.csv", "a,b,y\n1,,0\n2,3,1\n"), "--target", "y"], "column 'b' has missing values .*fill them in"),
    ("cli-nan-value", lambda tmp: [write(tmp / "a.csv", "a,b,y\n1,nan,0\n2,3,1\n"), "--target", "y"], "column 'b' has missing values"),
    ("cli-test-columns-differ", lambda tmp: [write(tmp / "a.csv", "a,b,y\n1,2,0\n2,3,1\n"), "--target", "y", "--test", write(tmp / "t.csv", "a,c\n1,2\n")], "test columns .* differ"),
    ("cli-step-laplace", lambda tmp: ["--data", "crabs", "--approximation", "laplace", "--likelihood", "step"], "no Laplace approximation"),
    ("cli-draws-0", lambda tmp: ["--data", "crabs", "--draws", "0"], "--draws must be >= 1"),
    ("cli-chains-0", lambda tmp: ["--data", "crabs", "--chains", "0"], "--chains must be >= 1"),
    ("cli-tune-negative", lambda tmp: ["--data", "crabs", "--tune", "-1"], "--tune must be >= 0"),
    ("cli-logistic-on-six-classes", lambda tmp: [write(tmp / "a.csv", "a,y\n" + "".join(f"{i},{'uvwxyz'[i % 6]}\n" for i in range(18))),
                                                 "--target", "y", "--likelihood", "logistic"],
     "more than two classes: --likelihood logistic does not fit it with --approximation ep; use --likelihood multinomial-probit"),
    ("cli-softmax-with-ep", lambda tmp: [write(tmp / "a.csv", "a,y\n" + "".join(f"{i},{'uvw'[i % 3]}\n" for i in range(9))),
                                         "--target", "y", "--likelihood", "softmax"],
     "--likelihood softmax does not fit it with --approximation ep; use --likelihood multinomial-probit"),
    ("cli-softmax-on-two-classes", lambda tmp: ["--data", "crabs", "--likelihood", "softmax", "--approximation", "laplace"],
     "--likelihood softmax serves a target with more than two classes"),
    ("cli-shared-kernel-on-two-classes", lambda tmp: ["--data", "crabs", "--shared-kernel"],
     "--shared-kernel serves a target with more than two classes"),
]


@pytest.mark.parametrize("case, argv, match", CLI_BAD, ids=[row[0] for row in CLI_BAD])
def test_cli_bad_input_is_a_clear_error(case, argv, match, tmp_path, capsys, tripwires):
    code = cli.main(argv(tmp_path) + ["--no-progress", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith("pymc-gpc: error: ")
    assert re.search(match, err), err


# ----------------------------------------------------------------------------------
# Reasonable inputs that must work: (case id, X, y, expected signed labels)
# ----------------------------------------------------------------------------------

YS = np.array([1, -1] * 5, dtype=float)
WORKS = [
    ("numpy-float-pm1", X0, YS, YS),
    ("numpy-int-01", X0, (YS > 0).astype(int), YS),
    ("numpy-bool", X0, YS > 0, YS),
    ("list-of-lists-and-list", X0.tolist(), (YS > 0).astype(int).tolist(), YS),
    ("X-int", np.round(3 * X0).astype(int), YS, YS),
    ("X-bool", X0 > 0, YS, YS),
    ("X-float32", X0.astype(np.float32), YS, YS),
    ("pandas-frame-series-01", pd.DataFrame(X0, columns=["a", "b"]), pd.Series((YS > 0).astype(int)), YS),
    ("pandas-nonstandard-index", pd.DataFrame(X0, index=np.arange(10) * 7), pd.Series(YS, index=np.arange(10) * 3), YS),
    ("pandas-strings-yes-no", pd.DataFrame(X0), pd.Series(np.where(YS > 0, "yes", "no")), YS),
    ("numpy-strings", X0, np.where(YS > 0, "M", "F"), YS),  # sorted: "M" > "F" is +1
    ("pandas-categorical", pd.DataFrame(X0), pd.Series(np.where(YS > 0, "b", "a"), dtype="category"), YS),
    ("pandas-nullable-Int64", pd.DataFrame(X0), pd.Series((YS > 0).astype(int), dtype="Int64"), YS),
    ("pandas-nullable-boolean", pd.DataFrame(X0), pd.Series(YS > 0, dtype="boolean"), YS),
    ("y-column-vector", X0, YS[:, None], YS),
    ("y-one-row-frame", X0, pd.DataFrame({"y": (YS > 0).astype(int)}), YS),
]


@pytest.mark.parametrize("case, X, y, want", WORKS, ids=[row[0] for row in WORKS])
def test_reasonable_inputs_work(case, X, y, want):
    _, gp = build(X, y)
    np.testing.assert_array_equal(gp.y, want)
    assert gp.X.shape == (10, 2) and gp.X.dtype == np.float64


def test_one_dimensional_X_is_one_column_and_the_model_evaluates():
    x = pd.Series(X0[:, 0])
    model, gp = build(x, YS, d=1)
    assert gp.X.shape == (10, 1)
    assert np.isfinite(model.compile_logp()(POINT))
    p = gp.predict(X0[:3, 0], point=POINT, model=model)  # 1-D Xnew for a 1-D X
    assert p.shape == (3,) and np.all((p > 0) & (p < 1))


def test_pandas_and_string_labels_give_the_same_logp_as_numpy():
    model_np, _ = build(X0, YS)
    model_pd, _ = build(pd.DataFrame(X0, columns=["a", "b"]), pd.Series(np.where(YS > 0, "yes", "no")))
    assert model_pd.compile_logp()(POINT) == pytest.approx(model_np.compile_logp()(POINT), abs=1e-10)


ENGINE_WORKS = [
    ("one-class-labels", K0, np.ones(10)),  # the evidence of one-class data is well defined
    ("K-list", K0.tolist(), Y0),
    ("K-psd-up-to-rounding", K0 - 1e-6 * np.eye(10) - 1e-12 * np.eye(10), Y0),
    ("y-strings", K0, np.where(Y0 > 0, "b", "a")),
    ("y-bool", K0, Y0 > 0),
    ("n-equals-1", K0[:1, :1], Y0[:1]),
]


@pytest.mark.parametrize("case, K, y", ENGINE_WORKS, ids=[row[0] for row in ENGINE_WORKS])
def test_engine_accepts(case, K, y):
    for run in (ep, laplace):
        res = run(K, y, L.Probit())
        assert np.isfinite(res.log_z) and res.converged


@pytest.mark.parametrize(
    "labels, expected",
    [([-1, 1, 1], [-1, 1, 1]), ([0, 1, 0], [-1, 1, -1]), ([True, False, True], [1, -1, 1]),
     (np.array([0.0, 1.0]), [-1, 1]), (["no", "yes", "no"], [-1, 1, -1])],
)
def test_label_codings(labels, expected):
    np.testing.assert_array_equal(as_signed_labels(labels), expected)


# ----------------------------------------------------------------------------------
# Likelihood parameters as random variables: out of range at sampling time -> -inf
# ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make_lik, value_name, bad_value, good_value",
    [
        (lambda: L.StepLabelNoise(pm.Uniform("epsilon", 0.0, 1.0)), "epsilon_interval__", special.logit(0.7), special.logit(0.1)),
        (lambda: L.ProbitNoise(pm.Normal("sigma", 1.0, 1.0)), "sigma", -0.5, 0.8),
    ],
    ids=["epsilon-0.7", "sigma-negative"],
)
def test_out_of_range_random_parameter_is_minus_inf_not_an_error(make_lik, value_name, bad_value, good_value):
    with pm.Model() as model:
        log_amp = pm.Normal("log_amp", 0, 1)
        gp = pymc_gpc.MarginalEP(cov_func=pm.math.exp(log_amp) * pm.gp.cov.ExpQuad(2, ls=1.0), likelihood=make_lik())
        gp.marginal_likelihood("y", X=X0, y=Y0)
    status = model.replace_rvs_by_values([model["y_status"]])[0]  # at the value variables
    fn = model.compile_fn([model.logp(), model.dlogp(), status], point_fn=True)
    value, grad, status = fn({"log_amp": np.array(0.0), value_name: np.array(bad_value)})
    assert value == -np.inf and status == STATUS_FAILED
    assert np.all(np.isfinite(grad))
    value, grad, status = fn({"log_amp": np.array(0.0), value_name: np.array(good_value)})
    assert np.isfinite(value) and status == 0 and np.all(np.isfinite(grad))


@pytest.mark.parametrize("y, label", [
    (np.array([1, -1, -1, -1, 1, -1, -1, -1, -1, -1]) * 1.0, None),  # two members of +1: no warning
    (np.array([0, 1, 1, 1, 1, 1, 1, 1, 1, 1]), "0"),
    (np.array(["a"] + ["b"] * 9), "'a'"),
    (np.array([True] + [False] * 9), "True"),
])
def test_a_single_member_class_warns_naming_it(y, label):
    """Binary labels: a class with one member in the training labels is a warning naming it."""
    if label is None:  # two members in each class: no warning
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("error", pymc_gpc.validation.SingleMemberClassWarning)
            build(X0, y)
        return
    with pytest.warns(pymc_gpc.validation.SingleMemberClassWarning, match=rf"class {label} has a single member"):
        build(X0, y)


@pytest.mark.parametrize("cls, likelihood", [(pymc_gpc.MarginalLaplace, L.Softmax),
                                             (pymc_gpc.MarginalEP, L.MultinomialProbit)])
def test_a_single_member_class_warns_naming_it_multiclass(cls, likelihood):
    """Several classes: the warning names the class with one member (not the others)."""
    y = np.array(["rare"] + ["head"] * 3 + ["tabl"] * 3 + ["glass"] * 3)
    with pytest.warns(pymc_gpc.validation.SingleMemberClassWarning, match=r"y: class 'rare' has a single member"):
        build_multiclass(X0, y, dims=(2,) * 4, cls=cls, likelihood=likelihood())


def test_table_sizes():
    """The closing note quotes these counts."""
    assert len(BAD) >= 60 and len(CLI_BAD) >= 10 and len(WORKS) >= 10
