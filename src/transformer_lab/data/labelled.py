"""Texts with a label each, for sequence classification: a file of `text<TAB>label` lines, split into
training and validation (seeded), read with a pretrained tokenizer (a BERT's: `init_from=hf:...` sets
data.tokenizer) or a BPE learned from the training texts (translation.py's, cached in the data directory).
Classes are the labels in sorted order."""

from __future__ import annotations

import logging
from pathlib import Path

import torch

from transformer_lab.data.base import DataSource
from transformer_lab.data.configs import LabelledConfig
from transformer_lab.data.tokenizers import PRETRAINED, pretrained
from transformer_lab.data.tokens import UNK, Specials
from transformer_lab.data.translation import cached_tokenizer
from transformer_lab.store.files import BadFile, read_text, sha256_file

log = logging.getLogger(__name__)


def read_labelled(path: str | Path, at_least: int = 2) -> list[tuple[str, str]]:
    """One `text<TAB>label` a line; a malformed line is an error naming it. Training needs two labels at
    least; evaluating a trained classifier on a file (`at_least=1`), one."""
    rows = []
    for number, line in enumerate(read_text(path, "data.path").split("\n"), 1):
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) != 2:
            raise BadFile(
                path, f"expected text<TAB>label, found {len(fields)} tab-separated fields", "data.path", number
            )
        if not fields[0].strip() or not fields[1].strip():
            raise BadFile(path, f"the {'text' if not fields[0].strip() else 'label'} is empty", "data.path", number)
        rows.append((fields[0], fields[1].strip()))
    if not rows:
        raise BadFile(path, "holds no labelled texts", "data.path")
    if len({label for _, label in rows}) < at_least:
        raise BadFile(
            path, f"holds {len(rows)} labelled text(s) of fewer than two labels: nothing to classify", "data.path"
        )
    return rows


class LabelledText(DataSource):
    provides = ("labelled",)
    length_key = "max_length"
    config_class = LabelledConfig
    reads_whole_file = True  # (setup(): all of a file evaluated whole in the validation split)

    def __init__(self, **settings):  # settings: LabelledConfig's
        super().__init__(**settings)
        self.tokenizer = None  # a tokenizers.Tokenizer
        self.labels: list[str] = []
        self.encoded: dict[str, tuple[list[list[int]], list[int]]] = {}

    def for_checkpoint(self, meta: dict) -> None:
        from tokenizers import Tokenizer

        self.tokenizer, self.labels = Tokenizer.from_str(meta["tokenizer"]), meta["labels"]

    def setup(self, stage: str | None = None) -> None:
        if self.encoded:
            return
        rows = read_labelled(self.config.path, at_least=1 if self.whole_file else 2)
        order = torch.randperm(len(rows), generator=torch.Generator().manual_seed(self.config.split_seed)).tolist()
        n_val = len(rows) if self.whole_file else round(len(rows) * self.config.val_fraction)
        if not 0 < n_val < len(rows) and not self.whole_file:
            raise BadFile(
                self.config.path,
                f"holds {len(rows)} labelled texts, too few to hold out data.val_fraction={self.config.val_fraction}",
                "data.path",
            )
        splits = {"val": [rows[i] for i in order[:n_val]], "train": [rows[i] for i in order[n_val:]]}
        if self.tokenizer is None:
            if self.config.tokenizer is not None:
                self.tokenizer = pretrained(self.config.tokenizer, "</s>", PRETRAINED).tokenizer
            else:
                texts = [text for text, _ in splits["train"]]
                self.tokenizer = cached_tokenizer(
                    Path(self.config.data_dir) / "tokenizers", texts, self.config.vocab_size
                )
            self.labels = sorted({label for _, label in rows})
        index = {label: i for i, label in enumerate(self.labels)}
        unseen = sorted({label for _, label in rows} - set(index))
        if unseen:  # (a checkpoint's labels: for_checkpoint)
            count = sum(label in unseen for _, label in rows)
            raise BadFile(
                self.config.path,
                f"{'label' if len(unseen) == 1 else 'labels'} {', '.join(map(repr, unseen))} ({count} text(s)): not "
                "one the model was trained on "
                f"(its labels: {', '.join(self.labels)}); leave those lines out to evaluate the rest",
                "data.path",
            )
        limit = self.config.max_length - 2
        for split, pairs in splits.items():
            ids = self.tokenizer.encode_batch([text for text, _ in pairs], add_special_tokens=False)
            self.encoded[split] = ([e.ids[:limit] for e in ids], [index[label] for _, label in pairs])
        log.info("labelled texts: %s; %d classes; vocabulary %d", {k: len(v[1]) for k, v in self.encoded.items()},
                 len(self.labels), self.vocab_size)  # fmt: skip

    def labelled(self, split: str) -> tuple[list[list[int]], list[int]]:
        return self.encoded[split]

    @property
    def specials(self) -> Specials:
        return Specials.of_data(self.tokenizer, self.config.tokenizer, "classified texts")

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size()

    @property
    def n_classes(self) -> int:
        return len(self.labels)

    @property
    def sequence_length(self) -> int:
        return self.config.max_length

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids[: self.config.max_length - 2]

    def decode(self, ids) -> str:
        if self.config.tokenizer is not None:
            return self.tokenizer.decode([int(i) for i in ids], skip_special_tokens=True)
        return self.tokenizer.decode([int(i) for i in ids if int(i) >= UNK], skip_special_tokens=False)

    def checkpoint_meta(self) -> dict:
        return {"tokenizer": self.tokenizer.to_str(), "labels": self.labels}

    def data_files(self) -> dict[str, str]:
        return {str(Path(self.config.path).absolute()): sha256_file(self.config.path)}
