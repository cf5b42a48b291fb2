"""Reads never write: loading, sampling, evaluating, comparing, drawing attention and exporting a run neither
lock, move nor write anything inside it, also where an overwrite=true killed under way left the earlier run set
aside (.overwritten/): each finds the run where it is and leaves the directory byte for byte as it was."""

import os
import shutil

import pytest

from helpers.runs import TINY, needs_shakespeare, run_command, run_train
from transformer_lab.store.rundir import LOCK, OVERWRITTEN

READS = [
    ("sample", "prompt=RO", "max_new_tokens=2"),
    ("evaluate", "trainer.limit_val_batches=2"),
    ("compare",),
    ("attention", "text=ROMEO"),
    ("export", "exported"),
]


def tree(run):
    """Every path under `run` with its bytes and its modification time (a lock taken rewrites .lock's pid)."""
    return {
        p.relative_to(run).as_posix(): (p.read_bytes() if p.is_file() else None, p.stat().st_mtime_ns)
        for p in sorted(run.rglob("*"))
    }


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    run = tmp_path_factory.mktemp("reads") / "run"
    result = run_train(
        "data=shakespeare", "data.block_size=16", *TINY, "trainer.max_steps=4", "logger=csv", f"hydra.run.dir={run}"
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return run


@needs_shakespeare
@pytest.mark.parametrize("set_aside", [False, True], ids=["run", "set-aside-by-a-killed-overwrite"])
def test_every_read_leaves_the_run_as_it_was(trained, tmp_path, set_aside):
    import transformer_lab

    run = tmp_path / "run"
    if set_aside:  # (as a kill -9 during overwrite=true's set-aside leaves it: the lock file of a dead process)
        shutil.copytree(trained, run / OVERWRITTEN, ignore=shutil.ignore_patterns(LOCK))
        (run / LOCK).write_text("999999\n")
    else:
        shutil.copytree(trained, run)
    before = tree(run)
    for command, *options in READS:
        result = run_command(command, run, *options, cwd=tmp_path)
        assert result.returncode == 0, (command, result.stderr[-2000:])
        assert tree(run) == before, command
    loaded = transformer_lab.load(str(run))
    assert loaded.summary["global_step"] == 4 and len(transformer_lab.runs(str(run))) == 1
    assert tree(run) == before and os.listdir(tmp_path / "attention") == ["1"]


@needs_shakespeare
def test_a_reads_output_never_goes_into_a_run_and_a_set_aside_run_is_no_unfinished_one(trained, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(trained, run / OVERWRITTEN, ignore=shutil.ignore_patterns(LOCK))
    before = tree(run)
    for command, cwd, options in [
        ("evaluate", tmp_path, [f"out={run / OVERWRITTEN / 'checkpoints' / 'best.ckpt'}", "overwrite=true"]),
        ("compare", run / OVERWRITTEN, ["plot=val/loss"]),  # (compare.png in the current folder: the run)
        ("attention", run / OVERWRITTEN / "checkpoints", ["text=ROMEO"]),
    ]:
        result = run_command(command, run, *options, cwd=cwd)
        assert result.returncode == 2 and "which a read never writes into: write it elsewhere" in result.stderr
        assert tree(run) == before, command
    listed = run_command("compare", run, cwd=tmp_path)
    assert listed.returncode == 0 and "without a summary.json" not in listed.stderr, listed.stderr


def test_a_run_through_a_symbolic_link_writes_its_own_files(tmp_path):
    """A run whose hydra.run.dir is a link: Lightning writes its checkpoints by the resolved path, which the one
    writer knows as the run's own (it refused them as a read's, and the run failed at its first checkpoint)."""
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    result = run_train("data=modular", "data.p=11", *TINY, "trainer.max_steps=4", "logger=none",
                       f"hydra.run.dir={tmp_path / 'link'}")  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    assert (tmp_path / "real" / "checkpoints" / "last.ckpt").is_file()
