"""Sample text from a trained checkpoint.

    python -m transformer_lab.sample ckpt=outputs/DATE/TIME/checkpoints/best.ckpt prompt="ROMEO:" \
        max_new_tokens=500 num_samples=2 temperature=0.8 top_k=200 seed=0
"""

from __future__ import annotations

import sys

import torch
import yaml

from transformer_lab.checkpoint import load_model
from transformer_lab.data.shakespeare import CharTokenizer
from transformer_lab.errors import UserError, exit_on_user_error

DEFAULTS = {"ckpt": None, "prompt": "\n", "max_new_tokens": 500, "num_samples": 1, "temperature": 0.8,
            "top_k": 200, "seed": 0, "device": "cpu"}


def sample(args: dict) -> list[str]:
    unknown = set(args) - set(DEFAULTS)
    if unknown:
        raise UserError(f"unknown option(s) {sorted(unknown)}; options: {', '.join(DEFAULTS)}")
    args = {**DEFAULTS, **args}
    if not args["ckpt"]:
        raise UserError("ckpt=PATH is required (a .ckpt file written by train.py)")
    model, meta = load_model(args["ckpt"], map_location=args["device"])
    if model.layout != "lm":
        raise UserError(f"{args['ckpt']} holds a model={meta['config']['model']['name']} checkpoint; this command "
                        "samples from model=gpt (python -m transformer_lab.translate for encdec)")
    if not meta.get("vocab"):
        raise UserError(f"{args['ckpt']} was trained on data={meta['config']['data']['name']}, which has no "
                        "text vocabulary to sample from")
    tokenizer = CharTokenizer(meta["vocab"])
    try:
        prompt_ids = tokenizer.encode(str(args["prompt"]))
    except ValueError as e:
        raise UserError(f"prompt: {e}") from None
    idx = torch.tensor([prompt_ids] * args["num_samples"], device=args["device"])
    generator = torch.Generator(device=args["device"]).manual_seed(args["seed"])
    out = model.generate(idx, args["max_new_tokens"], args["temperature"], args["top_k"], generator=generator)
    return [tokenizer.decode(row.tolist()) for row in out]


def print_help(doc: str, defaults: dict) -> None:
    print(doc.strip())
    print("\noptions (key=value) and their defaults:")
    for key, value in defaults.items():
        print(f"  {key}=" + ("(required)" if value is None and key == "ckpt" else repr(value)))


def parse_args(argv: list[str], text_keys: tuple[str, ...] = ("prompt", "ckpt", "device")) -> dict:
    """key=value pairs; values are YAML scalars, except those of text_keys, which stay text."""
    args = {}
    for item in argv:
        key, sep, value = item.partition("=")
        if not sep:
            raise UserError(f"expected key=value, got {item!r}")
        args[key] = value if key in text_keys else yaml.safe_load(value)
    return args


def main(argv: list[str] | None = None) -> None:
    argv = argv if argv is not None else sys.argv[1:]
    if {"-h", "--help"} & set(argv):
        return print_help(__doc__, DEFAULTS)
    with exit_on_user_error():
        args = parse_args(argv)
        for i, text in enumerate(sample(args)):
            if i:
                print("-" * 40)
            print(text)


if __name__ == "__main__":
    main()
