"""Builds a run's data, model and task from its config, from what each side declares; nothing here
names a model, a dataset or a task.

- A model YAML's `_target_` is a plain nn.Module class declaring its `architecture` ("decoder", "encoder",
  "encoder-decoder") and `config_class`, the dataclass of its settings: the YAML's keys, plus the sizes
  the data decides (`DATA_DECIDED`, for those of them the dataclass has). Its YAML names its default task.
- A task YAML's `_target_` (conf/task/) is a `tasks.base.Task` declaring the `architecture` it trains; the
  YAML names, per form of raw data, the batch transform it reads (`batches`, batching/) and its metric.
- A data YAML's `_target_` is a `data.base.DataSource` declaring the forms of raw splits it `provides`
  (text, pairs, equations). The run's data module is the task's transform for the first of them.

So a model, dataset or objective of your own is one Python file and one YAML (README: "Your own model, dataset
or task").
"""

from __future__ import annotations

import importlib
from functools import cache

from omegaconf import DictConfig, OmegaConf

from transformer_lab.batching.base import Batching, for_lightning
from transformer_lab.config.checks import NOT_SETTINGS, check_pair, check_settings, no_such_key
from transformer_lab.config.schema import SETTINGS
from transformer_lab.config.trainer import check_trainer
from transformer_lab.errors import ConfigError, first_line

ARCHITECTURES = ("decoder", "encoder", "encoder-decoder")


A_NETWORK = {
    "decoder": "a decoder-only model",
    "encoder": "an encoder-only model",
    "encoder-decoder": "an encoder-decoder",
}


def target_class(section: DictConfig | dict, key: str) -> type:
    return import_class(section.get("_target_"), f"{key}._target_")


def _declares(cls: type, key: str, attributes: tuple[str, ...]) -> type:
    for attribute in attributes:
        if not hasattr(cls, attribute):
            raise ConfigError(
                f"{key}._target_", f"{cls.__qualname__} declares no `{attribute}` (see config/classes.py)"
            )
    if getattr(cls, "architecture", ARCHITECTURES[0]) not in ARCHITECTURES:
        raise ConfigError(
            f"{key}._target_",
            f"{cls.__qualname__} declares architecture {cls.architecture!r}; one of {', '.join(ARCHITECTURES)}",
        )
    return cls


def model_class(cfg: DictConfig) -> type:
    return _declares(target_class(cfg.model, "model"), "model", ("architecture", "config_class"))


def task_class(cfg: DictConfig) -> type:
    if cfg.get("task") is None:
        raise ConfigError(
            "task",
            f"model={cfg.model.name} names no task: add task=NAME (conf/task/), or to its YAML's defaults "
            "`- /task@_global_.task: NAME`",
        )
    return _declares(target_class(cfg.task, "task"), "task", ("architecture",))


def form_read(batches, data_cls: type) -> str | None:
    """The form of the data's raw splits a task reads: the first the data provides that the task's YAML has
    batches for (`batches`: form -> transform)."""
    return next((form for form in getattr(data_cls, "provides", ()) if form in (batches or {})), None)


def fits(model_cls: type, task_cls: type, batches, data_cls: type) -> bool:
    """Whether a task can train this model on this data: the network it trains, a form it has batches for."""
    return model_cls.architecture == task_cls.architecture and form_read(batches, data_cls) is not None


@cache
def _options(group: str, searchpath: tuple[str, ...]) -> dict[str, tuple[str, str | None, tuple[str, ...]]]:
    """Each option of a config group (this repository's and the search path's) -> its `_target_`, the task
    the composed config has with it (a model's default task), and the forms it has batches for (a task)."""
    from hydra import compose
    from hydra.core.global_hydra import GlobalHydra

    overrides = [f"hydra.searchpath=[{','.join(searchpath)}]"] if searchpath else []
    loader = GlobalHydra.instance().config_loader()
    options = {}
    for option in loader.get_group_options(group, config_name="train", overrides=overrides):
        try:
            composed = compose("train", overrides=[*overrides, f"{group}={option}"])
            options[option] = (
                composed[group]["_target_"],
                (composed.get("task") or {}).get("name"),
                tuple(composed[group].get("batches") or ()),
            )
        except Exception:  # noqa: BLE001  (an option that does not compose cannot be suggested)
            continue
    return options


@cache
def _located(path: str) -> type | None:
    """The class at a dotted path, or None, quietly (hydra's get_class logs each failure: one a combination)."""
    module, _, name = str(path).rpartition(".")
    try:
        return getattr(importlib.import_module(module), name)
    except Exception:  # noqa: BLE001  (an option whose code cannot be imported here is left out)
        return None


def working_combinations(searchpath: tuple[str, ...]) -> list[tuple[str, str, str, bool]]:
    """(model, data, task, whether it is the model's own task) for every combination of the config groups'
    options (ours and `searchpath`'s) whose declarations fit."""
    from hydra.core.global_hydra import GlobalHydra

    if not GlobalHydra.instance().is_initialized():
        return []
    found = []
    models, datas, tasks = (_options(group, searchpath) for group in ("model", "data", "task"))
    for model, (model_target, default_task, _) in models.items():
        for data, (data_target, _, _) in datas.items():
            for task, (task_target, _, batches) in tasks.items():
                try:
                    classes = [_located(target) for target in (model_target, task_target, data_target)]
                    if None not in classes and fits(classes[0], classes[1], batches, classes[2]):
                        found.append((model, data, task, task == default_task))
                except Exception:  # noqa: BLE001
                    continue
    return found


def listed(combinations: list[tuple[str, str, str, bool]]) -> str:
    """`model=M data=D [task=T]`, ...: task=T where it is not the model's own."""
    if not combinations:
        return "(not listed: no Hydra context)"
    return ", ".join(f"model={m} data={d}" + ("" if own else f" task={t}") for m, d, t, own in combinations)


def check_arguments(cls: type, settings: dict, section: str) -> None:
    """What a class's constructor declares it takes (its signature), against the settings it will be given: a key
    it does not take, and a value of another type than its annotation says (int, float, bool, str), are one line
    naming `section.KEY` before the class runs (a user's dataset need not check them itself)."""
    import inspect
    import typing

    try:
        signature = inspect.signature(cls.__init__)
        hints = typing.get_type_hints(cls.__init__)
    except (TypeError, ValueError, NameError):  # (a signature Python cannot read: the class checks its own)
        return
    parameters = [p for p in signature.parameters.values() if p.name != "self"]
    if not any(p.kind is p.VAR_KEYWORD for p in parameters):
        takes = [p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        for key in settings:
            if key not in takes:
                raise no_such_key(f"{section}.{key}", takes)  # (what its constructor takes, or the closest)
    for key, value in settings.items():
        kind = hints.get(key)
        if kind in (int, float, bool, str) and value is not None:
            fits = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
            if kind is float and isinstance(value, int) and not isinstance(value, bool):
                fits = True
            if not fits:
                raise ConfigError(f"{section}.{key}", f"must be {kind.__name__} ({cls.__qualname__}), got {value!r}")


def check_model(cfg: DictConfig, datamodule: Batching) -> None:
    """The model has every method the task and its metrics call on it (Task.model_needs): one missing is
    refused before the run, naming the method and the option that does without it."""
    model_cls, task_cls = model_class(cfg), task_class(cfg)
    named = (cfg.task.get("metrics") or {}).get(datamodule.form) or []
    from transformer_lab.tasks.metrics import Metric  # (torchmetrics: only where a run is built)

    metrics = [import_class(path, "task.metrics", Metric) for path in named]
    missing = {m: o for m, o in task_cls.model_needs(cfg, metrics).items() if not callable(getattr(model_cls, m, None))}
    if missing:
        listed = ", ".join(
            f"{method}() ({f'{without} does without it' if without else 'needed'})"
            for method, without in missing.items()
        )
        raise ConfigError(
            "model",
            f"model={cfg.model.name} ({model_cls.__qualname__}) lacks what task={cfg.task.name} calls on it with "
            f"data={cfg.data.name}: {listed}",
        )


def built_callbacks(cfg: DictConfig) -> dict:
    """Each callback of the config built, once, before the run exists ({name: callback}; a null one dropped): a
    setting its class refuses (callbacks.ema.decay=1.5) becomes a ConfigError naming its section, not a traceback
    once the run's directory is there."""
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate

    built = {}
    for name, settings in (cfg.get("callbacks") or {}).items():
        if settings is None:
            continue
        try:
            built[name] = instantiate(settings)
        except InstantiationException as e:
            cause = e.__cause__ or e
            if isinstance(cause, ConfigError):  # (one of its settings, named: `callbacks.NAME.KEY`)
                raise ConfigError(f"callbacks.{name}.{cause.key}", cause.message) from None
            first = first_line(cause)
            raise ConfigError(
                f"callbacks.{name}", f"{settings.get('_target_')} refuses its settings: {first}"
            ) from None
    return built


def check_length(cfg: DictConfig, datamodule: Batching) -> None:
    """The data's sequences fit the positions of the checkpoint init_from=hf: loads (its sizes are model_sizes):
    known before the data is read, so refused before the run starts, naming the data's length key."""
    positions = (cfg.get("model_sizes") or {}).get("block_size")
    length = datamodule.sequence_length
    if positions is not None and length is not None and length > positions:
        key = datamodule.length_key or "data.block_size"
        raise ConfigError(
            key,
            f"sequences of {length} tokens exceed the {positions} positions of {cfg.init_from}: set {key}={positions} or less",
        )


def import_class(path, key: str, base: type | None = None) -> type:
    """The class a config names by its dotted path (a subclass of `base`, where given); a ConfigError naming
    `key` where it cannot be imported or is not one."""
    module, _, name = str(path).rpartition(".")
    try:
        cls = getattr(importlib.import_module(module), name)
    except Exception as e:  # noqa: BLE001  (an import can fail in any way: a missing module, its own error)
        raise ConfigError(key, f"cannot import {path!r}: {e}") from None
    if not isinstance(cls, type) or (base is not None and not issubclass(cls, base)):
        what = f"a subclass of {base.__module__}.{base.__qualname__}" if base is not None else "a class"
        raise ConfigError(key, f"{path!r} is not {what}")
    return cls


def check_fits(cfg: DictConfig, data_cls: type, batches, searchpath: tuple[str, ...] = ()) -> None:
    """The model, the task and the data declare that they train together, or one line naming what works (the
    config groups' options, ours and `searchpath`'s)."""
    model_cls, task_cls = model_class(cfg), task_class(cfg)
    if not fits(model_cls, task_cls, batches, data_cls):
        if model_cls.architecture != task_cls.architecture:
            why = (
                f"task={cfg.task.name} trains {A_NETWORK[task_cls.architecture]}, "
                f"model={cfg.model.name} is {A_NETWORK[model_cls.architecture]}"
            )
        else:
            provides = ", ".join(getattr(data_cls, "provides", ())) or "nothing (it declares no `provides`)"
            reads = ", ".join(batches) or "nothing (its YAML names no `batches`)"
            why = f"task={cfg.task.name} does not train on data={cfg.data.name} (it reads {reads}; the data gives {provides})"
        combinations = working_combinations(searchpath)
        these = [f"task={t}" for m, d, t, _ in combinations if (m, d) == (cfg.model.name, cfg.data.name)]
        hint = f"model={cfg.model.name} data={cfg.data.name} trains with {' or '.join(these)}; " if these else ""
        raise ConfigError("task", f"{why}; {hint}combinations that work: {listed(combinations)}")


def make_datamodule(cfg: DictConfig, lightning: bool = True, searchpath: tuple[str, ...] = ()) -> Batching:
    """The run's data module, built but not yet set up (no file is read): the dataset (data.*) inside the
    batch transform the task's YAML names for the first form of raw splits it provides, a LightningDataModule
    (`lightning`) unless a loaded run's, which no Trainer takes. The model's, the task's and the data's
    declarations are checked against each other; the dataset's and the transform's constructors check their own
    arguments."""
    data_cls, batches = target_class(cfg.data, "data"), cfg.task.get("batches") or {}
    if (
        lightning
    ):  # (a loaded run's combination was checked as it trained: its task's class, Lightning's, stays unimported)
        check_fits(cfg, data_cls, batches, searchpath)
    settings = {
        k: v
        for k, v in OmegaConf.to_container(cfg.data, resolve=True, enum_to_str=True).items()
        if k not in NOT_SETTINGS
    }
    check_arguments(data_cls, settings, "data")
    data = data_cls(**settings)  # checks its own arguments (a ConfigError naming the key)
    form = form_read(batches, data_cls)
    check_readers(data_cls, form)
    batching_cls = import_class(batches[form], f"task.batches.{form}", Batching)
    missing = [key for key in batching_cls.task_keys if key not in cfg.task]
    if missing:
        raise ConfigError(
            f"task.batches.{form}",
            f"{batching_cls.__qualname__} takes task.{', task.'.join(missing)} (its task_keys), which "
            f"task={cfg.task.name} does not set",
        )
    datamodule = (for_lightning(batching_cls) if lightning else batching_cls)(
        data,
        batch_size=cfg.data.batch_size,
        val_batch_size=cfg.data.get("val_batch_size"),
        seed=cfg.data.get("seed", cfg.seed),
        **{key: cfg.task[key] for key in batching_cls.task_keys},  # the task's settings it declares it takes
    )
    check_pair(cfg, datamodule)
    return datamodule


def check_readers(data_cls: type, form: str) -> None:
    """The dataset defines what the form its task reads needs (data/base.py READERS)."""
    from transformer_lab.data.base import READERS, DataSource

    missing = [f"{r}()" for r in READERS[form] if getattr(data_cls, r, None) is getattr(DataSource, r)]
    if missing:
        raise ConfigError(
            "data",
            f"{data_cls.__module__}.{data_cls.__qualname__} provides {form} but defines no {', no '.join(missing)}: "
            f"a dataset providing {form} gives its splits that way (data/base.py, docs/extending.md)",
        )


def check_buildable(cfg: DictConfig, searchpath: tuple[str, ...] = ()) -> Batching:
    """The checks of build() that need the classes but read no file: the model and data declarations fit
    (`searchpath`: the config groups' folders beside ours, for the hint), the data module's and the model's
    own checks of their settings, and Lightning's of the trainer's. Returns the data module, not set up."""
    # a user's own task and model, once imported, by their dataclasses (ours: config.checks.validate)
    task_cls = task_class(cfg)
    if hasattr(task_cls, "config_class") and cfg.task.get("_target_") not in SETTINGS:
        check_settings(cfg, "task", task_cls.config_class)
    datamodule = make_datamodule(cfg, searchpath=searchpath)
    if cfg.model.get("_target_") not in SETTINGS:
        check_settings(cfg, "model", model_class(cfg).config_class)
    from transformer_lab.tasks.metrics import Metric  # (torchmetrics: only where a run is built)

    for i, path in enumerate((cfg.task.get("metrics") or {}).get(datamodule.form) or []):
        import_class(path, f"task.metrics.{datamodule.form}[{i}]", Metric)
    check_model(cfg, datamodule)
    check_trainer(cfg)
    check_length(cfg, datamodule)
    return datamodule
