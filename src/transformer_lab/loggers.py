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


def wandb_identity(cfg: DictConfig, section: DictConfig) -> dict:
    """A W&B run's name (its overrides), group (its sweep, in a multirun) and tags (model, data, hardware),
    wherever its logger section leaves them unset."""
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
        "name": section.name or name,
        "group": section.group or group,
        "tags": list(section.tags or []) + [t for t in tags if t not in (section.tags or [])],
    }


def build_loggers(cfg: DictConfig, runs: dict | None = None) -> tuple[dict, dict]:
    """The run's loggers by section, one per section of `logger` (`logger=[wandb,csv]`: both), and the
    settings each was built with (W&B: name, group, tags and offline filled in). `runs`: the runs (version
    and name) a resumed run's loggers go on with (its checkpoint's, callbacks/logger_versions.py)."""
    loggers, settings = {}, {}
    for name, section in (cfg.logger or {}).items():
        if name in (runs or {}):
            same = {key: value for key, value in runs[name].items() if value is not None}
            section = OmegaConf.merge(OmegaConf.to_container(section, resolve=True), same)
        if section._target_.endswith("WandbLogger"):
            section = OmegaConf.merge(section, wandb_identity(cfg, section))
            mode = os.environ.get("WANDB_MODE")
            if not section.offline and mode not in ("online", "offline", "disabled") and not has_wandb_credentials():
                section = OmegaConf.merge(section, {"offline": True})
                log.info(
                    "W&B: no credentials found (WANDB_API_KEY or `wandb login`), logging offline. "
                    "Sync afterwards with: wandb sync %s/wandb/offline-run-*",
                    cfg.paths.output_dir,
                )
        loggers[name] = hydra.utils.instantiate(section)
        settings[name] = OmegaConf.to_container(section, resolve=True)
    return loggers, settings
