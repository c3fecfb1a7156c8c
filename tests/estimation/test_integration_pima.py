"""The CCD on Pima (the README's ARD model, nine hyperparameters) against a long NUTS run
stored in ``tests/reference/pima_nuts.json`` (``tests/reference/pima_nuts.py``: 4 x 1000
draws after 1000 tuning steps): posterior means of the hyperparameters within 0.2
posterior sd of NUTS's and the averaged test log predictive within 0.002."""

import json
import sys
from pathlib import Path

import numpy as np
import pytest

import pymc_gpc
from pymc_gpc.datasets import load
from pymc_gpc.estimation import integration

REFERENCE = Path(__file__).resolve().parents[1] / "reference" / "pima_nuts.json"
sys.path.insert(0, str(REFERENCE.parent))
from pima_nuts import test_log_p as mean_log_p  # noqa: E402

pytestmark = pytest.mark.skipif(not REFERENCE.exists(), reason="no NUTS reference stored")


@pytest.fixture(scope="module")
def ccd():
    pima = load("pima")
    model, gp = pymc_gpc.ard_classifier(pima.X_train, pima.y_train)
    idata = pymc_gpc.sample(model=model, method="ccd", random_seed=1, progressbar=False)
    return pima, model, gp, idata


def test_ccd_means_within_a_fifth_of_a_posterior_sd_of_long_nuts(ccd):
    _, model, _, idata = ccd
    ref = json.loads(REFERENCE.read_text())
    group = idata["integration"]
    w = np.asarray(group["weight"])
    for rv in model.free_RVs:
        mean = w @ np.asarray(group[rv.name]).reshape(w.size, -1)
        gap = np.abs(mean - np.asarray(ref["mean"][rv.name])) / np.asarray(ref["sd"][rv.name])
        assert np.all(gap < 0.2), (rv.name, gap)


def test_ccd_test_log_p_within_0_002_of_long_nuts(ccd):
    pima, _, gp, idata = ccd
    ref = json.loads(REFERENCE.read_text())
    p = integration.predict(gp, pima.X_test, idata)
    assert abs(mean_log_p(p, pima.y_test) - ref["test_log_p"]) < 0.002
