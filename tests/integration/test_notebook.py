"""Execute the notebooks with a few draws, so they cannot rot."""

import os
import pathlib

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = pathlib.Path(__file__).parent.parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs(path, monkeypatch, tmp_path):
    monkeypatch.setenv("PYMC_GPC_DRAWS", "20")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    # the kernel runs in tmp_path: it imports this checkout's package, not whichever one the
    # environment's editable install points to (a worktree's, another clone's)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    text = "".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream")
    assert "errors" in text  # the metrics cell printed its result


def test_there_is_a_notebook():
    assert NOTEBOOKS
