"""The PyTensor Op: value, gradients through pm.gp.cov kernels, failures, pickling."""

import gc
import warnings

import cloudpickle
import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
import pytest
from numba import types

from pymc_gpc import ep, laplace
from pymc_gpc import likelihoods as L
from pymc_gpc.ops import STATUS_FAILED, ApproxMarginalOp
from pymc_gpc.backends.numba import thread_state

from ..conftest import random_problem

CASES = [("ep", L.ProbitNoise, 0.7), ("laplace", L.ProbitNoise, 0.7), ("ep", L.StepLabelNoise, 0.1),
         ("ep", L.ProbitBias, -0.3), ("laplace", L.Logistic, None), ("ep", L.Logistic, None),
         ("laplace", L.Probit, None), ("laplace", L.ProbitBias, -0.3)]


def compiled(approx, lik_type, X, y, options=(("tol", 1e-10),)):
    """log Z and its gradient in (log ls, log amp, theta) through a sum-of-kernels graph.

    EP is converged tightly (the sampler's default tol 1e-2 would leave finite
    differences at the 1e-5 level: see ``test_sampling_tolerance_*``)."""
    log_ls, log_amp = pt.dvector("log_ls"), pt.dscalar("log_amp")
    theta = pt.dvector("theta")
    d = X.shape[1]
    cov = pt.exp(log_amp) * pm.gp.cov.ExpQuad(d, ls=pt.exp(log_ls)) + 0.3 * pm.gp.cov.Matern52(d, ls=2.0)
    K = cov(X) + 1e-6 * pt.eye(X.shape[0])
    out = ApproxMarginalOp(approx, lik_type, options if approx == "ep" else ())(K, theta, y)
    grads = pytensor.grad(out[0], [log_ls, log_amp, theta])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no object-mode (or any) warning at compile time
        fn = pytensor.function([log_ls, log_amp, theta], [out[0], *grads, out[5]])
    return fn, pytensor.function([log_ls, log_amp], K)


@pytest.mark.parametrize("approx, lik_type, value", CASES)
def test_op_gradients_through_a_pymc_kernel_match_finite_differences(approx, lik_type, value):
    rng = np.random.default_rng(11)
    X, y = random_problem(rng, 25, d=2)
    fn, kernel = compiled(approx, lik_type, X, y)
    theta = np.array([] if value is None else [value])
    p = [np.log([0.8, 1.3]), np.log(2.0), theta]
    val, g_ls, g_amp, g_th, status = fn(*p)
    assert status == 0
    # value equals the engine on the same kernel matrix
    K = kernel(p[0], p[1])
    engine = (ep if approx == "ep" else laplace)(K, y, lik_type(*theta))
    assert val == pytest.approx(engine.log_z, abs=1e-8)
    h = 1e-5
    for k in range(2):
        e = np.zeros(2)
        e[k] = h
        fd = (fn(p[0] + e, p[1], theta)[0] - fn(p[0] - e, p[1], theta)[0]) / (2 * h)
        assert g_ls[k] == pytest.approx(fd, rel=1e-5, abs=1e-7)
    fd = (fn(p[0], p[1] + h, theta)[0] - fn(p[0], p[1] - h, theta)[0]) / (2 * h)
    assert g_amp == pytest.approx(fd, rel=1e-5, abs=1e-7)
    if theta.size:
        fd = (fn(p[0], p[1], theta + h)[0] - fn(p[0], p[1], theta - h)[0]) / (2 * h)
        assert g_th[0] == pytest.approx(fd, rel=1e-5, abs=1e-7)


@pytest.mark.parametrize("approx, lik_type", [("laplace", L.Softmax), ("ep", L.MultinomialProbit)])
def test_multiclass_op_gradient_matches_finite_differences(approx, lik_type):
    """The multi-class Op at the engine's tight tolerance (1e-12): its value is the engine's
    on the same kernels, and its gradient through three per-class pm.gp.cov kernels agrees
    with central differences to rtol 1e-6 (log q is stationary in the mode / sites, so
    the solve's tolerance enters the differences only at its square)."""
    from pymc_gpc import multinomial_probit_ep, softmax_laplace
    from pymc_gpc.structures.select import DENSE_MULTICLASS

    rng = np.random.default_rng(12)
    X = rng.uniform(-2, 2, (10, 1))
    y = np.array([0, 1, 2, 0, 1, 2, 2, 1, 0, 2], dtype=float)
    log_ls, log_v = pt.dvector("log_ls"), pt.dscalar("log_v")
    K = pt.stack([pt.exp(log_v + 0.3 * k) * pm.gp.cov.ExpQuad(1, ls=pt.exp(log_ls[k]))(X) + 1e-6 * pt.eye(10)
                  for k in range(3)])
    out = ApproxMarginalOp(approx, lik_type, (("tol", 1e-12),), structure=DENSE_MULTICLASS)(K, pt.zeros(0), y)
    fn = pytensor.function([log_ls, log_v], [out[0], *pytensor.grad(out[0], [log_ls, log_v]), out[5]])
    p = [np.log([0.7, 1.2, 0.9]), np.log(1.5)]
    val, g_ls, g_v, status = fn(*p)
    assert status == 0
    engine = softmax_laplace if approx == "laplace" else multinomial_probit_ep
    assert val == pytest.approx(engine(pytensor.function([log_ls, log_v], K)(*p), y.astype(int), tol=1e-12).log_z,
                                abs=1e-9)
    h = 1e-5
    for k in range(3):
        e = np.zeros(3)
        e[k] = h
        fd = (fn(p[0] + e, p[1])[0] - fn(p[0] - e, p[1])[0]) / (2 * h)
        assert g_ls[k] == pytest.approx(fd, rel=1e-6, abs=1e-8), (k, g_ls[k], fd)
    fd = (fn(p[0], p[1] + h)[0] - fn(p[0], p[1] - h)[0]) / (2 * h)
    assert g_v == pytest.approx(fd, rel=1e-6, abs=1e-8)


@pytest.mark.parametrize(
    "log_amp, theta, fails",
    [
        (200.0, [0.5], False),  # K ~ 1e87: EP still converges to a finite evidence
        (-200.0, [0.5], False),  # K ~ 1e-87: the prior is a point mass at 0
        (0.0, [-1.0], True),  # sigma <= 0
        (0.0, [np.nan], True),  # NaN parameter
    ],
)
def test_extremes_give_finite_values_or_minus_inf_never_nan(log_amp, theta, fails):
    rng = np.random.default_rng(12)
    X, y = random_problem(rng, 15, d=2)
    fn, _ = compiled("ep", L.ProbitNoise, X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        val, g_ls, g_amp, g_th, status = fn(np.zeros(2), log_amp, np.array(theta))
    if fails:
        assert val == -np.inf and status == STATUS_FAILED
    else:
        assert np.isfinite(val) and status == 0
    assert np.all(np.isfinite(g_ls)) and np.isfinite(g_amp) and np.all(np.isfinite(g_th))


@pytest.mark.parametrize("lik", [L.Probit(), L.ProbitNoise(0.7), L.ProbitBias(-0.3)])
def test_warm_fast_path_returns_what_ep_returns(lik):
    """``ep.ep_warm``, the Op's hot path, against ``ep`` from the same starts."""
    from pymc_gpc.approximations.ep import ep_warm
    from pymc_gpc.validation import as_signed_labels

    X, y = random_problem(np.random.default_rng(8), 40, d=2)
    D = ((X[:, None] - X[None]) ** 2).sum(-1)
    K = 2.0 * np.exp(-0.5 * D) + 1e-6 * np.eye(40)
    th = lik.check_params(lik.resolve_params(None))
    for state in (None, ep(1.3 * K, y, lik).state):
        want = ep(K, y, lik, state=state, tol=1e-6)
        log_z, dK, dth, loo, sweeps, st = ep_warm(K, as_signed_labels(y), lik, th, state, tol=1e-6)
        assert log_z == pytest.approx(want.log_z, rel=1e-13)
        np.testing.assert_allclose(dK, want.dlog_z_dK, rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(dth, want.dlog_z_dparams, rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(loo, want.loo_log_p, rtol=1e-13)
        np.testing.assert_array_equal(st.tau, want.state.tau)
        np.testing.assert_array_equal(st.nu, want.state.nu)
        assert sweeps == want.n_iter and dth.shape == (lik.n_params,)
        if state is not None:  # the warm start is read, not changed
            np.testing.assert_array_equal(state.tau, ep(1.3 * K, y, lik).state.tau)
    # declined (None) where ep() would not converge within the sweep limit
    assert ep_warm(K, as_signed_labels(y), lik, th, None, tol=1e-14, max_sweeps=2) is None


def test_op_takes_the_fast_path_only_where_it_applies(monkeypatch):
    """Signed labels and the default schedule: no call of ep(); 0/1 labels, a damping
    option or an invalid likelihood parameter: through ep(), with its checks."""
    import dataclasses

    from pymc_gpc.approximations.registry import APPROXIMATIONS

    calls = []
    entry = APPROXIMATIONS["ep"]
    binary = dataclasses.replace(entry.solvers["binary"],
                                 solve=lambda *a, **k: calls.append(1) or entry.solvers["binary"].solve(*a, **k))
    monkeypatch.setitem(APPROXIMATIONS, "ep", dataclasses.replace(entry, solvers={**entry.solvers, "binary": binary}))
    X, y = random_problem(np.random.default_rng(9), 25, d=2)
    D = ((X[:, None] - X[None]) ** 2).sum(-1)
    Kv = np.exp(-0.5 * D) + 1e-6 * np.eye(25)
    K, theta = pt.dmatrix("K"), pt.dvector("theta")

    def evaluate(labels, options=(), lik=L.Probit, th=()):
        out = ApproxMarginalOp("ep", lik, options)(K, theta, labels)
        return pytensor.function([K, theta], [out[0], out[5]])(Kv, np.asarray(th, dtype=float))

    want = ep(Kv, y, L.Probit()).log_z  # outside sampling the Op solves at the engine's tolerance
    assert float(evaluate(y)[0]) == pytest.approx(want, rel=1e-12) and not calls
    assert float(evaluate((y > 0).astype(float))[0]) == pytest.approx(want, rel=1e-12) and len(calls) == 1
    evaluate(y, options=(("damping", 0.8),))
    assert len(calls) == 2
    z, status = evaluate(y, lik=L.StepLabelNoise, th=[0.7])  # epsilon >= 0.5: invalid
    assert len(calls) == 3 and float(z) == -np.inf and int(status) == STATUS_FAILED


@pytest.mark.parametrize("bad", ["inf diagonal", "nan entry", "zero diagonal", "wrong shape"])
def test_op_rejects_a_bad_kernel_after_warm_evaluations(bad):
    """After warm-started evaluations (the fast path), a K with an infinite or zero
    variance, a NaN or the wrong shape gives -inf and status 2, never an exception
    (an infinite variance with a warm start once reached a division by zero)."""
    X, y = random_problem(np.random.default_rng(10), 25, d=2)
    Kv = np.exp(-0.5 * ((X[:, None] - X[None]) ** 2).sum(-1)) + 1e-6 * np.eye(25)
    K = pt.dmatrix("K")
    out = ApproxMarginalOp("ep", L.Probit)(K, pt.zeros(0), y)
    fn = pytensor.function([K], [out[0], out[5]])
    for scale in (1.0, 1.1, 1.2):
        assert int(fn(scale * Kv)[1]) == 0
    Kb = Kv.copy()
    if bad == "inf diagonal":
        Kb[3, 3] = np.inf
    elif bad == "nan entry":
        Kb[3, 5] = Kb[5, 3] = np.nan
    elif bad == "zero diagonal":
        Kb[3, :] = Kb[:, 3] = 0.0
    else:
        Kb = Kv[:, :24]
    z, status = fn(Kb)
    assert float(z) == -np.inf and int(status) == STATUS_FAILED


def test_indefinite_kernel_fails_cleanly():
    rng = np.random.default_rng(15)
    X, y = random_problem(rng, 15, d=2)
    K = pt.dmatrix("K")
    out = ApproxMarginalOp("ep", L.Probit)(K, pt.zeros(0), y)
    f = pytensor.function([K], [out[0], pytensor.grad(out[0], K), out[5]])
    bad = -np.eye(15) + 0.1  # negative definite
    val, g, status = f(bad)
    assert val == -np.inf and status == STATUS_FAILED and np.all(g == 0)


def test_compiled_function_pickles_and_runs_after_unpickling():
    rng = np.random.default_rng(13)
    X, y = random_problem(rng, 15, d=2)
    fn, _ = compiled("ep", L.ProbitNoise, X, y)
    args = (np.zeros(2), 0.2, np.array([0.9]))
    before = fn(*args)[0]
    fn2 = cloudpickle.loads(cloudpickle.dumps(fn))
    assert fn2(*args)[0] == pytest.approx(before, abs=1e-10)


@pytest.mark.parametrize("compiled", [False, True])
def test_warm_start_state_is_per_thread(compiled, monkeypatch):
    """Two threads evaluating the same Op never read each other's sites. Each thread calls a
    function of its own, both holding the one Op (a compiled PyTensor function is not safe to
    call from two threads at once: its input containers are shared)."""
    import threading

    from pymc_gpc.backends.numba import dispatch

    monkeypatch.setattr(dispatch, "COMPILED_EP", compiled)
    rng = np.random.default_rng(14)
    X, y = random_problem(rng, 30, d=2)
    op = ApproxMarginalOp("ep", L.Probit, (("tol", 1e-6),))  # tight: compared with ep() below
    K = pt.dmatrix("K")
    log_z = op(K, pt.zeros(0), y)[0]
    fns = [pytensor.function([K], log_z) for _ in range(2)]
    D = ((X[:, None] - X[None]) ** 2).sum(-1)
    mats = [a * np.exp(-0.5 * D / l) + 1e-6 * np.eye(30) for a, l in [(1.0, 1.0), (50.0, 0.2)]]
    want = [ep(Kk, y, L.Probit()).log_z for Kk in mats]
    got = {}
    both_started = threading.Barrier(2)  # both threads alive at once: distinct thread ids

    def work(i):
        both_started.wait()
        got[i] = [fns[i](mats[i]) for _ in range(20)]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    for i in range(2):
        np.testing.assert_allclose(got[i], want[i], atol=1e-7)
    if compiled:  # one state per worker thread, held by the compiled path (``backends.numba.thread_state``)
        (key,) = op.backend_state_keys
        assert len(thread_state.threads(key)) == 2 and not op._threads.items
    else:
        assert len(op._threads.items) == 2


@pytest.mark.parametrize("linker", ["numba", "py"])
def test_compiling_a_graph_clears_the_warm_starts(linker):
    """Warm starts move a solution within the solver's tolerance, so a compiled function
    (a new sampling run) must not inherit those of earlier evaluations: compiling any
    graph that holds the Op clears them, under the numba linker (funcify) and the
    Python/C ones (prepare_node)."""
    rng = np.random.default_rng(15)
    X, y = random_problem(rng, 25, d=2)
    op = ApproxMarginalOp("ep", L.Probit)
    K = pt.dmatrix("K")
    out = op(K, pt.zeros(0), y, pt.dvector("hyper"))[0]
    mode = pytensor.compile.mode.Mode(linker=linker)
    f = pytensor.function(list(out.owner.inputs[i] for i in (0, 3)), out, mode=mode)
    D = ((X[:, None] - X[None]) ** 2).sum(-1)
    Kv = np.exp(-0.5 * D) + 1e-6 * np.eye(25)
    first = f(Kv, np.array([0.0]))
    f(2.0 * Kv, np.array([0.7]))  # leaves a stored solution near the next start
    assert _stored(op) == (2, 2)  # this thread has warm starts and recent results now
    again = f(Kv, np.array([0.0]))  # answered from the recent results: the same bits
    assert again == first
    pytensor.function(list(out.owner.inputs[i] for i in (0, 3)), out, mode=mode)
    assert _stored(op) == (0, 0)  # every thread's state is gone
    assert not op._threads.items


def _stored(op):
    """(warm starts, recent results) an Op holds, on its Python path (``PerThread``) and on
    the compiled one (``thread_state``)."""
    python = [state for _, state in op._threads.items.values()]
    warm = sum(len(s["warm"][1].states) for s in python if s["warm"][1] is not None)
    recent = sum(len(s["recent"].entries) for s in python)
    for key in op.backend_state_keys:
        w, r = thread_state.stored(key)
        warm, recent = warm + w, recent + r
    return warm, recent


def test_reset_warm_starts_clears_every_op_also_equal_ones():
    """``pymc_gpc.reset_warm_starts`` reaches every live Op, also two with equal props
    (equal and hashing alike), without compiling anything."""
    import pymc_gpc

    rng = np.random.default_rng(17)
    X, y = random_problem(rng, 20, d=2)
    ops_ = [ApproxMarginalOp("ep", L.Probit) for _ in range(2)]
    assert ops_[0] == ops_[1] and ops_[0] is not ops_[1]
    K = pt.dmatrix("K")
    py = pytensor.compile.mode.Mode(linker="py")  # each Op answers its own graph (numba: the first)
    fns = [pytensor.function([K], op(K, pt.zeros(0), y)[0], mode=py) for op in ops_]
    Kv = np.exp(-0.5 * ((X[:, None] - X[None]) ** 2).sum(-1)) + 1e-6 * np.eye(20)
    for f in fns:
        f(Kv)
    assert all(op._warm_starts(20).states for op in ops_)
    pymc_gpc.reset_warm_starts()
    assert not any(op._threads.items for op in ops_)


def test_sampling_tolerance_keeps_value_and_gradient_at_the_fixed_point():
    """The sampler's EP tolerance (the registry's sampling_defaults, 1e-2: the Op's ``sampling`` copy,
    which ``pymc_gpc.sample`` compiles) along a warm-started path of nearby kernels, as NUTS
    evaluates them: the evidence stays within 1e-3 and dlogZ/dK within 5e-2 (relative) of
    a tight solve, while the sweeps drop."""
    from pymc_gpc.approximations.registry import APPROXIMATIONS

    assert APPROXIMATIONS["ep"].sampling_defaults["tol"] == 1e-2
    rng = np.random.default_rng(21)
    X, y = random_problem(rng, 60, d=3)
    K = pt.dmatrix("K")
    loose = ApproxMarginalOp("ep", L.Probit, sampling=True)(K, pt.zeros(0), y)
    tight = ApproxMarginalOp("ep", L.Probit, (("tol", 1e-12),))(K, pt.zeros(0), y)
    f = pytensor.function([K], [loose[0], loose[1], loose[4], tight[0], tight[1], tight[4]])
    log_ls = np.log([1.0, 2.0, 0.7])
    sweeps, errs = [], []
    for _ in range(30):
        log_ls = log_ls + 0.05 * rng.normal(size=3)
        d2 = (((X[:, None, :] - X[None, :, :]) / np.exp(log_ls)) ** 2).sum(-1)
        Kv = 3.0 * np.exp(-0.5 * d2) + 1e-6 * np.eye(60)
        z, dK, n_iter, z_ref, dK_ref, n_ref = f(Kv)
        errs.append((abs(z - z_ref), np.max(np.abs(dK - dK_ref)) / np.max(np.abs(dK_ref))))
        sweeps.append((n_iter, n_ref))
    assert np.max(errs, axis=0)[0] < 1e-3
    assert np.max(errs, axis=0)[1] < 5e-2
    loose_sweeps, tight_sweeps = np.mean(sweeps[1:], axis=0)
    assert loose_sweeps < 0.7 * tight_sweeps


def test_warm_starts_extrapolate_along_the_trajectory():
    from pymc_gpc.approximations.ep import EPState
    from pymc_gpc.numerics.extrapolation import RIDGE
    from pymc_gpc.ops.warm_start import WarmStarts

    rng = np.random.default_rng(2)
    M, c = rng.normal(size=(8, 3)), np.abs(rng.normal(size=8)) + 5.0

    def state(x):  # linear in x: the local linear model is exact but for its ridge's shrinkage
        return EPState(c + M @ x, -(c + M @ x))

    ws = WarmStarts(size=4)
    assert ws.guess(np.zeros(3)) is None
    x0, h = rng.normal(size=3), 0.1 * rng.normal(size=3)
    for k in range(3):
        ws.add(x0 + k * h, state(x0 + k * h))
    guess = ws.guess(x0 + 3 * h)  # one leapfrog step on
    step = np.abs(M @ h)
    assert np.all(np.abs(guess.tau - state(x0 + 3 * h).tau) <= 2 * RIDGE * step)
    assert np.all(np.abs(guess.nu - state(x0 + 3 * h).nu) <= 2 * RIDGE * step)
    # back at a stored point: that solution itself; far beyond the stored points: the nearest
    assert ws.guess(x0 + h) is ws.states[1]
    assert ws.guess(x0 - 100 * h) is ws.states[0]
    # an extrapolation that would make non-negative site precisions negative is not used
    ws = WarmStarts()
    ws.add(np.zeros(1), EPState(np.array([1.0, 0.1]), np.zeros(2)))
    ws.add(np.ones(1), EPState(np.array([1.0, 0.05]), np.zeros(2)))
    assert ws.guess(np.array([2.5])) is ws.states[1]
    assert ws.guess(np.array([1.5])).tau[1] == pytest.approx(0.025, abs=2 * RIDGE * 0.025)
    # no hyperparameter vector: the last solution
    assert ws.guess(np.zeros(0)) is ws.states[1]
    # a solution handed over without a hyperparameter vector (``pymc_gpc.fit``'s seed) is
    # the guess for the next point, which then replaces it: no mixed lengths are compared
    seeded = EPState(np.array([2.0, 2.0]), np.zeros(2))
    ws.add(np.zeros(0), seeded)
    assert ws.guess(np.array([1.5])) is seeded
    ws.add(np.array([1.5]), EPState(np.array([1.0, 0.1]), np.zeros(2)))
    ws.add(np.array([2.0]), EPState(np.array([1.0, 0.2]), np.zeros(2)))
    assert ws.guess(np.array([2.5])).tau[1] == pytest.approx(0.3, abs=2 * RIDGE * 0.1)


def test_warm_starts_follow_a_curved_trajectory_and_a_new_direction():
    """NUTS's trajectories curve, and each new one leaves its start in a new direction: the
    guess there (fitted to the last trajectories' points) is far closer to the true state
    than the nearest stored one."""
    from pymc_gpc.approximations.ep import EPState
    from pymc_gpc.ops.warm_start import WarmStarts

    rng = np.random.default_rng(5)
    d, n = 4, 30
    M, Q = rng.normal(size=(n, d)), 0.05 * rng.normal(size=(n, d))

    def state(x):  # smooth, not linear
        return EPState(5.0 + M @ x + Q @ x ** 2, np.sin(M @ x))

    def trajectory(start, direction, steps, h=0.15):
        # points on a circle through start: a trajectory turning towards a U-turn
        other = rng.normal(size=d)
        other -= (other @ direction) * direction
        other /= np.linalg.norm(other)
        angles = np.arange(steps) * h / 0.5
        return [start + 0.5 * (np.sin(a) * direction + (1 - np.cos(a)) * other) for a in angles]

    ws = WarmStarts()
    draw = np.zeros(d)
    for _ in range(3):
        direction = rng.normal(size=d)
        points = trajectory(draw, direction / np.linalg.norm(direction), 5)
        for x in points[1:]:
            ws.add(x, state(x))
        draw = points[3]
    ratios = []
    for _ in range(20):  # the first step of a new trajectory from the last draw
        u = rng.normal(size=d)
        x = draw + 0.15 * u / np.linalg.norm(u)
        guess, truth = ws.guess(x), state(x)
        nearest = ws.states[int(np.argmin([np.sum((p - x) ** 2) for p in ws.points]))]
        ratios.append(np.max(np.abs(guess.tau - truth.tau)) / np.max(np.abs(nearest.tau - truth.tau)))
    assert np.median(ratios) < 0.3


def test_warm_starts_extrapolate_a_softmax_state_and_keep_a_missing_f_missing():
    """The softmax state's a and f are both extrapolated along the trajectory; a state
    without f (given by hand) gives a guess without f, not an error."""
    from pymc_gpc.approximations.softmax_laplace import SoftmaxLaplaceState
    from pymc_gpc.numerics.extrapolation import RIDGE
    from pymc_gpc.ops.warm_start import WarmStarts

    ws = WarmStarts()
    ws.add(np.zeros(1), SoftmaxLaplaceState(np.full((2, 3), 1.0), np.full((2, 3), -1.0)))
    ws.add(np.ones(1), SoftmaxLaplaceState(np.full((2, 3), 2.0), np.full((2, 3), -3.0)))
    guess = ws.guess(np.array([2.0]))
    np.testing.assert_allclose(guess.a, 3.0, atol=2 * RIDGE)  # linear in x: exact but for the ridge
    np.testing.assert_allclose(guess.f, -5.0, atol=4 * RIDGE)
    ws.add(np.full(1, 3.0), SoftmaxLaplaceState(np.full((2, 3), 4.0)))
    guess = ws.guess(np.array([4.0]))
    np.testing.assert_allclose(guess.a, 5.0, atol=2 * RIDGE)  # a = x + 1
    assert guess.f is None


def test_recent_results_answer_repeated_points_exactly_and_only_those():
    from pymc_gpc.ops.warm_start import RecentResults

    rng = np.random.default_rng(3)
    K, params, hyper = rng.normal(size=(4, 4)), np.array([0.3]), np.array([0.1, -0.2])
    outputs = (np.asarray(-1.5), rng.normal(size=(4, 4)), np.array([0.2]), rng.normal(size=4),
               np.asarray(3), np.asarray(0))
    y = np.array([1.0, -1.0, 1.0, 1.0])
    recent = RecentResults(size=2)
    recent.add(K, params, y, hyper, outputs)
    hit = recent.get(K.copy(), params.copy(), y.copy(), hyper.copy())
    for a, b in zip(hit, outputs):
        np.testing.assert_array_equal(a, b)
    hit[1][:] = 0.0  # PyTensor may overwrite outputs in place: the stored copy is unaffected
    np.testing.assert_array_equal(recent.get(K, params, y, hyper)[1], outputs[1])
    outputs[1][:] = 7.0  # nor does the caller's array alias the stored one
    assert not np.any(recent.get(K, params, y, hyper)[1] == 7.0)
    K2 = K.copy()
    K2[0, 1] += 1e-15
    assert recent.get(K2, params, y, hyper) is None  # same hyperparameters, other K: no answer
    assert recent.get(K, params + 1e-12, y, hyper) is None
    assert recent.get(K, params, -y, hyper) is None  # other labels
    assert recent.get(K, params, y, np.zeros(0)) is None  # no hyperparameter input: never kept
    recent.add(K, params, y, hyper + 1, outputs)
    recent.add(K, params, y, hyper + 2, outputs)
    assert recent.get(K, params, y, hyper) is None  # the oldest entry was dropped



def test_recent_results_keep_no_full_entry_larger_than_their_memory(monkeypatch):
    """An entry above ``MEMORY`` bytes (FITC's m x n cotangent at 50,000 rows) is not copied in:
    ``get`` misses, while the light results (no cotangents) still answer the point."""
    from pymc_gpc.ops.warm_start import RecentResults

    K, params, y, hyper = np.ones((2, 3)), np.zeros(1), np.array([1.0, -1.0, 1.0]), np.array([0.5])
    outputs = (np.array(-1.5), np.full((2, 3), 7.0), np.zeros(1), np.array([-0.1, -0.2, -0.3]), np.array(3),
               np.array(0))
    entry_bytes = 8 * (K.size + sum(np.size(v) for v in outputs))
    recent = RecentResults()
    monkeypatch.setattr(RecentResults, "MEMORY", entry_bytes)  # one entry fits
    recent.add(K, params, y, hyper, outputs, cotangents=(1,))
    assert recent.get(K, params, y, hyper)[0] == -1.5
    monkeypatch.setattr(RecentResults, "MEMORY", entry_bytes - 1)  # none fits: the stored one goes too
    recent.add(K, params, y, hyper + 1, outputs, cotangents=(1,))
    assert not recent.entries and recent.get(K, params, y, hyper + 1) is None
    for h in (hyper, hyper + 1):
        np.testing.assert_array_equal(recent.get_light(params, y, h, loo_output=3)[3], outputs[3])

def test_op_evaluates_a_repeated_point_once():
    X, y = random_problem(np.random.default_rng(4), 20)
    K = pt.dmatrix("K")
    hyper = pt.dvector("hyper")
    op = ApproxMarginalOp("ep", L.Probit, (("tol", 1e-6),), hyper_names=(("h", 1),))  # tight: vs ep()
    out = op(K, pt.zeros(0), y, hyper)
    fn = pytensor.function([K, hyper], [out[0], out[1], out[4]])
    Kv = np.exp(-0.5 * ((X[:, None] - X[None]) ** 2).sum(-1)) + 1e-6 * np.eye(20)
    first = fn(Kv, np.array([0.5]))
    again = fn(Kv, np.array([0.5]))
    assert op.counts["evaluations"] == 1
    assert float(again[0]) == float(first[0]) == pytest.approx(ep(Kv, y, L.Probit()).log_z, abs=1e-6)
    np.testing.assert_array_equal(again[1], first[1])
    fn(2.0 * Kv, np.array([0.5]))  # a different K at the same hyperparameter values is solved
    assert op.counts["evaluations"] == 2


def test_copies_of_an_op_share_its_warm_starts_and_recent_results():
    """PyMC gives each chain a pickled copy of the sampler's function and compiles the
    trace's deterministics apart: the copies of one Op (pickled, ``deferring_loo``) share one
    state, its ``sampling_twin``s another, so a point one copy solved is answered by the
    other; an Op built anew with equal props keeps its own."""
    X, y = random_problem(np.random.default_rng(4), 20)
    K, hyper = pt.dmatrix("K"), pt.dvector("hyper")
    op = ApproxMarginalOp("ep", L.Probit, (("tol", 1e-6),), hyper_names=(("h", 1),))
    copy_ = cloudpickle.loads(cloudpickle.dumps(op))
    other = ApproxMarginalOp("ep", L.Probit, (("tol", 1e-6),), hyper_names=(("h", 1),))
    assert copy_ == op == other
    assert copy_._shared is op._shared is op.deferring_loo()._shared and other._shared is not op._shared
    assert op.sampling_twin()._shared is copy_.sampling_twin()._shared is not op._shared
    py = pytensor.compile.mode.Mode(linker="py")  # each Op answers its own graph (numba: the first)
    fns = [pytensor.function([K, hyper], o(K, pt.zeros(0), y, hyper)[0], mode=py) for o in (op, copy_, other)]
    Kv = np.exp(-0.5 * ((X[:, None] - X[None]) ** 2).sum(-1)) + 1e-6 * np.eye(20)
    values = [float(f(Kv, np.array([0.5]))) for f in fns]
    assert [o.counts["evaluations"] for o in (op, copy_, other)] == [1, 0, 1]
    assert values[1] == values[0] == pytest.approx(values[2], abs=1e-6)


def test_recent_results_compute_deferred_loo_terms_once_and_only_when_asked():
    from pymc_gpc.ops.warm_start import RecentResults

    K, params, y, hyper = np.eye(3), np.zeros(0), np.array([1.0, -1.0, 1.0]), np.array([0.5])
    outputs = (np.asarray(-2.0), np.ones((3, 3)), np.zeros(0), np.full(3, np.nan), np.asarray(4), np.asarray(0))
    calls = []

    def later():
        calls.append(1)
        return np.array([-0.1, -0.2, -0.3])

    recent = RecentResults()
    recent.add(K, params, y, hyper, outputs, loo_later=later)
    assert np.all(np.isnan(recent.get(K, params, y, hyper)[3]))  # a caller that needs no LOO
    assert not calls
    for _ in range(2):
        np.testing.assert_array_equal(recent.get(K, params, y, hyper, loo_output=3)[3], [-0.1, -0.2, -0.3])
    assert len(calls) == 1

    def broken():
        raise np.linalg.LinAlgError("not positive definite")

    recent.add(K, params, y, hyper + 1, outputs, loo_later=broken)  # as a failed evaluation's LOO
    np.testing.assert_array_equal(recent.get(K, params, y, hyper + 1, loo_output=3)[3], np.full(3, -np.inf))


def _marginal_ops(fn):
    return [nd.op for nd in fn.maker.fgraph.toposort() if isinstance(nd.op, ApproxMarginalOp)]


@pytest.mark.parametrize("kind", ["laplace", "fitc", "softmax", "ep"])
def test_unused_loo_output_is_deferred_to_the_deterministics(kind):
    """The logp graph, which does not use the Op's LOO output, gets the Op's ``defer_loo``
    copy for Laplace (LA-LOO costs; dense, FITC and softmax), not for EP (free). The
    deterministics at a point the logp has just evaluated are answered from its result,
    and equal a full solve's."""
    import pymc_gpc

    rng = np.random.default_rng(11)
    n = 40
    X = rng.normal(size=(n, 2))
    if kind == "softmax":
        y = np.digitize(X[:, 0] + 0.3 * rng.normal(size=n), [-0.5, 0.5])
        gp_cls, lik = pymc_gpc.MarginalLaplace, L.Softmax()
    else:
        y = (X[:, 0] + 0.3 * rng.normal(size=n) > 0).astype(int)
        laplace_kind = kind in ("laplace", "fitc")
        gp_cls, lik = (pymc_gpc.MarginalLaplace, L.Logistic()) if laplace_kind else (pymc_gpc.MarginalEP, L.Probit())
    sparse = {"approx": "FITC"} if kind == "fitc" else {}
    with pm.Model() as model:
        ls = pm.LogNormal("ls", 0.0, 1.0)
        amp = pm.LogNormal("amp", 0.5, 1.0)
        gp = gp_cls(cov_func=amp**2 * pm.gp.cov.ExpQuad(2, ls=ls), likelihood=lik, **sparse)
        gp.marginal_likelihood("y", X=X, y=y, **({"Xu": X[::4]} if sparse else {}))
    point = model.initial_point()
    values = [point[v.name] for v in model.value_vars]
    logp = model.compile_fn(model.logp(), inputs=model.value_vars, point_fn=False)
    outs = model.replace_rvs_by_values([model["y_loo"], model["y_n_iter"]])
    diagnostics = model.compile_fn(outs, inputs=model.value_vars, point_fn=False)
    (deferring,), (full,) = _marginal_ops(logp), _marginal_ops(diagnostics)
    assert deferring.defer_loo is (kind != "ep") and not full.defer_loo
    if kind == "ep":
        return
    assert deferring._shared is full._shared
    logp(*values)
    loo, n_iter = diagnostics(*values)
    assert full.counts["evaluations"] == 0  # answered from the logp's result
    assert np.all(np.isfinite(loo)) and np.all(loo < 0.0)
    pymc_gpc.ops.reset_warm_starts()
    loo_solved, n_iter_solved = diagnostics(*values)  # a cold solve of its own
    assert full.counts["evaluations"] == 1
    np.testing.assert_allclose(loo, loo_solved, rtol=1e-10)
    assert n_iter == n_iter_solved


def test_per_thread_state_is_kept_per_thread_and_bounded():
    """Concurrent threads get their own states; beyond ``size`` threads the least
    recently used state is dropped, without errors from concurrent first calls."""
    import threading

    from pymc_gpc.ops.warm_start import PerThread

    store = PerThread(dict, size=3)
    mine = store.get()
    assert store.get() is mine  # the same thread gets its own state back
    all_started = threading.Barrier(6)
    seen, errors = [], []

    def work():
        try:
            all_started.wait()
            state = store.get()
            seen.append(state)
            all_started.wait()  # everyone has its state before anyone leaves
        except Exception as e:  # pragma: no cover - the failure being tested for
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(6)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert not errors
    assert len({id(s) for s in seen}) == 6 and all(s is not mine for s in seen)
    assert len(store.items) == 3  # the least recently used states were dropped
    assert threading.get_ident() not in store.items  # the main thread's was the oldest


def _walk_functions(lik_type, X, y):
    """(log Z, dlog Z/dK, dlog Z/dtheta, LOO, sweeps, status) of an EP Op with a hyperparameter
    input as a function of (log_ls (2,), log_amp, theta), compiled twice: numba linker (the
    compiled path, ``backends.numba.compiled_ep``) and Python linker (``perform``), each with its own
    Op. K enters both as the same array (computed in NumPy), so their inputs agree to the bit."""
    K, theta, hyper = pt.dmatrix("K"), pt.dvector("theta"), pt.dvector("hyper")
    fns, ops_ = [], []
    for linker in ("numba", "py"):
        op = ApproxMarginalOp("ep", lik_type, hyper_names=(("log_ls", 2), ("log_amp", 1)))
        out = op(K, theta, y, hyper)
        mode = pytensor.compile.mode.Mode(linker=linker)
        fn = pytensor.function([K, theta, hyper], [out[0], out[1], out[2], out[3], out[4], out[5]], mode=mode)
        fns.append(fn)
        ops_.append(op)
    D = (X[:, None, :] - X[None, :, :]) ** 2

    def kernel(log_ls, log_amp):
        return np.exp(log_amp) * np.exp(-0.5 * (D / np.exp(2 * np.asarray(log_ls))).sum(-1)) + 1e-6 * np.eye(len(X))

    def call(fn):
        return lambda log_ls, log_amp, theta: fn(kernel(log_ls, log_amp), theta, np.append(log_ls, log_amp))

    return [call(fn) for fn in fns], ops_


@pytest.mark.parametrize("lik_type, theta", [(L.Probit, []), (L.ProbitNoise, [0.8]), (L.StepLabelNoise, [0.05])])
def test_compiled_path_gives_the_python_paths_results_along_a_random_walk(lik_type, theta, compiled_ep):
    """Along a random walk of the hyperparameters with revisited points (recent results),
    the compiled EP path and the Python path give the same values, gradients, LOO terms
    and sweeps (to rounding: both warm-start alike), and the numba function solves
    without Python (the Op's Python counts stay zero) for log-concave likelihoods; the
    step likelihood's negative sites go to the Python path from the compiled state (its
    sweeps, up to 40 here, amplify the rounding of the two warm starts' arithmetic, NumPy's
    dot against a compiled sum, to 2e-4 relative in dlog Z/dK by the end of the walk)."""
    rtol = 1e-3 if lik_type is L.StepLabelNoise else 1e-8
    rng = np.random.default_rng(21)
    X, y = random_problem(rng, 40, d=2)
    (f_numba, f_py), (op_numba, op_py) = _walk_functions(lik_type, X, y)
    theta = np.array(theta, dtype=float)
    h = np.array([0.0, 0.0, 0.5])
    points = []
    for t in range(40):
        h = h + 0.35 * rng.normal(size=3)
        points.append(h.copy())
        if t % 7 == 6:
            points.append(points[-4])  # a point evaluated a few steps earlier
    for p in points:
        got, want = f_numba(p[:2], p[2], theta), f_py(p[:2], p[2], theta)
        assert int(got[4]) == int(want[4]) and int(got[5]) == int(want[5]) == 0
        np.testing.assert_allclose(got[0], want[0], rtol=min(rtol * 1e-3, 1e-8))
        for a, b in zip(got[1:4], want[1:4]):
            np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol * 1e-3 * np.abs(b).max(initial=0.0))
    if lik_type is L.StepLabelNoise:  # not log-concave: always ``perform`` (solve.highest_converged)
        assert not op_numba.backend_state_keys and op_numba._counts["evaluations"] == op_py.counts["evaluations"]
        return
    (key,) = op_numba.backend_state_keys
    solves = thread_state.evaluations(key)
    assert solves + op_numba._counts["evaluations"] == op_py.counts["evaluations"] < len(points)
    assert op_numba._counts["evaluations"] == 0 and solves > 30


def test_compiled_path_failures_are_those_of_the_python_path(compiled_ep):
    """Invalid likelihood parameters and an overflowing kernel through the compiled function:
    log Z = -inf, status 2 and the gradient of the Python path (zero in dlog Z / dK, so
    zero in log_ls; NaN in log_amp where K itself is infinite)."""
    rng = np.random.default_rng(22)
    X, y = random_problem(rng, 15, d=2)
    (f_numba, f_py), _ = _walk_functions(L.ProbitNoise, X, y)
    for args in [(np.zeros(2), 0.0, np.array([-1.0])), (np.zeros(2), 0.0, np.array([np.nan])),
                 (np.zeros(2), 800.0, np.array([1.0]))]:  # sigma < 0, NaN, K overflows to inf
        got, want = f_numba(*args), f_py(*args)
        assert got[0] == want[0] == -np.inf and int(got[5]) == int(want[5]) == STATUS_FAILED
        for a, b in zip(got[1:4], want[1:4]):
            np.testing.assert_array_equal(a, b)
        assert np.all(got[1] == 0.0)
    ok = f_numba(np.zeros(2), 0.0, np.array([1.0]))  # and a valid point after them
    assert int(ok[5]) == 0 and np.isfinite(ok[0])


def test_thread_state_blocks_keep_warm_starts_and_recent_results_exactly():
    """The compiled stores against their Python counterparts (``WarmStarts``,
    ``RecentResults``): the same guess along a trajectory, the oldest dropped first, a
    recent result only for equal inputs, reset and release."""
    from pymc_gpc.approximations.ep import EPState
    from pymc_gpc.ops.warm_start import WarmStarts

    rng = np.random.default_rng(23)
    n, p, q = 5, 3, 1
    key = "test_thread_state_blocks"
    thread_state.allocate(key, n, p, q)
    block = thread_state.find_block(thread_state.key_hash(key), n, p, q)
    assert block.size == thread_state.block_length(n, p, q)
    python = WarmStarts()
    assert python.size == thread_state.WARM
    x = np.zeros(p)
    for step in range(thread_state.WARM + 3):  # more than the slots: the oldest is dropped in both
        x = x + rng.normal(size=p) * 0.3
        guess_tau, guess_nu = np.empty(n), np.empty(n)
        has, first = thread_state.warm_guess(block, n, p, q, x, guess_tau, guess_nu)
        want = python.guess(x)
        assert has == (want is not None)
        if has:
            np.testing.assert_allclose(guess_tau, want.tau, rtol=1e-14)
            np.testing.assert_allclose(guess_nu, want.nu, rtol=1e-14)
            assert first == want.first_change
        state = EPState(rng.random(n), rng.normal(size=n), float(step))
        python.add(x, state)
        thread_state.warm_add(block, n, p, q, x, state.tau, state.nu, state.first_change)
    K, params, y = rng.normal(size=(n, n)), np.array([0.3]), np.sign(rng.normal(size=n))
    dK, dth, loo = rng.normal(size=(n, n)), np.array([1.5]), rng.normal(size=n)
    thread_state.recent_add(block, n, p, q, K, params, y, x, -3.0, dK, dth, loo, 4, 0)
    found, log_z, dK2, dth2, loo2, n_iter, status = thread_state.recent_get(block, n, p, q, K, params, y, x)
    assert found and log_z == -3.0 and n_iter == 4 and status == 0
    np.testing.assert_array_equal(dK2, dK)
    dK2[:] = 7.0  # a copy: the stored result is untouched
    assert thread_state.recent_get(block, n, p, q, K, params, y, x)[2][0, 0] == dK[0, 0]
    K2 = K.copy()
    K2[1, 2] += 1e-15
    for args in [(K2, params, y, x), (K, params + 1e-12, y, x), (K, params, -y, x), (K, params, y, x + 1e-12)]:
        assert not thread_state.recent_get(block, n, p, q, *args)[0]
    assert thread_state.stored(key) == (thread_state.WARM, 1)
    thread_state.reset(key)
    assert thread_state.stored(key) == (0, 0)
    assert not thread_state.recent_get(block, n, p, q, K, params, y, x)[0]
    thread_state.release(key)
    assert thread_state.find_block(thread_state.key_hash(key), n, p, q).size == 0


def test_compiled_graphs_call_the_ep_engine_through_its_symbols(compiled_ep):
    """The Op's numba function reaches the engine through ``compiled_ep``'s C functions
    (declared symbols), so compiling a graph that holds it (nutpie does at every sample
    call, uncached) does not re-optimise the engine: none of the EP loop's or the
    warm-start store's code is in the function's LLVM module. (The function is compiled,
    not called: PyTensor builds it without a Python wrapper.)"""
    import numba
    from pytensor.link.numba.dispatch.basic import numba_funcify

    from pymc_gpc.backends.numba import compiled_ep

    rng = np.random.default_rng(25)
    _, y = random_problem(rng, 12, d=2)
    op = ApproxMarginalOp("ep", L.Probit)
    node = op(pt.dmatrix("K"), pt.dvector("theta"), y)[0].owner
    fn = numba_funcify(op, node)
    fn.compile(tuple(numba.typeof(a) for a in (np.eye(12), np.zeros(0), y, np.zeros(0))))
    llvm_ir = "\n".join(fn.inspect_llvm().values())
    assert all(f"@{symbol}(" in llvm_ir for symbol in compiled_ep.SYMBOLS)
    for engine in ("ep_warm_compiled", "_parallel_compiled", "warm_guess", "recent_get", "find_block"):
        assert engine not in llvm_ir


def test_the_object_mode_steps_are_compiled_once_for_every_model(compiled_ep):
    """The compiled function's object-mode steps (``dispatch._allocate_block``,
    ``_fallback_block``) take the model's key as a plain string: the numba functions of two
    models with different labels (two keys) compile them for one signature, not one more per
    model (a literal key did: 54 signatures each after one run of the suite, ~0.5 s of
    compilation per model and an on-disk index that grew with every model)."""
    import numba
    from pytensor.link.numba.dispatch.basic import numba_funcify

    from pymc_gpc.backends.numba import dispatch

    rng = np.random.default_rng(27)
    for _ in range(2):
        _, y = random_problem(rng, 12, d=2)
        op = ApproxMarginalOp("ep", L.Probit)
        node = op(pt.dmatrix("K"), pt.dvector("theta"), y)[0].owner
        fn = numba_funcify(op, node)
        fn.compile(tuple(numba.typeof(a) for a in (np.eye(12), np.zeros(0), y, np.zeros(0))))
    for step in (dispatch._allocate_block, dispatch._fallback_block):
        assert len(step.signatures) == 1
        assert not any(isinstance(t, types.Literal) for t in step.signatures[0])


def test_where_the_compiled_function_fails_the_op_performs(compiled_ep, monkeypatch):
    """Where ``compiled_ep``'s C function returns FAILED (what numba returns when its code
    raised), the Op's ``perform`` answers: the sampler gets the Python path's values, not
    the unwritten outputs. A stand-in C function that always fails replaces the real one
    (PyTensor's disk cache off, so that no graph calling it is kept)."""
    import llvmlite.binding as llvm
    from numba import cfunc

    from pymc_gpc.backends.numba import compiled_ep as C

    evaluate_at, store_at = C.external()

    @cfunc(evaluate_at.sig)
    def failing(h, kind, n_params, tol, cold_tol, max_sweeps, n, p, q, a, b, c, d, e, f, g, o, t, u):
        return C.FAILED

    llvm.add_symbol("test_failing_compiled_ep", failing.address)
    monkeypatch.setattr(C, "external", lambda: (types.ExternalFunction("test_failing_compiled_ep", evaluate_at.sig),
                                               store_at))
    rng = np.random.default_rng(26)
    X, y = random_problem(rng, 15, d=2)
    with pytensor.config.change_flags(numba__cache=False):
        (f_numba, f_py), (op, _) = _walk_functions(L.ProbitNoise, X, y)
    for log_amp, sigma in [(0.0, 1.0), (0.4, 1.0), (0.0, -1.0)]:
        got, want = f_numba(np.zeros(2), log_amp, np.array([sigma])), f_py(np.zeros(2), log_amp, np.array([sigma]))
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, rtol=1e-12)
    assert op._counts["evaluations"] == 3 and op._counts["failed"] == 1


def test_a_full_thread_state_table_leaves_the_op_on_its_python_state(compiled_ep):
    """With no free row for a new thread block, the compiled function still answers, through
    the Op's Python path and its per-thread Python state (warm starts kept there)."""
    rng = np.random.default_rng(24)
    X, y = random_problem(rng, 20, d=2)
    (f_numba, _), (op, _) = _walk_functions(L.Probit, X, y)
    fillers = []
    gc.collect()  # Ops of earlier tests: their rows are released at the next ``allocate`` ...
    gc.disable()  # ... and none while the table is full
    try:
        while np.any(thread_state._TABLE[:, 0] <= 0):
            fillers.append(f"filler {len(fillers)}")
            thread_state.allocate(fillers[-1], 1, 0, 0)
        values = [f_numba(np.array([0.1 * k, 0.0]), 0.3, np.zeros(0))[0] for k in range(3)]
    finally:
        gc.enable()
        for key in fillers:
            thread_state.release(key)
    assert np.all(np.isfinite(values)) and op._counts["evaluations"] == 3
    assert len(op._warm_starts(20).states) == 3  # the Python path's warm starts


@pytest.mark.parametrize("linker", ["numba", "py"])
def test_a_cold_solve_at_the_sampler_tolerance_reaches_the_engine_value(linker, compiled_ep):
    """The sampler's Op (EP tol 1e-2): its first evaluation, from zero sites, equals the
    engine's value (tol 1e-12) to 1e-7 nats and its gradient to 1e-5, on the compiled path
    and the Python path alike (``thread_state.solve_tolerance``; at a large amplitude a cold
    solve stopped at a site change of 1e-2 left log Z 3e-3 nats and dlog Z/dK 3 % off, and
    every later warm start inherits it); a warm-started evaluation a step away stays within
    the sampler's accuracy."""
    rng = np.random.default_rng(0)
    n = 200
    X = rng.normal(size=(n, 2))
    y = np.where(X[:, 0] + 0.3 * rng.normal(size=n) > 1.2, 1.0, -1.0)
    D = (X[:, None, :] - X[None, :, :]) ** 2
    K_in, th, hyper = pt.dmatrix("K"), pt.dvector("theta"), pt.dvector("hyper")
    fns = []
    for op in (ApproxMarginalOp("ep", L.Probit, hyper_names=(("h", 1),)).sampling_twin(),
               ApproxMarginalOp("ep", L.Probit, options=(("tol", 1e-12),), hyper_names=(("h", 1),))):
        out = op(K_in, th, y, hyper)
        fns.append(pytensor.function([K_in, th, hyper], [out[0], out[1], out[5]],
                                     mode=pytensor.compile.mode.Mode(linker=linker)))
    assert fns[0].maker.fgraph.toposort()[-1].op.solver_options()["tol"] == 1e-2
    for k, scale in enumerate((1.0, 1.02)):
        K = 3000.0 * np.exp(-0.5 * (D / (scale * np.array([10.0, 3.0])) ** 2).sum(-1)) + 3e-5 * np.eye(n)
        sampler, engine = (f(K, np.zeros(0), np.array([scale])) for f in fns)
        assert int(sampler[2]) == 0
        if k == 0:
            assert abs(sampler[0] - engine[0]) < 1e-7
            np.testing.assert_allclose(sampler[1], engine[1], rtol=1e-5, atol=1e-5 * np.abs(engine[1]).max())
        else:
            assert abs(sampler[0] - engine[0]) < 1e-2
