"""Any text corpus (`data=text`): local files (`.txt`, `.jsonl`, `.parquet`; a file, a directory, a glob or a
list of them) or a Hugging Face dataset by name, tokenized once into a cache on disk and read through
`np.memmap`, so memory does not grow with the corpus.

- Documents: a `.txt` file's pieces between `data.separator`s (blank lines by default), a `.jsonl` line's
  or a parquet/dataset row's `data.text_field`. Each is followed by the end-of-text token, so a window
  that spans two documents sees where one ends.
- Split by document: each goes to validation with probability `data.val_fraction`, drawn from a generator
  seeded with (`data.split_seed`, its file's hash), so a file's split never depends on the other files.
- Cache (`data.cache_dir`): the tokenizer, then per file (a dataset counts as one) its training and
  validation ids as `uint16` where the vocabulary fits, else `uint32` (nanoGPT's `train.bin`), under a key
  over the file's SHA-256, the tokenizer and the split settings: a changed file is encoded again, an
  unchanged one never is. Each file of it is written under a temporary name and renamed into place, and
  a file's record is written last, so an interrupted preparation leaves nothing a later run would trust.
- Distributed: the process of local rank 0 prepares (Lightning's `prepare_data`); the others wait for the
  cache and read it.
"""

from __future__ import annotations

import codecs
import errno
import glob
import hashlib
import itertools
import json
import logging
import mmap
import os
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from transformer_lab.atomic import atomic_write
from transformer_lab.data.base import DataModule
from transformer_lab.data.configs import TextConfig
from transformer_lab.data.tokenizers import (
    KINDS,
    ByteTokenizer,
    CharTokenizer,
    Tokenizer,
    from_json,
    pretrained,
    train_bpe,
)
from transformer_lab.data.tokens import TokenStreams
from transformer_lab.errors import ConfigError, DataUnavailableError, first_line
from transformer_lab.files import MAGIC, BadFile, sha256_file

log = logging.getLogger(__name__)

SUFFIXES = (".txt", ".jsonl", ".parquet")
BATCH_CHARS = 1_000_000  # documents are read and encoded in batches of about this many characters (a HF
# tokenizer's Encodings take ~100 bytes a token: two batches in flight stay near 100 MB)
MAX_DOCUMENT = 1_000_000  # characters: a longer document is cut into documents of at most this many
WAIT_SECONDS = 3600  # how long a process of local rank > 0 waits for rank 0 to prepare the cache


# Sources: what the documents are read from.


@dataclass
class Source:
    label: str  # named in messages: a file's path, or a dataset's name
    key: str  # its contents' identity: a file's SHA-256, a dataset's name, configuration and split
    size: int | None  # bytes to read, for the progress bar (None: not known)
    batches: Callable[[], Iterator[tuple[list[str], int]]]  # (documents, bytes read) in order


def find_files(spec) -> list[Path]:
    """The corpus files `data.path` names: files, directories (searched recursively) and globs."""
    specs = [spec] if isinstance(spec, str) else list(spec)
    files: list[Path] = []
    for item in specs:
        path = Path(item)
        if path.is_dir():
            found = sorted(f for f in path.rglob("*") if f.suffix in SUFFIXES and f.is_file())
            if not found:
                raise DataUnavailableError(f"data.path: {item}: a directory with no {', '.join(SUFFIXES)} files")
        elif path.is_file():
            if path.suffix not in SUFFIXES:
                raise BadFile(path, f"is not a {', '.join(SUFFIXES)} file", "data.path")
            found = [path]
        elif glob.has_magic(item):
            found = sorted(Path(f) for f in glob.glob(item, recursive=True) if Path(f).suffix in SUFFIXES)
            if not found:
                raise DataUnavailableError(f"data.path: {item}: no {', '.join(SUFFIXES)} files match")
        else:
            raise BadFile(path, "no such file or directory", "data.path")
        files += [f for f in found if f not in files]
    return files


def cut(document: str) -> list[str]:
    """A document as pieces of at most MAX_DOCUMENT characters, each cut after the last whitespace before
    the limit where there is one (a tokenizer holds a whole document in memory, ~100 bytes a token)."""
    pieces = []
    while len(document) > MAX_DOCUMENT:
        end = max(
            document.rfind(" ", MAX_DOCUMENT // 2, MAX_DOCUMENT), document.rfind("\n", MAX_DOCUMENT // 2, MAX_DOCUMENT)
        )
        end = end + 1 if end > 0 else MAX_DOCUMENT
        pieces.append(document[:end])
        document = document[end:]
    return [*pieces, document]


def _text_batches(path: Path, separator: str) -> Iterator[tuple[list[str], int]]:
    """A UTF-8 text file's documents, read 1 MB at a time."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    rest, offset = "", 0
    with open(path, "rb") as f:
        while True:
            chunk = f.read(1 << 20)
            if offset == 0:
                for magic, kind in MAGIC.items():
                    if chunk.startswith(magic):
                        raise BadFile(path, f"is {kind}, not text", "data.path")
            pending = decoder.getstate()[0]  # the bytes of a character the last chunk cut
            try:
                text = rest + decoder.decode(chunk, final=not chunk)
            except UnicodeDecodeError as e:
                bad = (pending + chunk)[e.start]
                at = offset - len(pending) + e.start
                raise BadFile(path, f"is not UTF-8 text (byte 0x{bad:02x} at offset {at})", "data.path") from None
            offset += len(chunk)
            text = text.replace("\r\n", "\n")  # Windows line ends (files.read_text's rule; a \r held in `rest`
            pieces = text.split(separator)  # meets its \n in the next chunk)
            rest = pieces.pop() if chunk else ""  # the document the next chunk goes on with
            if len(rest) > MAX_DOCUMENT:  # a file without separators is cut, not held whole
                *whole, rest = cut(rest)
                pieces += whole
            yield [d for p in pieces if p.strip() for d in cut(p)], len(chunk)
            if not chunk:
                return


def _jsonl_batches(path: Path, field: str) -> Iterator[tuple[list[str], int]]:
    documents, size = [], 0
    with open(path, "rb") as f:
        for number, line in enumerate(f, 1):
            size += len(line)
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except (json.JSONDecodeError, UnicodeDecodeError) as e:
                problem = "is not UTF-8 text" if isinstance(e, UnicodeDecodeError) else f"is not JSON ({e.msg})"
                raise BadFile(path, problem, "data.path", number) from None
            text = record.get(field) if isinstance(record, dict) else None
            if not isinstance(text, str):
                raise BadFile(path, f"has no text field {field!r} (data.text_field)", "data.path", number)
            documents += cut(text)
            if size >= BATCH_CHARS:
                yield documents, size
                documents, size = [], 0
    yield documents, size


def _parquet_batches(path: Path, field: str) -> Iterator[tuple[list[str], int]]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise DataUnavailableError(
            f"data.path: {path}: reading .parquet needs pyarrow: pip install 'transformer_lab[corpora]'"
        ) from None
    try:
        table = pq.ParquetFile(path)
        if field not in table.schema_arrow.names:
            raise BadFile(path, f"has no column {field!r} (data.text_field)", "data.path")
        for batch in table.iter_batches(batch_size=4096, columns=[field]):
            documents = [piece for d in batch.column(0).to_pylist() if d for piece in cut(d)]
            yield documents, sum(len(d) for d in documents)
    except BadFile:
        raise
    except Exception as e:  # pyarrow's errors: not a parquet file, a broken one
        raise BadFile(path, f"does not read as parquet ({first_line(e)})", "data.path") from None


def _dataset_batches(config: TextConfig) -> Iterator[tuple[list[str], int]]:
    """A Hugging Face dataset's rows, streamed (`datasets.load_dataset(..., streaming=True)`)."""
    try:
        import datasets
    except ImportError:
        raise DataUnavailableError(
            f"data.dataset: reading {config.dataset} needs `datasets`: pip install 'transformer_lab[corpora]'"
        ) from None
    files = None if config.path is None else [str(f) for f in find_files(config.path)]
    try:
        rows = datasets.load_dataset(
            config.dataset, config.dataset_config, split=config.dataset_split, data_files=files, streaming=True
        )
        documents, size = [], 0
        for row in rows:
            text = row.get(config.text_field)
            if not isinstance(text, str):
                raise DataUnavailableError(
                    f"data.text_field: {config.dataset} has no text field {config.text_field!r} (its fields: "
                    f"{', '.join(row)})"
                )
            if text:
                documents += cut(text)
                size += len(text)
            if size >= BATCH_CHARS:
                yield documents, size
                documents, size = [], 0
        yield documents, size
    except DataUnavailableError:
        raise
    except Exception as e:  # the library's: no such dataset, no network, a split it does not have
        first = first_line(e)
        raise DataUnavailableError(f"data.dataset: {config.dataset} does not load ({first})") from None


def batched(batches: Iterator[tuple[list[str], int]]) -> Iterator[tuple[list[str], int]]:
    """The same documents regrouped into batches of about BATCH_CHARS characters (the last one shorter)."""
    documents, chars, size = [], 0, 0
    for docs, read in batches:
        documents += docs
        chars += sum(len(d) for d in docs)
        size += read
        if chars >= BATCH_CHARS:
            yield documents, size
            documents, chars, size = [], 0, 0
    if documents or size:
        yield documents, size


def sources(config: TextConfig, hashes: FileHashes) -> list[Source]:
    if config.dataset is not None:
        spec = {k: getattr(config, k) for k in ("dataset", "dataset_config", "dataset_split")}
        files = [] if config.path is None else find_files(config.path)
        spec["files"] = [hashes.sha256(f) for f in files]
        key = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()
        size = sum(f.stat().st_size for f in files) or None
        return [Source(config.dataset, key, size, lambda: batched(_dataset_batches(config)))]
    out = []
    for path in find_files(config.path):
        if path.suffix == ".txt":
            read = lambda p=path: batched(_text_batches(p, config.separator))  # noqa: E731
        elif path.suffix == ".jsonl":
            read = lambda p=path: batched(_jsonl_batches(p, config.text_field))  # noqa: E731
        else:
            read = lambda p=path: batched(_parquet_batches(p, config.text_field))  # noqa: E731
        out.append(Source(str(path), hashes.sha256(path), path.stat().st_size, read))
    return out


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


# The split: a document goes to validation with probability val_fraction.


def split_draws(config: TextConfig, source: Source) -> np.random.Generator:
    return np.random.default_rng([config.split_seed, int(source.key[:15], 16)])


def training_documents(config: TextConfig, all_sources: list[Source]) -> Iterator[str]:
    for source in all_sources:
        draws = split_draws(config, source)
        for documents, _ in source.batches():
            is_val = draws.random(len(documents)) < config.val_fraction
            yield from itertools.compress(documents, ~is_val)


# The tokenizer, learned once and kept in the cache.


def _digest(*parts) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:20]


def split_settings(config: TextConfig, whole: bool = False) -> dict:
    """What decides a file's split; `whole`: all of it is validation (a trained model evaluated on it)."""
    settings = {k: getattr(config, k) for k in ("val_fraction", "split_seed", "separator", "text_field", "end_of_text")}
    return {**settings, "val_fraction": 1.0} if whole else settings


def make_tokenizer(config: TextConfig, all_sources: list[Source], cache_dir: Path) -> Tokenizer:
    """data.tokenizer's tokenizer: read from the cache where this corpus learned it before."""
    kind = config.tokenizer
    if kind == "bytes":
        return ByteTokenizer(config.end_of_text)
    if kind not in KINDS:
        return pretrained(kind, config.end_of_text)
    learned_from = [s.key for s in all_sources]
    key = _digest(kind, config.vocab_size if kind == "bpe" else None, learned_from, split_settings(config))
    path = cache_dir / "tokenizers" / f"{kind}-{key}.json"
    if path.is_file():
        try:
            return from_json(path.read_text())
        except Exception as e:  # noqa: BLE001  (a cache from a crash or another version; tokenizers' own errors)
            log.warning("data: the cached tokenizer %s is unreadable (%s): learning it again", path, e)
    started = time.perf_counter()
    if kind == "char":  # every character of the corpus (one the validation text has must have an id too)
        chars: set[str] = set()
        for source in all_sources:
            for documents, _ in source.batches():
                for d in documents:
                    chars.update(d)
        tokenizer: Tokenizer = CharTokenizer(sorted(chars), config.end_of_text)
    else:
        tokenizer = train_bpe(training_documents(config, all_sources), config.vocab_size, config.end_of_text)
    log.info(
        "data: learned the %s tokenizer (%d ids) in %.1f s", kind, tokenizer.vocab_size, time.perf_counter() - started
    )
    with atomic_write(path, "w") as f:
        f.write(tokenizer.to_json())
    return tokenizer


def token_dtype(config: TextConfig, tokenizer: Tokenizer) -> np.dtype:
    fits16 = tokenizer.vocab_size <= 1 << 16
    if config.token_dtype == "uint16" and not fits16:
        raise ConfigError(
            "data.token_dtype",
            f"uint16 holds ids below 65,536 but the tokenizer has {tokenizer.vocab_size:,}; use uint32 or auto",
        )
    return np.dtype(
        np.uint16 if (config.token_dtype == "auto" and fits16) or config.token_dtype == "uint16" else np.uint32
    )


# Encoding: each source into a training and a validation file of ids.


@dataclass
class Shard:
    train: str  # the token files: names in the cache's shards/ folder (a moved or copied cache reads its own)
    val: str
    train_tokens: int
    val_tokens: int
    documents: int
    label: str


def flatten(encoded: list, eot_id: int, dtype: np.dtype) -> np.ndarray:
    """Each document's ids followed by the end-of-text id, as one array. `encoded`: what the tokenizer's
    encode_batch() gave (ids, or HF Encodings, whose ids are read here: in the thread that writes)."""
    if not encoded or isinstance(encoded[0], np.ndarray):  # char and bytes: arrays already
        eot = np.array([eot_id], dtype)
        return np.concatenate([np.empty(0, dtype), *(x for e in encoded for x in (e.astype(dtype, copy=False), eot))])
    flat: list[int] = []
    for e in encoded:
        flat.extend(getattr(e, "ids", e))  # (a list's extend, then one conversion: ~3x np.fromiter's speed)
        flat.append(eot_id)
    return np.array(flat, dtype=dtype)


def encoded_ahead(source: Source, tokenizer: Tokenizer) -> Iterator[tuple[list, int]]:
    """(encoded documents, bytes read) of each batch of a source, the next batch read and encoded in a
    second thread meanwhile: a HF tokenizer encodes without the GIL, so writing one batch costs no time
    beside encoding the next (measured: the pipeline ran 0.83x encode_batch's speed without this)."""
    batches = source.batches()

    def next_encoded():
        item = next(batches, None)
        if item is None:
            return None
        try:
            return tokenizer.encode_batch(item[0]), item[1]
        except ValueError as e:  # a character a checkpoint's vocabulary does not have
            raise DataUnavailableError(f"data.path: {source.label} has {e}") from None

    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(next_encoded)
        while (done := pending.result()) is not None:
            pending = pool.submit(next_encoded)
            yield done


def encode_source(
    config, source: Source, tokenizer: Tokenizer, dtype, folder: Path, key: str, progress, val_fraction: float
) -> Shard:
    draws = split_draws(config, source)
    counts = {"train": 0, "val": 0}
    documents = 0
    with atomic_write(folder / f"{key}.train.bin") as train, atomic_write(folder / f"{key}.val.bin") as val:
        for encoded, read in encoded_ahead(source, tokenizer):
            is_val = draws.random(len(encoded)) < val_fraction
            for split, f, keep in (("train", train, ~is_val), ("val", val, is_val)):
                array = flatten(list(itertools.compress(encoded, keep)), tokenizer.eot_id, dtype)
                f.write(array.tobytes())
                counts[split] += len(array)
            documents += len(encoded)
            progress.update(read)
    shard = Shard(
        f"{key}.train.bin",
        f"{key}.val.bin",
        counts["train"],
        counts["val"],
        documents,
        source.label,
    )
    with atomic_write(folder / f"{key}.json", "w") as f:  # last: its presence says the shard is complete
        json.dump(asdict(shard), f)
    return shard


def read_shard(folder: Path, key: str, label: str, itemsize: int) -> Shard | None:
    """A source's shard as its record says, its token files checked against the record (each file's size is
    its token count times `itemsize`); None where the cache lacks it or holds it incomplete (cut short, a file
    gone), whose record is then removed so that it is encoded again. Paths are the cache's own: a record that
    names absolute paths (written before records named files alone) is read for the files' names."""
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
    log.warning("data: the cache's tokens of %s are incomplete (%s): encoding it again", label, problem)
    record.unlink(missing_ok=True)
    return None


def local_rank() -> int:
    return int(os.environ.get("LOCAL_RANK", 0))


def wait_for(path: Path, seconds: float = WAIT_SECONDS) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        if time.monotonic() > deadline:
            raise DataUnavailableError(f"data: waited {seconds:.0f} s for local rank 0 to write {path}")
        time.sleep(0.5)


def prepare(
    config: TextConfig, tokenizer: Tokenizer | None = None, rank: int | None = None, whole: bool = False
) -> tuple[Tokenizer, list[Shard]]:
    """The corpus's tokenizer (`tokenizer`, a checkpoint's, where given) and its shards, encoded where the
    cache does not have them yet; a process of local rank > 0 waits for rank 0 to write them. `whole`: every
    document is validation (a trained model evaluated on the corpus)."""
    rank = local_rank() if rank is None else rank
    cache_dir = Path(config.cache_dir or Path(config.data_dir) / "corpus_cache")
    try:
        return _prepare(config, tokenizer, rank, whole, cache_dir)
    except OSError as e:  # the cache's writing (reading the corpus's files is BadFile's)
        where = Path(e.filename or cache_dir).absolute()
        if not (where.is_relative_to(cache_dir.absolute()) or cache_dir.absolute().is_relative_to(where)):
            raise
        raise DataUnavailableError(
            f"data.cache_dir: cannot write the corpus cache ({e.strerror}: {where}); "
            + ("free space there" if e.errno in (errno.ENOSPC, errno.EDQUOT) else "give a writable folder")
            + f" or another data.cache_dir (now {cache_dir})"
        ) from None


def _prepare(
    config: TextConfig, tokenizer: Tokenizer | None, rank: int, whole: bool, cache_dir: Path
) -> tuple[Tokenizer, list[Shard]]:
    from tqdm.auto import tqdm

    hashes = FileHashes(cache_dir)
    all_sources = sources(config, hashes)
    if rank == 0:
        hashes.save()
    tokenizer = tokenizer or make_tokenizer(config, all_sources, cache_dir)
    dtype = token_dtype(config, tokenizer)
    folder = cache_dir / "shards"
    tokenizer_key = _digest(tokenizer.to_json())
    keys = [_digest(s.key, tokenizer_key, dtype.str, split_settings(config, whole)) for s in all_sources]
    missing = [(s, k) for s, k in zip(all_sources, keys) if read_shard(folder, k, s.label, dtype.itemsize) is None]
    saved = cache_dir / "tokenizers" / f"encoded-with-{tokenizer_key}.json"  # what the token files mean
    if missing and rank == 0 and not saved.is_file():
        with atomic_write(saved, "w") as f:
            f.write(tokenizer.to_json())
    if missing and rank != 0:
        log.info("data: local rank %d waits for rank 0 to encode %d file(s)", rank, len(missing))
        for _, k in missing:
            wait_for(folder / f"{k}.json")
    elif missing:
        total = sum(s.size or 0 for s, _ in missing) or None
        started = time.perf_counter()
        with tqdm(  # (on a terminal alone, and erased when done: the log line below says what it did)
            total=total, unit="B", unit_scale=True, desc="data: encoding", mininterval=1, dynamic_ncols=True,
            disable=None, leave=False,
        ) as bar:  # fmt: skip
            for source, key in missing:
                encode_source(config, source, tokenizer, dtype, folder, key, bar, 1.0 if whole else config.val_fraction)
        seconds = time.perf_counter() - started
        log.info(
            "data: encoded %d file(s), %.1f MB, in %.1f s (%.1f MB/s)",
            len(missing),
            (total or 0) / 1e6,
            seconds,
            (total or 0) / 1e6 / seconds,
        )
    shards = [read_shard(folder, k, s.label, dtype.itemsize) for s, k in zip(all_sources, keys)]
    if any(shard is None for shard in shards):  # (written moments ago: another process is changing the cache)
        raise DataUnavailableError(f"data.cache_dir: {cache_dir}: a shard just written does not read back whole")
    return tokenizer, shards


class TokenFile:
    """Token ids in one or more files (uint16 or uint32), read through np.memmap: indexing with an index
    tensor gives those ids as int64 and reads only the pages they are on."""

    def __init__(self, paths: list[str], dtype: np.dtype):
        self.parts = [np.memmap(p, dtype=dtype, mode="r") for p in paths if os.path.getsize(p)]
        self.bounds = np.cumsum([0] + [len(p) for p in self.parts])
        for part in self.parts:
            part._mmap.madvise(mmap.MADV_RANDOM)  # no read-ahead around a random window

    def __len__(self) -> int:
        return int(self.bounds[-1])

    def __getitem__(self, index) -> torch.Tensor:
        if isinstance(index, slice):
            index = torch.arange(len(self))[index]
        index = np.asarray(index)
        if len(self.parts) == 1:
            out = self.parts[0][index]
        else:
            part = np.searchsorted(self.bounds, index, side="right") - 1
            out = np.empty(index.shape, self.parts[0].dtype)
            for k in np.unique(part):
                here = part == k
                out[here] = self.parts[k][index[here] - self.bounds[k]]
        for part in self.parts:  # unmap what was read: else each window's pages (and the kernel maps ~64 KB
            part._mmap.madvise(mmap.MADV_DONTNEED)  # around each) stay in this process's RSS, which then grows
        return torch.from_numpy(np.asarray(out).astype(np.int64))  # with the corpus (nanoGPT's memmap "leak")


class TextCorpusDataModule(DataModule):
    """A text corpus of any size (module docstring): the training and validation documents as streams of
    ids on disk."""

    provides = ("text",)
    length_key = "block_size"
    config_class = TextConfig

    def __init__(self, **settings):  # settings: TextConfig's
        super().__init__(**settings)
        self.tokenizer: Tokenizer | None = None
        self.shards: list[Shard] = []
        self.ready = False

    def prepare_data(self) -> None:
        if not self.shards:  # once (the run builds its data before Lightning asks again)
            self.tokenizer, self.shards = prepare(self.config, self.tokenizer, whole=self.whole_file)

    def for_checkpoint(self, meta: dict) -> None:
        self.tokenizer = from_json(meta["tokenizer"])

    def setup(self, stage: str | None = None) -> None:
        if self.ready:
            return
        if not self.shards:
            self.prepare_data()
        dtype = token_dtype(self.config, self.tokenizer)
        self.train = TokenFile([s.train for s in self.shards], dtype)
        self.val = TokenFile([s.val for s in self.shards], dtype)
        window = self.config.block_size + 1
        where = self.config.path if self.config.dataset is None else self.config.dataset
        documents = sum(s.documents for s in self.shards)
        if documents == 0:
            raise DataUnavailableError(f"data.path: {where}: no text (an empty corpus)")
        if self.whole_file and len(self.val) < window:  # (a trained model evaluated on all of it)
            raise DataUnavailableError(
                f"data.path: {where}: {len(self.val)} tokens in all, fewer than one window of data.block_size + 1 "
                f"= {window} to evaluate on"
            )
        for split, tokens in (("training", self.train), ("validation", self.val)):
            if len(tokens) < window and not self.whole_file:
                raise DataUnavailableError(
                    f"data.path: {where}: its {split} documents (of {documents}; data.val_fraction="
                    f"{self.config.val_fraction}) have {len(tokens)} tokens, fewer than one window of "
                    f"data.block_size + 1 = {window}"
                )
        self.ready = True

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.vocab_size

    @property
    def sequence_length(self) -> int:
        return self.config.block_size

    def decode(self, ids) -> str:
        return self.tokenizer.decode(ids)

    def encode(self, text: str) -> list[int]:
        return [int(i) for i in self.tokenizer.encode(text)]

    def sample_prompt_ids(self) -> list[int]:
        """A new document: the end-of-text token, then data.sample_prompt."""
        return [self.tokenizer.eot_id, *self.encode(self.config.sample_prompt)]

    def token_bytes(self) -> list[int]:
        return self.tokenizer.token_bytes()

    def checkpoint_meta(self) -> dict:
        return {"tokenizer": self.tokenizer.to_json()}

    def data_files(self) -> dict[str, str]:
        if self.config.dataset is not None or self.config.path is None:
            return {}
        hashes = FileHashes(Path(self.config.cache_dir or Path(self.config.data_dir) / "corpus_cache"))
        return {str(p.absolute()): hashes.sha256(p) for p in find_files(self.config.path)}

    def token_streams(self) -> TokenStreams:
        if not self.ready:  # after for_checkpoint() alone: the vocabulary
            empty = torch.empty(0, dtype=torch.long)
            train = val = empty
        else:
            train, val = self.train, self.val
        return TokenStreams(
            train,
            val,
            self.vocab_size,
            decode=self.decode,
            encode=self.encode,
            pad_id=self.tokenizer.pad_id,
            eos_id=self.tokenizer.eot_id,
        )
