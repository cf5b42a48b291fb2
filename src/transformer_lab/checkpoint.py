"""Checkpoints: written atomically, read safely (`weights_only=True`), and self-describing: each carries
the resolved config and the vocabulary, so sampling from one needs no other file."""

from __future__ import annotations

import pickle
import zipfile
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from omegaconf import DictConfig, OmegaConf

from transformer_lab.atomic import atomic_write
from transformer_lab.errors import ConfigError, UserError

# Model keys a resumed run may change; every other one decides the architecture.
CHANGEABLE_KEYS = ("dropout", "compile")


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's own save goes through a temporary file that may sit on another filesystem, where the
    final move is a copy; this one renames within the checkpoint's folder."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options=None) -> None:
        with atomic_write(path) as f:
            torch.save(checkpoint, f)


def read_checkpoint(path: str | Path) -> dict:
    """The checkpoint as plain data, loaded with weights_only=True; a clear error for anything else."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"no checkpoint file at {path}")
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        raise UserError(f"{path} holds more than tensors and plain data; refusing to load it "
                        f"(weights_only=True): {str(e).splitlines()[0]}") from None
    except (RuntimeError, EOFError, zipfile.BadZipFile, OSError, ValueError) as e:
        raise UserError(f"{path} is not a readable checkpoint (truncated or corrupt: "
                        f"{str(e).splitlines()[0]})") from None
    meta = checkpoint.get("transformer_lab") if isinstance(checkpoint, dict) else None
    if not meta or "state_dict" not in checkpoint:
        raise UserError(f"{path} was not written by transformer-lab's train.py (no config inside)")
    return checkpoint


def check_compatible(checkpoint: dict, model_cfg: dict, data_name: str, path: str) -> None:
    """A run can resume only from a checkpoint of the same architecture on the same data."""
    saved = checkpoint["transformer_lab"]["config"]
    if saved["data"]["name"] != data_name:
        raise ConfigError("ckpt_path", f"{path} was trained on data={saved['data']['name']}, this run has "
                                       f"data={data_name}")
    for key in sorted(set(saved["model"]) | set(model_cfg)):
        if key not in CHANGEABLE_KEYS and saved["model"].get(key) != model_cfg.get(key):
            raise ConfigError("ckpt_path", f"{path} holds a model with model.{key}={saved['model'].get(key)}, "
                                           f"this run has model.{key}={model_cfg.get(key)}")


def check_same_parameters(path: str, task: torch.nn.Module) -> None:
    """Resuming restores the optimizer's state parameter by parameter: the checkpoint must name exactly
    this code's parameters. (Checkpoints from before the models' shared layers name theirs differently:
    load_model still reads their weights, but a run cannot resume from them.)"""
    saved, ours = set(read_checkpoint(path)["state_dict"]), set(task.state_dict())
    if saved != ours:
        theirs = ", ".join(sorted(saved - ours)[:3])
        raise ConfigError("ckpt_path", f"{path} names its parameters differently from this code ({theirs}, ...): "
                                       "it was written by an older transformer-lab. Its weights still load for "
                                       "sampling and translation, but training cannot resume from it")


def load_model(path: str | Path, map_location: str = "cpu") -> tuple[torch.nn.Module, dict]:
    """The model in eval mode, and the checkpoint's metadata: {"config", "model_args", "vocab" or "tokenizer"}."""
    from transformer_lab.factory import model_from_checkpoint

    checkpoint = read_checkpoint(path)
    meta = checkpoint["transformer_lab"]
    state = {k.removeprefix("model."): v for k, v in checkpoint["state_dict"].items() if k.startswith("model.")}
    try:
        model = model_from_checkpoint(meta, state)
    except ConfigError as e:
        raise UserError(f"{path}: {str(e).split(': ', 1)[1]}") from None
    return model.to(map_location).eval(), meta


def resolve_ckpt_path(cfg: DictConfig) -> str | None:
    """The checkpoint to resume from, checked now: readable, and of this run's model and data. (Lightning
    reads the file again to restore it; checking first is what keeps a bad file's error one line.)"""
    if cfg.ckpt_path is None:
        return None
    path = Path(cfg.ckpt_path)
    if cfg.ckpt_path == "last":
        path = Path(cfg.paths.output_dir) / "checkpoints" / "last.ckpt"
        if not path.exists():
            raise ConfigError("ckpt_path", f"`last` means {path}, which does not exist; point hydra.run.dir at "
                                           "the directory of the run to resume")
    elif not path.is_file():
        raise ConfigError("ckpt_path", f"no checkpoint file at {path}")
    try:
        checkpoint = read_checkpoint(path)
    except UserError as e:
        raise ConfigError("ckpt_path", str(e)) from None
    check_compatible(checkpoint, OmegaConf.to_container(cfg.model, resolve=True, enum_to_str=True), cfg.data.name,
                     str(path))
    return str(path)
