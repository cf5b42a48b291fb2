"""Equations (data/base.py "equations") as a model reads them:

- AnswerToken, for a decoder-only model: [a, op, b, =] and the answer as the only target, at "=";
- AnswerSequence, for an encoder-decoder: every id moved up past the special tokens (<pad>, <bos>, ...), the
  source the equation and the target [<bos>, answer, <eos>];
- AnswerClass, for an encoder classifier: [<bos> as [CLS], a, op, b, =] (ids moved up the same way) and the
  answer as a class.

Training batches are the training rows reshuffled each epoch; validation, the validation rows in order.
"""

from __future__ import annotations

import math

import torch

from transformer_lab.batching.base import Batching
from transformer_lab.data.batches import Batches, ShuffledBatches, for_this_rank
from transformer_lab.data.tokens import BOS, EOS, PAD, SPECIALS


class EquationBatches(Batching):
    form = "equations"
    offset = len(SPECIALS)  # where the data's ids start in the model's vocabulary

    def rows(self, tokens: torch.Tensor, answers: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(inputs, targets) of equations (the data's ids)."""
        raise NotImplementedError

    def make(self) -> None:
        equations = self.data.equations()
        self.train, self.val = equations.train, equations.val
        self.x, self.y = self.rows(equations.tokens, equations.answers)

    @property
    def vocab_size(self) -> int:
        return self.offset + self.data.vocab_size

    @property
    def pad_id(self) -> int | None:
        return PAD

    def decode(self, ids) -> str:
        return self.data.decode([int(i) - self.offset for i in ids if int(i) >= self.offset])

    def encode(self, text: str) -> list[int]:
        return [i + self.offset for i in self.data.encode(text)]

    def answer_text(self, answer: int) -> str:
        return self.decode([answer])

    def train_dataloader(self):
        batches = math.ceil(len(self.train) / self.batch_size)
        return for_this_rank(
            ShuffledBatches(
                self.x[self.train], self.y[self.train], self.batch_size, self.seed, lambda: self.position(batches)
            ),
            self.trainer,
        )

    def val_dataloader(self):
        return Batches(self.x[self.val], self.y[self.val], self.val_batch_size)


class AnswerToken(EquationBatches):
    offset = 0

    @property
    def pad_id(self) -> int | None:
        return None

    def rows(self, tokens, answers):
        targets = torch.full_like(tokens, -100)  # ignored by cross-entropy
        targets[:, -1] = answers
        return tokens, targets


class AnswerSequence(EquationBatches):
    def rows(self, tokens, answers):
        target = torch.stack([torch.full_like(answers, BOS), answers + self.offset, torch.full_like(answers, EOS)], 1)
        return tokens + self.offset, target


class AnswerClass(EquationBatches):
    command = "classify"

    @property
    def n_classes(self) -> int:
        return self.data.n_answers

    @property
    def sequence_length(self) -> int:
        return self.data.sequence_length + 1  # [CLS] first

    def rows(self, tokens, answers):
        return torch.cat([torch.full_like(answers[:, None], BOS), tokens + self.offset], 1), answers

    def encode(self, text: str) -> list[int]:
        return [BOS, *super().encode(text)]

    def answer_text(self, answer: int) -> str:
        return self.data.decode([answer])  # a class is its number
