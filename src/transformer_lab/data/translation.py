"""Translation pairs: Multi30k task 1 (de, en, fr) or any file of tab-separated pairs, with a BPE
vocabulary (HF tokenizers) trained on the training split only and cached in the data directory."""

from __future__ import annotations

import gzip
import hashlib
import logging
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from transformer_lab.data.base import DataSource
from transformer_lab.data.configs import TranslationConfig
from transformer_lab.data.download import ensure_file
from transformer_lab.data.tokenizers import PRETRAINED, pretrained
from transformer_lab.data.tokens import BOS, EOS, PAD, SEP, SPECIALS, UNK, Specials, TokenStreams  # noqa: F401 (re-exported)
from transformer_lab.store.atomic import atomic_write
from transformer_lab.store.files import BadFile, read_text, sha256_file

log = logging.getLogger(__name__)

URL = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/{name}"
SHA256 = {
    "train.de.gz": "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6",
    "train.en.gz": "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f",
    "train.fr.gz": "622e75069e9f4c577425c4f277116ce66e63a2401c0a2312d90073cb12379a3c",
    "val.de.gz": "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a",
    "val.en.gz": "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28",
    "val.fr.gz": "ca3106f1a72390591d25f6c45cb4cd39dec4cd3f123e099748a3ce5256c160e9",
    "test_2016_flickr.de.gz": "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8",
    "test_2016_flickr.en.gz": "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9",
    "test_2016_flickr.fr.gz": "6d326e188d259fb1d04ac19eae3af956559b3a0b93d7635e56c90987c40c8b90",
}
SPLIT_FILES = {"train": "train", "val": "val", "test": "test_2016_flickr"}


def read_multi30k(data_dir: str | Path, split: str, language: str) -> list[str]:
    name = f"{SPLIT_FILES[split]}.{language}.gz"
    path = ensure_file(Path(data_dir) / "multi30k" / name, URL.format(name=name), SHA256[name])
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def read_pairs(path: str | Path) -> list[tuple[str, str]]:
    """One `source<TAB>target` pair a line; an empty or malformed file is an error naming the line."""
    pairs = []
    for number, line in enumerate(read_text(path, "data.path").split("\n"), 1):
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) != 2:
            raise BadFile(path, f"expected 2 tab-separated fields, found {len(fields)}", "data.path", number)
        if not fields[0].strip() or not fields[1].strip():
            raise BadFile(
                path, f"the {'source' if not fields[0].strip() else 'target'} side is empty", "data.path", number
            )
        pairs.append((fields[0], fields[1]))
    if not pairs:
        raise BadFile(path, "holds no sentence pairs", "data.path")
    return pairs


def split_sizes(n: int, val_fraction: float, test_fraction: float) -> tuple[int, int, int]:
    """Validation, test and training pairs of a file of `n` pairs."""
    n_val, n_test = round(n * val_fraction), round(n * test_fraction)
    return n_val, n_test, n - n_val - n_test


def train_tokenizer(texts: list[str], vocab_size: int) -> Tokenizer:
    """Byte-pair encoding over Metaspace pre-tokens (SentencePiece style), so decoding restores spacing."""
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.normalizer = normalizers.NFKC()
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Metaspace()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIALS, min_frequency=2, show_progress=False)
    tokenizer.train_from_iterator(texts, trainer)
    return tokenizer


def cached_tokenizer(cache_dir: Path, texts: list[str], vocab_size: int) -> Tokenizer:
    """The tokenizer for exactly these training texts and settings: loaded if cached, else trained and saved."""
    key = hashlib.sha256("\n".join(texts).encode() + f"|bpe|{vocab_size}|{SPECIALS}".encode()).hexdigest()[:16]
    path = cache_dir / f"bpe-{vocab_size}-{key}.json"
    if path.exists():
        try:
            return Tokenizer.from_str(path.read_text(encoding="utf-8"))
        except Exception as e:  # a cache from a crash or another version: say so and rebuild it
            log.warning("tokenizer cache %s is unreadable (%s); training it again", path, e)
    tokenizer = train_tokenizer(texts, vocab_size)
    try:
        with atomic_write(path, "w") as f:
            f.write(tokenizer.to_str())
    except OSError as e:  # a read-only or full data folder: the run goes on, learning it again next time
        log.warning("tokenizer cache: cannot write %s (%s); the tokenizer is learned again next time", path, e.strerror)
    return tokenizer


class TranslationData(DataSource):
    """Sentence pairs, each side's ids cut to data.max_length - 2 tokens (room for a model's specials);
    and, for objectives on text, every sentence as one token stream."""

    provides = ("pairs", "text")
    has_test_split = True
    length_key = "max_length"
    reads_whole_file = True  # (load_pairs(): all of a file evaluated whole in the validation and test splits)

    config_class = TranslationConfig

    def __init__(self, **settings):  # settings: TranslationConfig's
        super().__init__(**settings)
        c = self.config
        self.data_dir = Path(c.data_dir)
        self.tokenizer: Tokenizer | None = None  # the target side's (and the source's, when shared)
        self.source_tokenizer: Tokenizer | None = None
        self.cut_lengths: list[int] = []  # token counts of the sentences max_length cuts
        self.text: dict[str, list[tuple[str, str]]] = {split: [] for split in SPLIT_FILES}  # the pairs' texts
        self.ready = False

    def load_pairs(self) -> dict[str, list[tuple[str, str]]]:
        if self.config.path is None:
            return {
                split: list(
                    zip(
                        read_multi30k(self.data_dir, split, self.config.source),
                        read_multi30k(self.data_dir, split, self.config.target),
                        strict=True,
                    )
                )
                for split in SPLIT_FILES
            }
        pairs = read_pairs(self.config.path)
        if self.whole_file:
            return {"train": [], "val": pairs, "test": pairs}
        n_val, n_test, n_train = split_sizes(len(pairs), self.config.val_fraction, self.config.test_fraction)
        if not (n_val and n_test and n_train):
            fewest = next(
                n for n in range(3, 10**6) if all(split_sizes(n, self.config.val_fraction, self.config.test_fraction))
            )
            raise BadFile(
                self.config.path,
                f"holds {len(pairs)} sentence pair(s), too few to split: with data.val_fraction={self.config.val_fraction} "
                f"and data.test_fraction={self.config.test_fraction} every split needs one, which takes at least {fewest}",
                "data.path",
            )
        order = torch.randperm(len(pairs), generator=torch.Generator().manual_seed(self.config.split_seed)).tolist()
        return {
            "val": [pairs[i] for i in order[:n_val]],
            "test": [pairs[i] for i in order[n_val : n_val + n_test]],
            "train": [pairs[i] for i in order[n_val + n_test :]],
        }

    def prepare_data(self) -> None:
        if self.config.path is None:
            for split in SPLIT_FILES:
                for language in (self.config.source, self.config.target):
                    read_multi30k(self.data_dir, split, language)

    def for_checkpoint(self, meta: dict) -> None:
        self.tokenizer = Tokenizer.from_str(meta["tokenizer"])
        source = meta.get("source_tokenizer")
        self.source_tokenizer = Tokenizer.from_str(source) if source else self.tokenizer

    def setup(self, stage: str | None = None) -> None:
        if self.ready:
            return
        self.text = self.load_pairs()
        cache = self.data_dir / "tokenizers"
        if self.tokenizer is None:  # (else a checkpoint's, from for_checkpoint)
            if self.config.tokenizer is not None:  # a pretrained model's (init_from=hf: sets it)
                self.tokenizer = self.source_tokenizer = pretrained(self.config.tokenizer, "</s>", PRETRAINED).tokenizer
            elif self.config.shared_vocab:
                texts = [text for pair in self.text["train"] for text in pair]
                self.tokenizer = self.source_tokenizer = cached_tokenizer(cache, texts, self.config.vocab_size)
            else:
                self.source_tokenizer = cached_tokenizer(
                    cache, [s for s, _ in self.text["train"]], self.config.vocab_size
                )
                self.tokenizer = cached_tokenizer(cache, [t for _, t in self.text["train"]], self.config.vocab_size)
        self.encoded = {split: self.encode_pairs(pairs) for split, pairs in self.text.items()}
        self.warn_cut_sentences()
        self.ready = True
        c = self.config  # (a file of one's own pairs is named, not Multi30k's languages it does not have)
        log.info(
            "translation %s: %s pairs; vocabulary %d",
            f"{c.source}->{c.target}" if c.path is None else Path(c.path).name,
            {k: len(v) for k, v in self.text.items()},
            self.vocab_size,
        )

    @property
    def vocab_size(self) -> int:
        """The target vocabulary (the only one when shared)."""
        return self.tokenizer.get_vocab_size()

    @property
    def specials(self) -> Specials:
        """Ours (SPECIALS), or a pretrained tokenizer's own (loaded by setup() or for_checkpoint())."""
        return Specials.of_data(self.tokenizer, self.config.tokenizer, "translation pairs")

    @property
    def source_vocab_size(self) -> int | None:
        return None if self.config.shared_vocab else self.source_tokenizer.get_vocab_size()

    @property
    def sequence_length(self) -> int:
        return self.config.max_length  # a sentence's tokens, and two specials

    def data_files(self) -> dict[str, str]:
        if self.config.path is not None:
            return {str(Path(self.config.path).absolute()): sha256_file(self.config.path)}
        names = [
            f"{SPLIT_FILES[split]}.{language}.gz"
            for split in SPLIT_FILES
            for language in (self.config.source, self.config.target)
        ]
        return {str((self.data_dir / "multi30k" / name).absolute()): SHA256[name] for name in names}

    def checkpoint_meta(self) -> dict:
        return {
            "tokenizer": self.tokenizer.to_str(),
            "source_tokenizer": None if self.config.shared_vocab else self.source_tokenizer.to_str(),
        }

    def encode_pairs(self, pairs: list[tuple[str, str]]) -> tuple[list[list[int]], list[list[int]]]:
        """Sentences longer than max_tokens are cut to it (warn_cut_sentences says so)."""
        limit = self.max_tokens
        src = self.source_tokenizer.encode_batch([s for s, _ in pairs], add_special_tokens=False)
        tgt = self.tokenizer.encode_batch([t for _, t in pairs], add_special_tokens=False)
        self.cut_lengths += [len(e.ids) for e in (*src, *tgt) if len(e.ids) > limit]
        return [e.ids[:limit] for e in src], [e.ids[:limit] for e in tgt]

    def pairs(self, split: str) -> tuple[list[list[int]], list[list[int]]]:
        return self.encoded[split]

    def warn_cut_sentences(self) -> None:
        """One line for the whole run: how many sentences data.max_length cut, and the longest."""
        if self.cut_lengths:
            log.warning(
                "translation: %d sentences (of all splits, either side) are longer than data.max_length=%d "
                "allows (%d tokens) and are cut to it; the longest has %d tokens",
                len(self.cut_lengths),
                self.config.max_length,
                self.config.max_length - 2,
                max(self.cut_lengths),
            )

    def encode(self, text: str) -> list[int]:
        """A source sentence's ids; a ValueError for one with nothing the vocabulary knows."""
        ids = self.source_tokenizer.encode(text, add_special_tokens=False).ids
        unknown = self.source_tokenizer.token_to_id("<unk>")  # (ours: UNK; a pretrained tokenizer's own)
        if text.strip() and not self.source_tokenizer.decode([t for t in ids if t != unknown]).strip():
            raise ValueError("has no character the model's vocabulary knows")
        return ids

    def decode(self, ids) -> str:
        """Text of token ids, without <pad>/<bos>/<eos>/<sep> (<unk> is the last special and stays); a
        pretrained tokenizer's without its special tokens."""
        if self.config.tokenizer is not None:
            return self.tokenizer.decode([int(i) for i in ids], skip_special_tokens=True)
        return self.tokenizer.decode([int(i) for i in ids if int(i) >= UNK], skip_special_tokens=False)

    def references(self, split: str) -> list[str]:
        return [t for _, t in self.text[split]]

    def sources(self, split: str) -> list[str]:
        return [s for s, _ in self.text[split]]

    @property
    def max_tokens(self) -> int:
        return self.config.max_length - 2  # (and <eos>, or <bos> ... <sep>)

    def token_streams(self):
        """The splits as text: every sentence (both sides with a shared vocabulary, else the target side)
        tokenized and concatenated, as T5 packs its documents."""

        def stream(split: str) -> torch.Tensor:
            texts = [text for pair in self.text[split] for text in (pair if self.config.shared_vocab else pair[1:])]
            return torch.tensor(
                [i for e in self.tokenizer.encode_batch(texts, add_special_tokens=False) for i in e.ids]
            )

        return TokenStreams(
            stream("train"),
            stream("val"),
            self.vocab_size,
            pad_id=self.specials.pad,
            eos_id=self.specials.eos,
            decode=self.decode,
            encode=lambda text: self.tokenizer.encode(text, add_special_tokens=False).ids,
        )
