"""The seeded-fault list of ``scripts/mutation.py`` follows the code: every fault's snippet
occurs exactly once in its module (else the script stops, and only when someone runs it),
its replacement differs, and the tests it names exist. No mutation is run here."""

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _mutation():
    spec = importlib.util.spec_from_file_location("pymc_gpc_mutation_script", ROOT / "scripts" / "mutation.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # the script's imports are the standard library's; main() is not run
    return module


FAULTS = _mutation().FAULTS


def test_fault_names_are_unique():
    names = [f.name for f in FAULTS]
    assert FAULTS and len(names) == len(set(names))


@pytest.mark.parametrize("fault", FAULTS, ids=lambda f: f.name)
def test_fault_snippet_occurs_exactly_once(fault):
    path = ROOT / fault.path
    assert path.is_file(), fault.path
    count = path.read_text().count(fault.old)
    assert count == 1, f"fault {fault.name}: {fault.old!r} occurs {count} times in {fault.path}: update FAULTS"
    assert fault.new != fault.old
    assert fault.tests and (ROOT / fault.tests[0]).is_file(), fault.tests


def test_every_file_the_faults_name_compiles_in_the_default_mode():
    """The faults are killed through the graphs users compile: ``tests/conftest.py`` runs
    the files outside its ``DEFAULT_MODE_FILES`` with FAST_COMPILE."""
    from ..conftest import DEFAULT_MODE_FILES

    named = {arg.removeprefix("tests/") for fault in FAULTS for arg in fault.tests if arg.endswith(".py")}
    assert named <= set(DEFAULT_MODE_FILES), sorted(named - set(DEFAULT_MODE_FILES))
