"""Compiled code is cached on disk: the package's numba kernels and the PyTensor graphs
that contain its Ops (compilation, not run time, dominated short sampling runs)."""

import subprocess
import sys
import textwrap

import numpy as np
import pytensor.tensor as pt
from pytensor.link.numba.dispatch.basic import numba_funcify_and_cache_key

from pymc_gpc import likelihoods as L
from pymc_gpc.ops import ApproxMarginalOp, LatentPredictiveOp

from ..conftest import random_problem

_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import pymc_gpc
    from pymc_gpc import likelihoods as L
    from pymc_gpc.approximations.ep import _parallel_compiled_from, _sequential_sweep
    from pymc_gpc.approximations.adf import _steps
    from pymc_gpc.likelihoods.base import log_lik_map
    rng = np.random.default_rng(0)
    X = rng.normal(size=(30, 2)); y = np.sign(X[:, 0] + 0.1)
    K = np.exp(-0.5 * ((X[:, None] - X[None]) ** 2).sum(-1)) + 1e-6 * np.eye(30)
    pymc_gpc.ep(K, y, L.Probit())
    pymc_gpc.ep(K, y, L.StepLabelNoise(0.1), method="sequential")
    pymc_gpc.laplace(K, y, L.Logistic())
    pymc_gpc.adf(K, y, L.Probit())
    hits = {f.__name__: sum(f.stats.cache_hits.values())
            for f in (_parallel_compiled_from, _sequential_sweep, _steps, log_lik_map)}
    json.dump(hits, sys.stdout)
    """
)


def test_numba_kernels_are_cached_on_disk():
    # Two processes on the package's own cache (``__pycache__`` next to its modules, which
    # the test suite's workers share), with any numba warning an error: a function numba
    # cannot cache (ctypes pointers, closures) warns each time it is compiled, and is
    # compiled in every process, since it is never loaded. The first process compiles what
    # the cache lacks and writes it (in a suite run the workers have mostly done so: it
    # then loads it too); the second loads every kernel from disk.
    cmd = [sys.executable, "-W", "error::numba.core.errors.NumbaWarning", "-c", _SCRIPT]
    for run in ("first", "second"):
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, (run, done.stderr[-3000:])
    assert all(hits >= 1 for hits in eval(done.stdout).values()), done.stdout


def test_the_units_compiled_before_the_workers_start_are_loaded_from_the_cache():
    # tests/conftest.py's WARM_UNITS, compiled while the xdist workers start: each names a
    # function that exists (a renamed one would only warn there), and after a first process
    # has compiled them a second loads every cfunc they register from disk.
    import importlib

    from ..conftest import WARM_UNITS, unit_calls

    units = [unit for group in WARM_UNITS for unit in group]
    assert all(callable(getattr(importlib.import_module(m), f)) for m, f in (u.split(":") for u in units))
    code = (unit_calls(units) + "import gc\nfrom numba.core.ccallback import CFunc\n"
            + "print([c.cache_hits for c in gc.get_objects() if isinstance(c, CFunc)])\n")
    cmd = [sys.executable, "-W", "error::numba.core.errors.NumbaWarning", "-c", code]
    for run in ("first", "second"):
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, (run, done.stderr[-3000:])
    hits = eval(done.stdout)
    assert len(hits) == 7 and all(h == 1 for h in hits), hits  # 2 + 3 + 2 cfuncs, each loaded


def test_the_controller_of_two_workers_waits_for_the_units_before_the_first_test(monkeypatch):
    # tests/conftest.py's hooks: pytest_configure starts one process per worker in the
    # controller (none in a worker or without xdist), and the hook xdist calls before it
    # schedules the first test waits for them
    from types import SimpleNamespace

    from .. import conftest

    started = []
    monkeypatch.setattr(conftest, "_start_warming", started.append)
    for option, worker in ((SimpleNamespace(numprocesses=2), False), (SimpleNamespace(numprocesses=2), True),
                           (SimpleNamespace(numprocesses=0), False), (SimpleNamespace(), False)):
        config = SimpleNamespace(option=option, **({"workerinput": {}} if worker else {}))
        conftest.pytest_configure(config)
    assert started == [conftest.WARM_UNITS]
    monkeypatch.undo()
    conftest._start_warming([("pymc_gpc.kernels:external_kernels",)])
    assert len(conftest._warming) == 1
    conftest.pytest_xdist_node_collection_finished(node=None, ids=[])
    assert conftest._warming == []


def _node(op, y):
    K = pt.dmatrix("K")
    if isinstance(op, LatentPredictiveOp):
        return op(K, pt.dvector("th"), y, pt.dmatrix("Kx"), pt.dvector("ks"))[0].owner
    return op(K, pt.dvector("th"), y)[0].owner


def test_op_graphs_get_a_cache_key_that_is_stable_and_names_the_data():
    # A None key would make every graph containing the Op uncacheable (recompiled at
    # every pm.sample); the key must not depend on the process, and must separate
    # Ops that see different labels (their warm starts are kept apart).
    X, y = random_problem(np.random.default_rng(0), 20)
    keys = []
    for op in (ApproxMarginalOp("ep", L.Probit), ApproxMarginalOp("ep", L.Probit),
               ApproxMarginalOp("laplace", L.Probit), LatentPredictiveOp("ep", L.Probit)):
        _, key = numba_funcify_and_cache_key(op, node=_node(op, y))
        keys.append(key)
    op = ApproxMarginalOp("ep", L.Probit)
    _, other_labels = numba_funcify_and_cache_key(op, node=_node(op, -y))
    assert all(isinstance(k, str) for k in keys)
    assert keys[0] == keys[1]
    assert len({keys[0], keys[2], keys[3], other_labels}) == 4
