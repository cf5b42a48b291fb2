"""The lengths of T5's span corruption, as plain arithmetic (no torch): the transform's (span_corruption.py) and
the settings' checks (tasks/configs.py) alike."""

from __future__ import annotations


def lengths_after_corruption(raw_length: int, noise_density: float, mean_noise_span_length: float) -> tuple[int, int]:
    """(input length, target length) of a span-corrupted window of raw_length tokens, EOS included."""
    noise = min(max(round(raw_length * noise_density), 1), raw_length - 1)
    spans = max(round(noise / mean_noise_span_length), 1)
    return raw_length - noise + spans + 1, noise + spans + 1


def raw_and_target_length(input_length: int, noise_density: float, mean_noise_span_length: float) -> tuple[int, int]:
    """The longest raw window whose corrupted input has at most input_length tokens, and its target length."""
    raw = input_length - 1
    while lengths_after_corruption(raw + 1, noise_density, mean_noise_span_length)[0] <= input_length:
        raw += 1
    return raw, lengths_after_corruption(raw, noise_density, mean_noise_span_length)[1]


def num_noise_spans(length: int, noise_density: float, mean_noise_span_length: float) -> int:
    noise = min(max(round(length * noise_density), 1), length - 1)
    return max(round(noise / mean_noise_span_length), 1)
