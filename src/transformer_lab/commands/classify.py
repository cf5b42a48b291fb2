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

from collections.abc import Callable, Iterable, Iterator

import torch

from transformer_lab.batching.base import encoder
from transformer_lab.commands.cli import Command, run
from transformer_lab.commands.inference import batched, input_lines, load, warn, with_defaults

DEFAULTS = {"ckpt": None, "text": None, "top": 1, "batch_size": 256, "device": "cpu"}
MINIMUMS = {"top": 1, "batch_size": 1}


def classify(
    args: dict, lines: Iterable[str], warn: Callable[[str], None] = warn, names: bool = False
) -> Iterator[tuple[str, list]]:
    """(line, [(class, probability), ...] best first) per line of `lines`, in order; a class is its index,
    or with `names` its text (an equation's answer, a label)."""
    args = with_defaults(args, DEFAULTS, MINIMUMS)
    model, datamodule = load(args["ckpt"], "classify", args["device"])
    encode, top = encoder(datamodule), min(args["top"], model.config.n_classes)
    longest = datamodule.sequence_length if datamodule.form == "labelled" else None  # (texts are cut to it)
    for chunk in batched(lines, args["batch_size"]):
        texts = [line.split("\t", 1)[0] for _, line in chunk]  # (a labelled file's label is not the model's input)
        outputs: list[tuple[str, list]] = [(text, []) for text in texts]
        todo: dict[int, list[int]] = {}
        for i, ((number, line), text) in enumerate(zip(chunk, texts)):
            if not text.strip():
                warn(f"line {number} is empty; its output line holds no class")
                continue
            if line.count("\t") > 1:
                warn(f"line {number} has {line.count(chr(9)) + 1} tab-separated fields: its first is classified")
            try:
                todo[i] = encode(text)
            except ValueError as e:
                warn(f"line {number}: {e}")
                continue
            if longest is not None and len(todo[i]) >= longest:
                warn(f"line {number} reaches the model's length ({longest} tokens): what lies beyond was cut")
        if todo:
            inputs = torch.nn.utils.rnn.pad_sequence(
                [torch.tensor(ids) for ids in todo.values()], batch_first=True, padding_value=model.config.pad_id
            ).to(args["device"])
            with torch.no_grad():
                probabilities, classes = model(inputs).float().softmax(-1).topk(top, dim=-1)
            for i, p, c in zip(todo, probabilities.tolist(), classes.tolist()):
                outputs[i] = (outputs[i][0], list(zip(map(datamodule.answer_text, c) if names else c, p)))
        yield from outputs


def lines(args: dict):
    for line, ranked in classify(args, input_lines(args.pop("text", None)), names=True):
        yield "\t".join([line, *(f"{c}\t{p:.3f}" for c, p in ranked)])


COMMAND = Command("classify", __doc__, DEFAULTS, lines, text=("text", "device"))


def main(argv: list[str] | None = None) -> None:
    run("classify", argv)


if __name__ == "__main__":
    main()
