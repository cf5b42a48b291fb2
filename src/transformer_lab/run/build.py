"""Builds a run's data, model and task from its config, from what each side declares (config/classes.py
says what that is); nothing here names a model, a dataset or a task. And a model rebuilt from a checkpoint
alone: `load_model`, the one loader of every command."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf

from transformer_lab.batching.base import Batching
from transformer_lab.config.checks import NOT_SETTINGS
from transformer_lab.config.classes import (
    check_buildable,
    import_class,
    make_datamodule,
    model_class,
    task_class,
)
from transformer_lab.config.compatibility import misfits, shapes_of
from transformer_lab.data.base import DATA_DECIDED
from transformer_lab.errors import ConfigError, UserError, first_line, keyed, under
from transformer_lab.store.checkpoint import FORMAT, checkpoint_of, model_state, read_checkpoint
from transformer_lab.store.origins import code_roots, restore_code


def data_decided(config_class: type, datamodule: Batching, settings: dict) -> dict:
    """The sizes the data gives the model: those of DATA_DECIDED its config has and the user left unset."""
    fields = {f.name for f in dataclasses.fields(config_class)}
    values = {
        "vocab_size": datamodule.vocab_size,
        "src_vocab_size": datamodule.source_vocab_size,
        "n_classes": datamodule.n_classes,
        "pad_id": datamodule.pad_id,
        "block_size": datamodule.sequence_length,
    }
    assert set(values) == set(DATA_DECIDED)
    return {
        key: value for key, value in values.items() if key in fields and value is not None and settings.get(key) is None
    }


def suggested_by_data(config_class: type, cfg: DictConfig, model_cfg: dict) -> dict:
    """The data's suggested settings (`data.model_defaults`) for the fields of a model's dataclass its YAML leaves
    out (a model whose schema is ours takes them while composing: config.suggested)."""
    fields = {f.name for f in dataclasses.fields(config_class)}
    suggestions = OmegaConf.to_container(cfg.data.get("model_defaults") or DictConfig({}), resolve=True)
    return {key: value for key, value in suggestions.items() if key in fields and key not in model_cfg}


def check_data_sizes(model_cfg: dict, datamodule: Batching, sizes: dict | None = None, hf: bool = False) -> None:
    """A size the data decides but the model's config sets (by hand, model_sizes, or init_from=hf:...) must hold the
    data: a vocabulary or a length at least the data's, the same padding id and classes. `sizes` (model_sizes) are
    named as such, or, where an init_from=hf: checkpoint gave them (`hf`), as what the data must fit."""
    sizes = sizes or {}
    named = lambda key: f"model_sizes.{key}" if key in sizes else f"model.{key}"  # noqa: E731
    data = {"vocab_size": datamodule.vocab_size, "src_vocab_size": datamodule.source_vocab_size,
            "block_size": datamodule.sequence_length}  # fmt: skip
    for key, theirs in data.items():
        if model_cfg.get(key) is not None and theirs is not None and model_cfg[key] < theirs:
            if key in sizes and hf:
                what = (datamodule.length_key or "data.block_size") if key == "block_size" else "data.tokenizer"
                raise ConfigError(what, f"needs {key}={theirs}, the checkpoint init_from loads has {model_cfg[key]}")
            raise ConfigError(named(key), f"is {model_cfg[key]}, the data needs {theirs}")
    for key, theirs in (("pad_id", datamodule.pad_id), ("n_classes", datamodule.n_classes)):
        if model_cfg.get(key) is not None and theirs is not None and model_cfg[key] != theirs:
            raise ConfigError(named(key), f"is {model_cfg[key]}, the data's is {theirs}")


def instantiate(cls: type, model_cfg: dict, from_data: dict) -> torch.nn.Module:
    """The model from its config section (less the keys that only select) and the data's sizes."""
    settings = {k: v for k, v in model_cfg.items() if k not in NOT_SETTINGS and k not in from_data}
    return cls(cls.config_class(**settings, **from_data))


def build_model(cfg: DictConfig, datamodule: Batching) -> tuple[torch.nn.Module, dict]:
    """The model, and the sizes the data decided (kept in checkpoints, to rebuild it from one alone)."""
    cls = model_class(cfg)
    model_cfg = OmegaConf.to_container(cfg.model, resolve=True, enum_to_str=True)
    sizes = OmegaConf.to_container(cfg.model_sizes) if cfg.get("model_sizes") else {}  # (init_from=hf: sets them)
    check_data_sizes({**model_cfg, **sizes}, datamodule, sizes, str(cfg.get("init_from") or "").startswith("hf:"))
    from_data = {
        **suggested_by_data(cls.config_class, cfg, model_cfg),
        **data_decided(cls.config_class, datamodule, {**model_cfg, **sizes}),
        **sizes,
    }
    model = instantiate(cls, model_cfg, from_data)
    if cfg.model.get("compile"):  # (a user's model YAML may leave it out)
        model.compile()  # in place: the state dict keeps its keys, so checkpoints are the same either way
    return model, from_data


def build(
    cfg: DictConfig,
    overrides: list[str] | None = None,
    checkpoint_meta: dict | None = None,
    datamodule: Batching | None = None,
):
    """Data module (set up), model and task of a run; `overrides`, those the config was composed from, go
    into its checkpoints (to resume it from them alone). With `checkpoint_meta`, the data takes that
    checkpoint's vocabulary (to evaluate its model). `datamodule`: the one check_buildable() built for
    this config, if it was called already (prepare.prepare)."""
    datamodule = datamodule or check_buildable(cfg)
    if checkpoint_meta is not None:
        datamodule.for_checkpoint(checkpoint_meta, cfg.data.get("path"))
    try:
        datamodule.prepare_data()
        datamodule.setup("fit")
    except FileNotFoundError as e:  # (a user's dataset opening a path that is not there)
        where = (
            f"; a relative path is read from {Path.cwd()}" if e.filename and not Path(e.filename).is_absolute() else ""
        )
        raise ConfigError(f"data={cfg.data.name}", f"cannot read {e.filename}: {e.strerror}{where}") from None
    except UserError:
        raise
    except ValueError as e:  # (a user's dataset refusing what it read, in its words: one line)
        raise ConfigError(
            f"data={cfg.data.name}", f"{type(datamodule.data).__name__}.setup(): {first_line(e)}"
        ) from None
    except (MemoryError, RuntimeError) as e:
        raise beyond_memory(e, f"data={cfg.data.name}", "its splits") from None
    try:
        model, from_data = build_model(cfg, datamodule)
    except (MemoryError, RuntimeError) as e:
        what = f"model={cfg.model.name} of these sizes (model.* and the data's: its vocabulary, its sequence length)"
        raise beyond_memory(e, "model", what) from None
    task_cls, named = task_class(cfg), (cfg.task.get("metrics") or {}).get(datamodule.form) or []
    from transformer_lab.tasks.metrics import Metric  # (torchmetrics: only where a run is built)

    metrics = [import_class(path, "task.metrics", Metric) for path in named]
    meta = {
        "format": FORMAT,
        "config": OmegaConf.to_container(cfg, resolve=True, enum_to_str=True),
        "model_args": from_data,
        "overrides": overrides,
        "vocab": None,
        **datamodule.data.checkpoint_meta(),
        "data_files": datamodule.data.data_files(),
        "code_roots": code_roots(cfg),  # where a user's classes were imported from (store/origins.py)
    }
    task = task_cls.build(cfg, model, datamodule, meta, metrics)
    return datamodule, model, task


def beyond_memory(error: BaseException, key: str, what: str) -> BaseException:
    """A ConfigError naming `key` for an allocation the machine refused while `what` was built (a size typed a few
    digits too long), the error itself for any other."""
    if not (isinstance(error, (MemoryError, torch.OutOfMemoryError)) or "can't allocate memory" in str(error)):
        return error
    asked = re.search(r"allocate (\d+) bytes", str(error))
    size = f" ({int(asked.group(1)) / 2**30:,.0f} GiB at once)" if asked else ""
    return ConfigError(key, f"{what} need more memory than this machine can allocate{size}: lower the sizes")


def datamodule_from_checkpoint(meta: dict) -> Batching:
    """The data module of a checkpoint's run with its vocabulary, not set up: it encodes and decodes text
    for the checkpoint's model without reading any file."""
    datamodule = make_datamodule(DictConfig(meta["config"]), lightning=False)
    datamodule.for_checkpoint(meta)
    return datamodule


def model_from_checkpoint(meta: dict, path: str = "the checkpoint") -> torch.nn.Module:
    """The model a checkpoint's metadata describes, as its code builds it now (its weights: checkpoint.load_model).
    Settings the model's settings class no longer has (a field renamed since), or now refuses, are one line."""
    model_cfg = meta["config"]["model"]
    cls = model_class(DictConfig({"model": model_cfg}))
    fields = [f.name for f in dataclasses.fields(cls.config_class)]
    unknown = [k for k in model_cfg if k not in NOT_SETTINGS and k not in meta["model_args"] and k not in fields]
    if unknown:
        raise UserError(
            f"{path} holds settings its model's class no longer has: model.{', model.'.join(unknown)} "
            f"({cls.config_class.__qualname__} has: {', '.join(fields)}); restore the code it was written with, or "
            f"start a new run from its weights with init_from={path}"
        )
    with under("model"):  # (its __post_init__ refusing a value it took then: named as the config names it)
        return instantiate(cls, model_cfg, meta["model_args"])


def init_weights(
    model: torch.nn.Module, source: str, vocabulary: dict | None = None
) -> tuple[str, list[str], set[str]]:
    """Loads the tensors of `source` (a checkpoint or a run directory) that fit the model by name and
    shape. Where `vocabulary` (this run's data module's checkpoint_meta()) is the checkpoint's, the token
    ids mean the same, so a tensor that differs only in its first dimension (the vocabulary's rows: T5's
    sentinels, a masked LM's [MASK]) gets the rows both have. Returns a one-line report, what did not fit
    (the model's tensors left as initialised, then the checkpoint's unused ones) and what was loaded.
    `hf:NAME_OR_DIR`: a Transformers checkpoint (pretrained/load.py)."""
    if str(source).startswith("hf:"):
        from transformer_lab.pretrained.load import load_state

        return load_state(model, source)
    with keyed("init_from", UserError):
        path = checkpoint_of(source)
        checkpoint = read_checkpoint(path)
    state = model_state(checkpoint)
    meta = checkpoint.get("transformer_lab") or {}
    same_vocabulary = bool(vocabulary) and all(meta.get(key) == value for key, value in vocabulary.items())
    ours = model.state_dict()
    fits = {k: v for k, v in state.items() if k in ours and ours[k].shape == v.shape}
    rows = {}  # name -> (rows copied, rows in the checkpoint)
    for k, v in state.items():
        if same_vocabulary and k in ours and k not in fits and v.shape[1:] == ours[k].shape[1:]:
            n = min(len(v), len(ours[k]))
            fits[k] = torch.cat([v[:n], ours[k][n:]])
            rows[k] = (n, len(v))
    left, unused = sorted(set(ours) - set(fits)), sorted(set(state) - set(ours))  # (a shape misfit: left)
    model.load_state_dict(fits, strict=False)
    report = f"init_from {path}: loaded {len(fits)} of {len(ours)} tensors"
    if rows:
        copied = ", ".join(f"{k} ({n} of {m} rows)" for k, (n, m) in sorted(rows.items()))
        report += f"; of the same vocabulary, the rows both have ({len(rows)}): {copied}"
    if left:
        report += f"; left as initialised ({len(left)}): {', '.join(left)}"
    if unused:
        report += f"; not in this model ({len(unused)}): {', '.join(unused)}"
    return report, left + unused, set(fits)


def load_model(target: str | Path, map_location: str = "cpu") -> tuple[torch.nn.Module, dict]:
    """The one loader of every command that uses a trained model (sample, translate, fill, classify,
    attention, export): the model of a run directory or checkpoint file (checkpoint_of: the run put right
    first) in eval mode, and the checkpoint's metadata: {"config", "model_args", "vocab" or "tokenizer"}.
    Tensors that do not fit the model as its code builds it now are refused in one message (`misfits`)."""
    path = checkpoint_of(target)
    checkpoint = read_checkpoint(path)
    meta = checkpoint["transformer_lab"]
    restore_code(meta, str(path))  # (a user's model: the folder its run imported it from)
    model, state = model_from_checkpoint(meta, str(path)), model_state(checkpoint)
    message = misfits(str(path), shapes_of(state), shapes_of(model.state_dict()))
    if message:
        raise UserError(message)
    model.load_state_dict(state)
    return model.to(map_location).eval(), meta
