"""Write a file under a temporary name in the same folder and rename it into place: a crash never
leaves a truncated file that a later run would trust."""

from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager, suppress
from pathlib import Path


@contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "wb"):
    """`with atomic_write(path) as f: ...` — the file appears at `path` only if the block completes."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, mode) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
