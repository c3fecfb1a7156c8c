"""The package's seams hold: ``scripts/check_architecture.py`` finds no import cycle and no
prior-structure branch outside ``structures/select.py``; one registry of approximations."""

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
