"""Equations (data/base.py "equations") as a model reads them:

- AnswerToken, for a decoder-only model: [a, op, b, =] and the answer as the only target, at "="; an answer of
  K tokens (a dataset's `answer_length`) is read after "=" as its first K - 1 tokens, each the next one's
  target: [a, op, b, =, c1, ..., cK-1], the targets c1..cK at the last K positions;
- AnswerSequence, for an encoder-decoder: every id moved up past the special tokens (<pad>, <bos>, ...), the
  source the equation and the target [<bos>, answer's tokens, <eos>];
- AnswerClass, for an encoder classifier: [<bos> as [CLS], a, op, b, =] (ids moved up the same way) and the
  answer as a class (one token: an answer of several is refused).

A dataset's answers are (N,) ids, one token each, or (N, K) for answers of K tokens; a dataset with answers of
more than one token declares `answer_length = K`, known before setup() (the model's length depends on it).

Training batches are the training rows reshuffled each epoch; validation, the validation rows in order.
"""

from __future__ import annotations

import math

import torch

from transformer_lab.batching.base import Batching
from transformer_lab.data.batches import Batches, ShuffledBatches, for_this_rank
from transformer_lab.data.tokens import BOS, EOS, PAD, SPECIALS
from transformer_lab.errors import UserError


class EquationBatches(Batching):
    form = "equations"
    command = "answer"  # the inference command that asks it for answers (commands/answer.py)
    offset = len(SPECIALS)  # where the data's ids start in the model's vocabulary

    @property
    def answer_length(self) -> int:
        """Tokens in each answer: the dataset's `answer_length` (data/base.py: 1 unless it says more)."""
        return self.data.answer_length

    def rows(self, tokens: torch.Tensor, answers: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(inputs, targets) of equations (the data's ids): tokens (N, L), answers (N, K)."""
        raise NotImplementedError

    def make(self) -> None:
        equations = self.data.equations()
        self.train, self.val = equations.train, equations.val
        answers = equations.answers if equations.answers.dim() == 2 else equations.answers[:, None]
        if answers.size(1) != self.answer_length:
            name = type(self.data).__name__
            raise UserError(
                f"{name}.equations() gives answers of {answers.size(1)} token(s), but {name}.answer_length is "
                f"{self.answer_length}: declare the length its answers have"
            )
        self.x, self.y = self.rows(equations.tokens, answers)

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

    def answer_text(self, answer) -> str:
        """An answer's text: one id, or a sequence of them (an answer of several tokens)."""
        return self.decode([answer] if isinstance(answer, int) else list(answer))

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

    @property
    def sequence_length(self) -> int | None:
        """The equation and all but the last of its answer's tokens (each predicts the next)."""
        length = self.data.sequence_length
        return None if length is None else length + self.answer_length - 1

    def rows(self, tokens, answers):
        inputs = torch.cat([tokens, answers[:, :-1]], 1)
        targets = torch.full_like(inputs, -100)  # ignored by cross-entropy
        targets[:, -answers.size(1) :] = answers
        return inputs, targets


class AnswerSequence(EquationBatches):
    @property
    def sequence_length(self) -> int | None:
        """The longer side: the equation, or the decoder's input [<bos>, answer's tokens]."""
        length = self.data.sequence_length
        return None if length is None else max(length, self.answer_length + 1)

    def rows(self, tokens, answers):
        column = torch.ones_like(answers[:, :1])
        target = torch.cat([column * BOS, answers + self.offset, column * EOS], 1)
        return tokens + self.offset, target


class AnswerClass(EquationBatches):
    command = "classify"

    def __init__(self, data, *args, **kwargs):
        super().__init__(data, *args, **kwargs)
        if self.answer_length != 1:  # (before the run is claimed: the build makes its batches first)
            raise UserError(
                f"{type(data).__name__}'s answers have {self.answer_length} tokens, and a classifier gives one "
                "class: train it with task=lm (gpt) or task=seq2seq (encdec, t5)"
            )

    @property
    def n_classes(self) -> int:
        return self.data.n_answers

    @property
    def sequence_length(self) -> int:
        return self.data.sequence_length + 1  # [CLS] first

    def rows(self, tokens, answers):
        return torch.cat([torch.full_like(answers, BOS), tokens + self.offset], 1), answers[:, 0]  # (one token)

    def encode(self, text: str) -> list[int]:
        return [BOS, *super().encode(text)]

    def answer_text(self, answer) -> str:
        return self.data.decode([int(answer)])  # a class is its number
