"""Resuming a run from its checkpoint: the config it was trained with, and this command line's changes on top.

`python train.py ckpt_path=last hydra.run.dir=RUN trainer.max_steps=N` needs no other override. The resumed
config is the checkpoint's resolved config (what was trained), not the YAML files as they are now: an edited
model YAML or preset does not change a resumed run. The command line's changes are found by composing the
run's recorded overrides (the checkpoint keeps them; older ones: RUN/.hydra/overrides.yaml) with and without
this command's, and only the keys of CHANGEABLE_ON_RESUME may change (docs/runs.md); any other is refused,
naming it. The learning-rate schedule keeps its horizon: a run that decayed over its trainer.max_steps still
does when a resume raises them (optim.decay_steps=N on the resume is the explicit choice of a longer one).
What may not change of the model, its tensors and the data is checked in config/compatibility.py.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from omegaconf import DictConfig, OmegaConf, open_dict

from transformer_lab.config.compatibility import check_resume, resumed_config
from transformer_lab.errors import ConfigError, first_line
from transformer_lab.store.checkpoint import Resumed, checkpoint_path, open_resumed
from transformer_lab.store.origins import override_key, searchpath_override, typed_overrides

log = logging.getLogger(__name__)


def merge_overrides(base: list[str], top: list[str]) -> list[str]:
    """`base` then `top`, one override per key: a key in both takes top's value (and base's `+`, which
    added it to the config, so it is added again)."""
    base_form = {override_key(o): o for o in base}
    merged = [o for o in base if override_key(o) not in {override_key(t) for t in top}]
    for override in top:
        added = base_form.get(override_key(override), "").startswith("+") and not override.startswith(("+", "~"))
        merged.append(f"+{override}" if added else override)
    return merged


def requeued(cfg: DictConfig) -> bool:
    """A SLURM job started again after a requeue (preemption, `scontrol requeue`, its time limit near: see
    callbacks/interrupt.py) whose run directory holds the checkpoint it stopped at."""
    return (
        int(os.environ.get("SLURM_RESTART_COUNT") or 0) > 0
        and cfg.ckpt_path is None
        and (Path(cfg.paths.output_dir) / "checkpoints" / "last.ckpt").is_file()
    )


def resume_config(
    cfg: DictConfig, hydra: DictConfig | None
) -> tuple[DictConfig, Resumed | None, list[str] | None, DictConfig | None]:
    """The config to run, the checkpoint it resumes (None for a new run), the overrides the run's config is
    composed from (kept in its checkpoints; None outside a Hydra app: `hydra`, its runtime, None), and Hydra's
    config for the run's record (a resume's: its choices and config sources those of its recomposed config).
    A requeued SLURM job resumes its own run directory's last.ckpt (its first start's init_from is in there)."""
    overrides = None
    if hydra is not None:  # what composed this config: the command line and the search path it gives
        overrides = [*typed_overrides(hydra), *searchpath_override(hydra.searchpath)]
    if requeued(cfg):
        log.info("SLURM requeued this job (restart %s): resuming from its last.ckpt", os.environ["SLURM_RESTART_COUNT"])
        with open_dict(cfg):
            cfg.ckpt_path, cfg.init_from = "last", None
        if overrides is not None:
            started = ("init_from", "init_strict", "ckpt_path")
            overrides = [o for o in overrides if override_key(o) not in started] + ["ckpt_path=last"]
    path = checkpoint_path(cfg)
    if path is None:
        return cfg, None, overrides, hydra
    resumed = open_resumed(path, overrides, cfg.paths.root_dir)
    stored = resumed.overrides
    # Another data or model option cannot resume this checkpoint (nor be composed on its run's overrides).
    chosen = {o.split("=", 1)[0].lstrip("+"): o.split("=", 1)[1] for o in overrides or () if "=" in o}
    for group in ("data", "model", "task"):
        option = chosen.get(group, resumed.config[group]["name"]) if overrides is not None else cfg[group].name
        if option != resumed.config[group]["name"]:
            raise ConfigError(
                "ckpt_path",
                f"{path} was trained with {group}={resumed.config[group]['name']}, this run has {group}={option}",
            )
    typed = [override_key(o) for o in typed_overrides(hydra)] if hydra is not None else []
    if stored is not None and overrides is not None:
        where = [o for o in overrides if override_key(o) == "hydra.searchpath"]  # (the groups' folders now)
        overrides = merge_overrides(stored, overrides)
        again = hydra.job.config_name, path
        trained = _composed_again(merge_overrides(stored, where), *again)  # the run's overrides with today's YAML ...
        given = _composed_again(
            overrides, *again, hydra=True
        )  # ... and with this command's on top: the difference is its
        with open_dict(given):
            composed = given.pop("hydra").runtime  # (what composed it, for the run's record: not this command line's)
        hydra = OmegaConf.merge(hydra, {"runtime": {k: composed[k] for k in ("choices", "config_sources")}})
        cfg = resumed_config(trained, given, resumed.config, resumed.path, typed)
    else:
        check_resume(resumed.path, resumed.config, cfg, {}, typed)
    return cfg, resumed, overrides, hydra


def _composed_again(overrides: list[str], config_name: str, path: Path, hydra: bool = False) -> DictConfig:
    """The config composed again from a run's overrides (its search path among them, store/origins.py); `hydra`:
    with Hydra's node (its choices and config sources)."""
    from hydra import compose

    try:
        return compose(config_name=config_name, overrides=overrides, return_hydra_config=hydra)
    except Exception as e:  # noqa: BLE001  (Hydra's: an option or key the config groups no longer have)
        from hydra.errors import MissingConfigException

        what = first_line(e)
        if isinstance(e, MissingConfigException) and e.missing_cfg_file:
            group, _, option = e.missing_cfg_file.rpartition("/")
            what = f"{group}={option} is in none of its config groups' folders (hydra.searchpath)"
        raise ConfigError("ckpt_path", f"{path}: its run's config cannot be composed again: {what}") from None
