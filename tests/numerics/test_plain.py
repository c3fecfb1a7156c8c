"""``numerics.plain``: the Python path hands compiled code C-contiguous, writable arrays, so
that it runs the specialisation the compiled graphs use instead of compiling another one per
layout or read-only flag (PyTensor passes a graph's constants, the labels and X, read-only)."""

import numpy as np

from pymc_gpc import likelihoods as L
from pymc_gpc.approximations import ep
from pymc_gpc.kernels import ARDKernelOp
from pymc_gpc.numerics import plain


def _read_only(a, order="C"):
    a = np.array(a, dtype=float, order=order)
    a.flags.writeable = False
    return a


def _recording(monkeypatch, module, name, seen):
    """``module.name`` (a compiled function) wrapped to record its array arguments."""
    compiled = getattr(module, name)

    def wrapper(*args):
        seen.extend(a for a in args if isinstance(a, np.ndarray))
        return compiled(*args)

    monkeypatch.setattr(module, name, wrapper)


def _all_plain(arrays):
    return bool(arrays) and all(a.flags.c_contiguous and a.flags.writeable for a in arrays)


def test_plain_copies_only_what_is_not_plain():
    a = np.arange(6.0)
    assert plain(a) is a
    for b in (_read_only(a), np.asfortranarray(a.reshape(2, 3)), a[::2], np.arange(6)):
        c = plain(b)
        assert c is not b and c.flags.c_contiguous and c.flags.writeable and c.dtype == np.float64
        np.testing.assert_array_equal(c, b)


def test_read_only_labels_and_inputs_reach_the_compiled_code_plain(monkeypatch):
    """The compiled functions see C-ordered, writable arrays (the specialisation that the
    compiled graphs use) where they were given read-only and Fortran-ordered ones."""
    import pymc_gpc.kernels as kernels

    rng = np.random.default_rng(0)
    X = _read_only(rng.normal(size=(12, 2)), order="F")
    K = np.exp(-0.5 * ((X[:, None, :] - X[None]) ** 2).sum(-1)) + 1e-6 * np.eye(12)
    y = _read_only(np.where(X[:, 0] > 0, 1.0, -1.0))
    th = _read_only(np.zeros(0))
    seen_ep, seen_kernel = [], []
    _recording(monkeypatch, ep, "ep_warm_compiled", seen_ep)
    _recording(monkeypatch, kernels, "ard_kernel", seen_kernel)
    assert ep.ep_warm(K, y, L.Probit(), th, None, tol=1e-8) is not None
    assert _all_plain(seen_ep)
    outputs = [[None], [None]]
    ARDKernelOp((False, False), symmetric=True).perform(None, [X, X, _read_only([1.0, 0.5]), 1.0, 0.0, 0.0], outputs)
    np.testing.assert_allclose(outputs[0][0], np.exp(-0.5 * ((X[:, None, :] - X[None]) ** 2 * [1.0, 0.5]).sum(-1)))
    assert _all_plain(seen_kernel)
