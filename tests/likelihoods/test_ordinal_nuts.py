"""NUTS on the EP marginal of an ordinal GP against a long run of the exact model.

Ground truth: ``data/ordinal_nuts_reference.json``, written by
``benchmarks/ordinal_reference.py``: 30 points on a line, K = 3 ranks drawn from the model,
sampled long (4 chains) with the latent function explicit (``pm.gp.Latent`` +
``pm.OrderedProbit``, sigma = 1) under the same hyperpriors as here. The file also holds a
long run of this very EP-marginal model, so the EP approximation's own error in each
posterior mean is measured, not assumed.

The check, for each of ``ls``, ``amp`` and the two cutpoints:

* posterior mean: ``|m - m_ref| <= Z * hypot(mcse, mcse_ref) + APPROX_SD * sd_ref``:
  ``Z`` standard errors of the difference of two Monte Carlo estimates, plus the EP
  approximation tolerance, stated in units of the reference posterior sd and checked
  against the long EP-vs-exact difference recorded in the file
  (``test_reference_supports_the_tolerances``);
* posterior sd: within ``SD_RTOL`` (relative) of the reference's: at this run's effective
  sample sizes (about 550-800 per scalar) the Monte Carlo standard error of an sd is
  3-4 % of it, so the tolerance is about 4-5 standard errors; the long runs' EP-vs-exact
  difference in each sd is checked to be under half of it.

The run is ``pymc_gpc.sample`` with ``nuts_sampler="nutpie"`` (a user's option): its
compiled sampler gives the test's effective sample size at a fraction of the CPU time of
PyMC's NUTS on this model.

``benchmarks/ordinal_reference.py --check`` records the same check on models with sigma
mis-scaled (it fails them) and on the Laplace approximation (``benchmarks/results/ordinal_reference.md``).
"""

import json
import pathlib
import warnings

import numpy as np
import pymc as pm
import pytest

import pymc_gpc

REFERENCE = pathlib.Path(__file__).parent / "data" / "ordinal_nuts_reference.json"
SCALARS = ("ls", "amp", "cutpoints[0]", "cutpoints[1]")
Z = 3.5
APPROX_SD = 0.1
SD_RTOL = 0.15
MAX_DIVERGENT = 1e-3  # of the reference's draws (the explicit latent model's funnel)
RUN = {"draws": 500, "tune": 300, "chains": 2, "random_seed": 8, "nuts_sampler": "nutpie"}


def load_reference():
    return json.loads(REFERENCE.read_text())


def ep_model(X, y, sigma=1.0, gp_class=pymc_gpc.MarginalEP):
    """The user's model: the reference's priors, f integrated out by EP (``gp_class``: the
    benchmark's alternatives)."""
    with pm.Model() as model:
        ls = pm.LogNormal("ls", 0.0, 0.5)
        amp = pm.LogNormal("amp", 0.0, 0.5)
        cutpoints = pm.Normal("cutpoints", 0.0, 2.0, shape=2, transform=pm.distributions.transforms.ordered,
                              initval=[-0.5, 0.5])
        gp = gp_class(cov_func=amp**2 * pm.gp.cov.ExpQuad(1, ls=ls),
                      likelihood=pymc_gpc.OrderedProbit(cutpoints, sigma=sigma))
        gp.marginal_likelihood("y", X=X, y=y)
    return model


def run_short(X, y, sigma=1.0, gp_class=pymc_gpc.MarginalEP):
    """The test's NUTS run: ``pymc_gpc.sample`` with nutpie, fixed seed."""
    with ep_model(X, y, sigma, gp_class):
        return pymc_gpc.sample(**RUN, cores=1, progressbar=False, compute_convergence_checks=False)


def summary(posterior):
    """Mean, sd and their Monte Carlo standard errors (ArviZ) of each scalar."""
    import arviz as az
    import xarray as xr

    c = posterior["cutpoints"].values
    draws = {"ls": posterior["ls"].values, "amp": posterior["amp"].values,
             "cutpoints[0]": c[..., 0], "cutpoints[1]": c[..., 1]}
    out = {}
    for name, x in draws.items():
        da = xr.DataArray(x, dims=("chain", "draw"))
        out[name] = {"mean": float(x.mean()), "sd": float(x.std(ddof=1)),
                     "mcse_mean": float(az.mcse(da, method="mean")), "mcse_sd": float(az.mcse(da, method="sd"))}
    return out


def failures(s, record):
    """The comparisons of summary ``s`` with the reference that fail (module docstring)."""
    out = []
    for name in SCALARS:
        ref = record["reference"][name]
        bound = Z * np.hypot(s[name]["mcse_mean"], ref["mcse_mean"]) + APPROX_SD * ref["sd"]
        if abs(s[name]["mean"] - ref["mean"]) > bound:
            out.append(f"{name} mean {s[name]['mean']:.3f} vs {ref['mean']:.3f} (bound {bound:.3f})")
        if abs(s[name]["sd"] / ref["sd"] - 1.0) > SD_RTOL:
            out.append(f"{name} sd {s[name]['sd']:.3f} vs {ref['sd']:.3f} (rtol {SD_RTOL})")
    return out


@pytest.fixture(scope="module")
def record():
    return load_reference()


def test_reference_supports_the_tolerances(record):
    """The reference is converged, and the long EP run's difference from it (plus two of its
    standard errors) lies within the stated approximation tolerance."""
    for run in ("reference", "ep"):
        for name in SCALARS:
            r = record[run][name]
            assert r["r_hat"] < 1.01 and min(r["ess_bulk"], r["ess_tail"]) > 1000, (run, name, r)
    runs = record["runs"]["exact"]
    assert runs["divergences"] <= MAX_DIVERGENT * runs["chains"] * runs["draws"], runs
    for name in SCALARS:
        d = record["ep_minus_exact"][name]
        sd = record["reference"][name]["sd"]
        assert abs(d["mean"]["diff"]) + 2 * d["mean"]["se"] <= APPROX_SD * sd, (name, d["mean"], sd)
        assert abs(d["sd"]["diff"]) + 2 * d["sd"]["se"] <= SD_RTOL / 2 * sd, (name, d["sd"], sd)


def test_nuts_on_the_ep_marginal_recovers_the_exact_posterior(record):
    X = np.asarray(record["data"]["X"])[:, None]
    y = np.asarray(record["data"]["y"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        idata = run_short(X, y)
    assert int(idata.sample_stats["diverging"].sum()) == 0
    assert failures(summary(idata.posterior), record) == []
