"""The prior structure chosen from n (issue 60, part 2): ``ard_classifier(inducing="auto")``
and the warning when NUTS samples a dense prior over many rows."""

import warnings

import numpy as np
import pytest

import pymc_gpc
from pymc_gpc import idata as I
from pymc_gpc.gp import models as M
from pymc_gpc.estimation import sampling as S


def _data(n, d=2, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    return X, (X[:, 0] + 0.5 * rng.standard_normal(n) > 0).astype(int)


def _is_fitc(model):
    nodes = S._marginal_nodes(model)
    assert len(nodes) == 1
    return nodes[0].op.structure.name == "fitc"


def test_inducing_count_rule():
    assert M.inducing_count(50) == 50  # never more than n
    assert M.inducing_count(1500) == M.INDUCING_MIN
    assert M.inducing_count(10_000) == 200
    assert M.inducing_count(10**6) == M.INDUCING_MAX


def test_auto_is_dense_up_to_the_row_count_and_fitc_above():
    small, large = M.DENSE_MAX_ROWS, M.DENSE_MAX_ROWS + 1
    assert M.auto_inducing(small) is None
    assert M.auto_inducing(large) == M.inducing_count(large)
    assert M.auto_inducing(large, "meanfield") is None  # no FITC for mean field
    X, y = _data(large)
    model, _ = pymc_gpc.ard_classifier(X, y)
    assert _is_fitc(model) and model.initial_point() is not None
    model, _ = pymc_gpc.ard_classifier(X[:small], y[:small])
    assert not _is_fitc(model)


def test_auto_can_be_overridden():
    X, y = _data(M.DENSE_MAX_ROWS + 1)
    model, _ = pymc_gpc.ard_classifier(X, y, inducing=None)
    assert not _is_fitc(model)
    model, _ = pymc_gpc.ard_classifier(X[:100], y[:100], inducing=10)
    assert _is_fitc(model)


class _Stop(Exception):
    pass


def _sample(monkeypatch, model):
    """``pymc_gpc.sample`` up to ``pm.sample`` (which stops it). The warning comes before
    the chains' start is built: ``init`` given, there is no Laplace start (a MAP-II and a
    Hessian over the model's rows, most of this file's time otherwise)."""
    def fake_sample(*args, **kw):
        raise _Stop

    monkeypatch.setattr(I.pm, "sample", fake_sample)
    with pytest.raises(_Stop):
        S.sample(model=model, progressbar=False, nuts_sampler="pymc", chains=1, init="adapt_diag")


def test_sampling_a_large_dense_model_warns_once_naming_fitc_and_ccd(monkeypatch):
    monkeypatch.setattr(S, "_dense_warned", [])
    X, y = _data(M.DENSE_MAX_ROWS + 1)
    model, _ = pymc_gpc.ard_classifier(X, y, inducing=None)
    with pytest.warns(S.DenseSamplingWarning, match=r"FITC.*method='ccd'"):
        _sample(monkeypatch, model)
    with warnings.catch_warnings():
        warnings.simplefilter("error", S.DenseSamplingWarning)
        _sample(monkeypatch, model)  # once a process


def test_no_warning_for_fitc_or_small_dense(monkeypatch):
    monkeypatch.setattr(S, "_dense_warned", [])
    X, y = _data(M.DENSE_MAX_ROWS + 1)
    with warnings.catch_warnings():
        warnings.simplefilter("error", S.DenseSamplingWarning)
        _sample(monkeypatch, pymc_gpc.ard_classifier(X, y)[0])  # auto: FITC
        _sample(monkeypatch, pymc_gpc.ard_classifier(X[:200], y[:200])[0])
