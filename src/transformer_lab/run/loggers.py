"""The experiment logger of a run, and W&B's identity for it: name, group, tags, and offline without
credentials (never a prompt). The W&B sweeper imports `has_wandb_credentials` from here."""

from __future__ import annotations

import csv
import logging
import os
import re
import sys
import warnings
from pathlib import Path

from hydra.types import RunMode
from hydra.utils import instantiate
from lightning.pytorch.loggers import CSVLogger as LightningCSVLogger
from lightning.pytorch.loggers import WandbLogger as LightningWandbLogger
from omegaconf import DictConfig, OmegaConf

from transformer_lab.config.schema import is_seed
from transformer_lab.store.origins import typed_overrides

log = logging.getLogger(__name__)


def has_wandb_credentials() -> bool:
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        import netrc

        return netrc.netrc().authenticators("api.wandb.ai") is not None
    except (OSError, netrc.NetrcParseError):
        return False


W_AND_B_LIMIT = 64  # characters of a job_type or a tag


def swept(overrides: list[str], argv: list[str], params) -> list[str]:
    """A multirun job's overrides of the settings its sweep varies, seeds left out: those the command line
    gave several values (`a,b`, `range(...)`, `choice(...)`) or the sweeper's `params` name."""
    keys = set(params or {})
    for argument in argv:
        key, sep, value = argument.partition("=")
        if sep and not value.startswith(("[", "{")) and ("," in value or re.match(r"\w+\(", value)):
            keys.add(key.lstrip("+~"))
    return [o for o in overrides if o.split("=", 1)[0].lstrip("+~") in keys and not is_seed(o.split("=", 1)[0])]


def wandb_identity(cfg: DictConfig, section: DictConfig, hydra: DictConfig | None) -> dict:
    """A W&B run's name (its overrides), group (its sweep, in a multirun), job_type (the settings its sweep
    varies, seeds left out: W&B's grouping by job type averages a configuration's seeds) and tags (model,
    data, hardware, and those settings), wherever its logger section leaves them unset."""
    name, group, hardware, varied = None, None, None, []
    if hydra is not None:
        overrides = [o for o in typed_overrides(hydra) if not o.startswith(("hydra.", "logger."))]
        name = ",".join(overrides) or None
        if hydra.mode == RunMode.MULTIRUN:
            group = str(Path(hydra.sweep.dir))
            varied = swept(overrides, sys.argv[1:], hydra.sweeper.get("params"))
        hardware = hydra.runtime.choices.get("hardware")
    tags = [f"model={cfg.model.name}", f"data={cfg.data.name}"] + ([f"hardware={hardware}"] if hardware else [])
    tags += [t for t in varied if len(t) <= W_AND_B_LIMIT]
    return {
        "name": section.name or name,
        "group": section.group or group,
        # (a job_type longer than W&B takes, an Optuna trial's many digits, would group nothing: none then)
        "job_type": section.get("job_type")
        or (",".join(varied) if 0 < len(",".join(varied)) <= W_AND_B_LIMIT else None),
        "tags": list(dict.fromkeys([*(section.tags or []), *tags])),  # (each once: a swept model=gpt too)
    }


def build_loggers(cfg: DictConfig, runs: dict | None = None, hydra: DictConfig | None = None) -> tuple[dict, dict]:
    """The run's loggers by section, one per section of `logger` (`logger=[wandb,csv]`: both), and the
    settings each was built with (W&B: name, group, job_type, tags and offline filled in). `runs`: the runs a
    resumed run's loggers go on with (its checkpoint's, callbacks/logger_versions.py): their version, and the
    name, group, job_type and tags they were built with, which the resume keeps (its own command line is no
    sweep's: it would tell neither the sweep's group nor the settings it varies); a tag the resume's command
    line adds (logger.wandb.tags) joins them."""
    loggers, settings = {}, {}
    for name, section in (cfg.logger or {}).items():
        same = {key: value for key, value in (runs or {}).get(name, {}).items() if value is not None}
        given = list(section.get("tags") or [])
        if name in (runs or {}):
            section = OmegaConf.merge(OmegaConf.to_container(section, resolve=True), same)
        if section._target_.endswith("WandbLogger"):
            section = OmegaConf.merge(section, wandb_identity(cfg, section, hydra))
            if "tags" in same:  # (as recorded, not with what this command's own composition would add)
                section.tags = list(dict.fromkeys([*same["tags"], *given]))
            mode = os.environ.get("WANDB_MODE")
            if not section.offline and mode not in ("online", "offline", "disabled") and not has_wandb_credentials():
                section = OmegaConf.merge(section, {"offline": True})
                log.info(
                    "W&B: no credentials found (WANDB_API_KEY or `wandb login`), logging offline. "
                    "Sync afterwards with: wandb sync %s/wandb/offline-run-*",
                    cfg.paths.output_dir,
                )
        loggers[name] = instantiate(section)
        settings[name] = OmegaConf.to_container(section, resolve=True)
    return loggers, settings


class CSVLogger(LightningCSVLogger):
    """Lightning's CSV logger, which a resumed run continues: Lightning's deletes the metrics.csv it finds, and
    the interrupted run's rows with it. This one keeps the rows an earlier process of the run wrote to metrics.csv (the directory is the run's own:
    store/rundir.py) up to where this one starts logging; rows from after the checkpoint it resumed (steps the
    interrupted process logged, and this one logs again) are dropped, as metrics.jsonl drops them."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        earlier = Path(self.log_dir) / "metrics.csv"
        self._earlier: list[dict] = []
        if earlier.is_file():
            with open(earlier, newline="") as f:
                self._earlier = [{k: v for k, v in row.items() if v != ""} for row in csv.DictReader(f)]

    @property
    def experiment(self):
        # Lightning warns that it "will delete" earlier log files in the folder; this logger keeps them (above).
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r".*Previous log files in this directory will be deleted")
            return super().experiment

    def log_metrics(self, metrics: dict, step: int | None = None) -> None:
        if self._earlier:
            kept = [row for row in self._earlier if step is None or float(row.get("step", "nan")) < step]
            self.experiment.metrics[:0] = kept
            self._earlier = []
        super().log_metrics(metrics, step)

    def finalize(self, status: str) -> None:
        if self._earlier and self._experiment is not None:  # (a resume that logged nothing: the rows stay as they were)
            self.experiment.metrics[:0] = self._earlier
            self._earlier = []
        super().finalize(status)


class WandbLogger(LightningWandbLogger):
    """Lightning's W&B logger, quiet: W&B's banner, sync hints and end-of-run history stay out of the console
    (they are in the run's files; build_loggers above prints the one sync hint), and no "anonymous setting has no
    effect" warning: Lightning passes `anonymous=None` to wandb.init, which W&B 0.31 warns about since it
    removed anonymous mode (https://github.com/wandb/wandb/pull/10909). Lightning's arguments for wandb.init
    are a private attribute: tests/unit/test_upstream.py fails once Lightning stops passing `anonymous`."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("settings", {"silent": True})  # (WandbLogger passes its other arguments to wandb.init)
        super().__init__(*args, **kwargs)
        self._wandb_init.pop("anonymous", None)


def logger_versions(cfg: DictConfig, resumed) -> dict:
    """The loggers' runs a resumed run goes on with: its checkpoint's, when that is this run directory's own
    (a checkpoint resumed into another directory starts new runs there)."""
    if resumed is None or not Path(resumed.path).absolute().is_relative_to(Path(cfg.paths.output_dir).absolute()):
        return {}
    return resumed.loggers
