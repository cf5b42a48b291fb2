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

from collections.abc import Callable, Iterable, Iterator

import torch

from transformer_lab.batching.base import encoder
from transformer_lab.commands.cli import Command, run
from transformer_lab.commands.inference import batched, input_lines, load, warn, with_defaults
from transformer_lab.errors import ConfigError
from transformer_lab.tasks.decoding import Decoded, continue_prompts, decode

DEFAULTS = {
    "ckpt": None,
    "text": None,
    "beam_size": 4,
    "length_penalty": 0.6,
    "max_extra_len": 50,
    "batch_size": 64,
    "device": "cpu",
}
MINIMUMS = {"beam_size": 1, "length_penalty": 0, "max_extra_len": 1, "batch_size": 1}


def encoder_decoder_outputs(model, inputs: list[list[int]], args: dict, specials) -> Decoded:
    """Sources `ids <eos>`, padded into one batch."""
    src = torch.nn.utils.rnn.pad_sequence([torch.tensor(ids) for ids in inputs], batch_first=True)
    return decode(
        model,
        src.to(args["device"]),
        args["beam_size"],
        src.size(1) + args["max_extra_len"],
        specials.bos,
        specials.eos,
        args["length_penalty"],
    )


def prefix_lm_outputs(model, inputs: list[list[int]], args: dict, specials) -> Decoded:
    """Prompts `<bos> ids <sep>`, continued in batches of one prompt length (no padding inside a prompt)."""
    outputs: list[list[int]] = [[] for _ in inputs]
    truncated = 0
    for length in sorted({len(ids) for ids in inputs}):
        rows = [i for i, ids in enumerate(inputs) if len(ids) == length]
        prompts = torch.tensor([inputs[i] for i in rows], device=args["device"])
        decoded = continue_prompts(
            model, prompts, length + args["max_extra_len"], specials.eos, args["beam_size"], args["length_penalty"]
        )
        truncated += decoded.truncated
        for i, ids in zip(rows, decoded.outputs):
            outputs[i] = ids
    return Decoded(outputs, truncated)


OUTPUTS = {"encoder-decoder": encoder_decoder_outputs, "decoder": prefix_lm_outputs}  # by the model's architecture


def check_decoding(model, beam_size: int) -> None:
    """The model has what decoding calls (tasks' decoding_needs): greedy continuations of a decoder call
    generate(), beam search the key/value cache; an encoder-decoder's decoding both halves and the cache."""
    if type(model).architecture == "encoder-decoder":
        needs = ["encode", "decode", "new_cache"]
    else:
        needs = ["generate"] if beam_size == 1 else ["new_cache"]
    missing = [m for m in needs if not callable(getattr(model, m, None))]
    if missing:
        hint = (
            "; beam_size=1 decodes greedily with generate()"
            if missing == ["new_cache"] and hasattr(model, "generate")
            else ""
        )
        raise ConfigError(
            "beam_size" if hint else "ckpt",
            f"{type(model).__name__} has no {'(), '.join(missing)}() to translate with{hint}",
        )


def translate(args: dict, lines: Iterable[str], warn: Callable[[str], None] = warn) -> Iterator[str]:
    """One translation per line of `lines`, in order, batch by batch."""
    args = with_defaults(args, DEFAULTS, MINIMUMS)
    model, datamodule = load(args["ckpt"], "translate", args["device"])
    outputs_of = OUTPUTS[type(model).architecture]
    check_decoding(model, args["beam_size"])
    encode = encoder(datamodule.data)  # the dataset's own: a source sentence's ids
    limit = datamodule.data.max_tokens  # source tokens the model read in training
    cut: list[tuple[int, int]] = []  # (line number, tokens) of the lines cut to the limit
    truncated = 0
    for chunk in batched(lines, args["batch_size"]):
        outputs = [""] * len(chunk)
        todo: dict[int, list[int]] = {}  # position in the chunk -> the model's input
        for i, (number, line) in enumerate(chunk):
            if not line.strip():
                warn(f"line {number} is empty; its output line is empty")
                continue
            try:
                ids = encode(line)
            except ValueError as e:  # (what the dataset cannot encode, in its words)
                warn(f"line {number} {e}; its output line is empty")
                continue
            if limit is not None and len(ids) > limit:
                cut.append((number, len(ids)))
            todo[i] = datamodule.source_input(ids)
        # A batch that fails is tried line by line, so one bad line costs only its own output.
        groups = [list(todo)] if todo else []
        while groups:
            group = groups.pop(0)
            try:
                decoded = outputs_of(model, [todo[i] for i in group], args, datamodule.data.specials)
            except Exception as e:  # noqa: BLE001  (whatever it was, the other lines are still translated)
                if len(group) > 1:
                    groups = [[i] for i in group] + groups
                else:
                    warn(
                        f"line {chunk[group[0]][0]} could not be translated ({type(e).__name__}: {e}); "
                        "its output line is empty"
                    )
                continue
            truncated += decoded.truncated
            for i, ids in zip(group, decoded.outputs):
                outputs[i] = datamodule.decode(ids)
        yield from outputs
    if cut:
        numbers = ", ".join(str(n) for n, _ in cut[:10]) + (", ..." if len(cut) > 10 else "")
        warn(
            f"{len(cut)} line(s) longer than the model's {limit} source tokens were cut to them (the longest: "
            f"{max(n for _, n in cut)} tokens; line {numbers})"
        )
    if truncated:
        warn(f"{truncated} output(s) reached the model's length ({model.config.block_size} tokens) and stop there")


COMMAND = Command(
    "translate",
    __doc__,
    DEFAULTS,
    lambda args: translate(args, input_lines(args.pop("text", None))),
    text=("text", "device"),
)


def main(argv: list[str] | None = None) -> None:
    run("translate", argv)


if __name__ == "__main__":
    main()
