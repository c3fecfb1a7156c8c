"""The package's seams hold: ``scripts/check_architecture.py`` finds no import cycle, no
prior-structure branch outside ``structures/select.py``, no approximation name compared
outside the registry, no private name imported across packages and no import up the layer
table (past its allow-list); one registry of approximations."""

import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_check_architecture_passes():
    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "check_architecture.py")], capture_output=True,
                         text=True, cwd=ROOT)
    assert run.returncode == 0, run.stdout + run.stderr


def test_check_architecture_finds_a_cycle_and_a_branch(tmp_path):
    package = tmp_path / "pymc_gpc"
    (package / "structures").mkdir(parents=True)
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "check_architecture.py").write_text((ROOT / "scripts" / "check_architecture.py").read_text())
    (package / "__init__.py").write_text("")
    (package / "structures" / "__init__.py").write_text("")
    (package / "structures" / "select.py").write_text("def pick(approx):\n    return approx == 'FITC'\n")
    (package / "a.py").write_text("from . import b\n")
    (package / "b.py").write_text("def f(approx):\n    from .a import g\n    return approx != 'FITC'\n")
    run = subprocess.run([sys.executable, str(tmp_path / "scripts" / "check_architecture.py")], capture_output=True,
                         text=True, cwd=tmp_path)
    assert run.returncode == 1
    assert "import cycle among pymc_gpc.a, pymc_gpc.b" in run.stdout
    assert "pymc_gpc/b.py:3" in run.stdout and "select.py:" not in run.stdout.split("outside")[0]


def _planted(tmp_path, files, allowed=None):
    """Run the script on a planted package of ``files`` {path: source}, with its ``ALLOWED``
    line replaced by ``allowed`` if given; (return code, stdout)."""
    (tmp_path / "scripts").mkdir()
    script = (ROOT / "scripts" / "check_architecture.py").read_text()
    if allowed is not None:
        assert script.count("\nALLOWED = {}\n") == 1
        script = script.replace("\nALLOWED = {}\n", f"\n{allowed}\n")
    (tmp_path / "scripts" / "check_architecture.py").write_text(script)
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    run = subprocess.run([sys.executable, str(tmp_path / "scripts" / "check_architecture.py")], capture_output=True,
                         text=True, cwd=tmp_path)
    return run.returncode, run.stdout


def test_check_architecture_finds_names_private_imports_and_layers(tmp_path):
    registry = 'Approximation("ep", ep)\nApproximation("laplace", laplace)\n'
    stale = 'ALLOWED = {("layer", "pymc_gpc/gp/marginal.py"): "a stale entry"}'  # no gp/ in the planted package
    code, out = _planted(tmp_path, {
        "pymc_gpc/__init__.py": "",
        "pymc_gpc/approximations/__init__.py": "",
        "pymc_gpc/approximations/registry.py": registry + "def f(n):\n    return n == 'ep'\n",
        "pymc_gpc/approximations/ep.py": (
            "from ..numerics.special import _hidden\n"          # private, another package: caught
            "from .registry import _own\n"                       # private, same package: allowed
            "def f(name, lik):\n"
            "    a = name != 'laplace'\n"                        # caught
            "    b = name in ('ep', 'other')\n"                  # caught
            "    c = 'ep' in lik.approximations\n"               # a lookup: allowed
            "    return name == 'sequential'\n"),                # not an approximation name
        "pymc_gpc/numerics/__init__.py": "",
        "pymc_gpc/numerics/special.py": "from ..approximations import ep\n_hidden = 1\n",  # up the layers
        "pymc_gpc/stray.py": "",                                                              # in no layer
    }, allowed=stale)
    assert code == 1
    assert "pymc_gpc/approximations/ep.py:1: imports pymc_gpc.numerics.special._hidden" in out
    assert "registry._own" not in out
    assert "pymc_gpc/approximations/ep.py:4: an approximation name compared" in out
    assert "pymc_gpc/approximations/ep.py:5: an approximation name compared" in out
    assert ":6:" not in out and ":7:" not in out and "registry.py:" not in out.split("outside")[0]
    assert "pymc_gpc.numerics.special (foundation) imports pymc_gpc.approximations.ep (approximations)" in out
    assert "pymc_gpc.stray is in no layer" in out
    assert "pymc_gpc/gp/marginal.py: ALLOWED lists a violation (layer) that is gone" in out


def test_check_architecture_allow_list_is_empty():
    """The package has no known violation left: nothing is allow-listed and nothing fires."""
    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "check_architecture.py")], capture_output=True,
                         text=True, cwd=ROOT)
    assert run.returncode == 0, run.stdout
    assert "known violation" not in run.stdout and "that is gone" not in run.stdout
    assert not [line for line in run.stdout.splitlines() if line.startswith("    pymc_gpc/")]


def test_every_structure_and_combination_is_a_cell_or_a_clear_error():
    """Each approximation's structures are structures of the selector; an unsupported
    combination is a ValueError (also a NotImplementedError for a backend) naming what works."""
    from pymc_gpc.approximations import registry
    from pymc_gpc.structures.select import STRUCTURES

    names = {s.name for s in STRUCTURES}
    for entry in registry.APPROXIMATIONS.values():
        assert set(entry.structures) <= names, entry.name
    with pytest.raises(ValueError, match="available for MarginalEP and MarginalLaplace, not 'meanfield'"):
        registry.check_approx("FITC", "meanfield")
    for structure in registry.BACKEND_STRUCTURES["jax"]:  # every structure has a JAX implementation
        registry.check_backend("ep", structure, "jax", "ApproxMarginalOp")
    with pytest.raises(NotImplementedError, match="NewOp has no jax implementation.*numba backend"):
        registry.check_backend("ep", "a-new-structure", "jax", "NewOp")
    with pytest.raises(ValueError, match="JAX backend implements EP and Laplace"):
        registry.check_backend("adf", "dense", "jax", "ApproxMarginalOp")
    with pytest.raises(ValueError, match="approximation must be one of"):
        registry.get("vfe")
