"""Modular arithmetic worked out in plain Python, and a modular run's accuracy recomputed from it."""

import torch

from transformer_lab.batching.equations import AnswerClass, AnswerSequence, AnswerToken
from transformer_lab.data.modular import ModularData
from transformer_lab.data.tokens import BOS
from transformer_lab.run.build import load_model


def solve(equation: str, p: int) -> int:
    """`a op b op c ... =` evaluated left to right in plain Python (division: the modular inverse)."""
    symbols = equation.split()
    assert symbols[-1] == "="
    value = int(symbols[0])
    for op, operand in zip(symbols[1:-1:2], symbols[2:-1:2]):
        b = int(operand)
        if op == "/":
            b = pow(b, -1, p)  # ValueError for a zero divisor
        value = (value - b if op == "-" else value + b if op == "+" else value * b) % p
    return value


@torch.no_grad()
def recomputed_val_accuracy(run_dir):
    """The accuracy of a modular run's last weights on its validation equations, each answer worked out
    here from the equation's text (solve, above), not taken from the data module's targets."""
    model, meta = load_model(run_dir / "checkpoints" / "last.ckpt")
    data = meta["config"]["data"]
    batches = {"GPT": AnswerToken, "EncDec": AnswerSequence, "Bert": AnswerClass}[type(model).__name__]
    names = ("p", "op", "terms", "train_fraction", "split_seed", "max_examples")
    dm = batches(ModularData(**{k: data[k] for k in names}), batch_size=100_000)
    dm.setup()
    x, _ = next(iter(dm.val_dataloader()))
    if batches is AnswerToken:  # the answer is the prediction at "="
        guesses = model(x)[:, -1].argmax(-1).tolist()
    elif batches is AnswerSequence:  # the first token after <bos>, as a number
        guesses = [int(dm.decode([i]) or -1) for i in model(x, torch.full_like(x[:, :1], BOS))[:, 0].argmax(-1)]
    else:
        guesses = model(x).argmax(-1).tolist()
    answers = [solve(dm.decode(row), data["p"]) for row in x.tolist()]
    return sum(g == a for g, a in zip(guesses, answers)) / len(answers)
