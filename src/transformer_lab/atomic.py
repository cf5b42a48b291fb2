"""Write a file under a temporary name in the same folder and rename it into place: a crash never
leaves a truncated file that a later run would trust. A temporary name carries its writer's pid and host,
so the temporaries of a writer that was killed (kill -9 mid-write) are recognised and removed later."""

from __future__ import annotations

import os
import socket
import tempfile
from contextlib import contextmanager, suppress
from pathlib import Path

_HOST = socket.gethostname().replace("/", "_")
_UMASK = os.umask(0o022)
os.umask(_UMASK)  # (read once: setting it is the only way to read it)


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
                tmp.unlink()
                removed.append(tmp)
    return removed


@contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "wb"):
    """`with atomic_write(path) as f: ...` — the file appears at `path` only if the block completes."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(path.parent)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.{os.getpid()}@{_HOST}.", suffix=".tmp")
    try:
        with os.fdopen(fd, mode) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_UMASK)  # (mkstemp's 0600: the file gets the mode open() would have given it)
        os.replace(tmp, path)
    except BaseException:
        with suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
