"""lightning.Trainer's keyword arguments from the `trainer` section, and their check before a run starts:
whatever Lightning would refuse is refused first, as one line naming the key."""

from __future__ import annotations

import logging
import warnings

import hydra
from omegaconf import DictConfig, OmegaConf

from transformer_lab.errors import ConfigError


def trainer_arguments(cfg: DictConfig) -> dict:
    """lightning.Trainer's keyword arguments from `trainer`; a profiler given as a config is built."""
    arguments = OmegaConf.to_container(cfg.trainer, resolve=True)
    if OmegaConf.is_dict(cfg.trainer.profiler):
        arguments["profiler"] = hydra.utils.instantiate(cfg.trainer.profiler)
    return arguments


def _refusal(arguments: dict) -> str | None:
    """Lightning's complaint about a Trainer of these arguments (its first line), or None. Building one
    writes nothing and starts no process (~10 ms)."""
    import lightning as L

    quiet = [logging.getLogger(name) for name in ("lightning.pytorch.utilities.rank_zero", "lightning.fabric")]
    levels = [logger.level for logger in quiet]
    try:
        for logger in quiet:
            logger.setLevel(logging.ERROR)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            L.Trainer(**arguments, logger=False, enable_checkpointing=False)
        return None
    except Exception as e:  # noqa: BLE001  (Lightning's refusals come as many types)
        return (str(e).strip().splitlines() or [type(e).__name__])[0]
    finally:
        for logger, level in zip(quiet, levels):
            logger.setLevel(level)


def check_trainer(cfg: DictConfig) -> None:
    """Builds the run's Trainer once, before anything else exists: a value Lightning refuses becomes a
    ConfigError naming its key (the one that fails alone; `trainer` where only a combination fails)."""
    arguments = trainer_arguments(cfg)
    problem = _refusal(arguments)
    if problem is None:
        return
    for key, value in arguments.items():
        if (alone := _refusal({key: value})) is not None:
            raise ConfigError(f"trainer.{key}", alone)
    raise ConfigError("trainer", f"{problem} ({', '.join(f'{k}={v}' for k, v in arguments.items() if v is not None)})")
