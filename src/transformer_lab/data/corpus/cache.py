"""The corpus cache's bookkeeping (`data.cache_dir`): where it is, the files' hashes it remembers, the keys
its entries are filed under, and the records of the token files a source was encoded into (a source's
shard). The files themselves are written by encoding.py and read by token_file.py."""

from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from transformer_lab.data.configs import TextConfig
from transformer_lab.store.atomic import atomic_write
from transformer_lab.store.files import BadFile, sha256_file

log = logging.getLogger(__name__)


def cache_folder(config: TextConfig) -> Path:
    """`data.cache_dir`, by default the data folder's corpus_cache/."""
    return Path(config.cache_dir or Path(config.data_dir) / "corpus_cache")


class FileHashes:
    """SHA-256 of files, remembered in the cache by (path, size, modification time), so a second run
    does not read a large corpus again to know it has not changed."""

    def __init__(self, cache_dir: Path):
        self.path = cache_dir / "file_hashes.json"
        try:
            self.known = json.loads(self.path.read_text())
        except (OSError, ValueError):
            self.known = {}
        self.changed = False

    def sha256(self, path: Path) -> str:
        stat = path.stat()
        key = f"{path.absolute()}:{stat.st_size}:{stat.st_mtime_ns}"
        if key not in self.known:
            try:
                self.known[key] = sha256_file(path)
            except OSError as e:
                raise BadFile(path, f"cannot be read ({e.strerror})", "data.path") from None
            self.changed = True
        return self.known[key]

    def save(self) -> None:
        if self.changed:
            with atomic_write(self.path, "w") as f:
                json.dump(self.known, f)


def digest(*parts) -> str:
    """A cache key: a short hash of `parts`."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:20]


def split_settings(config: TextConfig, whole: bool = False) -> dict:
    """What decides a file's split; `whole`: all of it is validation (a trained model evaluated on it)."""
    settings = {k: getattr(config, k) for k in ("val_fraction", "split_seed", "separator", "text_field", "end_of_text")}
    return {**settings, "val_fraction": 1.0} if whole else settings


@dataclass
class Shard:
    train: str  # the token files: names in the cache's shards/ folder (a moved or copied cache reads its own)
    val: str
    train_tokens: int
    val_tokens: int
    documents: int
    label: str


def read_shard(folder: Path, key: str, label: str, itemsize: int, remove: bool = True) -> Shard | None:
    """A source's shard as its record says, its token files checked against the record (each file's size is
    its token count times `itemsize`); None where the cache lacks it or holds it incomplete (cut short, a file
    gone), whose record is then removed (where `remove`) so that it is encoded again. Paths are the cache's own:
    a record that names absolute paths (written before records named files alone) is read for the files' names."""
    record = folder / f"{key}.json"
    if not record.is_file():
        return None
    try:
        shard = Shard(**json.loads(record.read_text()))
        shard.train, shard.val = (str(folder / Path(name).name) for name in (shard.train, shard.val))
        counts = (shard.train_tokens, shard.val_tokens, shard.documents)
        problem = None if all(type(n) is int and n >= 0 for n in counts) else f"its record {record.name} is not one"
    except (ValueError, TypeError, AttributeError) as e:
        problem = f"its record {record.name} is unreadable ({e})"
    for path, count in () if problem else ((shard.train, shard.train_tokens), (shard.val, shard.val_tokens)):
        size = os.path.getsize(path) if os.path.isfile(path) else None
        if size != count * itemsize:
            problem = f"{Path(path).name} is " + (
                "missing" if size is None else f"{size:,} bytes, its record says {count:,} tokens of {itemsize}"
            )
            break
    if problem is None:
        return shard
    if remove:
        log.warning("data: the cache's tokens of %s are incomplete (%s): encoding it again", label, problem)
        record.unlink(missing_ok=True)
    return None
