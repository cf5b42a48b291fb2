"""The tokenizers of text corpora (data/corpus/): `char`, `bytes`, `bpe` (trained with Hugging Face
`tokenizers`) or a pretrained one (a `tokenizer.json`, or a tokenizer on the Hugging Face hub by name).

Each has an end-of-text token that keeps documents apart, encodes a batch of documents to a numpy array of
ids, turns back into text, and is saved as one JSON string (beside the corpus cache and in every
checkpoint), so sampling and evaluation read text exactly as training did.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from transformer_lab.errors import DataUnavailableError, first_line

KINDS = ("char", "bytes", "bpe")  # data.tokenizer: one of these, or a tokenizer.json / HF tokenizer name
# The pretrained tokenizers' own end-of-text tokens, looked for before one is added (GPT-2, Llama 3, T5, BERT).
END_OF_TEXT_NAMES = ("<|endoftext|>", "<|end_of_text|>", "</s>", "[SEP]", "<eos>")
PAD_NAMES = ("<pad>", "[PAD]", "<|padding|>")


class CharTokenizer:
    """One id per character of the text (sorted), then the end-of-text token (none for tiny Shakespeare's one text)."""

    def __init__(self, chars: list[str], end_of_text: str | None):
        self.chars, self.end_of_text = chars, end_of_text
        self.codepoints = np.array([ord(c) for c in chars], dtype=np.int64)  # sorted, as chars are
        self.eot_id, self.pad_id = (None if end_of_text is None else len(chars)), None

    @property
    def vocab_size(self) -> int:
        return len(self.chars) + (self.eot_id is not None)

    def encode(self, text: str) -> np.ndarray:
        codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32).astype(np.int64)
        ids = np.searchsorted(self.codepoints, codes)
        bad = (ids >= len(self.chars)) | (self.codepoints[np.minimum(ids, len(self.chars) - 1)] != codes)
        if bad.any():
            unknown = sorted({chr(c) for c in codes[bad]})
            known = "".join(self.chars) if len(self.chars) <= 200 else f"{len(self.chars)} characters"
            raise ValueError(f"characters not in the vocabulary: {unknown[:40]!r}; it has only {known!r}")
        return ids

    def encode_batch(self, texts: list[str]) -> list[np.ndarray]:
        return [self.encode(t) for t in texts]

    def decode(self, ids) -> str:
        """Text of ids; an id past the characters (a model's vocabulary padded beyond the data's, model_sizes) is
        U+FFFD, as a decoder writes bytes it cannot read."""
        chars, eot = self.chars, self.eot_id
        return "".join(
            self.end_of_text if i == eot else chars[i] if i < len(chars) else "\ufffd" for i in map(int, ids)
        )

    def token_bytes(self) -> list[int]:
        return [len(c.encode("utf-8")) for c in self.chars] + [0] * (self.eot_id is not None)

    def to_json(self) -> str:
        return json.dumps({"kind": "char", "chars": self.chars, "end_of_text": self.end_of_text})


class ByteTokenizer:
    """The 256 byte values as ids 0-255, then the end-of-text token: nothing to learn."""

    def __init__(self, end_of_text: str):
        self.end_of_text, self.eot_id, self.pad_id = end_of_text, 256, None

    vocab_size = 257

    def encode(self, text: str) -> np.ndarray:
        return np.frombuffer(text.encode("utf-8"), dtype=np.uint8)

    def encode_batch(self, texts: list[str]) -> list[np.ndarray]:
        return [self.encode(t) for t in texts]

    def decode(self, ids) -> str:
        out, run = [], bytearray()
        for i in map(int, ids):
            if i == self.eot_id:
                out += [run.decode("utf-8", errors="replace"), self.end_of_text]
                run = bytearray()
            else:
                run.append(i)
        return "".join(out + [run.decode("utf-8", errors="replace")])

    def token_bytes(self) -> list[int]:
        return [1] * 256 + [0]

    def to_json(self) -> str:
        return json.dumps({"kind": "bytes", "end_of_text": self.end_of_text})


class HFTokenizer:
    """A Hugging Face `tokenizers.Tokenizer` (trained BPE or pretrained), with its end-of-text token (its own,
    or one added) and its padding token where it has one."""

    def __init__(self, tokenizer, end_of_text: str):
        self.tokenizer = tokenizer
        vocab = tokenizer.get_vocab(with_added_tokens=True)
        found = [name for name in (end_of_text, *END_OF_TEXT_NAMES) if name in vocab]
        if not found:
            tokenizer.add_special_tokens([end_of_text])
            found = [end_of_text]
        self.end_of_text = found[0]
        self.eot_id = tokenizer.token_to_id(self.end_of_text)
        self.pad_id = next((tokenizer.token_to_id(p) for p in PAD_NAMES if p in vocab), None)

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str) -> np.ndarray:
        return np.array(self.tokenizer.encode(text, add_special_tokens=False).ids, dtype=np.int64)

    def encode_batch(self, texts: list[str]) -> list:
        """Encodings (their `.ids`), in parallel; reading the ids is left to the caller's thread. Without
        character offsets where the library can (encode_batch_fast, tokenizers >= 0.20.2): nothing here
        reads them, and they cost about a sixth of the time."""
        encode = getattr(self.tokenizer, "encode_batch_fast", self.tokenizer.encode_batch)
        return encode(texts, add_special_tokens=False)

    def decode(self, ids) -> str:
        return self.tokenizer.decode([int(i) for i in ids], skip_special_tokens=False)

    def token_bytes(self) -> list[int]:
        """Exact for byte-level tokenizers (a ByteLevel decoder: GPT-2's, Llama 3's, ours): each piece is bytes
        written as characters, so a piece that is part of a character still counts its own bytes; otherwise
        each id decoded alone."""
        from tokenizers import decoders

        specials = {t.content for t in self.tokenizer.get_added_tokens_decoder().values() if t.special}
        byte_of = {c: b for b, c in enumerate(_bytes_to_unicode())}
        pieces = {i: p for p, i in self.tokenizer.get_vocab(with_added_tokens=True).items()}
        byte_level = isinstance(self.tokenizer.decoder, decoders.ByteLevel)  # GPT-2's, Llama 3's, ours
        out = []
        for i in range(self.vocab_size):
            piece = pieces.get(i, "")
            if piece in specials or i == self.eot_id:
                out.append(0)
            elif byte_level and all(c in byte_of for c in piece):
                out.append(len(piece))
            else:
                out.append(len(self.decode([i]).encode("utf-8")))
        return out

    def to_json(self) -> str:
        return json.dumps(
            {"kind": "huggingface", "tokenizer": self.tokenizer.to_str(), "end_of_text": self.end_of_text}
        )


Tokenizer = CharTokenizer | ByteTokenizer | HFTokenizer


def _bytes_to_unicode() -> list[str]:
    """GPT-2's printable stand-in for each byte value (the ByteLevel alphabet), in byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = [], 0
    for b in range(256):
        if b in printable:
            chars.append(chr(b))
        else:
            chars.append(chr(256 + extra))
            extra += 1
    return chars


def from_json(text: str) -> Tokenizer:
    """A tokenizer saved by `to_json()` (the corpus cache's tokenizer.json, a checkpoint's)."""
    saved = json.loads(text)
    if saved["kind"] == "char":
        return CharTokenizer(saved["chars"], saved["end_of_text"])
    if saved["kind"] == "bytes":
        return ByteTokenizer(saved["end_of_text"])
    from tokenizers import Tokenizer as HF

    return HFTokenizer(HF.from_str(saved["tokenizer"]), saved["end_of_text"])


# What a pretrained data.tokenizer may be, where no tokenizer is learned under that key (labelled, translation)
PRETRAINED = "a tokenizer.json file, a directory holding one or a Hugging Face tokenizer name (or leave it out: null)"


def pretrained(
    spec: str,
    end_of_text: str,
    instead: str = "char, bytes, bpe, a tokenizer.json file or a Hugging Face tokenizer name",
) -> HFTokenizer:
    """A tokenizer.json file (or a directory holding one), or a tokenizer on the Hugging Face hub by name
    (`gpt2`); one line on failure, saying what to give `instead` (data=text's default: its kinds too)."""
    from tokenizers import Tokenizer as HF

    path = Path(spec)
    if path.is_dir() and (path / "tokenizer.json").is_file():  # a Transformers model's directory
        path = path / "tokenizer.json"
    try:
        if path.suffix == ".json" or path.exists():
            if not path.is_file():
                raise DataUnavailableError(
                    f"data.tokenizer: {spec}: no such file (nor a directory with a tokenizer.json)"
                )
            tokenizer = HF.from_file(str(path))
        else:
            tokenizer = HF.from_pretrained(spec)
    except DataUnavailableError:
        raise
    except Exception as e:  # the library's own errors (a bad JSON, no such repository, no network)
        first = first_line(e)
        raise DataUnavailableError(
            f"data.tokenizer: {spec} does not load as a tokenizer ({first}); give {instead}"
        ) from None
    return HFTokenizer(tokenizer, end_of_text)


def train_bpe(documents: Iterable[str], vocab_size: int, end_of_text: str) -> HFTokenizer:
    """Byte-level BPE (GPT-2's scheme) learned from `documents` at `vocab_size` ids, the end-of-text id 0."""
    from tokenizers import Tokenizer as HF
    from tokenizers import decoders, models, pre_tokenizers, trainers

    tokenizer = HF(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[end_of_text],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(documents, trainer)
    return HFTokenizer(tokenizer, end_of_text)
