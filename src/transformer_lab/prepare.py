"""A run's one validation pass and its one construction of the data module (`prepare`), before anything is
written: what the train command (main.py) and each of its processes (train.py) start from."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig

from transformer_lab.validate import validate


@dataclass
class Prepared:
    """A run's config, checked, and its data module built (not set up): what `prepare` hands the run."""

    cfg: DictConfig  # the config to run: a resumed run's is composed again from its checkpoint's overrides
    resumed: Any  # the checkpoint it resumes (resume.Resumed), or None
    overrides: list[str] | None  # what the config is composed from (checkpoints keep them)
    recomposed: bool  # cfg is a new composition (a resume's), to be recorded in the run's .hydra/
    datamodule: Any


def prepare(config: DictConfig) -> Prepared:
    """The one validation pass of a run, and its one construction of the data module: what needs no torch
    first (a new run's mistakes answer before torch is imported), then the config a resume composes from
    its checkpoint, the model's, task's and data's declarations and settings, and the Trainer's arguments."""
    validated = config.get("ckpt_path") is None
    if validated:
        validate(config)
    from transformer_lab.factory import check_buildable  # (imports torch and Lightning)
    from transformer_lab.resume import resume_config

    cfg, resumed, overrides = resume_config(config)
    if str(cfg.get("init_from") or "").startswith("hf:"):  # a Transformers checkpoint decides the model's settings
        from transformer_lab.pretrained.load import apply

        cfg, overrides = apply(cfg, overrides)
    if cfg is not config or not validated:
        validate(cfg)
    return Prepared(cfg, resumed, overrides, cfg is not config, check_buildable(cfg))
