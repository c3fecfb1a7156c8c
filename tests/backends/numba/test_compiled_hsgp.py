"""The compiled HSGP EP evaluation (``backends.numba.compiled_hsgp``) against the Python path
(the Op's ``perform``: ``pymc_gpc.ep`` on ``structures.hsgp.HSGPPrior``, NumPy and SciPy),
central differences and the dense computation on Phi diag(S) Phi^T; and that a numba-compiled
graph takes the compiled path (the Op's Python evaluations stay at zero)."""

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
import pytest
from numba import types

import pymc_gpc
from pymc_gpc import likelihoods as L
from pymc_gpc.backends.numba import dispatch, thread_state
from pymc_gpc.ops import ApproxMarginalOp
from pymc_gpc.structures.hsgp import LaplacianBasis
from pymc_gpc.structures.select import HSGPBinary

N = 60
M_2D = [5, 4]


def _problem(d, ordinal=False, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2.0, 2.0, size=(N, d))
    f = np.sin(2.0 * X[:, 0]) + (X[:, 1] if d > 1 else 0.0) + 0.3 * rng.normal(size=N)
    y = np.digitize(f, [-0.4, 0.4]).astype(float) if ordinal else np.where(f > 0, 1.0, -1.0)
    return X, y


def _functions(lik_type, X, y, m, options=(), x_input=False):
    """(S, theta, hyper[, X]) -> (log Z, dlog Z/dS, dlog Z/dX, dlog Z/dtheta, LOO, sweeps,
    status), compiled with the numba linker and the Python linker, each with its own Op; the
    basis fixed at X."""
    basis = LaplacianBasis(X, m, c=1.5)
    structure = HSGPBinary(basis.description(), X.shape[1])
    S, th, hyper, Xv = pt.dvector("S"), pt.dvector("theta"), pt.dvector("hyper"), pt.dmatrix("X")
    fns, ops = [], []
    for linker in ("numba", "py"):
        op = ApproxMarginalOp("ep", lik_type, options=options, hyper_names=(("log_ls", 1), ("log_amp", 1)),
                              structure=structure)
        out = op(S, Xv if x_input else pt.as_tensor_variable(X), th, pt.as_tensor_variable(y), hyper)
        inputs = [S, th, hyper] + ([Xv] if x_input else [])
        fns.append(pytensor.function(inputs, list(out), mode=pytensor.compile.mode.Mode(linker=linker)))
        ops.append(op)
    return basis, fns, ops


def _variances(basis, d, log_ls, log_amp):
    return basis.variances(np.exp(log_amp) * pm.gp.cov.ExpQuad(d, ls=np.exp(log_ls))).eval()


def _assert_same(got, want, rtol=1e-10):
    assert int(got[5]) == int(want[5]) and int(got[6]) == int(want[6])
    for a, b in zip(got[:5], want[:5]):
        np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol * np.abs(b).max(initial=1.0))


@pytest.fixture
def compiled(monkeypatch):
    monkeypatch.setattr(dispatch, "COMPILED_EP", True)


CASES = [(L.Probit, [], 2, False), (L.ProbitBias, [0.3], 2, False), (L.ProbitNoise, [0.7], 2, False),
         (L.Logistic, [], 2, False), (L.OrderedProbit, [-0.5, 0.5, 0.9], 2, True),
         (L.OrderedLogit, [-0.5, 0.5], 1, True), (L.Probit, [], 3, False)]


@pytest.mark.parametrize("lik_type, theta, d, ordinal", CASES,
                         ids=[f"{c[0].__name__}-{c[2]}d" for c in CASES])
def test_compiled_path_equals_the_python_path_along_a_walk(lik_type, theta, d, ordinal, compiled):
    """Along a random walk of the lengthscale and amplitude (warm starts on both sides), the
    compiled path gives the Python path's log Z, dlog Z/dS, dlog Z/dtheta, LOO terms and sweeps
    to 1e-10, and the numba function solves every point itself (the Op's Python evaluations:
    none; the compiled path's solves: all)."""
    X, y = _problem(d, ordinal)
    m = {1: [12], 2: M_2D, 3: [3, 4, 2]}[d]
    basis, (f_numba, f_py), (op_numba, _) = _functions(lik_type, X, y, m)
    walk = np.random.default_rng(3)
    h = np.array([-0.2, 0.3])
    theta = np.array(theta, dtype=float)
    points = 6
    for _ in range(points):
        h = h + 0.15 * walk.normal(size=2)
        args = (_variances(basis, d, h[0], h[1]), theta, h)
        got, want = f_numba(*args), f_py(*args)
        assert int(got[6]) == 0 and np.all(got[2] == 0.0)
        _assert_same(got, want)
    (key,) = op_numba.backend_state_keys
    assert op_numba._counts["evaluations"] == 0 and thread_state.evaluations(key) == points


def test_gradient_matches_central_differences(compiled):
    """dlog Z/dS along a direction in log S and dlog Z/dsigma (ProbitNoise) against central
    differences of the compiled log Z (tight EP tolerance), to 1e-5."""
    X, y = _problem(2)
    basis, (f_numba, _), (op_numba, _) = _functions(L.ProbitNoise, X, y, M_2D, options=(("tol", 1e-12),))
    S0, theta, hyper = _variances(basis, 2, -0.1, 0.4), np.array([0.6]), np.zeros(2)
    v = np.random.default_rng(5).normal(size=S0.size)
    out = f_numba(S0, theta, hyper)
    eps = 1e-5
    up, down = f_numba(S0 * np.exp(eps * v), theta, hyper)[0], f_numba(S0 * np.exp(-eps * v), theta, hyper)[0]
    np.testing.assert_allclose(np.sum(out[1] * S0 * v), (up - down) / (2 * eps), rtol=1e-5)
    up, down = f_numba(S0, theta + eps, hyper)[0], f_numba(S0, theta - eps, hyper)[0]
    np.testing.assert_allclose(out[3][0], (up - down) / (2 * eps), rtol=1e-5)
    (key,) = op_numba.backend_state_keys
    assert op_numba._counts["evaluations"] == 0 and thread_state.evaluations(key) == 5


def test_evidence_equals_dense_ep_on_the_same_kernel_matrix(compiled):
    """log Z and LOO terms of the compiled path equal ``pymc_gpc.ep`` on the dense
    Phi diag(S) Phi^T (its own engine) to the EP tolerance's accuracy."""
    X, y = _problem(2)
    basis, (f_numba, _), _ = _functions(L.Probit, X, y, M_2D, options=(("tol", 1e-12),))
    S = _variances(basis, 2, 0.1, 0.2)
    Phi = basis(X)
    dense = pymc_gpc.ep(Phi @ (S[:, None] * Phi.T) + 1e-12 * np.eye(N), y, L.Probit(), tol=1e-12)
    out = f_numba(S, np.zeros(0), np.zeros(2))
    np.testing.assert_allclose(out[0], dense.log_z, rtol=1e-8)
    np.testing.assert_allclose(out[4], dense.loo_log_p, rtol=1e-7, atol=1e-9)


def test_a_cold_solve_at_the_sampler_tolerance_reaches_the_engine_value(compiled):
    """The sampler's Op (EP tol 1e-2): its first evaluation, from zero sites, equals the
    engine's value (tol 1e-12) to 1e-6 nats and its gradient to 1e-5 (at a long second
    lengthscale the parallel map contracts slowly and a 1e-2 site change left log Z 0.05 nats
    off); a warm-started evaluation a step away is within the sampler's accuracy (1e-2 nats)."""
    rng = np.random.default_rng(0)
    n = 200
    X = rng.uniform(-2.0, 2.0, size=(n, 2))
    y = np.where(3.0 * X[:, 0] + 0.3 * rng.normal(size=n) > 0, 1.0, -1.0)
    basis = LaplacianBasis(X, [8, 4], c=1.5)
    structure = HSGPBinary(basis.description(), 2)
    S_in, th, hyper = pt.dvector("S"), pt.dvector("theta"), pt.dvector("hyper")
    fns = []
    for op in (ApproxMarginalOp("ep", L.Probit, hyper_names=(("h", 2),), structure=structure).sampling_twin(),
               ApproxMarginalOp("ep", L.Probit, options=(("tol", 1e-12),), hyper_names=(("h", 2),),
                                structure=structure)):
        out = op(S_in, pt.as_tensor_variable(X), th, pt.as_tensor_variable(y), hyper)
        fns.append(pytensor.function([S_in, th, hyper], list(out), mode=pytensor.compile.mode.Mode(linker="numba")))
    assert fns[0].maker.fgraph.toposort()[-1].op.solver_options()["tol"] == 1e-2
    for k, h in enumerate(([0.0, 2.0], [0.05, 1.95])):
        S = basis.variances(np.exp(2.0) * pm.gp.cov.ExpQuad(2, ls=np.exp(np.array(h)))).eval()
        sampler, engine = (f(S, np.zeros(0), np.array(h)) for f in fns)
        assert int(sampler[6]) == 0
        if k == 0:
            assert abs(sampler[0] - engine[0]) < 1e-6
            np.testing.assert_allclose(sampler[1], engine[1], rtol=1e-5, atol=1e-5 * np.abs(engine[1]).max())
        else:
            assert abs(sampler[0] - engine[0]) < 1e-2


def test_a_repeated_point_is_answered_from_the_last_result(compiled):
    """PyMC's NUTS evaluates each draw's start again: the same inputs give the last result's
    outputs without a solve (the compiled solves stay, the calls count), equal to the Python
    path's; the same hyperparameters with another S (or labels) are solved anew."""
    X, y = _problem(2)
    basis, (f_numba, f_py), (op_numba, _) = _functions(L.Probit, X, y, M_2D)
    h = np.array([0.1, 0.2])
    S1, S2 = _variances(basis, 2, 0.1, 0.2), _variances(basis, 2, -0.2, 0.4)
    first = f_numba(S1, np.zeros(0), h)
    (key,) = op_numba.backend_state_keys
    solves, calls = thread_state.evaluations(key), thread_state.tallies(key)["calls"]
    again = f_numba(S1, np.zeros(0), h)
    assert thread_state.evaluations(key) == solves and thread_state.tallies(key)["calls"] == calls + 1
    for a, b in zip(again, first):
        np.testing.assert_array_equal(a, b)
    _assert_same(again, f_py(S1, np.zeros(0), h))
    other = f_numba(S2, np.zeros(0), h)  # same hyper, another S: a solve
    assert thread_state.evaluations(key) == solves + 1
    _assert_same(other, f_py(S2, np.zeros(0), h))


def test_new_training_inputs_rebuild_the_basis_tables(compiled):
    """X as a graph input: a changed X (``pm.set_data``) gets new tables (the compiled path's
    values follow the Python path's at each X), and a NaN in X fails on both as the Python
    path does (-inf, status 2)."""
    X, y = _problem(2)
    basis, (f_numba, f_py), (op_numba, _) = _functions(L.Probit, X, y, M_2D, x_input=True)
    S = _variances(basis, 2, 0.0, 0.0)
    X2 = X + 0.05
    for x in (X, X2, X, X2):
        _assert_same(f_numba(S, np.zeros(0), np.zeros(2), x), f_py(S, np.zeros(0), np.zeros(2), x))
    assert op_numba._counts["evaluations"] == 0
    bad = X.copy()
    bad[3, 1] = np.nan
    for f in (f_numba, f_py):
        out = f(S, np.zeros(0), np.zeros(2), bad)
        assert out[0] == -np.inf and int(out[6]) == 2


def test_failures_are_those_of_the_python_path(compiled):
    """A negative or NaN S, an invalid likelihood parameter: the Python path's outputs (-inf,
    status 2, zero gradients), through the compiled function's fallback; then a valid point."""
    X, y = _problem(2)
    basis, (f_numba, f_py), _ = _functions(L.ProbitNoise, X, y, M_2D)
    S = _variances(basis, 2, 0.0, 0.0)
    negative, nan = S.copy(), S.copy()
    negative[2], nan[0] = -1e-3, np.nan
    for args in [(negative, np.array([0.5])), (nan, np.array([0.5])), (S, np.array([-1.0])), (S, np.array([np.nan]))]:
        got, want = f_numba(*args, np.zeros(2)), f_py(*args, np.zeros(2))
        assert got[0] == want[0] == -np.inf and int(got[6]) == int(want[6]) == 2
        for a, b in zip(got[1:4], want[1:4]):
            np.testing.assert_array_equal(a, b)
    _assert_same(f_numba(S, np.array([0.5]), np.zeros(2)), f_py(S, np.array([0.5]), np.zeros(2)))


def test_periodic_basis_and_other_schedules_stay_on_perform():
    """The routing: the Laplacian basis with EP's default schedule compiles; the periodic
    expansion, a damping option and Laplace do not (``dispatch.compiles_hsgp``)."""
    X, _ = _problem(1)
    laplacian = HSGPBinary(LaplacianBasis(X, [8], c=1.5).description(), 1)
    periodic = HSGPBinary(("periodic", 5, 2.0, (0.0,), (0,)), 1)
    assert dispatch.compiles_hsgp(ApproxMarginalOp("ep", L.Probit, structure=laplacian)) == dispatch.COMPILED_EP
    assert not dispatch.compiles_hsgp(ApproxMarginalOp("ep", L.Probit, structure=periodic))
    assert not dispatch.compiles_hsgp(ApproxMarginalOp("ep", L.Probit, options=(("damping", 0.5),),
                                                       structure=laplacian))
    assert not dispatch.compiles_hsgp(ApproxMarginalOp("laplace", L.Probit, structure=laplacian))
    assert not dispatch.compiles_ep(ApproxMarginalOp("ep", L.Probit, structure=laplacian))


def test_shared_blocks_are_found_replaced_and_released():
    """``thread_state``'s shared rows: found from any thread by (key, n, p, q), a new block
    replacing the old one's row, both gone once the key is released; warm-only blocks of the
    compiled path's length."""
    import threading

    key = "test_shared_blocks"
    h = thread_state.key_hash(key)
    first, second = np.arange(5.0), np.arange(7.0) + 10.0
    assert thread_state.allocate_shared(key, 3, 2, 1, first)
    np.testing.assert_array_equal(thread_state.find_shared_block(h, 3, 2, 1), first)
    assert thread_state.find_shared_block(h, 3, 2, 2).size == 0  # another shape
    seen = []
    worker = threading.Thread(target=lambda: seen.append(thread_state.find_shared_block(h, 3, 2, 1).copy()))
    worker.start()
    worker.join()
    np.testing.assert_array_equal(seen[0], first)
    assert thread_state.allocate_shared(key, 3, 2, 1, second)
    np.testing.assert_array_equal(thread_state.find_shared_block(h, 3, 2, 1), second)
    thread_state.allocate(key, 3, 2, 1, length=thread_state.warm_length(3, 2, 1))
    block = thread_state.find_block(h, 3, 2, 1)
    assert block.size == thread_state.warm_length(3, 2, 1) < thread_state.block_length(3, 2, 1)
    thread_state.release(key)
    assert thread_state.find_shared_block(h, 3, 2, 1).size == 0 and thread_state.find_block(h, 3, 2, 1).size == 0


def test_the_object_mode_steps_are_compiled_once_for_every_model(compiled):
    """The HSGP function's object-mode steps (``compiled_hsgp._allocate_block``,
    ``_basis_block``, ``_fallback_block``) take the model's key as a plain string: two models
    with different labels (two keys) compile each of them for one signature, not one more per
    model (``registered.runtime_key``)."""
    from pymc_gpc.backends.numba import compiled_hsgp

    X, y = _problem(2)
    for labels in (y, -y):
        with pytensor.config.change_flags(numba__cache=False):  # a cached graph would compile no step
            _, (f_numba, _), _ = _functions(L.Probit, X, labels, M_2D)
        f_numba(_variances(LaplacianBasis(X, M_2D, c=1.5), 2, 0.0, 0.0), np.zeros(0), np.zeros(2))
    for step in (compiled_hsgp._allocate_block, compiled_hsgp._basis_block, compiled_hsgp._fallback_block):
        assert len(step.signatures) == 1
        assert not any(isinstance(t, types.Literal) for t in step.signatures[0])
