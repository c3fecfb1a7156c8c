"""``gp.predict`` compiles its kernel function once per (GP, model, compile mode) and reuses it.

The compiled function takes the new inputs as an input, so a second ``predict`` at other
inputs (another number of rows) must give what a newly built model gives at its first
``predict`` there; ``pm.Data`` containers in the kernel graph must be read at each call, not
at compilation. Compilations are counted by wrapping ``pytensor.function``.
"""

import arviz as az
import cloudpickle
import numpy as np
import pymc as pm
import pytensor
import pytest

import pymc_gpc
from pymc_gpc import likelihoods as L

from ..conftest import nested_gp, random_problem

N, N_INDUCING = 30, 8
LS = 0.8


@pytest.fixture(scope="module")
def problem():
    rng = np.random.default_rng(11)
    X, y = random_problem(rng, N)
    return X, y, rng.normal(size=(5, 2)), rng.normal(size=(9, 2))


class _CountedCompile:
    """``pytensor.function``, counting its calls."""

    def __init__(self, monkeypatch):
        self.calls, self._function = 0, pytensor.function
        monkeypatch.setattr(pytensor, "function", self)

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self._function(*args, **kwargs)


def _binary(X, y, approx, labels=None, model_name=""):
    with pm.Model(model_name) as model:
        ls = pm.LogNormal("ls", 0.0, 1.0)
        gp = pymc_gpc.MarginalEP(cov_func=pm.gp.cov.ExpQuad(2, ls=ls), likelihood=L.Probit(), approx=approx)
        gp.marginal_likelihood("y", X=X, y=y if labels is None else labels(y), **({"Xu": X[:N_INDUCING]} if approx else {}))
    return model, gp


def _three_levels(X, cls, likelihood, approx=None):
    """A GP on three ordered levels of X's first two columns (several classes, or ordinal)."""
    levels = np.digitize(X[:, 0] + 0.3 * X[:, 1], [-0.4, 0.4])
    with pm.Model() as model:
        ls = pm.LogNormal("ls", 0.0, 1.0)
        gp = cls(cov_func=pm.gp.cov.ExpQuad(2, ls=ls), likelihood=likelihood, approx=approx)
        gp.marginal_likelihood("y", X=X, y=levels, **({"Xu": X[:N_INDUCING]} if approx else {}))
    return model, gp


BUILDERS = {"ep-dense": lambda X, y: _binary(X, y, None), "ep-fitc": lambda X, y: _binary(X, y, "FITC"),
            "softmax-dense": lambda X, y: _three_levels(X, pymc_gpc.MarginalLaplace, L.Softmax()),
            "softmax-fitc": lambda X, y: _three_levels(X, pymc_gpc.MarginalLaplace, L.Softmax(), "FITC"),
            "ordinal-ep-dense": lambda X, y: _three_levels(X, pymc_gpc.MarginalEP, L.OrderedProbit([-0.5, 0.5]))}


@pytest.mark.parametrize("case", sorted(BUILDERS))
def test_a_second_call_at_other_inputs_equals_a_fresh_models_first(problem, case, monkeypatch):
    X, y, Xnew1, Xnew2 = problem
    _, gp = BUILDERS[case](X, y)
    counted = _CountedCompile(monkeypatch)
    first = gp.predict(Xnew1, point={"ls": LS})
    second, mean, var = gp.predict(Xnew2, point={"ls": LS}, return_latent=True)
    assert counted.calls == 1  # the second call, at 9 rows instead of 5, compiled nothing
    _, fresh_gp = BUILDERS[case](X, y)
    fresh, fresh_mean, fresh_var = fresh_gp.predict(Xnew2, point={"ls": LS}, return_latent=True)
    assert second.shape[0] == 9 and first.shape[0] == 5
    np.testing.assert_allclose(second, fresh, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(mean, fresh_mean, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(var, fresh_var, rtol=1e-12, atol=1e-14)
    # the first call's rows at the second call's inputs: the same prediction, another batch
    np.testing.assert_allclose(gp.predict(Xnew2[:5], point={"ls": LS}), fresh[:5], rtol=1e-12, atol=1e-14)


def test_another_model_or_mode_compiles_again(problem, monkeypatch):
    """A GP in a nested model, predicted from its own (inner) model and from the outer one:
    one compilation each, none when repeated; over posterior draws (``idata=``, another
    compile mode) one at each call, the points' functions still cached."""
    X, y, Xnew1, Xnew2 = problem
    outer, gp = nested_gp(X, y, pymc_gpc.MarginalEP, L.Probit())
    counted = _CountedCompile(monkeypatch)
    point = {"sub::ls": LS}
    inner_p = gp.predict(Xnew1, point=point)
    outer_p = gp.predict(Xnew1, point=point, model=outer)
    assert counted.calls == 2
    np.testing.assert_allclose(outer_p, inner_p, rtol=1e-12)
    gp.predict(Xnew2, point=point, model=outer)
    gp.predict(Xnew2, point=point)
    assert counted.calls == 2
    idata = az.from_dict({"posterior": {"sub::ls": np.array([[LS, LS]])}})
    over_draws = gp.predict(Xnew2, idata=idata, progressbar=False)
    gp.predict(Xnew1, idata=idata, progressbar=False)
    assert counted.calls == 4  # over draws compiled at each call, not kept
    gp.predict(Xnew1, point=point)
    assert counted.calls == 4
    np.testing.assert_allclose(over_draws, gp.predict(Xnew2, point=point), atol=1e-3)  # EP at 1e-3 over draws


def test_a_new_marginal_likelihood_compiles_again(problem, monkeypatch):
    """The same GP object given other training data: the cached function of the old evidence
    term is not used."""
    X, y, Xnew1, _ = problem
    with pm.Model():
        ls = pm.LogNormal("ls", 0.0, 1.0)
        gp = pymc_gpc.MarginalEP(cov_func=pm.gp.cov.ExpQuad(2, ls=ls), likelihood=L.Probit())
        gp.marginal_likelihood("y", X=X, y=y)
        gp.predict(Xnew1, point={"ls": LS})
        gp.marginal_likelihood("y2", X=X[:20], y=y[:20])
        assert not vars(gp).get("_kernel_functions")  # the old term's functions are not kept
    _, fresh = _binary(X[:20], y[:20], None)
    np.testing.assert_allclose(gp.predict(Xnew1, point={"ls": LS}), fresh.predict(Xnew1, point={"ls": LS}), rtol=1e-12)


def test_data_containers_are_read_at_each_call(problem, monkeypatch):
    """pm.set_data between two predictions, on a kernel hyperparameter held in a container
    (inside the compiled graph), on the new inputs' container and on the training labels'
    container: the second prediction is a fresh model's at the new values."""
    X, y, Xnew1, Xnew2 = problem

    def build(ls_value, labels, Xnew):
        with pm.Model() as model:
            ls = pm.Data("ls", ls_value)
            xs = pm.Data("Xnew", Xnew)
            ys = pm.Data("labels", labels)
            gp = pymc_gpc.MarginalEP(cov_func=pm.gp.cov.ExpQuad(2, ls=ls), likelihood=L.Probit())
            gp.marginal_likelihood("y", X=X, y=ys)
        return model, gp, xs

    y2 = y.copy()
    y2[:6] *= -1
    model, gp, xs = build(LS, y, Xnew1)
    counted = _CountedCompile(monkeypatch)
    before = gp.predict(xs, point={})
    with model:
        pm.set_data({"ls": 1.7, "Xnew": Xnew2, "labels": y2})
    after = gp.predict(xs, point={})
    assert counted.calls == 1  # the second call used the first one's function
    _, fresh_gp, fresh_xs = build(1.7, y2, Xnew2)
    np.testing.assert_allclose(after, fresh_gp.predict(fresh_xs, point={}), rtol=1e-12)
    assert after.shape == (9,) and before.shape == (5,)


def test_set_data_on_the_training_inputs_still_raises_after_caching(problem):
    """The check that the training inputs' container holds the values the evidence was built
    with runs at every call, before any solve."""
    X, y, Xnew1, _ = problem
    with pm.Model() as model:
        ls = pm.LogNormal("ls", 0.0, 1.0)
        xs = pm.Data("X", X)
        gp = pymc_gpc.MarginalEP(cov_func=pm.gp.cov.ExpQuad(2, ls=ls), likelihood=L.Probit())
        gp.marginal_likelihood("y", X=xs, y=y)
    p = gp.predict(Xnew1, point={"ls": LS})
    with model:
        pm.set_data({"X": X + 1.0})
    with pytest.raises(ValueError, match="pm.Data container 'X' holds other values"):
        gp.predict(Xnew1, point={"ls": LS})
    with model:
        pm.set_data({"X": X})
    np.testing.assert_allclose(gp.predict(Xnew1, point={"ls": LS}), p, rtol=1e-12)


def test_errors_are_unchanged_with_a_cached_function(problem):
    X, y, Xnew1, _ = problem
    _, gp = _binary(X, y, None)
    gp.predict(Xnew1, point={"ls": LS})
    with pytest.raises(ValueError, match="Xnew has 3 columns but the training inputs X have 2"):
        gp.predict(np.ones((4, 3)), point={"ls": LS})
    with pytest.raises(ValueError, match=r"point is missing values for \['ls'\]"):
        gp.predict(Xnew1, point={"amp": 1.0})
    with pm.Model() as other:
        pm.Normal("ls", 0.0, 1.0)
    with pytest.raises(ValueError, match="not variables of the model given"):
        gp.predict(Xnew1, point={"ls": LS}, model=other)


def test_a_pickled_gp_leaves_its_compiled_functions_behind(problem):
    """cloudpickle after a prediction: the same size as before it (no compiled function in the
    state), and the unpickled GP predicts the same probabilities."""
    X, y, Xnew1, _ = problem
    _, gp = _binary(X, y, "FITC")
    size = len(cloudpickle.dumps(gp))
    p = gp.predict(Xnew1, point={"ls": LS})
    data = cloudpickle.dumps(gp)
    assert len(data) == size
    np.testing.assert_allclose(cloudpickle.loads(data).predict(Xnew1, point={"ls": LS}), p, rtol=1e-12)


def test_predictions_from_several_threads_equal_the_serial_ones():
    """Threads predicting with one GP share its cached kernel function (run one call at a
    time behind its lock): each thread's probabilities equal those of a serial call."""
    from concurrent.futures import ThreadPoolExecutor

    rng = np.random.default_rng(11)
    X, y = rng.normal(size=(30, 2)), (rng.normal(size=30) > 0).astype(int)
    with pm.Model() as model:
        ls = pm.LogNormal("ls", 0.0, 1.0)
        gp = pymc_gpc.MarginalEP(cov_func=pm.gp.cov.ExpQuad(2, ls=ls), likelihood=L.Probit())
        gp.marginal_likelihood("f", X=X, y=y)
    point = {"ls": np.array(1.3)}
    grids = [rng.normal(size=(5 + k, 2)) for k in range(8)]
    serial = [gp.predict(G, point=point) for G in grids]
    with ThreadPoolExecutor(4) as pool:
        threaded = list(pool.map(lambda G: gp.predict(G, point=point), grids))
    for s, t in zip(serial, threaded):
        np.testing.assert_allclose(t, s, rtol=1e-12)


def test_no_kernel_function_of_the_training_size_outlives_predict():
    """After ``predict`` the GP keeps compiled functions only for points: over posterior draws
    the compiled kernels fold the dense prior's n x n jitter into the function, which a kept
    function would hold (two n x n arrays at n = 1200, 23 MB)."""
    import gc
    import tracemalloc

    rng = np.random.default_rng(12)
    n = 1200
    X, y = rng.normal(size=(n, 2)), (rng.normal(size=n) > 0).astype(int)
    idata = az.from_dict({"posterior": {"ls": np.ones((1, 1))}})
    Xnew = rng.normal(size=(5, 2))

    def model_and_gp():
        with pm.Model():
            ls = pm.LogNormal("ls", 0.0, 1.0)
            gp = pymc_gpc.MarginalLaplace(cov_func=pm.gp.cov.ExpQuad(2, ls=ls), likelihood=L.Probit())
            gp.marginal_likelihood("y", X=X, y=y)
        return gp

    warm_up = model_and_gp()  # the caches PyTensor and the package fill once
    warm_up.predict(Xnew, point={"ls": np.array(1.0)})
    warm_up.predict(Xnew, idata=idata, progressbar=False)
    del warm_up
    gp = model_and_gp()
    tracemalloc.start()
    try:
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        gp.predict(Xnew, idata=idata, progressbar=False)
        gp.predict(rng.normal(size=(7, 2)), point={"ls": np.array(1.0)})
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert held < n * n * 8 / 2, f"{held / 1e6:.1f} MB held after predict"
