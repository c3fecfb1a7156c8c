"""What reaches the FITC evidence Ops: the shared input handling (``ops.sparse.FITCInputs``)
and the run-time check of a symbolic (c, m, d) Xu whose number of inducing sets is unknown
when the graph is built (``structures.select.FITCMulticlass.check_inducing``)."""

import numpy as np
import pymc as pm
import pytensor.tensor as pt
import pytest

import pymc_gpc
from pymc_gpc.likelihoods import Softmax
from pymc_gpc.ops.marginal import ApproxMarginalOp
from pymc_gpc.ops.multiclass import MulticlassMarginalOp, MulticlassSparseMarginalOp
from pymc_gpc.ops.sparse import FITCInputs, SparseMarginalOp
from pymc_gpc.backends.python_vm import PYTHON_VM_MODE


def test_both_fitc_ops_take_their_input_handling_from_the_mixin():
    # the shared methods come from FITCInputs (not copied or borrowed), ahead of each Op's base
    shared = ("kernel_cotangents", "_recent_key", "_not_converged_message", "_fast_ep", "connection_pattern",
              "pullback")
    for op_type, base in ((SparseMarginalOp, ApproxMarginalOp), (MulticlassSparseMarginalOp, MulticlassMarginalOp)):
        mro = op_type.__mro__
        assert mro.index(FITCInputs) < mro.index(base)
        for name in shared:
            owner = next(c for c in mro if name in c.__dict__)
            assert owner is FITCInputs, (op_type.__name__, name, owner.__name__)
        assert (op_type.n_kernel_inputs, op_type.loo_output) == (3, 5)


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
