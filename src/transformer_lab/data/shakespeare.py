"""Tiny Shakespeare, character level (Karpathy's char-rnn corpus): 1,115,394 characters, 65 symbols."""

from __future__ import annotations

from pathlib import Path

import torch

from transformer_lab.data.base import DataModule
from transformer_lab.data.batches import Batches, RandomWindows, for_this_rank
from transformer_lab.data.download import ensure_file
from transformer_lab.data.tokens import TokenStreams
from transformer_lab.errors import require

URL = "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"


class CharTokenizer:
    def __init__(self, chars: list[str]):
        self.chars = chars
        self.stoi = {c: i for i, c in enumerate(chars)}

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> list[int]:
        unknown = sorted(set(text) - self.stoi.keys())
        if unknown:
            raise ValueError(f"characters not in the vocabulary: {unknown!r}")
        return [self.stoi[c] for c in text]

    def decode(self, ids) -> str:
        return "".join(self.chars[int(i)] for i in ids)


class ShakespeareDataModule(DataModule):
    """Training: endless random windows of block_size (+1 for the shifted targets) from the first 90%.
    Validation: a fixed set, the non-overlapping windows of the last 10% in a fixed shuffled order, so
    `trainer.limit_val_batches` takes the same spread-out sample every time."""

    layouts = ("lm", "spans")
    kind = "text"
    endless = True
    length_key = "block_size"

    def __init__(self,
                 data_dir: str = "data",
                 block_size: int = 256,  # context length of each training window
                 batch_size: int = 64,
                 val_batch_size: int | None = None,  # default: batch_size
                 val_fraction: float = 0.1,  # the last 10% of the text is held out
                 seed: int = 1337,
                 sample_prompt: str = "\n",  # where text samples at each validation start
                 layout: str = "lm"):
        super().__init__(layout)
        require(block_size >= 1, "data.block_size", f"must be a positive integer, got {block_size}")
        require(0 < val_fraction < 1, "data.val_fraction", f"must be in (0, 1), got {val_fraction}")
        self.path = Path(data_dir) / "shakespeare" / "input.txt"
        self.block_size, self.batch_size = block_size, batch_size
        self.val_batch_size = val_batch_size or batch_size
        self.val_fraction, self.seed = val_fraction, seed
        self.sample_prompt = sample_prompt
        self.tokenizer: CharTokenizer | None = None

    def prepare_data(self) -> None:
        ensure_file(self.path, URL, SHA256)

    def setup(self, stage: str | None = None) -> None:
        if self.tokenizer is not None:
            return
        text = ensure_file(self.path, URL, SHA256).read_text(encoding="utf-8")
        self.tokenizer = CharTokenizer(sorted(set(text)))
        tokens = torch.tensor(self.tokenizer.encode(text), dtype=torch.long)
        n_train = int(len(tokens) * (1 - self.val_fraction))
        self.train_tokens, self.val_tokens = tokens[:n_train], tokens[n_train:]

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.vocab_size

    @property
    def sequence_length(self) -> int:
        return self.block_size

    def decode(self, ids) -> str:
        return self.tokenizer.decode(ids)

    def sample_prompt_ids(self) -> list[int]:
        return self.tokenizer.encode(self.sample_prompt)

    def checkpoint_meta(self) -> dict:
        return {"vocab": self.tokenizer.chars}

    def train_dataloader(self):
        # Batch i depends only on (seed, i), so a run resumed from a checkpoint continues the stream
        # where it stopped instead of replaying it from the start.
        start = 0
        if self.trainer is not None:
            start = self.trainer.global_step * self.trainer.accumulate_grad_batches
        return for_this_rank(RandomWindows(self.train_tokens, self.block_size, self.batch_size, self.seed, start),
                             self.trainer)

    def val_windows(self) -> tuple[torch.Tensor, torch.Tensor]:
        n = (len(self.val_tokens) - 1) // self.block_size
        starts = torch.arange(n) * self.block_size
        starts = starts[torch.randperm(n, generator=torch.Generator().manual_seed(0))]
        windows = self.val_tokens[starts[:, None] + torch.arange(self.block_size + 1)]
        return windows[:, :-1], windows[:, 1:]

    def token_streams(self):
        """The splits for span corruption: character ids moved up by two, for <pad> (0) and <eos> (1)."""
        return TokenStreams(self.train_tokens + 2, self.val_tokens + 2, self.vocab_size + 2, pad_id=0, eos_id=1,
                            decode=lambda ids: self.tokenizer.decode(i - 2 for i in ids if i >= 2))

    def val_dataloader(self):
        x, y = self.val_windows()
        return Batches(x, y, self.val_batch_size)
