"""The one path by which a file a user names is read (a text, a TSV of pairs, a checkpoint, metrics.jsonl,
summary.json): a file that is not what it claims is one line naming it and what is wrong with it (its
line number where there is one), never a traceback. Imports neither torch nor Lightning."""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

from transformer_lab.errors import DataUnavailableError

log = logging.getLogger(__name__)

# The first bytes of the compressed and archive formats a text is most often handed over in.
MAGIC = {
    b"\x1f\x8b": "gzip-compressed (gunzip it first)",
    b"PK\x03\x04": "a zip archive (unzip it first)",
    b"BZh": "bzip2-compressed (bunzip2 it first)",
    b"\xfd7zXZ\x00": "xz-compressed (unxz it first)",
    b"(\xb5/\xfd": "zstd-compressed (unzstd it first)",
}


class BadFile(DataUnavailableError):
    """A file a user named is missing, unreadable, or not what it should be."""

    def __init__(self, path: str | Path, problem: str, key: str | None = None, line: int | None = None):
        where = f"{path}:{line}" if line is not None else str(path)
        super().__init__(f"{key + ': ' if key else ''}{where}: {problem}")


def existing_file(path: str | Path, key: str | None = None) -> Path:
    """`path`, which must be a readable file."""
    path = Path(path)
    if not path.exists():
        raise BadFile(path, "no such file", key)
    if not path.is_file():
        raise BadFile(path, "is a directory, not a file" if path.is_dir() else "is not a regular file", key)
    try:
        with open(path, "rb"):
            pass
    except OSError as e:
        raise BadFile(path, f"cannot be read ({e.strerror})", key) from None
    return path


def read_bytes(path: str | Path, key: str | None = None) -> bytes:
    path = existing_file(path, key)
    try:
        return path.read_bytes()
    except OSError as e:
        raise BadFile(path, f"cannot be read ({e.strerror})", key) from None


def decode_text(data: bytes, path: str | Path, key: str | None = None) -> str:
    """`data` as UTF-8 text; a compressed, binary or otherwise non-UTF-8 file is named with the line where
    it stops being text."""
    for magic, kind in MAGIC.items():
        if data.startswith(magic):
            raise BadFile(path, f"is {kind}, not text", key)
    nul = data.find(b"\x00")
    if nul >= 0:
        raise BadFile(path, "is binary, not text (a NUL byte)", key, data.count(b"\n", 0, nul) + 1)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        column = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        raise BadFile(path, f"is not UTF-8 text (byte 0x{data[e.start]:02x} at column {column})", key, line) from None


def read_text(path: str | Path, key: str | None = None) -> str:
    """A UTF-8 text file's contents, its Windows line ends (CR LF) read as LF: a file saved on Windows reads as
    the same text, its lines (pairs, labels, references) without a trailing CR."""
    return decode_text(read_bytes(path, key), path, key).replace("\r\n", "\n")


def sha256_file(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def read_jsonl(path: str | Path) -> list[dict]:
    """One JSON object a line. A torn last line (a crash mid-write leaves one without its newline) is
    dropped with a warning; a bad line before it is an error naming it."""
    text = read_text(path)
    lines = text.split("\n")
    records = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            if number == len(lines):  # the last line, with no newline after it: a write cut short
                log.warning("%s:%d: an unfinished last line (a crash mid-write?) is left out", path, number)
                break
            raise BadFile(path, f"is not a JSON object ({e.msg}, column {e.colno})", line=number) from None
        if not isinstance(record, dict):
            raise BadFile(path, f"is not a JSON object (a {type(record).__name__})", line=number)
        records.append(record)
    return records


def read_json(path: str | Path) -> dict:
    """A JSON object file (summary.json)."""
    try:
        record = json.loads(read_text(path))
    except json.JSONDecodeError as e:
        raise BadFile(path, f"is not JSON ({e.msg}, column {e.colno})", line=e.lineno) from None
    if not isinstance(record, dict):
        raise BadFile(path, f"holds a {type(record).__name__}, not a JSON object")
    return record
