"""The papers' covariance (Kim & Ghahramani eq. 10) against a direct NumPy evaluation."""

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
import pytest

import pymc_gpc
from pymc_gpc import likelihoods as L
from pymc_gpc.kernels import MixedARD


def reference(X, Z, v0, l, v1, v2, discrete, same):
    K = np.empty((len(X), len(Z)))
    for i, a in enumerate(X):
        for j, b in enumerate(Z):
            d = sum(l[m] * ((a[m] != b[m]) if discrete[m] else (a[m] - b[m]) ** 2) for m in range(len(a)))
            K[i, j] = v0 * np.exp(-0.5 * d) + v1 + (v2 if same and i == j else 0.0)
    return K


@pytest.mark.parametrize("linker", ["numba", "py"])
def test_mixed_kernel_matches_the_definition(linker):
    """Values against the definition, with symbolic hyperparameters (so the Op runs
    compiled, not constant-folded) under both the numba and the Python linker."""
    from pytensor.compile.mode import Mode

    rng = np.random.default_rng(0)
    X = np.column_stack([rng.normal(size=8), rng.integers(0, 3, 8), rng.normal(size=8), rng.integers(0, 2, 8)])
    Z = np.column_stack([rng.normal(size=5), rng.integers(0, 3, 5), rng.normal(size=5), rng.integers(0, 2, 5)])
    l = np.array([0.7, 1.5, 0.2, 3.0])
    disc = np.array([False, True, False, True])
    lv, v0, v1, v2 = pt.dvector("l"), pt.dscalar("v0"), pt.dscalar("v1"), pt.dscalar("v2")
    k = MixedARD(4, v0=v0, l=lv, v1=v1, v2=v2, discrete=[1, 3])
    f = pytensor.function([lv, v0, v1, v2], [k(X), k(X, Z), k(X, diag=True)], mode=Mode(linker=linker))
    full, cross, diag = f(l, 2.0, 0.3, 0.05)
    np.testing.assert_allclose(full, reference(X, X, 2.0, l, 0.3, 0.05, disc, True), rtol=1e-12)
    np.testing.assert_allclose(cross, reference(X, Z, 2.0, l, 0.3, 0.05, disc, False), rtol=1e-12)
    np.testing.assert_allclose(diag, np.full(8, 2.35), rtol=1e-12)


def test_mixed_kernel_gradients_drive_the_classifier():
    """Hyperparameters of the mixed kernel get correct gradients through the EP Op."""
    rng = np.random.default_rng(1)
    X = np.column_stack([rng.normal(size=20), rng.integers(0, 2, 20)])
    y = np.where(X[:, 0] + 0.8 * X[:, 1] - 0.4 > 0, 1, -1)
    log_l = pt.dvector("log_l")
    k = MixedARD(2, v0=2.0, l=pt.exp(log_l), v1=0.1, v2=0.01, discrete=[1])
    with pm.Model():
        gp = pymc_gpc.MarginalEP(cov_func=k, likelihood=L.Probit(), tol=1e-10)  # tight, for differences
        log_z = gp.marginal_likelihood("y", X=X, y=y)
    f = pytensor.function([log_l], [log_z, pytensor.grad(log_z, log_l)])
    p = np.log([0.8, 1.2])
    val, g = f(p)
    h = 1e-5
    for m in range(2):
        e = np.zeros(2)
        e[m] = h
        assert g[m] == pytest.approx((f(p + e)[0] - f(p - e)[0]) / (2 * h), rel=1e-5)


def test_bad_discrete_columns():
    with pytest.raises(ValueError, match="discrete column indices"):
        MixedARD(2, v0=1.0, l=[1.0, 1.0], discrete=[2])


def _mixed_data(rng, n):
    return np.column_stack([rng.normal(size=n), rng.integers(0, 3, n), rng.normal(size=n)])


@pytest.mark.parametrize("same", [True, False])
@pytest.mark.parametrize("linker", ["numba", "py"])
def test_kernel_pullback_matches_finite_differences(same, linker):
    """d/d(log l, log v0, log v1, log v2) of <W, K> + <V, E> against central differences,
    through both the compiled and the Python implementations of the two Ops."""
    from pytensor.compile.mode import Mode

    from pymc_gpc.kernels import ARDKernelOp

    rng = np.random.default_rng(3)
    X, Z = _mixed_data(rng, 9), _mixed_data(rng, 6)
    Xs = X if same else Z
    W, V = rng.normal(size=(9, len(Xs))), rng.normal(size=(9, len(Xs)))
    p = pt.dvector("p")  # log l (3), log v0, log v1, log v2
    K, E = ARDKernelOp((False, True, False), symmetric=same)(X, Xs, pt.exp(p[:3]), *(pt.exp(p[k]) for k in (3, 4, 5)))
    target = pt.sum(W * K) + pt.sum(V * E)
    mode = Mode(linker=linker, optimizer="fast_run")
    fg = pytensor.function([p], [target, pytensor.grad(target, p)], mode=mode)  # one compilation
    x = np.array([0.3, -0.5, 1.1, 0.2, -1.0, -2.0])
    h = 1e-6
    fd = np.array([(fg(x + h * e)[0] - fg(x - h * e)[0]) / (2 * h) for e in np.eye(6)])
    np.testing.assert_allclose(fg(x)[1], fd, rtol=1e-6, atol=1e-8)
    if not same:
        assert fg(x)[1][5] == 0.0  # v2 delta(i, j) is only on the training covariance


def test_ard_kernel_is_scaled_expquad_plus_constant():
    """With no discrete column the kernel is v0 ExpQuad(ls = l^-1/2) + v1, value and gradient."""
    rng = np.random.default_rng(4)
    X = rng.normal(size=(12, 3))
    p = pt.dvector("p")
    ours = MixedARD(3, v0=pt.exp(p[3]), l=pt.exp(p[:3]), v1=pt.exp(p[4]))(X)
    pymc = pt.exp(p[3]) * pm.gp.cov.ExpQuad(3, ls=pt.exp(-0.5 * p[:3]))(X) + pt.exp(p[4])
    W = rng.normal(size=(12, 12))
    f = pytensor.function([p], [ours, pymc, pytensor.grad(pt.sum(W * ours), p), pytensor.grad(pt.sum(W * pymc), p)])
    out = f(np.array([0.1, -1.0, 0.7, 0.3, -2.0]))
    np.testing.assert_allclose(out[0], out[1], rtol=1e-13)
    np.testing.assert_allclose(out[2], out[3], rtol=1e-10)


def test_kernel_rejects_mismatched_columns():
    from pymc_gpc.kernels import ARDKernelOp

    X = np.zeros((4, 2))
    K = ARDKernelOp((False, False), symmetric=True)(X, X, np.ones(3), 1.0, 0.0, 0.0)[0]
    with pytest.raises(ValueError, match="agree on the number of columns"):
        K.eval()


def _check_input_gradient(same, seed, **form):
    """d<W, K>/dX (and dXs) of ``MixedARD(..., **form)`` against central differences; zero on
    the Hamming column (piecewise constant)."""
    rng = np.random.default_rng(seed)
    X0, Z0 = _mixed_data(rng, 7), _mixed_data(rng, 4)
    W = rng.normal(size=(7, 7 if same else 4))
    X, Z = pt.dmatrix("X"), pt.dmatrix("Z")
    k = MixedARD(3, v0=1.7, l=[0.8, 1.2, 0.4], v1=0.2, v2=0.1, discrete=[1], **form)
    target = pt.sum(W * (k(X) if same else k(X, Z)))
    f = pytensor.function([X, Z], target, on_unused_input="ignore")
    g = pytensor.function([X, Z], pytensor.grad(target, [X, Z], disconnected_inputs="ignore"),
                          on_unused_input="ignore")
    grads = g(X0, Z0)
    h = 1e-6
    for which, A in enumerate((X0, Z0)):
        if same and which == 1:
            continue
        fd = np.zeros_like(A)
        for idx in np.ndindex(A.shape):
            E = np.zeros_like(A)
            E[idx] = h
            args = [X0, Z0]
            args[which] = A + E
            up = f(*args)
            args[which] = A - E
            fd[idx] = (up - f(*args)) / (2 * h)
        fd[:, 1] = 0.0
        np.testing.assert_allclose(grads[which], fd, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("same", [True, False])
def test_kernel_gradient_with_respect_to_inputs(same):
    """d<W, K>/dX (and dXs) against central differences; zero on the Hamming column."""
    _check_input_gradient(same, seed=5)


def test_single_shared_lengthscale_gradient():
    """A scalar l (``lengthscales="single"``) broadcast over the columns."""
    rng = np.random.default_rng(6)
    X = _mixed_data(rng, 8)
    W = rng.normal(size=(8, 8))
    log_l = pt.dscalar("log_l")
    target = pt.sum(W * MixedARD(3, v0=1.3, l=pt.exp(log_l), discrete=[1])(X))
    f = pytensor.function([log_l], [target, pytensor.grad(target, log_l)])
    h = 1e-6
    assert f(0.3)[1] == pytest.approx((f(0.3 + h)[0] - f(0.3 - h)[0]) / (2 * h), rel=1e-6)


def test_many_columns_compile_under_numba():
    """PyTensor names cache files after the Ops' keys: they must not grow with the columns."""
    rng = np.random.default_rng(7)
    X = rng.normal(size=(15, 40))
    log_l = pt.dvector("log_l")
    K = MixedARD(40, v0=1.0, l=pt.exp(log_l), v1=0.1, discrete=list(range(0, 40, 3)))(X)
    f = pytensor.function([log_l], [K, pytensor.grad(pt.sum(K), log_l)], mode="NUMBA")
    K_val, g = f(np.full(40, -3.0))
    assert K_val.shape == (15, 15) and np.all(np.isfinite(g))


def test_symmetric_kernel_needs_xs_equal_to_x():
    from pymc_gpc.kernels import ARDKernelOp

    K = ARDKernelOp((False,), symmetric=True)(np.zeros((4, 1)), np.zeros((3, 1)), np.ones(1), 1.0, 0.0, 0.1)[0]
    with pytest.raises(ValueError, match="symmetric kernel needs Xs = X"):
        K.eval()


def test_kernel_rejects_non_scalar_variances():
    with pytest.raises(ValueError, match="v0 must have 0 dimension"):
        MixedARD(2, v0=pt.ones(1), l=[1.0, 1.0])(np.zeros((3, 2)))


@pytest.mark.parametrize("same", [True, False])
def test_product_form_matches_the_loops(same):
    """The BLAS-product distances and pullback (``PRODUCT_MIN_COLUMNS`` continuous columns
    and more) against the column loops, on inputs far from the origin with mixed scales and
    two Hamming columns; the symmetric distance stays exactly symmetric with a zero diagonal."""
    from pymc_gpc.kernels import distance_pullback, weighted_distance

    rng = np.random.default_rng(8)
    d = 14
    discrete = np.zeros(d, dtype=bool)
    discrete[[3, 9]] = True

    scale, offset = rng.uniform(0.1, 10.0, d), rng.uniform(-50.0, 50.0, d)

    def data(n):
        X = rng.normal(size=(n, d)) * scale + offset
        X[:, discrete] = rng.integers(0, 3, (n, 2))
        return X

    X = data(40)
    Xs = X if same else data(25)
    l = np.exp(rng.normal(-3.0, 1.0, d)) / scale**2  # E = exp(-D/2) between 1e-6 and 1
    loops, products = 10**6, 1
    D_loop = weighted_distance(X, Xs, l, discrete, loops)
    D_prod = weighted_distance(X, Xs, l, discrete, products)
    np.testing.assert_allclose(D_prod, D_loop, rtol=1e-12, atol=1e-12 * D_loop.max())
    if same:
        assert np.array_equal(D_prod, D_prod.T) and np.all(np.diag(D_prod) == 0.0)
    assert np.all(D_prod >= 0.0)
    G, E = rng.normal(size=D_loop.shape), np.exp(-0.5 * D_loop)
    assert np.median(E) > 0.1
    for a, b in zip(distance_pullback(G, E, X, Xs, discrete, products), distance_pullback(G, E, X, Xs, discrete, loops)):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
    # the default switches to the products at PRODUCT_MIN_COLUMNS continuous columns
    assert np.array_equal(weighted_distance(X, Xs, l, discrete), D_prod)


def test_many_continuous_columns_kernel_and_gradient():
    """The Op on 12 continuous columns (the product form) against the definition and
    finite differences of the log-lengthscale gradient."""
    from pymc_gpc.kernels import PRODUCT_MIN_COLUMNS

    rng = np.random.default_rng(9)
    d = 13
    assert d - 1 >= PRODUCT_MIN_COLUMNS
    X = rng.normal(size=(10, d)) + 3.0
    X[:, 5] = rng.integers(0, 2, 10)
    disc = np.zeros(d, dtype=bool)
    disc[5] = True
    W = rng.normal(size=(10, 10))
    log_l = pt.dvector("log_l")
    K = MixedARD(d, v0=1.4, l=pt.exp(log_l), v1=0.2, v2=0.05, discrete=[5])(X)
    f = pytensor.function([log_l], [K, pt.sum(W * K), pytensor.grad(pt.sum(W * K), log_l)], mode="NUMBA")
    p = rng.normal(-1.5, 0.5, d)
    K_val, _, g = f(p)
    np.testing.assert_allclose(K_val, reference(X, X, 1.4, np.exp(p), 0.2, 0.05, disc, True), rtol=1e-12)
    h = 1e-6
    fd = np.array([(f(p + h * e)[1] - f(p - h * e)[1]) / (2 * h) for e in np.eye(d)])
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-9)


def test_product_form_with_no_points():
    """An empty set of points (a prediction at no inputs) gives an empty kernel, not a
    division by zero in the product form's centring."""
    from pymc_gpc.kernels import distance_pullback, weighted_distance

    X, empty = np.random.default_rng(10).normal(size=(5, 12)), np.zeros((0, 12))
    mask = np.zeros(12, dtype=bool)
    assert weighted_distance(X, empty, np.ones(12), mask, 1).shape == (5, 0)
    assert weighted_distance(empty, X, np.ones(12), mask, 1).shape == (0, 5)
    s, s_ge, s_g, tr_g = distance_pullback(np.zeros((5, 0)), np.zeros((5, 0)), X, empty, mask, 1)
    assert np.all(s == 0.0) and s_ge == s_g == tr_g == 0.0


def matern52_reference(X, Z, v0, l, v1, v2, discrete, same):
    """The ARD Matern 5/2 form of ``MixedARD`` from its definition, entry by entry."""
    K = np.empty((len(X), len(Z)))
    for i, a in enumerate(X):
        for j, b in enumerate(Z):
            d = sum(l[m] * ((a[m] != b[m]) if discrete[m] else (a[m] - b[m]) ** 2) for m in range(len(a)))
            s = np.sqrt(5.0 * d)
            K[i, j] = v0 * (1.0 + s + s * s / 3.0) * np.exp(-s) + v1 + (v2 if same and i == j else 0.0)
    return K


@pytest.mark.parametrize("linker", ["numba", "py"])
def test_matern52_form_matches_the_definition(linker):
    """MixedARD(form="matern52"): values against the definition, discrete columns included,
    under both linkers."""
    from pytensor.compile.mode import Mode

    rng = np.random.default_rng(10)
    X, Z = _mixed_data(rng, 8), _mixed_data(rng, 5)
    l, disc = np.array([0.7, 1.5, 0.2]), np.array([False, True, False])
    lv, v0, v1, v2 = pt.dvector("l"), pt.dscalar("v0"), pt.dscalar("v1"), pt.dscalar("v2")
    k = MixedARD(3, v0=v0, l=lv, v1=v1, v2=v2, discrete=[1], form="matern52")
    f = pytensor.function([lv, v0, v1, v2], [k(X), k(X, Z), k(X, diag=True)], mode=Mode(linker=linker))
    full, cross, diag = f(l, 2.0, 0.3, 0.05)
    np.testing.assert_allclose(full, matern52_reference(X, X, 2.0, l, 0.3, 0.05, disc, True), rtol=1e-12)
    np.testing.assert_allclose(cross, matern52_reference(X, Z, 2.0, l, 0.3, 0.05, disc, False), rtol=1e-12)
    np.testing.assert_allclose(diag, np.full(8, 2.35), rtol=1e-12)


def test_matern52_form_rejects_an_unknown_form():
    with pytest.raises(ValueError, match="form must be one of"):
        MixedARD(2, v0=1.0, l=[1.0, 1.0], form="matern32")


@pytest.mark.parametrize("same", [True, False])
@pytest.mark.parametrize("linker", ["numba", "py"])
def test_matern52_pullback_matches_finite_differences(same, linker):
    """d<W, K>/d(log l, log v0, log v1, log v2) of the Matern 5/2 form against central
    differences (rel 1e-6), through the compiled and the Python implementations."""
    from pytensor.compile.mode import Mode

    rng = np.random.default_rng(11)
    X, Z = _mixed_data(rng, 9), _mixed_data(rng, 6)
    W = rng.normal(size=(9, 9 if same else 6))
    p = pt.dvector("p")  # log l (3), log v0, log v1, log v2
    k = MixedARD(3, v0=pt.exp(p[3]), l=pt.exp(p[:3]), v1=pt.exp(p[4]), v2=pt.exp(p[5]), discrete=[1],
                 form="matern52")
    target = pt.sum(W * (k(X) if same else k(X, Z)))
    mode = Mode(linker=linker, optimizer="fast_run")
    fg = pytensor.function([p], [target, pytensor.grad(target, p)], mode=mode)  # one compilation
    x = np.array([0.3, -0.5, 1.1, 0.2, -1.0, -2.0])
    h = 1e-6
    fd = np.array([(fg(x + h * e)[0] - fg(x - h * e)[0]) / (2 * h) for e in np.eye(6)])
    np.testing.assert_allclose(fg(x)[1], fd, rtol=1e-6, atol=1e-8)
    if not same:
        assert fg(x)[1][5] == 0.0


@pytest.mark.parametrize("d", [3, 9])  # the loops, and the BLAS-product distances (PRODUCT_MIN_COLUMNS)
def test_matern52_form_is_scaled_pymc_matern52_plus_constant(d):
    """With no discrete column the Matern form is v0 Matern52(ls = l^-1/2) + v1: values
    and gradients in every hyperparameter equal PyTensor's general graph (rel 1e-10; pymc's
    Matern52 takes the root of r^2 + 1e-12, a shift below that)."""
    rng = np.random.default_rng(12)
    X, Xu = rng.normal(size=(14, d)), rng.normal(size=(5, d))
    p = pt.dvector("p")
    ours = MixedARD(d, v0=pt.exp(p[d]), l=pt.exp(p[:d]), v1=pt.exp(p[d + 1]), form="matern52")
    pymc = pt.exp(p[d]) * pm.gp.cov.Matern52(d, ls=pt.exp(-0.5 * p[:d])) + pt.exp(p[d + 1])
    Wu, W = rng.normal(size=(5, 5)), rng.normal(size=(5, 14))
    objectives = [pt.sum(Wu * c(Xu)) + pt.sum(W * c(Xu, X)) for c in (ours, pymc)]
    f = pytensor.function([p], [ours(Xu, X), pymc(Xu, X)] + [pytensor.grad(o, p) for o in objectives])
    out = f(np.concatenate([rng.normal(scale=0.5, size=d) - 1.0, [0.3, -2.0]]))
    np.testing.assert_allclose(out[0], out[1], rtol=1e-10)
    np.testing.assert_allclose(out[2], out[3], rtol=1e-10)


@pytest.mark.parametrize("same", [True, False])
def test_matern52_gradient_with_respect_to_inputs(same):
    """d<W, K>/dX (and dXs) of the Matern form against central differences; zero on the
    Hamming column."""
    _check_input_gradient(same, seed=13, form="matern52")


def test_fitc_matern52_classifier_uses_the_op_and_its_gradient_holds():
    """ard_classifier(kernel="matern52") with FITC builds K_uu and K_uf by ARDMatern52Op;
    the model's log posterior gradient matches central differences in every hyperparameter
    (rel 1e-5)."""
    from pymc.blocking import DictToArrayBijection

    from pymc_gpc.kernels import ARDMatern52Op

    rng = np.random.default_rng(14)
    X = rng.normal(size=(60, 2))
    y = (X[:, 0] - 0.5 * X[:, 1] + 0.3 * rng.normal(size=60) > 0).astype(int)
    model, _ = pymc_gpc.ard_classifier(X, y, kernel="matern52", inducing=8)
    fn = model.logp_dlogp_function(ravel_inputs=True)
    ops = [node.op for node in fn._pytensor_function.maker.fgraph.toposort()]
    assert sum(isinstance(op, ARDMatern52Op) for op in ops) == 2
    fn.set_extra_values({})
    x = DictToArrayBijection.map({v.name: model.initial_point()[v.name] for v in model.continuous_value_vars}).data
    x = x + 0.1 * rng.normal(size=x.size)
    grad = fn(x)[1]
    h = 1e-5
    fd = np.array([(fn(x + h * e)[0] - fn(x - h * e)[0]) / (2 * h) for e in np.eye(x.size)])
    np.testing.assert_allclose(grad, fd, rtol=1e-5, atol=1e-6)


def _dense_kernel(X, Xs, l, discrete):
    """D = sum_m l_m d_m and the per-column d_m (m, n, n'), by NumPy broadcasting."""
    diff = X[:, None, :] - Xs[None, :, :]
    d_m = np.where(discrete, (diff != 0.0).astype(float), diff**2).transpose(2, 0, 1)
    return np.tensordot(l, d_m, axes=1), d_m


@pytest.fixture(scope="module")
def tiled_case():
    """More rows than a pullback tile and more columns than a block (``TILE_ROWS``,
    ``BLOCK``), two Hamming columns among six, inputs away from the origin."""
    from pymc_gpc.kernels import BLOCK, TILE_ROWS

    rng = np.random.default_rng(15)
    n, m = 2 * TILE_ROWS + 5, 2 * BLOCK + 37
    discrete = np.array([False, True, False, False, True, False])

    def data(k):
        X = rng.normal(size=(k, 6)) * 0.7 + 2.0
        X[:, discrete] = rng.integers(0, 3, (k, 2))
        return X

    return data(n), data(m), np.exp(rng.normal(-1.0, 0.5, 6)), discrete, rng.normal(size=(n, m))


@pytest.mark.parametrize("min_columns", [1, 10**6])  # the BLAS-product distances, the loops
def test_blocked_kernel_and_pullback_match_the_dense_definition(tiled_case, min_columns):
    """``ard_kernel`` (K, E in one blocked pass) and ``distance_pullback`` (tiles, with a C- and
    a Fortran-ordered cotangent) over several blocks and tiles, against dense NumPy sums of
    the definition (rel 1e-12)."""
    from pymc_gpc.kernels import ard_kernel, distance_pullback

    X, Xs, l, discrete, G = tiled_case
    n, m = G.shape
    D, d_m = _dense_kernel(X, Xs, l, discrete)
    E_ref = np.exp(-0.5 * D)
    for symmetric, B in ((False, Xs), (True, X)):
        K, E = np.empty((n, len(B))), np.empty((n, len(B)))
        ard_kernel(K, E, X, B, l, 1.7, 0.3, 0.05, discrete, symmetric, min_columns)
        E_want = E_ref if not symmetric else np.exp(-0.5 * _dense_kernel(X, X, l, discrete)[0])
        np.testing.assert_allclose(E, E_want, rtol=1e-12)
        np.testing.assert_allclose(K, 1.7 * E_want + 0.3 + (0.05 * np.eye(n) if symmetric else 0.0), rtol=1e-12)
        if symmetric:
            assert np.array_equal(K, K.T)
    E = np.exp(-0.5 * D)
    want = (np.tensordot(d_m, G * E, axes=([1, 2], [0, 1])), np.sum(G * E), G.sum(), np.trace(G[:, :n]))
    for order in ("C", "F"):
        got = distance_pullback(np.asarray(G, order=order), E, X, Xs, discrete, min_columns)
        for a, b in zip(got, want):  # a component is a sum with cancellation: its rounding
            # is relative to the largest component (1.2e-12 relative in one on AVX-512 hosts)
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-13 * np.max(np.abs(b)))


def test_blocked_kernel_gradient_matches_finite_differences(tiled_case):
    """d<W, K>/d(log l, log v0, log v1) and d/dX, d/dXs (a sample of entries) of the Op over
    several blocks and tiles, compiled, against five-point differences (rel 1e-6)."""
    from pymc_gpc.kernels import ARDKernelOp

    X0, Xs0, l0, discrete, W = tiled_case
    p, X, Xs = pt.dvector("p"), pt.dmatrix("X"), pt.dmatrix("Xs")
    K = ARDKernelOp(tuple(discrete), symmetric=False)(X, Xs, pt.exp(p[:6]), pt.exp(p[6]), pt.exp(p[7]), 0.0)[0]
    target = pt.sum(W * K)
    # value and gradient in one function: one compilation
    fg = pytensor.function([p, X, Xs], [target, *pytensor.grad(target, [p, X, Xs])], mode="NUMBA")
    x = np.concatenate([np.log(l0), [0.4, -1.2]])
    _, gp_, gX, gXs = fg(x, X0, Xs0)

    def fd(which, E):  # the five-point stencil (the sum over 7e4 entries rounds at ~1e-13)
        args = [x, X0, Xs0]
        vals = []
        for k in (1, -1, 2, -2):
            args[which] = (x, X0, Xs0)[which] + k * E
            vals.append(fg(*args)[0])
        return (8.0 * (vals[0] - vals[1]) - (vals[2] - vals[3])) / 12.0

    h = 1e-4
    np.testing.assert_allclose(gp_, [fd(0, h * e) / h for e in np.eye(8)], rtol=1e-6)
    rng = np.random.default_rng(16)
    for which, A, grad in ((1, X0, gX), (2, Xs0, gXs)):
        for _ in range(6):
            i, c = rng.integers(A.shape[0]), rng.choice(np.flatnonzero(~discrete))
            E = np.zeros_like(A)
            E[i, c] = h
            assert grad[i, c] == pytest.approx(fd(which, E) / h, rel=1e-6)


@pytest.mark.parametrize("min_bytes", [0, 1 << 40])
def test_compiled_kernel_outputs_pooled_or_not_are_the_definition(tiled_case, monkeypatch, min_bytes):
    """The compiled ARD kernel Op with its outputs from the array pool (every size pooled:
    ``min_bytes`` 0) and from numba's allocator (none pooled) gives the definition's K and E
    (rel 1e-12); pooled outputs are held by the caller, so a second call gets other arrays."""
    from pymc_gpc.kernels import ARDKernelOp
    from pymc_gpc.numerics.workspace import POOL

    monkeypatch.setattr(POOL, "min_bytes", min_bytes)
    X0, Xs0, l0, discrete, _ = tiled_case
    X, Xs = pt.dmatrix("X"), pt.dmatrix("Xs")
    K, E = ARDKernelOp(tuple(discrete), symmetric=False)(X, Xs, l0, 1.7, 0.3, 0.0)
    f = pytensor.function([X, Xs], [K, E], mode="NUMBA")
    E_want = np.exp(-0.5 * _dense_kernel(X0, Xs0, l0, discrete)[0])
    first = f(X0, Xs0)
    second = f(X0, Xs0 + 0.1)
    np.testing.assert_allclose(first[1], E_want, rtol=1e-12)
    np.testing.assert_allclose(first[0], 1.7 * E_want + 0.3, rtol=1e-12)
    assert not np.shares_memory(first[0], second[0]) and not np.shares_memory(first[1], second[1])


def test_both_linkers_compile_each_kernel_for_one_signature():
    """The ARD Ops hand their numba kernels C-contiguous, writable arrays and a plain bool under
    the numba and the Python linker alike, whatever the layout and read-only flag of X (a
    graph constant, in the user's order) and whether the kernel is symmetric: numba compiles
    ``ard_kernel``, ``distance_pullback`` and ``matern52_into`` for these graphs once each
    (they had 11, 14 and 4 signatures after a run of the suite: PyTensor's read-only
    constants, transposed inputs, the closure's read-only mask, a literal ``symmetric``). The
    numba linker reaches them through their C-callable forms (``kernels.external_kernels``),
    compiled once a process or loaded from numba's cache (then adding no signature); the Python
    linker through ``perform``. The pullback reads a Fortran-ordered cotangent G as it is (the
    Python linker's usual one), so ``distance_pullback`` may have a second signature,
    differing in G's layout only. PyTensor's graph cache is off, so that the numba linker
    compiles."""
    from numba import types
    from pytensor.compile.mode import Mode

    from pymc_gpc import kernels

    rng = np.random.default_rng(31)
    X = _mixed_data(rng, 9)
    new = {k: set(getattr(kernels, k).signatures) for k in ("ard_kernel", "distance_pullback", "matern52_into")}
    p = pt.dvector("p")
    target = 0.0  # one graph of both forms and both layouts: one compilation per linker
    for data, form in ((np.asfortranarray(X), "se"), (X, "matern52"), (X, "se")):
        k = MixedARD(3, v0=pt.exp(p[3]), l=pt.exp(p[:3]), discrete=[1], form=form)
        target = target + pt.sum(k(data)) + pt.sum(k(data, data[:4] * 0.5))
    for linker in ("numba", "py"):
        with pytensor.config.change_flags(numba__cache=False):
            f = pytensor.function([p], [target, pytensor.grad(target, p)], mode=Mode(linker=linker))
        assert np.all(np.isfinite(f(np.array([0.3, -0.5, 1.1, 0.2]))[1]))
    for name, before in new.items():
        added = set(getattr(kernels, name).signatures) - before
        assert len(added) <= (2 if name == "distance_pullback" else 1), (name, added)
        for sig in added:
            for k, t in enumerate(sig):
                assert not isinstance(t, types.Literal), (name, sig)
                layouts = "CF" if name == "distance_pullback" and k == 0 else "C"
                assert not isinstance(t, types.Array) or (t.layout in layouts and t.mutable), (name, sig)


def test_a_compiled_graph_calls_the_kernels_and_does_not_link_them():
    """A numba-compiled graph with the ARD Ops (both forms, and the gradient's pullback) calls
    the kernels' C-callable forms through their symbols (``kernels.external_kernels``) and
    defines none of the kernels' functions itself: linked in, numba optimised them again in
    every graph a user compiled (about 1 s each). The graph's values are the Python linker's."""
    import re

    from pytensor.compile.mode import Mode

    from pymc_gpc import kernels

    rng = np.random.default_rng(5)
    X = _mixed_data(rng, 12)
    p = pt.dvector("p")
    target = 0.0
    for form, data in (("se", X), ("matern52", X), ("se", np.asfortranarray(X))):  # a Fortran-ordered X too
        k = MixedARD(3, v0=pt.exp(p[3]), l=pt.exp(p[:3]), discrete=[1], form=form)
        target = target + pt.sum(k(data) ** 2) + pt.sum(k(data, data[:4] * 0.5))
    outputs = [target, pytensor.grad(target, p)]
    point = np.array([0.3, -0.5, 1.1, 0.2])
    with pytensor.config.change_flags(numba__cache=False):
        f = pytensor.function([p], outputs, mode=Mode(linker="numba"))
    expected = pytensor.function([p], outputs, mode=Mode(linker="py"))(point)
    for got, want in zip(f(point), expected):
        np.testing.assert_allclose(got, want, rtol=1e-12)
    ir = "\n".join(f.vm.jit_fn.inspect_llvm().values())
    defined = re.findall(r"^define [^@]*@(\S+?)\(", ir, re.M)
    kernel_code = [name for name in defined
                   if re.search(r"7kernels\d+(ard_kernel|distance_pullback|matern52_into|weighted_distance_into|"
                                r"_add_loop_distances|_pullback_row)B", name)]
    assert not kernel_code, kernel_code
    declared = set(re.findall(r"^declare [^@]*@(pymc_gpc_\w+)\(", ir, re.M))
    assert declared == set(kernels.EXTERNAL_SYMBOLS), declared


@pytest.mark.parametrize("op_type", ["ARDKernelOp", "ARDMatern52Op"])
def test_the_compiled_ops_check_shapes_before_calling_the_kernels(op_type):
    """Under the numba linker the Ops call the kernels' C-callable forms, which read the
    arrays by pointer and cannot raise: the checks before the call give the Python path's
    ValueError for a symmetric kernel with Xs other than X, and for X, Xs, l or a cotangent
    that disagree in shape (symbolic inputs, so that no check runs while compiling)."""
    from pytensor.compile.mode import Mode

    from pymc_gpc import kernels

    op = getattr(kernels, op_type)
    X, Xs, l, G = pt.dmatrix("X"), pt.dmatrix("Xs"), pt.dvector("l"), pt.dmatrix("G")
    v = [pt.dscalar(name) for name in ("v0", "v1", "v2")]
    mode = Mode(linker="numba")
    rng = np.random.default_rng(2)
    A, B, ls, scalars = rng.normal(size=(5, 2)), rng.normal(size=(4, 2)), np.ones(2), (1.0, 0.5, 0.1)
    symmetric = pytensor.function([X, Xs, l, *v], op((False, True), True)(X, Xs, l, *v)[0], mode=mode)
    np.testing.assert_allclose(symmetric(A, A, ls, *scalars), symmetric(A, A, ls, *scalars).T)
    with pytest.raises(ValueError, match="symmetric kernel needs Xs = X"):
        symmetric(A, B, ls, *scalars)
    cross = pytensor.function([X, Xs, l, *v], op((False, True), False)(X, Xs, l, *v)[0], mode=mode)
    assert cross(A, B, ls, *scalars).shape == (5, 4)
    for bad in ((A, rng.normal(size=(4, 3)), ls), (A, B, np.ones(3)), (A, B, np.ones(1))):
        with pytest.raises(ValueError, match="agree on the number of columns"):
            cross(*bad, *scalars)
    E = pt.dmatrix("E")
    pull = pytensor.function([G, E, X, Xs], kernels.ARDKernelPullbackOp((False, True))(G, E, X, Xs)[0], mode=mode)
    assert pull(np.ones((5, 4)), np.ones((5, 4)), A, B).shape == (2,)
    with pytest.raises(ValueError, match="do not match"):
        pull(np.ones((5, 3)), np.ones((5, 3)), A, B)
