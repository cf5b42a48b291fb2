"""Token conventions shared by the data modules: the special tokens of sub-word and equation layouts, and
the token streams span corruption reads."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

SPECIALS = ["<pad>", "<bos>", "<eos>", "<sep>", "<unk>"]
PAD, BOS, EOS, SEP, UNK = range(len(SPECIALS))


@dataclass
class TokenStreams:
    """What span corruption needs from a text dataset: its splits as token streams, and the vocabulary."""

    train: torch.Tensor  # (N,) token ids
    val: torch.Tensor
    vocab_size: int  # before sentinels
    pad_id: int
    eos_id: int
    decode: Callable[[list[int]], str]
    encode: Callable[[str], list[int]] | None = None  # text -> ids (for filling a user's gaps with a trained model)
