"""What reaches the evidence Op for each prior structure: one Op class whose props hold the
structure (``structures.select``), the checks of its inputs and of the (structure,
approximation, likelihood) cell before any solve, the layering (structures import no Op,
the Ops no backend), and the run-time check of a symbolic (c, m, d) Xu whose number of
inducing sets is unknown when the graph is built
(``structures.select.FITCMulticlass.check_inducing``)."""

import ast
import pathlib
import pickle

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
import pytest

import pymc_gpc
from pymc_gpc import likelihoods as L
from pymc_gpc.approximations import registry
from pymc_gpc.likelihoods import Softmax
from pymc_gpc.ops import ApproxMarginalOp, LatentPredictiveOp
from pymc_gpc.backends.python_vm import PYTHON_VM_MODE
from pymc_gpc.structures.select import (
    DENSE_BINARY,
    DENSE_MULTICLASS,
    FITC_BINARY,
    FITC_MULTICLASS,
    STRUCTURES,
    select_structure,
)

PACKAGE = pathlib.Path(pymc_gpc.__file__).parent


def _imported_modules(path):
    """The absolute dotted names of the modules that ``path`` (a module of the package) imports."""
    package = ["pymc_gpc", *path.relative_to(PACKAGE).parent.parts]
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            names += [module] + [f"{module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names += [a.name for a in node.names]
    return names


def test_structures_import_no_op_and_ops_import_no_backend():
    for path in (PACKAGE / "structures").glob("*.py"):
        assert not [m for m in _imported_modules(path) if m.startswith("pymc_gpc.ops")], path.name
    for path in (PACKAGE / "ops").glob("*.py"):
        assert not [m for m in _imported_modules(path) if m.startswith("pymc_gpc.backends")], path.name


CELLS = [(DENSE_BINARY, "ep", L.Probit), (FITC_BINARY, "laplace", L.Logistic),
         (DENSE_MULTICLASS, "laplace", L.Softmax), (FITC_MULTICLASS, "ep", L.MultinomialProbit)]


@pytest.mark.parametrize("structure, approx, lik", CELLS, ids=lambda v: getattr(v, "name", None))
def test_one_op_class_for_every_structure(structure, approx, lik):
    """The same two classes for every structure; the structure is a prop that survives
    pickling as the same object (the Op's equality, hash and numba cache key go by it);
    the layout (kernel inputs, LOO output, retries) is the structure's."""
    op = ApproxMarginalOp(approx, lik, structure=structure)
    assert type(op) is ApproxMarginalOp and op.structure is structure
    assert type(LatentPredictiveOp(approx, lik, structure=structure)) is LatentPredictiveOp
    again = pickle.loads(pickle.dumps(op))
    assert again.structure is structure and again == op and hash(again) == hash(op)
    assert op != ApproxMarginalOp(approx, lik, structure=next(s for s in STRUCTURES if s is not structure
                                                                  and s.multiclass == structure.multiclass))
    assert (op.n_kernel_inputs, op.loo_output) == (structure.n_kernel_inputs, structure.n_kernel_inputs + 2)
    options = {"tol": 1e-6}
    assert op.retry_schedule(options) == registry.get(approx).retry_schedule(options, structure.name)
    node = op(*[pt.tensor(shape=(None,) * nd) for nd in structure.kernel_ndims], pt.dvector(), pt.dvector())
    assert [o.ndim for o in node[1 : 1 + structure.n_kernel_inputs]] == list(structure.kernel_ndims)


def test_the_fitc_retries_differ_from_the_dense_ones():
    """FITC has no sequential EP: its retries (the structure's schedule) are damped only."""
    dense = ApproxMarginalOp("ep", L.Probit).retry_schedule({})
    fitc = ApproxMarginalOp("ep", L.Probit, structure=FITC_BINARY).retry_schedule({})
    assert any(r.get("method") == "sequential" for r in dense)
    assert not any(r.get("method") == "sequential" for r in fitc) and [r["damping"] for r in fitc] == [0.5, 0.25]


def test_select_structure_matches_the_likelihood_family():
    assert select_structure(L.Probit(), None) is DENSE_BINARY
    assert select_structure(L.Probit(), "FITC") is FITC_BINARY
    assert select_structure(Softmax(), None) is DENSE_MULTICLASS
    assert select_structure(Softmax(), "FITC") is FITC_MULTICLASS


@pytest.mark.parametrize("structure, approx, lik, match", [
    (DENSE_BINARY, "laplace", L.Softmax, "does not take a multi-class likelihood"),
    (DENSE_MULTICLASS, "ep", L.Probit, "does not take a binary or ordinal likelihood"),
    (FITC_BINARY, "meanfield", L.Probit, "the FITC prior supports"),
    ("dense", "ep", L.Probit, "must be a prior structure"),
])
def test_a_cell_that_does_not_exist_is_a_value_error(structure, approx, lik, match):
    for op_type in (ApproxMarginalOp, LatentPredictiveOp):
        with pytest.raises(ValueError, match=match):
            op_type(approx, lik, structure=structure)


@pytest.mark.parametrize("structure, shapes, message", [
    (DENSE_MULTICLASS, [(None, None)], r"K must have 3 dimensions \(one slice per class\), got 2"),
    (FITC_BINARY, [(None, None), (None, None), (None, None)], "k_diag must have 1 dimensions, got 2"),
    (FITC_MULTICLASS, [(None,) * 3, (None,) * 2, (None,) * 2], r"Kuf must have 3 dimensions \(one slice per"),
])
def test_kernel_inputs_of_the_wrong_rank_are_refused_when_the_graph_is_built(structure, shapes, message):
    lik, approx = (L.Softmax, "laplace") if structure.multiclass else (L.Probit, "ep")
    op = ApproxMarginalOp(approx, lik, structure=structure)
    with pytest.raises(ValueError, match=message):
        op(*[pt.tensor(shape=s) for s in shapes], pt.dvector(), pt.dvector())


def test_the_predictive_takes_theta_only_where_the_likelihood_has_parameters():
    """Binary: (K, theta, y, K_cross, K_star); several classes: (K, y, K_cross, K_star). A
    dense binary prediction by hand equals K_*f (K + W^-1)^-1 ... as the solver's own
    ``predict_latent`` computes it on the same kernels."""
    rng = np.random.default_rng(4)
    X, Xs = rng.normal(size=(15, 1)), rng.normal(size=(4, 1))
    y = np.where(X[:, 0] > 0, 1.0, -1.0)

    def k(A, B):
        return np.exp(-0.5 * (A - B.T) ** 2)

    K = k(X, X) + 1e-6 * np.eye(15)
    mean, var = LatentPredictiveOp("laplace", L.Probit)(K, np.zeros(0), y, k(X, Xs), np.ones(4))
    mean, var = pytensor.function([], [mean, var])()
    res = pymc_gpc.laplace(K, y, L.Probit())
    want_mean, want_var = res.predict_latent(k(X, Xs), np.ones(4))
    np.testing.assert_allclose(mean, want_mean, rtol=1e-8)
    np.testing.assert_allclose(var, want_var, rtol=1e-8)
    with pytest.raises(TypeError, match="takes 4 inputs"):
        LatentPredictiveOp("laplace", L.Softmax, structure=DENSE_MULTICLASS)(
            np.stack([K] * 3), np.zeros(0), y, np.stack([k(X, Xs)] * 3), np.ones((3, 4)))


def _model(X, y, Xu_value):
    """A softmax FITC model whose Xu is a pm.Data tensor with no static shape."""
    with pm.Model() as model:
        Xu = pm.Data("Xu", Xu_value)
        assert Xu.type.shape[0] is None  # the number of sets is unknown when the graph is built
        log_ls = pm.Normal("log_ls", 0.0, 1.0)
        cov = pm.gp.cov.ExpQuad(2, ls=pt.exp(log_ls))
        gp = pymc_gpc.MarginalLaplace(cov_func=cov, likelihood=Softmax(), approx="FITC", jitter=1e-6)
        gp.marginal_likelihood("y", X=X, y=y, Xu=Xu)
    return model


@pytest.fixture(scope="module")
def logp_of_data():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(18, 2))
    y = np.digitize(X[:, 0], [-0.4, 0.4])  # three classes
    Xu = np.stack([X[rng.choice(18, 4, replace=False)] for _ in range(3)])
    model = _model(X, y, Xu)
    fn = model.compile_logp(mode=PYTHON_VM_MODE)

    def logp(Xu_value):
        with model:
            pm.set_data({"Xu": Xu_value})
        return fn(model.initial_point())

    return logp, Xu


def test_symbolic_xu_with_one_set_per_class_evaluates(logp_of_data):
    logp, Xu = logp_of_data
    assert np.isfinite(logp(Xu))


@pytest.mark.parametrize("n_sets", [2, 4])
def test_symbolic_xu_with_the_wrong_number_of_sets_raises_the_assert(logp_of_data, n_sets):
    logp, Xu = logp_of_data
    wrong = np.concatenate([Xu, Xu])[:n_sets]
    with pytest.raises(AssertionError, match=r"Xu must hold one inducing set per class \(3\)"):
        logp(wrong)
