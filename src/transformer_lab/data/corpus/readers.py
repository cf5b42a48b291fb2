"""The corpus's sources and the documents read from them (`data.path`: `.txt`, `.jsonl`, `.parquet`, a file,
a directory, a glob or a list of them; `data.dataset`: a Hugging Face dataset by name), in batches of about
BATCH_CHARS characters.

- Documents: a `.txt` file's pieces between `data.separator`s (blank lines by default), a `.jsonl` line's
  or a parquet/dataset row's `data.text_field`; a longer document than MAX_DOCUMENT characters is cut.
"""

from __future__ import annotations

import codecs
import glob
import hashlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from transformer_lab.data.configs import TextConfig
from transformer_lab.data.corpus.cache import FileHashes
from transformer_lab.errors import DataUnavailableError, first_line
from transformer_lab.store.files import MAGIC, BadFile

SUFFIXES = (".txt", ".jsonl", ".parquet")
BATCH_CHARS = 1_000_000  # documents are read and encoded in batches of about this many characters (a HF
# tokenizer's Encodings take ~100 bytes a token: two batches in flight stay near 100 MB)
MAX_DOCUMENT = 1_000_000  # characters: a longer document is cut into documents of at most this many


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
