"""Seeded-fault (mutation) check of the numerics: does some CPU test fail for each fault?

Each fault in ``FAULTS`` is one exact source snippet of a numerics module and its
replacement (a sign flipped, a factor dropped, a marginal put for a cavity, ...). For
every fault the script copies the package and its tests to a temporary directory, applies
the fault there (the working tree is never touched), runs the tests named for it
(``pytest -x``: the first failure kills it) with the copy first on the path, and records
whether the fault was killed or survived. Before the faults it runs the same selections
on the unmodified copy, which must pass (else a "kill" would mean nothing). A snippet
that no longer occurs exactly once in its file stops the script: the list must follow
the code.

    .venv/bin/python scripts/mutation.py                 # every fault; writes the results file
    .venv/bin/python scripts/mutation.py --only laplace-loo-sign softmax-loo-marginal
    .venv/bin/python scripts/mutation.py --list
    .venv/bin/python scripts/mutation.py --only gp-container-labels-ge --update   # re-run rows in place

Results: ``benchmarks/results/mutation.md`` (rewritten in place, headed by its
provenance). Exit status 1 if any fault survived or a run errored.

Compilation. The package's numba cache is keyed by a hash of every module
(``pymc_gpc._numba_cache.STAMP``), so a changed module recompiles everything its tests
call. A fault in plain Python code cannot change any compiled function, so for those the
copy's stamp is pinned to the unmodified package's (the copy's ``_numba_cache.py`` reads
it from the environment) and the baseline's compiled code is reused; a fault inside a
``@njit`` function (detected from the decorator of the enclosing ``def``) runs with the
natural stamp and recompiles. Add a fault for every new formula (ordinal likelihoods,
new structures).
"""

import argparse
import datetime
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOO = "tests/approximations/test_loo_ground_truth.py"
MULTI = "tests/approximations/test_multiclass_ground_truth.py"


@dataclass
class Fault:
    name: str
    path: str  # relative to the repository root
    old: str  # must occur exactly once in the file
    new: str
    tests: tuple  # pytest arguments selecting the tests that must fail
    what: str


FAULTS = [
    # -- binary leave-one-out terms ------------------------------------------------------
    Fault("laplace-loo-sign", "pymc_gpc/approximations/laplace.py",
          "nu = w * f + d1", "nu = w * f - d1", (LOO, "-k", "laplace"),
          "binary LA-LOO: the cavity's first-derivative term with its sign flipped"),
    Fault("laplace-loo-half-W", "pymc_gpc/approximations/laplace.py",
          "tau_c = cavity_precision(var, w, k_diag)", "tau_c = cavity_precision(var, 0.5 * w, k_diag)",
          (LOO, "-k", "laplace"), "binary LA-LOO: half the site precision removed from the marginal"),
    Fault("ep-cavity-is-marginal", "pymc_gpc/approximations/ep.py",
          "return np.maximum(1.0 / var - tau, floor)", "return np.maximum(1.0 / var, floor)",
          (LOO, "-k", "ep_loo and fitc"), "EP (FITC path): the cavity precision taken as the marginal's"),
    Fault("ep-tilted-curvature", "pymc_gpc/likelihoods/binary.py",
          "d2mu = -r * (z + r) / v", "d2mu = -r * (z - r) / v",
          (LOO, "-k", "ep_loo and Probit-dense"), "probit-family tilted moments: d^2 log Z / d mu^2 wrong"),
    Fault("meanfield-ensemble-var", "pymc_gpc/approximations/meanfield.py",
          "v = s2 + s2 * s2 * t.d2log_z", "v = s2 + s2 * t.d2log_z",
          (LOO, "-k", "ensemble"), "mean field I: the tilted variance of q_i"),
    Fault("meanfield-naive-cavity", "pymc_gpc/approximations/meanfield.py",
          "c = K @ alpha - kd * alpha", "c = K @ alpha",
          (LOO, "-k", "naive"), "naive mean field: the cavity mean includes the site itself"),
    Fault("meanfield-floor-no-gamma", "pymc_gpc/approximations/meanfield.py",
          "(np.abs(gamma) * (abs_A @ np.abs(alpha))", "((abs_A @ np.abs(alpha))",
          ("tests/approximations/test_meanfield_rounding.py",),
          "mean field: the rounding floor without the slope d alpha / dc of the site map"),
    Fault("meanfield-floor-unscaled", "pymc_gpc/approximations/meanfield.py",
          "return eps * scale * (", "return scale * (",
          ("tests/approximations/test_meanfield_rounding.py",),
          "mean field: the rounding floor without machine epsilon (an early stop passes as converged)"),
    Fault("adf-cavity-variance", "pymc_gpc/approximations/adf.py",
          "s2 = K[i, i] + _c_times_k(C, K, i, m, s)", "s2 = K[i, i] - _c_times_k(C, K, i, m, s)",
          (LOO, "-k", "adf"), "ADF: the cavity variance's update term with its sign flipped"),
    Fault("fitc-var-diag", "pymc_gpc/structures/fitc.py",
          "var = self.g * self.prior.lam + self.g**2 * self._c_sq()",
          "var = self.g * self.prior.lam + self.g * self._c_sq()",
          (LOO, "-k", "fitc"), "FITC posterior: marginal variances with g for g^2"),
    Fault("fitc-predictive-var", "pymc_gpc/structures/fitc.py",
          'var = k_diag_star - np.einsum("ij,ij->j", Vs, Vs) + np.einsum("ij,ij->j", Cs, Cs)',
          'var = k_diag_star - np.einsum("ij,ij->j", Vs, Vs) + 0.9 * np.einsum("ij,ij->j", Cs, Cs)',
          ("tests/structures/test_fitc.py", "-k", "prediction_matches_dense"), "FITC predictive variance"),
    Fault("dense-predictive-var", "pymc_gpc/structures/dense.py",
          'var = k_diag - np.einsum("ij,ij->j", V, V)', 'var = k_diag - 0.9 * np.einsum("ij,ij->j", V, V)',
          ("tests/approximations/test_ep_schedules.py", "-k", "predictions_match_dense"), "binary dense predictive variance"),
    # -- multi-class ----------------------------------------------------------------------
    Fault("softmax-loo-marginal", "pymc_gpc/approximations/softmax_laplace.py",
          "C = np.linalg.solve(A, S)", "C = S.copy()",
          (MULTI, "-k", "softmax_la_loo"), "softmax LA-LOO: the cavity covariance replaced by the marginal"),
    Fault("softmax-loo-gradient-sign", "pymc_gpc/approximations/softmax_laplace.py",
          "(W @ F[:, :, None] + G[:, :, None])", "(W @ F[:, :, None] - G[:, :, None])",
          (MULTI, "-k", "softmax_la_loo"), "softmax LA-LOO: the site location's gradient term sign-flipped"),
    Fault("multiclass-draws-half-sd", "pymc_gpc/likelihoods/multiclass.py",
          "Zt = standard_draws(c, size).T", "Zt = 0.5 * standard_draws(c, size).T",
          (MULTI, "-k", "predict"), "multi-class predictive draws at half the standard deviation"),
    Fault("multiclass-expected-prob-half-sd", "pymc_gpc/likelihoods/multiclass.py",
          "return _softmax_expected_prob(np.asarray(y, dtype=np.int64), mean, _cov_factor(cov), Z)",
          "return _softmax_expected_prob(np.asarray(y, dtype=np.int64), mean, 0.5 * _cov_factor(cov), Z)",
          (MULTI, "-k", "expected_prob"), "softmax expected_prob (LA-LOO) at half the standard deviation"),
    Fault("coupled-predictive-cov-0.9", "pymc_gpc/structures/multiclass.py",
          "            return mean, cov\n", "            return mean, 0.9 * cov\n",
          (MULTI, "-k", "predictive"), "CoupledBlockPosterior's predictive covariance scaled by 0.9"),
    Fault("coupled-full-cov-own-term", "pymc_gpc/structures/multiclass.py",
          "cov[k, :, k, :] += k_star[k] - K_cross[k].T @ P[k]", "cov[k, :, k, :] += k_star[k] - 0.9 * K_cross[k].T @ P[k]",
          (MULTI, "-k", "predictive"), "CoupledBlockPosterior's joint predictive covariance, own-class term"),
    Fault("site-covariances-own", "pymc_gpc/structures/multiclass.py",
          "S[:, np.arange(c), np.arange(c)] += own.T", "S[:, np.arange(c), np.arange(c)] += 0.9 * own.T",
          (MULTI, "-k", "softmax_laplace_predictive"), "multi-class site covariances' own-class term"),
    Fault("nested-ep-loo-cross-term", "pymc_gpc/approximations/multinomial_probit_ep.py",
          "x_m = np.linalg.solve(np.transpose(A, (0, 2, 1)), mt[:, :, None])[:, :, 0]",
          "x_m = np.linalg.solve(A, mt[:, :, None])[:, :, 0]",
          (MULTI, "-k", "nested_ep"), "nested EP LOO: the cross term with A^-1 for A^-T (the bug fixed here)"),
    Fault("nested-ep-cavity-mean", "pymc_gpc/approximations/multinomial_probit_ep.py",
          "m = np.linalg.solve(A, mean.T[:, :, None] - S @ H[:, :, None])[:, :, 0]",
          "m = np.linalg.solve(A, mean.T[:, :, None] + S @ H[:, :, None])[:, :, 0]",
          (MULTI, "-k", "nested_ep"), "nested EP: the cavity mean's site term sign-flipped"),
    Fault("multiclass-predictive-mean", "pymc_gpc/structures/multiclass.py",
          "mean = _times(np.transpose(K_cross, (0, 2, 1)), a)", "mean = 0.9 * _times(np.transpose(K_cross, (0, 2, 1)), a)",
          (MULTI, "-k", "predictive"), "CoupledBlockPosterior's predictive mean scaled by 0.9"),
    Fault("coupled-logdet-weight-sum", "pymc_gpc/structures/multiclass.py",
          "        - 0.5 * float(np.sum(np.log(self.s))))", "        + 0.5 * float(np.sum(np.log(self.s))))",
          ("tests/approximations/test_multiclass.py", "-k", "multinomial_probit_ep_evidence_brute_force"),
          "coupled log-determinant: the -(1/2) sum log s_i term sign-flipped (zero for the softmax)"),
    Fault("nested-ep-outer-location", "pymc_gpc/approximations/multinomial_probit_ep.py",
          "h[y, rows] = snu / s1", "h[y, rows] = snu / (s1 + 1.0)",
          (MULTI, "-k", "nested_ep"), "nested EP: the outer site's location at the observed class"),
    Fault("fitc-weights-sign", "pymc_gpc/structures/fitc.py",
          "            b = gv - self.d * Vt_z", "            b = gv + self.d * Vt_z",
          (LOO, "-k", "fitc"), "FITC posterior: the weights' low-rank correction sign-flipped"),
    Fault("dense-predictive-mean", "pymc_gpc/structures/dense.py",
          "        self._exact()\n        mean = K_cross.T @ a\n", "        self._exact()\n        mean = 0.9 * K_cross.T @ a\n",
          ("tests/approximations/test_ep_schedules.py", "-k", "predictions_match_dense"), "binary dense predictive mean scaled by 0.9"),
    Fault("multinomial-probit-scale", "pymc_gpc/likelihoods/multiclass.py",
          "d = F[k][None] - np.delete(F, k, axis=0)", "d = 0.9 * (F[k][None] - np.delete(F, k, axis=0))",
          ("tests/approximations/test_multiclass.py", MULTI, "-k",
           "zero_covariance or multinomial_probit_likelihood or multinomial_probit_predict"),
          "multinomial probit: class differences scaled"),
    # -- issue 58's survivors: label coding, the posterior's coordinates, the ordinal label check --
    Fault("gp-container-labels-ge", "pymc_gpc/gp/labels.py",
          "return pt.switch(pt.gt(values, 0), 1.0, -1.0)", "return pt.switch(pt.ge(values, 0), 1.0, -1.0)",
          ("tests/gp/test_gp_label_coding.py",), "labels from a pm.Data container coded with >= 0 (class 0 as +1)"),
    Fault("idata-keeps-unused-coords", "pymc_gpc/idata.py",
          'idata["posterior"] = _drop_unused_coords(post.drop_vars(drop))', 'idata["posterior"] = post.drop_vars(drop)',
          ("tests/test_idata_coords.py",), "the posterior keeps the LOO terms' observation coordinate"),
    Fault("ordinal-label-check-loose", "pymc_gpc/likelihoods/ordinal.py",
          "(y >= 0) & (y <= k - 1))", "(y >= 0) & (y <= k))",
          ("tests/likelihoods/test_ordinal_labels.py",), "ordinal labels: the label K (no such class) accepted"),
    Fault("ordered-logit-unguarded-newton", "pymc_gpc/numerics/logit_tilted.py",
          "    if not (lo < m_new < hi):\n        m_new = 0.5 * (lo + hi)\n",
          "    if not (m_new == m_new):\n        m_new = 0.5 * (lo + hi)\n",
          ("tests/likelihoods/test_ordered_logit_large_variance.py",),
          "logit tilted moments (ordered logit, logistic): the mode's Newton steps no longer kept in the bracket"),
]


STAMP_LINE = "STAMP = _package_stamp()"
PINNED = "PYMC_GPC_MUTATION_STAMP"


def copy_tree(dest):
    """The package, its tests and pyproject.toml; the copy's numba stamp may be pinned (``PINNED``)."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache", ".hypothesis")
    for name in ("pymc_gpc", "tests"):
        shutil.copytree(ROOT / name, dest / name, ignore=ignore)
    shutil.copy2(ROOT / "pyproject.toml", dest / "pyproject.toml")
    cache = dest / "pymc_gpc" / "_numba_cache.py"
    text = cache.read_text()
    if text.count(STAMP_LINE) != 1:
        sys.exit(f"pymc_gpc/_numba_cache.py has no line {STAMP_LINE!r}: update scripts/mutation.py")
    # the copy's own stamp, before this edit: the unmodified package's hash, seen from the copy
    cache.write_text(text.replace(STAMP_LINE, f"STAMP = os.environ.get({PINNED!r}) or _package_stamp()"))


def in_compiled_function(path, old):
    """Whether the snippet lies in a function decorated with @njit: the nearest ``def`` above
    it with less indentation than the snippet's line, and that def's decorators."""
    text = (ROOT / path).read_text()
    at = text.index(old)
    before = text[:at].split("\n")
    line = before[-1] + text[at:].split("\n")[0]
    indent = len(line) - len(line.lstrip())
    for k in range(len(before) - 2, -1, -1):
        stripped = before[k].lstrip()
        if stripped.startswith("def ") and len(before[k]) - len(stripped) < indent:
            j = k - 1
            while j >= 0 and before[j].strip().startswith("@"):
                if "jit" in before[j]:
                    return True
                j -= 1
            return False
    return False


def run_tests(work, tests, timeout, stamp=None):
    env = dict(os.environ, PYTHONPATH=str(work), OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
               MKL_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1")
    env.pop(PINNED, None)
    if stamp:
        env[PINNED] = stamp
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-n", "0", "-p", "no:cacheprovider", *tests]
    start = time.perf_counter()
    try:
        out = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=timeout)
        code, text = out.returncode, out.stdout + out.stderr
    except subprocess.TimeoutExpired as e:
        code, text = -1, f"timeout after {timeout} s\n{e.stdout or ''}"
    failed = re.findall(r"^FAILED (\S+)", text, flags=re.M)
    return code, failed, time.perf_counter() - start, text


def provenance(argv):
    def git(*a):
        return subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True).stdout.strip()

    dirty = " (with uncommitted changes)" if git("status", "--porcelain", "--", "pymc_gpc", "tests") else ""
    return [
        f"- command: `{' '.join(['.venv/bin/python', 'scripts/mutation.py', *argv])}`",
        f"- commit: {git('rev-parse', '--short', 'HEAD')}{dirty}",
        f"- date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC",
        f"- machine: {platform.machine()}, {os.cpu_count()} cores, {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}; tests run with -n 0 and one BLAS thread",
    ]


def merged(text, lines, prov):
    """The results file ``text`` with the table rows of ``lines`` (a partial run) put in place
    of the rows of the same faults (new faults appended), the count restated and the
    partial run's provenance added under the file's own."""
    def name(row):
        return row.split("|")[1].strip()

    new_rows = {name(r): r for r in lines if r.startswith("| ") and not r.startswith("| fault")}
    out, seen = [], set()
    for row in text.rstrip("\n").split("\n"):
        if row.startswith("| ") and name(row) in new_rows:
            row = new_rows[name(row)]
            seen.add(name(row))
        out.append(row)
    out += [r for n, r in new_rows.items() if n not in seen]
    rows = [r for r in out if r.startswith("| ") and not r.startswith("| fault")]
    killed = sum(r.split("|")[4].strip() == "killed" for r in rows)
    out = [re.sub(r"^\d+ of \d+ faults killed", f"{killed} of {len(rows)} faults killed", r) for r in out]
    at = next(i for i, r in enumerate(out) if r.startswith("- machine:")) + 1
    note = [f"- re-run of {', '.join(new_rows)}:"] + ["  " + p for p in prov]
    return "\n".join(out[:at] + note + out[at:]) + "\n"


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", metavar="NAME", help="run these faults only")
    parser.add_argument("--list", action="store_true", help="list the faults and exit")
    parser.add_argument("--out", default=str(ROOT / "benchmarks/results/mutation.md"))
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per pytest run")
    parser.add_argument("--update", action="store_true",
                        help="with --only: replace (or add) those faults' rows in the results file")
    args = parser.parse_args(argv)
    faults = [f for f in FAULTS if not args.only or f.name in args.only]
    if args.list:
        for f in FAULTS:
            print(f"{f.name:34s} {f.path}: {f.what}")
        return 0
    for f in faults:  # the list must follow the code
        count = (ROOT / f.path).read_text().count(f.old)
        if count != 1:
            sys.exit(f"fault {f.name}: its snippet occurs {count} times in {f.path}, not once: update FAULTS")
    prov = provenance(argv)  # the code as copied now
    work = Path(tempfile.mkdtemp(prefix="pymc_gpc_mutation_"))
    try:
        copy_tree(work)
        stamp = subprocess.run([sys.executable, "-c", "from pymc_gpc._numba_cache import STAMP; print(STAMP)"],
                               cwd=work, env=dict(os.environ, PYTHONPATH=str(work)), capture_output=True,
                               text=True, check=True).stdout.strip()
        rows, ok = [], True
        by_file = {}  # the selections pass unmodified: one run per test file, its -k's joined
        for f in faults:
            file, *rest = f.tests
            by_file.setdefault(file, []).append(rest[1] if rest[:1] == ["-k"] else None)
        for file, ks in by_file.items():
            tests = (file,) if None in ks else (file, "-k", " or ".join(f"({k})" for k in dict.fromkeys(ks)))
            code, failed, secs, text = run_tests(work, tests, args.timeout, stamp)
            print(f"baseline {' '.join(tests)}: exit {code} ({secs:.0f} s)", flush=True)
            if code != 0:
                print(text[-3000:])
                sys.exit("a selection fails on the unmodified code: fix the tests first")
        for f in faults:
            target = work / f.path
            original = target.read_text()
            target.write_text(original.replace(f.old, f.new))
            compiled = in_compiled_function(f.path, f.old)
            try:
                code, failed, secs, text = run_tests(work, f.tests, args.timeout, None if compiled else stamp)
            finally:
                target.write_text(original)
            status = "killed" if code == 1 and failed else ("survived" if code == 0 else f"error (exit {code})")
            ok = ok and status == "killed"
            print(f"{f.name}{' (compiled)' if compiled else ''}: {status} in {secs:.0f} s {failed[:1]}", flush=True)
            if status.startswith("error"):
                print(text[-2000:])
            rows.append((f, status, failed[0] if failed else "-", secs))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    killed = sum(r[1] == "killed" for r in rows)
    lines = ["# Seeded faults in the numerics (mutation check)", "", *prov, "",
             f"{killed} of {len(rows)} faults killed (a fault is killed when a test of its selection fails;",
             "`pytest -x` stops at the first failure, which is the test named). Each fault is an exact",
             "snippet of the module and its replacement, listed in `scripts/mutation.py`.", "",
             "| fault | module | what | result | first failing test | seconds |",
             "|---|---|---|---|---|---|"]
    for f, status, test, secs in rows:
        lines.append(f"| {f.name} | {f.path.removeprefix('pymc_gpc/')} | {f.what} | {status} | `{test}` | {secs:.0f} |")
    if not args.only:
        Path(args.out).write_text("\n".join(lines) + "\n")
        print(f"wrote {args.out}")
    elif args.update:
        Path(args.out).write_text(merged(Path(args.out).read_text(), lines, prov))
        print(f"updated {args.out}")
    else:
        print("\n".join(lines))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
