"""Translate with a trained translation model: an encoder-decoder, or a decoder-only model trained on
translation pairs (a prefix LM, `<bos> source <sep>` continued up to <eos>).

    python -m transformer_lab translate outputs/DATE/TIME text="Ein Mann fährt Fahrrad." \\
        [beam_size=4 length_penalty=0.6 max_extra_len=50]
    python -m transformer_lab translate outputs/DATE/TIME < sentences.txt > translations.txt   # a sentence a line

The first argument is a run directory (its checkpoints/best.ckpt, else last.ckpt) or a checkpoint file.
Every input line gets exactly one output line, written as soon as its batch is translated. An input the
model cannot take as it is still gets its line, and a warning on stderr says why: an empty line, or one
with no character the vocabulary knows, gives an empty line; a line longer than the model's length is
cut to it; an output that reaches the model's length stops there.
"""

from __future__ import annotations

from transformer_lab.api.options import TRANSLATE, with_defaults
from transformer_lab.api.run import load
from transformer_lab.commands.cli import Command, run_command
from transformer_lab.commands.inference import input_lines, warn

DEFAULTS = {"ckpt": None, "text": None, **TRANSLATE.defaults, "device": "cpu"}


def translations(args: dict):
    args = with_defaults(args, DEFAULTS, TRANSLATE.minimums)
    lines = input_lines(args.pop("text"))
    yield from load(args.pop("ckpt"), args.pop("device"), "translate").translate(lines, warn, **args)


COMMAND = Command("translate", __doc__, DEFAULTS, translations, text=("text", "device"))


def main(argv: list[str] | None = None) -> None:
    run_command("translate", argv)


if __name__ == "__main__":
    main()
