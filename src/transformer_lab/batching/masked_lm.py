"""BERT's masked-language-model objective (Devlin et al. 2019, section 3.1), on any token stream.

A sequence is [CLS] and a window of `length - 1` tokens of the stream. Each window token is chosen for
prediction with probability `mask_prob` (at least one per sequence); a chosen token is replaced by
[MASK] with probability `mask_token_prob`, by a random token with `random_token_prob`, and otherwise
kept. The labels are the original tokens at the chosen positions and -100 (no loss) everywhere else.
[MASK] and [CLS] are the two ids above the stream's vocabulary.
"""

from __future__ import annotations

import torch

from transformer_lab.batching.base import FromTokenStreams
from transformer_lab.data.base import DataSource
from transformer_lab.data.batches import LazyBatches, ResumesAtStep, for_this_rank
from transformer_lab.errors import require

IGNORE = -100  # label of a position that carries no loss (F.cross_entropy's ignore_index)


def mask_tokens(
    windows: torch.Tensor,
    generator: torch.Generator,
    vocab_size: int,
    pad_id: int,
    mask_prob: float,
    mask_token_prob: float,
    random_token_prob: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """windows (B, T) of token ids -> (inputs, labels), both (B, 1 + T): [CLS] first, then the windows with
    their chosen tokens masked, replaced or kept; labels IGNORE except at the chosen tokens."""
    mask_id, cls_id = vocab_size, vocab_size + 1
    chosen = torch.rand(windows.shape, generator=generator) < mask_prob  # (B, T)
    none = ~chosen.any(1)  # a sequence with nothing to predict gets one position
    chosen[none, torch.randint(windows.size(1), (int(none.sum()),), generator=generator)] = True
    action = torch.rand(windows.shape, generator=generator)
    random_ids = torch.randint(vocab_size - 1, windows.shape, generator=generator)
    random_ids += random_ids >= pad_id  # any token but padding (which attention would skip)
    inputs = torch.where(chosen & (action < mask_token_prob), mask_id, windows)
    replace = chosen & (action >= mask_token_prob) & (action < mask_token_prob + random_token_prob)
    inputs = torch.where(replace, random_ids, inputs)
    labels = torch.where(chosen, windows, IGNORE)
    cls = torch.full_like(windows[:, :1], cls_id)
    return torch.cat([cls, inputs], 1), torch.cat([torch.full_like(cls, IGNORE), labels], 1)


class MaskedLMBatches(ResumesAtStep):
    """Endless batches of masked random windows: batch i (its windows and masks) comes from a generator
    seeded with (seed, i), so the stream is reproducible and resumable at any batch."""

    def __init__(self, stream: torch.Tensor, window: int, batch_size: int, mask, seed: int, start: int = 0):
        self.stream, self.window, self.batch_size, self.mask = stream, window, batch_size, mask
        self.seed, self.start = seed, start

    def __iter__(self):
        generator = torch.Generator()
        offsets = torch.arange(self.window)
        i = self.start
        while True:
            generator.manual_seed(self.seed * 1_000_003 + i)
            starts = torch.randint(len(self.stream) - self.window + 1, (self.batch_size,), generator=generator)
            yield self.mask(self.stream[starts[:, None] + offsets], generator)
            i += 1


class MaskedLM(FromTokenStreams):
    """Masked LM over a dataset's text (tiny Shakespeare's characters, or translation sentences).
    Validation: the validation stream's consecutive windows, each batch masked with its own fixed seed."""

    length_key = "task.length"
    task_keys = ("length", "mask_prob", "mask_token_prob", "random_token_prob")  # (MaskedLMConfig)

    def __init__(
        self,
        data: DataSource,
        batch_size: int,
        val_batch_size: int | None = None,
        seed: int = 1337,
        length: int = 128,
        mask_prob: float = 0.15,
        mask_token_prob: float = 0.8,
        random_token_prob: float = 0.1,
    ):
        super().__init__(data, batch_size, val_batch_size, seed)
        self.length = length
        self.mask_prob, self.mask_token_prob, self.random_token_prob = mask_prob, mask_token_prob, random_token_prob

    def make_validation(self) -> None:
        window = self.length - 1
        require(
            len(self.streams.train) >= window and len(self.streams.val) >= window,
            "task.length",
            f"windows of {window} tokens do not fit the data's splits "
            f"({len(self.streams.train)} and {len(self.streams.val)} tokens)",
        )
        self.val_windows = len(self.streams.val) // window

    def masked_val_windows(self, rows: range) -> tuple[torch.Tensor, torch.Tensor]:
        """Validation windows `rows` (consecutive windows of the stream), masked by a generator seeded with
        (seed, the first row): the same every validation."""
        window = self.length - 1
        windows = self.streams.val[torch.tensor(rows)[:, None] * window + torch.arange(window)]
        return self.mask(windows, torch.Generator().manual_seed(self.seed * 1_000_003 + rows.start))

    def mask(self, windows: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        return mask_tokens(
            windows,
            generator,
            self.streams.vocab_size,
            self.streams.pad_id,
            self.mask_prob,
            self.mask_token_prob,
            self.random_token_prob,
        )

    @property
    def vocab_size(self) -> int:
        return self.streams.vocab_size + 2  # [MASK], [CLS]

    @property
    def mask_id(self) -> int:
        return self.streams.vocab_size

    @property
    def pad_id(self) -> int:
        return self.streams.pad_id

    @property
    def sequence_length(self) -> int:
        return self.length

    def encode(self, text: str) -> list[int]:
        """A model input from text: [CLS], then the text's ids, each `[MASK]` written in it the mask id."""
        ids = [self.mask_id + 1]  # [CLS]
        for i, piece in enumerate(text.split("[MASK]")):
            ids += ([self.mask_id] if i else []) + (self.streams.encode(piece) if piece else [])
        return ids

    @property
    def special_names(self) -> dict[int, str]:
        return {self.mask_id + 1: "[CLS]", self.pad_id: "<pad>"}

    def decode(self, ids) -> str:
        """Text with each [MASK] shown as such ([CLS] and padding left out)."""
        out, text = [], []
        for i in map(int, ids):
            if i == self.mask_id:
                out += [self.streams.decode(text), "[MASK]"]
                text = []
            elif i < self.mask_id and i != self.pad_id:
                text.append(i)
        return "".join(out + [self.streams.decode(text)])

    def train_dataloader(self):
        stream = MaskedLMBatches(
            self.streams.train, self.length - 1, self.batch_size, self.mask, self.seed, self.batches_done()
        )
        return for_this_rank(stream, self.trainer)

    def val_dataloader(self):
        return LazyBatches(self.val_windows, self.val_batch_size, self.masked_val_windows)
