"""Checks of a composed config that need more than a type, across keys and sections. Each failure names
the key and what is valid.

Runs before any data is read or any model built, and imports neither torch nor Lightning (but for a GPU
check). Types, choices and unknown keys were already checked by the schemas in config.py while Hydra
composed the config; the settings dataclasses of this repository's models and data check their own values
here (check_settings); a user's own model or data module, once the build imports it (config/classes.py).
"""

from __future__ import annotations

import dataclasses
import sys
import typing

from omegaconf import DictConfig, OmegaConf

from transformer_lab.choices import Choice, check_choice, check_flag
from transformer_lab.config.schema import (
    CONF,
    SETTINGS,
    OptimConfig,
    RunConfig,
    TrainerConfig,
    cpu_has_bf16_units,
)
from transformer_lab.data.configs import DATA_DECIDED
from transformer_lab.errors import ConfigError, first_line
from transformer_lab.errors import require as _require

MAX_SEED = 2**32 - 1  # numpy's limit, and so Lightning's seed_everything's

# Keys of a model or data section that select and describe, not settings of its dataclass.
NOT_SETTINGS = ("_target_", "name", "compile", "model_defaults")


def _torch():
    """torch, imported only by the checks that need it (a config is checked before anything heavy loads)."""
    import torch

    return torch


def check_settings(cfg: DictConfig, section: str, config_class: type, strict: bool = True) -> None:
    """A section's own checks of its settings (its dataclass's __post_init__, a ConfigError naming the key),
    before any file is read; a model's sizes that the data decides keep their defaults. `strict`: a key the
    dataclass lacks (added with `+`) is refused."""
    types = typing.get_type_hints(config_class)
    for key in cfg[section] if strict else ():  # one added with `+` (a mistyped one was refused while composing)
        if key not in types and key not in NOT_SETTINGS:
            raise no_such_key(f"{section}.{key}", [k for k in types if k in cfg[section] or k not in DATA_DECIDED])
    settings = {
        k: v
        for k, v in OmegaConf.to_container(cfg[section], resolve=True, enum_to_str=True).items()
        if k in types and k not in NOT_SETTINGS and not (k in DATA_DECIDED and v is None)
    }
    for key, value in settings.items():  # (this repository's options check their choices while composing)
        kind = types[key]
        if isinstance(kind, type) and issubclass(kind, Choice):
            check_choice(f"{section}.{key}", value, list(kind.__members__))
    try:
        config_class(**settings)
    except ConfigError as e:
        key = e.key.removeprefix(f"{section}.")
        raise ConfigError(named(cfg, section, key) if key in cfg[section] else f"{section}.{key}", e.message) from None


def named(cfg: DictConfig, section: str, key: str) -> str:
    """How a setting is named in a message: `model.KEY`, or `data.model_defaults.KEY` where the model took
    its value from the data's suggestion (config.suggested)."""
    node = cfg[section]
    suggested = (
        section == "model"
        and OmegaConf.is_interpolation(node, key)
        and str(_raw(cfg, f"{section}.{key}")).startswith("${suggested:")
        and OmegaConf.select(cfg, f"data.model_defaults.{key}", default=None) is not None
    )
    return f"data.model_defaults.{key}" if suggested else f"{section}.{key}"


def _positive(cfg: DictConfig, section: str, key: str) -> None:
    value = cfg[section][key]
    _require(
        isinstance(value, int) and value >= 1, named(cfg, section, key), f"must be a positive integer, got {value!r}"
    )


def check_pair(cfg: DictConfig, datamodule) -> None:
    """Checks that need the data module (built, not set up) beside the config: its sequences fit the
    model's block_size, and an endless stream of training windows has a step limit."""
    trainer, block_size = cfg.trainer, cfg.model.get("block_size")
    if block_size is not None and datamodule.sequence_length is not None:
        _require(
            datamodule.sequence_length <= block_size,
            datamodule.length_key,
            f"sequences of {datamodule.sequence_length} tokens exceed the model's maximum, "
            f"model.block_size={block_size}",
        )
    if datamodule.endless:  # random windows without end: only steps end it
        what = f"task={cfg.task.name} on data={cfg.data.name}"
        _require(trainer.max_steps >= 1, "trainer.max_steps", f"must be set: {what} draws random windows without end")
        _require(
            isinstance(trainer.val_check_interval, int),
            "trainer.val_check_interval",
            f"must be a number of steps with {what}, got {trainer.val_check_interval!r}",
        )
    elif trainer.max_steps == -1:
        _require(trainer.max_epochs >= 1, "trainer.max_epochs", "set trainer.max_steps or trainer.max_epochs")


def check_resolvable(cfg: DictConfig) -> None:
    """Every value of the config resolved once, as the run will read it: an interpolation naming a key that is
    not there (a user's model YAML without `name:`) or giving a typed setting what it cannot hold
    (`data.model_defaults.n_layer=1.5` into an integer) is one line naming the key, before anything is written."""
    from omegaconf.errors import OmegaConfBaseException

    try:
        OmegaConf.to_container(cfg, resolve=True, throw_on_missing=False)
    except OmegaConfBaseException as e:
        key = e.full_key or "config"
        section, _, name = key.partition(".")
        if section in ("model", "data", "task") and name in cfg[section] and "." not in name:
            key = named(cfg, section, name)
        message = first_line(e)
        if message.startswith("While dereferencing interpolation"):  # (OmegaConf's preamble: the cause follows)
            message = message.partition("': ")[2] or message
        raw = _raw(cfg, key)  # (a key named as the data's suggestion shows no interpolation of the model's)
        raise ConfigError(key, message + (f" (in {raw})" if isinstance(raw, str) and "${" in raw else "")) from None


def _raw(cfg: DictConfig, key: str):
    """What a key is set to before it is resolved (its interpolation), for a message; None where not found."""
    parent, _, name = key.rpartition(".")
    node = OmegaConf.select(cfg, parent, default=None) if parent else cfg
    if not OmegaConf.is_dict(node):
        return None
    return OmegaConf.to_container(node, resolve=False).get(name)


def validate(cfg: DictConfig) -> None:
    """The checks of a composed config that its schemas' types cannot make (config/schema.py RunConfig, and each
    section's): across keys and sections, ranges, and the machine's."""
    check_resolvable(cfg)  # (seed, the schema's first key, first: ${seed} is read by other sections)
    seed = cfg.seed
    data, trainer, optim = cfg.data, cfg.trainer, cfg.optim
    known = [f.name for f in dataclasses.fields(RunConfig)]
    for key in cfg:  # one added with `+`, which Hydra adds whatever the schema (a section's own: its schema's)
        if key not in known:
            raise no_such_key(str(key), known)
    _require(0 <= seed <= MAX_SEED, "seed", f"must be in [0, {MAX_SEED}] (what seed_everything takes), got {seed}")

    suggestions = data.get("model_defaults")
    _require(
        suggestions is None
        or (OmegaConf.is_dict(suggestions) and all(isinstance(v, (int, float)) for v in suggestions.values())),
        "data.model_defaults",
        f"must map model settings to numbers (e.g. {{n_layer: 2}}), got {suggestions!r}",
    )
    # this repository's models, data and tasks check their own settings here; a user's own, once imported
    # (run/build.py)
    for section in ("model", "data", "task"):
        if cfg.get(section) is not None and cfg[section].get("_target_") in SETTINGS:
            check_settings(cfg, section, SETTINGS[cfg[section]._target_])

    # the batch sizes the build reads of every data section (a model's sizes are its dataclass's to check:
    # models/configs.py check_sizes)
    _positive(cfg, "data", "batch_size")
    _require(
        data.get("val_batch_size") is None or data.val_batch_size >= 1,
        "data.val_batch_size",
        f"must be a positive integer or null, got {data.val_batch_size!r}",
    )

    check_flag("overwrite", cfg.overwrite)
    _require(
        not (cfg.get("overwrite") and cfg.ckpt_path is not None),
        "overwrite",
        "deletes what a run directory holds, ckpt_path resumes from it: give one of them",
    )
    sizes = cfg.get("model_sizes")
    _require(
        sizes is None
        or (
            isinstance(sizes, DictConfig)
            and all(k in DATA_DECIDED and isinstance(v, int) and not isinstance(v, bool) for k, v in sizes.items())
        ),
        "model_sizes",
        f"null or integer sizes of {', '.join(DATA_DECIDED)}, e.g. {{vocab_size:50257,block_size:1024}}; got {sizes!r}",
    )
    kernel = cfg.attention_kernel
    _require(
        cfg.get("init_from") is None or cfg.ckpt_path is None,
        "init_from",
        "starts a new run from a checkpoint's weights, ckpt_path resumes a run: give one of them",
    )

    # optim.* and trainer.*: their dataclasses check them (config.py); only keys across sections here
    check_settings(cfg, "optim", OptimConfig)
    check_settings(cfg, "trainer", TrainerConfig, strict=False)  # (+trainer.KEY: Lightning's to check)
    _require(  # (a resume: the tensors its first start loaded, which its checkpoints name)
        optim.get("pretrained_lr") is None or cfg.get("init_from") is not None or cfg.get("ckpt_path") is not None,
        "optim.pretrained_lr",
        "applies to the weights init_from loads: give init_from",
    )

    if trainer.accelerator in ("gpu", "cuda"):
        torch = _torch()
        _require(
            torch.cuda.is_available(),
            "hardware",
            f"trainer.accelerator={trainer.accelerator} asks for a CUDA GPU but torch sees none "
            f"(torch {torch.__version__}, torch.cuda.is_available() is False); use hardware=cpu or hardware=auto",
        )

    precision = str(trainer.precision)

    def gpu() -> bool:  # (imports torch only when a setting needs to know)
        return trainer.accelerator in ("gpu", "cuda") or (
            trainer.accelerator == "auto" and _torch().cuda.is_available()
        )

    on_gpu = precision.startswith(("16", "bf16")) and gpu()
    _require(
        kernel not in ("efficient", "cudnn") or gpu(),
        "attention_kernel",
        f"{kernel} is a CUDA kernel and this run is on the CPU, which has math and flash: use one of them or auto",
    )
    _require(
        not precision.startswith("16") or on_gpu,
        "hardware",
        f"fp16 (trainer.precision={precision}) needs a CUDA GPU: on the CPU Lightning would quietly use bf16 "
        "instead; use hardware=bf16 there",
    )
    _require(
        not precision.startswith("bf16") or not on_gpu or _torch().cuda.is_bf16_supported(),
        "hardware",
        f"bf16 (trainer.precision={precision}) is not supported by this GPU "
        f"({on_gpu and _torch().cuda.get_device_name()}); use hardware=fp16",
    )

    if precision.startswith("bf16") and trainer.accelerator == "cpu" and not cpu_has_bf16_units():
        print(
            f"warning: bf16 autocast (trainer.precision={precision}) on a CPU without bf16 units (no AMX or "
            "AVX512-BF16 flag) is emulated, many times slower than float32: hardware=cpu_bf16 uses bf16 only "
            "where the units are",
            file=sys.stderr,
            flush=True,
        )

    for name, callback in (cfg.get("callbacks") or {}).items():  # settings left by an experiment or a `+` override
        # ema, grokfast: an option to add; else part of callbacks=default
        option = (CONF / "callbacks" / f"{name}.yaml").is_file()
        _require(
            callback is None or "_target_" in callback,
            f"callbacks.{name}",
            f"sets {', '.join(callback or {}) or 'nothing'} of a callback the chosen callbacks do not add (no "
            f"_target_): {f'add it, e.g. callbacks=[default,{name}]' if option else 'keep callbacks=default'}, "
            f"or set callbacks.{name}=null",
        )


def no_such_key(key: str, known) -> ConfigError:
    """The one message for a key that is not there, whether mistyped (Hydra refuses it while composing) or
    added with `+` (refused by the checks): what it may have meant, else what there is."""
    import difflib

    parent, _, name = key.rpartition(".")
    prefix = f"{parent}." if parent else ""
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.7)
    hint = f"did you mean {prefix}{close[0]}?" if close else f"{parent or 'the config'} has: {', '.join(known)}"
    return ConfigError(key, f"no such key; {hint}" if close or known else "no such key")
