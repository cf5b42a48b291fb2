"""A run directory belongs to one run: one writer at a time (a lock the kernel drops with its process, so a
kill -9 cannot leave it stuck), and a directory holding another run's files is refused unless the command
resumes that run (`ckpt_path=last`) or asks to start afresh there (`overwrite=true`).

What a run writes there is listed in the directory's manifest (store/atomic.py, the one writer: every file it puts
in a claimed directory, and what the loggers and Hydra's record write). `overwrite=true` removes only that,
and not at once: those are moved into OVERWRITTEN inside the directory when it is claimed, and
removed once the new run starts training (its data read, its model built: callbacks/started.py): renamed to
DISCARDED in one step first, so a kill -9 while they are deleted leaves garbage, never half a run to put back. A run
that fails or is stopped before then (an error, Ctrl-C, SIGTERM) puts them back; a run killed outright (kill -9)
is put right by the next run that claims the directory (`recover`), and read where they are until then (`readable`)."""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import logging
import os
import shutil
import signal
import threading
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

from transformer_lab.errors import UserError
from transformer_lab.store.atomic import (
    MANIFEST,
    atomic_path,
    note_written,
    read_manifest,
    recording,
    remove_stale_temporaries,
    start_recording,
    stop_recording,
)
from transformer_lab.store.origins import typed_overrides

LOCK = ".lock"  # holds the writer's pid; an advisory flock on it is the claim
RUN_FILES = ("summary.json", "metrics.jsonl", "checkpoints")  # what makes a directory a run's
OVERWRITTEN = ".overwritten"  # an earlier run's files while the run replacing it has not started training
DISCARDED = ".overwritten.discarded"  # the same once that run started: being deleted, never put back
_held: dict[Path, int] = {}  # run directory -> the open lock file of this process's claim
_aside: set[Path] = set()  # run directories whose earlier run this process set aside and has not settled
_resumed: dict[Path, tuple[int, set[str]]] = {}  # a resume's directory -> train.log's size, .hydra's entries
_claimed: dict[Path, tuple[list[str] | None, set[str]]] = {}  # a claim not yet training -> its manifest then
# (None: there was none) and what the directory held then (a folder of the user's there before stays)


def first_process() -> bool:
    """Whether this is a job's first process: the other DDP processes and SLURM tasks share its directory."""
    return all(int(os.environ.get(name) or 0) == 0 for name in ("RANK", "LOCAL_RANK", "NODE_RANK", "SLURM_PROCID"))


def lock(run_dir: Path, key: str, write_pid: bool = True) -> None:
    """Claims `run_dir` for this process, or refuses in one line naming the process that holds it. Its pid
    goes into the lock file (`write_pid`; a claim writes it once the directory is found to be its own)."""
    run_dir = Path(run_dir).absolute()
    if run_dir in _held:
        return
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(run_dir / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        raise UserError(f"{named(run_dir, key)}: cannot write there ({e.strerror}); choose another {key}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 32).decode(errors="replace").strip() or "?"
        os.close(fd)
        raise UserError(
            f"{named(run_dir, key)}: another process (pid {holder}) is writing to this run directory; "
            f"wait for it to end, or choose another {key}"
        ) from None
    _held[run_dir] = fd
    if write_pid:
        mark_writer(run_dir)


def holds(run_dir: Path) -> bool:
    """Whether this process holds `run_dir`'s claim, taking it where no other process does: False while another
    process writes there (what this one would write there, a failed job's record, goes elsewhere)."""
    try:
        lock(run_dir, "hydra.run.dir")
    except UserError:
        return False
    return True


def mark_writer(run_dir: Path) -> None:
    """This process's pid in the lock file it holds (what a second process's refusal names)."""
    fd = _held[Path(run_dir).absolute()]
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)


def release(run_dir: Path | None = None) -> None:
    """Gives up this process's claim on `run_dir` (on every directory when None)."""
    for held in [Path(run_dir).absolute()] if run_dir is not None else list(_held):
        fd = _held.pop(held, None)
        if fd is not None:
            os.close(fd)  # (closing drops the flock)


def earlier_run(run_dir: Path) -> str | None:
    """What of another run `run_dir` holds, in words, or None when it holds none."""
    written = {p.parts[0] for p in written_by_a_run(run_dir) if p.parts[0] in RUN_FILES}
    if not written:
        return None
    summary, last = run_dir / "summary.json", run_dir / "checkpoints" / "last.ckpt"
    status, step = None, None
    if summary.is_file():
        from transformer_lab.store.files import read_json

        try:
            record = read_json(summary)
            status, step = record.get("status"), record.get("global_step")
        except UserError:
            status = "unreadable"
    if status == "completed":  # (debug=fast's completes without a checkpoint)
        return f"holds a completed run (step {step}{'' if last.is_file() else '; no checkpoint to train further from'})"
    if last.is_file():
        return f"holds an unfinished run ({status or 'stopped'}, with a checkpoints/last.ckpt to resume)"
    found = ", ".join(name for name in RUN_FILES if name in written)
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
    lock(run_dir, key, write_pid=False)  # (a refused claim leaves the lock file as it was)
    on_stop_put_back()  # (before anything is moved: a stop from here on puts it back)
    remove_discarded(run_dir)  # (a run killed while deleting what it replaced)
    restore_overwritten(run_dir)  # (a run killed with an earlier run set aside: it goes back first)
    remove_stale_temporaries(run_dir / "checkpoints")  # of a writer killed mid-write
    held = earlier_run(run_dir)
    if held is not None and not (resumes is not None and Path(resumes).absolute().is_relative_to(run_dir)):
        if not overwrite:
            release(run_dir)
            raise UserError(refusal(run_dir, key, held))
        set_aside(run_dir, keep)
    elif held is not None:
        note_resume(run_dir)  # resuming the run this directory holds
    held_then = {p.relative_to(run_dir).as_posix() for p in run_dir.rglob("*")}
    _claimed[run_dir] = (read_manifest(run_dir) if (run_dir / MANIFEST).is_file() else None, held_then)
    start_recording(run_dir)
    mark_writer(run_dir)


def check_claim(run_dir: Path, key: str, resumes: Path | None, overwrite: bool) -> None:
    """What `claim` would refuse, told before the run builds anything (its data, its model): another process
    writing there, or another run's files. Takes nothing: `claim` decides again once the run is built."""
    if not first_process():
        return
    run_dir = Path(run_dir).absolute()
    if {OVERWRITTEN, DISCARDED} & set(run_dir.parts):
        raise UserError(
            f"{named(run_dir, key)}: is where overwrite=true sets a run aside, no run's place; choose another {key}"
        )
    if outer := next((f for f in run_dir.parents if (f / MANIFEST).is_file()), None):
        raise UserError(
            f"{named(run_dir, key)}: is inside the run directory {outer}, a run's own; choose another {key}"
        )
    if theirs := [n for n in (OVERWRITTEN, DISCARDED) if (run_dir / n).exists() and not ours_or_empty(run_dir / n)]:
        raise users_in_the_way(run_dir, key, theirs, "overwrite=true sets a run aside under")
    if run_dir not in _held and (run_dir / LOCK).is_file():
        fd = os.open(run_dir / LOCK, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 32).decode(errors="replace").strip() or "?"
            raise UserError(
                f"{named(run_dir, key)}: another process (pid {holder}) is writing to this run directory; "
                f"wait for it to end, or choose another {key}"
            ) from None
        finally:
            os.close(fd)
    if ours(run_dir / OVERWRITTEN):
        return  # (an overwrite killed under way: `claim` puts the earlier run back, then decides)
    held = earlier_run(run_dir)
    resuming = resumes is not None and Path(resumes).absolute().is_relative_to(run_dir)
    if held is not None and not resuming and not overwrite:
        raise UserError(refusal(run_dir, key, held))
    if held is None and (theirs := not_a_runs(run_dir)):  # (overwrite=true too: it replaces a run's files only)
        raise users_in_the_way(run_dir, key, theirs, "a run writes its own files under")


def users_in_the_way(run_dir: Path, key: str, theirs: list[str], why: str) -> UserError:
    """The one refusal of a user's files under names a run (or its overwrite) writes."""
    many = len(theirs) > 1
    return UserError(
        f"{named(run_dir, key)} holds {' and '.join(theirs)}, which no run wrote: {why} "
        f"{'those names' if many else 'that name'}; move {'them' if many else 'it'}, or choose another {key}"
    )


RUN_NAMES = (".hydra", "train.log", "summary.json", "metrics.jsonl", "checkpoints/best.ckpt", "checkpoints/last.ckpt")


def not_a_runs(run_dir: Path) -> list[str]:
    """The names a run writes under (RUN_NAMES) that `run_dir` holds but no run wrote (its manifest does not list
    them): a user's own, which a new run would replace."""
    listed = {q.as_posix() for p in read_manifest(run_dir) for q in [Path(p), *Path(p).parents]}
    return [name for name in RUN_NAMES if (run_dir / name).exists() and name not in listed]


def named(run_dir: Path, key: str) -> str:
    """A run directory as a message names it: the setting that gave it, or a multirun job's own folder (its
    hydra.sweep.dir is the sweep's, above it: `hydra.sweep.dir=SWEEP/0` would be read as another sweep)."""
    return f"the job's directory {run_dir}" if key == "hydra.sweep.dir" else f"{key}={run_dir}"


def refusal(run_dir: Path, key: str, held: str) -> str:
    if "completed" in held and "no checkpoint" not in held:
        advice = "train it further with ckpt_path=last and a higher trainer.max_steps"
    elif "last.ckpt" in held:
        advice = "resume it with ckpt_path=last"
    else:
        advice = "nothing there can be resumed"
    return (
        f"{named(run_dir, key)} {held}; {advice}, start afresh there with overwrite=true (deleting what the "
        "run wrote once the new run starts training), "
        f"or choose another {key}"
    )


def ours(aside: Path) -> bool:
    """Whether a .overwritten/ (or .overwritten.discarded/) folder is one an overwrite made: the run's manifest is
    the first thing it moves there and the last it deletes; a folder of the user's so named is theirs."""
    return (aside / MANIFEST).is_file()


def ours_or_empty(aside: Path) -> bool:
    return ours(aside) or (aside.is_dir() and not any(aside.iterdir()))


def written_by_a_run(run_dir: Path, keep: tuple[str, ...] = ()) -> list[Path]:
    """What of `run_dir` a run wrote, relative to it, less `keep`: what its manifest lists (and the manifest).
    A folder listed stands for what is inside it."""
    listed = [Path(p) for p in read_manifest(run_dir) if (run_dir / p).exists() or (run_dir / p).is_symlink()]
    found = set(listed) | ({Path(MANIFEST)} if (run_dir / MANIFEST).is_file() else set())
    outermost = {p for p in found if not any(q in found for q in p.parents if q != Path("."))}
    return sorted((p for p in outermost if p.parts[0] not in keep), key=lambda p: p != Path(MANIFEST))  # (it first)


def set_aside(run_dir: Path, keep: tuple[str, ...] = ()) -> None:
    """Moves what a run wrote into `run_dir/OVERWRITTEN` (but `keep`: what Hydra already wrote for this run),
    keeping its place below (OVERWRITTEN/checkpoints/best.ckpt). A move that fails puts back what had moved
    and refuses the run, naming why: the earlier run stays as it was."""
    aside = run_dir / OVERWRITTEN
    try:
        aside.mkdir()
        _aside.add(run_dir)
        for relative in written_by_a_run(run_dir, keep):
            (aside / relative).parent.mkdir(parents=True, exist_ok=True)
            os.replace(run_dir / relative, aside / relative)
            _prune_empty(run_dir, (run_dir / relative).parent)  # (attention/step_5/, emptied: the run's too)
    except OSError as e:
        restore_overwritten(run_dir)
        raise UserError(
            f"hydra.run.dir={run_dir}: overwrite=true cannot set the earlier run's files aside ({e.strerror}: "
            f"{e.filename}); nothing was changed"
        ) from None
    except BaseException:  # (Ctrl-C, SIGTERM while moving them: all go back)
        restore_overwritten(run_dir)
        raise


def restore_overwritten(run_dir: Path) -> None:
    """Puts back what `set_aside` moved, replacing what the run that failed to start wrote under those names."""
    _aside.discard(Path(run_dir))
    aside = Path(run_dir) / OVERWRITTEN
    if ours_or_empty(aside):
        for entry in sorted(aside.iterdir(), key=lambda e: e.name == MANIFEST):  # (the manifest last)
            _put_back(entry, Path(run_dir) / entry.name)
        shutil.rmtree(aside)


def _put_back(entry: Path, target: Path) -> None:
    """`entry` at `target`: moved whole where nothing is there or a file of the new run is, merged into a
    folder that is there (checkpoints/ may hold the user's own files beside the run's)."""
    if entry.is_dir() and not entry.is_symlink() and target.is_dir() and not target.is_symlink():
        for child in entry.iterdir():
            _put_back(child, target / child.name)
        return
    _remove(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    os.replace(entry, target)


def _prune_empty(run_dir: Path, folder: Path, kept: set[str] = frozenset()) -> None:
    """Removes `folder` and the folders above it, up to `run_dir`, while they are empty (but those `kept`)."""
    while folder != run_dir and folder.is_relative_to(run_dir):
        if folder.relative_to(run_dir).as_posix() in kept:
            return
        try:
            folder.rmdir()
        except OSError:  # (not empty, or not there)
            return
        folder = folder.parent


def discard_overwritten(run_dir: Path) -> None:
    """The run replacing an earlier one has started training: the earlier one's files go, decided in one rename."""
    _aside.discard(Path(run_dir))
    if ours(Path(run_dir) / OVERWRITTEN):
        os.replace(Path(run_dir) / OVERWRITTEN, Path(run_dir) / DISCARDED)
    remove_discarded(Path(run_dir))


def remove_discarded(run_dir: Path) -> None:
    """What a started run replaced, deleted: its manifest last, so a kill -9 meanwhile leaves it ours to delete."""
    discarded = run_dir / DISCARDED
    if ours(discarded):
        try:
            for entry in discarded.iterdir():
                if entry.name != MANIFEST:
                    _remove(entry)
            (discarded / MANIFEST).unlink()
        except OSError as e:  # (an immutable file: the new run goes on; the next claim tries again)
            logging.getLogger(__name__).warning(
                "%s: cannot delete all of it (%s: %s)", discarded, e.strerror, e.filename
            )
    with contextlib.suppress(OSError):  # (emptied; a user's own folder so named, with files, stays)
        discarded.rmdir()


def recover(run_dir: Path) -> None:
    """A directory where a run set an earlier one aside and was killed before it could settle it (kill -9): the
    earlier run goes back, as a run starts there; a process writing there now (its overwrite, under way) is refused
    in the lock's one line."""
    run_dir = Path(run_dir).absolute()
    if not ours(run_dir / OVERWRITTEN) or run_dir in _held:
        return
    lock(run_dir, "hydra.run.dir")  # (another process writing there, its overwrite under way: its one line)
    try:
        restore_overwritten(run_dir)
    except OSError:
        pass
    finally:
        release(run_dir)


def readable(path: Path) -> Path:
    """Where a run's file is read: `path` itself, or where an overwrite=true that has not started training (or was
    killed) set it aside, RUN/.overwritten/REL for RUN/REL. Reads never move it back: a run started there does."""
    if Path(path).exists():
        return Path(path)
    absolute = Path(os.path.abspath(path))
    for folder in absolute.parents:
        if ours(folder / OVERWRITTEN) and (aside := folder / OVERWRITTEN / absolute.relative_to(folder)).exists():
            return aside
    return Path(path)


def note_resume(run_dir: Path) -> None:
    """A resume's claim: what it will add to the run's records (a line in train.log, a .hydra/TIME record)
    is known, to be taken back if it fails before its first step."""
    log = run_dir / "train.log"
    _resumed[run_dir] = (log.stat().st_size if log.is_file() else -1, {p.name for p in (run_dir / ".hydra").glob("*")})


def started(run_dir: Path) -> None:
    """This run started training: an earlier run it set aside goes, a resume's records stay."""
    run_dir = Path(run_dir).absolute()
    discard_overwritten(run_dir)
    _resumed.pop(run_dir, None)
    _claimed.pop(run_dir, None)


def unwind(run_dir: Path) -> None:
    """This run failed or was stopped before it trained: the directory goes back to what it was when it was
    claimed (an earlier run set aside returns; a resume's train.log lines and .hydra record go)."""
    run_dir = Path(run_dir).absolute()
    stop_recording(run_dir)
    if run_dir in _claimed:  # what this run wrote since its claim goes, and its manifest is as it was
        before, held_then = _claimed.pop(run_dir)
        for relative in set(read_manifest(run_dir)) - set(before or ()) - held_then:
            _remove(run_dir / relative)
            _prune_empty(run_dir, (run_dir / relative).parent, held_then)  # (a folder there before stays)
        if before is None:
            (run_dir / MANIFEST).unlink(missing_ok=True)
        else:
            with recording(run_dir), atomic_path(run_dir / MANIFEST) as tmp:  # (the run's own: not a read's)
                tmp.write_text("".join(f"{line}\n" for line in before))
    restore_overwritten(run_dir)
    size, records = _resumed.pop(run_dir, (None, None))
    if size is None:
        return
    log = run_dir / "train.log"
    if size < 0:
        log.unlink(missing_ok=True)
    elif log.is_file():
        os.truncate(log, size)
    for record in (run_dir / ".hydra").glob("*"):
        if record.name not in records:
            _remove(record)


def put_back_all() -> None:
    """What this process claimed and has not settled goes back (its exit, however it exits but SIGKILL)."""
    for run_dir in [*_aside, *_resumed, *_claimed]:
        unwind(run_dir)


_stop_handler_installed = False


def on_stop_put_back() -> None:
    """While a claimed directory is unsettled (a run not yet training), this process's exit puts it back: at exit
    (an error, Ctrl-C's KeyboardInterrupt) and on SIGTERM (stop_on_sigterm)."""
    global _stop_handler_installed
    if _stop_handler_installed or threading.current_thread() is not threading.main_thread():
        return
    _stop_handler_installed = True
    atexit.register(put_back_all)
    stop_on_sigterm()


def stop_on_sigterm() -> None:
    """SIGTERM, which otherwise ends Python without a word, becomes a SystemExit (exit code 143): every `finally`
    runs, so the writer's temporaries and an unsettled run directory are cleaned up on the way out. Installed
    by every command and train.py at their start. Once training has started, Lightning's own SIGTERM handling
    (a checkpoint, then a stop at the next step) calls this handler among its own, which then leaves it be."""
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _on_sigterm)


def _on_sigterm(signum, frame) -> None:
    if signal.getsignal(signal.SIGTERM) is _on_sigterm:
        raise SystemExit(128 + signum)  # (what was claimed and half-written goes back on the way out)
    # else: called among Lightning's handlers, which stop the run at the next step (then main.py unwinds a claim)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


@contextmanager
def record(run_dir: Path, cfg, overrides: list[str] | None, hydra):
    """The run's record, written once its directory is claimed (Hydra writes none: conf/hydra/default.yaml):
    by the job's first process, its config, Hydra's (`hydra`, its runtime config) and the overrides in
    `.hydra/` (`.hydra/TIME/` where a record is there already: a resume, whose config is composed from its
    checkpoint's overrides); and the run's log file for as long as it lasts (log_file)."""
    from omegaconf import OmegaConf

    if first_process():
        folder = run_dir / ".hydra"
        if earlier_run(run_dir) is None:  # (a new run: what an attempt that never trained left goes, a user's stays)
            users = not_a_runs(run_dir)
            for name in (".hydra", "train.log"):
                if name not in users:
                    _remove(run_dir / name)
        if (folder / "config.yaml").exists():
            folder = folder / f"{datetime.now():%Y-%m-%d_%H-%M-%S}"
        given = overrides if overrides is not None else typed_overrides(hydra)
        for name, content in (
            ("config.yaml", cfg),
            ("hydra.yaml", OmegaConf.create({"hydra": hydra})),
            ("overrides.yaml", OmegaConf.create(list(given))),
        ):
            with atomic_path(folder / name) as tmp:
                OmegaConf.save(content, tmp)
        note_written(folder)
    with log_file(run_dir, hydra) as handler:
        yield handler


@contextmanager
def log_file(run_dir: Path, hydra):
    """The log file of the run's process (train.log; a DDP process's ddp_process_N.log) as Hydra's job
    logging (`hydra`: its runtime config) would write it, from its settings, while inside."""
    # The job's first process writes train.log; the others their own (Lightning's launcher names them
    # ddp_process_N; processes started together, by torchrun or srun, are named here by their rank).
    rank = next((os.environ[v] for v in ("RANK", "SLURM_PROCID", "LOCAL_RANK") if os.environ.get(v)), "0")
    name = hydra.job.name if first_process() or hydra.job.name.startswith("ddp_process") else f"ddp_process_{rank}"
    try:
        handler = logging.FileHandler(run_dir / f"{name}.log")
    except FileNotFoundError:  # (another process's directory, removed as its run was refused: the console alone)
        yield None
        return
    note_written(run_dir / f"{name}.log")
    handler.setFormatter(
        logging.Formatter(hydra.job_logging.formatters[hydra.job_logging.handlers.file.formatter].format)
    )
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        handler.close()
