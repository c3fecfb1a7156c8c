"""Why EP needs 5 sweeps per evaluation inside NUTS on hard data, and what does not fix it (issue 18).

For each data set, one NUTS chain (``pymc_gpc.sample``, 300 tune + 300 draws, seed 1) is
run with the Op's solves recorded (hyperparameter vector, sweeps, time). The
evaluations of the second half (the sampling phase) are then replayed outside the
sampler with the compiled parallel EP loop (``ep._parallel_compiled``, tol 1e-2 as
inside the sampler, every sweep exact: ``rough_sweeps.py`` measures the single-precision
sweeps) from different starts, and studied in four ways:

1. **Warm-start predictors**: cold (zero sites), the last solution, the package's
   ``WarmStarts`` (nearest stored solution extrapolated along the trajectory), and an
   affine multi-point predictor (the stored solutions combined with the ridge
   least-squares weights that reproduce the new hyperparameters from the stored ones), and
   the stored solution whose kernel matrix is nearest the new one ("nearest K").
2. **What the sampler consumes**: from the warm start, after k sweeps, the error of log Z
   and the relative error of the gradient in the log-hyperparameters (through the ARD
   kernel's derivative) against a 1e-10 solve; tells whether a looser or differently
   defined tolerance could stop earlier.
3. **Newton-GMRES**: Newton's method on the fixed-point residual s - G(s) of parallel EP
   with the exact Jacobian: the global part through Sigma (dm = Sigma (dnu - m dtau),
   dv = -(Sigma o Sigma) dtau), the per-site part by central differences of the site map;
   the linear system solved by GMRES (one cycle of at most 30 iterations, relative
   residual 0.03). Reported: factorisations to reach the same tolerance, against the
   Anderson-accelerated sweeps (a Newton iteration also forms Sigma: about 1.5 sweeps
   of flops). Also two chord methods, whose Jacobian's Sigma is fixed for the whole
   solve (no Sigma to form per iteration): the previous evaluation's (free: the gradient
   forms R) or the one at the solve's start; capped at 50 factorisations.
4. **The iteration itself**, from the package's warm starts at equal accuracy (a damped
   sweep's change is the damping times the undamped one, so the tolerance is scaled by
   it): plain parallel EP, damped, and Anderson with 1 to 12 stored differences (the
   package: 5, undamped); and how far apart the sampler's consecutive evaluations lie
   (Euclidean norm in the log-hyperparameters, to the last point and to the nearest of the
   last 6) with the first sweep's site change from the warm start, which together set the
   count.

Run:  OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/ep_sweeps.py [--data breast-cancer crabs pima separable] [--out FILE]
Writes benchmarks/results/ep_sweeps.md (or FILE there).
"""

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse
import pathlib
import sys
import time
import warnings

from _provenance import write_results  # noqa: E402  (benchmarks/_provenance.py)
import numpy as np
from scipy.linalg import cholesky, solve_triangular
from scipy.sparse.linalg import LinearOperator, gmres

import pymc_gpc
from pymc_gpc.approximations import ep as E
from pymc_gpc.datasets import load
from pymc_gpc.likelihoods import Probit
from pymc_gpc.backends.numba import dispatch as D
from pymc_gpc.ops import marginal as M
from pymc_gpc.ops import warm_start

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from sampling_hard import DATASETS as HARD  # noqa: E402

OUT = pathlib.Path(__file__).parent / "results" / "ep_sweeps.md"
DATASETS = {**HARD, "pima": lambda: load("pima")}
TOL = 1e-2  # APPROXIMATIONS["ep"].sampling_defaults["tol"] (approximations.registry)
JITTER = 1e-6
LIK = Probit()
TH = LIK.check_params(LIK.resolve_params(None))


def record(data, tune=300, draws=300, seed=1):
    """The hyperparameter vectors of every solve of one NUTS chain (in order), and the sampler's stats.

    The chain runs the object-mode Op (``backends.numba.dispatch.COMPILED_EP`` off), whose Python
    ``_perform`` is where the solves are recorded; the trajectory is the same kind.
    """
    log = []
    original = M.ApproxMarginalOp._perform

    def recording(self, inputs, output_storage):
        t = time.perf_counter()
        original(self, inputs, output_storage)
        log.append((np.array(inputs[3]), int(output_storage[4][0]), time.perf_counter() - t))

    model, _ = pymc_gpc.ard_classifier(data.X_train, data.y_train)
    M.ApproxMarginalOp._perform = recording
    compiled, D.COMPILED_EP = D.COMPILED_EP, False  # the compiled Op never calls _perform
    try:
        with model, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            idata = pymc_gpc.sample(draws=draws, tune=tune, chains=1, cores=1, random_seed=seed,
                                    progressbar=False, compute_convergence_checks=False)
    finally:
        M.ApproxMarginalOp._perform, D.COMPILED_EP = original, compiled
    return log, float(np.asarray(idata["sample_stats"]["n_steps"]).mean())


class ARD:
    """ard_classifier's kernel v0 exp(-sum_d w_d (x_d - x'_d)^2 / 2) + v1 (+ jitter) and its
    log-hyperparameter gradient, in NumPy, from the Op's hyperparameter vector [log w, log v0, log v1]."""

    def __init__(self, X):
        self.X, self.d = X, X.shape[1]

    def __call__(self, h):
        w, v0, v1 = np.exp(h[: self.d]), np.exp(h[self.d]), np.exp(h[self.d + 1])
        Xs = self.X * np.sqrt(w)
        sq = np.sum(Xs**2, axis=1)
        K = v0 * np.exp(-0.5 * np.maximum(sq[:, None] + sq[None] - 2.0 * Xs @ Xs.T, 0.0)) + v1
        K[np.diag_indices_from(K)] += JITTER
        return K

    def gradient(self, h, dK):
        w, v1 = np.exp(h[: self.d]), np.exp(h[self.d + 1])
        G = dK * (self(h) - v1 - JITTER * np.eye(len(self.X)))
        gw = [-0.5 * w[k] * np.sum(G * (self.X[:, k : k + 1] - self.X[None, :, k]) ** 2) for k in range(self.d)]
        return np.array([*gw, np.sum(G), v1 * np.sum(dK)])


def solve(K, y, start, tol=TOL):
    n = len(y)
    tau, nu = (np.zeros(n), np.zeros(n)) if start is None else (start[0].copy(), start[1].copy())
    out = E._parallel_compiled(LIK.kind, K, y, TH, tau, nu, 1.0, tol, 300, E.ANDERSON_MEMORY, np.inf, False)
    return out[1], (out[3], out[4])


def affine_guess(points, states, x, lam=1.0):
    """The stored states combined with the ridge least-squares weights that reproduce x from the stored points."""
    P = np.array(points)
    a = int(np.argmin(np.sum((P - x) ** 2, axis=1)))
    others = [j for j in range(len(P)) if j != a]
    if not others:
        return states[a]
    D = (P[others] - P[a]).T
    G = D.T @ D
    gam = np.linalg.solve(G + (lam * np.trace(G) / len(others) + 1e-12) * np.eye(len(others)), D.T @ (x - P[a]))
    tau = states[a][0] + sum(g * (states[j][0] - states[a][0]) for g, j in zip(gam, others))
    nu = states[a][1] + sum(g * (states[j][1] - states[a][1]) for g, j in zip(gam, others))
    return states[a] if np.min(tau) < 0.0 else (tau, nu)


def nearest_in_K(stored_K, stored_s, K):
    """The stored state whose kernel matrix is nearest K (Frobenius norm)."""
    if not stored_K:
        return None
    return stored_s[int(np.argmin([np.sum((K - Ks) ** 2) for Ks in stored_K]))]


def replay(kernel, y, points, predictor, size=6):
    """Sweeps per evaluation along ``points`` with warm starts from ``predictor``."""
    warm = warm_start.WarmStarts(size)
    stored_x, stored_s, stored_K, last, sweeps = [], [], [], None, []
    for h in points:
        if predictor == "nearest K":
            K = kernel(h)
            k, last = solve(K, y, nearest_in_K(stored_K, stored_s, K))
            sweeps.append(k)
            stored_K, stored_s = (stored_K + [K])[-size:], (stored_s + [last])[-size:]
            continue
        if predictor == "cold":
            start = None
        elif predictor == "last solution":
            start = last
        elif predictor == "WarmStarts (package)":
            st = warm.guess(h)
            start = None if st is None else (st.tau, st.nu)
        else:
            start = affine_guess(stored_x, stored_s, h) if stored_x else None
        k, last = solve(kernel(h), y, start)
        sweeps.append(k)
        warm.add(h, E.EPState(*last))
        stored_x, stored_s = (stored_x + [h])[-size:], (stored_s + [last])[-size:]
    return np.array(sweeps)


def iteration_variants(kernel, y, points, variants=((1.0, 0), (0.8, 0), (0.5, 0), (1.0, 1), (1.0, 2),
                                                  (1.0, 5), (1.0, 12), (0.8, 5))):
    """Sweeps per evaluation (package warm starts) for each (damping, Anderson memory), at
    tolerance ``TOL * damping`` (module docstring, 4); and the first sweep's change of the
    package's iteration (damping 1, memory 5)."""
    out, first = {}, []
    for damping, memory in variants:
        warm, sweeps, n = warm_start.WarmStarts(), [], len(y)
        for h in points:
            st = warm.guess(h)
            tau, nu = (np.zeros(n), np.zeros(n)) if st is None else (st.tau.copy(), st.nu.copy())
            r = E._parallel_compiled(LIK.kind, kernel(h), y, TH, tau, nu, damping, TOL * damping, 300, memory, np.inf, False)
            sweeps.append(r[1])
            if (damping, memory) == (1.0, E.ANDERSON_MEMORY) and st is not None:
                first.append(r[13])
            warm.add(h, E.EPState(r[3], r[4]))
        out[(damping, memory)] = np.array(sweeps)
    return out, np.array(first)


def step_lengths(points, size=6):
    """Norms of the steps between consecutive evaluations, and to the nearest of the last ``size``."""
    P = np.array(points)
    to_last = np.linalg.norm(np.diff(P, axis=0), axis=1)
    to_nearest = [min(np.linalg.norm(P[i] - P[j]) for j in range(i - size, i)) for i in range(size, len(P))]
    return to_last, np.array(to_nearest)


def errors_by_sweeps(kernel, y, points, every=10, ks=(2, 3, 4, 5, 6)):
    """Median and max |log Z error| and relative gradient error after k sweeps from the package's warm start."""
    warm = warm_start.WarmStarts()
    errs = {k: [] for k in ks}
    for i, h in enumerate(points):
        K = kernel(h)
        st = warm.guess(h)
        _, s = solve(K, y, None if st is None else (st.tau, st.nu))
        warm.add(h, E.EPState(*s))
        if st is None or i % every:
            continue
        ref = E.ep(K, y, LIK, tol=1e-10)
        g_ref = kernel.gradient(h, ref.dlog_z_dK)
        for k in ks:
            r = E.ep(K, y, LIK, state=st, tol=1e-14, max_sweeps=k)
            g = kernel.gradient(h, r.dlog_z_dK)
            errs[k].append((abs(r.log_z - ref.log_z), np.linalg.norm(g - g_ref) / np.linalg.norm(g_ref)))
    return {k: np.array(v) for k, v in errs.items()}


def newton_gmres(K, y, tau, nu, tol=TOL, rtol=0.03, max_iter=50, jacobian_sigma=None):
    """Factorisations Newton-GMRES on s - G(s) takes to reach the sweep tolerance (module docstring, 3),
    and the Sigma of its last iterate.

    ``jacobian_sigma``: a chord method instead, the Jacobian's global part from this fixed
    Sigma (e.g. the previous evaluation's, which the gradient's R gives for free, or the one at
    the start of the solve) rather than from each iterate's; the per-site part and the
    residual stay the iterate's own."""
    n = len(y)
    prior_var = np.diag(K).copy()

    def site_map(v, m, tau, nu):
        return E._parallel_update(LIK.kind, y, TH, v, m, tau, nu, prior_var, 1.0)[:3]

    for it in range(1, max_iter + 1):
        S = posterior_cov(K, tau)
        m, v = S @ nu, np.diag(S).copy()
        tau_g, nu_g, change = site_map(v, m, tau, nu)
        if change < tol:
            return it, S
        partials = []  # d(tau_g, nu_g) / d(v, m, tau, nu), site by site
        for j, x in enumerate((v, m, tau, nu)):
            step = 1e-6 * np.maximum(np.abs(x), 1e-3)
            args_p, args_m = [v, m, tau, nu], [v, m, tau, nu]
            args_p[j], args_m[j] = x + step, x - step
            tp, np_, _ = site_map(*args_p)
            tm, nm, _ = site_map(*args_m)
            partials.append(((tp - tm) / (2 * step), (np_ - nm) / (2 * step)))
        Sj = S if jacobian_sigma is None else jacobian_sigma
        S2 = Sj * Sj

        def residual_jacobian(x, S=Sj, S2=S2, m=m, partials=partials):
            dt, dn = x[:n], x[n:]
            d_in = (-(S2 @ dt), S @ (dn - m * dt), dt, dn)
            return x - np.concatenate([sum(p[o] * di for p, di in zip(partials, d_in)) for o in (0, 1)])

        rhs = np.concatenate([tau_g - tau, nu_g - nu])
        dx, _ = gmres(LinearOperator((2 * n, 2 * n), matvec=residual_jacobian), rhs, rtol=rtol, restart=30, maxiter=1)
        tau_x, nu_x = tau + dx[:n], nu + dx[n:]
        if np.min(tau_x) < 0.0 or not np.all(np.isfinite(dx)):
            tau_x, nu_x = tau_g, nu_g  # a plain EP step
        tau, nu = tau_x, nu_x
    return max_iter, S


def posterior_cov(K, tau):
    """Sigma = (K^-1 + diag(tau))^-1 = K - A^T A, A = L^-1 W^1/2 K."""
    sw = np.sqrt(tau)
    L = cholesky(np.eye(len(tau)) + sw[:, None] * K * sw[None], lower=True)
    A = solve_triangular(L, sw[:, None] * K, lower=True)
    return K - A.T @ A


def newton_variants(kernel, y, points):
    """Factorisations per evaluation from the package's warm starts (each variant warm-starting
    from its own converged states): Newton-GMRES, and the chords with the Jacobian's Sigma of
    the previous evaluation or of the solve's start (``newton_gmres``)."""
    out = {"Newton-GMRES": [], "chord, Sigma of the previous evaluation": [], "chord, Sigma at the start": []}
    warm = {key: warm_start.WarmStarts() for key in out}
    previous = None
    for h in points:
        K = kernel(h)
        for key, counts in out.items():
            st = warm[key].guess(h)
            start = (np.zeros(len(y)), np.zeros(len(y))) if st is None else (st.tau.copy(), st.nu.copy())
            if key == "Newton-GMRES":
                k, _ = newton_gmres(K, y, *start)
            elif key == "chord, Sigma at the start":
                k, _ = newton_gmres(K, y, *start, jacobian_sigma=posterior_cov(K, start[0]))
            else:
                jac = posterior_cov(K, start[0]) if previous is None else previous
                k, previous = newton_gmres(K, y, *start, jacobian_sigma=jac)
            counts.append(k)
            _, s = solve(K, y, None if st is None else (st.tau, st.nu))  # the next warm start: a converged state
            warm[key].add(h, E.EPState(*s))
    return {key: np.array(v) for key, v in out.items()}


def study(name, n_replay=1000, n_newton=300, n_variants=500):
    data = DATASETS[name]()
    log, steps = record(data)
    y = np.asarray(data.y_train, dtype=float)
    kernel = ARD(np.asarray(data.X_train, dtype=float))
    points = [h for h, _, _ in log[len(log) // 2 :]][:n_replay]
    in_sampler = np.array([k for _, k, _ in log[len(log) // 2 :]])
    ms = 1e3 * np.median([t for _, _, t in log[len(log) // 2 :]])
    rows = {p: replay(kernel, y, points, p)
            for p in ("cold", "last solution", "WarmStarts (package)", "affine (6 points)", "nearest K")}
    variants, first = iteration_variants(kernel, y, points[:n_variants])
    to_last, to_nearest = step_lengths(points)
    errs = errors_by_sweeps(kernel, y, points)
    anderson = rows["WarmStarts (package)"][:n_newton]
    newton = newton_variants(kernel, y, points[:n_newton])
    return dict(name=data.name, n=len(y), d=kernel.d, evals=len(log), steps=steps, ms=ms,
                sweeps_sampler=in_sampler, rows=rows, errs=errs, newton=newton, anderson=anderson,
                variants=variants, first=first, to_last=to_last, to_nearest=to_nearest)


def fmt(s):
    return f"{s.mean():.2f} / {np.median(s):.0f} / {np.percentile(s, 90):.0f} / {s.max()}"


def report(results):
    text = ["EP sweeps per evaluation along one NUTS chain (300 + 300, seed 1), replayed at tol 1e-2; "
            "`python benchmarks/ep_sweeps.py` (module docstring).", "",
            "| data | n x d | evaluations | NUTS steps / draw | ms / solve in the sampler | sweeps in the sampler (mean / median / p90 / max) |",
            "|---|---|---|---|---|---|"]
    text += [f"| {r['name']} | {r['n']} x {r['d']} | {r['evals']} | {r['steps']:.1f} | {r['ms']:.2f} | {fmt(r['sweeps_sampler'])} |"
             for r in results]
    text += ["", "Replayed sweeps by warm-start predictor (mean / median / p90 / max):", "",
             "| data | " + " | ".join(results[0]["rows"]) + " |", "|---" * (1 + len(results[0]["rows"])) + "|"]
    text += [f"| {r['name']} | " + " | ".join(fmt(s) for s in r["rows"].values()) + " |" for r in results]
    ks = list(results[0]["errs"])
    text += ["", "After k sweeps from the package's warm start: |log Z error| and relative error of the "
             "log-hyperparameter gradient, median (max), against a 1e-10 solve (every 10th evaluation):", "",
             "| data | " + " | ".join(f"k = {k}" for k in ks) + " |", "|---" * (1 + len(ks)) + "|"]
    for r in results:
        cells = []
        for k in ks:
            e = r["errs"][k]
            cells.append(f"{np.median(e[:, 0]):.0e} ({e[:, 0].max():.0e}); grad {np.median(e[:, 1]):.0e} ({e[:, 1].max():.0e})")
        text.append(f"| {r['name']} | " + " | ".join(cells) + " |")
    text += ["", "Newton-GMRES against Anderson-accelerated parallel EP (factorisations to tol 1e-2, first 300 replayed evaluations, mean / median / p90 / max):", "",
             "| data | Anderson sweeps | " + " | ".join(f"{k} factorisations" for k in results[0]["newton"]) + " |",
             "|---" * (2 + len(results[0]["newton"])) + "|"]
    text += [f"| {r['name']} | {fmt(r['anderson'])} | " + " | ".join(fmt(v) for v in r["newton"].values()) + " |"
             for r in results]
    keys = list(results[0]["variants"])
    text += ["", "The iteration (module docstring, 4): sweeps per evaluation (mean / max) from the package's warm "
             "starts, first 500 replayed evaluations, tolerance 1e-2 x damping; columns: damping, Anderson memory "
             "(0: none; the package: 1.0, 5):", "",
             "| data | " + " | ".join(f"{d}, {m}" for d, m in keys) + " |", "|---" * (1 + len(keys)) + "|"]
    text += [f"| {r['name']} | " + " | ".join(f"{v.mean():.2f} / {v.max()}" for v in r["variants"].values()) + " |"
             for r in results]
    text += ["", "How far the warm start is: norms of the steps between evaluations in the log-hyperparameters "
             "(median, 10th-90th percentile) and the first sweep's site change from the package's warm start "
             "(median, 90th percentile):", "",
             "| data | to the last evaluation | to the nearest of the last 6 | first sweep's change |", "|---|---|---|---|"]
    for r in results:
        cells = [f"{np.median(v):.2f} ({np.percentile(v, 10):.2f}-{np.percentile(v, 90):.2f})" for v in (r["to_last"], r["to_nearest"])]
        text.append(f"| {r['name']} | {cells[0]} | {cells[1]} | {np.median(r['first']):.3f} ({np.percentile(r['first'], 90):.3f}) |")
    return text


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", nargs="+", default=["breast-cancer", "crabs", "separable", "pima"], choices=list(DATASETS))
    parser.add_argument("--out", default=OUT.name, help="file name under benchmarks/results")
    args = parser.parse_args()
    results = []
    for name in args.data:
        t = time.perf_counter()
        results.append(study(name))
        print(f"{name}: {time.perf_counter() - t:.0f} s", flush=True)
    text = report(results)
    write_results((OUT.parent / args.out), "\n".join(text) + "\n")
    print("\n".join(text))


if __name__ == "__main__":
    main()
