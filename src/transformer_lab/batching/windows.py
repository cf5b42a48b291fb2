"""Next-token prediction on text: windows of the token stream, each with the stream shifted by one as its
targets (nanoGPT's get_batch)."""

from __future__ import annotations

import torch

from transformer_lab.batching.base import Batching
from transformer_lab.data.batches import LazyBatches, RandomWindows, for_this_rank
from transformer_lab.errors import require


class TextWindows(Batching):
    """Training: endless random windows of data's sequence_length (+1 for the shifted targets) of the
    training stream. Validation: a fixed set, the non-overlapping windows of the validation stream in a fixed
    shuffled order, so `trainer.limit_val_batches` takes the same spread-out sample every time (each batch
    read when it is drawn: a stream on disk stays there)."""

    form = "text"
    endless = True
    command = "sample"

    def __init__(self, data, *args, **kwargs):
        super().__init__(data, *args, **kwargs)
        require(
            data.sequence_length is not None,
            "data",
            f"{type(data).__name__} gives no sequence_length, the length of a language model's text windows "
            "(data/base.py)",
        )

    def make(self) -> None:
        self.streams = self.data.token_streams()

    @property
    def block_size(self) -> int:
        return self.data.sequence_length

    def sample_prompt_ids(self) -> list[int] | None:
        return self.data.sample_prompt_ids()

    def token_bytes(self) -> list[int]:
        return self.data.token_bytes()

    def train_dataloader(self):
        # Batch i depends only on (seed, i), so a run resumed from a checkpoint continues the stream
        # where it stopped instead of replaying it from the start.
        return for_this_rank(
            RandomWindows(self.streams.train, self.block_size, self.batch_size, self.seed, self.batches_done()),
            self.trainer,
        )

    def val_dataloader(self):
        tokens, block = self.streams.val, self.block_size
        n = (len(tokens) - 1) // block
        starts = torch.arange(n) * block
        starts = starts[torch.randperm(n, generator=torch.Generator().manual_seed(0))]
        offsets = torch.arange(block + 1)
        # A file evaluated whole (data/base.py whole_file) is scored to its last token: one more window, ending
        # where the text ends, whose targets the windows before it scored already are left out (-100).
        tail = len(tokens) - 1 - n * block
        if tail > 0 and getattr(self.data, "whole_file", False):
            starts = torch.cat([starts, torch.tensor([len(tokens) - 1 - block])])
        scored_before = block - tail  # (of the last window's targets)

        def windows(rows: range) -> tuple[torch.Tensor, torch.Tensor]:
            w = tokens[starts[rows.start : rows.stop, None] + offsets]
            x, y = w[:, :-1], w[:, 1:]
            if rows.stop > n:  # the last window, which overlaps the one before it
                y = y.clone()
                y[-1, :scored_before] = -100
            return x, y

        return LazyBatches(len(starts), self.val_batch_size, windows)
