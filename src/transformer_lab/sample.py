"""Sample text from a trained language model (any decoder-only model trained on text).

    python -m transformer_lab.sample outputs/DATE/TIME prompt="ROMEO:" max_new_tokens=500 num_samples=2 \
        temperature=0.8 top_k=200 seed=0

The first argument is a run directory (its checkpoints/best.ckpt, else last.ckpt) or a checkpoint file.
"""

from __future__ import annotations

import sys

import torch

from transformer_lab.errors import UserError, exit_on_user_error
from transformer_lab.inference import encoder, load, parse_args, print_help, with_defaults

DEFAULTS = {
    "ckpt": None,
    "prompt": "\n",
    "max_new_tokens": 500,
    "num_samples": 1,
    "temperature": 0.8,
    "top_k": 200,
    "seed": 0,
    "device": "cpu",
}


def sample(args: dict) -> list[str]:
    args = with_defaults(args, DEFAULTS)
    model, datamodule = load(args["ckpt"], "sample", args["device"])
    try:
        prompt_ids = encoder(datamodule)(str(args["prompt"]))
    except ValueError as e:
        raise UserError(f"prompt: {e}") from None
    idx = torch.tensor([prompt_ids] * args["num_samples"], device=args["device"])
    generator = torch.Generator(device=args["device"]).manual_seed(args["seed"])
    out = model.generate(idx, args["max_new_tokens"], args["temperature"], args["top_k"], generator=generator)
    return [datamodule.decode(row.tolist()) for row in out]


def main(argv: list[str] | None = None) -> None:
    argv = argv if argv is not None else sys.argv[1:]
    if {"-h", "--help"} & set(argv):
        return print_help(__doc__, DEFAULTS)
    with exit_on_user_error():
        for i, text in enumerate(sample(parse_args(argv, DEFAULTS, text_keys=("prompt", "ckpt", "device")))):
            if i:
                print("-" * 40)
            print(text)


if __name__ == "__main__":
    main()
