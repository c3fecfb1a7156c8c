"""``numerics.plain``: the Python path hands the compiled EP loop C-contiguous, writable
arrays, as the compiled EP graph does, so that it runs that graph's specialisation instead of
compiling another one per layout or read-only flag (PyTensor passes a graph's constants, the
labels, read-only)."""

import ast
import inspect

import numpy as np

from pymc_gpc import likelihoods as L
from pymc_gpc.approximations import ep
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
    a, labels = np.arange(6.0), np.arange(6)
    assert plain(a) is a and plain(labels) is labels  # the dtype is kept
    for b in (_read_only(a), np.asfortranarray(a.reshape(2, 3)), a[::2]):
        c = plain(b)
        assert c is not b and c.flags.c_contiguous and c.flags.writeable and c.dtype == b.dtype
        np.testing.assert_array_equal(c, b)


def test_read_only_labels_reach_the_compiled_ep_loop_plain(monkeypatch):
    """Both entries to the compiled loop (``ep_warm``, the sampler's; ``ep``) pass it C-ordered,
    writable arrays where they were given read-only labels and parameters."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(12, 2))
    K = np.exp(-0.5 * ((X[:, None, :] - X[None]) ** 2).sum(-1)) + 1e-6 * np.eye(12)
    y = _read_only(np.where(X[:, 0] > 0, 1.0, -1.0))
    th = _read_only(np.zeros(0))
    seen_warm, seen_ep = [], []
    with monkeypatch.context() as m:  # one at a time: compiled code calls the other by name
        _recording(m, ep, "ep_warm_compiled", seen_warm)
        assert ep.ep_warm(K, y, L.Probit(), th, None, tol=1e-8) is not None
    with monkeypatch.context() as m:
        _recording(m, ep, "_parallel_compiled_from", seen_ep)
        assert ep.ep(K, y, L.Probit(), th).converged
    assert _all_plain(seen_warm) and _all_plain(seen_ep)


def _jitted_calls(module, names):
    """(caller, call) for each call of ``names`` inside a ``@njit`` function of ``module``."""
    tree = ast.parse(inspect.getsource(module))
    for fn in ast.walk(tree):
        if isinstance(fn, ast.FunctionDef) and any("njit" in ast.unparse(d) for d in fn.decorator_list):
            for call in ast.walk(fn):
                if isinstance(call, ast.Call) and getattr(call.func, "id", None) in names:
                    yield fn.name, call


def test_compiled_code_passes_the_ep_loop_no_literal_arguments():
    """numba types an int or bool constant that compiled code passes (``True``, a module
    constant such as ``ANDERSON_MEMORY``) as a literal, ``Literal[bool](True)``, and compiles the
    callee again for it, apart from the specialisation that the Python path (``ep``,
    ``ep_warm``) uses: the compiled callers of the loop pass ``np.bool_`` / ``np.int64``."""
    from pymc_gpc.backends.numba import compiled_ep

    found = 0
    for module in (ep, compiled_ep):
        constants = {name for name in vars(module) if name.isupper()}
        for caller, call in _jitted_calls(module, ("ep_warm_compiled", "_parallel_compiled_from")):
            found += 1
            for arg in call.args:
                literal = (isinstance(arg, ast.Constant) and isinstance(arg.value, (bool, int))
                           or getattr(arg, "id", None) in constants)
                assert not literal, f"{module.__name__}.{caller} passes a literal to the EP loop"
    assert found == 2  # compiled_ep.evaluate -> ep_warm_compiled -> _parallel_compiled_from
