"""Translate with a trained encoder-decoder checkpoint.

    python -m transformer_lab.translate ckpt=outputs/DATE/TIME/checkpoints/best.ckpt \\
        text="Ein Mann fährt Fahrrad." [beam_size=4 length_penalty=0.6 max_extra_len=50]
    python -m transformer_lab.translate ckpt=... < sentences.txt > translations.txt   # one sentence a line

Every input line gets exactly one output line, written as soon as its batch is translated. An input the
model cannot take as it is still gets its line, and a warning on stderr says why: an empty line, or one
with no character the vocabulary knows, gives an empty line; a line longer than the model's length is
cut to it; an output that reaches the model's length stops there.
"""

from __future__ import annotations

import itertools
import sys
from typing import Callable, Iterable, Iterator

import torch
from tokenizers import Tokenizer

from transformer_lab.checkpoint import load_model
from transformer_lab.data.translation import BOS, EOS, UNK
from transformer_lab.errors import UserError, exit_on_user_error
from transformer_lab.sample import parse_args, print_help
from transformer_lab.tasks.decoding import decode

DEFAULTS = {"ckpt": None, "text": None, "beam_size": 4, "length_penalty": 0.6, "max_extra_len": 50,
            "batch_size": 64, "device": "cpu"}


def warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr, flush=True)


def translate(args: dict, lines: Iterable[str], warn: Callable[[str], None] = warn) -> Iterator[str]:
    """One translation per line of `lines`, in order, batch by batch."""
    unknown = set(args) - set(DEFAULTS)
    if unknown:
        raise UserError(f"unknown option(s) {sorted(unknown)}; options: {', '.join(DEFAULTS)}")
    args = {**DEFAULTS, **args}
    if not args["ckpt"]:
        raise UserError("ckpt=PATH is required (a .ckpt file written by train.py with model=encdec)")
    model, meta = load_model(args["ckpt"], map_location=args["device"])
    if model.layout != "seq2seq" or not meta.get("tokenizer"):
        raise UserError(f"{args['ckpt']} holds a model={meta['config']['model']['name']} "
                        f"data={meta['config']['data']['name']} checkpoint; this command translates with "
                        "model=encdec data=translation checkpoints")
    tokenizer = Tokenizer.from_str(meta["tokenizer"])
    source_tokenizer = Tokenizer.from_str(meta["source_tokenizer"]) if meta.get("source_tokenizer") else tokenizer
    limit = meta["config"]["data"]["max_length"] - 2  # source tokens before <eos>, as in training
    cut: list[tuple[int, int]] = []  # (line number, tokens) of the lines cut to the limit
    truncated = 0

    def run(batch: list[list[int]]):
        src = torch.nn.utils.rnn.pad_sequence([torch.tensor(ids) for ids in batch], batch_first=True)
        return decode(model, src.to(args["device"]), args["beam_size"], src.size(1) + args["max_extra_len"], BOS,
                      EOS, args["length_penalty"])

    numbered = enumerate(lines, start=1)
    while chunk := list(itertools.islice(numbered, args["batch_size"])):
        outputs = [""] * len(chunk)
        todo: dict[int, list[int]] = {}  # position in the chunk -> source ids
        for i, ((number, line), encoding) in enumerate(zip(chunk, source_tokenizer.encode_batch([text for _, text in chunk]))):
            if not line.strip():
                warn(f"line {number} is empty; its output line is empty")
            elif not source_tokenizer.decode([t for t in encoding.ids if t != UNK]).strip():
                warn(f"line {number} has no character the model's vocabulary knows; its output line is empty")
            else:
                if len(encoding.ids) > limit:
                    cut.append((number, len(encoding.ids)))
                todo[i] = encoding.ids[:limit] + [EOS]
        # A batch that fails is tried line by line, so one bad line costs only its own output.
        groups = [list(todo)] if todo else []
        while groups:
            group = groups.pop(0)
            try:
                decoded = run([todo[i] for i in group])
            except Exception as e:  # noqa: BLE001  (whatever it was, the other lines are still translated)
                if len(group) > 1:
                    groups = [[i] for i in group] + groups
                else:
                    warn(f"line {chunk[group[0]][0]} could not be translated ({type(e).__name__}: {e}); "
                         "its output line is empty")
                continue
            truncated += decoded.truncated
            for i, ids in zip(group, decoded.outputs):
                outputs[i] = tokenizer.decode([t for t in ids if t >= UNK], skip_special_tokens=False)
        yield from outputs
    if cut:
        numbers = ", ".join(str(n) for n, _ in cut[:10]) + (", ..." if len(cut) > 10 else "")
        warn(f"{len(cut)} line(s) longer than the model's {limit} source tokens were cut to them (the longest: "
             f"{max(n for _, n in cut)} tokens; line {numbers})")
    if truncated:
        warn(f"{truncated} output(s) reached the model's length ({model.config.block_size} tokens) and stop there")


def main(argv: list[str] | None = None) -> None:
    argv = argv if argv is not None else sys.argv[1:]
    if {"-h", "--help"} & set(argv):
        return print_help(__doc__, DEFAULTS)
    with exit_on_user_error():
        args = parse_args(argv, text_keys=("ckpt", "text", "device"))
        text = args.pop("text", None)
        lines = [text] if text is not None else (line.rstrip("\r\n") for line in sys.stdin)
        for line in translate(args, lines):
            print(line, flush=True)


if __name__ == "__main__":
    main()
