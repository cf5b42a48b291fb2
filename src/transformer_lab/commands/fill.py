"""Fill the gaps of a text with a trained T5 (span corruption) model.

    python -m transformer_lab fill outputs/DATE/TIME text="To be, or not <X0> be: that is the <X1>"
    python -m transformer_lab fill outputs/DATE/TIME < gapped.txt > filled.txt   # a text a line

The first argument is a run directory (its checkpoints/best.ckpt, else last.ckpt) or a checkpoint file.
Mark each gap with a sentinel, <X0>, <X1>, ... in order, as the training examples show them. Every input
line gets one output line: the text with each gap filled (greedy decoding of up to max_len tokens; a gap
the model left empty is dropped). spans=true prints what the model put in each gap instead
(`<X0> ... <X1> ...`). A line the model cannot read gets an empty line and a warning on stderr.
"""

from __future__ import annotations

from transformer_lab.api.options import FILL, with_defaults
from transformer_lab.api.run import load
from transformer_lab.commands.cli import Command, run_command
from transformer_lab.commands.inference import input_lines, warn

DEFAULTS = {"ckpt": None, "text": None, **FILL.defaults, "device": "cpu"}


def filled(args: dict):
    args = with_defaults(args, DEFAULTS, FILL.minimums)
    lines = input_lines(args.pop("text"))
    yield from load(args.pop("ckpt"), args.pop("device"), "fill").fill(lines, warn, **args)


COMMAND = Command("fill", __doc__, DEFAULTS, filled, text=("text", "device"))


def main(argv: list[str] | None = None) -> None:
    run_command("fill", argv)


if __name__ == "__main__":
    main()
