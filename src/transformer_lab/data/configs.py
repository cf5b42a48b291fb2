"""The settings of each dataset here (the data.* keys): their types, defaults and checks, importable without
torch or Lightning, so a command line is composed and checked before anything heavy loads. Each data
module declares its class here as `config_class` and reads its settings from `self.config`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from transformer_lab.choices import check_ranges, choice, within
from transformer_lab.errors import require

# Model settings the data decides: a model config's fields of these names are filled from the data
# module's attributes of the same names (`block_size` from `sequence_length`, where the user sets none).
DATA_DECIDED = ("vocab_size", "src_vocab_size", "n_classes", "pad_id", "block_size")

OPS = ["+", "-", "*", "/"]
Op = choice("Op", *OPS)
LANGUAGES = ("de", "en", "fr")  # Multi30k's


def is_prime(n: int) -> bool:
    return n >= 2 and all(n % d for d in range(2, int(n**0.5) + 1))


@dataclass
class ModularConfig:  # data/modular.py
    p: int = 97  # a prime modulus
    op: Op = Op("+")  # noqa: RUF009  (an enum member, immutable)
    terms: int = within(2, "[2, inf)")  # operands per equation: (a op b op c ...) mod p
    train_fraction: float = within(0.5, "(0, 1)")
    split_seed: int = 0  # which equations go to training
    batch_size: int = 512
    val_batch_size: int | None = None  # default (null): batch_size
    max_examples: int = 1_000_000  # with many terms, sample this many equations instead of all
    seed: int = 1337

    def __post_init__(self):
        check_ranges(self)
        self.val_batch_size = self.val_batch_size or self.batch_size
        require(is_prime(self.p), "p", f"must be a prime (division needs inverses), got {self.p}")


@dataclass
class ShakespeareConfig:  # data/shakespeare.py
    data_dir: str = "data"
    path: str | None = None  # a UTF-8 text file to use instead of Tiny Shakespeare
    block_size: int = within(256, "[1, inf)")  # context length of each training window
    batch_size: int = 64
    val_batch_size: int | None = None  # default (null): batch_size
    val_fraction: float = within(0.1, "(0, 1)")  # the last 10% of the text is held out
    seed: int = 1337
    sample_prompt: str = "\n"  # where text samples at each validation start

    def __post_init__(self):
        check_ranges(self)
        self.val_batch_size = self.val_batch_size or self.batch_size


@dataclass
class RepeatsConfig:  # data/repeats.py
    letters: int = within(32, "[2, 52]")  # the alphabet: the first N of a-z, A-Z
    min_segment: int = within(4, "[1, inf)")  # a segment's letters, drawn uniformly in [min_segment, max_segment]
    max_segment: int = within(16, "[1, inf)")
    copies: int = within(4, "[2, inf)")  # each segment written this many times in a row
    characters: int = within(200_000, "[1, inf)")  # the text's length
    text_seed: int = 0  # the text drawn (the run's seed draws the windows)
    block_size: int = within(32, "[1, inf)")  # context length of each training window
    batch_size: int = 64
    val_batch_size: int | None = None  # default (null): batch_size
    val_fraction: float = within(0.1, "(0, 1)")  # the last 10% of the text is held out
    seed: int = 1337
    sample_prompt: str = "quickbrownquick"  # where text samples at each validation start

    def __post_init__(self):
        check_ranges(self)
        self.val_batch_size = self.val_batch_size or self.batch_size
        require(self.max_segment >= self.min_segment, "max_segment", f"must be >= data.min_segment={self.min_segment}")
        held_out = int(self.characters * self.val_fraction)
        require(
            held_out > self.block_size,
            "characters",
            f"holds {held_out} to validate on, not a window of data.block_size + 1",
        )


LEARNED_KINDS = ("char", "bytes", "bpe")  # data=text's tokenizers made here; elsewhere data.tokenizer is pretrained


@dataclass
class LabelledConfig:  # data/labelled.py
    path: str | None = None  # a file of `text<TAB>label` lines
    data_dir: str = "data"  # where a learned tokenizer is cached
    val_fraction: float = within(0.1, "(0, 0.5)")  # the share held out for validation, drawn with split_seed
    split_seed: int = 0
    tokenizer: str | None = (
        None  # a pretrained tokenizer.json, a directory holding one or a HF name (null: BPE learned here)
    )
    vocab_size: int = within(4000, "[100, inf)")  # the learned BPE's
    max_length: int = within(128, "[4, inf)")  # tokens per text with its two specials ([CLS] ... [SEP]); longer cut
    batch_size: int = 32
    val_batch_size: int | None = None  # default (null): batch_size
    seed: int = 1337

    def __post_init__(self):
        check_ranges(self)
        self.val_batch_size = self.val_batch_size or self.batch_size
        require(self.path is not None, "path", "give a file of text<TAB>label lines")
        require(
            self.tokenizer not in LEARNED_KINDS,
            "tokenizer",
            f"{self.tokenizer} is a kind data=text learns; data=labelled learns a BPE when data.tokenizer is left out "
            "(null), or reads a pretrained one: a tokenizer.json, a directory holding one, or a Hugging Face name",
        )


@dataclass
class TranslationConfig:  # data/translation.py
    data_dir: str = "data"
    source: str = "de"  # Multi30k languages: de, en, fr
    target: str = "en"
    path: str | None = None  # a file of `source<TAB>target` lines to use instead of Multi30k
    val_fraction: float = within(0.05, "(0, 0.5)")  # with path: the shares held out for validation and test
    test_fraction: float = within(0.05, "(0, 0.5)")
    split_seed: int = 0
    vocab_size: int = within(8000, "[100, inf)")  # BPE vocabulary size, trained on the training split only
    shared_vocab: bool = True  # one vocabulary for both languages (false: one each)
    tokenizer: str | None = (
        None  # a pretrained tokenizer.json, a directory holding one or a HF name (null: BPE learned here)
    )
    max_length: int = within(128, "[4, inf)")  # tokens per sentence, longer ones are cut
    batch_size: int = 128  # sentence pairs, grouped by length
    val_batch_size: int | None = None  # default (null): batch_size
    seed: int = 1337

    def __post_init__(self):
        check_ranges(self)
        self.val_batch_size = self.val_batch_size or self.batch_size
        if self.path is None:
            for key, language in (("source", self.source), ("target", self.target)):
                require(
                    language in LANGUAGES,
                    key,
                    f"Multi30k has {', '.join(LANGUAGES)}; got {language!r} (or give data.path=FILE)",
                )
            require(self.source != self.target, "target", f"is the same language as data.source ({self.source})")
        require(
            self.tokenizer not in LEARNED_KINDS,
            "tokenizer",
            f"{self.tokenizer} is a kind data=text learns; data=translation learns a BPE when data.tokenizer is left out "
            "(null), or reads a pretrained one: a tokenizer.json, a directory holding one, or a Hugging Face name",
        )
        require(
            self.tokenizer is None or self.shared_vocab,
            "shared_vocab",
            "a pretrained data.tokenizer serves both languages: leave shared_vocab true",
        )


TokenDtype = choice("TokenDtype", "auto", "uint16", "uint32")


@dataclass
class TextConfig:  # data/corpus/
    data_dir: str = "data"
    path: Any = None  # a .txt, .jsonl or .parquet file, a directory, a glob, or a list of them
    dataset: str | None = None  # or a Hugging Face dataset by name (with data.path: its data_files)
    dataset_config: str | None = None  # the dataset's configuration (load_dataset's `name`)
    dataset_split: str = "train"  # the dataset's split to read (its documents are then split again)
    text_field: str = "text"  # a .jsonl line's, a parquet or dataset row's text
    separator: str = "\n\n"  # what ends a document in a .txt file
    end_of_text: str = "<|endoftext|>"  # the token after each document (a pretrained tokenizer's own if it has one)
    tokenizer: str = "bpe"  # char, bytes, bpe (learned from the training documents), a tokenizer.json or HF name
    vocab_size: int = within(4096, "[257, inf)")  # bpe's, the end-of-text token and the 256 bytes included
    token_dtype: TokenDtype = TokenDtype("auto")  # noqa: RUF009 (an enum member, immutable); of the cache's token files: auto (uint16 where the vocabulary fits), uint16, uint32
    cache_dir: str | None = None  # default (null): DATA_DIR/corpus_cache
    val_fraction: float = within(0.01, "(0, 1)")  # the share of documents held out
    split_seed: int = 0  # which documents are held out
    block_size: int = within(256, "[1, inf)")  # context length of each training window
    batch_size: int = 64
    val_batch_size: int | None = None  # default (null): batch_size
    seed: int = 1337
    sample_prompt: str = ""  # text samples start a new document with this text

    def __post_init__(self):
        check_ranges(self)
        self.val_batch_size = self.val_batch_size or self.batch_size
        paths = [self.path] if isinstance(self.path, str) else self.path
        require(
            self.path is None
            or (isinstance(paths, (list, tuple)) and paths and all(isinstance(p, str) for p in paths)),
            "path",
            f"must be a file, directory or glob, or a list of them; got {self.path!r}",
        )
        require(
            self.path is not None or self.dataset is not None,
            "path",
            "give the corpus: data.path=FILE|DIR|GLOB (.txt, .jsonl, .parquet) or data.dataset=NAME (Hugging Face)",
        )
        require(bool(self.tokenizer), "tokenizer", "give char, bytes, bpe, a tokenizer.json or a HF tokenizer name")
        for key in ("separator", "end_of_text"):
            require(bool(getattr(self, key)), key, "must not be empty")
