"""Labelled texts (data/base.py "labelled") for a classifier: `[CLS] text [SEP]` (the data's start and end
ids) padded, and the class; training batches reshuffled each epoch, evaluation batches in order."""

from __future__ import annotations

import math

import torch

from transformer_lab.batching.base import Batching
from transformer_lab.batching.pairs import pad_batch
from transformer_lab.data.batches import Batches, ShuffledBatches, for_this_rank


class LabelledBatches(Batching):
    form = "labelled"
    command = "classify"

    def rows(self, split: str) -> tuple[torch.Tensor, torch.Tensor]:
        ids, labels = self.data.labelled(split)
        if not ids:  # (a file evaluated whole holds nothing out for training: data/base.py whole_file)
            return torch.zeros(0, 2, dtype=torch.long), torch.zeros(0, dtype=torch.long)
        s = self.data.specials
        return pad_batch([torch.tensor([s.bos, *row, s.eos]) for row in ids], s.pad), torch.tensor(labels)

    def make(self) -> None:
        self.train, self.val = self.rows("train"), self.rows("val")

    @property
    def n_classes(self) -> int:
        return self.data.n_classes

    @property
    def pad_id(self) -> int:
        return self.data.specials.pad

    def encode(self, text: str) -> list[int]:
        s = self.data.specials
        return [s.bos, *self.data.encode(text), s.eos]

    def answer_text(self, answer: int) -> str:
        return self.data.labels[answer]

    def train_dataloader(self):
        batches = math.ceil(len(self.train[1]) / self.batch_size)
        return for_this_rank(
            ShuffledBatches(*self.train, self.batch_size, self.seed, lambda: self.position(batches)), self.trainer
        )

    def val_dataloader(self):
        return Batches(*self.val, self.val_batch_size)
