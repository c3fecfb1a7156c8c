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
    python scripts/fuzz.py --draws 100 --structures fitc dense-multiclass
"""

import argparse
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


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--draws", type=int, default=1200, help="draws per (combination, data set)")
    p.add_argument("--seed", type=int, default=20261122)
    p.add_argument("--out", default=None, help="markdown file for the table")
    p.add_argument("--only", default=None, help="run only combinations whose 'structure/approx/lik' contains this")
    p.add_argument("--structures", nargs="*", choices=sorted(STRUCTURES), default=None,
                   help="run only these structures (default: all)")
    p.add_argument("--multiclass-draws", type=int, default=None,
                   help="draws per multi-class cell (default: --draws; nested EP costs more per draw)")
    args = p.parse_args(argv)
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
