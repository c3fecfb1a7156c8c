"""Long NUTS reference runs for the ordinal GP: the exact model against the EP marginal.

A tiny synthetic ordinal problem (``N`` = 30 points on a line, K = 3 ranks, drawn from the
model) is sampled twice, long, with the same hyperpriors:

* **exact**: the latent function explicit, ``pm.gp.Latent`` (whitened, f = L v) with
  ``pm.OrderedProbit`` on f (Chu & Ghahramani 2005, eq. 4 with sigma = 1);
* **ep**: the package's model as a user writes it, ``pymc_gpc.MarginalEP`` with
  ``pymc_gpc.OrderedProbit(cutpoints, sigma=1)``, f integrated out by EP, sampled by
  ``pymc_gpc.sample`` (the sampling tolerances included).

Both long runs use nutpie (the faster sampler here; the test samples the same way).

Priors (both): lengthscale ``ls ~ LogNormal(0, 0.5)``, amplitude ``amp ~ LogNormal(0, 0.5)``
(kernel ``amp**2 * ExpQuad(ls)``), cutpoints ``~ Normal(0, 2)`` under the ordered transform,
sigma fixed at 1.

The posterior summary of each scalar (``ls``, ``amp``, ``cutpoints[0]``, ``cutpoints[1]``):
mean, sd and the 5 / 50 / 95 % quantiles, each with its Monte Carlo standard error
(ArviZ), and bulk / tail ESS and R-hat. Written to
``tests/likelihoods/data/ordinal_nuts_reference.json`` (the data, the exact run's summary
as the reference, the EP run's, and their difference, which sets the test's approximation
tolerance) and ``benchmarks/results/ordinal_reference.md``.

With ``--check`` the script also runs the test's short chain on the model, on deliberately
wrong models (sigma mis-scaled to each of ``WRONG_SIGMAS``) and on the Laplace
approximation of the model, and records the test's verdict on each.

Run:  OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 nice python benchmarks/ordinal_reference.py
      (``--draws 5000 --tune 2000 --chains 4`` are the defaults; ``--check``)
"""

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse
import json
import pathlib
import time
import warnings

import numpy as np

from _provenance import header, results_path  # noqa: E402  (benchmarks/_provenance.py)

ROOT = pathlib.Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "ordinal_reference.md"
REFERENCE = ROOT / "tests" / "likelihoods" / "data" / "ordinal_nuts_reference.json"

N, SEED = 30, 47
TRUE = {"ls": 1.0, "amp": 1.5, "cutpoints": [-0.8, 0.8]}
SCALARS = ("ls", "amp", "cutpoints[0]", "cutpoints[1]")
QUANTILES = (0.05, 0.5, 0.95)
WRONG_SIGMAS = (0.8, 0.5)
EXACT_SAMPLER = "nutpie"


def synthetic_data():
    """N inputs on [-3, 3] and their ranks 0..2, drawn from the model at ``TRUE`` (sigma = 1)."""
    rng = np.random.default_rng(SEED)
    X = np.sort(rng.uniform(-3.0, 3.0, size=N))[:, None]
    K = TRUE["amp"] ** 2 * np.exp(-0.5 * (X - X.T) ** 2 / TRUE["ls"] ** 2) + 1e-8 * np.eye(N)
    f = np.linalg.cholesky(K) @ rng.normal(size=N)
    y = np.digitize(f + rng.normal(size=N), TRUE["cutpoints"])
    return X, y


def priors():
    """The hyperpriors both models share, in the current model context."""
    import pymc as pm

    ls = pm.LogNormal("ls", 0.0, 0.5)
    amp = pm.LogNormal("amp", 0.0, 0.5)
    cutpoints = pm.Normal("cutpoints", 0.0, 2.0, shape=2, transform=pm.distributions.transforms.ordered,
                          initval=[-0.5, 0.5])
    return ls, amp, cutpoints


def exact_model(X, y):
    """The latent function explicit: pm.gp.Latent (f = L v) and pm.OrderedProbit on f."""
    import pymc as pm

    with pm.Model() as model:
        ls, amp, cutpoints = priors()
        gp = pm.gp.Latent(cov_func=amp**2 * pm.gp.cov.ExpQuad(1, ls=ls))
        f = gp.prior("f", X=X)
        pm.OrderedProbit("y", eta=f, cutpoints=cutpoints, sigma=1.0, compute_p=False, observed=y)
    return model


def ep_model(X, y, sigma=1.0):
    """The package's EP-marginal model (f integrated out), as a user writes it."""
    import pymc as pm

    import pymc_gpc

    with pm.Model() as model:
        ls, amp, cutpoints = priors()
        gp = pymc_gpc.MarginalEP(cov_func=amp**2 * pm.gp.cov.ExpQuad(1, ls=ls),
                                 likelihood=pymc_gpc.OrderedProbit(cutpoints, sigma=sigma))
        gp.marginal_likelihood("y", X=X, y=y)
    return model


def scalar_draws(posterior):
    """{name: (chains, draws) array} of the four summarised scalars."""
    c = posterior["cutpoints"].values
    return {"ls": posterior["ls"].values, "amp": posterior["amp"].values,
            "cutpoints[0]": c[..., 0], "cutpoints[1]": c[..., 1]}


def summarise(posterior):
    """Mean, sd, quantiles and their MCSE, ESS and R-hat of each scalar (ArviZ)."""
    import arviz as az
    import xarray as xr

    out = {}
    for name, x in scalar_draws(posterior).items():
        da = xr.DataArray(x, dims=("chain", "draw"))
        row = {"mean": float(x.mean()), "sd": float(x.std(ddof=1)),
               "mcse_mean": float(az.mcse(da, method="mean")), "mcse_sd": float(az.mcse(da, method="sd")),
               "ess_bulk": float(az.ess(da, method="bulk")), "ess_tail": float(az.ess(da, method="tail")),
               "r_hat": float(az.rhat(da))}
        for q in QUANTILES:
            row[f"q{round(100 * q):02d}"] = float(np.quantile(x, q))
            row[f"mcse_q{round(100 * q):02d}"] = float(az.mcse(da, method="quantile", prob=q))
        out[name] = row
    return out


def sample_exact(X, y, draws, tune, chains, seed):
    import pymc as pm

    with exact_model(X, y):
        idata = pm.sample(draws=draws, tune=tune, chains=chains, cores=1, target_accept=0.95, random_seed=seed,
                          nuts_sampler=EXACT_SAMPLER, progressbar=False, compute_convergence_checks=False)
    return idata


def sample_ep(X, y, draws, tune, chains, seed, sigma=1.0, **kwargs):
    import pymc_gpc

    with ep_model(X, y, sigma):
        idata = pymc_gpc.sample(draws=draws, tune=tune, chains=chains, cores=1, random_seed=seed,
                                progressbar=False, compute_convergence_checks=False, **kwargs)
    return idata


def differences(ep, exact):
    """EP minus exact for every statistic with an MCSE, with the standard error of the difference."""
    out = {}
    for name in SCALARS:
        row = {}
        for stat in ("mean", "sd", *(f"q{round(100 * q):02d}" for q in QUANTILES)):
            se = np.hypot(ep[name][f"mcse_{stat}"], exact[name][f"mcse_{stat}"])
            row[stat] = {"diff": ep[name][stat] - exact[name][stat], "se": float(se)}
        out[name] = row
    return out


def _table(summaries):
    lines = ["| run | quantity | mean | sd | 5 % | 50 % | 95 % | ESS bulk / tail | R-hat |",
             "|---|---|---|---|---|---|---|---|---|"]
    for label, s in summaries.items():
        for name in SCALARS:
            r = s[name]
            cells = [f"{r[k]:.3f} +- {r['mcse_' + k]:.3f}" for k in ("mean", "sd", "q05", "q50", "q95")]
            lines.append(f"| {label} | {name} | " + " | ".join(cells)
                         + f" | {r['ess_bulk']:.0f} / {r['ess_tail']:.0f} | {r['r_hat']:.4f} |")
    return lines


def _diff_table(diff):
    lines = ["| quantity | mean: EP - exact | sd: EP - exact | 5 %: EP - exact | 50 %: EP - exact | 95 %: EP - exact |",
             "|---|---|---|---|---|---|"]
    for name in SCALARS:
        cells = [f"{diff[name][k]['diff']:+.4f} +- {diff[name][k]['se']:.4f}" for k in ("mean", "sd", "q05", "q50", "q95")]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def run(model, args):
    """Sample one model long; its summary, divergences and wall time (a dict, cached as JSON)."""
    X, y = synthetic_data()
    started = time.perf_counter()
    if model == "exact":
        idata = sample_exact(X, y, args.draws, args.tune, args.chains, seed=1)
    else:
        idata = sample_ep(X, y, args.draws, args.tune, args.chains, seed=2, nuts_sampler=EXACT_SAMPLER)
    return {"summary": summarise(idata.posterior), "divergences": int(idata.sample_stats["diverging"].sum()),
            "seconds": round(time.perf_counter() - started, 1),
            "runs": {"draws": args.draws, "tune": args.tune, "chains": args.chains}}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=5000)
    parser.add_argument("--tune", type=int, default=2000)
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--models", nargs="*", default=["exact", "ep"],
                        help="which long runs to do now (the others are read from --cache)")
    parser.add_argument("--cache", default=None, help="folder of per-model JSON results, reused and extended")
    parser.add_argument("--check", action="store_true", help="also run the test's check on a short EP run and a wrong model")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    reused = sorted({"exact", "ep"} - set(args.models))
    provenance = header(note=f"the {' and '.join(reused)} run(s) read from --cache, made by "
                             f"`--models NAME --cache DIR` runs of this script at this commit's code"
                        if reused else None)
    X, y = synthetic_data()
    cache = pathlib.Path(args.cache) if args.cache else None
    done = {}
    for model in ("exact", "ep"):
        path = cache / f"{model}.json" if cache else None
        if model in args.models:
            done[model] = run(model, args)
            if path:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(json.dumps(done[model]))
        elif path and path.exists():
            done[model] = json.loads(path.read_text())
    if set(done) != {"exact", "ep"}:
        print(json.dumps(done, indent=1))
        return
    summaries = {k: v["summary"] for k, v in done.items()}
    divergences = {k: v["divergences"] for k, v in done.items()}
    diff = differences(summaries["ep"], summaries["exact"])
    record = {
        "description": "benchmarks/ordinal_reference.py: exact (pm.gp.Latent + pm.OrderedProbit) and EP-marginal "
                       "NUTS runs on one synthetic ordinal problem",
        "priors": {"ls": "LogNormal(0, 0.5)", "amp": "LogNormal(0, 0.5)",
                   "cutpoints": "Normal(0, 2), ordered transform, initval [-0.5, 0.5]", "sigma": 1.0,
                   "kernel": "amp**2 * ExpQuad(1, ls)"},
        "data": {"X": X[:, 0].tolist(), "y": y.tolist(), "true": TRUE, "seed": SEED},
        "runs": {k: {**v["runs"], "divergences": v["divergences"], "seconds": v["seconds"]} for k, v in done.items()},
        "reference": summaries["exact"],
        "ep": summaries["ep"],
        "ep_minus_exact": diff,
    }
    lines = ["# Ordinal GP: NUTS on the EP marginal against the exact model", "",
             f"{N} inputs on [-3, 3], K = 3 ranks drawn from the model (ls {TRUE['ls']}, amplitude {TRUE['amp']},",
             f"cutpoints {TRUE['cutpoints']}, sigma 1; seed {SEED}). Priors: ls ~ LogNormal(0, 0.5),",
             "amp ~ LogNormal(0, 0.5), cutpoints ~ Normal(0, 2) ordered, sigma = 1.",
             f"**exact**: `pm.gp.Latent` (whitened) + `pm.OrderedProbit`, {EXACT_SAMPLER} NUTS;",
             f"**ep**: `pymc_gpc.MarginalEP` + `pymc_gpc.OrderedProbit`, `pymc_gpc.sample(nuts_sampler=\"{EXACT_SAMPLER}\")`",
             "(EP at the sampling tolerance; the test samples the same way, shorter).",
             *(f"{k}: {v['runs']['chains']} chains x {v['runs']['draws']} draws after {v['runs']['tune']} tuning steps, "
               f"{v['divergences']} divergences, {v['seconds']:.0f} s wall" for k, v in done.items()),
             "(the two runs side by side on a loaded 2-core machine).",
             "Each figure +- its Monte Carlo standard error (ArviZ).", "",
             *_table(summaries), "",
             "EP minus exact (+- the standard error of the difference):", "",
             *_diff_table(diff), ""]
    if args.check:
        lines += check_lines(X, y, record)
    print("\n".join(lines))
    if not args.no_write:
        reference = results_path(REFERENCE)  # the test's data; a --quick run writes it elsewhere
        reference.parent.mkdir(parents=True, exist_ok=True)
        reference.write_text(json.dumps(record, indent=1) + "\n")
        results_path(RESULTS).write_text(provenance + "\n".join(lines) + "\n")


def check_lines(X, y, record):
    """The test's verdict on its own short EP run and on the same run with sigma mis-scaled."""
    import sys

    sys.path.insert(0, str(ROOT / "tests" / "likelihoods"))
    import test_ordinal_nuts as t  # noqa: E402

    lines = ["The test's check (`tests/likelihoods/test_ordinal_nuts.py`, its run length and seed):", ""]
    import pymc_gpc

    checks = [("EP, sigma = 1 (the model)", 1.0, pymc_gpc.MarginalEP),
              *((f"EP, sigma = {s} (wrong)", s, pymc_gpc.MarginalEP) for s in WRONG_SIGMAS),
              ("Laplace, sigma = 1", 1.0, pymc_gpc.MarginalLaplace)]
    for label, sigma, gp_class in checks:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            idata = t.run_short(X, y, sigma=sigma, gp_class=gp_class)
        failures = t.failures(summarise(idata.posterior), record)
        lines.append(f"- {label}: {'passes' if not failures else 'fails: ' + '; '.join(failures)}")
    return lines + [""]


if __name__ == "__main__":
    main()
