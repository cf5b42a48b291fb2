"""Fetch a file once from its canonical URL, verify its SHA-256, and never trust a partial download."""

from __future__ import annotations

import contextlib
import hashlib
import os
import urllib.request
from pathlib import Path

from transformer_lab.errors import DataUnavailableError
from transformer_lab.store.atomic import atomic_write
from transformer_lab.store.files import sha256_file


def ensure_file(path: str | os.PathLike, url: str, sha256: str, timeout: float = 30.0) -> Path:
    """Return `path`, downloading it from `url` first if it is absent.

    A file already there is used without network access once its checksum matches; a file with the
    wrong checksum is reported, not silently replaced. Downloads go to a temporary file in the same
    folder and are renamed into place only after the checksum matches.
    """
    path = Path(path)
    if path.exists():
        actual = sha256_file(path)
        if actual != sha256:
            raise DataUnavailableError(
                f"{path} has SHA-256 {actual}, expected {sha256}: the file is corrupt or a different "
                f"version. Delete it to download it again from {url}."
            )
        return path

    made = [folder for folder in path.parents if not folder.exists()]  # deepest first
    try:
        with atomic_write(path) as out, urllib.request.urlopen(url, timeout=timeout) as response:
            digest = hashlib.sha256()
            while chunk := response.read(1 << 20):
                out.write(chunk)
                digest.update(chunk)
            if digest.hexdigest() != sha256:
                raise DataUnavailableError(f"download from {url} has SHA-256 {digest.hexdigest()}, expected {sha256}")
    except BaseException as e:
        for folder in made:  # a failed download leaves no empty folders behind
            with contextlib.suppress(OSError):
                folder.rmdir()
        if not isinstance(e, OSError):
            raise
        raise DataUnavailableError(  # URLError and timeouts are OSErrors
            f"could not download {path.name} ({e}).\n"
            f"  Fetch it from {url}\n"
            f"  (SHA-256 {sha256})\n"
            f"  and put it at {path.resolve()}"
        ) from None
    return path
