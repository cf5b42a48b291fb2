"""The one writer (store/atomic.py) and the run directory's manifest (store/rundir.py): the mechanisms every callback and
command writes through, so that none of them can leave a cut file, a stray temporary or a file that overwrite=true
does not know. A new feature that writes with atomic_write / atomic_path / atomic_dir inherits these tests."""

import errno
import os
import textwrap

import pytest

from transformer_lab.errors import UserError
from transformer_lab.store.atomic import (
    MANIFEST,
    DiskRefused,
    atomic_dir,
    atomic_path,
    atomic_write,
    note_written,
    read_manifest,
    staging_folder,
    stop_recording,
)
from transformer_lab.store.rundir import (
    OVERWRITTEN,
    check_claim,
    claim,
    earlier_run,
    release,
    started,
    unwind,
    written_by_a_run,
)


def leftovers(folder):
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


@pytest.mark.parametrize("stop", [RuntimeError("a bug"), KeyboardInterrupt(), SystemExit(143)])
def test_a_write_stopped_by_anything_leaves_the_earlier_file_whole_and_no_temporary(tmp_path, stop):
    target = tmp_path / "figure.png"
    target.write_bytes(b"the earlier figure")
    for writer in (
        lambda: atomic_write(target),
        lambda: atomic_path(target),
        lambda: atomic_dir(tmp_path / "folder"),
        lambda: staging_folder(tmp_path / "other"),
    ):
        with pytest.raises(type(stop)), writer() as out:
            if hasattr(out, "write"):
                out.write(b"half")
            elif out.is_dir():
                (out / "part.png").write_bytes(b"half")
            else:
                out.write_bytes(b"half")
            raise stop
        assert target.read_bytes() == b"the earlier figure"
        assert leftovers(tmp_path) == [] and not (tmp_path / "folder").exists()


@pytest.mark.parametrize(
    "raised, why",
    [
        (OSError(errno.ENOSPC, "No space left on device"), "No space left on device"),
        (OSError(errno.EROFS, "Read-only file system"), "Read-only file system"),
        (OSError(errno.EPERM, "Operation not permitted"), "Operation not permitted"),  # (chattr +i)
        (  # a library's own exception type naming the disk's refusal (safetensors' SafetensorError does)
            type("SafetensorError", (Exception,), {})(
                'Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "No space left on device" })'
            ),
            "No space left on device",
        ),
    ],
    ids=["full", "read-only", "immutable", "library"],
)
def test_a_disk_refusal_in_any_exception_type_is_one_line_naming_the_file(tmp_path, raised, why):
    target = tmp_path / "model.safetensors"
    with pytest.raises(DiskRefused) as error, atomic_path(target, "out"):
        raise raised
    assert str(error.value) == f"out={target}: cannot write it ({why}); nothing was changed"
    assert error.value.why == why and leftovers(tmp_path) == []
    with pytest.raises(DiskRefused) as error, atomic_dir(tmp_path / "export"):
        raise raised
    assert str(error.value) == f"{tmp_path / 'export'}: cannot write it ({why}); nothing was written"


def test_a_checkpoint_over_the_file_size_limit_is_one_line_and_leaves_the_earlier_one(tmp_path):
    """torch.save into a file `ulimit -f` stops raises RuntimeError("unexpected pos ..."), the disk's EFBIG its
    context: the writer's one line names the file and the disk's reason (the stranger's `ulimit -f` run)."""
    import resource

    import torch

    target = tmp_path / "last.ckpt"
    target.write_bytes(b"the earlier checkpoint")
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, hard))  # (Python ignores SIGXFSZ: the write fails, EFBIG)
    try:
        with pytest.raises(DiskRefused) as error, atomic_write(target) as f:
            torch.save({"state_dict": {"w": torch.zeros(100_000)}}, f)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    assert str(error.value) == f"{target}: cannot write it (File too large); nothing was changed"
    assert target.read_bytes() == b"the earlier checkpoint" and leftovers(tmp_path) == []


def test_a_connection_error_is_not_taken_for_a_full_disk(tmp_path):
    with pytest.raises(ConnectionRefusedError), atomic_write(tmp_path / "input.txt"):
        raise ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused")  # (a download's OSError)
    assert leftovers(tmp_path) == []


def test_what_the_writer_puts_in_a_claimed_run_is_in_its_manifest_and_nothing_else(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "notes.txt").write_text("the user's")
    claim(run, "hydra.run.dir", None, False)
    try:
        with atomic_write(run / "summary.json", "w") as f:
            f.write("{}")
        with atomic_path(run / "attention" / "step_5" / "causal.png") as tmp:  # a newer callback's file
            tmp.write_bytes(b"png")
        with atomic_dir(run / "myfeature") as staging:  # a feature nobody listed anywhere
            (staging / "x.bin").write_bytes(b"1")
        note_written(run / "wandb")  # a logger's folder
        note_written(tmp_path / "elsewhere.txt")  # outside the run: not its
        with atomic_write(tmp_path / "outside.txt") as f:
            f.write(b"x")
    finally:
        release(run)
        stop_recording(run)
    assert read_manifest(run) == ["summary.json", "attention/step_5/causal.png", "myfeature", "wandb"]
    assert "notes.txt" not in {str(p) for p in written_by_a_run(run)}


def test_overwrite_sets_aside_exactly_what_the_manifest_lists_and_a_failed_start_puts_it_back(tmp_path):
    run = tmp_path / "run"
    for name in ("summary.json", "metrics.jsonl", "progress/spectrum_step_10.png", "attention/1/causal.png"):
        (run / name).parent.mkdir(parents=True, exist_ok=True)
        (run / name).write_text(f"earlier {name}")
    (run / "progress" / "my_notes.txt").write_text("the user's, beside a callback's file")
    (run / MANIFEST).write_text("summary.json\nmetrics.jsonl\nprogress/spectrum_step_10.png\nattention/1\n")
    check_claim(run, "hydra.run.dir", None, True)  # (refuses nothing with overwrite)
    with pytest.raises(UserError, match="holds another run's files"):
        check_claim(run, "hydra.run.dir", None, False)
    claim(run, "hydra.run.dir", None, True)
    aside = sorted(str(p.relative_to(run / OVERWRITTEN)) for p in (run / OVERWRITTEN).rglob("*") if p.is_file())
    assert aside == [
        MANIFEST,
        "attention/1/causal.png",
        "metrics.jsonl",
        "progress/spectrum_step_10.png",
        "summary.json",
    ]
    assert (run / "progress" / "my_notes.txt").exists()
    with atomic_path(run / "progress" / "spectrum_step_2.png") as tmp:  # the new run, before its first step
        tmp.write_bytes(b"new")
    unwind(run)  # it failed: the directory is as it was
    release(run)
    assert (run / "summary.json").read_text() == "earlier summary.json"
    assert not (run / "progress" / "spectrum_step_2.png").exists() and not (run / OVERWRITTEN).exists()
    assert read_manifest(run) == ["summary.json", "metrics.jsonl", "progress/spectrum_step_10.png", "attention/1"]


def test_a_new_run_that_fails_before_its_first_step_takes_back_all_it_wrote(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "notes.txt").write_text("the user's")
    claim(run, "hydra.run.dir", None, False)
    with atomic_write(run / "summary.json", "w") as f:
        f.write('{"status": "failed"}')
    note_written(run / "wandb")
    (run / "wandb").mkdir()
    unwind(run)
    release(run)
    assert sorted(p.name for p in run.iterdir()) == [".lock", "notes.txt"]
    assert earlier_run(run) is None


@pytest.mark.parametrize("checkpoint", [True, False], ids=["last.ckpt", "none"])
def test_a_completed_runs_refusal_advises_what_its_files_allow(tmp_path, checkpoint):
    """A completed run with a last.ckpt can train further; one without (debug=fast's) cannot: the refusal says so."""
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "summary.json").write_text('{"status": "completed", "global_step": 4}')
    if checkpoint:
        (run / "checkpoints" / "last.ckpt").write_bytes(b"")
    (run / MANIFEST).write_text("summary.json\ncheckpoints\n")  # (what a run lists as it writes)
    with pytest.raises(UserError) as refused:
        check_claim(run, "hydra.run.dir", None, False)
    held, advice = (
        ("holds a completed run (step 4)", "train it further with ckpt_path=last and a higher trainer.max_steps")
        if checkpoint
        else ("holds a completed run (step 4; no checkpoint to train further from)", "nothing there can be resumed")
    )
    assert str(refused.value) == (
        f"hydra.run.dir={run} {held}; {advice}, start afresh there with overwrite=true (deleting what the run wrote "
        "once the new run starts training), or choose another hydra.run.dir"
    )


def test_once_training_started_the_run_keeps_what_it_wrote(tmp_path):
    run = tmp_path / "run"
    claim(run, "hydra.run.dir", None, False)
    with atomic_write(run / "summary.json", "w") as f:
        f.write("{}")
    started(run)
    unwind(run)  # (a later failure: nothing is taken back)
    release(run)
    stop_recording(run)
    assert (run / "summary.json").exists() and read_manifest(run) == ["summary.json"]


def test_check_claim_refuses_what_claim_would_before_anything_is_built(tmp_path):
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "last.ckpt").write_bytes(b"x")
    (run / "summary.json").write_text('{"status": "completed", "global_step": 30}')
    (run / MANIFEST).write_text("summary.json\ncheckpoints/last.ckpt\n")
    with pytest.raises(UserError) as before:
        check_claim(run, "hydra.run.dir", None, False)
    with pytest.raises(UserError) as at:
        claim(run, "hydra.run.dir", None, False)
    assert str(before.value) == str(at.value) and "holds a completed run (step 30)" in str(at.value)
    check_claim(run, "hydra.run.dir", run / "checkpoints" / "last.ckpt", False)  # (its own resume: fine)


def test_the_writer_keeps_the_umask_mode(tmp_path):
    with atomic_path(tmp_path / "a.png") as tmp:
        tmp.write_bytes(b"x")
    with atomic_dir(tmp_path / "maps") as staging:
        (staging / "b").write_bytes(b"x")
    mask = os.umask(0)
    os.umask(mask)
    assert (tmp_path / "a.png").stat().st_mode & 0o777 == 0o666 & ~mask
    assert (tmp_path / "maps").stat().st_mode & 0o777 == 0o777 & ~mask


def test_no_writer_in_the_package_writes_a_file_in_place():
    """Every file a run or command writes goes through store/atomic.py: a plain open(..., "w"), write_text or
    savefig on a final path in src/ is a file half-written on a crash (the data downloads and corpus caches,
    the lock and the manifest's appends aside, which are not files a reader trusts whole)."""
    import re
    from pathlib import Path

    import transformer_lab

    allowed = {"store/atomic.py", "store/rundir.py"}
    pattern = re.compile(r"\.write_text\(|\.write_bytes\(|open\([^)]*[\"']wb?[\"']|\.savefig\(")
    found = []
    for path in Path(transformer_lab.__file__).parent.rglob("*.py"):
        if path.name in allowed:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if pattern.search(line) and "tmp" not in line and "staging" not in line and "folder /" not in line:
                found.append(f"{path.name}:{number}: {line.strip()}")
    assert found == [], textwrap.indent("\n".join(found), "  ")


def test_every_command_makes_sigterm_a_clean_exit(monkeypatch, capsys):
    """cli.run_command installs the handler that turns SIGTERM into SystemExit(143), so the writer's `finally` runs (the
    attention command's staging folder goes: tests/e2e/test_writer.py sends the signal mid-write)."""
    import signal

    from transformer_lab.commands import cli
    from transformer_lab.store import rundir

    monkeypatch.setattr(rundir, "_stop_handler_installed", False)
    previous = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        cli.run_command("compare", ["--help"])
        assert signal.getsignal(signal.SIGTERM) is rundir._on_sigterm
        with pytest.raises(SystemExit) as stopped:
            rundir._on_sigterm(signal.SIGTERM, None)
        assert stopped.value.code == 143
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_compares_figure_on_a_full_disk_leaves_the_earlier_one_whole(tmp_path, monkeypatch, capsys):
    from matplotlib.figure import Figure

    from helpers.run_dirs import fake_run
    from transformer_lab.commands import cli

    runs = [str(fake_run(tmp_path / f"r{i}", [f"optim.lr={lr}"], 2.0 - i)) for i, lr in enumerate((0.1, 0.2))]
    out = tmp_path / "curves.png"
    out.write_bytes(b"the earlier figure")

    def savefig_then_disk_full(self, fname, **kwargs):
        with open(fname, "wb") as f:
            f.write(b"\x89PNG half")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Figure, "savefig", savefig_then_disk_full)
    with pytest.raises(SystemExit) as exited:
        cli.run_command("compare", [*runs, "plot=val/loss", f"out={out}"])
    assert exited.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"error: out={out}: cannot write it (No space left on device); nothing was changed"
    )
    assert out.read_bytes() == b"the earlier figure" and leftovers(tmp_path) == []


def test_an_existing_run_directory_is_not_written_to_find_out_whether_it_can_be(tmp_path, monkeypatch):
    """A resume with nothing to do on a completed run in a read-only place must not fail for want of a trial
    folder: an existing run directory is the claim's to judge (command_line.output_dir_problem)."""
    import tempfile

    from transformer_lab.config.command_line import output_dir_problem

    def no_write(*args, **kwargs):
        raise PermissionError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(tempfile, "mkdtemp", no_write)
    assert output_dir_problem([f"hydra.run.dir={tmp_path}"]) is None
    assert output_dir_problem([f"hydra.run.dir={tmp_path / 'new'}"]) == (
        f"hydra.run.dir={tmp_path / 'new'}: cannot create the run directory in {tmp_path} (Operation not permitted)"
    )


def test_attentions_out_that_refuses_while_empty_is_named_with_the_disks_reason(tmp_path, monkeypatch):
    """An empty out= that cannot take the maps' folder (a read-only mount point: EBUSY) says why, not that
    another call wrote there first."""
    from pathlib import Path

    from transformer_lab.commands.attention import put_in_place

    out = tmp_path / "mount"
    out.mkdir()
    staged = tmp_path / "staged"
    staged.mkdir()

    def busy(self, target):
        raise OSError(errno.EBUSY, "Device or resource busy")

    monkeypatch.setattr(Path, "rename", busy)
    with pytest.raises(UserError) as refused:
        put_in_place(staged, out, given=True)
    assert str(refused.value) == f"out={out}: cannot write it (Device or resource busy); nothing is overwritten"


def test_any_oserror_writing_a_file_an_option_names_is_one_line_naming_it(tmp_path):
    """out=, predictions=, a plot: what the writer cannot write there (a path under a file, a failure mid-write) is
    one line naming the option; the same on a run's own file is a bug's traceback."""
    (tmp_path / "a-file").write_text("")
    under_a_file = tmp_path / "a-file" / "eval.json"
    with pytest.raises(UserError) as error, atomic_write(under_a_file, "w", key="out"):
        pass
    assert str(error.value) == f"out={under_a_file}: cannot write it (File exists)"  # (mkdir: a-file is there)
    with pytest.raises(UserError) as error, atomic_write(tmp_path / "p.jsonl", "w", key="predictions"):
        raise IsADirectoryError(errno.EISDIR, "Is a directory")
    assert (
        str(error.value) == f"predictions={tmp_path / 'p.jsonl'}: cannot write it (Is a directory); nothing was changed"
    )
    assert leftovers(tmp_path) == [] and not (tmp_path / "p.jsonl").exists()
    with pytest.raises(FileExistsError), atomic_write(under_a_file):
        pass
