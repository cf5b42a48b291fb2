"""Token conventions shared by the data modules and the batch transforms (batching/): the special tokens of
sub-word vocabularies and of batches made from equations, and text as token streams."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import torch

from transformer_lab.errors import ConfigError

SPECIALS = ["<pad>", "<bos>", "<eos>", "<sep>", "<unk>"]
PAD, BOS, EOS, SEP, UNK = range(len(SPECIALS))


@dataclass(frozen=True)
class Specials:
    """The ids a batch of pairs is made with: padding, the decoder's first token, the end, and the
    separator of a prefix-LM sequence. Ours (a vocabulary trained here) are SPECIALS' first four; a pretrained
    tokenizer's are its own (T5: <pad> 0 also starts the decoder, </s> 1 ends)."""

    pad: int = PAD
    bos: int = BOS
    eos: int = EOS
    sep: int = SEP

    @classmethod
    def of(cls, tokenizer) -> Specials:
        """A pretrained tokenizers.Tokenizer's, by the names such vocabularies give them."""
        find = lambda *names: next((i for i in map(tokenizer.token_to_id, names) if i is not None), None)  # noqa: E731
        pad = find("<pad>", "[PAD]", "<|padding|>")
        eos = find("</s>", "[SEP]", "<|endoftext|>", "<|end_of_text|>", "<eos>")
        if pad is None or eos is None:
            missing = " and ".join(n for n, i in (("a padding", pad), ("an end-of-sequence", eos)) if i is None)
            raise ValueError(f"the tokenizer has no {missing} token")
        bos = find("<s>", "[CLS]", "<bos>", "<|begin_of_text|>")
        return cls(pad=pad, bos=pad if bos is None else bos, eos=eos, sep=eos)

    @classmethod
    def of_data(cls, tokenizer, spec: str | None, need: str) -> Specials:
        """A data module's: ours where it learned its vocabulary (spec None), else its pretrained tokenizer's;
        a ConfigError naming data.tokenizer where that has no padding or end token (`need`: what for)."""
        if spec is None:
            return cls()
        try:
            return cls.of(tokenizer)
        except ValueError as e:
            raise ConfigError("data.tokenizer", f"{spec}: {e}, which {need} need") from None


@dataclass
class TokenStreams:
    """A text dataset's raw splits (data/base.py, "text"): each split one stream of token ids, and the
    vocabulary. A vocabulary without special tokens (characters) has no pad_id and eos_id."""

    train: torch.Tensor  # (N,) token ids
    val: torch.Tensor
    vocab_size: int
    decode: Callable[[list[int]], str]
    encode: Callable[[str], list[int]] | None = None  # text -> ids (for the inference commands)
    pad_id: int | None = None
    eos_id: int | None = None
    offset: int = 0  # how far with_pad_and_eos moved the data's ids up


def with_pad_and_eos(streams: TokenStreams) -> TokenStreams:
    """The streams with <pad> and <eos> ids, as span corruption and masking need: a vocabulary with an
    end-of-text id but no padding gets <pad> above it (its ids unchanged: a corpus on disk is not copied);
    one with neither moves up by two, <pad> = 0 and <eos> = 1."""
    if streams.pad_id is not None and streams.eos_id is not None:
        return streams
    if streams.eos_id is not None:
        return dataclasses.replace(streams, vocab_size=streams.vocab_size + 1, pad_id=streams.vocab_size)
    encode = streams.encode
    return TokenStreams(
        streams.train + 2,
        streams.val + 2,
        streams.vocab_size + 2,
        decode=lambda ids: streams.decode([int(i) - 2 for i in ids if int(i) >= 2]),
        encode=None if encode is None else (lambda text: [i + 2 for i in encode(text)]),
        pad_id=0,
        eos_id=1,
        offset=2,
    )
