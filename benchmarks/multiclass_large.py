"""Large multi-class benchmark (issue 43): ggplot2's diamonds, cut (5 classes) from 9 inputs.

Protocol (``load_diamonds``: a seeded split, inputs standardised with the training set's
statistics; 10,000 training and 5,000 test diamonds by default; one BLAS thread):

* FITC: softmax Laplace (``MarginalLaplace(likelihood=Softmax(), approx="FITC")``) MAP-II
  by ``pymc_gpc.fit(method="map")``, one ARD squared-exponential kernel per class
  (``exp(log_v0[k]) ExpQuad(d, ls=exp(-log_w[k] / 2))``, every log ~ N(-3, 3^2) as in
  ``models.ard_classifier``, log_v0 starting at 0), m inducing inputs by seeded k-means
  shared by the classes. Wall time from building the model to the fitted point (model
  building, k-means, compilation and the optimiser), then prediction on the test set.
  Nested EP (``MultinomialProbit``) on the same model: see ``--ep``.
* Multinomial logistic regression (scikit-learn, lbfgs): default C = 1, and C chosen by
  5-fold ``LogisticRegressionCV`` over 10 values (log loss).
* scikit-learn's ``GaussianProcessClassifier`` (one-vs-rest, Laplace, kernel
  ``ConstantKernel * RBF`` with one lengthscale per input, its L-BFGS-B without restarts)
  on the first n of the training set for growing n.
* ``--phase solver``: the same warm evaluation + gradient without PyTensor
  (``solver_timing``: the priors built in NumPy, ``softmax_laplace`` called directly), with
  the number of times A is formed and of Newton steps per call.
* Warm evaluation + gradient of the FITC model's log density at n = 10^4, c = 5, m = 200:
  ``logp`` and its gradient compiled once; calls cycling through three points near the
  optimum (log hyperparameters moved by N(0, 0.02^2)), each warm-started by the previous.

Every phase writes a JSON file under --work; ``--report`` assembles the results file.

Run:  OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/multiclass_large.py --phase all
Writes benchmarks/results/multiclass_large.md.
"""

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse
import json
import pathlib
import time
import warnings

from _provenance import write_results  # noqa: E402  (benchmarks/_provenance.py)
import numpy as np

OUT = pathlib.Path(__file__).parent / "results" / "multiclass_large.md"
PRIOR = (-3.0, 3.0)


def metrics(p, y):
    p = np.clip(np.asarray(p, dtype=float), 1e-300, None)
    return {"error": float(np.mean(np.argmax(p, axis=1) != y)),
            "mean_log_p": float(np.mean(np.log(p[np.arange(len(y)), y])))}


def gp_model(X, y, Xu, likelihood):
    import pymc as pm
    import pytensor.tensor as pt

    import pymc_gpc
    from pymc_gpc.likelihoods import MultinomialProbit, Softmax

    c, d = int(y.max()) + 1, X.shape[1]
    mu, sd = PRIOR
    with pm.Model() as model:
        log_w = pm.Normal("log_w", mu, sd, shape=(c, d))
        log_v0 = pm.Normal("log_v0", mu, sd, shape=c, initval=np.zeros(c))
        covs = [pt.exp(log_v0[k]) * pm.gp.cov.ExpQuad(d, ls=pt.exp(-0.5 * log_w[k])) for k in range(c)]
        if likelihood == "softmax":
            gp = pymc_gpc.MarginalLaplace(cov_func=covs, likelihood=Softmax(), approx="FITC")
        else:
            gp = pymc_gpc.MarginalEP(cov_func=covs, likelihood=MultinomialProbit(), approx="FITC")
        gp.marginal_likelihood("y", X=X, y=y, Xu=Xu)
    return model, gp


def fitc(data, m, likelihood, maxiter, start=None):
    import pymc as pm

    import pymc_gpc

    t0, c0 = time.perf_counter(), time.process_time()
    Xu = pm.gp.util.kmeans_inducing_points(m, data.X_train, seed=0)
    model, gp = gp_model(data.X_train, data.y_train, Xu, likelihood)
    t_build = time.perf_counter() - t0
    res = pymc_gpc.fit(model, method="map", maxiter=maxiter, progressbar=False,
                       start=start)
    t_fit, cpu_fit = time.perf_counter() - t0, time.process_time() - c0
    p = gp.predict(data.X_test, point=res.point)
    t_pred = time.perf_counter() - t0 - t_fit
    point = {k: np.asarray(v).tolist() for k, v in res.point.items() if k in ("log_w", "log_v0")}
    return {"method": f"FITC {likelihood} MAP-II", "n": len(data.y_train), "m": m, "maxiter": maxiter,
            "time_build": t_build, "time_fit": t_fit, "cpu_fit": cpu_fit, "time_predict": t_pred, "n_iter": int(res.n_iter),
            "converged": bool(res.converged), "message": str(res.message), "log_evidence": float(res.log_evidence),
            "point": point, **metrics(p, data.y_test)}, (model, gp, res)


class _Clock:
    """CPU and wall seconds and calls, accumulated per label, of wrapped functions."""

    def __init__(self):
        self.totals = {}

    def wrap(self, owner, name, label=None):
        fn = getattr(owner, name)
        label = label or name
        clock = self

        def timed(*args, **kwargs):
            t, c = time.perf_counter(), time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                entry = clock.totals.setdefault(label, {"calls": 0, "cpu": 0.0, "wall": 0.0, "first_cpu": None})
                entry["calls"] += 1
                entry["cpu"] += time.process_time() - c
                entry["wall"] += time.perf_counter() - t
                if entry["first_cpu"] is None:
                    entry["first_cpu"] = time.process_time() - c
        setattr(owner, name, timed)
        return fn


def fit_profile(data, m, maxiter, tol=1e-9):
    """The FITC softmax MAP-II fit of ``fitc`` with its time split (CPU and wall): k-means,
    model building, the objective's PyTensor compilation (``Objective.__init__``), the
    evaluations (kernel graph, solves, pullback; the first solve separately: numba's
    compilation or cache load), the start check, the runaway check and the deterministics
    at the optimum; and per L-BFGS-B iteration the objective, log evidence, largest
    gradient element and evaluations so far."""
    import pymc as pm

    from pymc_gpc.estimation import objective as objective_module
    from pymc_gpc.estimation import type2

    clock = _Clock()
    for name in ("__init__", "kernels", "solve", "pullback", "evidence_and_grad"):
        clock.wrap(objective_module.Objective, name)
    for name in ("all_values", "_runaway", "_check_start", "_coarse_stage"):
        clock.wrap(type2, name)
    last = {}
    evidence = objective_module.Objective.evidence_and_grad

    def recording(self, point):
        out = evidence(self, point)
        last["grad"] = None if out[2] is None else float(np.max(np.abs(out[2])))
        return out
    objective_module.Objective.evidence_and_grad = recording

    t0, c0 = time.perf_counter(), time.process_time()
    Xu = pm.gp.util.kmeans_inducing_points(m, data.X_train, seed=0)
    t_kmeans, c_kmeans = time.perf_counter() - t0, time.process_time() - c0
    model, gp = gp_model(data.X_train, data.y_train, Xu, "softmax")
    t_model, c_model = time.perf_counter() - t0 - t_kmeans, time.process_time() - c0 - c_kmeans
    iterations = []

    def callback(point, value, log_z):
        iterations.append({"cpu": time.process_time() - c0, "wall": time.perf_counter() - t0, "objective": value,
                           "log_evidence": log_z, "max_abs_grad": last.get("grad"),
                           "evaluations": clock.totals["evidence_and_grad"]["calls"]})
    point = objective_module.start_point(model, None)
    res = type2.maximise(model, point, "map", maxiter, tol, False, callback=callback)
    t_fit, cpu_fit = time.perf_counter() - t0, time.process_time() - c0
    p = gp.predict(data.X_test, point=res.point)
    return {"n": len(data.y_train), "m": m, "maxiter": maxiter, "tol": tol, "cpu_fit": cpu_fit, "time_fit": t_fit,
            "kmeans": {"cpu": c_kmeans, "wall": t_kmeans}, "model": {"cpu": c_model, "wall": t_model},
            "totals": clock.totals, "iterations": iterations, "n_iter": int(res.n_iter),
            "converged": bool(res.converged), "message": str(res.message), "log_evidence": float(res.log_evidence),
            "point": {k: np.asarray(v).tolist() for k, v in res.point.items() if k in ("log_w", "log_v0")},
            **metrics(p, data.y_test)}


def warm_timing(model, point, repeats=3, calls=9, seed=0):
    import pytensor.tensor as pt

    t0, c0 = time.perf_counter(), time.process_time()
    values = model.value_vars
    logp = model.logp()
    fn = model.compile_fn([logp, *pt.grad(logp, values)], inputs=values, point_fn=True)
    rng = np.random.default_rng(seed)
    names = [v.name for v in values]
    base = {k: np.asarray(point[k], dtype=float) for k in names}
    points = [{k: v + 0.02 * rng.normal(size=v.shape) for k, v in base.items()} for _ in range(repeats)]
    fn(base)
    t_compile, cpu_compile = time.perf_counter() - t0, time.process_time() - c0
    times, cpu = [], []
    for i in range(calls):
        t, c = time.perf_counter(), time.process_time()
        out = fn(points[i % repeats])
        times.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
        assert np.isfinite(out[0])
    return {"compile_and_first": t_compile, "cpu_compile_and_first": cpu_compile, "times": times, "cpu": cpu,
            "median": float(np.median(times)), "min": float(np.min(times)), "cpu_median": float(np.median(cpu))}


def solver_timing(data, m, point, calls=4, seed=0):
    """Warm softmax Laplace FITC evaluations + gradients without PyTensor: the priors built
    in NumPy at three points near ``point`` (log hyperparameters moved by N(0, 0.02^2)),
    each call warm-started from the previous call's mode (CPU seconds, A formed, steps)."""
    import pymc as pm

    from pymc_gpc.approximations.softmax_laplace import softmax_laplace
    from pymc_gpc.structures import multiclass_fitc

    X, y = data.X_train, data.y_train
    Xu = pm.gp.util.kmeans_inducing_points(m, X, seed=0)

    def prior(log_w, log_v0):
        def k(A, B, w, v0):
            return v0 * np.exp(-0.5 * (((A[:, None, :] - B[None]) ** 2) * w).sum(-1))
        c = len(log_v0)
        Kuu = np.array([k(Xu, Xu, np.exp(log_w[j]), np.exp(log_v0[j])) + 1e-6 * np.eye(m) for j in range(c)])
        Kuf = np.array([k(Xu, X, np.exp(log_w[j]), np.exp(log_v0[j])) for j in range(c)])
        kd = np.array([np.full(len(X), np.exp(log_v0[j]) + 1e-6) for j in range(c)])
        return multiclass_fitc.MulticlassFITCPrior(Kuu, Kuf, kd)

    rng = np.random.default_rng(seed)
    lw, lv = np.asarray(point["log_w"], dtype=float), np.asarray(point["log_v0"], dtype=float)
    priors = [prior(lw + 0.02 * rng.normal(size=lw.shape), lv + 0.02 * rng.normal(size=lv.shape)) for _ in range(3)]
    formed = [0]
    precision = multiclass_fitc._precision

    def counted(*args):
        formed[0] += 1
        return precision(*args)

    multiclass_fitc._precision = counted
    state, rows = softmax_laplace(priors[0], y, with_loo=False).state, []
    for i in range(calls):
        formed[0] = 0
        t, c = time.perf_counter(), time.process_time()
        res = softmax_laplace(priors[(i + 1) % 3], y, state=state, with_loo=False)
        rows.append({"wall": time.perf_counter() - t, "cpu": time.process_time() - c, "A_formed": formed[0],
                     "newton_steps": int(res.n_iter), "log_z": float(res.log_z)})
        state = res.state
        print(rows[-1], flush=True)
    multiclass_fitc._precision = precision
    return {"n": len(y), "m": m, "calls": rows, "cpu_median": float(np.median([r["cpu"] for r in rows]))}


def logistic(data):
    from sklearn.linear_model import LogisticRegression, LogisticRegressionCV

    rows = []
    for label, est in (("multinomial logistic regression, C = 1", LogisticRegression(max_iter=5000)),
                       ("multinomial logistic regression, C by 5-fold CV",
                        LogisticRegressionCV(Cs=10, cv=5, scoring="neg_log_loss", max_iter=5000))):
        t, c = time.perf_counter(), time.process_time()
        est.fit(data.X_train, data.y_train)
        dt, cpu = time.perf_counter() - t, time.process_time() - c
        row = {"method": label, "n": len(data.y_train), "time_fit": dt, "cpu_fit": cpu, **metrics(est.predict_proba(data.X_test),
                                                                                  data.y_test)}
        if hasattr(est, "C_"):
            row["C"] = float(np.ravel(est.C_)[0])
        rows.append(row)
        print(row, flush=True)
    return rows


def sklearn_gpc(data, sizes, budget):
    from sklearn.gaussian_process import GaussianProcessClassifier
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel

    rows = []
    d = data.X_train.shape[1]
    for n in sizes:
        kernel = ConstantKernel(1.0) * RBF(length_scale=np.ones(d))
        est = GaussianProcessClassifier(kernel=kernel, multi_class="one_vs_rest", random_state=0)
        t, c = time.perf_counter(), time.process_time()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est.fit(data.X_train[:n], data.y_train[:n])
        dt, cpu = time.perf_counter() - t, time.process_time() - c
        t = time.perf_counter()
        p = est.predict_proba(data.X_test)
        row = {"method": "scikit-learn GPC (one-vs-rest, Laplace, ARD RBF)", "n": n, "time_fit": dt, "cpu_fit": cpu,
               "time_predict": time.perf_counter() - t, **metrics(p, data.y_test)}
        rows.append(row)
        print(row, flush=True)
        if dt > budget:
            break
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--phase", default="all", choices=["all", "laplace", "profile", "warm", "solver", "ep", "logistic", "gpc", "report"])
    ap.add_argument("--warm-m", type=int, default=200)
    ap.add_argument("--n-train", type=int, default=10_000)
    ap.add_argument("--n-test", type=int, default=5000)
    ap.add_argument("--m", type=int, default=100)
    ap.add_argument("--maxiter", type=int, default=100)
    ap.add_argument("--ep-maxiter", type=int, default=0, help="0: time evaluations only, no fit")
    ap.add_argument("--gpc-sizes", default="500,1000,2000,4000")
    ap.add_argument("--gpc-budget", type=float, default=180.0)
    ap.add_argument("--work", default="/tmp/multiclass_large")
    ap.add_argument("--tag", default="", help="profile: suffix of the JSON file's name")
    args = ap.parse_args()
    work = pathlib.Path(args.work)
    work.mkdir(parents=True, exist_ok=True)

    from pymc_gpc.datasets import load_diamonds

    data = load_diamonds(n_train=args.n_train, n_test=args.n_test, seed=0)
    phases = ["laplace", "warm", "logistic", "gpc", "ep", "report"] if args.phase == "all" else [args.phase]
    for phase in phases:
        if phase == "laplace":
            row, (model, gp, res) = fitc(data, args.m, "softmax", args.maxiter)
            print({k: v for k, v in row.items() if k != "point"}, flush=True)
            (work / "laplace.json").write_text(json.dumps(row))
        elif phase == "profile":
            row = fit_profile(data, args.m, args.maxiter)
            print({k: v for k, v in row.items() if k not in ("point", "iterations")}, flush=True)
            (work / f"profile{args.tag}.json").write_text(json.dumps(row))
        elif phase in ("warm", "ep"):
            import pymc as pm

            point = {k: np.asarray(v) for k, v in json.loads((work / "laplace.json").read_text())["point"].items()}
            m = args.warm_m if phase == "warm" else args.m
            Xu = pm.gp.util.kmeans_inducing_points(m, data.X_train, seed=0)
            likelihood = "softmax" if phase == "warm" else "probit"
            model, _ = gp_model(data.X_train, data.y_train, Xu, likelihood)
            row = {"likelihood": likelihood, "n": len(data.y_train), "m": m, "c": 5,
                   **warm_timing(model, point, calls=9 if phase == "warm" else 3)}
            print(row, flush=True)
            if phase == "ep" and args.ep_maxiter > 0:
                fit_row, _ = fitc(data, args.m, "probit", args.ep_maxiter, start=point)
                row["fit"] = fit_row
                print({k: v for k, v in fit_row.items() if k != "point"}, flush=True)
            (work / f"{phase}.json").write_text(json.dumps(row))
        elif phase == "solver":
            point = json.loads((work / "laplace.json").read_text())["point"]
            row = solver_timing(data, args.warm_m, point)
            (work / "solver.json").write_text(json.dumps(row))
        elif phase == "logistic":
            (work / "logistic.json").write_text(json.dumps(logistic(data)))
        elif phase == "gpc":
            sizes = [int(s) for s in args.gpc_sizes.split(",")]
            (work / "gpc.json").write_text(json.dumps(sklearn_gpc(data, sizes, args.gpc_budget)))
        elif phase == "report":
            report(work, data, args)


def _cpu(row, key="cpu_fit"):
    return f"{row[key]:.0f}" if key in row else "n/a"


def _load(work, name):
    path = work / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def report(work, data, args):
    lap, warm, ep = _load(work, "laplace"), _load(work, "warm"), _load(work, "ep")
    logit, gpc = _load(work, "logistic") or [], _load(work, "gpc") or []
    n, n_test = len(data.y_train), len(data.y_test)
    rows = []
    if lap:
        rows.append(f"| FITC softmax Laplace MAP-II, per-class ARD, m = {lap['m']} | {lap['n']} | "
                    f"{lap['time_fit']:.0f} ({lap['n_iter']} L-BFGS-B iterations, "
                    f"{'converged' if lap['converged'] else 'not converged'}) | {_cpu(lap)} | {lap['error']:.4f} | "
                    f"{lap['mean_log_p']:.4f} |")
    for r in logit:
        extra = f" (C = {r['C']:.3g})" if "C" in r else ""
        rows.append(f"| {r['method']}{extra} | {r['n']} | {r['time_fit']:.1f} | {_cpu(r)} | {r['error']:.4f} | "
                    f"{r['mean_log_p']:.4f} |")
    for r in gpc:
        rows.append(f"| {r['method']} | {r['n']} | {r['time_fit']:.0f} | {_cpu(r)} | {r['error']:.4f} | "
                    f"{r['mean_log_p']:.4f} |")
    if ep and "fit" in ep:
        f = ep["fit"]
        rows.append(f"| FITC nested EP (multinomial probit) MAP-II from the Laplace optimum, m = {f['m']} | {f['n']} | "
                    f"{f['time_fit']:.0f} ({f['n_iter']} iterations) | {_cpu(f)} | {f['error']:.4f} | {f['mean_log_p']:.4f} |")
    lines = [
        "# Large multi-class benchmark: ggplot2's diamonds (issue 43)",
        "",
        f"Data: ``load_diamonds`` (R's ggplot2 ``diamonds``, 53,940 diamonds): the cut, 5 ordered classes "
        f"(Fair ... Ideal), from 9 standardised inputs (carat, color, clarity, depth, table, log price, x, y, z); "
        f"{n} training and {n_test} test diamonds, a seeded split (seed 0). Training class counts "
        f"{np.bincount(data.y_train).tolist()}, test {np.bincount(data.y_test).tolist()}; predicting the "
        f"majority class (Ideal) everywhere errs on {np.mean(data.y_test != 4):.4f} of the test set.",
        "",
        "Protocol: the module docstring of ``benchmarks/multiclass_large.py``. Times are wall seconds with one "
        "BLAS thread; the FITC fit's time runs from building the model (k-means included) to the fitted point, "
        "so it includes PyTensor's and numba's compilation. Test error = share of test diamonds whose most "
        "probable class is wrong; log p = mean log predictive probability of the true class.",
        "",
        "| method | n train | fit s (wall) | fit s (CPU) | test error | mean test log p |",
        "|---|---|---|---|---|---|",
        *rows,
        "",
    ]
    if lap:
        lines += [f"FITC fit split: model and k-means {lap['time_build']:.0f} s; prediction of the {n_test} test "
                  f"points {lap['time_predict']:.0f} s (not in the fit time). Optimiser: {lap['message']}; "
                  f"log evidence at the optimum {lap['log_evidence']:.1f}.", ""]
    if warm:
        lines += [f"Warm evaluation + gradient (softmax Laplace FITC, n = {warm['n']}, c = {warm['c']}, "
                  f"m = {warm['m']}): median {warm['median']:.2f} s wall ({warm.get("cpu_median", float("nan")):.2f} s CPU), "
                  f"min {warm['min']:.2f} s over "
                  f"{len(warm['times'])} calls; compiling the function and the first (cold) call "
                  f"{warm['compile_and_first']:.0f} s.", ""]
    if ep:
        lines += [f"Nested EP (multinomial probit) FITC, m = {ep['m']}, at the Laplace optimum: evaluation + "
                  f"gradient median {ep['median']:.1f} s wall ({_cpu(ep, 'cpu_median')} s CPU; min {ep['min']:.1f} s, "
                  f"{len(ep['times'])} warm calls); "
                  f"compiling and the first (cold) call {ep['compile_and_first']:.0f} s.", ""]
    lines.append(f"Load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores (shared machine).")
    notes = work / "notes.md"
    if notes.exists():
        lines += ["", notes.read_text().strip()]
    write_results(OUT, "\n".join(lines) + "\n", peers=("scikit-learn",),
                  command="OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/multiclass_large.py "
                          "--phase P --work W for P = laplace (--maxiter 100), warm, logistic, gpc (--gpc-sizes "
                          "500,1000,2000 --gpc-budget 400), ep, report; laplace then warm then ep in one queue, "
                          "logistic then gpc in another, at the same time")


if __name__ == "__main__":
    main()
