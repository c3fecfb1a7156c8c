"""Can a hand-blocked Cholesky beat LAPACK's at EP's sizes? (issue 18)

An EP sweep at n = 200-400 is one Cholesky factorisation and one triangular inverse of B
(``structures.dense.factors``), which OpenBLAS runs at a fraction of its dgemm rate at these
sizes on one thread. This compares, in double and single precision:

* ``lapack.potrf_lower`` (LAPACK's dpotrf / spotrf, as the package calls it);
* a right-looking blocked Cholesky with block size nb: dpotrf on each nb x nb diagonal
  block, dtrsm for the panel below it, dsyrk for the trailing matrix (BLAS-3 for all but
  the diagonal blocks);
* ``lapack.inv_lower`` (the package's blocked triangular inverse), for scale.

Every time is the median of 300 calls, each copying B into a work array first (as the
package's factorisations do). One run; the machine's speed drifts, so compare within a row.

Run:  OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/cholesky_blocked.py
Writes benchmarks/results/cholesky_blocked.md.
"""

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import pathlib
import time

from _provenance import write_results  # noqa: E402  (benchmarks/_provenance.py)
import numpy as np
from numba import njit

from pymc_gpc.numerics import lapack
from pymc_gpc.numerics.lapack import _routine

OUT = pathlib.Path(__file__).parent / "results" / "cholesky_blocked.md"
BLOCKS = (16, 32, 48, 64, 96)
_dpotrf_at = _routine("lapack", "dpotrf", 5, (2,))
_spotrf_at = _routine("lapack", "spotrf", 5, (2,))
_dtrsm_at = _routine("blas", "dtrsm", 11, (7, 9))
_strsm_at = _routine("blas", "strsm", 11, (7, 9))
_dsyrk_at = _routine("blas", "dsyrk", 10, (5, 8))
_ssyrk_at = _routine("blas", "ssyrk", 10, (5, 8))


@njit
def blocked_cholesky(a, nb):
    """a <- its lower Cholesky factor (Fortran-ordered; the strict upper triangle untouched), right-looking, blocks of nb."""
    n = a.shape[0]
    lo, right = np.array([76], np.uint8), np.array([82], np.uint8)  # 'L', 'R'
    trans, no = np.array([84], np.uint8), np.array([78], np.uint8)  # 'T', 'N'
    ld, info = np.array([n], np.int32), np.zeros(1, np.int32)
    one, minus = np.ones(1, a.dtype), -np.ones(1, a.dtype)
    bb, rr = np.zeros(1, np.int32), np.zeros(1, np.int32)
    base, sz = a.ctypes.data, a.itemsize
    for k in range(0, n, nb):
        b = min(nb, n - k)
        r = n - k - b
        bb[0], rr[0] = b, r
        diag, panel, trail = base + sz * (k + k * n), base + sz * (k + b + k * n), base + sz * (k + b + (k + b) * n)
        if sz == 4:
            _spotrf_at(lo.ctypes, bb.ctypes, diag, ld.ctypes, info.ctypes)
        else:
            _dpotrf_at(lo.ctypes, bb.ctypes, diag, ld.ctypes, info.ctypes)
        if info[0] != 0:
            return info[0] + k
        if r > 0:
            if sz == 4:
                _strsm_at(right.ctypes, lo.ctypes, trans.ctypes, no.ctypes, rr.ctypes, bb.ctypes, one.ctypes,
                          diag, ld.ctypes, panel, ld.ctypes)
                _ssyrk_at(lo.ctypes, no.ctypes, rr.ctypes, bb.ctypes, minus.ctypes, panel, ld.ctypes,
                          one.ctypes, trail, ld.ctypes)
            else:
                _dtrsm_at(right.ctypes, lo.ctypes, trans.ctypes, no.ctypes, rr.ctypes, bb.ctypes, one.ctypes,
                          diag, ld.ctypes, panel, ld.ctypes)
                _dsyrk_at(lo.ctypes, no.ctypes, rr.ctypes, bb.ctypes, minus.ctypes, panel, ld.ctypes,
                          one.ctypes, trail, ld.ctypes)
    return 0


@njit
def _copy(B, out):
    for j in range(B.shape[1]):
        for i in range(B.shape[0]):
            out[i, j] = B[i, j]


@njit
def _blocked(B, out, nb):
    _copy(B, out)
    return blocked_cholesky(out, nb)


@njit
def _lapack(B, out):
    _copy(B, out)
    return lapack.potrf_lower(out)


@njit
def _inverse(L, out):
    _copy(L, out)
    return lapack.inv_lower(out)


def median_ms(f, reps=300):
    f()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        f()
        times.append(time.perf_counter() - t)
    return 1e3 * float(np.median(times))


def b_matrix(n, rng):
    """B = I + K for a squared-exponential K of amplitude 50 on 30 standard-normal inputs."""
    X = rng.normal(size=(n, 30))
    return np.asfortranarray(50.0 * np.exp(-0.5 * ((X[:, None] - X[None]) ** 2).sum(-1) / 30) + np.eye(n))


def main():
    rng = np.random.default_rng(0)
    lines = ["Right-looking blocked Cholesky (dpotrf / dtrsm / dsyrk on blocks of nb) against LAPACK's potrf, "
             "ms (median of 300 calls, copy included); one thread. `python benchmarks/cholesky_blocked.py`.", "",
             "| precision | n | LAPACK potrf | " + " | ".join(f"blocked, nb = {nb}" for nb in BLOCKS)
             + " | best blocked / LAPACK | inv_lower (for scale) |",
             "|---" * (5 + len(BLOCKS)) + "|"]
    for n in (200, 300, 400):
        B = b_matrix(n, rng)
        for dtype in (np.float64, np.float32):
            Bd = np.asfortranarray(B.astype(dtype))
            out = np.asfortranarray(np.empty_like(Bd))
            _lapack(Bd, out)
            reference = np.tril(out)
            ref_ms = median_ms(lambda: _lapack(Bd, out))
            blocked = []
            for nb in BLOCKS:
                _blocked(Bd, out, nb)
                tol = 1e-4 if dtype == np.float32 else 1e-10
                assert np.allclose(np.tril(out), reference, rtol=tol, atol=tol * np.abs(reference).max())
                blocked.append(median_ms(lambda: _blocked(Bd, out, nb)))
            L = np.asfortranarray(reference)
            inv_ms = median_ms(lambda: _inverse(L, out))
            lines.append(f"| {np.dtype(dtype).name} | {n} | {ref_ms:.3f} | " + " | ".join(f"{t:.3f}" for t in blocked)
                         + f" | {min(blocked) / ref_ms:.2f} | {inv_ms:.3f} |")
            print(lines[-1], flush=True)
    write_results(OUT, "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
