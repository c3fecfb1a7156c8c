"""``pymc-gpc``: fit a GP classifier to a CSV file (or the bundled Pima data) and report.

    pymc-gpc                                  # bundled Pima, EP + NUTS
    pymc-gpc train.csv --target label --test test.csv --approximation laplace
    pymc-gpc --data crabs --method map       # or type2 / em-ep: point estimates
    pymc-gpc sites.csv --target present --hsgp 30,1.5   # 2-D coordinates: HSGP prior

Writes to ``--out`` (default ``pymc-gpc-output/``, which must be empty or missing unless
``--overwrite`` is given): ``report.md`` (metrics and diagnostics), ``summary.csv``
(ArviZ summary of the hyperparameters), ``predictions.csv`` (for each test row the
probability of each class, named by the target's own labels) and, with matplotlib,
``relevance.png`` (each input's log inverse squared lengthscale: its posterior, or the
estimate), ``trace.png`` (NUTS) or ``history.png`` (point estimates: log evidence per
iteration). The files are written together at the end: a run stopped by Ctrl-C during
NUTS's draws writes them from the draws made so far, says how many in ``report.md``, and
exits with status 130; stopped at any other moment it writes nothing (status 130 too).
"""

import argparse
import csv
import os
import pathlib
import shutil
import signal
import sys
import tempfile
import time
import warnings

import numpy as np

from .. import likelihoods as L
from ..approximations import registry
from ..datasets import Split, load
from ..gp.models import HSGP_MAX_DIMS, has_several_classes
from ..likelihoods.multiclass import MULTICLASS_LIKELIHOODS
from ..likelihoods.ordinal import OrderedLogit, OrderedProbit
from ..validation import SingleMemberClassWarning, as_signed_labels, binary_classes, check_inputs

LIKELIHOODS = {
    "probit": L.Probit,
    "logistic": L.Logistic,
    "probit-bias": L.ProbitBias,
    "probit-noise": L.ProbitNoise,
    "step": L.StepLabelNoise,
}
# --likelihood names of the ordinal likelihoods (with --ordinal; ordered-probit the default);
# those of several classes are the keys of ``likelihoods.MULTICLASS_LIKELIHOODS``
ORDINAL_LIKELIHOODS = {"ordered-probit": OrderedProbit, "ordered-logit": OrderedLogit}


# The files a run writes into --out (``--overwrite`` removes those a new run does not write).
OUTPUT_FILES = ("report.md", "summary.csv", "predictions.csv", "relevance.png", "trace.png", "history.png")
# An interrupted NUTS run with fewer draws per chain than this writes nothing.
MIN_KEPT_DRAWS = 10
# Exit status of a run stopped by Ctrl-C (SIGINT), as shells report it (128 + 2).
INTERRUPTED = 130
# --hsgp M without C: the box factor of approx="HSGP" (``structures.select.HSGPBinary``'s default)
HSGP_DEFAULT_C = 1.5
# Cells a CSV reader takes for a missing value (compared in lower case, stripped).
MISSING = ("", "na", "n/a", "nan", "null", "none", "?", "-")


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """``--help`` shows every option's default, except where there is none (None, off)."""

    def _get_help_string(self, action):
        if action.default is None or action.default is False or action.default is argparse.SUPPRESS:
            return action.help
        return super()._get_help_string(action)


def _parser():
    p = argparse.ArgumentParser(prog="pymc-gpc", description=__doc__.splitlines()[0].replace("``", ""),
                                formatter_class=_HelpFormatter)
    p.add_argument("train", nargs="?", help="training CSV (default: the bundled data set)")
    p.add_argument("--target", help="name of the label column (two classes, or more with --approximation laplace/ep)")
    p.add_argument("--test", help="test CSV with the same columns (the label column is optional)")
    p.add_argument("--data", default="pima", choices=["pima", "crabs", "default"], help="bundled data set when no CSV is given")
    p.add_argument(
        "--method", default="nuts", choices=["nuts", "map", "type2", "elbo", "em-ep"],
        help="NUTS over the hyperparameters, or a point estimate: MAP-II, type-II ML, MAP of SVGP's bound (elbo: "
             "several classes, --approximation laplace, --inducing M) or EM-EP",
    )
    p.add_argument(
        "--approximation", default="ep", choices=["ep", "laplace", "meanfield-ensemble", "meanfield-naive", "adf"],
        help="how the latent function is integrated out (adf has no gradient: use --method em-ep)",
    )
    p.add_argument(
        "--likelihood", default=None,
        choices=sorted(LIKELIHOODS) + sorted(MULTICLASS_LIKELIHOODS) + sorted(ORDINAL_LIKELIHOODS),
        help="two classes: one of the binary likelihoods (default probit); more: softmax (with laplace, the "
             "default there) or multinomial-probit (with ep, the default there)",
    )
    p.add_argument(
        "--ordinal", action="store_true",
        help="the target's classes are ordered (at least 3): ordered-probit (default) or ordered-logit "
             "likelihood with free cutpoints, ep or laplace; numeric labels in numeric order, others need --levels",
    )
    p.add_argument("--levels", help="with --ordinal: the target's labels from lowest to highest, comma-separated")
    p.add_argument(
        "--shared-kernel", action="store_true",
        help="more than two classes: one ARD kernel shared by all classes instead of one per class",
    )
    p.add_argument(
        "--lengthscale-spread", type=float, metavar="TAU",
        help="more than two classes, one kernel per class: the classes' log lengthscales drawn toward a shared "
             "value per input with sd TAU (ard_classifier's lengthscale_spread)",
    )
    p.add_argument(
        "--inducing", type=_inducing_option, default="auto", metavar="M",
        help="FITC prior with M inducing inputs placed by k-means (ep or laplace): O(n M^2) per evaluation, "
             "O(c^2 n M^2) with c > 2 classes; 'auto': dense up to 1,200 training rows, FITC with "
             "2 sqrt(n) inducing inputs (100 to 300) above; 'none': dense whatever n",
    )
    p.add_argument(
        "--hsgp", type=_hsgp_option, default=None, metavar="M,C",
        help="basis-function prior of pm.gp.HSGP instead of --inducing (ep or laplace; two classes or --ordinal): "
             "M basis functions per input column (M^d in all) on a box C times the inputs' half-range (C > 1, "
             f"default {HSGP_DEFAULT_C}); for 1 to {HSGP_MAX_DIMS} continuous input columns (coordinates, time), "
             "O(n M^2d) per evaluation. The kernel is then the ARD squared exponential without the constant "
             "term v1 (pm.gp.cov.ExpQuad, which has a spectral density)",
    )
    p.add_argument(
        "--sampler", default="pymc", choices=["pymc", "nutpie"],
        help="NUTS implementation (pymc: chains as processes, dense mass matrix; about as fast as nutpie on Pima, faster on Crabs)",
    )
    p.add_argument("--draws", type=int, default=500, help="NUTS draws per chain, kept")
    p.add_argument("--tune", type=int, default=500, help="NUTS tuning steps per chain, discarded")
    p.add_argument("--chains", type=int, default=2, help="NUTS chains")
    p.add_argument("--seed", type=int, default=0, help="random seed of the sampler")
    p.add_argument("--no-standardize", action="store_true", help="do not standardise the inputs")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.add_argument("--out", default=None,
                   help=f"output folder: empty or missing, unless --overwrite (default: {DEFAULT_OUT}, or "
                        f"{DEFAULT_OUT}-2, -3, ... when it holds an earlier run)")
    p.add_argument("--overwrite", action="store_true",
                   help="write into a non-empty --out, replacing the files of an earlier run there "
                        f"({', '.join(OUTPUT_FILES)}; other files are kept)")
    return p


def _read_csv(path, target, require_target=True):
    """Read numeric feature columns and the target column from a CSV file."""
    try:
        with open(path, newline="") as fh:
            rows = [r for r in csv.reader(fh) if r]
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(f"cannot read {path}: {err}") from None
    if len(rows) < 2:
        raise ValueError(f"{path}: no data rows")
    header, body = rows[0], rows[1:]
    for k, r in enumerate(body, start=2):
        if len(r) != len(header):
            raise ValueError(f"{path}: line {k} has {len(r)} fields, the header has {len(header)}")
    if target not in header:
        if require_target:
            raise ValueError(f"{path}: no column {target!r}; columns are {header}")
        y = None
    else:
        y = np.array([r[header.index(target)] for r in body])
        _check_missing(path, target, y, "label column", ("",))  # "NA", "None" may be labels
    features = [c for c in header if c != target]
    columns = []
    for c in features:
        j = header.index(c)
        cells = [r[j] for r in body]
        _check_missing(path, c, cells, "column", MISSING)
        try:
            columns.append([float(v) for v in cells])
        except ValueError as err:
            raise ValueError(
                f"{path}: column {c!r} is not numeric ({err}); remove it or encode it as numbers"
            ) from None
    return np.array(columns).T, y, tuple(features)


def _check_missing(path, column, cells, what, missing):
    """ValueError naming a column with missing values (cells in ``missing``, compared stripped
    and in lower case: ``MISSING`` for an input column), their lines and what to do; the model
    takes complete rows only."""
    lines = [k for k, v in enumerate(cells, start=2) if str(v).strip().lower() in missing]
    if lines:
        shown = ", ".join(map(str, lines[:10])) + (", ..." if len(lines) > 10 else "")
        todo = ("drop those rows" if what == "label column" else
                "drop those rows, or fill them in (e.g. with the column's median)")
        raise ValueError(f"{path}: {what} {column!r} has missing values ({len(lines)} of {len(cells)} rows; "
                         f"lines {shown}): {todo} before running pymc-gpc")


def _check_args(args):
    """Counts that PyMC would reject only after the data are read and the model built."""
    for name, low in (("draws", 1), ("tune", 0), ("chains", 1)):
        if getattr(args, name) < low:
            raise ValueError(f"--{name} must be >= {low}, got {getattr(args, name)}")


def load_split(args):
    """The train/test split from the command line, inputs standardised unless asked not to."""
    return _load(args)[0]


def _load(args):
    """(``load_split``'s split, the binary target's (negative, positive) labels as the user
    gave them, the test labels as the user gave them or None): a binary target's split holds
    labels coded -1 / +1; the report and predictions.csv use the user's labels."""
    if args.train is None:
        data = load(args.data, standardise=not args.no_standardize)
        return data, ("-1", "1"), None if data.y_test is None else [_label_text(v) for v in data.y_test]
    if not args.target:
        raise ValueError("--target is required with a CSV file")
    Xtr, ytr, names = _read_csv(args.train, args.target)
    multiclass = has_several_classes(ytr) or args.ordinal  # labels kept as read (ordinal_levels)
    with warnings.catch_warnings():  # a single-member class: marginal_likelihood warns, once
        warnings.simplefilter("ignore", SingleMemberClassWarning)
        ytr_signed = ytr if multiclass else as_signed_labels(_label_values(ytr))
    Xte, yte, yte_raw = None, None, None
    if args.test:
        Xte, yte_raw, names_te = _read_csv(args.test, args.target, require_target=False)
        if names_te != names:
            raise ValueError(f"test columns {names_te} differ from training columns {names}")
        yte = None if yte_raw is None else (yte_raw if multiclass else _align_labels(ytr, yte_raw))
    Xtr = check_inputs(Xtr)
    if Xte is not None:
        Xte = check_inputs(Xte, name="test inputs")
    if not args.no_standardize:
        mean, sd = Xtr.mean(axis=0), Xtr.std(axis=0)
        sd[sd == 0] = 1.0
        Xtr = (Xtr - mean) / sd
        Xte = None if Xte is None else (Xte - mean) / sd
    classes = None if multiclass else tuple(_label_text(v) for v in binary_classes(_label_values(ytr)))
    return Split(pathlib.Path(args.train).stem, Xtr, ytr_signed, Xte, yte, names), classes, yte_raw


def _label_text(v):
    """A label as the report and predictions.csv write it (1.0 as 1)."""
    if isinstance(v, (float, np.floating)) and float(v).is_integer():
        return str(int(v))
    return str(v.item() if hasattr(v, "item") else v)


def ordinal_levels(y, levels=None):
    """The levels of an ordinal target read from a CSV, lowest first: ``levels`` (the
    ``--levels`` text, comma-separated) or, for numeric labels, their numeric order."""
    if levels is not None:
        return [v.strip() for v in levels.split(",")]
    values = np.unique(np.asarray(y).astype(str))
    try:
        return sorted(values.tolist(), key=float)
    except ValueError:
        raise ValueError(f"the ordinal target's labels {values[:10].tolist()} are not numbers: give their order "
                         "with --levels LOWEST,...,HIGHEST") from None


def _likelihood_name(likelihood):
    return likelihood.__name__ if isinstance(likelihood, type) else type(likelihood).__name__


def _label_values(y):
    try:
        return y.astype(float)
    except ValueError:
        return y


def _align_labels(y_train, y_test):
    """Code test labels as the training labels were coded (+1 for the same class)."""
    train, test = _label_values(y_train), _label_values(y_test)
    unseen = sorted(set(np.asarray(test).tolist()) - set(np.asarray(train).tolist()), key=str)
    if unseen:
        raise ValueError(
            f"the test file's label column has classes {unseen} that are not in the training file "
            f"(classes {sorted(set(np.asarray(train).tolist()), key=str)}); this job is binary: remove "
            "those rows or train on data with every class"
        )
    positive = np.asarray(train)[as_signed_labels(train) > 0][0]
    return np.where(np.asarray(test) == positive, 1.0, -1.0)


def run(args):
    """Fit, predict and write the outputs; returns the exit status: 0, or ``INTERRUPTED`` when
    Ctrl-C stopped NUTS's draws and the outputs hold the draws made until then (raises
    KeyboardInterrupt, with nothing written, when it stopped anything else)."""
    _check_args(args)
    _check_choices(args)
    data, classes, y_test_labels = _load(args)
    built = _model_for(args, data)  # every input error before the output folder's
    out = _output_folder(args.out, args.overwrite)
    _check_out(out, args.overwrite)
    staging = _staging_folder(out)
    try:
        interrupted = _fit_and_write(args, built, data, classes, y_test_labels, staging)
        _publish(staging, out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    print(f"written to {out.resolve()}/")
    if interrupted:
        print("pymc-gpc: interrupted (Ctrl-C) during the draws: the outputs hold the draws made until then "
              "(report.md says how many)", file=sys.stderr)
    return INTERRUPTED if interrupted else 0


def _serving(served):
    """The registry's approximations of which ``served(entry)`` holds (``_check_choices``)."""
    return [a.name for a in registry.APPROXIMATIONS.values() if served(a)]


def _check_choices(args):
    """Combinations of options that do not fit together, before the data are read (the
    registry's ``check`` runs again on the model ``ard_classifier`` builds)."""
    approximation = args.approximation.partition("-")[0]
    fitc = _serving(lambda a: "fitc" in a.structures)
    if isinstance(args.inducing, int) and approximation not in fitc:
        raise ValueError(f"--inducing works with --approximation {' or '.join(fitc)}, not {args.approximation}")
    if args.levels is not None and not args.ordinal:
        raise ValueError("--levels orders the labels of an --ordinal target")
    if args.hsgp is not None:
        hsgp = _serving(lambda a: "hsgp" in a.structures)
        if approximation not in hsgp:
            raise ValueError(f"--hsgp works with --approximation {' or '.join(hsgp)}, not {args.approximation}")
        if isinstance(args.inducing, int):
            raise ValueError("give either --hsgp (the basis-function prior) or --inducing (FITC), not both")
        if args.method == "em-ep":
            raise ValueError("--hsgp does not take --method em-ep (EM-EP has no bound for the HSGP prior): "
                             "use --method map, type2 or nuts")
    ordinal = _serving(lambda a: "ordinal" in a.solvers)
    if args.ordinal and approximation not in ordinal:
        raise ValueError(f"--ordinal works with --approximation {' or '.join(ordinal)}, not {args.approximation}")
    if args.likelihood in ORDINAL_LIKELIHOODS and not args.ordinal:
        raise ValueError(f"--likelihood {args.likelihood} needs --ordinal (a target with ordered classes)")
    if args.ordinal and args.likelihood is not None and args.likelihood not in ORDINAL_LIKELIHOODS:
        raise ValueError(f"--ordinal takes --likelihood {' or '.join(sorted(ORDINAL_LIKELIHOODS))}, "
                         f"not {args.likelihood}")


DEFAULT_OUT = "pymc-gpc-output"


def _output_folder(out, overwrite):
    """``--out`` as given; without it, ``DEFAULT_OUT``, or (when that holds an earlier run and
    ``overwrite`` is off) the first of ``DEFAULT_OUT-2``, ``-3``, ... that is empty or missing,
    named on stderr, so that repeating the main job keeps the earlier results."""
    if out is not None:
        return pathlib.Path(out)
    path, k = pathlib.Path(DEFAULT_OUT), 1
    while not overwrite and path.is_dir() and any(path.iterdir()):
        k += 1
        path = pathlib.Path(f"{DEFAULT_OUT}-{k}")
    if k > 1:
        print(f"pymc-gpc: {DEFAULT_OUT}/ holds an earlier run; writing to {path}/ (--out chooses the folder, "
              "--overwrite replaces)", file=sys.stderr)
    return path


def _check_out(out, overwrite):
    """ValueError when ``out`` is a file, or a folder that holds anything and ``overwrite`` is off:
    a second run would replace the first one's files (or leave a point estimate's history.png
    beside a later NUTS report)."""
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} is a file, not a folder")
    held = sorted(p.name for p in out.iterdir()) if out.is_dir() else []
    if held and not overwrite:
        shown = ", ".join(held[:6]) + (", ..." if len(held) > 6 else "")
        raise ValueError(f"the output folder {out} is not empty (it holds {shown}); give --overwrite to replace "
                         "an earlier run's files there, or choose another folder with --out")


def _staging_folder(out):
    """A new hidden folder beside ``out`` where the outputs are written before ``_publish``."""
    out.absolute().parent.mkdir(parents=True, exist_ok=True)
    return pathlib.Path(tempfile.mkdtemp(prefix=f".{out.name}-partial-", dir=out.absolute().parent))


def _publish(staging, out):
    """Move the outputs written in ``staging`` into ``out``, removing an earlier run's outputs
    (``OUTPUT_FILES``) that this run did not write."""
    out.mkdir(parents=True, exist_ok=True)
    written = {p.name for p in staging.iterdir()}
    for name in OUTPUT_FILES:
        if name not in written and (out / name).is_file():
            (out / name).unlink()
    for name in sorted(written):
        os.replace(staging / name, out / name)


def _multiclass_likelihood(approximation, name=None):
    """The multi-class likelihood that ``approximation`` integrates out (the one whose
    ``approximations`` name it); ``name``, a --likelihood given, must be that one's. ValueError
    naming the pairs otherwise."""
    names = {a: key for key, lik in MULTICLASS_LIKELIHOODS.items() for a in lik.approximations}
    if approximation not in names:
        pairs = " or ".join(f"{a} ({key})" for a, key in names.items())
        raise ValueError(f"the target has more than two classes: use --approximation {pairs}, not {approximation!r}")
    if name is not None and name != names[approximation]:
        raise ValueError(
            f"the target has more than two classes: --likelihood {name} does not fit it with "
            f"--approximation {approximation}; use --likelihood {names[approximation]} (or leave --likelihood out)")
    return MULTICLASS_LIKELIHOODS[names[approximation]]()


def _model_for(args, data):
    """(model, gp, likelihood, multiclass) of the command line's choices."""
    from ..gp.models import ard_classifier

    multiclass = has_several_classes(data.y_train) or args.ordinal
    levels = None
    if args.ordinal:
        levels = ordinal_levels(data.y_train, args.levels)
        likelihood = ORDINAL_LIKELIHOODS[args.likelihood or "ordered-probit"]
    elif multiclass:
        likelihood = _multiclass_likelihood(args.approximation, args.likelihood)
    elif args.likelihood in MULTICLASS_LIKELIHOODS:
        raise ValueError(f"--likelihood {args.likelihood} serves a target with more than two classes; this one has "
                         f"two: use one of {sorted(LIKELIHOODS)}")
    else:
        likelihood = LIKELIHOODS[args.likelihood or "probit"]()
    if args.shared_kernel and (not multiclass or args.ordinal):
        raise ValueError("--shared-kernel serves a target with more than two classes (a binary model has one kernel)")
    if args.lengthscale_spread is not None and (not multiclass or args.ordinal or args.shared_kernel):
        raise ValueError("--lengthscale-spread serves a target with more than two classes and one kernel per class "
                         "(not with --shared-kernel)")
    if args.hsgp is not None:
        _check_hsgp_inputs(data, multiclass and not args.ordinal)
    approximation, _, variant = args.approximation.partition("-")
    model, gp = ard_classifier(
        data.X_train, data.y_train, approximation=approximation, likelihood=likelihood,
        feature_names=data.feature_names, **({"variant": variant} if variant else {}),
        **({"inducing": args.inducing} if args.hsgp is None else {"hsgp": args.hsgp}),
        **({"per_class": not args.shared_kernel} if multiclass and not args.ordinal else {}),
        **({"lengthscale_spread": args.lengthscale_spread} if args.lengthscale_spread is not None else {}),
        **({"levels": levels} if args.ordinal else {}),
    )
    return model, gp, likelihood, multiclass


def _inducing_option(text):
    """``--inducing``: "auto", "none" (the dense prior) or a number of inducing inputs."""
    if text.lower() in ("auto", "none"):
        return text.lower() if text.lower() == "auto" else None
    try:
        return int(text)  # its range against n is ard_classifier's check
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of inducing inputs, 'auto' or 'none'") from None


def _hsgp_option(text):
    """``--hsgp``: "M,C" (or "M", C = ``HSGP_DEFAULT_C``) as (m, c), m a positive integer and
    c a number above 1 (the ranges are ``ard_classifier``'s check)."""
    parts = [p.strip() for p in text.split(",")]
    try:
        if len(parts) not in (1, 2):
            raise ValueError
        m = int(parts[0])
        c = float(parts[1]) if len(parts) == 2 else HSGP_DEFAULT_C
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not M,C: a number M of basis functions per input column and "
                                         "a box factor C, e.g. 30,1.5") from None
    if m < 1 or not np.isfinite(c) or c <= 1.0:
        raise argparse.ArgumentTypeError(f"{text!r}: M must be a positive integer and C a number above 1 (the box "
                                         "is C times the inputs' half-range; pm.gp.HSGP recommends C >= 1.2)")
    return m, c


def _check_hsgp_inputs(data, several_classes):
    """ValueError naming what ``--hsgp`` cannot serve: several (unordered) classes, more than
    ``HSGP_MAX_DIMS`` input columns, or a column with fewer than 3 distinct values (constant, or
    categorical: the basis is for continuous inputs)."""
    names, d = data.feature_names, data.X_train.shape[1]
    if several_classes:
        raise ValueError("--hsgp serves a target with two classes, or ordered ones with --ordinal; this one has more "
                         "than two: leave --hsgp out (dense or --inducing)")
    if d > HSGP_MAX_DIMS:
        raise ValueError(f"--hsgp serves at most {HSGP_MAX_DIMS} input columns (M^d basis functions), the data have "
                         f"{d} ({', '.join(names)}): keep the spatial or temporal columns in the CSV, or use "
                         "--inducing (FITC)")
    for k, name in enumerate(names):
        distinct = np.unique(data.X_train[:, k]).size
        if distinct < 3:
            raise ValueError(f"--hsgp: input column {name!r} takes {distinct} distinct value"
                             f"{'s' if distinct != 1 else ''} (constant or categorical); the basis-function prior is "
                             "for continuous inputs such as coordinates or time: drop the column, or leave --hsgp out")


def _prior_line(args, n):
    """The report's words for the prior structure that ``--inducing`` or ``--hsgp`` chose."""
    from ..gp.models import auto_inducing

    if args.hsgp is not None:
        m, c = args.hsgp
        return (f", HSGP prior: {m} basis functions per input column on a box {c:g} times the inputs' half-range, "
                "ARD squared-exponential kernel (no constant term)")
    m = auto_inducing(n, args.approximation.partition("-")[0]) if args.inducing == "auto" else args.inducing
    if m is None:
        return ", dense GP prior" + (" (--inducing auto: at most 1,200 rows)" if args.inducing == "auto" else "")
    how = " (--inducing auto: more than 1,200 rows)" if args.inducing == "auto" else ""
    return f", FITC prior with {m} inducing inputs (k-means){how}"


def _fit_and_write(args, built, data, classes, y_test_labels, out):
    """Fit the model of ``built`` (``_model_for``), predict and write every output into ``out``;
    returns whether Ctrl-C cut NUTS's draws short."""
    model, gp, likelihood, multiclass = built
    report = [
        f"# pymc-gpc: {data.name}, {args.approximation.upper()} + "
        f"{_likelihood_name(likelihood) if multiclass else args.likelihood or 'probit'}, {args.method}",
        "",
        f"- training points: {len(data.y_train)}, inputs: {data.X_train.shape[1]}"
        + (f", classes: {len(gp.classes)}, "
           + (f"ordered ({', '.join(map(str, gp.classes))}), free cutpoints" if args.ordinal else
              'one ARD kernel shared by the classes' if args.shared_kernel else 'one ARD kernel per class'
              + (f" (log lengthscales shrunk toward a shared value, sd {args.lengthscale_spread:g})"
                 if args.lengthscale_spread is not None else ""))
           if multiclass else "")
        + _prior_line(args, len(data.y_train)),
    ]
    if not multiclass:
        report.append(f"- classes: {classes[0]!r} (negative) and {classes[1]!r} (positive): probabilities are "
                      f"of {classes[1]!r} (predictions.csv's p_{classes[1]})")
    hyper = [v for v in ("log_w", "log_v0", "log_v1") if v in model.named_vars] + (["cutpoints"] if args.ordinal else [])
    t0 = time.perf_counter()
    if args.method == "nuts":
        idata, interrupted = _sample(args, model)
        report += _nuts_report(args, idata, hyper, time.perf_counter() - t0, interrupted, out)
        fitted = idata
    else:
        from ..estimation.point_estimates import fit

        interrupted = False
        fitted = fit(model, method=args.method, progressbar=not args.no_progress)
        report += _fit_report(args, fitted, hyper, time.perf_counter() - t0, out)
    if data.X_test is not None:
        report += _test_report(args, gp, model, fitted, data, classes, y_test_labels, multiclass, out)
    _plots(fitted, out, report, data.feature_names, [str(c) for c in gp.classes],
           [v for v in hyper if v != "cutpoints"])
    text = "\n".join(report) + "\n"
    (out / "report.md").write_text(text)
    print(text)
    return interrupted


def _sample(args, model):
    """(idata, interrupted): NUTS, with Ctrl-C during the draws noted (PyMC then returns the draws
    made so far); KeyboardInterrupt when it left fewer than ``MIN_KEPT_DRAWS`` per chain."""
    from ..estimation.sampling import sample

    hits = []

    def note_interrupt(signum, frame):
        hits.append(signum)
        raise KeyboardInterrupt

    def stop_after_a_lost_interrupt(trace, draw):
        # the handler's KeyboardInterrupt is lost where it lands in code whose exceptions Python
        # ignores (a finalizer, a gc callback): the draws would run on to the end. PyMC's
        # sampler stops cleanly on one raised here, after the draw, with the draws made so far
        if hits:
            raise KeyboardInterrupt

    extra = {"callback": stop_after_a_lost_interrupt} if args.sampler == "pymc" else {}

    try:
        previous = signal.signal(signal.SIGINT, note_interrupt)
    except ValueError:  # not the main thread: no handler of ours, PyMC's truncated trace is still caught below
        previous = None
    try:
        with model:
            idata = sample(  # pm.sample with the package's defaults, + the log_likelihood group
                draws=args.draws, tune=args.tune, chains=args.chains, random_seed=args.seed,
                cores=min(args.chains, os.cpu_count() or 1),
                progressbar=not args.no_progress, nuts_sampler=args.sampler, **extra,
            )
    except Exception:
        if hits:  # what PyMC made of an interrupted run (e.g. no draws after the tuning)
            raise KeyboardInterrupt from None
        raise
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
    kept = int(idata["posterior"].sizes["draw"])
    interrupted = bool(hits) or kept < args.draws
    if interrupted and kept < MIN_KEPT_DRAWS:
        raise KeyboardInterrupt
    return idata, interrupted


def _nuts_report(args, idata, hyper, fit_time, interrupted, out):
    """The report's NUTS lines (the draws it holds, as counted in ``idata``); writes summary.csv."""
    import arviz as az

    summary = az.summary(idata, var_names=hyper)
    summary.to_csv(out / "summary.csv")
    summary = summary.astype(float).round(3)
    min_ess = float(summary["ess_bulk"].min())
    divergences = int(np.asarray(idata["sample_stats"]["diverging"]).sum())
    status = np.asarray(idata["sample_stats"]["y_status"])  # pymc_gpc.sample's layout
    chains, draws = int(idata["posterior"].sizes["chain"]), int(idata["posterior"].sizes["draw"])
    lines = []
    if interrupted:
        lines += [f"- **INTERRUPTED** (Ctrl-C) during the draws: this run's outputs (this report, summary.csv, "
                  f"the plots and any predictions) hold {chains} chain{'s' if chains != 1 else ''} x {draws} draws, "
                  f"not the {args.chains} x {args.draws} asked for"]
    lines += [
        f"- sampling time: {fit_time:.1f} s ({chains} chain{'s' if chains != 1 else ''} x ({args.tune} tune + "
        f"{draws} draws), {args.sampler})",
        f"- min bulk ESS over hyperparameters: {min_ess:.0f} ({min_ess / fit_time:.2f} ESS/s)",
        f"- max r_hat: {float(summary['r_hat'].max()):.3f}; divergences: {divergences}",
        f"- approximation status over draws: {int((status == 0).sum())} converged, "
        f"{int((status == 1).sum())} not converged, {int((status == 2).sum())} failed",
    ]
    try:
        loo = az.loo(idata)
        lines.append(f"- PSIS-LOO elpd (cavity pointwise terms): {float(loo.elpd):.2f} (se {float(loo.se):.2f})")
    except Exception as err:  # noqa: BLE001 - report, do not fail the run
        lines.append(f"- PSIS-LOO unavailable: {err}")
    return lines + ["", "## Hyperparameters", "", _markdown_table(summary)]


def _fit_report(args, result, hyper, fit_time, out):
    """The report's lines of a point estimate; writes summary.csv."""
    import arviz as az

    label = {"map": "MAP-II", "type2": "type-II ML", "elbo": "ELBO MAP", "em-ep": "EM-EP"}[args.method]
    values = {n: np.round(np.asarray(result.point[n]), 3).tolist() for n in hyper}
    summary = az.summary(result.to_inference_data(), var_names=hyper, kind="stats")
    summary[["mean"]].rename(columns={"mean": "estimate"}).to_csv(out / "summary.csv")
    return [
        f"- {label} time: {fit_time:.1f} s, {result.n_iter} iterations, "
        f"{'converged' if result.converged else 'NOT converged'} ({result.message})",
        f"- approximate log evidence at the estimate: {result.log_evidence:.3f}",
        f"- {label} point: {values}",
    ]


def _test_report(args, gp, model, fitted, data, classes, y_test_labels, multiclass, out):
    """Predict the test rows, write predictions.csv; the report's test-set lines."""
    from ..gp.models import classification_metrics, multiclass_report

    t1 = time.perf_counter()
    if args.method == "nuts":
        p = gp.predict(data.X_test, idata=fitted, model=model, max_draws=200, progressbar=not args.no_progress)
    else:
        p = gp.predict(data.X_test, point=fitted.point, model=model)
    lines = ["", "## Test set", "", f"- prediction time: {time.perf_counter() - t1:.1f} s"]
    if multiclass:
        _write_class_predictions(out / "predictions.csv", p, gp.classes, data.y_test)
        return lines + ([] if data.y_test is None else multiclass_report(p, gp.classes, data.y_test))
    _write_predictions(out / "predictions.csv", p, classes, y_test_labels)
    if data.y_test is not None:
        m = classification_metrics(p, data.y_test)
        lines += [
            f"- test errors: {m['errors']} / {m['n']} ({100 * m['error_rate']:.1f} %)",
            f"- mean test log predictive: {m['mean_log_pred']:.4f}",
        ]
    return lines


def _markdown_table(frame):
    """A pandas DataFrame as a Markdown table (without the optional tabulate package)."""
    cols = [str(c) for c in frame.columns]
    lines = ["| | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
    for idx, row in frame.iterrows():
        lines.append(f"| {idx} | " + " | ".join(str(v) for v in row.tolist()) + " |")
    return "\n".join(lines)


def _write_class_predictions(path, p, classes, labels):
    """predictions.csv of a target with several classes: one probability column per class
    (in the order of ``classes``), the most probable class and, when the test file has them,
    the labels."""
    classes = [str(c) for c in classes]
    pred = np.array(classes)[np.argmax(p, axis=1)]
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["row", *[f"p_{c}" for c in classes], "predicted"] + (["label"] if labels is not None else []))
        for i, row in enumerate(p):
            w.writerow([i, *[f"{v:.6f}" for v in row], pred[i]] + ([labels[i]] if labels is not None else []))


def _write_predictions(path, p, classes, labels):
    """predictions.csv of a binary target: p_<positive label>, the predicted label and, when
    the test file has them, the labels, all in the user's labels (``classes``: negative, positive)."""
    negative, positive = classes
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["row", f"p_{positive}", "predicted"] + (["label"] if labels is not None else []))
        for i, pi in enumerate(p):
            row = [i, f"{pi:.6f}", positive if pi > 0.5 else negative]
            w.writerow(row + ([labels[i]] if labels is not None else []))


def _plots(result, out, report, feature_names, classes, kernel_vars):
    """Trace and relevance plots of a sampling result, or relevance and history plots of a fit;
    inputs and classes are named by ``feature_names`` and ``classes``; the traces are those of
    ``kernel_vars``."""
    try:
        import arviz as az
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        report.append("- plots skipped: install the 'plot' extra (matplotlib)")
        return
    if not hasattr(result, "history"):
        pc = az.plot_trace_dist(result, var_names=kernel_vars, backend="matplotlib")
        pc.savefig(out / "trace.png")
        pc = az.plot_forest(result, var_names=["log_w"], combined=True, backend="matplotlib")
        pc.savefig(out / "relevance.png")
        plt.close("all")
        report += ["", "Plots: trace.png (hyperparameter traces), relevance.png (ARD: log inverse squared lengthscale per input)."]
        return
    from ..plots import plot_fit, plot_history

    if np.ndim(result.point["log_w"]) > 1:  # one kernel per class: a relevance bar chart per class row
        _plot_per_class_relevance(result.point["log_w"], out / "relevance.png", feature_names, classes)
        ax = plot_history(result)
        ax.figure.tight_layout()
        ax.figure.savefig(out / "history.png")
        plt.close("all")
        report += ["", "Plots: relevance.png (ARD: log inverse squared lengthscale per input, one panel per class), "
                   f"history.png ({_history_name(result)} per iteration)."]
        return
    plot_fit(result, out / "relevance.png", out / "history.png", feature_names=feature_names)
    report += ["", "Plots: relevance.png (ARD: log inverse squared lengthscale per input), "
               f"history.png ({_history_name(result)} per iteration)."]


def _history_name(result):
    """What a fit's history holds per iteration: the log evidence, or with ``method="elbo"`` the bound."""
    return "the SVGP-type bound" if result.method == "elbo" else "log evidence"


def _plot_per_class_relevance(log_w, path, feature_names, classes):
    """One bar chart of log w per class (rows of ``log_w``), on a shared y axis, the inputs
    named by ``feature_names`` and the panels by ``classes``."""
    import matplotlib.pyplot as plt

    log_w = np.asarray(log_w, dtype=float)
    c, d = log_w.shape
    fig, axes = plt.subplots(c, 1, figsize=(max(6, 0.6 * d), 1.2 * c + 1.5), sharex=True, sharey=True)
    for k, ax in enumerate(np.atleast_1d(axes)):
        ax.bar(np.arange(d), log_w[k], color="C0")
        ax.set_ylabel(classes[k], fontsize=8)
    ax.set_xticks(np.arange(d), list(feature_names), rotation=45 if d > 6 else 0, ha="right" if d > 6 else "center")
    fig.suptitle("ARD relevance per class: log w (higher: the input matters more)")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main(argv=None):
    """The ``pymc-gpc`` command; returns the exit status: 0, 2 for bad input (a message on
    stderr), ``INTERRUPTED`` (130) for Ctrl-C (``run``)."""
    args = _parser().parse_args(argv)
    try:
        return run(args)
    except ValueError as err:
        print(f"pymc-gpc: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("pymc-gpc: interrupted (Ctrl-C); nothing written", file=sys.stderr)
        return INTERRUPTED


