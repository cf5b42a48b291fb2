"""A run directory belongs to one run: one writer at a time (a lock the kernel drops with its process, so a
kill -9 cannot leave it stuck), and a directory holding another run's files is refused unless the command
resumes that run (`ckpt_path=last`) or asks to start afresh there (`overwrite=true`).

`overwrite=true` removes only what a run writes (RUN_WRITES), and not at once: those entries are moved into
OVERWRITTEN inside the directory when it is claimed, and removed once the new run starts training (its data
read, its model built: callbacks/overwrite.py). A run that fails or is stopped before then puts them back
(`restore_overwritten`), and so does the next claim of a directory where a killed run left them."""

from __future__ import annotations

import fcntl
import os
import shutil
from pathlib import Path

from transformer_lab.atomic import remove_stale_temporaries
from transformer_lab.errors import UserError

LOCK = ".lock"  # holds the writer's pid; an advisory flock on it is the claim
RUN_FILES = ("summary.json", "metrics.jsonl", "checkpoints")  # what makes a directory a run's
# Every entry a run writes into its directory (Hydra's record and log, ours, the loggers' folders); anything
# else there is the user's, and overwrite=true leaves it.
RUN_WRITES = (*RUN_FILES, ".hydra", "train.log", "translations", "csv", "tensorboard", "wandb", "lightning_logs")
OVERWRITTEN = ".overwritten"  # an earlier run's entries while the run replacing it has not started training
_held: dict[Path, int] = {}  # run directory -> the open lock file of this process's claim


def first_process() -> bool:
    """Whether this is a job's first process: the other DDP processes and SLURM tasks share its directory."""
    return all(int(os.environ.get(name) or 0) == 0 for name in ("RANK", "LOCAL_RANK", "NODE_RANK", "SLURM_PROCID"))


def lock(run_dir: Path, key: str) -> None:
    """Claims `run_dir` for this process, or refuses in one line naming the process that holds it."""
    run_dir = Path(run_dir).absolute()
    if run_dir in _held:
        return
    run_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(run_dir / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 32).decode(errors="replace").strip() or "?"
        os.close(fd)
        raise UserError(
            f"{key}={run_dir}: another process (pid {holder}) is writing to this run directory; "
            f"wait for it to end, or choose another {key}"
        ) from None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    _held[run_dir] = fd


def release(run_dir: Path | None = None) -> None:
    """Gives up this process's claim on `run_dir` (on every directory when None)."""
    for held in [Path(run_dir).absolute()] if run_dir is not None else list(_held):
        fd = _held.pop(held, None)
        if fd is not None:
            os.close(fd)  # (closing drops the flock)


def earlier_run(run_dir: Path) -> str | None:
    """What of another run `run_dir` holds, in words, or None when it holds none."""
    if not any((run_dir / name).exists() for name in RUN_FILES):
        return None
    summary, last = run_dir / "summary.json", run_dir / "checkpoints" / "last.ckpt"
    status, step = None, None
    if summary.is_file():
        from transformer_lab.files import read_json

        try:
            record = read_json(summary)
            status, step = record.get("status"), record.get("global_step")
        except UserError:
            status = "unreadable"
    if status == "completed":
        return f"holds a completed run (step {step})"
    if last.is_file():
        return f"holds an unfinished run ({status or 'stopped'}, with a checkpoints/last.ckpt to resume)"
    found = ", ".join(name for name in RUN_FILES if (run_dir / name).exists())
    return (
        f"holds another run's files ({found}{f'; {status} at step {step}' if status else ''}; no checkpoint to resume)"
    )


def claim(run_dir: Path, key: str, resumes: Path | None, overwrite: bool, keep: tuple[str, ...] = ()) -> None:
    """Locks `run_dir` for this run and checks that it may write there: a new directory, the run that
    `resumes` (a checkpoint file) belongs to, or, with `overwrite`, any directory, emptied first but for
    the lock and `keep` (what Hydra already wrote for this run)."""
    if not first_process():
        return
    run_dir = Path(run_dir).absolute()
    lock(run_dir, key)
    restore_overwritten(run_dir)  # (a run killed before it trained, after claiming with overwrite=true)
    remove_stale_temporaries(run_dir / "checkpoints")  # of a writer killed mid-write
    held = earlier_run(run_dir)
    if held is None:
        return
    if resumes is not None and Path(resumes).absolute().is_relative_to(run_dir):
        return  # resuming the run this directory holds
    if overwrite:
        set_aside(run_dir, keep)
        return
    release(run_dir)
    if "completed" in held:
        advice = "train it further with ckpt_path=last and a higher trainer.max_steps"
    elif "last.ckpt" in held:
        advice = "resume it with ckpt_path=last"
    else:
        advice = "nothing there can be resumed"
    raise UserError(
        f"{key}={run_dir} {held}; {advice}, start afresh there with overwrite=true (deleting what the "
        "run wrote once the new run starts training), "
        f"or choose another {key}"
    )


def set_aside(run_dir: Path, keep: tuple[str, ...] = ()) -> None:
    """Moves what a run wrote into `run_dir/OVERWRITTEN` (but `keep`: what Hydra already wrote for this run)."""
    aside = run_dir / OVERWRITTEN
    aside.mkdir()
    for name in RUN_WRITES:
        if name not in keep and (run_dir / name).exists():
            os.replace(run_dir / name, aside / name)


def restore_overwritten(run_dir: Path) -> None:
    """Puts back what `set_aside` moved, replacing what the run that failed to start wrote under those names."""
    aside = Path(run_dir) / OVERWRITTEN
    if not aside.is_dir():
        return
    for entry in aside.iterdir():
        _remove(run_dir / entry.name)
        os.replace(entry, run_dir / entry.name)
    aside.rmdir()


def discard_overwritten(run_dir: Path) -> None:
    """The run replacing an earlier one has started training: the earlier one's files go."""
    aside = Path(run_dir) / OVERWRITTEN
    if aside.is_dir():
        shutil.rmtree(aside)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()
