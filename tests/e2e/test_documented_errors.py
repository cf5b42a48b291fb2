"""Every `python train.py` command the docs show with its error prints that error, as written: one line, exit
code 2, nothing left on disk. (tests/unit/test_documented_errors.py checks that every other documented error
is asserted by some test.)"""

import pytest

from helpers.docs import train_commands
from helpers.runs import run_train

SHOWN_FAILING = [(doc, overrides, error) for doc, overrides, error in train_commands() if error]


def test_the_docs_show_failing_commands():
    assert len(SHOWN_FAILING) >= 5


@pytest.mark.parametrize(("doc", "overrides", "error"), SHOWN_FAILING)
def test_a_documented_error_is_what_the_command_prints(doc, overrides, error, tmp_path):
    result = run_train(*overrides.split(), f"hydra.run.dir={tmp_path / 'run'}", f"paths.data_dir={tmp_path}")
    printed = result.stderr.strip().splitlines()[-1]
    assert result.returncode == 2, result.stderr[-2000:]
    assert printed.startswith("error: " + error.removesuffix("...").rstrip(". ")), f"{doc}: {printed}"
    assert list(tmp_path.iterdir()) == []
