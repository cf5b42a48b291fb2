"""Classify with a trained BERT-style classifier: one input a line, its class and probability.

    python -m transformer_lab classify outputs/DATE/TIME text="3 + 5 ="
    python -m transformer_lab classify outputs/DATE/TIME top=3 < equations.txt

The first argument is a run directory (its checkpoints/best.ckpt, else last.ckpt) or a checkpoint file.
Every input line gets one output line, tab-separated: the input, then the `top` most likely classes, each
with its probability (`3 + 5 =<TAB>8<TAB>0.974`). A line the model cannot read gets the input alone and
a warning on stderr, as does an empty line; a line as long as the model reads is classified on what fits, with
a warning. A `text<TAB>label` line (a data=labelled file) is classified on its text alone, and its output line
holds the text; `python -m transformer_lab evaluate RUN data.path=FILE` scores such a file.
"""

from __future__ import annotations

from collections import deque

from transformer_lab.api.options import CLASSIFY, with_defaults
from transformer_lab.api.run import load
from transformer_lab.commands.cli import Command, run_command
from transformer_lab.commands.inference import input_lines, warn

DEFAULTS = {"ckpt": None, "text": None, **CLASSIFY.defaults, "device": "cpu"}


def lines(args: dict):
    args = with_defaults(args, DEFAULTS, CLASSIFY.minimums)
    given = input_lines(args.pop("text"))
    trained = load(args.pop("ckpt"), args.pop("device"), "classify")
    texts: deque[str] = deque()  # (each input's text, as the model read it: a labelled line's label is not)

    def read():
        for line in given:
            texts.append(line.split("\t", 1)[0])
            yield line

    for ranked in trained.classify(read(), warn, **args):
        yield "\t".join([texts.popleft(), *(f"{c}\t{p:.3f}" for c, p in ranked)])


COMMAND = Command("classify", __doc__, DEFAULTS, lines, text=("text", "device"))


def main(argv: list[str] | None = None) -> None:
    run_command("classify", argv)


if __name__ == "__main__":
    main()
