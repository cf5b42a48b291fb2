"""In-memory batch iterables that Lightning consumes directly.

No DataLoader: the data is already tensors, so there is nothing to collate or parallelise, and a
DataLoader would draw a seed from the global random generator each time it is iterated, which would
shift dropout's random stream between a run and its resumption.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch


class ResumesAtStep:
    """A training stream whose place is the trainer's step count, which a checkpoint restores (`position()`, or the
    `start` batch it is built with): a resumed run continues it at the next batch, so it has nothing of its own to
    save. These two methods say so to Lightning, which otherwise warns on every resume inside an epoch that the
    stream "is not resumable" (its `state_dict`/`load_state_dict` interface; the state it keeps is this empty one)."""

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass


class Batches:
    """Consecutive batches of rows of (x, y), in order (for evaluation)."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, batch_size: int):
        self.x, self.y, self.batch_size = x, y, batch_size

    def __len__(self) -> int:
        return math.ceil(len(self.x) / self.batch_size)

    def __iter__(self):
        for i in range(0, len(self.x), self.batch_size):
            yield self.x[i : i + self.batch_size], self.y[i : i + self.batch_size]


class LazyBatches:
    """Evaluation batches made as they are drawn, `make(rows)` for each range of `batch_size` rows in order:
    a large validation split is never held in memory, and `trainer.limit_val_batches` makes only the
    batches it takes."""

    def __init__(self, rows: int, batch_size: int, make: Callable[[range], tuple]):
        self.rows, self.batch_size, self.make = rows, batch_size, make

    def __len__(self) -> int:
        return math.ceil(self.rows / self.batch_size)

    def __iter__(self):
        for start in range(0, self.rows, self.batch_size):
            yield self.make(range(start, min(start + self.batch_size, self.rows)))


class ShuffledBatches(ResumesAtStep):
    """Batches of rows of (x, y), reshuffled each epoch by a generator seeded with (seed, epoch).

    `position()` says, when an epoch starts, which epoch it is and how many of its batches are already
    done; a run resumed mid-epoch therefore sees the same order and continues at the next batch.
    """

    def __init__(
        self, x: torch.Tensor, y: torch.Tensor, batch_size: int, seed: int, position: Callable[[], tuple[int, int]]
    ):
        self.x, self.y, self.batch_size, self.seed, self.position = x, y, batch_size, seed, position

    def __len__(self) -> int:
        return math.ceil(len(self.x) / self.batch_size)

    def __iter__(self):
        epoch, done = self.position()
        order = torch.randperm(len(self.x), generator=torch.Generator().manual_seed(self.seed * 1_000_003 + epoch))
        for i in range(done, len(self)):
            rows = order[i * self.batch_size : (i + 1) * self.batch_size]
            yield self.x[rows], self.y[rows]


class RandomWindows(ResumesAtStep):
    """An endless stream of batches of random windows of a token stream (nanoGPT's get_batch).

    Batch i is drawn from a generator seeded with (seed, i), so the stream is reproducible and can
    be restarted at any batch.
    """

    def __init__(self, tokens: torch.Tensor, block_size: int, batch_size: int, seed: int, start: int = 0):
        self.tokens, self.block_size, self.batch_size, self.seed = tokens, block_size, batch_size, seed
        self.start = start

    def __iter__(self):
        generator = torch.Generator()
        offsets = torch.arange(self.block_size + 1)
        i = self.start
        while True:
            generator.manual_seed(self.seed * 1_000_003 + i)
            starts = torch.randint(len(self.tokens) - self.block_size, (self.batch_size,), generator=generator)
            windows = self.tokens[starts[:, None] + offsets]  # (B, T+1)
            yield windows[:, :-1], windows[:, 1:]
            i += 1


class RankShard:
    """This process's share of every batch of a global stream under DDP: rows rank, rank + world, ...
    Every process draws the same global batch, so together they train on exactly the batches of a
    single-process run with the same data.batch_size."""

    def __init__(self, batches, rank: int, world_size: int):
        self.batches, self.rank, self.world_size = batches, rank, world_size

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self):
        for batch in self.batches:
            yield tuple(t[self.rank :: self.world_size] for t in batch)


class RankShardAtStep(RankShard, ResumesAtStep):
    """This process's share of a stream placed by the step count: so placed too."""


def for_this_rank(batches, trainer):
    """The training batches this process should see (all of them without DDP)."""
    if trainer is None or trainer.world_size == 1:
        return batches
    shard = RankShardAtStep if isinstance(batches, ResumesAtStep) else RankShard
    return shard(batches, trainer.global_rank, trainer.world_size)
