"""The lessons (notebooks/*.ipynb) executed on a real Jupyter kernel, as a student runs them: each asserts what it
shows, so a wrong figure fails here. In git they hold no outputs (a diff is the lesson's text and code alone)."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.runs import ROOT, needs_shakespeare

NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def test_there_are_the_lessons_in_the_curriculums_order():
    assert [p.name for p in NOTEBOOKS] == [
        "1_attention_by_hand.ipynb",  # (a) of issue #66's curriculum
        "2_positions.ipynb",  # (b)
        "3_block.ipynb",  # (c)
        "4_shakespeare.ipynb",  # (d)
        "5_bert.ipynb",  # (e)
        "6_t5_spans.ipynb",  # (f)
        "7_grokking_fourier.ipynb",  # (g)
        "8_translation_alignment.ipynb",  # (h)
        "9_induction_heads.ipynb",  # issue #66's item 2
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
def test_a_notebook_runs_and_its_assertions_hold(path: Path, tmp_path: Path):
    """Run headless by the README's own command (nbconvert, from the `notebooks` extra, on the installed kernel, in the
    notebook's folder): a cell that raises fails the test with its traceback."""
    readme = (ROOT / "README.md").read_text()
    command = re.search(r"`\.venv/bin/(jupyter nbconvert [^`]+)`", readme).group(1).split()
    shown = "notebooks/1_attention_by_hand.ipynb"
    assert shown in command and (ROOT / shown).is_file()
    command = [str(path) if word == shown else word for word in command]
    command[command.index("--output") + 1] = str(tmp_path / path.name)
    done = subprocess.run(
        [str(Path(sys.executable).parent / "jupyter"), *command[1:], "--ExecutePreprocessor.timeout=240"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert (tmp_path / path.name).is_file()
