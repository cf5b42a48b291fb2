"""Translation pairs: Multi30k task 1 (de, en, fr) or any file of tab-separated pairs, with a BPE
vocabulary (HF tokenizers) trained on the training split only and cached in the data directory."""

from __future__ import annotations

import gzip
import hashlib
import logging
import math
from collections.abc import Callable
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from transformer_lab.atomic import atomic_write
from transformer_lab.data.base import DataModule, is_runs_file
from transformer_lab.data.batches import for_this_rank
from transformer_lab.data.configs import TranslationConfig
from transformer_lab.data.download import ensure_file
from transformer_lab.data.tokens import BOS, EOS, PAD, SEP, SPECIALS, UNK, TokenStreams  # noqa: F401 (re-exported)
from transformer_lab.errors import require
from transformer_lab.files import BadFile, read_text, sha256_file

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
    with atomic_write(path, "w") as f:
        f.write(tokenizer.to_str())
    return tokenizer


def pad_batch(sequences: list[torch.Tensor], value: int = PAD) -> torch.Tensor:
    return torch.nn.utils.rnn.pad_sequence(sequences, batch_first=True, padding_value=value)


def prefix_lm(src: torch.Tensor, tgt: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One decoder-only sequence `<bos> source <sep> target <eos>` as (inputs, targets); only the target
    part is predicted (-100 elsewhere). The prompt to decode from is inputs[:len(src) + 1]."""
    sequence = torch.cat([torch.tensor([BOS]), src[:-1], torch.tensor([SEP]), tgt[1:]])  # src ends in <eos>
    targets = sequence[1:].clone()
    targets[: len(src)] = -100  # the source and <sep> are given, not predicted
    return sequence[:-1], targets


class LengthGroupedBatches:
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


class TranslationDataModule(DataModule):
    """Batches are (source ids + <eos>, <bos> + target ids + <eos>), padded with <pad> = 0; in the "lm"
    layout, one sequence `<bos> source <sep> target <eos>` for a decoder-only model (a prefix LM)."""

    layouts = ("lm", "seq2seq", "spans", "mlm")
    kind = "bleu"
    has_test_split = True
    length_key = "max_length"

    config_class = TranslationConfig

    def __init__(self, layout: str = "seq2seq", **settings):  # settings: TranslationConfig's
        super().__init__(layout, **settings)
        c = self.config
        require(
            c.shared_vocab or layout != "lm",
            "data.shared_vocab",
            "a decoder-only model reads source and target as one sequence, so it needs one vocabulary (true)",
        )
        self.prefix_lm = layout == "lm"  # batches for a decoder-only model: `<bos> src <sep> tgt <eos>`
        self.data_dir = Path(c.data_dir)
        self.tokenizer: Tokenizer | None = None  # the target side's (and the source's, when shared)
        self.source_tokenizer: Tokenizer | None = None
        self.cut_lengths: list[int] = []  # token counts of the sentences max_length cuts
        self.whole_file = False  # evaluating a trained model on another file: all of it is val and test
        self.pairs: dict[str, list[tuple[str, str]]] = {split: [] for split in SPLIT_FILES}
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
        self.whole_file = self.config.path is not None and not is_runs_file(self.config.path, meta)

    def setup(self, stage: str | None = None) -> None:
        if self.ready:
            return
        self.pairs = self.load_pairs()
        cache = self.data_dir / "tokenizers"
        if self.tokenizer is None:  # (else a checkpoint's, from for_checkpoint)
            if self.config.shared_vocab:
                texts = [text for pair in self.pairs["train"] for text in pair]
                self.tokenizer = self.source_tokenizer = cached_tokenizer(cache, texts, self.config.vocab_size)
            else:
                self.source_tokenizer = cached_tokenizer(
                    cache, [s for s, _ in self.pairs["train"]], self.config.vocab_size
                )
                self.tokenizer = cached_tokenizer(cache, [t for _, t in self.pairs["train"]], self.config.vocab_size)
        self.encoded = {split: self.encode_pairs(pairs) for split, pairs in self.pairs.items()}
        self.warn_cut_sentences()
        if self.prefix_lm:
            self.prompt_lengths = {split: [len(s) + 1 for s in src] for split, (src, _) in self.encoded.items()}
            self.encoded = {
                split: ([], []) if not src else tuple(map(list, zip(*map(prefix_lm, src, tgt))))
                for split, (src, tgt) in self.encoded.items()
            }
        self.pad_values = (PAD, -100) if self.prefix_lm else (PAD, PAD)
        self.train_batches = LengthGroupedBatches(
            *self.encoded["train"], self.config.batch_size, self.config.seed, self._position, pad_values=self.pad_values
        )
        if self.pairs["train"]:  # (none when a trained model is evaluated on a whole file)
            self.padding_fraction = self.train_batches.padding_fraction()
        self.ready = True
        log.info(
            "translation %s->%s: %s pairs; vocabulary %d%s",
            self.config.source,
            self.config.target,
            {k: len(v) for k, v in self.pairs.items()},
            self.vocab_size,
            f"; padding {100 * self.padding_fraction:.1f}% of training positions"
            if self.padding_fraction is not None
            else "",
        )

    @property
    def vocab_size(self) -> int:
        """The target vocabulary (the only one when shared)."""
        return self.tokenizer.get_vocab_size()

    @property
    def source_vocab_size(self) -> int | None:
        return None if self.config.shared_vocab else self.source_tokenizer.get_vocab_size()

    @property
    def pad_id(self) -> int:
        return PAD

    @property
    def sequence_length(self) -> int:
        return 2 * self.config.max_length if self.prefix_lm else self.config.max_length  # a prefix LM sees both sides

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

    def encode_pairs(self, pairs: list[tuple[str, str]]) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Sentences longer than max_length - 2 tokens are cut to it (warn_cut_sentences says so)."""
        limit = self.config.max_length - 2
        src = self.source_tokenizer.encode_batch([s for s, _ in pairs])
        tgt = self.tokenizer.encode_batch([t for _, t in pairs])
        self.cut_lengths += [len(e.ids) for e in (*src, *tgt) if len(e.ids) > limit]
        return (
            [torch.tensor(e.ids[:limit] + [EOS]) for e in src],
            [torch.tensor([BOS] + e.ids[:limit] + [EOS]) for e in tgt],
        )

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
        return self.source_input(self.source_tokenizer.encode(text).ids)

    def source_input(self, ids: list[int]) -> list[int]:
        """A source sentence's ids as the model reads them: cut to max_source_tokens as in training, then
        <eos>; for a decoder-only model, the prompt `<bos> source <sep>`."""
        ids = ids[: self.max_source_tokens]
        return [BOS, *ids, SEP] if self.prefix_lm else [*ids, EOS]

    def decode(self, ids) -> str:
        """Text of token ids, without <pad>/<bos>/<eos>/<sep> (<unk> is the last special and stays)."""
        return self.tokenizer.decode([int(i) for i in ids if int(i) >= UNK], skip_special_tokens=False)

    def references(self, split: str) -> list[str]:
        return [t for _, t in self.pairs[split]]

    def sources(self, split: str) -> list[str]:
        return [s for s, _ in self.pairs[split]]

    @property
    def max_source_tokens(self) -> int:
        return self.config.max_length - 2  # (and <eos>, or <bos> ... <sep>)

    def token_streams(self):
        """The splits for span corruption: every sentence (both sides with a shared vocabulary, else the
        target side) tokenized and concatenated, as T5 packs its documents."""

        def stream(split: str) -> torch.Tensor:
            texts = [text for pair in self.pairs[split] for text in (pair if self.config.shared_vocab else pair[1:])]
            return torch.tensor([i for e in self.tokenizer.encode_batch(texts) for i in e.ids])

        return TokenStreams(
            stream("train"),
            stream("val"),
            self.vocab_size,
            pad_id=PAD,
            eos_id=EOS,
            decode=self.decode,
            encode=lambda text: self.tokenizer.encode(text).ids,
        )

    def _position(self) -> tuple[int, int]:
        trainer = self.trainer
        if trainer is None:
            return 0, 0
        per_epoch = min(len(self.train_batches), trainer.num_training_batches)
        return divmod(self.batches_done(), per_epoch)

    def train_dataloader(self):
        return for_this_rank(self.train_batches, self.trainer)

    def _eval_batches(self, split: str) -> EvalBatches:
        return EvalBatches(
            *self.encoded[split],
            self.config.val_batch_size,
            self.pad_values,
            self.prompt_lengths[split] if self.prefix_lm else None,
        )

    def val_dataloader(self):
        return self._eval_batches("val")

    def test_dataloader(self):
        return self._eval_batches("test")
