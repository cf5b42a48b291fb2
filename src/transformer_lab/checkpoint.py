"""Rebuild a trained model from a checkpoint alone (it carries the resolved config and vocabulary)."""

from __future__ import annotations

from pathlib import Path

import torch

from transformer_lab.errors import UserError
from transformer_lab.models import GPT, GPTConfig


def load_model(path: str | Path, map_location: str = "cpu") -> tuple[GPT, dict]:
    """The model in eval mode, and the checkpoint's metadata: {"config": ..., "vocab": ...}."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"no checkpoint file at {path}")
    try:
        checkpoint = torch.load(path, map_location=map_location, weights_only=False)
    except Exception as e:  # a truncated or foreign file
        raise UserError(f"{path} is not a readable checkpoint ({e.__class__.__name__}: {e})") from None
    meta = checkpoint.get("transformer_lab") if isinstance(checkpoint, dict) else None
    if not meta:
        raise UserError(f"{path} was not written by transformer-lab's train.py (no config inside)")
    config = meta["config"]
    settings = dict(config["model"])
    name = settings.pop("name")
    if name != "gpt":
        raise UserError(f"{path} holds a model={name} checkpoint; this command samples from model=gpt")
    state = {k.removeprefix("model."): v for k, v in checkpoint["state_dict"].items() if k.startswith("model.")}
    vocab_size, block_size = state["wte.weight"].shape[0], settings.pop("block_size")
    if block_size is None:
        block_size = state["wpe.weight"].shape[0] if "wpe.weight" in state else config["data"]["block_size"]
    model = GPT(GPTConfig(vocab_size=vocab_size, block_size=block_size, **settings))
    model.load_state_dict(state)
    return model.eval(), meta
