"""prepare(): the corpus's tokenizer and shards, the cache completed where it lacks them. Each file of the
cache (`data.cache_dir`) is filed under a key over what decides its contents: the tokenizer under its kind,
vocabulary size, the sources' keys and the split settings; a source's shard under the source's key (a file's
SHA-256), the tokenizer, the id type and the split settings. A changed file is encoded again, an unchanged
one never is. Of processes started together, local rank 0 prepares and the others wait for it (ranks.py)."""

from __future__ import annotations

import errno
import logging
import time
from pathlib import Path

from transformer_lab.data.configs import TextConfig
from transformer_lab.data.corpus.cache import FileHashes, Shard, cache_folder, digest, read_shard, split_settings
from transformer_lab.data.corpus.encoding import encode_source, make_tokenizer, token_dtype
from transformer_lab.data.corpus.ranks import Ranks, local_rank_zero_first, started_together
from transformer_lab.data.corpus.readers import sources
from transformer_lab.data.tokenizers import Tokenizer
from transformer_lab.errors import DataUnavailableError
from transformer_lab.store.atomic import atomic_write

log = logging.getLogger(__name__)


def prepare(
    config: TextConfig, tokenizer: Tokenizer | None = None, ranks: Ranks | None = None, whole: bool = False
) -> tuple[Tokenizer, list[Shard]]:
    """The corpus's tokenizer (`tokenizer`, a checkpoint's, where given) and its shards, encoded where the
    cache does not have them yet. `whole`: every document is validation (a trained model evaluated on the
    corpus). `ranks`: this process among those started together (ranks.started_together(), by default)."""
    cache_dir = cache_folder(config)
    ranks = ranks or started_together()

    def run(write: bool) -> tuple[Tokenizer, list[Shard]]:
        try:
            return _prepare(config, tokenizer, whole, cache_dir, write)
        except OSError as e:  # the cache's writing (reading the corpus's files is BadFile's)
            where = Path(e.filename or cache_dir).absolute()
            if not (where.is_relative_to(cache_dir.absolute()) or cache_dir.absolute().is_relative_to(where)):
                raise
            raise DataUnavailableError(
                f"data.cache_dir: cannot write the corpus cache ({e.strerror}: {where}); "
                + ("free space there" if e.errno in (errno.ENOSPC, errno.EDQUOT) else "give a writable folder")
                + f" or another data.cache_dir (now {cache_dir})"
            ) from None

    return run(True) if ranks is None else local_rank_zero_first(ranks, run)


def _prepare(
    config: TextConfig, tokenizer: Tokenizer | None, whole: bool, cache_dir: Path, write: bool
) -> tuple[Tokenizer, list[Shard]]:
    """The preparation itself; where not `write` (local rank 0 prepared the cache), everything is read."""
    from tqdm.auto import tqdm

    hashes = FileHashes(cache_dir)
    all_sources = sources(config, hashes)
    if write:
        hashes.save()
    tokenizer = tokenizer or make_tokenizer(config, all_sources, cache_dir, learn=write)
    if tokenizer is None:
        raise _not_there(cache_dir, f"the {config.tokenizer} tokenizer")
    dtype = token_dtype(config, tokenizer)
    folder = cache_dir / "shards"
    tokenizer_key = digest(tokenizer.to_json())
    keys = [digest(s.key, tokenizer_key, dtype.str, split_settings(config, whole)) for s in all_sources]
    missing = [
        (s, k) for s, k in zip(all_sources, keys) if read_shard(folder, k, s.label, dtype.itemsize, write) is None
    ]
    if missing and not write:
        raise _not_there(cache_dir, f"the tokens of {missing[0][0].label}")
    saved = cache_dir / "tokenizers" / f"encoded-with-{tokenizer_key}.json"  # what the token files mean
    if missing and not saved.is_file():
        with atomic_write(saved, "w") as f:
            f.write(tokenizer.to_json())
    if missing:
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
    shards = [read_shard(folder, k, s.label, dtype.itemsize, write) for s, k in zip(all_sources, keys)]
    if any(shard is None for shard in shards):  # (written moments ago: another process is changing the cache)
        raise DataUnavailableError(f"data.cache_dir: {cache_dir}: a shard just written does not read back whole")
    return tokenizer, shards


def _not_there(cache_dir: Path, what: str) -> DataUnavailableError:
    return DataUnavailableError(
        f"data.cache_dir: {cache_dir}: local rank 0 prepared the corpus cache, but {what} is not there "
        "(is data.cache_dir one folder for the processes of a node?)"
    )
