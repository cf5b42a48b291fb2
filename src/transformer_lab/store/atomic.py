"""The one writer: every file a run or a command writes goes through here, under a temporary name in the same
folder renamed into place, so a crash, a signal or a full disk never leaves a cut file (or a half-filled folder)
where a whole one was, and the temporary goes on any error, Ctrl-C or SIGTERM (commands/cli.py and train.py make SIGTERM a
SystemExit until training starts). A temporary name carries its writer's pid and host, so the temporaries of a
writer that was killed (kill -9 mid-write) are recognised and removed later.

What the writer puts inside a run directory this process claimed (rundir.claim) is listed in that run's
MANIFEST: what overwrite=true sets aside, and what a run that fails before its first step takes back. A file a
library writes itself (a logger's) is listed with `note_written`. A disk that is full, read-only or refuses the
file is one line naming the file (a UserError), never the writing library's own exception."""

from __future__ import annotations

import errno
import os
import shutil
import socket
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from transformer_lab.errors import UserError

_HOST = socket.gethostname().replace("/", "_")
_UMASK = os.umask(0o022)
os.umask(_UMASK)  # (read once: setting it is the only way to read it)
MANIFEST = ".manifest"  # in a run directory: what its runs wrote, one path (relative to it) a line
_recording: dict[Path, set[str]] = {}  # claimed run directories -> what their manifest lists


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def remove_stale_temporaries(folder: str | os.PathLike) -> list[Path]:
    """Removes the temporaries in `folder` left by writers on this host that no longer run; returns them."""
    removed = []
    for tmp in Path(folder).glob(f".*.*@{_HOST}.*.tmp"):
        pid = tmp.name.rsplit("@", 1)[0].rsplit(".", 1)[-1]
        if pid.isdigit() and not _alive(int(pid)):
            with suppress(FileNotFoundError):
                shutil.rmtree(tmp) if tmp.is_dir() and not tmp.is_symlink() else tmp.unlink()
                removed.append(tmp)
    return removed


# ---- the manifest ----------------------------------------------------------------------------------------


def read_manifest(run_dir: str | os.PathLike) -> list[str]:
    """What the runs of `run_dir` wrote there, as its MANIFEST lists it (relative paths; [] without one)."""
    try:
        text = (Path(run_dir) / MANIFEST).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    return [line for line in dict.fromkeys(text.split("\n")) if line and not line.startswith(("/", ".."))]


def start_recording(run_dir: str | os.PathLike) -> None:
    """From now on, what this process writes into `run_dir` is listed in its manifest (rundir.claim)."""
    run_dir = Path(run_dir).absolute()
    _recording[run_dir] = set(read_manifest(run_dir))  # (afresh at each claim: a process may run several runs)


def stop_recording(run_dir: str | os.PathLike) -> None:
    _recording.pop(Path(run_dir).absolute(), None)


@contextmanager
def recording(run_dir: str | os.PathLike) -> Iterator[None]:
    """What this process writes into `run_dir` while inside is listed in its manifest, outside a claim (a failed
    job's record: a run's, which a new run replaces; not a user's)."""
    start_recording(run_dir)
    try:
        yield
    finally:
        stop_recording(run_dir)


def not_into_a_run(path: Path, where: str) -> None:
    """A file a command writes (out=, predictions=, a plot, maps) goes nowhere inside a run directory it has not
    claimed (one with a manifest, or one set aside in .overwritten/), through a symbolic link neither: a read never
    writes into a run, out= naming a run's own file included."""
    folders = Path(os.path.realpath(path)).parents
    if {Path(os.path.realpath(run_dir)) for run_dir in _recording} & set(folders):
        return
    for folder in folders:
        if (folder / MANIFEST).is_file() or (folder / ".overwritten" / MANIFEST).is_file():
            raise UserError(
                f"{where}: inside the run directory {folder}, which a read never writes into: write it elsewhere"
            )


def unmakeable(path: str | os.PathLike) -> tuple[Path, str | None]:
    """The nearest folder that exists at or above `path`, and why nothing can be made in it: a file there ("is a
    file"), or the system's word for a trial folder it refuses (os.access cannot tell for root or /proc); None: it can."""
    existing = Path(os.path.abspath(path))
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        return existing, "is a file"
    try:
        os.rmdir(tempfile.mkdtemp(dir=existing))
    except OSError as e:
        return existing, e.strerror or str(e)
    return existing, None


def check_destination(path: str | os.PathLike, where: str) -> None:
    """What a command will write (`where`: the option naming it, out=PATH), checked before it works: nowhere
    inside a run directory, and in a folder where it can be made."""
    not_into_a_run(Path(path), where)
    existing, why = unmakeable(Path(os.path.abspath(path)).parent)
    if why == "is a file":
        raise UserError(f"{where}: cannot write it, {existing} is a file")
    if why is not None:
        raise UserError(f"{where}: cannot write it in {existing} ({why})")


def note_written(path: str | os.PathLike) -> None:
    """Lists `path` (a file or folder this process wrote, itself or through a library) in the manifest of the
    claimed run directory it lies in; nothing outside one."""
    path = Path(path).absolute()
    for run_dir, listed in _recording.items():
        if path != run_dir and path.is_relative_to(run_dir):
            relative = path.relative_to(run_dir).as_posix()
            if relative not in listed and relative != MANIFEST:
                listed.add(relative)
                fd = os.open(run_dir / MANIFEST, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666 & ~_UMASK)
                try:  # (one short append: whole or not at all, even beside another writer)
                    os.write(fd, f"{relative}\n".encode())
                finally:
                    os.close(fd)


# ---- writing ---------------------------------------------------------------------------------------------

# What a disk says when it cannot take a file, as the libraries that write pass it on in their own exceptions
# (safetensors: "IoError(Os { code: 28, kind: StorageFull, ... })").
_DISK_REFUSALS = {
    errno.ENOSPC: "No space left on device",
    errno.EDQUOT: "Disk quota exceeded",
    errno.EFBIG: "File too large",
    errno.EROFS: "Read-only file system",
    errno.EACCES: "Permission denied",
    errno.EPERM: "Operation not permitted",  # (an immutable folder: chattr +i)
}


class DiskRefused(UserError):
    """A write the disk refused (full, read-only, ...): one line naming the file; `why` is the disk's word."""

    def __init__(self, message: str, why: str):
        super().__init__(message)
        self.why = why


def disk_refusal(error: BaseException | None) -> str | None:
    """Why the disk refused a write, where `error` (an OSError, a library's own exception naming one, or one raised
    while handling one: torch.save's "unexpected pos" over a file too large for `ulimit -f`) says so."""
    if error is None:
        return None
    if isinstance(error, OSError) and error.errno in _DISK_REFUSALS:  # (a connection error is an OSError too)
        return os.strerror(error.errno)
    text = "" if isinstance(error, OSError) else str(error)
    why = next((why for code, why in _DISK_REFUSALS.items() if why in text or f"code: {code}," in text), None)
    return why or disk_refusal(error.__cause__ or error.__context__)


def _refusal(error: BaseException, key: str | None) -> str | None:
    """Why a write failed, in one line: a disk's refusal, or any OSError where a command's option named the file."""
    why = disk_refusal(error) if isinstance(error, Exception) else None
    return why or (error.strerror or str(error) if key and isinstance(error, OSError) else None)


def _temporary_name(path: Path) -> str:
    return f".{path.name}.{os.getpid()}@{_HOST}.{os.urandom(4).hex()}.tmp"


@contextmanager
def atomic_path(path: str | os.PathLike, key: str | None = None) -> Iterator[Path]:
    """`with atomic_path(path) as tmp: library.save(tmp)` — for a library that writes a file by its name (an
    image, a safetensors file): what it wrote appears at `path` only if the block completes. `key`: the option
    that named the path (out=, predictions=): then any OSError is one line naming it, where otherwise only a
    disk's refusal is."""
    path = Path(path)
    not_into_a_run(path, f"{key}={path}" if key else str(path))
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:  # (a path under a file: a command's option's to word, a run's own a bug)
        if (why := _refusal(e, key)) is None:
            raise
        raise DiskRefused(f"{f'{key}=' if key else ''}{path}: cannot write it ({why})", why) from None
    remove_stale_temporaries(path.parent)
    tmp = path.parent / _temporary_name(path)
    try:
        yield tmp
        if tmp.is_file():
            os.chmod(tmp, 0o666 & ~_UMASK)
            with open(tmp, "rb+") as f:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        with suppress(FileNotFoundError, NotADirectoryError):
            shutil.rmtree(tmp) if tmp.is_dir() and not tmp.is_symlink() else tmp.unlink()
        why = _refusal(e, key)
        if why is not None and not isinstance(e, UserError):
            where = f"{key}={path}" if key else str(path)
            raise DiskRefused(f"{where}: cannot write it ({why}); nothing was changed", why) from None
        raise
    note_written(path)


@contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "wb", key: str | None = None):
    """`with atomic_write(path) as f: ...` — the file appears at `path` only if the block completes."""
    with atomic_path(path, key) as tmp, open(tmp, mode) as f:
        yield f
        f.flush()


@contextmanager
def staging_folder(path: str | os.PathLike, key: str | None = None) -> Iterator[Path]:
    """A folder beside `path`, named as the writer's temporaries are (a killed writer's is found and removed),
    to fill and then rename into place; removed on any error or signal inside the block, and a disk that
    refuses it is one line (a UserError)."""
    path = Path(path)
    where = f"{key}={path}" if key else str(path)
    not_into_a_run(path, where)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_temporaries(path.parent)
        staging = path.parent / _temporary_name(path)
        staging.mkdir()
    except OSError as e:
        raise UserError(f"{where}: cannot write it ({e.strerror or e})") from None
    try:
        yield staging
    except BaseException as e:
        shutil.rmtree(staging, ignore_errors=True)
        why = _refusal(e, key)
        if why is not None and not isinstance(e, UserError):
            raise DiskRefused(f"{where}: cannot write it ({why}); nothing was written", why) from None
        raise


@contextmanager
def atomic_dir(path: str | os.PathLike, key: str | None = None) -> Iterator[Path]:
    """`with atomic_dir(folder) as staging: ...` — a folder filled aside and renamed into place in one step, only if
    the block completes (`folder` must not exist, or be empty); on any error or signal the staging folder goes."""
    path = Path(path)
    with staging_folder(path, key) as staging:
        yield staging
        try:
            os.replace(staging, path)  # (onto an empty folder too; one that filled meanwhile refuses)
        except OSError as e:
            why = "another writer filled it meanwhile" if path.exists() else (e.strerror or str(e))
            raise UserError(
                f"{f'{key}={path}' if key else path}: cannot write it ({why}); nothing was written"
            ) from None
    note_written(path)
