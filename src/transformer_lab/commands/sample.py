"""Sample text from a trained language model (any decoder-only model trained on text).

    python -m transformer_lab sample outputs/DATE/TIME prompt="ROMEO:" max_new_tokens=500 num_samples=2 \\
        temperature=0.8 top_k=200 seed=0

The first argument is a run directory (its checkpoints/best.ckpt, else last.ckpt) or a checkpoint file.
"""

from __future__ import annotations

import torch

from transformer_lab.batching.base import encoder
from transformer_lab.commands.cli import Command, run
from transformer_lab.commands.inference import load, with_defaults
from transformer_lab.errors import UserError

DEFAULTS = {
    "ckpt": None,
    "prompt": "\n",
    "max_new_tokens": 500,
    "num_samples": 1,
    "temperature": 0.8,
    "top_k": 200,
    "seed": 0,
    "device": "cpu",
}
MINIMUMS = {"max_new_tokens": 1, "num_samples": 1, "temperature": 0, "top_k": 1, "seed": 0}


def sample(args: dict) -> list[str]:
    args = with_defaults(args, DEFAULTS, MINIMUMS, nullable=("top_k",))
    model, datamodule = load(args["ckpt"], "sample", args["device"])
    if not callable(getattr(model, "generate", None)):
        raise UserError(f"{type(model).__qualname__} has no generate(): `sample` continues a prompt with it")
    try:
        prompt_ids = encoder(datamodule)(str(args["prompt"]))
    except ValueError as e:
        raise UserError(f"prompt: {e}") from None
    idx = torch.tensor([prompt_ids] * args["num_samples"], device=args["device"])
    generator = torch.Generator(device=args["device"]).manual_seed(args["seed"])
    out = model.generate(idx, args["max_new_tokens"], args["temperature"], args["top_k"], generator=generator)
    return [datamodule.decode(row.tolist()) for row in out]


def samples(args: dict):
    for i, text in enumerate(sample(args)):
        yield from (["-" * 40] if i else []) + [text]


COMMAND = Command("sample", __doc__, DEFAULTS, samples, text=("prompt", "device"), minimums=MINIMUMS)


def main(argv: list[str] | None = None) -> None:
    run("sample", argv)


if __name__ == "__main__":
    main()
