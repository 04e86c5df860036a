"""Every chapter notebook is clean in git and runnable by papermill (fastai/nbdev-style check)."""

from pathlib import Path

import nbformat
import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("*.ipynb"))


def test_there_are_notebooks():
    assert NOTEBOOKS


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_clean(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    assert nb.metadata.get("kernelspec", {}).get("name"), "papermill needs a kernelspec"
    tagged = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1, "exactly one cell tagged 'parameters'"
    assert "preset" in tagged[0].source and "results_path" in tagged[0].source
    for c in nb.cells:
        if c.cell_type == "code":
            assert not c.outputs and c.execution_count is None, "outputs must not be committed"
    assert "record_results(" in nb.cells[-1].source, "the last cell records the chapter's figures"
