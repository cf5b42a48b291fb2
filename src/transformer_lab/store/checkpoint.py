"""Checkpoints: written atomically, read safely (`weights_only=True`), and self-describing: each carries
the resolved config and the vocabulary, so sampling from one needs no other file."""

from __future__ import annotations

import pickle
import zipfile
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig

from transformer_lab.errors import ConfigError, UserError, first_line, keyed
from transformer_lab.store.files import existing_file, read_json
from transformer_lab.store.origins import recorded_searchpath, restore_code, root_dir, run_overrides, with_searchpath
from transformer_lab.store.rundir import OVERWRITTEN, readable, recover

# The layout of what a checkpoint carries (`transformer_lab`: config, overrides, vocabulary, data files, code roots).
# A checkpoint of another layout is refused in one line: nothing was released before 0.1.0, so there is no older
# layout to read; a change to the layout raises it.
FORMAT = 1


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
    import torch  # (here: a run's checks before it trains do not import torch)

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
    if meta.get("format") != FORMAT:
        raise UserError(
            f"{path} was written by an earlier transformer-lab (checkpoint format {meta.get('format', 0)}, this one "
            f"reads {FORMAT}): train it again, or use the transformer-lab it was written with"
        )
    return checkpoint


def checkpoint_of(target: str | Path) -> Path:
    """A checkpoint file, or a run directory's checkpoints/best.ckpt (last.ckpt where there is no best; its
    checkpoints/ folder given, the same), where it is now (rundir.readable: an earlier run an overwrite=true set
    aside is read there, never moved). The one resolution of every command that reads a checkpoint."""
    path = readable(Path(target))
    if path.is_dir():
        for folder in (path / "checkpoints", path):
            for name in ("best.ckpt", "last.ckpt"):
                if (found := readable(folder / name)).is_file():
                    return found
        raise UserError(f"{target} has no checkpoints/best.ckpt or checkpoints/last.ckpt: not a run directory?")
    if not path.is_file():
        raise UserError(f"no run directory or checkpoint file at {target}")
    return path


def model_state(checkpoint: dict) -> dict:
    """The model's tensors of a checkpoint, under the model's own names (the task holds it as `model`)."""
    return {k.removeprefix("model."): v for k, v in checkpoint["state_dict"].items() if k.startswith("model.")}


def checkpoint_path(cfg: DictConfig) -> Path | None:
    """The checkpoint `ckpt_path` names (`last`: the run directory's last.ckpt), which must exist."""
    if cfg.ckpt_path is None:
        return None
    if not str(cfg.ckpt_path).strip():  # (not the working folder's: nothing to read, said as such)
        raise ConfigError("ckpt_path", "is empty: give last (this run directory's last.ckpt) or a checkpoint file")
    run_dir = Path(cfg.paths.output_dir).absolute()
    recover(run_dir)  # (this run starts there: what an overwrite=true killed set aside goes back)
    if cfg.ckpt_path == "last":
        path = Path(cfg.paths.output_dir) / "checkpoints" / "last.ckpt"
        if not path.exists() and (path.parent.parent / "summary.json").is_file():  # (a run stopped before its first)
            raise ConfigError(
                "ckpt_path",
                f"`last` means {path}, and the run in {path.parent.parent} saved no checkpoint (it stopped before its "
                "first): nothing to resume; start it again with overwrite=true",
            )
        if not path.exists():
            raise ConfigError(
                "ckpt_path",
                f"`last` means {path}, which does not exist; point hydra.run.dir at the directory of the run to resume",
            )
        return path
    path = Path(cfg.ckpt_path).absolute()
    if path.is_relative_to(run_dir / OVERWRITTEN):  # (a path it had there, put back above)
        path = run_dir / path.relative_to(run_dir / OVERWRITTEN)
    path = readable(path)
    if not path.is_file():
        raise ConfigError("ckpt_path", f"no checkpoint file at {cfg.ckpt_path}")
    return path


@dataclass
class Resumed:
    """What a run resuming a checkpoint keeps of it for the checks after the model is built."""

    path: str
    config: dict  # the checkpoint's run's resolved config
    shapes: dict[str, tuple[int, ...]]  # its tensors' shapes
    step: int  # the training steps it holds
    meta: dict  # what its run's data module wrote: vocabulary, data files
    loggers: dict  # its loggers' runs by section: version (W&B's run id, ...) and name
    overrides: list[str] | None  # what its run was composed from, for this command (None: not recorded)


def open_resumed(path: Path, given: list[str] | None, root: str) -> Resumed:
    """The run a checkpoint belongs to, read once: its config, tensors' shapes, step, loggers and data, its code
    put back on the import path, and the overrides its run was composed from as this command composes them
    again (`given`: this command's; a search path it gives replaces the run's, each folder checked; `root`: this
    command's paths.root_dir, where the run's own is added when it ran elsewhere). A problem is one line naming
    ckpt_path."""
    with keyed("ckpt_path", UserError):
        checkpoint = read_checkpoint(path, mmap=True)  # its settings and shapes; Lightning reads the tensors
        meta = checkpoint["transformer_lab"]
        restore_code(meta, str(path))  # the run's own code and config groups, wherever this command runs
        stored = run_overrides(meta)
        if stored is not None:  # (a search path this command gives replaces the run's)
            stored = with_searchpath(stored, given or [])
            recorded_searchpath(stored, str(path))
            recorded_searchpath(given, None)
            if Path(root).absolute() != Path(meta["config"]["paths"]["root_dir"]):
                stored += root_dir(meta, given or [])  # (resumed from elsewhere: its data where it was)
    shapes = {k: tuple(v.shape) for k, v in checkpoint["state_dict"].items()}
    step, loggers = int(checkpoint.get("global_step") or 0), dict(checkpoint.get("loggers") or {})
    return Resumed(str(path), meta["config"], shapes, step, meta, loggers, stored)


def nothing_to_do(cfg: DictConfig, resumed: Resumed) -> bool:
    """Whether resuming would only rewrite files: the checkpoint has reached this run's step limit, and
    the run it belongs to completed (else its test is still to run)."""
    if not 0 < cfg.trainer.max_steps <= resumed.step:
        return False
    summary = Path(resumed.path).parent.parent / "summary.json"
    try:
        return read_json(summary).get("status") == "completed"
    except UserError:
        return False
