"""Modular arithmetic, generated: `a op b = c (mod p)` for every pair, split into train and validation.

Sequence layout (token ids): numbers 0..p-1 are themselves, then one id per operator and one for "=".
Two terms: [a, op, b, =] and the target is c at the "=" position; more terms repeat "op x".
For an encoder-decoder (`layout="seq2seq"`) every id moves up past the special tokens (<pad>, <bos>, ...):
the source is the equation, the target [<bos>, c, <eos>]. For a classifier (`layout="classify"`) the ids
move up the same way, the input is [<bos> as [CLS], a, op, b, =] and the target is the class c.
"""

from __future__ import annotations

import itertools
import math
import re

import torch

from transformer_lab.data.base import DataModule
from transformer_lab.data.batches import Batches, ShuffledBatches, for_this_rank
from transformer_lab.data.configs import OPS, ModularConfig
from transformer_lab.data.tokens import BOS, EOS, PAD, SPECIALS


def apply_op(op: str, a: torch.Tensor, b: torch.Tensor, p: int) -> torch.Tensor:
    if op == "+":
        return (a + b) % p
    if op == "-":
        return (a - b) % p
    if op == "*":
        return (a * b) % p
    if op == "/":  # a * b^(p-2) = a / b by Fermat's little theorem (p prime, b != 0)
        inverse = torch.tensor([pow(int(v), p - 2, p) for v in range(p)])
        return (a * inverse[b]) % p
    raise ValueError(f"unknown operator {op!r}")


def make_equations(
    p: int, op: str, terms: int = 2, max_examples: int = 1_000_000, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """All equations (or a random max_examples of them): operands (N, terms) and answers (N,)."""
    # Every operand after the first is a divisor for "/", so it ranges over 1..p-1 there.
    low = 1 if op == "/" else 0
    ranges = [range(p)] + [range(low, p)] * (terms - 1)
    total = p * (p - low) ** (terms - 1)
    if total <= max_examples:
        operands = torch.tensor(list(itertools.product(*ranges)))
    else:
        g = torch.Generator().manual_seed(seed)
        operands = torch.randint(low, p, (max_examples, terms), generator=g)
        operands[:, 0] = torch.randint(0, p, (max_examples,), generator=g)
        operands = operands.unique(dim=0)
    answer = operands[:, 0]
    for t in range(1, terms):
        answer = apply_op(op, answer, operands[:, t], p)
    return operands, answer


class ModularDataModule(DataModule):
    layouts = ("lm", "seq2seq", "classify")
    kind = "equation"
    answer_only = True  # loss and accuracy on the answer token only
    length_key = "terms"

    config_class = ModularConfig

    def __init__(self, layout: str = "lm", **settings):  # settings: ModularConfig's
        super().__init__(layout, **settings)
        p, op = self.config.p, self.config.op
        assert layout in self.layouts, layout
        self.offset = 0 if layout == "lm" else len(SPECIALS)
        self.op_id = p + OPS.index(op)
        self.eq_id = p + len(OPS)
        self.ready = False

    @property
    def vocab_size(self) -> int:
        return self.offset + self.config.p + len(OPS) + 1

    @property
    def n_classes(self) -> int | None:
        return self.config.p if self.layout == "classify" else None

    @property
    def pad_id(self) -> int | None:
        return None if self.layout == "lm" else PAD

    @property
    def sequence_length(self) -> int:
        return 2 * self.config.terms + (self.layout == "classify")  # ([CLS]) a op b ... =

    def decode(self, ids) -> str:
        symbols = [str(i) for i in range(self.config.p)] + OPS + ["="]
        return " ".join(symbols[int(i) - self.offset] for i in ids if int(i) >= self.offset)

    def encode(self, text: str) -> list[int]:
        """An equation as the model reads it: `3 + 5 =` (the "=" may be left out)."""
        symbols = re.findall(r"\d+|\S", text)
        if symbols and symbols[-1] == "=":
            symbols.pop()
        form = " ".join(["a", *[f"{self.config.op} {name}" for name in "bcdefgh"[: self.config.terms - 1]], "="])
        numbers, ops = symbols[0::2], symbols[1::2]
        if len(symbols) != 2 * self.config.terms - 1 or any(op != self.config.op for op in ops):
            raise ValueError(
                f"expected an equation of the form `{form}` (data.op={self.config.op}, data.terms={self.config.terms})"
            )
        bad = [n for n in numbers if not n.isdigit() or int(n) >= self.config.p]
        if bad:
            raise ValueError(f"{', '.join(bad)}: not a number in 0..{self.config.p - 1} (data.p={self.config.p})")
        ids = [int(symbol) if i % 2 == 0 else self.op_id for i, symbol in enumerate(symbols)] + [self.eq_id]
        ids = [i + self.offset for i in ids]
        return [BOS, *ids] if self.layout == "classify" else ids

    def setup(self, stage: str | None = None) -> None:
        if self.ready:
            return
        operands, answer = make_equations(
            self.config.p, self.config.op, self.config.terms, self.config.max_examples, self.config.split_seed
        )
        n = len(answer)
        x = torch.full((n, 2 * self.config.terms), self.op_id, dtype=torch.long)
        x[:, 0::2] = operands
        x[:, -1] = self.eq_id
        y = torch.full_like(x, -100)  # ignored by cross-entropy
        y[:, -1] = answer
        if self.layout == "seq2seq":
            x = x + self.offset
            y = torch.stack([torch.full_like(answer, BOS), answer + self.offset, torch.full_like(answer, EOS)], 1)
        elif self.layout == "classify":
            x = torch.cat([torch.full_like(answer[:, None], BOS), x + self.offset], 1)
            y = answer
        perm = torch.randperm(n, generator=torch.Generator().manual_seed(self.config.split_seed))
        n_train = int(round(n * self.config.train_fraction))
        self.train_idx, self.val_idx = perm[:n_train], perm[n_train:]
        self.x, self.y = x, y
        self.ready = True

    def train_dataloader(self):
        i = self.train_idx
        return for_this_rank(
            ShuffledBatches(self.x[i], self.y[i], self.config.batch_size, self.config.seed, self._position),
            self.trainer,
        )

    def _position(self) -> tuple[int, int]:
        """(epoch, batches of it already done), from the trainer's step count, which a checkpoint restores.
        Exact when accumulate_grad_batches divides the epoch's batch count."""
        trainer = self.trainer
        if trainer is None:
            return 0, 0
        per_epoch = min(math.ceil(len(self.train_idx) / self.config.batch_size), trainer.num_training_batches)
        return divmod(self.batches_done(), per_epoch)

    def val_dataloader(self):
        i = self.val_idx
        return Batches(self.x[i], self.y[i], self.config.val_batch_size)
