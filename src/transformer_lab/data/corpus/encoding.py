"""Encoding the corpus: its tokenizer (`data.tokenizer`), learned from the training documents once and kept in
the cache, and each source encoded into a training and a validation file of ids (a shard).

- Split by document: each goes to validation with probability `data.val_fraction`, drawn from a generator
  seeded with (`data.split_seed`, its file's hash), so a file's split never depends on the other files.
- Each document is followed by the end-of-text token, so a window that spans two documents sees where one
  ends. Ids are `uint16` where the vocabulary fits, else `uint32` (nanoGPT's `train.bin`).
- Each file is written under a temporary name and renamed into place, and a shard's record is written last,
  so an interrupted encoding leaves nothing a later run would trust.
"""

from __future__ import annotations

import itertools
import json
import logging
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path

import numpy as np

from transformer_lab.data.configs import TextConfig
from transformer_lab.data.corpus.cache import Shard, digest, split_settings
from transformer_lab.data.corpus.readers import Source
from transformer_lab.data.tokenizers import (
    KINDS,
    ByteTokenizer,
    CharTokenizer,
    Tokenizer,
    from_json,
    pretrained,
    train_bpe,
)
from transformer_lab.errors import ConfigError, DataUnavailableError
from transformer_lab.store.atomic import atomic_write

log = logging.getLogger(__name__)


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


def make_tokenizer(
    config: TextConfig, all_sources: list[Source], cache_dir: Path, learn: bool = True
) -> Tokenizer | None:
    """data.tokenizer's tokenizer: read from the cache where this corpus learned it before, else learned and
    kept there (None instead where not `learn`: a process that only reads the cache)."""
    kind = config.tokenizer
    if kind == "bytes":
        return ByteTokenizer(config.end_of_text)
    if kind not in KINDS:
        return pretrained(kind, config.end_of_text)
    learned_from = [s.key for s in all_sources]
    key = digest(kind, config.vocab_size if kind == "bpe" else None, learned_from, split_settings(config))
    path = cache_dir / "tokenizers" / f"{kind}-{key}.json"
    if path.is_file():
        try:
            return from_json(path.read_text())
        except Exception as e:  # noqa: BLE001  (a cache from a crash or another version; tokenizers' own errors)
            log.warning("data: the cached tokenizer %s is unreadable (%s): learning it again", path, e)
    if not learn:
        return None
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
