"""T5's span-corruption objective (Raffel et al. 2020, section 3.1.4), on any token stream.

A window of `raw_length` tokens loses round(raw_length * noise_density) of them (at least 1, at most all
but one) in max(round(noise / mean_noise_span_length), 1) spans. The span lengths are a random
segmentation of the noise tokens into non-empty spans, and likewise for the kept tokens; kept and noise
spans alternate, starting with kept tokens. Each noise span becomes one sentinel in the input; the
target lists the spans, each after its sentinel; sentinel ids count down from the top of the
vocabulary; both sequences end with EOS. `raw_length` is the longest window whose corrupted input
fits `input_length` (T5's `random_spans_helper`: 512 <- 568 with targets of 114).
"""

from __future__ import annotations

import re
from collections.abc import Callable

import torch
import torch.nn.functional as F

from transformer_lab.batching.base import FromTokenStreams
from transformer_lab.batching.span_lengths import num_noise_spans, raw_and_target_length
from transformer_lab.data.base import DataSource
from transformer_lab.data.batches import LazyBatches, ResumesAtStep, for_this_rank


def random_segmentation(num_items: int, num_segments: int, generator: torch.Generator) -> torch.Tensor:
    """Lengths of a uniformly random split of num_items into num_segments non-empty segments."""
    first_in_segment = torch.zeros(num_items, dtype=torch.long)
    first_in_segment[1 + torch.randperm(num_items - 1, generator=generator)[: num_segments - 1]] = 1
    return torch.bincount(first_in_segment.cumsum(0), minlength=num_segments)


def random_spans_noise_mask(
    length: int, noise_density: float, mean_noise_span_length: float, generator: torch.Generator
) -> torch.Tensor:
    """(length,) bool, True at noise tokens: alternating kept and noise spans, kept first."""
    noise = min(max(round(length * noise_density), 1), length - 1)
    spans = num_noise_spans(length, noise_density, mean_noise_span_length)
    noise_lengths = random_segmentation(noise, spans, generator)
    kept_lengths = random_segmentation(length - noise, spans, generator)
    interleaved = torch.stack([kept_lengths, noise_lengths], 1).flatten()  # kept, noise, kept, noise, ...
    return torch.repeat_interleave(torch.arange(2 * spans), interleaved) % 2 == 1


def spans_to_sentinels(tokens: torch.Tensor, mask: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Each run of masked tokens replaced by one sentinel: vocab_size - 1 for the first, then down."""
    previous = F.pad(mask[:-1], (1, 0))
    first = mask & ~previous
    sentinels = vocab_size - first.long().cumsum(0)
    return torch.where(first, sentinels, tokens)[~(mask & previous)]


def corrupt(
    tokens: torch.Tensor, mask: torch.Tensor, vocab_size: int, eos_id: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """(input, target) of one window: noise spans -> sentinels in the input, kept spans -> sentinels in
    the target, EOS after both."""
    eos = torch.tensor([eos_id])
    return (
        torch.cat([spans_to_sentinels(tokens, mask, vocab_size), eos]),
        torch.cat([spans_to_sentinels(tokens, ~mask, vocab_size), eos]),
    )


def fill_spans(inputs: list[int], targets: list[int], first_sentinel: int, eos_id: int) -> list[int]:
    """The window again: each sentinel of the input replaced by what follows the same sentinel in the
    target (up to the next sentinel or EOS). Ids >= first_sentinel are sentinels."""
    fills, current = {}, None
    for t in targets:
        if t == eos_id:
            break
        if t >= first_sentinel:
            current = fills.setdefault(t, [])
        elif current is not None:
            current.append(t)
    out = []
    for t in inputs:
        if t == eos_id:
            break
        out.extend(fills.get(t, []) if t >= first_sentinel else [t])
    return out


class SpanCorruptionBatches(ResumesAtStep):
    """Batches of corrupted windows: batch i (random windows of the stream, and their noise masks) comes
    from a generator seeded with (seed, i), so the stream is reproducible and resumable at any batch.
    Every window has the same raw length, so inputs and targets need no padding."""

    def __init__(
        self,
        stream: torch.Tensor,
        raw_length: int,
        batch_size: int,
        corrupt_window: Callable,
        seed: int,
        start: int = 0,
    ):
        self.stream, self.raw_length, self.batch_size = stream, raw_length, batch_size
        self.corrupt_window, self.seed, self.start = corrupt_window, seed, start

    def __iter__(self):
        generator = torch.Generator()
        offsets = torch.arange(self.raw_length)
        i = self.start
        while True:
            generator.manual_seed(self.seed * 1_000_003 + i)
            starts = torch.randint(len(self.stream) - self.raw_length + 1, (self.batch_size,), generator=generator)
            pairs = [self.corrupt_window(w, generator) for w in self.stream[starts[:, None] + offsets]]
            yield torch.stack([p[0] for p in pairs]), torch.stack([p[1] for p in pairs])
            i += 1


class SpanCorruption(FromTokenStreams):
    """Span corruption over a dataset's text (tiny Shakespeare's characters, or translation sentences).
    Validation: the validation stream's consecutive windows, each corrupted with its own fixed seed."""

    command = "fill"
    length_key = "task.input_length"
    task_keys = ("input_length", "noise_density", "mean_noise_span_length", "extra_ids")  # (SpanCorruptionConfig)

    def __init__(
        self,
        data: DataSource,
        batch_size: int,
        val_batch_size: int | None = None,
        seed: int = 1337,
        input_length: int = 128,
        noise_density: float = 0.15,
        mean_noise_span_length: float = 3.0,
        extra_ids: int = 100,
    ):
        super().__init__(data, batch_size, val_batch_size, seed)
        self.input_length, self.noise_density, self.mean_noise_span_length = (
            input_length,
            noise_density,
            mean_noise_span_length,
        )
        self.extra_ids = extra_ids
        self.raw_length, self.target_length = raw_and_target_length(input_length, noise_density, mean_noise_span_length)

    def make_validation(self) -> None:
        self.val_windows = len(self.streams.val) // self.raw_length

    def corrupted_val_windows(self, rows: range) -> tuple[torch.Tensor, torch.Tensor]:
        """Validation windows `rows` (consecutive windows of the stream), window i corrupted with seed i."""
        offsets = torch.arange(self.raw_length)
        windows = self.streams.val[torch.tensor(rows)[:, None] * self.raw_length + offsets]
        pairs = [self.corrupt_window(w, torch.Generator().manual_seed(i)) for i, w in zip(rows, windows)]
        return torch.stack([p[0] for p in pairs]), torch.stack([p[1] for p in pairs])

    @property
    def vocab_size(self) -> int:
        return self.streams.vocab_size + self.extra_ids

    @property
    def sequence_length(self) -> int:
        """The longer of a corrupted input and its target (a model with positions needs both)."""
        return max(self.input_length, self.target_length)

    @property
    def first_sentinel(self) -> int:
        return self.vocab_size - self.extra_ids

    @property
    def pad_id(self) -> int:
        return self.streams.pad_id

    @property
    def eos_id(self) -> int:
        return self.streams.eos_id

    def corrupt_window(self, window: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        mask = random_spans_noise_mask(len(window), self.noise_density, self.mean_noise_span_length, generator)
        return corrupt(window, mask, self.vocab_size, self.eos_id)

    def encode(self, text: str) -> list[int]:
        """A corrupted input from text with gaps marked <X0>, <X1>, ... (as decode writes them), and <eos>."""
        ids, pieces = [], re.split(r"<X(\d+)>", text)
        gaps = [int(piece) for piece in pieces[1::2]]
        if any(g >= self.extra_ids for g in gaps):
            raise ValueError(f"<X{max(gaps)}>: this model has the sentinels <X0> to <X{self.extra_ids - 1}>")
        if gaps != list(range(len(gaps))):  # (the model learned its gaps numbered so: a fill maps spans by number)
            raise ValueError(
                f"its gaps are {' '.join(f'<X{g}>' for g in gaps)}: number them <X0>, <X1>, ... from the left, "
                "each once, as training does"
            )
        for i, piece in enumerate(pieces):
            if i % 2:
                ids.append(self.vocab_size - 1 - int(piece))
            elif piece:
                ids += self.streams.encode(piece)
        return ids + [self.eos_id]

    def decode(self, ids) -> str:
        """Text with each sentinel shown as <X0>, <X1>, ... (X0 = the top id)."""
        out, text = [], []
        for i in map(int, ids):
            if i >= self.first_sentinel:
                out += [self.streams.decode(text), f"<X{self.vocab_size - 1 - i}>"]
                text = []
            elif i != self.eos_id and i != self.pad_id:
                text.append(i)
        return "".join(out + [self.streams.decode(text)])

    def train_dataloader(self):
        start = self.batches_done()
        return for_this_rank(
            SpanCorruptionBatches(
                self.streams.train, self.raw_length, self.batch_size, self.corrupt_window, self.seed, start
            ),
            self.trainer,
        )

    def val_dataloader(self):
        return LazyBatches(self.val_windows, self.val_batch_size, self.corrupted_val_windows)
