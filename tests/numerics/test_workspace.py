"""``numerics.workspace.ArrayPool``: large arrays are reused, and never while anything holds them."""

import threading
import time

import numpy as np
import pytest

from pymc_gpc import ep
from pymc_gpc import likelihoods as L
from pymc_gpc.numerics import workspace
from pymc_gpc.numerics.workspace import ArrayPool
from pymc_gpc.structures import FITCPrior

from ..conftest import random_problem


def test_an_idle_array_is_reused_and_a_held_one_never():
    pool = ArrayPool(min_bytes=1000)
    a = pool.empty((20, 100))
    b = pool.empty((20, 100))
    assert b is not a  # a is held
    a_id = id(a)
    del a
    c = pool.empty((20, 100))
    assert id(c) == a_id  # the idle array came back
    view = c[:, :5]  # a view alone keeps its base in use
    del c
    d = pool.empty((20, 100))
    assert d is not view.base and d is not b
    assert pool.empty((20, 100), np.float32).dtype == np.float32  # another dtype: a fresh array
    assert pool.empty((100, 20)).shape == (100, 20)  # another shape: a fresh array
    small = pool.empty((3, 3))  # below min_bytes: plain np.empty, not kept
    assert all(small is not x for x in pool._arrays)
    assert pool.empty((20, 100), order="C").flags.c_contiguous


def test_copy_equals_numpy_copy_in_either_order():
    pool = ArrayPool(min_bytes=0)
    for a in (np.arange(12.0).reshape(3, 4), np.asfortranarray(np.arange(12.0).reshape(3, 4)), np.float64(2.5)):
        c = pool.copy(a)
        assert c is not a and c.shape == np.shape(a)
        np.testing.assert_array_equal(c, a)


def test_idle_arrays_are_dropped_beyond_the_budget():
    pool = ArrayPool(min_bytes=0, max_bytes=10 * 8000)
    held = [pool.empty((1000,)) for _ in range(5)]
    for shape in [(1000 + k,) for k in range(20)]:
        pool.empty(shape)  # each one idle at once
    assert pool.idle_bytes() <= pool.max_bytes
    assert all(any(h is a for a in pool._arrays) for h in held)  # arrays in use are never dropped


def test_threads_never_share_an_array():
    pool = ArrayPool(min_bytes=0)
    errors = []

    def work(k):
        for r in range(100):
            a = pool.empty((64,))
            a[...] = k
            time.sleep(1e-4)  # let the other threads run while a is held
            if not np.all(a == k):  # another thread wrote into it meanwhile
                errors.append((k, r))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(pool._arrays) <= 8


def test_fitc_results_kept_alive_are_not_overwritten(monkeypatch):
    # every FITC array goes through the pool: a result held while later evaluations run
    # keeps its gradient, and arrays of dropped results are reused
    pool = ArrayPool(min_bytes=0)
    monkeypatch.setattr(workspace, "POOL", pool)
    monkeypatch.setattr("pymc_gpc.structures.fitc.POOL", pool)
    rng = np.random.default_rng(3)
    X, y = random_problem(rng, 60)
    Xu = X[:12]

    def evaluate(scale):
        sq = lambda A, B: np.sum((A[:, None] - B[None]) ** 2, -1) / scale  # noqa: E731
        prior = FITCPrior(np.exp(-sq(Xu, Xu)) + 1e-8 * np.eye(12), np.exp(-sq(Xu, X)), np.ones(60))
        return ep(prior, y, L.Probit(), tol=1e-10)

    first = evaluate(1.0)
    kept = first.dlog_z_dK[1].copy()
    for scale in (0.5, 2.0, 3.0, 0.7):
        evaluate(scale)
    np.testing.assert_array_equal(first.dlog_z_dK[1], kept)
    np.testing.assert_allclose(evaluate(1.0).dlog_z_dK[1], kept, rtol=1e-12, atol=1e-14)
    n_arrays = len(pool._arrays)
    assert n_arrays >= 6  # V, E and dlog Z / dK_uf of the held result and of the last one
    for scale in (0.5, 2.0, 3.0):
        evaluate(scale)
    assert len(pool._arrays) == n_arrays  # dropped results' arrays were reused


def test_multiclass_fitc_results_kept_alive_are_not_overwritten(monkeypatch):
    # the multi-class FITC structure's pooled arrays (the stacked Q of A's formation, the
    # transposed buffer of the V_k R_kk, dlog Z / dK_uf): a softmax Laplace result held while
    # later evaluations run keeps its gradient and its posterior's V_k R_kk; the same
    # evaluation with freshly allocated arrays gives the same numbers
    from pymc_gpc.approximations.softmax_laplace import softmax_laplace
    from pymc_gpc.structures import multiclass_fitc
    from pymc_gpc.structures.multiclass_fitc import MulticlassFITCPrior

    rng = np.random.default_rng(4)
    n, m, c = 50, 8, 3
    X = rng.normal(size=(n, 2))
    y = rng.integers(0, c, n)
    Xu = X[:m]

    def evaluate(scale):
        sq = lambda A, B: np.sum((A[:, None] - B[None]) ** 2, -1) / scale  # noqa: E731
        amps = np.array([1.0, 2.0, 0.5])[:, None, None]
        prior = MulticlassFITCPrior(amps * (np.exp(-sq(Xu, Xu)) + 1e-8 * np.eye(m)), amps * np.exp(-sq(Xu, X)),
                                    np.repeat(amps[:, 0], n, axis=1))
        return softmax_laplace(prior, y, with_loo=False)

    fresh = evaluate(1.0)  # the package's pool: arrays this small are fresh ones
    pool = ArrayPool(min_bytes=0)
    monkeypatch.setattr(multiclass_fitc, "POOL", pool)
    first = evaluate(1.0)
    np.testing.assert_allclose(first.dlog_z_dK.Kuf, fresh.dlog_z_dK.Kuf, rtol=1e-12, atol=1e-14)
    kept_grad, kept_VR = first.dlog_z_dK.Kuf.copy(), [v.copy() for v in first.posterior._column_pass()[1]]
    for scale in (0.5, 2.0, 3.0):
        evaluate(scale)
    np.testing.assert_array_equal(first.dlog_z_dK.Kuf, kept_grad)
    for v, kept in zip(first.posterior._column_pass()[1], kept_VR):
        np.testing.assert_array_equal(v, kept)
        assert v.flags.f_contiguous
    assert len(pool._arrays) >= 3  # Q, the V_k R_kk buffer and dlog Z / dK_uf went through it
