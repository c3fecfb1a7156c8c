"""FITC at n = 20,000, m = 100: evidence + gradient (EP and Laplace) within 1 GB; several
classes (c = 5, softmax Laplace) within 1.5 GB.

Run in a fresh Python process whose peak resident memory (``VmHWM`` of
/proc/self/status, imports included) is read at the end: a single dense
20,000 x 20,000 matrix would take 3.2 GB. Not ``ru_maxrss``: Linux carries the parent's
peak over exec into it, so under a large pytest worker it read 1.4-1.7 GB. A first
process at n = 500 fills numba's disk cache, so that the measured process loads
compiled code.
"""

import json
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]

SCRIPT = r"""
import json, resource, sys
import numpy as np
from pymc_gpc import ep, laplace, likelihoods as L
from pymc_gpc.structures import FITCPrior

rng = np.random.default_rng(0)
n, m, d = int(sys.argv[1]), 100, 3
X = rng.normal(size=(n, d))
y = np.where(X[:, 0] + 0.5 * X[:, 1] ** 2 - 0.5 + 0.3 * rng.normal(size=n) > 0, 1.0, -1.0)
Xu = X[rng.choice(n, m, replace=False)]

def k(A, B):
    return 2.0 * np.exp(-0.5 * ((A[:, None, :] - B[None, :, :]) ** 2).sum(-1) / 1.5**2)

prior = FITCPrior(k(Xu, Xu) + 1e-6 * np.eye(m), k(Xu, X), np.full(n, 2.0 + 1e-6))
out = {}
for name, run in (("ep", ep), ("laplace", laplace)):
    res = run(prior, y, L.Probit())
    g = res.dlog_z_dK
    out[name] = [float(res.log_z), bool(res.converged), [list(a.shape) for a in g],
                 bool(all(np.all(np.isfinite(a)) for a in g))]
with open("/proc/self/status") as status:
    hwm = [line for line in status if line.startswith("VmHWM:")]
out["peak_mb"] = (int(hwm[0].split()[1]) if hwm else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) / 1024
print(json.dumps(out))
"""


def test_evidence_and_gradient_at_n_20000_stay_under_1_gb():
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    for n in (500, 20_000):  # the first run compiles (or loads) the numba kernels
        proc = subprocess.run([sys.executable, "-c", SCRIPT, str(n)], capture_output=True, text=True, env=env,
                              cwd=ROOT, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    for name in ("ep", "laplace"):
        log_z, converged, shapes, finite = out[name]
        assert converged and finite and log_z < 0
        assert shapes == [[100, 100], [100, 20_000], [20_000]]
    assert out["peak_mb"] < 1024, out


MULTICLASS_SCRIPT = r"""
import json, sys
import numpy as np
from pymc_gpc import likelihoods as L, softmax_laplace
from pymc_gpc.structures import MulticlassFITCPrior

rng = np.random.default_rng(1)
n, m, c, d = int(sys.argv[1]), 100, 5, 3
X = rng.normal(size=(n, d))
y = np.argmax(X @ rng.normal(size=(d, c)) + 0.5 * rng.normal(size=(n, c)), axis=1).astype(float)
Xu = X[rng.choice(n, m, replace=False)]

def k(A, B, ls):
    return 2.0 * np.exp(-0.5 * ((A[:, None, :] - B[None, :, :]) ** 2).sum(-1) / ls**2)

ls = np.linspace(1.0, 2.0, c)
prior = MulticlassFITCPrior(np.stack([k(Xu, Xu, l) + 1e-6 * np.eye(m) for l in ls]),
                            np.stack([k(Xu, X, l) for l in ls]), np.full((c, n), 2.0 + 1e-6))
res = softmax_laplace(prior, y, L.Softmax())
g = res.dlog_z_dK
out = {"log_z": float(res.log_z), "converged": bool(res.converged), "shapes": [list(a.shape) for a in g],
       "finite": bool(all(np.all(np.isfinite(a)) for a in g))}
with open("/proc/self/status") as status:
    out["peak_mb"] = int([line for line in status if line.startswith("VmHWM:")][0].split()[1]) / 1024
print(json.dumps(out))
"""


def test_multiclass_evidence_and_gradient_at_c_5_n_20000_stay_under_1_5_gb():
    """Softmax Laplace with each class's FITC prior (c = 5, n = 20,000, m = 100): evidence and
    gradient in every class's K_uu, K_uf, diag K_ff within 1.5 GB (a dense c n x c n matrix
    would take 80 GB, one n x n 3.2 GB)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    for n in (300, 20_000):  # the first run compiles (or loads) the numba kernels
        proc = subprocess.run([sys.executable, "-c", MULTICLASS_SCRIPT, str(n)], capture_output=True, text=True,
                              env=env, cwd=ROOT, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["converged"] and out["finite"] and out["log_z"] < 0
    assert out["shapes"] == [[5, 100, 100], [5, 100, 20_000], [5, 20_000]]
    assert out["peak_mb"] < 1536, out
