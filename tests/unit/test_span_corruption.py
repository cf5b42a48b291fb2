"""Span corruption matches T5's: lengths, noise statistics, sentinels, and exact restoration."""

import pytest
import torch

from transformer_lab.batching.span_corruption import corrupt, fill_spans, random_spans_noise_mask
from transformer_lab.batching.span_lengths import lengths_after_corruption, raw_and_target_length

VOCAB, EOS = 1000, 1


@pytest.mark.parametrize("input_length, raw, target", [(512, 568, 114), (256, 284, 58), (128, 141, 29)])
def test_raw_and_target_lengths_are_t5s(input_length, raw, target):
    assert raw_and_target_length(input_length, 0.15, 3.0) == (raw, target)
    assert lengths_after_corruption(raw, 0.15, 3.0) == (input_length, target)
    assert lengths_after_corruption(raw + 1, 0.15, 3.0)[0] > input_length  # the longest window that fits
    generator = torch.Generator().manual_seed(0)
    tokens = torch.randint(2, 500, (raw,), generator=generator)
    inputs, targets = corrupt(tokens, random_spans_noise_mask(raw, 0.15, 3.0, generator), VOCAB, EOS)
    assert (len(inputs), len(targets)) == (input_length, target)


def spans(mask: torch.Tensor) -> list[int]:
    """Lengths of the runs of True."""
    runs, n = [], 0
    for m in mask.tolist() + [False]:
        if m:
            n += 1
        elif n:
            runs.append(n)
            n = 0
    return runs


@pytest.mark.parametrize("length", [568, 284, 141, 100, 57])
def test_noise_fraction_and_mean_span_length(length):
    generator = torch.Generator().manual_seed(length)
    masks = [random_spans_noise_mask(length, 0.15, 3.0, generator) for _ in range(300)]
    noise = torch.stack(masks).float().mean().item()
    span_lengths = [n for m in masks for n in spans(m)]
    assert noise == pytest.approx(0.15, abs=0.01)
    assert sum(span_lengths) / len(span_lengths) == pytest.approx(3.0, abs=0.2)
    assert not any(m[0] for m in masks)  # a window starts with kept tokens
    # The exact counts T5 prescribes: round(L * density) noise tokens in max(round(noise / 3), 1) spans.
    assert {int(m.sum()) for m in masks} == {round(length * 0.15)}
    assert {len(spans(m)) for m in masks} == {max(round(round(length * 0.15) / 3.0), 1)}
    assert len({tuple(m.tolist()) for m in masks}) > 250  # and the segmentation is random


def test_degenerate_lengths_keep_one_token_of_each_kind():
    generator = torch.Generator().manual_seed(0)
    for length, density in [(2, 0.15), (5, 0.01), (5, 0.99), (3, 0.5)]:
        mask = random_spans_noise_mask(length, density, 3.0, generator)
        assert len(mask) == length and 1 <= int(mask.sum()) <= length - 1 and len(spans(mask)) >= 1


def test_sentinels_count_down_from_the_top_and_targets_refill_inputs_exactly():
    generator = torch.Generator().manual_seed(1)
    for _ in range(200):
        length = int(torch.randint(10, 300, (1,), generator=generator))
        tokens = torch.randint(2, 900, (length,), generator=generator)
        mask = random_spans_noise_mask(length, 0.15, 3.0, generator)
        inputs, targets = corrupt(tokens, mask, VOCAB, EOS)
        n_spans = len(spans(mask))
        sentinels = list(range(VOCAB - 1, VOCAB - 1 - n_spans, -1))
        assert [t for t in inputs.tolist() if t >= 900] == sentinels
        assert [t for t in targets.tolist() if t >= 900] == sentinels
        assert inputs[-1] == EOS and targets[-1] == EOS and targets[0] == VOCAB - 1
        assert inputs.tolist()[:-1] != tokens.tolist()
        assert fill_spans(inputs.tolist(), targets.tolist(), VOCAB - 100, EOS) == tokens.tolist()
        assert [t for t in targets.tolist() if t < 900 and t != EOS] == tokens[mask].tolist()
