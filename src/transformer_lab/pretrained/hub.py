"""Reading a Transformers checkpoint's directory: a local one, or a hub repository's files fetched with
huggingface_hub; its config.json and its tensors (safetensors, their shards, or pytorch_model.bin)."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import torch

from transformer_lab.errors import ConfigError, UserError, first_line

PREFIX = "hf:"
WEIGHT_FILES = ["config.json", "*.safetensors", "*.safetensors.index.json", "tokenizer.json", "tokenizer_config.json"]
WEIGHT_FILES += ["special_tokens_map.json", "generation_config.json"]


def refuse(source: str, what: str) -> ConfigError:
    return ConfigError("init_from", f"{source}: {what}")


def local_dir(source: str) -> Path:
    """The directory of `hf:NAME_OR_DIR`: the directory itself, or the hub repository's files downloaded
    (config, weights, tokenizer) into the Hugging Face cache."""
    spec = source.removeprefix(PREFIX)
    path = Path(spec).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise refuse(source, f"{path} has no config.json: not a Transformers model directory")
        return path
    if path.exists() or spec.startswith((".", "/", "~")) or spec.count("/") > 1:
        raise refuse(source, f"no Transformers model directory at {path}")
    hub = imported("huggingface_hub", f"init_from={source}")  # (fetching a hub name)
    try:
        files = hub.list_repo_files(spec)
        patterns = WEIGHT_FILES if any(f.endswith(".safetensors") for f in files) else [*WEIGHT_FILES, "*.bin"]
        return Path(hub.snapshot_download(spec, allow_patterns=patterns))
    except Exception as e:  # noqa: BLE001  (no network, no such repository, a gated one: the library's errors)
        first = first_line(e)
        raise refuse(source, f"not a directory, and the hub has no model {spec!r} here ({first})") from None


# What installs each module init_from=hf: and export import (where they import it: imported()): safetensors and
# huggingface_hub (tokenizers') are the project's own dependencies; transformers, which neither direction needs
# (the tests compare against it, and it loads an export), its [pretrained] extra.
INSTALLS = {
    "safetensors": "pip install -e .",
    "huggingface_hub": "pip install -e .",
    "transformers": 'pip install -e ".[pretrained]"',
}


def imported(module: str, what: str):
    """`module` imported for `what` (`init_from=hf:...`, `export`), or one line saying what installs it."""
    import importlib

    package = module.split(".")[0]
    try:
        return importlib.import_module(module)
    except ImportError as e:
        missing = isinstance(e, ModuleNotFoundError) and (e.name or package).split(".")[0] == package
        why = "which is not installed" if missing else f"which does not import ({first_line(e)})"
        raise UserError(f"{what} needs {package}, {why}: {INSTALLS[package]}") from None


def require_pretrained(what: str) -> None:
    """What init_from=hf: and export import, there before anything is read or written: safetensors."""
    imported("safetensors.torch", what)


def check_safetensors(path: Path, source: str) -> None:
    """A .safetensors file is whole: its header parses and its tensors' data ends where the file does (a
    download or copy cut short is refused here, in one line, before any run starts)."""
    size = path.stat().st_size
    try:
        with open(path, "rb") as f:
            length = int.from_bytes(f.read(8), "little")
            if size < 8 or length > size - 8:
                raise ValueError("its header is cut short")
            header = json.loads(f.read(length))
        end = max((t["data_offsets"][1] for k, t in header.items() if k != "__metadata__"), default=0)
    except (ValueError, KeyError, TypeError, IndexError, UnicodeDecodeError) as e:
        raise refuse(source, f"{path} is not a readable safetensors file ({e})") from None
    if 8 + length + end != size:
        raise refuse(
            source,
            f"{path} is {size:,} bytes, its header says {8 + length + end:,}: truncated or corrupt, fetch it again",
        )


def weight_files(folder: Path) -> list[Path]:
    """The checkpoint's weight files: model.safetensors, its shards (an index), or pytorch_model.bin."""
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        try:
            shards = [folder / shard for shard in sorted(set(json.loads(index.read_text())["weight_map"].values()))]
        except (ValueError, KeyError, AttributeError, TypeError) as e:
            raise UserError(f"init_from: {index} is not a safetensors index ({e})") from None
        missing = [shard.name for shard in shards if not shard.is_file()]
        if missing:
            raise UserError(f"init_from: {index} names {', '.join(missing)}, which {folder} does not have")
        return shards
    for name in ("model.safetensors", "pytorch_model.bin"):
        if (folder / name).is_file():
            return [folder / name]
    raise UserError(f"init_from: {folder} has no model.safetensors (nor shards, nor pytorch_model.bin)")


def read_config(folder: Path) -> dict:
    return json.loads((folder / "config.json").read_text())


def read_tensors(folder: Path) -> dict[str, torch.Tensor]:
    """Every tensor of the checkpoint (weight_files), each file checked whole first."""
    tensors = {}
    for path in weight_files(folder):
        if path.suffix == ".safetensors":
            check_safetensors(path, f"hf:{folder}")
            tensors.update(imported("safetensors.torch", f"init_from=hf:{folder}").load_file(path))
        else:
            tensors.update(read_bin(path))
    return tensors


def read_bin(path: Path, mmap: bool = False) -> dict:
    """A pytorch_model.bin's tensors (weights_only); mmap: its directory only, the tensors left on disk."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except (RuntimeError, EOFError, OSError, ValueError, pickle.UnpicklingError) as e:
        first = first_line(e)
        raise UserError(f"init_from: {path} is not a readable checkpoint (truncated or corrupt: {first})") from None
