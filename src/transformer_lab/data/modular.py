"""Modular arithmetic, generated: `a op b = c (mod p)` for every pair, split into train and validation.

Token ids: numbers 0..p-1 are themselves, then one id per operator and one for "=". Two terms are
[a, op, b, =] with the answer c; more terms repeat "op x". How a model reads them (the answer after "=",
a target sequence, a class) is the task's: batching/equations.py.
"""

from __future__ import annotations

import itertools
import re

import torch

from transformer_lab.data.base import DataSource, Equations
from transformer_lab.data.configs import OPS, ModularConfig


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


class ModularData(DataSource):
    provides = ("equations",)
    length_key = "terms"

    config_class = ModularConfig

    def __init__(self, **settings):  # settings: ModularConfig's
        super().__init__(**settings)
        p, op = self.config.p, self.config.op
        self.op_id = p + OPS.index(op)
        self.eq_id = p + len(OPS)
        self.n_answers = p
        self.ready = False

    @property
    def vocab_size(self) -> int:
        return self.config.p + len(OPS) + 1

    @property
    def sequence_length(self) -> int:
        return 2 * self.config.terms  # a op b ... =

    def decode(self, ids) -> str:
        symbols = [str(i) for i in range(self.config.p)] + OPS + ["="]
        return " ".join(symbols[int(i)] for i in ids)

    def encode(self, text: str) -> list[int]:
        """An equation as ids: `3 + 5 =` (the "=" may be left out)."""
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
        return [int(symbol) if i % 2 == 0 else self.op_id for i, symbol in enumerate(symbols)] + [self.eq_id]

    def setup(self, stage: str | None = None) -> None:
        if self.ready:
            return
        operands, answers = make_equations(
            self.config.p, self.config.op, self.config.terms, self.config.max_examples, self.config.split_seed
        )
        n = len(answers)
        tokens = torch.full((n, 2 * self.config.terms), self.op_id, dtype=torch.long)
        tokens[:, 0::2] = operands
        tokens[:, -1] = self.eq_id
        perm = torch.randperm(n, generator=torch.Generator().manual_seed(self.config.split_seed))
        n_train = int(round(n * self.config.train_fraction))
        self.split = Equations(tokens, answers, perm[:n_train], perm[n_train:])
        self.ready = True

    def equations(self) -> Equations:
        return self.split
