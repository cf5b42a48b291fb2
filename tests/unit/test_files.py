"""The one path by which a user's files are read (files.py), the run directory's lock and ownership
(store/rundir.py), and the temporaries a killed writer leaves (store/atomic.py)."""

import fcntl
import gzip
import json
import os
import subprocess

import pytest

from transformer_lab.errors import UserError
from transformer_lab.store.atomic import _HOST, MANIFEST, atomic_write, remove_stale_temporaries
from transformer_lab.store.files import read_json, read_jsonl, read_text
from transformer_lab.store.rundir import (
    DISCARDED,
    LOCK,
    OVERWRITTEN,
    check_claim,
    claim,
    discard_overwritten,
    lock,
    readable,
    release,
    restore_overwritten,
)


@pytest.mark.parametrize(
    "content, problem",
    [
        (gzip.compress(b"To be, or not to be\n", mtime=0), "text.txt: is gzip-compressed (gunzip it first), not text"),
        (b"PK\x03\x04rest of a zip", "text.txt: is a zip archive (unzip it first), not text"),
        (b"line one\nline two\x00\x01\x02", "text.txt:2: is binary, not text (a NUL byte)"),
        ("one\ntwo\nthr\xe9e\n".encode("latin-1"), "text.txt:3: is not UTF-8 text (byte 0xe9 at column 4)"),
    ],
    ids=["gzip", "zip", "binary", "latin-1"],
)
def test_a_file_that_is_not_text_is_named_with_its_line(tmp_path, content, problem):
    (tmp_path / "text.txt").write_bytes(content)
    with pytest.raises(UserError) as error:
        read_text(tmp_path / "text.txt", "data.path")
    assert str(error.value) == f"data.path: {tmp_path / problem}"


def test_a_missing_or_folder_path_is_named(tmp_path):
    with pytest.raises(UserError, match="nope.txt: no such file"):
        read_text(tmp_path / "nope.txt")
    with pytest.raises(UserError, match="is a directory, not a file"):
        read_text(tmp_path)


def test_a_torn_last_line_of_metrics_jsonl_is_dropped_a_bad_earlier_one_is_named(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1, "train/loss": 2.5}\n{"step": 2, "train/loss": 2.4}\n{"step": 3, "train/lo')
    assert [r["step"] for r in read_jsonl(path)] == [1, 2]
    path.write_text('{"step": 1}\n{"step": 2, "train\n{"step": 3}\n')
    with pytest.raises(UserError, match=r"metrics.jsonl:2: is not a JSON object"):
        read_jsonl(path)
    path.write_text('{"step": 1}\n[1, 2]\n')
    with pytest.raises(UserError, match=r"metrics.jsonl:2: is not a JSON object \(a list\)"):
        read_jsonl(path)


def test_summary_json_that_is_not_an_object_is_named(tmp_path):
    path = tmp_path / "summary.json"
    path.write_text('{"status": "completed", ')
    with pytest.raises(UserError, match=r"summary.json:1: is not JSON"):
        read_json(path)
    path.write_text(json.dumps({"status": "completed"}))
    assert read_json(path) == {"status": "completed"}


def dead_pid() -> int:
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


def test_temporaries_of_a_killed_writer_are_removed_a_live_ones_kept(tmp_path):
    dead = [tmp_path / f".last.ckpt.{dead_pid()}@{_HOST}.x{i}.tmp" for i in range(3)]
    alive = tmp_path / f".last.ckpt.{os.getpid()}@{_HOST}.y.tmp"
    other_host = tmp_path / f".last.ckpt.{dead_pid()}@elsewhere.z.tmp"  # (its pid means nothing here)
    for path in (*dead, alive, other_host):
        path.write_bytes(b"half a checkpoint")
    with atomic_write(tmp_path / "last.ckpt") as f:
        f.write(b"whole")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([alive.name, other_host.name, "last.ckpt"])
    assert remove_stale_temporaries(tmp_path) == []


def test_a_run_directory_has_one_writer_and_a_dead_writers_lock_frees_it(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    holder = os.open(run / LOCK, os.O_RDWR | os.O_CREAT)
    os.write(holder, b"4242\n")
    fcntl.flock(holder, fcntl.LOCK_EX | fcntl.LOCK_NB)  # another writer (another open file: flock conflicts)
    with pytest.raises(UserError, match=r"hydra.run.dir=.*/run: another process \(pid 4242\) is writing"):
        lock(run, "hydra.run.dir")
    os.close(holder)  # the holder's end (as a kill -9's): the kernel drops its lock
    lock(run, "hydra.run.dir")
    assert (run / LOCK).read_text() == f"{os.getpid()}\n"
    release(run)


def listed(run):
    """The files of `run` in its manifest, as a run lists what it writes (store/atomic.py)."""
    (run / MANIFEST).write_text("".join(f"{p.relative_to(run).as_posix()}\n" for p in run.rglob("*") if p.is_file()))


@pytest.mark.parametrize(
    "summary, last, message",
    [
        ({"status": "completed", "global_step": 30}, True, "holds a completed run (step 30); train it further with"),
        (
            {"status": "interrupted", "global_step": 12},
            True,
            "holds an unfinished run (interrupted, with a checkpoints",
        ),
        (
            None,
            False,
            "holds another run's files (metrics.jsonl, checkpoints; no checkpoint to resume); nothing there can",
        ),
    ],
)
def test_a_directory_holding_a_run_is_refused_unless_resumed_or_overwritten(tmp_path, summary, last, message):
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "best.ckpt").write_bytes(b"weights")
    (run / "metrics.jsonl").write_text('{"step": 1}\n')
    if summary:
        (run / "summary.json").write_text(json.dumps(summary))
    if last:
        (run / "checkpoints" / "last.ckpt").write_bytes(b"weights")
    listed(run)
    stale = run / "checkpoints" / f".last.ckpt.{dead_pid()}@{_HOST}.a.tmp"
    stale.write_bytes(b"half")
    with pytest.raises(UserError) as error:
        claim(run, "hydra.run.dir", None, overwrite=False)
    assert message in str(error.value) and "overwrite=true" in str(error.value)
    assert not stale.exists() and (run / "metrics.jsonl").exists()  # refused: nothing else touched
    claim(run, "hydra.run.dir", run / "checkpoints" / "last.ckpt", overwrite=False)  # resuming it: allowed
    release()
    with pytest.raises(UserError, match="overwrite=true"):  # resuming another run's checkpoint into it: refused
        claim(run, "hydra.run.dir", tmp_path / "elsewhere" / "last.ckpt", overwrite=False)
    (run / "corpus.txt").write_text("a user's own file beside the run\n")
    (run / "checkpoints" / "my_resnet.pt").write_bytes(b"the user's")  # in a run's folder, not a run's file
    claim(run, "hydra.run.dir", None, overwrite=True)
    # what the run wrote is set aside until the new run trains; the user's files stay where they were
    assert sorted(p.name for p in run.iterdir()) == [LOCK, OVERWRITTEN, "checkpoints", "corpus.txt"]
    assert [p.name for p in (run / "checkpoints").iterdir()] == ["my_resnet.pt"]
    aside = sorted(str(p.relative_to(run / OVERWRITTEN)) for p in (run / OVERWRITTEN).rglob("*") if p.is_file())
    assert aside == [
        MANIFEST,
        "checkpoints/best.ckpt",
        *(["checkpoints/last.ckpt"] if last else []),
        "metrics.jsonl",
    ] + (["summary.json"] if summary else [])
    release()


def test_an_overwrite_that_fails_before_training_puts_the_earlier_run_back(tmp_path):
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "best.ckpt").write_bytes(b"weights")
    (run / "summary.json").write_text('{"status": "completed", "global_step": 30}')
    (run / ".hydra").mkdir()
    (run / ".hydra" / "config.yaml").write_text("old: record\n")
    listed(run)
    (run / "notes.md").write_text("mine\n")
    before = {p.relative_to(run): p.read_bytes() for p in run.rglob("*") if p.is_file()}
    claim(run, "hydra.run.dir", None, overwrite=True)
    (run / ".hydra").mkdir()  # what the new run wrote before it failed
    (run / ".hydra" / "config.yaml").write_text("new: record\n")
    (run / "summary.json").write_text('{"status": "failed"}')
    restore_overwritten(run)
    after = {p.relative_to(run): p.read_bytes() for p in run.rglob("*") if p.is_file() and p.name != LOCK}
    assert after == before
    release()
    # a run killed between the claim and its first step: the next claim puts the earlier run back first
    claim(run, "hydra.run.dir", None, overwrite=True)
    release()
    with pytest.raises(UserError, match="holds a completed run"):
        claim(run, "hydra.run.dir", None, overwrite=False)
    assert {p.relative_to(run): p.read_bytes() for p in run.rglob("*") if p.is_file() and p.name != LOCK} == before
    claim(run, "hydra.run.dir", None, overwrite=True)
    discard_overwritten(run)  # the new run started training
    assert sorted(p.name for p in run.iterdir()) == [LOCK, "notes.md"]  # (checkpoints/, emptied, went too)
    release()


def test_what_a_started_run_replaced_is_never_put_back_even_half_deleted(tmp_path):
    """The earlier run's files are renamed to DISCARDED in one step as the new run starts training: a kill -9 while
    they are deleted leaves part of them there, which the next claim deletes and no read finds."""
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "best.ckpt").write_bytes(b"the earlier run's")
    (run / "summary.json").write_text('{"status": "completed", "global_step": 30}')
    listed(run)
    claim(run, "hydra.run.dir", None, overwrite=True)
    assert readable(run / "checkpoints" / "best.ckpt") == run / OVERWRITTEN / "checkpoints" / "best.ckpt"
    (run / "checkpoints").mkdir()
    (run / "checkpoints" / "last.ckpt").write_bytes(b"the new run's")  # (it trains: what it replaced goes)
    os.replace(run / OVERWRITTEN, run / DISCARDED)  # (discard_overwritten's one step; then killed mid-delete)
    (run / DISCARDED / "summary.json").unlink()
    release()
    assert readable(run / "checkpoints" / "best.ckpt") == run / "checkpoints" / "best.ckpt"  # (not there: not found)
    claim(run, "hydra.run.dir", run / "checkpoints" / "last.ckpt", overwrite=False)  # (its resume)
    assert sorted(p.name for p in run.iterdir()) == [LOCK, "checkpoints"]
    assert [p.name for p in (run / "checkpoints").iterdir()] == ["last.ckpt"]
    discard_overwritten(run)
    release()


def a_run(run):
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "best.ckpt").write_bytes(b"the earlier run's")
    (run / "summary.json").write_text('{"status": "completed", "global_step": 30}')
    listed(run)
    return {p.relative_to(run): p.read_bytes() for p in run.rglob("*") if p.is_file()}


def test_a_users_own_set_aside_names_are_theirs(tmp_path):
    """A folder of the user's named .overwritten/ (or .overwritten.discarded/) has no run's manifest in it: no claim
    takes it for a set-aside run to put back (it replaced the run's summary.json and their notes) or deletes it."""
    run = tmp_path / "run"
    before = a_run(run)
    (run / OVERWRITTEN).mkdir()
    (run / OVERWRITTEN / "summary.json").write_text("theirs")
    (run / DISCARDED).mkdir()
    (run / DISCARDED / "backup.txt").write_text("theirs")
    before |= {p.relative_to(run): p.read_bytes() for p in run.rglob("*") if p.is_file()}
    with pytest.raises(UserError, match="holds a completed run"):
        claim(run, "hydra.run.dir", None, overwrite=False)
    with pytest.raises(UserError, match=r"cannot set the earlier run's files aside \(File exists"):
        claim(run, "hydra.run.dir", None, overwrite=True)
    release()
    assert {p.relative_to(run): p.read_bytes() for p in run.rglob("*") if p.is_file() and p.name != LOCK} == before
    assert readable(run / "checkpoints" / "best.ckpt") == run / "checkpoints" / "best.ckpt"


@pytest.mark.parametrize("stop", [KeyboardInterrupt, SystemExit])
def test_a_stop_while_the_earlier_run_is_set_aside_puts_it_all_back(tmp_path, monkeypatch, stop):
    """Ctrl-C or SIGTERM (a SystemExit) between two of set_aside's moves: what had moved goes back, at once."""
    import transformer_lab.store.rundir as rundir

    run = tmp_path / "run"
    before = a_run(run)
    moves, replace = [], os.replace

    def stopped_at_the_second(source, target):
        moves.append(source)
        if len(moves) == 2:
            raise stop
        replace(source, target)

    monkeypatch.setattr(rundir.os, "replace", stopped_at_the_second)
    with pytest.raises(stop):
        claim(run, "hydra.run.dir", None, overwrite=True)
    monkeypatch.undo()
    release()
    assert {p.relative_to(run): p.read_bytes() for p in run.rglob("*") if p.is_file() and p.name != LOCK} == before


def test_no_run_goes_into_a_set_aside_folder_and_a_directory_that_cannot_be_written_is_one_line(tmp_path):
    run = tmp_path / "run"
    a_run(run)
    claim(run, "hydra.run.dir", None, overwrite=True)
    release()  # (as a kill -9 leaves it)
    with pytest.raises(UserError) as refused:
        check_claim(run / OVERWRITTEN, "hydra.run.dir", None, overwrite=True)
    assert str(refused.value) == (
        f"hydra.run.dir={run / OVERWRITTEN}: is where overwrite=true sets a run aside, no run's place; choose another "
        "hydra.run.dir"
    )
    (tmp_path / "a-file").write_text("not a folder")
    with pytest.raises(UserError) as refused:
        lock(tmp_path / "a-file" / "run", "hydra.run.dir")
    assert str(refused.value) == (
        f"hydra.run.dir={tmp_path / 'a-file' / 'run'}: cannot write there (Not a directory); choose another hydra.run.dir"
    )


def test_a_resume_while_another_process_sets_the_run_aside_names_that_process(tmp_path):
    """Not 'last.ckpt does not exist': the other process's overwrite is under way, its files set aside."""
    from omegaconf import OmegaConf

    from transformer_lab.store.checkpoint import checkpoint_path

    run = tmp_path / "run"
    a_run(run)
    claim(run, "hydra.run.dir", None, overwrite=True)
    release()
    fd = os.open(run / LOCK, os.O_RDWR)
    os.pwrite(fd, b"4242\n", 0)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # (an open file description of its own: another writer)
    try:
        with pytest.raises(UserError) as refused:
            checkpoint_path(OmegaConf.create({"ckpt_path": "last", "paths": {"output_dir": str(run)}}))
        assert str(refused.value).startswith(f"hydra.run.dir={run}: another process (pid 4242) is writing")
    finally:
        os.close(fd)


def test_no_run_inside_a_run_and_a_users_folder_under_an_overwrites_names_is_refused_up_front(tmp_path):
    run = tmp_path / "run"
    a_run(run)
    with pytest.raises(UserError) as refused:  # (a later overwrite=true of the outer run deleted it)
        check_claim(run / "checkpoints", "hydra.run.dir", None, overwrite=False)
    assert str(refused.value) == (
        f"hydra.run.dir={run / 'checkpoints'}: is inside the run directory {run}, a run's own; choose another "
        "hydra.run.dir"
    )
    (run / DISCARDED).mkdir()
    (run / DISCARDED / "x.txt").write_text("theirs")  # (overwrite=true's rename onto it was a traceback)
    with pytest.raises(UserError) as refused:
        check_claim(run, "hydra.run.dir", None, overwrite=True)
    assert str(refused.value) == (
        f"hydra.run.dir={run} holds {DISCARDED}, which no run wrote: overwrite=true sets a run aside under that "
        "name; move it, or choose another hydra.run.dir"
    )


def test_a_file_the_discard_cannot_delete_is_warned_and_the_new_run_goes_on(tmp_path, monkeypatch, caplog):
    import transformer_lab.store.rundir as rundir

    run = tmp_path / "run"
    a_run(run)
    claim(run, "hydra.run.dir", None, overwrite=True)

    def immutable(path):
        raise PermissionError(1, "Operation not permitted", str(path))

    monkeypatch.setattr(rundir, "_remove", immutable)
    discard_overwritten(run)  # (the new run started: a traceback here ended it, both runs gone)
    release()
    assert "cannot delete all of it (Operation not permitted" in caplog.text and (run / DISCARDED / MANIFEST).exists()


def test_a_commands_file_goes_nowhere_inside_a_run_not_through_a_link_nor_beside_a_set_aside_one(tmp_path):
    from transformer_lab.store.atomic import not_into_a_run

    run = tmp_path / "run"
    a_run(run)
    (tmp_path / "link").symlink_to(run / "checkpoints")
    aside = tmp_path / "aside"
    (aside / OVERWRITTEN).mkdir(parents=True)
    (aside / OVERWRITTEN / MANIFEST).write_text("summary.json\n")  # (a killed overwrite: no manifest at the top)
    for path, folder in [(tmp_path / "link" / "x.json", run), (aside / "x.json", aside)]:
        with pytest.raises(UserError) as refused:
            not_into_a_run(path, f"out={path}")
        assert str(refused.value) == (
            f"out={path}: inside the run directory {folder}, which a read never writes into: write it elsewhere"
        )
    not_into_a_run(tmp_path / "x.json", "out")  # (beside the runs: fine)


def test_what_a_started_run_discarded_is_no_run_to_list(tmp_path):
    from transformer_lab.api.runs import find_runs, unsummarised

    run = tmp_path / "run"
    a_run(run)
    claim(run, "hydra.run.dir", None, overwrite=True)
    os.replace(run / OVERWRITTEN, run / DISCARDED)  # (killed as it is deleted: the new run has no summary yet)
    release()
    assert find_runs([str(tmp_path)]) == [] and unsummarised([str(tmp_path)]) == []
