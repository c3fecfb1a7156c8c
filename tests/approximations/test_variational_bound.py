"""``approximations.variational_bound.softmax_dtc_bound``: the bound SVGP maximises, at the DTC
prior's softmax Laplace q(u), and its gradient in the kernel arrays.

Ground truth: the bound's definition, sum_i E_q(f_i)[log p(y_i | f_i)] - KL(q(u) || p(u)),
formed densely in the inducing values (plain Monte Carlo for the expectations); the dense
softmax Laplace on the stack of Q_k = K_fu K_uu^-1 K_uf for the DTC evidence; central
differences for the gradient.
"""

import numpy as np
import pytest

from pymc_gpc.approximations.variational_bound import softmax_dtc_bound
from pymc_gpc.solvers import softmax_laplace
from pymc_gpc.structures import multiclass_fitc
from pymc_gpc.structures.fitc import NonFiniteKernelError

from ..reference.multiclass_reference import svgp_bound


def _problem(c=3, m=5, n=30, seed=0):
    """Kernel arrays (K_uu jittered, K_uf, diag K_ff) of c SE kernels of their own, and labels."""
    rng = np.random.default_rng(seed)
    X, Xu = rng.normal(size=(n, 2)), rng.normal(size=(m, 2))
    y = np.argmax(X @ rng.normal(size=(2, c)) + 0.5 * rng.normal(size=(n, c)), axis=1)
    ls, amp = np.exp(rng.normal(0.0, 0.3, c)), np.exp(rng.normal(1.0, 0.4, c))

    def se(A, B, k):
        return amp[k] * np.exp(-0.5 * ((A[:, None] - B[None]) ** 2).sum(-1) / ls[k] ** 2)

    Kuu = np.stack([se(Xu, Xu, k) + 1e-6 * np.eye(m) for k in range(c)])
    Kuf = np.stack([se(Xu, X, k) for k in range(c)])
    k_diag = np.stack([np.full(n, amp[k] + 1e-6) for k in range(c)])
    return (Kuu, Kuf, k_diag), y


def test_the_dtc_evidence_is_the_dense_softmax_laplace_on_q():
    (Kuu, Kuf, k_diag), y = _problem()
    bound = softmax_dtc_bound(Kuu, Kuf, k_diag, y, draws=64)
    Q = np.stack([B.T @ np.linalg.solve(A, B) for A, B in zip(Kuu, Kuf)])
    dense = softmax_laplace(Q + 1e-10 * np.eye(Q.shape[1]), y, tol=1e-12)
    assert bound.log_z == pytest.approx(dense.log_z, abs=1e-6)
    np.testing.assert_allclose(bound.result.mean, dense.mean, atol=1e-6)


def test_the_bound_equals_its_definition_in_the_inducing_values():
    """sum_i E_q(f_i)[log pi_{y_i}(f_i)] - KL(q(u) || p(u)) at the DTC Laplace Gaussian, formed
    densely in the inducing values (``multiclass_reference.svgp_bound``), its expectations by
    200,000 plain Monte Carlo draws a row."""
    (Kuu, Kuf, k_diag), y = _problem(n=12, m=4, seed=11)
    bound = softmax_dtc_bound(Kuu, Kuf, k_diag, y, draws=4096, with_grad=False)
    definition, se = svgp_bound(Kuu, Kuf, k_diag, y, bound.result.a, size=200_000)
    assert bound.value == pytest.approx(definition, abs=4 * se + 0.005)
    assert bound.left_out < -0.5  # the widened q(f_i) is visible in the bound


@pytest.mark.parametrize("case", ["plain", "plain-2", "clipped rows", "a class without labels"])
def test_the_gradient_equals_central_differences_with_the_mode_solved_again(case):
    """Directional derivatives of the bound (its fixed draws; the DTC mode solved again at each
    side) in random directions of each kernel array, against the gradient; also where diag K_ff
    lies below diag Q on some rows (r clipped to 0 there: no gradient in diag K_ff) and where a
    class has no label."""
    seed = 1 if case == "plain-2" else 0
    arrays, y = _problem(seed=seed)
    if case == "clipped rows":
        Kuu, Kuf, k_diag = arrays
        q_diag = np.einsum("kmn,kmn->kn", Kuf, np.linalg.solve(Kuu, Kuf))
        k_diag = k_diag.copy()
        k_diag[:, :8] = 0.9 * q_diag[:, :8]
        arrays = (Kuu, Kuf, k_diag)
    if case == "a class without labels":
        y = np.where(y == 2, 1, y)
    bound = softmax_dtc_bound(*arrays, y, draws=64)
    rng = np.random.default_rng(seed + 10)
    h = 1e-6
    for j, (a, g) in enumerate(zip(arrays, bound.gradient)):
        assert g.shape == a.shape
        for _ in range(2):
            v = rng.normal(size=a.shape)
            if j == 0:
                v = 0.5 * (v + np.transpose(v, (0, 2, 1)))  # K_uu is symmetric
            up = softmax_dtc_bound(*[b + h * v if i == j else b for i, b in enumerate(arrays)], y, draws=64,
                                   with_grad=False).value
            down = softmax_dtc_bound(*[b - h * v if i == j else b for i, b in enumerate(arrays)], y, draws=64,
                                     with_grad=False).value
            fd = (up - down) / (2 * h)
            assert np.sum(g * v) == pytest.approx(fd, rel=1e-6, abs=1e-6)
    if case == "clipped rows":
        assert not np.any(bound.gradient.k_diag[:, :8]) and np.all(bound.gradient.k_diag[:, 8:] != 0.0)


def test_the_gradient_is_the_same_over_small_column_blocks(monkeypatch):
    """The pass over the observations in blocks of 7 columns (the boundaries inside the data)
    gives the gradient of one block."""
    arrays, y = _problem(seed=3)
    whole = softmax_dtc_bound(*arrays, y, draws=64)
    monkeypatch.setattr(multiclass_fitc, "column_blocks", lambda n, c, m: [slice(j, min(j + 7, n)) for j in range(0, n, 7)])
    blocked = softmax_dtc_bound(*arrays, y, draws=64)
    for g1, g2 in zip(whole.gradient, blocked.gradient):
        np.testing.assert_allclose(g1, g2, rtol=1e-10, atol=1e-12)


def test_a_warm_start_gives_the_same_bound():
    arrays, y = _problem(seed=2)
    cold = softmax_dtc_bound(*arrays, y, draws=64)
    moved = [1.01 * a for a in arrays]
    warm = softmax_dtc_bound(*moved, y, state=cold.result.state, draws=64)
    again = softmax_dtc_bound(*moved, y, draws=64)
    assert warm.value == pytest.approx(again.value, abs=1e-8)
    for g1, g2 in zip(warm.gradient, again.gradient):
        np.testing.assert_allclose(g1, g2, atol=1e-6)


@pytest.mark.parametrize("draws", [0, 3, 2.5, -4])
def test_bad_draws_are_a_value_error(draws):
    arrays, y = _problem()
    with pytest.raises(ValueError, match="draws"):
        softmax_dtc_bound(*arrays, y, draws=draws)


def test_non_finite_or_mismatched_arrays_are_value_errors_naming_them():
    (Kuu, Kuf, k_diag), y = _problem()
    bad = k_diag.copy()
    bad[1, 3] = np.nan
    with pytest.raises(NonFiniteKernelError, match="k_diag contains NaN"):
        softmax_dtc_bound(Kuu, Kuf, bad, y)
    with pytest.raises(ValueError, match=r"needs Kuu \(c, m, m\), Kuf \(c, m, n\) and k_diag \(c, n\)"):
        softmax_dtc_bound(Kuu, Kuf, k_diag[:, :-1], y)


def test_a_mode_not_found_is_a_linalg_error_not_a_wrong_gradient():
    """Where Newton's iteration stops before the mode (here after one step at large amplitudes),
    the implicit gradient would not hold: LinAlgError, after a cold start from a warm one."""
    (Kuu, Kuf, k_diag), y = _problem()
    big = (30.0 * Kuu, 30.0 * Kuf, 30.0 * k_diag)
    warm = softmax_dtc_bound(*big, y, draws=64).result.state
    with pytest.raises(np.linalg.LinAlgError, match="did not converge"):
        softmax_dtc_bound(*big, y, draws=64, max_iter=1)
    with pytest.raises(np.linalg.LinAlgError, match="did not converge"):
        softmax_dtc_bound(*[1.5 * a for a in big], y, state=warm, draws=64, max_iter=1)
