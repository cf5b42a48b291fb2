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

from collections.abc import Callable, Iterable, Iterator

import torch

from transformer_lab.batching.base import encoder
from transformer_lab.batching.span_corruption import fill_spans
from transformer_lab.commands.cli import Command, run
from transformer_lab.commands.inference import batched, input_lines, load, warn, with_defaults
from transformer_lab.tasks.decoding import fill_spans_greedy

DEFAULTS = {"ckpt": None, "text": None, "max_len": 100, "spans": False, "batch_size": 64, "device": "cpu"}
MINIMUMS = {"max_len": 1, "batch_size": 1}


def fill(args: dict, lines: Iterable[str], warn: Callable[[str], None] = warn) -> Iterator[str]:
    """One filled text per line of `lines`, in order."""
    args = with_defaults(args, DEFAULTS, MINIMUMS)
    model, datamodule = load(args["ckpt"], "fill", args["device"])
    encode, first_sentinel = encoder(datamodule), datamodule.first_sentinel
    for chunk in batched(lines, args["batch_size"]):
        outputs = [""] * len(chunk)
        todo: dict[int, list[int]] = {}
        for i, (number, line) in enumerate(chunk):
            try:
                todo[i] = encode(line)
            except ValueError as e:
                warn(f"line {number}: {e}; its output line is empty")
                continue
            if not any(t >= first_sentinel for t in todo[i]):
                warn(f"line {number} has no gap (<X0>, <X1>, ...) to fill")
        if todo:
            inputs = torch.nn.utils.rnn.pad_sequence(
                [torch.tensor(ids) for ids in todo.values()], batch_first=True, padding_value=datamodule.pad_id
            ).to(args["device"])
            filled = fill_spans_greedy(model, inputs, args["max_len"], datamodule.pad_id, datamodule.eos_id)
            for i, spans in zip(todo, filled):
                spans = spans[: spans.index(datamodule.eos_id) + 1] if datamodule.eos_id in spans else spans
                ids = spans if args["spans"] else fill_spans(todo[i], spans, first_sentinel, datamodule.eos_id)
                outputs[i] = datamodule.decode(ids)
        yield from outputs


COMMAND = Command(
    "fill", __doc__, DEFAULTS, lambda args: fill(args, input_lines(args.pop("text", None))), text=("text", "device")
)


def main(argv: list[str] | None = None) -> None:
    run("fill", argv)


if __name__ == "__main__":
    main()
