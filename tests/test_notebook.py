"""The quickstart notebook runs top to bottom (nbclient) on a very small setting."""

from __future__ import annotations

import os
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

pytestmark = pytest.mark.slow
NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "quickstart.ipynb"


def test_quickstart_notebook_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("DEEPSPEECH_NOTEBOOK_SMALL", "1")
    monkeypatch.setenv("DEEPSPEECH_NOTEBOOK_DIR", str(tmp_path))
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(notebook, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(NOTEBOOK.parent)}}).execute()
    assert (tmp_path / "runs" / "notebook" / "best.pt").is_file()
    images = [output for cell in notebook.cells if cell.cell_type == "code"
              for output in cell.get("outputs", []) if "image/png" in output.get("data", {})]
    assert len(images) >= 2
    assert os.path.isfile(tmp_path / "runs" / "notebook" / "loss.png")
