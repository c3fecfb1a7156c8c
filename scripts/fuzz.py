"""Fuzz the user path at extreme hyperparameters: never a NaN, never an exception.

Structures (``STRUCTURES``): the dense binary prior, the FITC binary prior (EP and
Laplace, 15 inducing inputs placed by k-means), the dense multi-class prior (softmax
Laplace, multinomial probit with nested EP; one ARD kernel per class from
``pymc_gpc.kernels.ard_kernels``, as ``ard_classifier`` builds it) and the same with
each class's FITC prior (15 k-means inducing inputs shared by the classes); the ordinal
likelihoods (``OrderedProbit`` with sigma ~ HalfNormal(3), ``OrderedLogit``; cutpoints ~ N(0, 3^2)
under the ordered transform) with EP and Laplace on the dense and FITC binary priors.

Binary: for every likelihood x approximation (dense: EP, Laplace and both mean fields, 19
combinations, the step likelihood has no Laplace; ADF has no gradient to fuzz; FITC: EP
and Laplace, 9) and three data sets, the script builds the Barber & Williams ARD model the
way ``pymc_gpc.ard_classifier`` does (written out here so that likelihood parameters
can be random variables: ProbitBias ``bias ~ N(0, 3)``, ProbitNoise
``sigma ~ HalfNormal(3)``, StepLabelNoise ``epsilon ~ Uniform(0, 0.5)``), compiles
``model.logp()`` and ``model.dlogp()`` into one function (``model.compile_fn``, so one
Op evaluation gives both, as in NUTS) and evaluates it at points
where every unconstrained (log / logit / interval-transformed) value is drawn from
N(0, 3^2): kernel lengthscales and amplitudes from about 1e-4 to 1e4.

Data sets: Crabs training set (80, separable), a random 100-point subset of Pima's
training set (noisy), and the same subset with 10 % of its labels flipped (mislabelled);
several classes: three well-separated Gaussian clusters in 2-d (n = 60, separable), a
random 100-fragment subset of Forensic Glass (6 classes, 9 inputs, standardised; noisy)
and the same subset with 10 % of its labels moved to another class.

Each draw is classified as: finite value and gradient; value -inf with a finite
gradient (the Op's "failed" status 2, rejected by NUTS); NaN value; non-finite
gradient; exception. The Op's own counters give the non-converged (status 1) and
failed (status 2) evaluations and the retries taken (``ApproxMarginalOp.counts``).

    nice -n 10 python scripts/fuzz.py --draws 1200 --out benchmarks/results/fuzz.md
    PYTHONPATH=. python scripts/fuzz.py --invariants --draws 10 --out benchmarks/results/fuzz.md

``--invariants`` (issue 58): over every likelihood x approximation on the dense, the FITC and
the HSGP prior (several classes too), numba and JAX, on duplicated inputs with conflicting labels: the log evidence never
above 0, the backends equal wherever either is finite; the evidence Op under PyTensor's
Python VM against the numba linker (``python_vm_cell``); and every likelihood's predictive
rows summing to 1 and matching quadrature at latent variances up to 1e6 (``invariant_cell``,
``predictive_check``; HSGP also the posterior's predictive rows at new inputs); its section of the results file is replaced in place. (``PYTHONPATH=.``:
run as a script, ``scripts/`` heads the path and an installed ``pymc_gpc`` would be measured.)
    python scripts/fuzz.py --draws 100 --structures fitc dense-multiclass
"""

import argparse
import math
import os
import sys
import time
import warnings

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np
import pymc as pm
import pytensor.tensor as pt

import pymc_gpc
from pymc_gpc import likelihoods as L
from pymc_gpc.datasets import load_crabs, load_fgl, load_pima
from pymc_gpc.kernels import ard_kernels
from pymc_gpc.ops import ApproxMarginalOp, ApproximationFailedWarning

LIKELIHOODS = ("Probit", "ProbitBias", "ProbitNoise", "StepLabelNoise", "Logistic")
APPROXIMATIONS = ("ep", "laplace", "meanfield-ensemble", "meanfield-naive")  # ADF: no gradient
MULTICLASS = (("laplace", "Softmax"), ("ep", "MultinomialProbit"))
ORDINAL = [(a, lik) for a in ("ep", "laplace") for lik in ("OrderedProbit", "OrderedLogit")]
N_INDUCING = 15
COUNT_KEYS = ("draws", "finite", "neg_inf", "nan_value", "bad_grad", "exceptions",
              "not_converged", "failed", "retries", "other_warnings")


def _binary(approximations):
    return [(a, lik) for a in approximations for lik in LIKELIHOODS if not (a == "laplace" and lik == "StepLabelNoise")]


# structure -> ((approximation, likelihood) pairs, the kind of data: "binary" or "multiclass").
STRUCTURES = {  # in run order: a partial table (an interrupted run) holds the first ones
    "dense-multiclass": (list(MULTICLASS), "multiclass"),
    "fitc": (_binary(("ep", "laplace")), "binary"),
    "dense": (_binary(APPROXIMATIONS), "binary"),
    "fitc-multiclass": (list(MULTICLASS), "multiclass"),  # ``build_multiclass`` passes Xu for "fitc-*"
    "dense-ordinal": (ORDINAL, "ordinal"),
    "fitc-ordinal": (ORDINAL, "ordinal"),
}


def combinations(structures=None):
    for structure, (pairs, kind) in STRUCTURES.items():
        if structures and structure not in structures:
            continue
        for approx, lik in pairs:
            yield structure, kind, approx, lik


def datasets(seed):
    """{"binary": {name: (X, y)}, "multiclass": {name: (X, y)}}."""
    rng = np.random.default_rng(seed)
    crabs = load_crabs()
    pima = load_pima()
    idx = rng.choice(len(pima.y_train), size=100, replace=False)
    Xp, yp = pima.X_train[idx], pima.y_train[idx]
    flip = rng.random(100) < 0.10
    y_flip = np.where(flip, -yp, yp)
    binary = {
        "crabs (separable, n=80)": (crabs.X_train, crabs.y_train),
        "pima (noisy, n=100)": (Xp, yp),
        f"pima, {int(flip.sum())} labels flipped (n=100)": (Xp, y_flip),
    }
    centres = np.array([[0.0, 4.0], [-3.5, -2.0], [3.5, -2.0]])
    codes = np.repeat(np.arange(3), 20)
    Xs = centres[codes] + 0.5 * rng.normal(size=(60, 2))
    glass = load_fgl()
    gi = rng.choice(len(glass.y), size=100, replace=False)
    Xg = (glass.X[gi] - glass.X[gi].mean(0)) / glass.X[gi].std(0)
    yg = glass.y[gi]
    classes = np.unique(yg)
    moved = rng.random(100) < 0.10
    yg_moved = yg.copy()
    for i in np.flatnonzero(moved):
        yg_moved[i] = rng.choice(classes[classes != yg[i]])
    multiclass = {
        "3 clusters (separable, n=60)": (Xs, np.array(["a", "b", "c"])[codes]),
        f"glass ({len(classes)} classes, noisy, n=100)": (Xg, yg),
        f"glass, {int(moved.sum())} labels moved (n=100)": (Xg, yg_moved),
    }
    Xo = rng.normal(size=(80, 2))
    latent = Xo[:, 0] + 0.5 * Xo[:, 1]
    yo = np.digitize(latent + 0.3 * rng.normal(size=80), [-0.6, 0.6])
    shifted = rng.random(80) < 0.10
    yo_moved = np.where(shifted, np.clip(yo + rng.choice([-1, 1], size=80), 0, 2), yo)
    ordinal = {
        "3 ordered bands (separable, n=80)": (Xo, np.digitize(latent, [-0.6, 0.6])),
        "3 ordered bands (noisy, n=80)": (Xo, yo),
        f"3 ordered bands, {int((yo_moved != yo).sum())} labels moved (n=80)": (Xo, yo_moved),
    }
    return {"binary": binary, "multiclass": multiclass, "ordinal": ordinal}


def build(X, y, approx, lik_name, structure="dense"):
    """The ard_classifier model, with the likelihood parameter as a random variable;
    ``structure`` "fitc": the FITC prior with ``N_INDUCING`` k-means inducing inputs."""
    if structure.endswith("multiclass"):
        return build_multiclass(X, y, approx, lik_name, structure)
    d = X.shape[1]
    with pm.Model() as model:
        log_w = pm.Normal("log_w", -3.0, 3.0, shape=d)
        log_v0 = pm.Normal("log_v0", -3.0, 3.0)
        log_v1 = pm.Normal("log_v1", -3.0, 3.0)
        cov = pt.exp(log_v0) * pm.gp.cov.ExpQuad(d, ls=pt.exp(-0.5 * log_w))
        cov = cov + pm.gp.cov.Constant(pt.exp(log_v1))
        if lik_name.startswith("Ordered"):
            cut = pm.Normal("cutpoints", 0.0, 3.0, shape=2, transform=pm.distributions.transforms.ordered,
                            initval=[-0.5, 0.5])
            lik = (L.OrderedProbit(cut, sigma=pm.HalfNormal("sigma", 3.0)) if lik_name == "OrderedProbit"
                   else L.OrderedLogit(cut))
        elif lik_name == "ProbitBias":
            lik = L.ProbitBias(pm.Normal("bias", 0.0, 3.0))
        elif lik_name == "ProbitNoise":
            lik = L.ProbitNoise(pm.HalfNormal("sigma", 3.0))
        elif lik_name == "StepLabelNoise":
            lik = L.StepLabelNoise(pm.Uniform("epsilon", 0.0, 0.5))
        else:
            lik = getattr(L, lik_name)()
        if approx.startswith("meanfield"):
            gp = pymc_gpc.MarginalMeanField(cov_func=cov, likelihood=lik, variant=approx.split("-")[1])
        elif structure.startswith("fitc"):
            cls = pymc_gpc.MarginalEP if approx == "ep" else pymc_gpc.MarginalLaplace
            gp = cls(cov_func=cov, likelihood=lik, approx="FITC")
            gp.marginal_likelihood("y", X=X, y=y, Xu=pm.gp.util.kmeans_inducing_points(N_INDUCING, X, seed=0))
            return model
        else:
            cls = pymc_gpc.MarginalEP if approx == "ep" else pymc_gpc.MarginalLaplace
            gp = cls(cov_func=cov, likelihood=lik)
        gp.marginal_likelihood("y", X=X, y=y)
    return model


def build_multiclass(X, y, approx, lik_name, structure="dense-multiclass"):
    """``ard_classifier``'s multi-class model: one ARD kernel per class (``ard_kernels``)."""
    with pm.Model() as model:
        covs = ard_kernels(X.shape[1], np.unique(y))
        lik = getattr(L, lik_name)()
        cls = pymc_gpc.MarginalEP if approx == "ep" else pymc_gpc.MarginalLaplace
        if structure.startswith("fitc"):  # multi-class FITC (see STRUCTURES)
            gp = cls(cov_func=covs, likelihood=lik, approx="FITC")
            gp.marginal_likelihood("y", X=X, y=y, Xu=pm.gp.util.kmeans_inducing_points(N_INDUCING, X, seed=0))
        else:
            cls(cov_func=covs, likelihood=lik).marginal_likelihood("y", X=X, y=y)
    return model


def fuzz_one(X, y, approx, lik_name, draws, rng, structure="dense"):
    model = build(X, y, approx, lik_name, structure)
    # value and gradient in one function, as NUTS evaluates them (one Op call per draw)
    logp_dlogp = model.compile_fn([model.logp(), model.dlogp()], point_fn=True)
    op = _find_op(model)
    shapes = {k: np.shape(v) for k, v in model.initial_point().items()}
    c = dict.fromkeys(COUNT_KEYS, 0)
    before = _op_counts(op)
    examples = []
    for _ in range(draws):
        point = {k: rng.normal(0.0, 3.0, size=s) for k, s in shapes.items()}
        c["draws"] += 1
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            warnings.simplefilter("ignore", ApproximationFailedWarning)
            try:
                v, g = logp_dlogp(point)
                v, g = float(v), np.asarray(g)
            except Exception as err:  # noqa: BLE001 - counting them is the point
                c["exceptions"] += 1
                if len(examples) < 3:
                    examples.append(f"exception {type(err).__name__}: {err} at {point}")
                continue
        c["other_warnings"] += len(caught)
        if np.isnan(v):
            c["nan_value"] += 1
            if len(examples) < 3:
                examples.append(f"NaN value at {point}")
        elif not np.all(np.isfinite(g)):
            c["bad_grad"] += 1
            if len(examples) < 3:
                examples.append(f"non-finite gradient {g} (value {v}) at {point}")
        elif v == -np.inf:
            c["neg_inf"] += 1
        elif np.isfinite(v):
            c["finite"] += 1
        else:
            c["nan_value"] += 1  # +inf: as bad as NaN for a sampler
            examples.append(f"value {v} at {point}")
    after = _op_counts(op)
    for key in ("not_converged", "failed", "retries", "evaluations"):
        c[key] = after[key] - before[key]
    return c, examples


def _op_counts(op):
    """The Op's counters summed over its copies: a compiled graph may run a copy (the
    logp graph's ``deferring_loo`` twin), which shares the Op's state but counts apart."""
    from pymc_gpc.ops.marginal import _LIVE_OPS

    family = [o for o in list(_LIVE_OPS.values()) if o is not op and getattr(o, "_shared", None) is op._shared]
    counts = dict(op.counts)  # includes the compiled evaluations of the shared state, once
    for o in family:
        for key, value in o._counts.items():
            counts[key] += value
    return counts


def _find_op(model):
    """The ApproxMarginalOp shared by the model's compiled functions."""
    from pytensor.graph.traversal import ancestors

    for var in ancestors(model.potentials):
        if var.owner is not None and isinstance(var.owner.op, ApproxMarginalOp):
            return var.owner.op
    raise RuntimeError("no ApproxMarginalOp in the model")


def _table(rows, all_examples, total, command, partial=None):
    """The Markdown table of the fuzz rows (``partial``: a note while the run goes on)."""
    lines = [
        "# Fuzz: log-probability and gradient at extreme hyperparameters",
        "",
        f"`{command}`; wall time {total / 60:.1f} min (1 BLAS thread, machine shared)"
        + (f"; **partial**: {partial}" if partial else "") + ".",
        "",
        "Every unconstrained parameter ~ N(0, 3^2) (lengthscales, amplitudes and bias from about",
        "1e-4 to 1e4; sigma and epsilon on their log / interval-logit scale). One draw = one",
        "call of `model.compile_fn([model.logp(), model.dlogp()])` (one Op evaluation; Op",
        "evaluations are counted in `evals`). `-inf` = value -inf with a finite gradient (status 2, NUTS rejects);",
        "`not conv.` / `failed` / `retries` are per Op evaluation. Structures: `dense` and `fitc`",
        f"({N_INDUCING} k-means inducing inputs) binary priors; `dense-multiclass`: one ARD kernel per",
        "class (`kernels.ard_kernels`), softmax Laplace and nested EP. Per-row seconds include",
        "compilation.",
        "",
        "| structure | approx | likelihood | data | draws | finite | -inf | NaN value | non-finite grad | exceptions | evals | not conv. | failed | retries | other warnings | s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    totals = dict.fromkeys((*COUNT_KEYS, "evaluations"), 0)
    for structure, approx, lik_name, dname, c in rows:
        for key in totals:
            totals[key] += c[key]
        lines.append(
            f"| {structure} | {approx} | {lik_name} | {dname} | {c['draws']} | {c['finite']} | {c['neg_inf']} | "
            f"{c['nan_value']} | {c['bad_grad']} | {c['exceptions']} | {c['evaluations']} | "
            f"{c['not_converged']} | {c['failed']} | {c['retries']} | {c['other_warnings']} | {c['seconds']:.0f} |"
        )
    t = totals
    lines.append(
        f"| **all** | | | | {t['draws']} | {t['finite']} | {t['neg_inf']} | {t['nan_value']} | "
        f"{t['bad_grad']} | {t['exceptions']} | {t['evaluations']} | {t['not_converged']} | "
        f"{t['failed']} | {t['retries']} | {t['other_warnings']} | {total:.0f} |"
    )
    if all_examples:
        lines += ["", "## Examples of bad draws", ""] + [f"- {e}" for e in all_examples[:30]]
    return "\n".join(lines) + "\n", totals


def _header():
    """The provenance header of ``benchmarks/_provenance.py`` (as every results file has)."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks"))
    from _provenance import header

    return header()


# ---------------------------------------------------------------------------------------
# Invariants (issue 58): numbers that cannot be wrong, engine level, numba and JAX
# ---------------------------------------------------------------------------------------

INVARIANT_CELLS = [(lik, a) for lik in (*LIKELIHOODS, "OrderedProbit", "OrderedLogit") for a in ("ep", "laplace")
                   if not (lik == "StepLabelNoise" and a == "laplace")]
# (structure, likelihood, approximation): the dense and the FITC prior (8 inducing inputs:
# the first distinct inputs) and the HSGP prior (a 6 x 6 Laplacian basis), all served by the
# numba and the JAX engines (new structures go last: a cell's stream is seeded by its index)
INVARIANT_STRUCTURE_CELLS = [(st, lik, a) for st in ("dense", "fitc", "hsgp") for lik, a in INVARIANT_CELLS]
N_INVARIANT_INDUCING = 8
# the HSGP prior's basis: m per dimension and the box factor c (``structures.hsgp.LaplacianBasis``)
INVARIANT_HSGP_M, INVARIANT_HSGP_C = (6, 6), 1.5
# several classes: (structure, approximation), the likelihood each serves (Softmax, MultinomialProbit)
MULTICLASS_INVARIANT_CELLS = [(st, a) for st in ("dense-multiclass", "fitc-multiclass", "hsgp-multiclass")
                              for a in ("laplace", "ep")]
MULTICLASS_LIKELIHOOD = {"laplace": "Softmax", "ep": "MultinomialProbit"}
# PyTensor's Python VM (the Op's ``perform``) against the numba linker: binary EP, dense
PYTHON_VM_CELLS = LIKELIHOODS
PYTHON_VM_KEYS = ("draws", "finite", "vm_finite", "above_0", "disagree", "one_inf")
INVARIANT_KEYS = ("draws", "finite", "neg_inf", "above_0", "jax_finite", "jax_neg_inf", "jax_above_0",
                  "disagree", "one_inf", "disagree_beyond", "one_inf_beyond")
# The rounding test of a disagreement (``rounding_spread``): numba at K times (1 + 1e-16 E),
# E symmetric standard normal, this many times.
N_ROUNDING_PERTURBATIONS = 4


def conflicting_duplicates(ordinal, seed=0):
    """The issue's data: 24 inputs each given twice, 8 of the pairs with opposite labels
    (ordinal: the second copy one band away)."""
    rng = np.random.default_rng(seed)
    X0 = rng.normal(size=(24, 2))
    latent = X0[:, 0] + 0.3 * rng.normal(size=24)
    y0 = np.digitize(latent, [-0.5, 0.5]).astype(float) if ordinal else np.where(latent > 0, 1.0, -1.0)
    y1 = y0.copy()
    y1[:8] = np.where(y0[:8] == 0, 1.0, y0[:8] - 1.0) if ordinal else -y0[:8]
    return np.vstack([X0, X0]), np.concatenate([y0, y1])


def _invariant_kernel(A, B, z):
    """exp(z2) exp(-|a - b|^2_ls / 2) with lengthscales exp(z0), exp(z1)."""
    D = (((A[:, None, :] - B[None, :, :]) / np.exp(z[:2])) ** 2).sum(-1)
    return np.exp(z[2]) * np.exp(-0.5 * D)


def invariant_basis(X):
    """The HSGP cells' basis at the inputs X: ``INVARIANT_HSGP_M`` Laplacian eigenfunctions per
    dimension on the box of factor ``INVARIANT_HSGP_C`` (``pm.gp.HSGP``'s m and c)."""
    from pymc_gpc.structures.hsgp import LaplacianBasis

    return LaplacianBasis(X, list(INVARIANT_HSGP_M), c=INVARIANT_HSGP_C)


def invariant_spectral_variances(omega, z):
    """S_j = s(omega_j) for ``_invariant_kernel``'s ExpQuad kernel (lengthscales exp(z0), exp(z1),
    amplitude exp(z2)): exp(z2) (2 pi) l0 l1 exp(-|omega_j l|^2 / 2) (R&W eq. 4.21, as
    ``pm.gp.cov.ExpQuad.power_spectral_density``); underflows to 0 at extreme lengthscales."""
    ls = np.exp(z[:2])
    return np.exp(z[2]) * 2.0 * np.pi * np.prod(ls) * np.exp(-0.5 * np.sum((omega * ls) ** 2, axis=1))


class HSGPPoint(tuple):
    """An HSGP cell's prior at one draw: (S, the basis operator at X, X), with ``perturbed``
    giving the copy whose S is multiplied by 1 + 1e-16 e (``rounding_spread``)."""

    def perturbed(self, rng):
        S, operator, X = self
        return HSGPPoint((S * (1.0 + 1e-16 * rng.normal(size=S.shape)), operator, X))


def invariant_point(lik_name, X, rng, structure="dense", basis=None):
    """(K, likelihood, params) at log-hyperparameters drawn from N(0, 3^2); K is the dense
    matrix, for ``structure="fitc"`` the triple (K_uu, K_uf, diag K_ff) with the first
    ``N_INVARIANT_INDUCING`` distinct inputs as inducing inputs, for ``structure="hsgp"`` an
    ``HSGPPoint`` on ``basis`` (``invariant_basis(X)`` if not given): the ExpQuad kernel's
    spectral variances (``invariant_spectral_variances``)."""
    z = rng.normal(0.0, 3.0, size=5)
    if structure == "hsgp":
        basis = invariant_basis(X) if basis is None else basis
        K = HSGPPoint((invariant_spectral_variances(basis.omega, z), basis.at(X), X))
    elif structure == "fitc":
        Xu = X[:N_INVARIANT_INDUCING]
        K = (_invariant_kernel(Xu, Xu, z) + 1e-8 * np.exp(z[2]) * np.eye(Xu.shape[0]), _invariant_kernel(Xu, X, z),
             np.full(X.shape[0], np.exp(z[2])))
    else:
        K = _invariant_kernel(X, X, z) + 1e-8 * np.eye(X.shape[0])
    lik = {"Probit": lambda: L.Probit(), "ProbitBias": lambda: L.ProbitBias(z[3]),
           "ProbitNoise": lambda: L.ProbitNoise(np.exp(z[3])),
           "StepLabelNoise": lambda: L.StepLabelNoise(0.5 / (1.0 + np.exp(-z[3]))), "Logistic": lambda: L.Logistic(),
           "OrderedProbit": lambda: pymc_gpc.OrderedProbit(np.sort(z[3:5]), sigma=1.0),
           "OrderedLogit": lambda: pymc_gpc.OrderedLogit(np.sort(z[3:5]))}[lik_name]()
    return K, lik, lik.resolve_params(None)


def _numba_solve(approx, K, y, lik, th, structure="dense"):
    """The numba path's result as the Ops get it: ``solve_with_retries`` with the structure's
    retry schedule (FITC: ``ops.sparse``'s); None where it raises."""
    from pymc_gpc.approximations import registry
    from pymc_gpc.approximations.solve import solve_with_retries
    from pymc_gpc.structures import DensePrior, FITCPrior
    from pymc_gpc.structures.hsgp import HSGPPrior

    opts = dict(registry.APPROXIMATIONS[approx].engine_defaults)
    prior = {"fitc": lambda: FITCPrior(*K), "hsgp": lambda: HSGPPrior(K[1], K[0])}.get(structure, lambda: DensePrior(K))()
    retries = registry.get(approx).retry_schedule(opts, structure)
    try:
        return solve_with_retries(approx, prior, y, lik, th, None, opts, retry_options=retries)[0]
    except (ValueError, ArithmeticError, np.linalg.LinAlgError):
        return None


def _numba_log_z(approx, K, y, lik, th, structure="dense"):
    """The numba path's log evidence (``_numba_solve``); -inf where it raises."""
    result = _numba_solve(approx, K, y, lik, th, structure)
    return -np.inf if result is None else result.log_z


def rounding_spread(approx, K, y, lik, th, structure="dense", seed=0):
    """numba's log evidence at ``N_ROUNDING_PERTURBATIONS`` copies of K with every entry
    multiplied by 1 + 1e-16 e (e standard normal, symmetric in K and K_uu): a change of K
    at the level of its own rounding. Where these values spread by more than the two
    backends differ, or differ in finiteness, the value is not determined in float64 beyond
    that spread, whatever the algorithm (an ill-conditioned K~^-1 + S on duplicated inputs,
    or EP iterates that wander for hundreds of sweeps before a fixed point catches them)."""
    rng = np.random.default_rng(seed)

    def perturbed(A, symmetric):
        E = rng.normal(size=A.shape)
        return A * (1.0 + 1e-16 * (0.5 * (E + E.T) if symmetric else E))

    values = []
    for _ in range(N_ROUNDING_PERTURBATIONS):
        if structure == "hsgp":
            Kp = K.perturbed(rng)
        elif structure == "fitc":
            Kp = (perturbed(K[0], True), perturbed(K[1], False), perturbed(K[2], False))
        else:
            Kp = perturbed(K, True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            values.append(_numba_log_z(approx, Kp, y, lik, th, structure))
    return np.array(values)


def beyond_rounding(a, b, spread_values):
    """Whether numba's ``a`` and JAX's ``b`` differ by more than rounding of K moves ``a``
    (``rounding_spread``'s values): in finiteness, where no perturbed value shares ``b``'s;
    in value, where |a - b| exceeds the largest |a_k - a| (and every a_k is finite)."""
    if np.isfinite(a) != np.isfinite(b):
        return bool(not np.any(np.isfinite(spread_values) == np.isfinite(b)))
    if not np.all(np.isfinite(spread_values)):
        return False
    return bool(abs(a - b) > np.max(np.abs(spread_values - a)))


def _jax_log_z_fn(approx, lik_name, structure, basis=None):
    """The JAX engine's (K..., th, y) -> log evidence, jit-compiled (dense, FITC, or HSGP on
    ``basis``: ``backends.jax.hsgp.marginal_fn``, called with (S, X, th, y))."""
    import jax

    from pymc_gpc.backends.jax import engine, fitc, hsgp

    kind = (getattr(L, lik_name, None) or getattr(pymc_gpc, lik_name)).kind
    if structure == "hsgp":
        fn = jax.jit(hsgp.marginal_fn(approx, kind, basis))
    else:
        fn = jax.jit((fitc if structure == "fitc" else engine).marginal_fn(approx, kind))

    def log_z(K, th, y):
        args = (K[0], K[2]) if structure == "hsgp" else K if structure == "fitc" else (K,)
        return float(fn(*args, np.asarray(th, dtype=float), y)[0])

    return log_z


def invariant_cell(lik_name, approx, draws, rng, backends=("numba", "jax"), structure="dense"):
    """Counts of one (likelihood, approximation) cell on the dense or FITC prior, both
    backends; ``max_diff``: the largest |numba - JAX| where both are finite;
    ``disagree_beyond`` / ``one_inf_beyond``: the disagreements and one-sided -inf that
    ``beyond_rounding`` finds larger than the value's own sensitivity to rounding in K;
    ``bad_draws``: the indices of the draws that disagree or are one-sided. HSGP adds the
    predictive rows of the numba posterior (``hsgp_predictive_rows``): ``row_err``, the worst
    |row sum - 1|, and ``pred_bad``, the draws with a finite evidence and a non-finite or
    negative predictive probability."""
    c = dict.fromkeys(INVARIANT_KEYS, 0)
    c["max_diff"] = 0.0
    c["bad_draws"] = []
    X, y = conflicting_duplicates(lik_name.startswith("Ordered"))
    basis = invariant_basis(X) if structure == "hsgp" else None
    if basis is not None:
        c["row_err"], c["pred_bad"] = 0.0, 0
        star = basis.at(np.random.default_rng(0).uniform(X.min(0), X.max(0), size=(N_HSGP_PREDICTIVE, X.shape[1])))
    jfn = _jax_log_z_fn(approx, lik_name, structure, basis) if "jax" in backends else None
    for draw in range(draws):
        K, lik, th = invariant_point(lik_name, X, rng, structure, basis)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = _numba_solve(approx, K, y, lik, th, structure)
            a = -np.inf if result is None else result.log_z
            if basis is not None and np.isfinite(a):
                try:
                    rows = hsgp_predictive_rows(result, lik, th, star)
                except ArithmeticError:  # a likelihood's predict at a zero latent variance
                    rows = np.full((1, 2), np.nan)
                c["pred_bad"] += int(not (np.all(np.isfinite(rows)) and np.all(rows >= 0.0)))
                if np.all(np.isfinite(rows)):
                    c["row_err"] = max(c["row_err"], float(np.max(np.abs(rows.sum(axis=1) - 1.0))))
        c["draws"] += 1
        c["finite"] += bool(np.isfinite(a))
        c["neg_inf"] += a == -np.inf
        c["above_0"] += bool(a > 0.0)
        if jfn is None:
            continue
        b = jfn(K, th, y)
        c["jax_finite"] += bool(np.isfinite(b))
        c["jax_neg_inf"] += b == -np.inf
        c["jax_above_0"] += bool(b > 0.0)
        disagree = bool(np.isfinite(a) and np.isfinite(b) and abs(a - b) > 1e-8 * (1.0 + abs(a)))
        one_inf = bool(np.isfinite(a) != np.isfinite(b))
        if np.isfinite(a) and np.isfinite(b):
            c["max_diff"] = max(c["max_diff"], abs(a - b))
        if disagree or one_inf:
            c["bad_draws"].append(draw)
            beyond = beyond_rounding(a, b, rounding_spread(approx, K, y, lik, th, structure))
            c["disagree"] += disagree
            c["one_inf"] += one_inf
            c["disagree_beyond"] += int(disagree and beyond)
            c["one_inf_beyond"] += int(one_inf and beyond)
    return c


N_HSGP_PREDICTIVE = 12


def hsgp_predictive_rows(result, lik, th, star):
    """The predictive class probabilities (n*, classes) of an HSGP result at the basis operator
    ``star`` (``HSGPPosterior.predict``, then the likelihood's ``predict``; binary: [1 - p, p])."""
    mean, var = result.posterior.predict(result.a, star)
    p = np.asarray(lik.predict(mean, var, th))
    return np.column_stack([1.0 - p, p]) if p.ndim == 1 else p


def _jax_multiclass_fn(structure, approx, basis=None):
    """The JAX engine's multi-class evidence function for ``structure``, jit-compiled, or None
    where the JAX backend does not serve it (``registry.BACKEND_STRUCTURES``)."""
    from pymc_gpc.approximations import registry

    if structure not in registry.BACKEND_STRUCTURES["jax"]:
        return None
    import jax

    from pymc_gpc.backends.jax import multiclass, multiclass_fitc

    if structure.startswith("hsgp"):
        from pymc_gpc.backends.jax import multiclass_hsgp

        return jax.jit(multiclass_hsgp.marginal_fn(approx, basis))
    return jax.jit((multiclass_fitc if structure.startswith("fitc") else multiclass).marginal_fn(approx))


def multiclass_invariant_cell(structure, approx, draws, rng, backends=("numba", "jax")):
    """``invariant_cell`` for several classes (``approx`` "laplace": Softmax,
    "ep": MultinomialProbit), dense, FITC or HSGP (``structure`` "dense-multiclass" /
    "fitc-multiclass" / "hsgp-multiclass": ``invariant_basis`` shared by the classes): three
    classes, one kernel per class with its own N(0, 3^2) log-hyperparameters, the issue's data
    with the second copy of 8 pairs moved a class on. JAX is compared where its engine serves
    the structure (``_jax_multiclass_fn``); ``jax_run`` says whether it did."""
    from pymc_gpc.approximations import registry
    from pymc_gpc.approximations.solve import solve_with_retries
    from pymc_gpc.structures import MulticlassFITCPrior
    from pymc_gpc.structures.multiclass_hsgp import MulticlassHSGPPrior

    c = dict.fromkeys(INVARIANT_KEYS, 0)
    c["max_diff"] = 0.0
    X, y = conflicting_duplicates(True)  # bands 0, 1, 2 as classes
    fitc, hsgp = structure.startswith("fitc"), structure.startswith("hsgp")
    lik = L.Softmax() if approx == "laplace" else L.MultinomialProbit()
    opts = dict(registry.APPROXIMATIONS[approx].engine_defaults)
    retries = registry.get(approx).retry_schedule(opts, structure)
    basis = invariant_basis(X) if hsgp else None
    jfn = _jax_multiclass_fn(structure, approx, basis) if "jax" in backends else None
    c["jax_run"] = jfn is not None
    Xu = X[:N_INVARIANT_INDUCING]
    for _ in range(draws):
        zs = rng.normal(0.0, 3.0, size=(3, 5))
        if hsgp:
            K = (np.stack([invariant_spectral_variances(basis.omega, z) for z in zs]), X)
            prior = MulticlassHSGPPrior(basis(X), K[0])
        elif fitc:
            K = (np.stack([_invariant_kernel(Xu, Xu, z) + 1e-8 * np.exp(z[2]) * np.eye(len(Xu)) for z in zs]),
                 np.stack([_invariant_kernel(Xu, X, z) for z in zs]), np.stack([np.full(len(X), np.exp(z[2])) for z in zs]))
            prior = MulticlassFITCPrior(*K)
        else:
            K = (np.stack([_invariant_kernel(X, X, z) + 1e-8 * np.eye(len(X)) for z in zs]),)
            prior = K[0]  # the dense solvers take the (c, n, n) stack
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                a = solve_with_retries(approx, prior, y, lik, np.zeros(0), None, opts, retry_options=retries)[0].log_z
            except (ValueError, ArithmeticError, np.linalg.LinAlgError):
                a = -np.inf
        c["draws"] += 1
        c["finite"] += bool(np.isfinite(a))
        c["neg_inf"] += a == -np.inf
        c["above_0"] += bool(a > 0.0)
        if jfn is None:
            continue
        b = float(jfn(*K, np.zeros(0), y)[0])
        c["jax_finite"] += bool(np.isfinite(b))
        c["jax_neg_inf"] += b == -np.inf
        c["jax_above_0"] += bool(b > 0.0)
        if np.isfinite(a) and np.isfinite(b):
            c["disagree"] += bool(abs(a - b) > 1e-8 * (1.0 + abs(a)))
            c["max_diff"] = max(c["max_diff"], abs(a - b))
        elif np.isfinite(a) or np.isfinite(b):
            c["one_inf"] += 1
    # no rounding test here: every disagreement counts as beyond rounding
    c["disagree_beyond"], c["one_inf_beyond"] = c["disagree"], c["one_inf"]
    return c


def python_vm_cell(lik_name, draws, rng):
    """The evidence Op of a PyMC model (``MarginalEP``, dense prior, the issue's data) compiled
    twice: PyTensor's Python VM (``pymc_gpc.backends.python_vm.PYTHON_VM_MODE``, the Op's ``perform``)
    and the default numba linker. Counts: log evidence above 0 on either, and the two
    disagreeing (1e-8 (1 + |numba|)) or exactly one finite."""
    from pymc_gpc.backends.python_vm import PYTHON_VM_MODE

    X, y = conflicting_duplicates(lik_name.startswith("Ordered"))
    with pm.Model() as model:
        z = pm.Flat("z", shape=5)
        cov = pt.exp(z[2]) * pm.gp.cov.ExpQuad(2, ls=pt.exp(z[:2]))
        lik = {"Probit": lambda: L.Probit(), "ProbitBias": lambda: L.ProbitBias(z[3]),
               "ProbitNoise": lambda: L.ProbitNoise(pt.exp(z[3])),
               "StepLabelNoise": lambda: L.StepLabelNoise(0.5 * pm.math.sigmoid(z[3])),
               "Logistic": lambda: L.Logistic()}[lik_name]()
        pymc_gpc.MarginalEP(cov_func=cov, likelihood=lik).marginal_likelihood("y", X=X, y=y)
    logp = model.logp()  # the potential: z is Flat
    vm, nb = (model.compile_fn(logp, inputs=model.value_vars, mode=mode, point_fn=False) for mode in (PYTHON_VM_MODE, None))
    c = dict.fromkeys(("draws", "finite", "vm_finite", "above_0", "disagree", "one_inf"), 0)
    c["bad_draws"] = []
    for draw in range(draws):
        point = rng.normal(0.0, 3.0, size=5)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            a, b = float(nb(point)), float(vm(point))
        c["draws"] += 1
        c["finite"] += bool(np.isfinite(a))
        c["vm_finite"] += bool(np.isfinite(b))
        c["above_0"] += bool(a > 0.0) + bool(b > 0.0)
        if np.isfinite(a) and np.isfinite(b):
            c["disagree"] += bool(abs(a - b) > 1e-8 * (1.0 + abs(a)))
        elif np.isfinite(a) or np.isfinite(b):
            c["one_inf"] += 1
        if not (a == b or abs(a - b) <= 1e-8 * (1.0 + abs(a))):
            c["bad_draws"].append(draw)
    return c


def predictive_check(rng, n=200, n_quad=12):
    """Per likelihood: worst |row sum - 1| over predictions at mu ~ N(0, 10^2),
    s2 = 10^U(-4, 6), and worst |p - quadrature| at ``n_quad`` of those points (scipy's
    adaptive quad in logs, split at the cutpoints and the mean)."""
    from scipy import integrate

    out = {}
    mu, s2 = rng.normal(0.0, 10.0, n), 10.0 ** rng.uniform(-4.0, 6.0, n)
    for name in (*LIKELIHOODS, "OrderedProbit", "OrderedLogit"):
        _, lik, th = invariant_point(name, np.zeros((1, 2)), rng)
        p = np.asarray(lik.predict(mu, s2))
        rows = np.column_stack([1.0 - p, p]) if p.ndim == 1 else p
        worst_q = 0.0
        for i in range(n_quad):
            s = np.sqrt(s2[i])
            lo, hi = mu[i] - 12 * s, mu[i] + 12 * s
            cuts = th[: th.size - (name == "OrderedProbit")] if name.startswith("Ordered") else np.zeros(1)
            br = sorted({lo, hi, mu[i], *[c + d for c in cuts for d in (-60, -10, 0, 10, 60) if lo < c + d < hi]})
            br = [b for b in br if lo <= b <= hi]
            for k in range(rows.shape[1]):
                yk = float(k) if p.ndim > 1 else (2.0 * k - 1.0)

                def g(f, yk=yk):
                    ll = lik.log_lik(np.array([yk]), np.array([f])).lp[0]
                    return np.exp(ll - 0.5 * (f - mu[i]) ** 2 / s2[i]) / np.sqrt(2 * np.pi * s2[i])

                if name == "StepLabelNoise":
                    eps = th[0]
                    ref = eps + (1 - 2 * eps) * (0.5 * math.erfc(-yk * mu[i] / (s * math.sqrt(2))))
                else:
                    ref = sum(integrate.quad(g, a, b, epsabs=1e-14, epsrel=1e-11, limit=400)[0]
                              for a, b in zip(br[:-1], br[1:]))
                worst_q = max(worst_q, abs(rows[i, k] - ref))
        out[name] = (float(np.max(np.abs(rows.sum(axis=1) - 1.0))), worst_q)
    return out


INVARIANTS_TITLE = "# Invariants: log evidence <= 0, rows summing to 1, JAX equal to numba, quadrature"


def invariants_table(rows, vm_rows, predictive, draws, seconds):
    """The invariants section of ``fuzz.md`` (Markdown)."""
    lines = [INVARIANTS_TITLE, "",
             f"`python scripts/fuzz.py --invariants --draws {draws}`; wall time {seconds / 60:.1f} min. Dense prior,",
             f"FITC ({N_INVARIANT_INDUCING} inducing inputs: the first distinct inputs) and HSGP (a",
             f"{' x '.join(map(str, INVARIANT_HSGP_M))} Laplacian basis, c = {INVARIANT_HSGP_C}, S the ExpQuad kernel's spectral density,",
             "which underflows to 0 at extreme lengthscales), the issue's data (24 inputs each",
             "given twice, 8 pairs with conflicting labels; ordinal and several classes: three bands, the second copy",
             "one band apart; one kernel per class), every log-hyperparameter and",
             "likelihood parameter ~ N(0, 3^2) on its unconstrained scale. Engine level: the numba path as the Ops",
             "call it (`solve_with_retries`, the structure's retry schedule) against the JAX engine",
             "(`backends/jax/engine.py`, `fitc.py`, `hsgp.py`, the multi-class modules; `n/a` where it does not serve",
             "the structure). `> 0`: log evidence above 0 (impossible for discrete labels);",
             "`disagree`: both finite and |numba - JAX| > 1e-8 (1 + |numba|); `one -inf`: one backend finite, the",
             "other -inf (status 2); `beyond rounding`: those of them (disagree / one -inf) that numba's own value",
             f"does not reproduce at {N_ROUNDING_PERTURBATIONS} copies of K (HSGP: of S) with every entry times 1 + 1e-16 e, e ~ N(0, 1)",
             "(`rounding_spread`: |numba - JAX| above the copies' largest |change|, or finiteness that no copy",
             "shares with JAX); `max |diff|`: the largest |numba - JAX| where both are finite; `draws that differ`:",
             "their indices in the cell's stream (seed, cell index).",
             "The step likelihood's EP, not log-concave, takes the converged run with the highest evidence among",
             "all the schedule's cold runs, and -inf where none converged (`solve.highest_converged`), in both.", "",
             "| structure | likelihood | approx | draws | numba finite | numba -inf | numba > 0 | JAX finite | JAX -inf "
             "| JAX > 0 | disagree | one -inf | beyond rounding | max abs diff | draws that differ |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for structure, lik_name, approx, c in rows:
        if c.get("jax_run", True):
            jax_cells = ([str(c[k]) for k in INVARIANT_KEYS[4:-2]]
                         + [f"{c['disagree_beyond']} / {c['one_inf_beyond']}", f"{c['max_diff']:.1e}"])
        else:  # the JAX engine does not serve this structure
            jax_cells = ["n/a"] * 7
        lines.append(f"| {structure} | {lik_name} | {approx} | "
                     + " | ".join([str(c[k]) for k in INVARIANT_KEYS[:4]] + jax_cells) + " | "
                     + (", ".join(map(str, c.get("bad_draws", []))) or "-") + " |")
    hsgp_rows = [(lik_name, approx, c) for structure, lik_name, approx, c in rows if "row_err" in c]
    if hsgp_rows:
        lines += ["", f"HSGP cells: the numba posterior's predictive at {N_HSGP_PREDICTIVE} new inputs in the inputs' box",
                  "(`HSGPPosterior.predict`, then the likelihood's `predict`), at every draw with a finite evidence:",
                  "`bad` counts draws with a non-finite or negative probability or an ArithmeticError.", "",
                  "| likelihood | approx | finite draws | worst row sum error | bad |", "|---|---|---|---|---|"]
        lines += [f"| {lik_name} | {approx} | {c['finite']} | {c['row_err']:.1e} | {c['pred_bad']} |"
                  for lik_name, approx, c in hsgp_rows]
    lines += ["", "PyTensor's Python VM (`backends.python_vm.PYTHON_VM_MODE`: the evidence Op's `perform`) against the default",
              "numba linker, on a PyMC model (`MarginalEP`, dense prior, the same data and draws of the kernel's three",
              "log-hyperparameters and the likelihood parameter); `> 0` counts both compilations.", "",
              "| likelihood | draws | numba finite | Python VM finite | > 0 | disagree | one -inf | draws that differ |",
              "|---|---|---|---|---|---|---|---|"]
    lines += [f"| {lik_name} | " + " | ".join(str(c[k]) for k in PYTHON_VM_KEYS) + " | "
              + (", ".join(map(str, c.get("bad_draws", []))) or "-") + " |" for lik_name, c in vm_rows]
    lines += ["", "Predictive probabilities at 200 points, mu ~ N(0, 10^2), latent variance 10^U(-4, 6): the",
              "worst |row sum - 1| there, and the worst |p - quadrature| at 12 of them (scipy's adaptive",
              "quad of p(y | f) N(f; mu, s2), split at the cutpoints; the step likelihood in closed form).", "",
              "| likelihood | worst row sum error | worst error against quadrature |", "|---|---|---|"]
    lines += [f"| {k} | {v[0]:.1e} | {v[1]:.1e} |" for k, v in predictive.items()]
    return "\n".join(lines) + "\n"


def invariants_main(args):
    """Run the invariant fuzz; with --out, put its section (own provenance) in place of the
    file's previous invariants section, after the rest of the file."""
    t0 = time.time()
    provenance = _header()
    rows, vm_rows = [], []
    for j, (structure, lik_name, approx) in enumerate(INVARIANT_STRUCTURE_CELLS):
        c = invariant_cell(lik_name, approx, args.draws, np.random.default_rng([args.seed, j]), structure=structure)
        rows.append((structure, lik_name, approx, c))
        print(structure, lik_name, approx, c, flush=True)
    for j, (structure, approx) in enumerate(MULTICLASS_INVARIANT_CELLS):
        c = multiclass_invariant_cell(structure, approx, args.draws, np.random.default_rng([args.seed, 500 + j]))
        rows.append((structure, MULTICLASS_LIKELIHOOD[approx], approx, c))
        print(structure, approx, c, flush=True)
    for j, lik_name in enumerate(PYTHON_VM_CELLS):
        c = python_vm_cell(lik_name, args.draws, np.random.default_rng([args.seed, 1000 + j]))
        vm_rows.append((lik_name, c))
        print("python-vm", lik_name, c, flush=True)
    predictive = predictive_check(np.random.default_rng(args.seed))
    text = invariants_table(rows, vm_rows, predictive, args.draws, time.time() - t0)
    print(text)
    if args.out:
        old = open(args.out).read() if os.path.exists(args.out) else ""
        head = old.split("\n" + INVARIANTS_TITLE)[0].rstrip("\n")
        body = provenance.replace("<!-- provenance: written by benchmarks/_provenance.py -->\n", "")
        with open(args.out, "w") as fh:
            fh.write((head + "\n\n" if head else "") + text.replace("\n\n", "\n\n" + body, 1))
    bad = sum(c["above_0"] + c["jax_above_0"] + c.get("pred_bad", 0) + (c.get("row_err", 0.0) > 1e-9) for *_, c in rows)
    bad += sum(c["above_0"] for _, c in vm_rows)
    return 1 if bad or any(v[0] > 1e-9 for v in predictive.values()) else 0


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--invariants", action="store_true",
                   help="the invariant fuzz (log evidence <= 0, rows summing to 1, JAX = numba, quadrature)")
    p.add_argument("--draws", type=int, default=1200, help="draws per (combination, data set)")
    p.add_argument("--seed", type=int, default=20261122)
    p.add_argument("--out", default=None, help="markdown file for the table")
    p.add_argument("--only", default=None, help="run only combinations whose 'structure/approx/lik' contains this")
    p.add_argument("--structures", nargs="*", choices=sorted(STRUCTURES), default=None,
                   help="run only these structures (default: all)")
    p.add_argument("--multiclass-draws", type=int, default=None,
                   help="draws per multi-class cell (default: --draws; nested EP costs more per draw)")
    args = p.parse_args(argv)
    if args.invariants:
        return invariants_main(args)
    provenance = _header()  # now: the commit whose code this process imported
    data = datasets(args.seed)
    rows, all_examples = [], []
    t_start = time.time()
    command = (f"python scripts/fuzz.py --draws {args.draws} --seed {args.seed}"
               + (f" --multiclass-draws {args.multiclass_draws}" if args.multiclass_draws else "")
               + (f" --structures {' '.join(args.structures)}" if args.structures else "")
               + (f" --only {args.only}" if args.only else ""))
    cells = [(j, comb) for j, comb in enumerate(combinations(args.structures))
             if not args.only or args.only in "/".join((comb[0], comb[2], comb[3]))]
    n_cells = sum(len(data[comb[1]]) for _, comb in cells)
    for j, (structure, kind, approx, lik_name) in cells:
        draws = args.multiclass_draws if kind == "multiclass" and args.multiclass_draws else args.draws
        for k, (dname, (X, y)) in enumerate(data[kind].items()):
            rng = np.random.default_rng([args.seed, j, k])
            t0 = time.time()
            with warnings.catch_warnings():  # rare classes in the subsets: a build-time warning, not a fuzz finding
                warnings.simplefilter("ignore", pymc_gpc.validation.SingleMemberClassWarning)
                c, ex = fuzz_one(X, y, approx, lik_name, draws, rng, structure)
            c["seconds"] = time.time() - t0
            rows.append((structure, approx, lik_name, dname, c))
            all_examples += [f"{structure}/{approx}/{lik_name}/{dname}: {e}" for e in ex]
            print(f"{structure:16s} {approx:8s} {lik_name:17s} {dname:32s} " + " ".join(f"{key}={c[key]}" for key in
                  (*COUNT_KEYS, "evaluations")) + f" {c['seconds']:.0f}s", flush=True)
            if args.out and len(rows) < n_cells:  # a partial table survives an interrupted run
                text, _ = _table(rows, all_examples, time.time() - t_start, command,
                                 partial=f"{len(rows)} of {n_cells} cells so far")
                with open(args.out, "w") as fh:
                    fh.write(provenance + text)
    text, t = _table(rows, all_examples, time.time() - t_start, command)
    print(text)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(provenance + text)
    bad = t["nan_value"] + t["bad_grad"] + t["exceptions"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
