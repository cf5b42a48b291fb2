"""Sample text from a trained language model (any decoder-only model trained on text).

    python -m transformer_lab sample outputs/DATE/TIME prompt="ROMEO:" max_new_tokens=500 num_samples=2 \\
        temperature=0.8 top_k=200 seed=0

The first argument is a run directory (its checkpoints/best.ckpt, else last.ckpt) or a checkpoint file.
"""

from __future__ import annotations

from transformer_lab.api.options import GENERATE, with_defaults
from transformer_lab.api.run import load
from transformer_lab.commands.cli import Command, run_command

DEFAULTS = {"ckpt": None, **GENERATE.defaults, "device": "cpu"}
MINIMUMS = GENERATE.minimums


def samples(args: dict):
    args = with_defaults(args, DEFAULTS, MINIMUMS, nullable=GENERATE.nullable)
    trained = load(args.pop("ckpt"), args.pop("device"), "sample")
    for i, text in enumerate(trained.generate(**args)):
        yield from (["-" * 40] if i else []) + [text]


COMMAND = Command("sample", __doc__, DEFAULTS, samples, text=("prompt", "device"), minimums=MINIMUMS)


def main(argv: list[str] | None = None) -> None:
    run_command("sample", argv)


if __name__ == "__main__":
    main()
