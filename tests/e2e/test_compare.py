"""The compare command: a table of differing overrides and results that matches summary.json, and plots.

Here: a real sweep, and the command as its command line runs it; tests/unit/test_compare.py has the rest."""

import json

import matplotlib.colors
import matplotlib.image
import pytest

from helpers.runs import TINY, run_command, run_train


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    sweep_dir = tmp_path_factory.mktemp("sweep")
    result = run_train(
        "-m",
        "data=modular",
        "data.p=7,11",
        *TINY,
        "trainer.max_steps=30",
        "trainer.val_check_interval=10",
        "trainer.log_every_n_steps=5",
        "logger=none",
        "callbacks=none",
        f"hydra.sweep.dir={sweep_dir}",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return sweep_dir


def compare(*args):
    return run_command("compare", *args, env={"COLUMNS": "200"})  # wide enough for runs as rows


def test_table_shows_what_differs_and_the_summaries(sweep, tmp_path):
    result = compare(
        sweep,
        "metrics=val/loss,val/acc,global_step",
        "sort=val/loss",
        "plot=[train/loss,val/acc]",
        f"out={tmp_path / 'curves.png'}",
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    header = lines[0].split()
    assert header == ["run", "data.p", "val/loss", "val/acc", "global_step"]  # only the override that differs
    rows = [line.split() for line in lines[2:4]]
    summaries = {str(p.parent): json.loads(p.read_text()) for p in sweep.rglob("summary.json")}
    assert {row[0] for row in rows} == summaries.keys()
    for run, p, loss, acc, step in rows:
        assert float(loss) == pytest.approx(summaries[run]["val/loss"], rel=1e-3)
        assert float(acc) == pytest.approx(summaries[run]["val/acc"], rel=1e-3, abs=1e-4)
        assert int(step) == summaries[run]["global_step"] == 30
        assert p in ("7", "11")
    assert float(rows[0][2]) <= float(rows[1][2])  # sorted by val/loss
    # One 5-inch panel per metric at 110 dpi, and a line in each run's colour (C0, C1) in the image
    image = matplotlib.image.imread(tmp_path / "curves.png")[..., :3]
    assert abs(image.shape[1] - 2 * 5 * 110) < 40  # (cropped to what is drawn)
    for colour in ("C0", "C1"):
        rgb = matplotlib.colors.to_rgb(colour)
        assert (abs(image - rgb).max(-1) < 0.05).sum() > 200, colour  # pixels of that run's lines


def test_no_runs_is_a_clear_error(tmp_path):
    result = compare(tmp_path)
    assert result.returncode == 2 and "no run directories" in result.stderr
