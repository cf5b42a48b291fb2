"""The lessons (notebooks/*.ipynb) executed on a real Jupyter kernel, as a student runs them: each asserts what it
shows, so a wrong figure fails here. In git they hold no outputs (a diff is the lesson's text and code alone)."""

from pathlib import Path

import pytest

from helpers.runs import ROOT, needs_shakespeare

NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def test_there_are_the_four_lessons():
    assert [p.name for p in NOTEBOOKS] == [
        "1_attention_by_hand.ipynb",
        "2_shakespeare.ipynb",
        "3_grokking_fourier.ipynb",
        "4_translation_alignment.ipynb",
    ]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_a_notebook_is_kept_without_outputs(path: Path):
    import nbformat

    notebook = nbformat.read(path, as_version=4)
    nbformat.validate(notebook)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert code and all(not cell.outputs and cell.execution_count is None for cell in code), (
        f"{path.name} holds outputs: clear them before committing (jupyter nbconvert --clear-output --inplace)"
    )


@needs_shakespeare
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_a_notebook_runs_and_its_assertions_hold(path: Path):
    import nbformat
    from nbclient import NotebookClient

    notebook = nbformat.read(path, as_version=4)
    # its own folder as the working directory, as Jupyter opens it; a cell that raises fails the test with its traceback
    NotebookClient(
        notebook, timeout=240, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    ).execute()
