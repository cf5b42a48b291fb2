"""Builds a run's data, model and task from its config, from what each side declares; nothing here
names a model or a dataset.

- A model YAML's `_target_` is a plain nn.Module class declaring `layout`, the batches it reads, and
  `config_class`, the dataclass of its settings: the YAML's keys, plus the sizes the data decides
  (`DATA_DECIDED`, for those of them the dataclass has). A model that can read several declares them all
  in `layouts` (`layout` first); `model.layout` picks one.
- A data YAML's `_target_` is a `data.base.DataModule` declaring the `layouts` it can produce; it is
  built with the model's layout.
- The layout decides the task (`TASKS`). "spans" and "mlm" are made from the data's token streams
  (`FROM_STREAMS`).

So a model or dataset of your own is one Python file and one YAML (README: "Your own model or dataset").
"""

from __future__ import annotations

import dataclasses
from functools import cache

import torch
from hydra.utils import get_class
from omegaconf import DictConfig, OmegaConf

from transformer_lab.data.base import DATA_DECIDED, DataModule
from transformer_lab.data.masked_lm import MaskedLMDataModule
from transformer_lab.data.span_corruption import SpanCorruptionDataModule
from transformer_lab.errors import ConfigError
from transformer_lab.tasks.classify import ClassificationTask
from transformer_lab.tasks.lm import LanguageModelTask
from transformer_lab.tasks.masked_lm import MaskedLMTask
from transformer_lab.tasks.seq2seq import Seq2SeqTask
from transformer_lab.tasks.span_corruption import SpanCorruptionTask
from transformer_lab.trainer_args import check_trainer
from transformer_lab.validate import NOT_SETTINGS, check_pair, check_settings

# A model's layout -> the task that trains it.
TASKS = {
    "lm": LanguageModelTask,
    "seq2seq": Seq2SeqTask,
    "classify": ClassificationTask,
    "spans": SpanCorruptionTask,
    "mlm": MaskedLMTask,
}
# Layouts made from a text dataset's token streams: the wrapping data module, and its config section.
FROM_STREAMS = {"spans": (SpanCorruptionDataModule, "span"), "mlm": (MaskedLMDataModule, "mlm")}


def target_class(section: DictConfig | dict, key: str) -> type:
    target = section.get("_target_")
    try:
        return get_class(target)
    except Exception as e:  # noqa: BLE001  (Hydra wraps import errors of every kind)
        raise ConfigError(f"{key}._target_", f"cannot import {target!r}: {e.__cause__ or e}") from None


def model_class(cfg: DictConfig) -> type:
    cls = target_class(cfg.model, "model")
    for attribute in ("layout", "config_class"):
        if not hasattr(cls, attribute):
            raise ConfigError("model._target_", f"{cls.__qualname__} declares no `{attribute}` (see factory.py)")
    for layout in layouts_of(cls):
        if layout not in TASKS:
            raise ConfigError(
                "model._target_", f"{cls.__qualname__} declares layout {layout!r}; layouts: {', '.join(TASKS)}"
            )
    return cls


def layouts_of(cls: type) -> tuple[str, ...]:
    """The layouts a model class can read, its default first."""
    return (cls.layout, *(layout for layout in getattr(cls, "layouts", ()) if layout != cls.layout))


def model_layout(cfg: DictConfig) -> str:
    """The layout this run's model reads: `model.layout`, or its class's default."""
    cls = model_class(cfg)
    layout = cfg.model.get("layout") or cls.layout
    if layout not in layouts_of(cls):
        raise ConfigError("model.layout", f"model={cfg.model.name} reads {', '.join(layouts_of(cls))}; got {layout!r}")
    return layout


@cache
def _option_targets(group: str, searchpath: tuple[str, ...]) -> dict[str, str]:
    """Each option of a config group (this repository's and the search path's) -> its `_target_`."""
    from hydra import compose
    from hydra.core.global_hydra import GlobalHydra

    overrides = [f"hydra.searchpath=[{','.join(searchpath)}]"] if searchpath else []
    loader = GlobalHydra.instance().config_loader()
    targets = {}
    for option in loader.get_group_options(group, config_name="train", overrides=overrides):
        try:
            section = compose("train", overrides=[*overrides, f"{group}={option}"])[group]
            targets[option] = section["_target_"]
        except Exception:  # noqa: BLE001  (an option that does not compose cannot be suggested)
            continue
    return targets


def working_pairs(cfg: DictConfig) -> str:
    """`model=M data=D` for every pair whose declarations fit, among the config groups' options."""
    from hydra.core.global_hydra import GlobalHydra

    if not GlobalHydra.instance().is_initialized():
        return "(not listed: no Hydra context)"
    searchpath = tuple(OmegaConf.select(cfg, "hydra.searchpath", default=None) or ())
    if not searchpath:
        from hydra.core.hydra_config import HydraConfig

        if HydraConfig.initialized():
            searchpath = tuple(HydraConfig.get().searchpath or ())
    pairs = []
    models, datas = _option_targets("model", searchpath), _option_targets("data", searchpath)
    for model, model_target in models.items():
        for data, data_target in datas.items():
            try:
                layouts = [lay for lay in layouts_of(get_class(model_target)) if lay in get_class(data_target).layouts]
                if layouts:
                    default = get_class(model_target).layout
                    pairs += [
                        f"model={model} data={data}" + ("" if lay == default else f" model.layout={lay}")
                        for lay in layouts
                    ]
            except Exception:  # noqa: BLE001
                continue
    return ", ".join(pairs)


def make_datamodule(cfg: DictConfig) -> DataModule:
    """The data module for this model, built but not yet set up (no file is read): its declared
    layouts are checked against the model's, and its constructor checks its own arguments."""
    layout = model_layout(cfg)
    data_cls = target_class(cfg.data, "data")
    if layout not in getattr(data_cls, "layouts", ()):
        reads = f"model={cfg.model.name}" + (f" model.layout={layout}" if cfg.model.get("layout") else "")
        raise ConfigError(
            "data",
            f"{reads} does not train on data={cfg.data.name}; combinations that work: {working_pairs(cfg)}",
        )
    settings = {
        k: v
        for k, v in OmegaConf.to_container(cfg.data, resolve=True, enum_to_str=True).items()
        if k not in NOT_SETTINGS
    }
    datamodule = data_cls(**settings, layout=layout)  # checks its own arguments (a ConfigError naming the key)
    if layout in FROM_STREAMS:  # the text's token streams, corrupted or masked
        wrapper, section = FROM_STREAMS[layout]
        datamodule = wrapper(
            datamodule,
            **cfg[section],
            batch_size=cfg.data.batch_size,
            val_batch_size=cfg.data.val_batch_size,
            seed=cfg.seed,
        )
    check_pair(cfg, datamodule)
    return datamodule


def check_buildable(cfg: DictConfig) -> DataModule:
    """The checks of build() that need the classes but read no file: the model and data declarations fit,
    the data module's and the model's own checks of their settings, and Lightning's of the trainer's.
    Returns the data module, not set up."""
    datamodule = make_datamodule(cfg)
    check_settings(cfg, "model", model_class(cfg).config_class)
    check_trainer(cfg)
    return datamodule


def data_decided(config_class: type, datamodule: DataModule, settings: dict) -> dict:
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


def instantiate(cls: type, model_cfg: dict, from_data: dict) -> torch.nn.Module:
    """The model from its config section (less the keys that only select) and the data's sizes."""
    settings = {k: v for k, v in model_cfg.items() if k not in NOT_SETTINGS and k not in from_data}
    return cls(cls.config_class(**settings, **from_data))


def build_model(cfg: DictConfig, datamodule: DataModule) -> tuple[torch.nn.Module, dict]:
    """The model, and the sizes the data decided (kept in checkpoints, to rebuild it from one alone)."""
    cls = model_class(cfg)
    model_cfg = OmegaConf.to_container(cfg.model, resolve=True, enum_to_str=True)
    from_data = data_decided(cls.config_class, datamodule, model_cfg)
    model = instantiate(cls, model_cfg, from_data)
    if cfg.model.compile:
        model.compile()  # in place: the state dict keeps its keys, so checkpoints are the same either way
    return model, from_data


def build(cfg: DictConfig, overrides: list[str] | None = None, checkpoint_meta: dict | None = None):
    """Data module (set up), model and task of a run; `overrides`, those the config was composed from, go
    into its checkpoints (to resume it from them alone). With `checkpoint_meta`, the data takes that
    checkpoint's vocabulary (to evaluate its model)."""
    datamodule = check_buildable(cfg)
    if checkpoint_meta is not None:
        datamodule.for_checkpoint(checkpoint_meta)
    datamodule.prepare_data()
    datamodule.setup("fit")
    model, from_data = build_model(cfg, datamodule)
    meta = {
        "config": OmegaConf.to_container(cfg, resolve=True, enum_to_str=True),
        "model_args": from_data,
        "overrides": overrides,
        "vocab": None,
        **datamodule.checkpoint_meta(),
        "data_files": datamodule.data_files(),
    }
    task = TASKS[model_layout(cfg)].build(cfg, model, datamodule, meta)
    return datamodule, model, task


def datamodule_from_checkpoint(meta: dict) -> DataModule:
    """The data module of a checkpoint's run with its vocabulary, not set up: it encodes and decodes text
    for the checkpoint's model without reading any file."""
    datamodule = make_datamodule(DictConfig(meta["config"]))
    datamodule.for_checkpoint(meta)
    return datamodule


def model_from_checkpoint(meta: dict, state: dict) -> torch.nn.Module:
    """The model a checkpoint's metadata describes, with its weights."""
    model_cfg = meta["config"]["model"]
    if "_target_" not in model_cfg or "model_args" not in meta:
        raise ConfigError(
            "ckpt",
            "this checkpoint was written by an older transformer-lab, before checkpoints "
            "named their model class; train it again, or load it with that version",
        )
    model = instantiate(model_class(DictConfig({"model": model_cfg})), model_cfg, meta["model_args"])
    model.load_state_dict(state)
    return model
