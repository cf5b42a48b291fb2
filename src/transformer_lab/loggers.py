"""The experiment logger of a run, and W&B's identity for it: name, group, tags, and offline without
credentials (never a prompt). The W&B sweeper imports `has_wandb_credentials` from here."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

log = logging.getLogger(__name__)


def has_wandb_credentials() -> bool:
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        import netrc

        return netrc.netrc().authenticators("api.wandb.ai") is not None
    except (OSError, netrc.NetrcParseError):
        return False


def wandb_identity(cfg: DictConfig) -> dict:
    """A W&B run's name (its overrides), group (its sweep, in a multirun) and tags (model, data, hardware),
    wherever the logger config leaves them unset."""
    name, group, hardware = None, None, None
    if HydraConfig.initialized():
        hydra_cfg = HydraConfig.get()
        overrides = [o for o in hydra_cfg.overrides.task if not o.startswith(("hydra.", "logger."))]
        name = ",".join(overrides) or None
        if hydra_cfg.mode == RunMode.MULTIRUN:
            group = str(Path(hydra_cfg.sweep.dir))
        hardware = hydra_cfg.runtime.choices.get("hardware")
    tags = [f"model={cfg.model.name}", f"data={cfg.data.name}"] + ([f"hardware={hardware}"] if hardware else [])
    return {
        "name": cfg.logger.name or name,
        "group": cfg.logger.group or group,
        "tags": list(cfg.logger.tags or []) + [t for t in tags if t not in (cfg.logger.tags or [])],
    }


def build_logger(cfg: DictConfig) -> tuple:
    """The logger and the settings it was built with (W&B: name, group, tags and offline filled in)."""
    if not cfg.logger:
        return False, None
    logger_cfg = cfg.logger
    if logger_cfg._target_.endswith("WandbLogger"):
        logger_cfg = OmegaConf.merge(logger_cfg, wandb_identity(cfg))
        mode = os.environ.get("WANDB_MODE")
        if not logger_cfg.offline and mode not in ("online", "offline", "disabled") and not has_wandb_credentials():
            logger_cfg = OmegaConf.merge(logger_cfg, {"offline": True})
            log.info(
                "W&B: no credentials found (WANDB_API_KEY or `wandb login`), logging offline. "
                "Sync afterwards with: wandb sync %s/wandb/offline-run-*",
                cfg.paths.output_dir,
            )
    return hydra.utils.instantiate(logger_cfg), OmegaConf.to_container(logger_cfg, resolve=True)
