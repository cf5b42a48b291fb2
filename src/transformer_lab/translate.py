"""Translate with a trained encoder-decoder checkpoint.

    python -m transformer_lab.translate ckpt=outputs/DATE/TIME/checkpoints/best.ckpt \\
        text="Ein Mann fährt Fahrrad." [beam_size=4 length_penalty=0.6 max_extra_len=50]
    python -m transformer_lab.translate ckpt=... < sentences.txt     # one sentence a line
"""

from __future__ import annotations

import sys

import torch
from tokenizers import Tokenizer

from transformer_lab.checkpoint import load_model
from transformer_lab.data.translation import BOS, EOS, UNK
from transformer_lab.errors import UserError, exit_on_user_error
from transformer_lab.sample import parse_args
from transformer_lab.tasks.decoding import decode

DEFAULTS = {"ckpt": None, "text": None, "beam_size": 4, "length_penalty": 0.6, "max_extra_len": 50,
            "batch_size": 64, "device": "cpu"}


def translate(args: dict, sentences: list[str]) -> list[str]:
    unknown = set(args) - set(DEFAULTS)
    if unknown:
        raise UserError(f"unknown option(s) {sorted(unknown)}; options: {', '.join(DEFAULTS)}")
    args = {**DEFAULTS, **args}
    if not args["ckpt"]:
        raise UserError("ckpt=PATH is required (a .ckpt file written by train.py with model=encdec)")
    model, meta = load_model(args["ckpt"], map_location=args["device"])
    if "tokenizer" not in meta or meta["config"]["model"]["name"] != "encdec":
        raise UserError(f"{args['ckpt']} holds a model={meta['config']['model']['name']} "
                        f"data={meta['config']['data']['name']} checkpoint; this command translates with "
                        "model=encdec data=translation checkpoints")
    tokenizer = Tokenizer.from_str(meta["tokenizer"])
    source_tokenizer = Tokenizer.from_str(meta["source_tokenizer"]) if meta.get("source_tokenizer") else tokenizer
    limit = meta["config"]["data"]["max_length"] - 2
    outputs = []
    for start in range(0, len(sentences), args["batch_size"]):
        encoded = source_tokenizer.encode_batch(sentences[start:start + args["batch_size"]])
        batch = [torch.tensor(e.ids[:limit] + [EOS]) for e in encoded]
        src = torch.nn.utils.rnn.pad_sequence(batch, batch_first=True).to(args["device"])
        for ids in decode(model, src, args["beam_size"], src.size(1) + args["max_extra_len"], BOS, EOS,
                               args["length_penalty"]):
            outputs.append(tokenizer.decode([i for i in ids if i >= UNK], skip_special_tokens=False))
    return outputs


def main(argv: list[str] | None = None) -> None:
    with exit_on_user_error():
        args = parse_args(argv if argv is not None else sys.argv[1:], text_keys=("ckpt", "text", "device"))
        text = args.pop("text", None)
        sentences = [text] if text is not None else [line.rstrip("\n") for line in sys.stdin if line.strip()]
        for line in translate(args, sentences):
            print(line)


if __name__ == "__main__":
    main()
