"""A run's checks, all of them before anything is written into its directory (main.check_and_run):

- `prepare`: the one validation pass of the config (every value resolved, each section's settings, a resume's
  config from its checkpoint) and the data module's construction (not set up);
- `build_run`: the data set up, the model and task built, a resumed checkpoint or init_from's weights checked
  against them, the optimizer's needs, and each callback's own `check(model, datamodule)` where it declares one.

Only then is the run directory claimed (store/rundir.py); whatever fails after the claim and before the first
training step puts the directory back as it was (main.py). A feature with a check declares it beside itself
(a settings dataclass's __post_init__, a task's model_needs, a callback's `check`) and gets it run here."""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from transformer_lab.config.checks import validate
from transformer_lab.errors import ConfigError
from transformer_lab.store.checkpoint import nothing_to_do
from transformer_lab.store.rundir import check_claim, first_process

log = logging.getLogger(__name__)


@dataclass
class Prepared:
    """A run's config, checked, and what was built for it before its directory was claimed."""

    cfg: DictConfig  # the config to run: a resume's is its checkpoint's config with the command line's changes
    resumed: Any  # the checkpoint it resumes (resume.Resumed), or None
    overrides: list[str] | None  # what the config is composed from (checkpoints keep them)
    recomposed: bool  # cfg is not the one Hydra composed (a resume's), to be recorded in the run's .hydra/
    datamodule: Any
    model: Any = None  # build_run's: the model, the task and the callbacks' instances
    task: Any = None
    callbacks: dict = field(default_factory=dict)  # {name: callback}, built once (prepare), checked (build_run)
    hydra: Any = None  # Hydra's runtime config (run/main.py's job reads it), None outside a Hydra app
    settled: bool = False  # a resume with nothing to do: said so, and nothing is built


def prepare(
    config: DictConfig, hydra: DictConfig | None = None, run_dir: Path | None = None, key: str = "hydra.run.dir"
) -> Prepared:
    """The one validation pass of a run's config (a resume's: the one its checkpoint's run trained, with this
    command's changes; init_from=hf:'s: the sizes that checkpoint gives the model), and its data module's
    construction: what needs no torch first (a new run's mistakes answer before torch is imported), then the
    model's, task's and data's declarations and settings, and the Trainer's arguments. Last, what the claim of
    `run_dir` (default: paths.output_dir; `key`: the setting that names it) would refuse, or a resume with
    nothing to do (`settled`). `hydra`: Hydra's runtime config (what composed this one), None outside Hydra."""
    from transformer_lab.run.resume import resume_config

    cfg, resumed, overrides, hydra = resume_config(
        config, hydra
    )  # (a new run's is its own: nothing read, torch not imported)
    if str(cfg.get("init_from") or "").startswith("hf:"):  # a Transformers checkpoint decides the model's settings
        from transformer_lab.pretrained.load import apply

        validate(cfg)  # (the command line's mistakes before the checkpoint is read)
        cfg, overrides = apply(cfg, overrides)
    validate(cfg)
    # (imports torch and Lightning: a mistake is told first)
    from transformer_lab.config.classes import built_callbacks, check_buildable

    searchpath = tuple(hydra.searchpath) if hydra is not None else ()
    datamodule = check_buildable(cfg, searchpath)
    prepared = Prepared(
        cfg, resumed, overrides, cfg is not config, datamodule, callbacks=built_callbacks(cfg), hydra=hydra
    )
    prepared.settled = settled_before_building(prepared, run_dir or Path(cfg.paths.output_dir), key)
    return prepared


def build_run(prepared: Prepared) -> Prepared:
    """The data set up, the model, task and callbacks built, and every check that needs them: run before the
    directory is claimed, in the order and with the seed a run has always built in (the same weights)."""
    import lightning as L
    import torch

    from transformer_lab.config.compatibility import check_same_data, check_same_files, check_state_fits
    from transformer_lab.errors import require as _require
    from transformer_lab.run.build import build, init_weights
    from transformer_lab.tasks.optim import check_optimizer

    cfg, resumed = prepared.cfg, prepared.resumed
    L.seed_everything(cfg.seed, workers=True, verbose=False)
    if torch.cuda.is_available():
        torch.set_float32_matmul_precision("high")
    files = None
    if resumed:  # the files it trained on, before they are read and encoded (where the dataset can name them)
        try:
            files = prepared.datamodule.data.data_files()
        except Exception:  # noqa: BLE001  (a dataset that knows its files only once set up: checked below)
            files = None
        if files:  # (none named before setup: checked once it is set up)
            check_same_files(resumed.path, resumed.meta, files)
    datamodule, model, task = build(cfg, prepared.overrides, datamodule=prepared.datamodule)
    check_optimizer(str(cfg.optim.name), model)
    for name, callback in prepared.callbacks.items():
        checked_callback(name, callback, model, datamodule)
    if cfg.get("init_from"):  # (a new run's: a resume's weights are its checkpoint's, checked next)
        report, misfits, task.pretrained = init_weights(model, cfg.init_from, datamodule.data.checkpoint_meta())
        _require(not (misfits and cfg.init_strict), "init_strict", f"not every tensor fits: {report}")
        # (init_strict=false takes what fits; nothing fitting is a wrong source, not a start from its weights)
        _require(bool(task.pretrained), "init_from", f"no tensor of it fits this model: {report}")
        (log.warning if misfits else log.info)(report)  # (tensors left as initialised: a warning, in train.log too)
    if resumed:
        check_same_data(resumed.path, resumed.meta, datamodule, files_checked=bool(files))
        check_state_fits(resumed.path, resumed.shapes, resumed.config, cfg, task)
    prepared.datamodule, prepared.model, prepared.task = datamodule, model, task
    return prepared


def checked_callback(name: str, callback, model, datamodule):
    """A callback's own checks of the model and data it will see (its `check(model, datamodule)`, where it has
    one: docs/extending.md), run before the run directory is claimed. Its refusal (a ValueError or UserError) is
    one line naming `callbacks.NAME`, or `callbacks.NAME.KEY` where it says "KEY: why" of one of its settings."""
    from transformer_lab.errors import ConfigError, UserError, first_line

    check = getattr(callback, "check", None)
    if callable(check):
        try:
            check(model, datamodule)
        except (UserError, ValueError) as e:
            setting, _, why = first_line(e).partition(": ")
            if why and setting.isidentifier() and hasattr(callback, setting):
                raise ConfigError(f"callbacks.{name}.{setting}", why) from None
            raise ConfigError(f"callbacks.{name}", first_line(e)) from None
    return callback


def settled_before_building(prepared: Prepared, run_dir: Path, key: str) -> bool:
    """A resume with nothing to do (its checkpoint at the step limit of a completed run), said so; else what
    the claim of its run directory would refuse is refused now, before the run builds anything."""

    if not first_process():
        return False
    cfg, resumed = prepared.cfg, prepared.resumed
    if resumed is not None and nothing_to_do(cfg, resumed):
        print(
            f"{resumed.path} is at step {resumed.step}, the run's trainer.max_steps={cfg.trainer.max_steps}, and "
            f"its run completed: nothing to do, {run_dir} is left as it is (a higher trainer.max_steps trains it "
            "further)",
            file=sys.stderr,
        )
        return True
    if resumed is not None and 0 < cfg.trainer.max_steps < resumed.step:  # (Lightning would stop at once: "completed")
        raise ConfigError(
            "trainer.max_steps",
            f"{resumed.path} is at step {resumed.step}, past trainer.max_steps={cfg.trainer.max_steps}: a resume "
            "trains on from its step; give a higher trainer.max_steps, or leave it out (the run's own)",
        )
    check_claim(run_dir, key, Path(resumed.path) if resumed else None, bool(cfg.get("overwrite")))
    return False
