"""The log evidence of class labels is at most 0 (p(y) <= 1) for several classes too, issue 58.

A multi-class solve (softmax Laplace, multinomial probit EP; dense and FITC) whose log
evidence is above 0 or NaN did not reach a fixed point: like the binary path
(``tests/approximations/test_evidence_bound.py``), it must be retried along the
structure's schedule and, if every run is above the bound, come out of the evidence Op as
-inf with status 2. The solver is wrapped to add a constant to every log evidence it
returns, so the true value (negative, checked) is pushed above 0.
"""

import dataclasses

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest

from pymc_gpc import likelihoods as L
from pymc_gpc.approximations import registry, solve as solve_module
from pymc_gpc.ops import STATUS_FAILED, ApproxMarginalOp
from pymc_gpc.structures.select import DENSE_MULTICLASS, FITC_MULTICLASS

CASES = [("laplace", L.Softmax), ("ep", L.MultinomialProbit)]


def _data(n=12, c=3, m=5):
    rng = np.random.default_rng(3)
    X = rng.uniform(-2, 2, (n, 1))
    y = np.arange(n) % c
    Xu = np.linspace(-2, 2, m)[:, None]

    def k(A, B):
        return 1.5 * np.exp(-0.5 * (A - B.T) ** 2 / 0.8 ** 2)

    K = np.stack([k(X, X) + 1e-6 * np.eye(n)] * c)
    Kuu = np.stack([k(Xu, Xu) + 1e-6 * np.eye(m)] * c)
    Kuf = np.stack([k(Xu, X)] * c)
    kd = np.full((c, n), 1.5 + 1e-6)
    return {"dense-multiclass": (K,), "fitc-multiclass": (Kuu, Kuf, kd)}, y.astype(float)


def _evaluate(structure, approx, lik_type, kernels, y):
    op = ApproxMarginalOp(approx, lik_type, (("tol", 1e-10),), structure=structure)
    out = op(*[pt.as_tensor_variable(a) for a in kernels], pt.zeros(0), y)
    fn = pytensor.function([], [out[0], out[-1]], mode="FAST_COMPILE")
    value, status = fn()
    return float(value), int(status), op


def _shifted(monkeypatch, shift, calls):
    """Wrap the registry's solvers so that every log evidence is raised by ``shift``."""
    original = solve_module.solve

    def shifted(approximation, K, y, lik, params, state, options):
        calls.append(dict(options))
        result = original(approximation, K, y, lik, params, state, options)
        return dataclasses.replace(result, log_z=result.log_z + shift)

    monkeypatch.setattr(solve_module, "solve", shifted)


@pytest.mark.parametrize("structure", [DENSE_MULTICLASS, FITC_MULTICLASS], ids=lambda s: s.name)
@pytest.mark.parametrize("approx, lik_type", CASES)
def test_evidence_above_zero_is_a_failed_solve(monkeypatch, structure, approx, lik_type):
    arrays, y = _data()
    honest, status, _ = _evaluate(structure, approx, lik_type, arrays[structure.name], y)
    assert status == 0 and -np.inf < honest < 0.0  # the unshifted evidence: finite, below the bound
    calls = []
    _shifted(monkeypatch, 1.0 - honest, calls)  # every run now returns log q(y) = +1
    value, status, op = _evaluate(structure, approx, lik_type, arrays[structure.name], y)
    assert value == -np.inf and status == STATUS_FAILED
    schedule = registry.get(approx).retry_schedule({"tol": 1e-10}, structure.name)
    # the first run, then every retry of the structure's schedule (each above the bound)
    assert len(calls) == 1 + len(schedule)
    assert op.counts["failed"] == 1 and op.counts["retries"] == len(schedule)


@pytest.mark.parametrize("approx, lik_type", CASES)
def test_nan_evidence_is_a_failed_solve(monkeypatch, approx, lik_type):
    arrays, y = _data()
    _shifted(monkeypatch, np.nan, [])
    value, status, _ = _evaluate(DENSE_MULTICLASS, approx, lik_type, arrays["dense-multiclass"], y)
    assert value == -np.inf and status == STATUS_FAILED


@pytest.mark.parametrize("approx, lik_type", CASES)
def test_a_retry_below_the_bound_is_kept(monkeypatch, approx, lik_type):
    """Only the first run is above the bound: the first retry's value (the honest one) is used."""
    arrays, y = _data()
    honest, _, _ = _evaluate(DENSE_MULTICLASS, approx, lik_type, arrays["dense-multiclass"], y)
    original, calls = solve_module.solve, []

    def first_broken(approximation, K, y, lik, params, state, options):
        calls.append(1)
        result = original(approximation, K, y, lik, params, state, options)
        return dataclasses.replace(result, log_z=5.0) if len(calls) == 1 else result

    monkeypatch.setattr(solve_module, "solve", first_broken)
    value, status, _ = _evaluate(DENSE_MULTICLASS, approx, lik_type, arrays["dense-multiclass"], y)
    assert len(calls) == 2 and status == 0
    assert value == pytest.approx(honest, abs=1e-8)
