"""Checkpoints: written atomically, read safely (`weights_only=True`), and self-describing: each carries
the resolved config and the vocabulary, so sampling from one needs no other file."""

from __future__ import annotations

import os
import pickle
import zipfile
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from omegaconf import DictConfig, OmegaConf

from transformer_lab.errors import ConfigError, UserError, first_line
from transformer_lab.store.atomic import atomic_write
from transformer_lab.store.files import existing_file
from transformer_lab.store.rundir import LOCK, OVERWRITTEN, recover

# Model keys a resumed run may change; every other one decides the architecture.
CHANGEABLE_KEYS = ("dropout", "compile")


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's own save goes through a temporary file that may sit on another filesystem, where the
    final move is a copy; this one renames within the checkpoint's folder."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options=None) -> None:
        with atomic_write(path) as f:
            torch.save(checkpoint, f)


# Classes a checkpoint's config names that have moved since it was written: read as their new paths, so a run
# trained before the package took its folders (run/, store/, config/, commands/) resumes and loads as it was.
MOVED_CLASSES = {
    "transformer_lab.csv_logger.CSVLogger": "transformer_lab.run.loggers.CSVLogger",
    "transformer_lab.wandb_logger.WandbLogger": "transformer_lab.run.loggers.WandbLogger",
}


def moved_classes(config):
    """A stored config (nested dicts and lists) with every `_target_` of MOVED_CLASSES at its new path."""
    if isinstance(config, dict):
        return {
            k: MOVED_CLASSES.get(v, v) if k == "_target_" and isinstance(v, str) else moved_classes(v)
            for k, v in config.items()
        }
    if isinstance(config, list):
        return [moved_classes(v) for v in config]
    return config


def read_checkpoint(path: str | Path, mmap: bool = False) -> dict:
    """The checkpoint as plain data, loaded with weights_only=True; a clear error for anything else.
    mmap: the tensors stay in the file until read (for a look at the metadata and shapes only)."""
    path = existing_file(path)
    with open(path, "rb") as f:
        start = f.read(4)
    if start and not b"PK\x03\x04".startswith(start):  # (torch.save writes zip archives: this is something else)
        raise UserError(
            f"{path} is not a checkpoint (a .ckpt that train.py wrote): give a run directory or its checkpoints/*.ckpt"
        )
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except pickle.UnpicklingError as e:
        raise UserError(
            f"{path} holds more than tensors and plain data; refusing to load it (weights_only=True): {first_line(e)}"
        ) from None
    except (RuntimeError, EOFError, zipfile.BadZipFile, OSError, ValueError) as e:
        raise UserError(f"{path} is not a readable checkpoint (truncated or corrupt: {first_line(e)})") from None
    meta = checkpoint.get("transformer_lab") if isinstance(checkpoint, dict) else None
    if not meta or "state_dict" not in checkpoint:
        raise UserError(f"{path} was not written by transformer-lab's train.py (no config inside)")
    if "batches" not in ((meta.get("config") or {}).get("task") or {}):
        raise UserError(
            f"{path} was written before the objective became the `task` config group, which makes the "
            "batches from the data's raw splits (model.layout, and the top-level sample/decode/span/mlm sections, "
            "are task=NAME and task.* now): train it again, or use the transformer-lab it was written with"
        )
    meta["config"] = moved_classes(meta["config"])
    return checkpoint


def flat(section: dict, prefix: str = "") -> dict:
    """{dotted.key: value} of a nested dict's leaves."""
    out = {}
    for key, value in section.items():
        if isinstance(value, dict):
            out.update(flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def changed_settings(saved_config: dict, cfg: DictConfig, sections: tuple[str, ...] = ("model", "data")) -> dict:
    """{key: (the checkpoint's run's value, this run's)} for every setting of `sections` that differs."""
    ours = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
    changed = {}
    for section in sections:
        saved, now = (
            flat(saved_config.get(section) or {}, f"{section}."),
            flat(ours.get(section) or {}, f"{section}."),
        )
        changed.update(
            {
                key: (saved.get(key), now.get(key))
                for key in sorted(set(saved) | set(now))
                if saved.get(key) != now.get(key)
            }
        )
    return changed


def _listed(changed: dict) -> str:
    return ", ".join(f"{key}={new} (the checkpoint's: {old})" for key, (old, new) in changed.items())


def check_compatible(saved_config: dict, cfg: DictConfig, path: str) -> None:
    """A run resumes only a checkpoint of the same architecture on the same data: every model setting
    that differs is named at once (those a resumed run may change, CHANGEABLE_KEYS, aside)."""
    if saved_config["data"]["name"] != cfg.data.name:
        raise ConfigError(
            "ckpt_path",
            f"{path} was trained with data={saved_config['data']['name']}, this run has data={cfg.data.name}",
        )
    changed = {
        key: values
        for key, values in changed_settings(saved_config, cfg, ("model",)).items()
        if key.removeprefix("model.") not in CHANGEABLE_KEYS
    }
    if changed:
        raise ConfigError(
            "ckpt_path",
            f"{path} holds another model than this run's: {_listed(changed)}. Resume "
            "without changing them (a resumed run starts from its checkpoint's settings)",
        )


def misfits(path: str | Path, saved: dict, ours: dict, changed: dict | None = None, prefix: str = "") -> str | None:
    """The one message for a checkpoint whose tensors do not fit the model as its code builds it now (a model
    class of the user's own changed since, or a setting that decides a shape): every tensor missing from the
    checkpoint, every one unexpected in it, every shape that differs (both shapes), the `changed` settings
    ({key: (the checkpoint's run's value, now)}), and what works instead. None where everything fits.
    `saved`, `ours`: {name: shape}; `prefix` (the task's `model.`) is left out of the names shown."""
    missing = sorted(key.removeprefix(prefix) for key in set(ours) - set(saved))
    unexpected = sorted(key.removeprefix(prefix) for key in set(saved) - set(ours))
    shapes = sorted(
        f"{key.removeprefix(prefix)} {list(saved[key])} in the checkpoint, {list(shape)} in the model"
        for key, shape in ours.items()
        if key in saved and tuple(saved[key]) != tuple(shape)
    )
    if not (missing or unexpected or shapes):
        return None
    parts = [
        f"{what} ({len(names)}): {', '.join(names)}"
        for what, names in (
            ("missing from the checkpoint", missing),
            ("unexpected in it", unexpected),
            ("of other shapes", shapes),
        )
        if names
    ]
    settings = f"; settings that differ from the checkpoint's run: {_listed(changed)}" if changed else ""
    instead = "Change those settings back" if changed else "Restore the model code it was written with"
    return (
        f"{path} holds tensors that do not fit the model as its code builds it now: {'; '.join(parts)}{settings}. "
        f"{instead}, or start a new run from its weights with init_from={path} (the tensors that fit are loaded, "
        "the others initialised)"
    )


def shapes_of(state: dict) -> dict:
    """{name: shape} of a state dict."""
    return {key: tuple(value.shape) for key, value in state.items()}


def check_state_fits(path: str, saved_shapes: dict, saved_config: dict, cfg: DictConfig, task: torch.nn.Module) -> None:
    """Resuming restores every tensor and the optimizer's state parameter by parameter, evaluating every
    tensor: the checkpoint must hold exactly this model's tensors, of the same shapes. Checked here, before
    Lightning loads anything, so a mismatch is one message naming every tensor and setting involved (the
    message every command loading a checkpoint gives: `misfits`), not a size-mismatch traceback."""
    message = misfits(path, saved_shapes, shapes_of(task.state_dict()), changed_settings(saved_config, cfg), "model.")
    if message:
        raise ConfigError("ckpt_path", message)


def check_same_data(path: str, saved_meta: dict, datamodule, files_checked: bool = False) -> None:
    """A run resumes only on the data its checkpoint was trained on: the same file contents (their SHA-256,
    wherever the files are now; `files_checked`: before the data was set up, check_same_files) and the same
    vocabulary, so every token id means what it meant and the splits are the same. (Checkpoints from before
    data_files was recorded are checked by vocabulary only.)"""
    if not files_checked:
        check_same_files(path, saved_meta, datamodule.data.data_files())
    for key, value in datamodule.data.checkpoint_meta().items():
        if saved_meta.get(key) != value:
            raise ConfigError(
                "ckpt_path",
                f"{path} holds another vocabulary ({key}) than this run's data gives: its token ids would "
                "mean other pieces. Resume without changing the data.* settings, or start a new run with init_from",
            )


def check_same_files(path: str, saved_meta: dict, now: dict) -> None:
    """The data files' SHA-256 now (`now`: data_files()) against what the checkpoint's run read; called before
    the data is set up where the dataset can name its files then (nothing is encoded from changed files)."""
    saved = saved_meta.get("data_files")
    if saved and sorted(saved.values()) != sorted(now.values()):  # (a recorded {}: files not known then)
        changed = [f"{name} (SHA-256 {digest[:12]}…)" for name, digest in now.items() if digest not in saved.values()]
        raise ConfigError(
            "ckpt_path",
            f"{path} was trained on other data than this run reads: {', '.join(changed)} is not what it read (a "
            "file changed since, or another file: the checkpoint records its files' SHA-256); resuming would read "
            "other splits with another vocabulary. "
            "Restore the data, or start a new run from its weights with init_from",
        )


def recover_enclosing(path: str | Path) -> None:
    """The run directory `path` is in or names (the nearest of it and the folders above it with a .lock or
    an .overwritten/), put right first where an overwrite=true was killed while it had the earlier run's
    files set aside (rundir.recover): RUN/checkpoints/best.ckpt is then there again to be read."""
    path = Path(os.path.abspath(path))
    for folder in [path, *path.parents]:
        if (folder / OVERWRITTEN).is_dir() or (folder / LOCK).exists():
            recover(folder)
            return


def checkpoint_of(target: str | Path) -> Path:
    """A checkpoint file, or a run directory's checkpoints/best.ckpt (last.ckpt where there is no best; its
    checkpoints/ folder given, the same); the run it is in put right first (recover_enclosing). The one
    resolution of every command that reads a checkpoint."""
    path = Path(target)
    recover_enclosing(path)
    if path.is_dir():
        for folder in (path / "checkpoints", path):
            for name in ("best.ckpt", "last.ckpt"):
                if (folder / name).is_file():
                    return folder / name
        raise UserError(f"{path} has no checkpoints/best.ckpt or checkpoints/last.ckpt: not a run directory?")
    if not path.is_file():
        raise UserError(f"no run directory or checkpoint file at {path}")
    return path


def model_state(checkpoint: dict) -> dict:
    """The model's tensors of a checkpoint, under the model's own names (the task holds it as `model`)."""
    return {k.removeprefix("model."): v for k, v in checkpoint["state_dict"].items() if k.startswith("model.")}


def checkpoint_path(cfg: DictConfig) -> Path | None:
    """The checkpoint `ckpt_path` names (`last`: the run directory's last.ckpt), which must exist."""
    if cfg.ckpt_path is None:
        return None
    if cfg.ckpt_path == "last":
        recover(Path(cfg.paths.output_dir))  # (a run an unfinished overwrite=true set aside: put back)
        path = Path(cfg.paths.output_dir) / "checkpoints" / "last.ckpt"
        if not path.exists():
            raise ConfigError(
                "ckpt_path",
                f"`last` means {path}, which does not exist; point hydra.run.dir at the directory of the run to resume",
            )
        return path
    path = Path(cfg.ckpt_path)
    recover_enclosing(path)
    if not path.is_file():
        raise ConfigError("ckpt_path", f"no checkpoint file at {path}")
    return path
