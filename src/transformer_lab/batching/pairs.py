"""Sentence pairs (data/base.py "pairs") as a model reads them:

- PairBatches, for an encoder-decoder: (source ids + <eos>, <bos> + target ids + <eos>), padded with <pad>;
- PrefixLM, for a decoder-only model: one sequence `<bos> source <sep> target <eos>`, the target predicted.

Training batches group pairs of similar lengths; evaluation batches carry their rows' indices third, to
match `references(split)`.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from transformer_lab.batching.base import Batching
from transformer_lab.data.batches import ResumesAtStep, for_this_rank
from transformer_lab.data.tokens import BOS, PAD, SEP
from transformer_lab.errors import require


def pad_batch(sequences: list[torch.Tensor], value: int = PAD) -> torch.Tensor:
    return torch.nn.utils.rnn.pad_sequence(sequences, batch_first=True, padding_value=value)


def prefix_lm(
    src: torch.Tensor, tgt: torch.Tensor, bos: int = BOS, sep: int = SEP
) -> tuple[torch.Tensor, torch.Tensor]:
    """One decoder-only sequence `<bos> source <sep> target <eos>` as (inputs, targets); only the target
    part is predicted (-100 elsewhere). The prompt to decode from is inputs[:len(src) + 1]."""
    sequence = torch.cat([torch.tensor([bos]), src[:-1], torch.tensor([sep]), tgt[1:]])  # src ends in <eos>
    targets = sequence[1:].clone()
    targets[: len(src)] = -100  # the source and <sep> are given, not predicted
    return sequence[:-1], targets


class LengthGroupedBatches(ResumesAtStep):
    """Training batches of similar lengths, so little of each batch is padding. Each epoch a generator
    seeded with (seed, epoch) shuffles the pairs, sorts pools of 50 batches by length, cuts them into
    batches and shuffles the batches; `position()` gives (epoch, batches done) for an exact resume."""

    def __init__(
        self,
        src: list[torch.Tensor],
        tgt: list[torch.Tensor],
        batch_size: int,
        seed: int,
        position: Callable[[], tuple[int, int]] = lambda: (0, 0),
        pool: int = 50,
        pad_values: tuple[int, int] = (PAD, PAD),
    ):
        self.src, self.tgt, self.batch_size, self.seed, self.position, self.pool = (
            src,
            tgt,
            batch_size,
            seed,
            position,
            pool,
        )
        self.pad_values = pad_values

    def __len__(self) -> int:
        return math.ceil(len(self.src) / self.batch_size)

    def batches(self, epoch: int) -> list[torch.Tensor]:
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
        order = torch.randperm(len(self.src), generator=generator).tolist()
        pool = self.pool * self.batch_size
        batches = []
        for start in range(0, len(order), pool):
            chunk = sorted(order[start : start + pool], key=lambda i: (len(self.src[i]), len(self.tgt[i])))
            batches += [chunk[i : i + self.batch_size] for i in range(0, len(chunk), self.batch_size)]
        return [batches[i] for i in torch.randperm(len(batches), generator=generator).tolist()]

    def __iter__(self):
        epoch, done = self.position()
        for rows in self.batches(epoch)[done:]:
            yield (
                pad_batch([self.src[i] for i in rows], self.pad_values[0]),
                pad_batch([self.tgt[i] for i in rows], self.pad_values[1]),
            )

    def padding_fraction(self) -> float:
        """Share of padding among all source and target positions of an epoch's batches."""
        real = padded = 0
        for rows in self.batches(0):
            for side in (self.src, self.tgt):
                lengths = [len(side[i]) for i in rows]
                real += sum(lengths)
                padded += max(lengths) * len(lengths)
        return 1 - real / padded


class EvalBatches:
    """Evaluation batches sorted by source length, each with the indices of its pairs (to match
    references). With `prompt_lengths`, a batch holds one prompt length only, so a decoder-only
    model's prompts line up without padding."""

    def __init__(
        self,
        src: list[torch.Tensor],
        tgt: list[torch.Tensor],
        batch_size: int,
        pad_values: tuple[int, int] = (PAD, PAD),
        prompt_lengths: list[int] | None = None,
    ):
        self.src, self.tgt, self.pad_values = src, tgt, pad_values
        key = prompt_lengths or [len(s) for s in src]
        self.batches: list[list[int]] = []
        for i in sorted(range(len(src)), key=lambda i: key[i]):
            last = self.batches[-1] if self.batches else None
            if last and len(last) < batch_size and (prompt_lengths is None or key[last[0]] == key[i]):
                last.append(i)
            else:
                self.batches.append([i])

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self):
        for rows in self.batches:
            yield (
                pad_batch([self.src[i] for i in rows], self.pad_values[0]),
                pad_batch([self.tgt[i] for i in rows], self.pad_values[1]),
                torch.tensor(rows),
            )


class PairBatches(Batching):
    """For an encoder-decoder: the source ending in <eos>, the target between <bos> and <eos>."""

    form = "pairs"
    command = "translate"

    @property
    def pad_values(self) -> tuple[int, int]:
        return (self.data.specials.pad, self.data.specials.pad)

    def sequences(self, src: list[int], tgt: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        s = self.data.specials
        return torch.tensor([*src, s.eos]), torch.tensor([s.bos, *tgt, s.eos])

    @property
    def has_test_split(self) -> bool:
        return self.data.has_test_split

    def prompt_lengths(self, split: str) -> list[int] | None:
        """Per row of an evaluation split, the length of the prompt decoding starts from, where evaluation
        batches must hold one prompt length each (None: they need not)."""
        return None

    def make(self) -> None:
        self.encoded = {}
        for split in ("train", "val", "test") if self.has_test_split else ("train", "val"):
            src, tgt = self.data.pairs(split)
            rows = [self.sequences(s, t) for s, t in zip(src, tgt, strict=True)]
            self.encoded[split] = ([r[0] for r in rows], [r[1] for r in rows])
        self.train_batches = LengthGroupedBatches(
            *self.encoded["train"],
            self.batch_size,
            self.seed,
            lambda: self.position(len(self.train_batches)),
            pad_values=self.pad_values,
        )
        if self.encoded["train"][0]:  # (none when a trained model is evaluated on a whole file)
            self.padding_fraction = self.train_batches.padding_fraction()

    @property
    def source_vocab_size(self) -> int | None:
        return self.data.source_vocab_size

    @property
    def pad_id(self) -> int:
        return self.data.specials.pad

    def encode(self, text: str) -> list[int]:
        return self.source_input(self.data.encode(text))

    def source_input(self, ids: list[int]) -> list[int]:
        """A source sentence's ids as the model reads them: cut to the dataset's max_tokens as in training, then
        <eos>."""
        return [*ids[: self.data.max_tokens], self.data.specials.eos]

    def train_dataloader(self):
        return for_this_rank(self.train_batches, self.trainer)

    def eval_batches(self, split: str) -> EvalBatches:
        return EvalBatches(*self.encoded[split], self.val_batch_size, self.pad_values, self.prompt_lengths(split))

    def val_dataloader(self):
        return self.eval_batches("val")

    def test_dataloader(self):
        return self.eval_batches("test")


class PrefixLM(PairBatches):
    """For a decoder-only model: `<bos> source <sep> target <eos>`, the loss on the target only."""

    @property
    def pad_values(self) -> tuple[int, int]:
        return (self.data.specials.pad, -100)

    def __init__(self, data, *args, **kwargs):
        super().__init__(data, *args, **kwargs)
        require(
            getattr(getattr(data, "config", None), "shared_vocab", True),
            "data.shared_vocab",
            "a decoder-only model reads source and target as one sequence, so it needs one vocabulary (true)",
        )

    def sequences(self, src, tgt):
        s = self.data.specials
        return prefix_lm(torch.tensor([*src, s.eos]), torch.tensor([s.bos, *tgt, s.eos]), s.bos, s.sep)

    def prompt_lengths(self, split: str) -> list[int]:
        return [len(src) + 2 for src in self.data.pairs(split)[0]]  # <bos> source <sep>

    @property
    def sequence_length(self) -> int:
        return 2 * self.data.sequence_length  # it sees both sides

    def source_input(self, ids: list[int]) -> list[int]:
        """The prompt `<bos> source <sep>`, the source cut to the dataset's max_tokens as in training."""
        return [self.data.specials.bos, *ids[: self.data.max_tokens], self.data.specials.sep]
