"""The run: validate the config, build data, model, task, logger and callbacks, fit, write summary.json."""

from __future__ import annotations

import logging
import os
import resource
import sys
import time
import warnings
from contextlib import contextmanager
from pathlib import Path

import hydra
import lightning as L
import torch
from lightning.fabric.strategies.launchers import subprocess_script as fabric_launcher
from lightning.pytorch.callbacks import ProgressBar
from lightning.pytorch.strategies.launchers import subprocess_script as pytorch_launcher
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from transformer_lab.callbacks import GracefulInterrupt, History, Summary, Throughput
from transformer_lab.checkpoint import AtomicCheckpointIO, check_compatible, read_checkpoint
from transformer_lab.errors import ConfigError, UserError, exit_on_user_error
from transformer_lab.factory import build
from transformer_lab.validate import validate

log = logging.getLogger(__name__)


class _NoAdverts(logging.Filter):
    """Drops Lightning's "💡 Tip: ... try installing litlogger" line from every run's output."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("💡")


logging.getLogger("lightning.pytorch.utilities.rank_zero").addFilter(_NoAdverts())
# Lightning 2.6 calls a torch pytree API that torch 2.13 deprecates; nothing for a user to act on.
warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)")


def ddp_process_command(local_rank: int) -> tuple[list[str], str]:
    """How Lightning's DDP launcher starts the other processes of this job under Hydra: this job alone, as
    a single run, in this job's directory. (Lightning's own command repeats the whole command line, so in
    a multirun every process would start the entire sweep again: pytorch-lightning #11300, hydra #2070.)"""
    hydra_cfg = HydraConfig.get()
    command = [sys.executable, os.path.abspath(sys.argv[0]), *hydra_cfg.overrides.task,
               f'hydra.run.dir="{hydra_cfg.runtime.output_dir}"', f"hydra.job.name=ddp_process_{local_rank}",
               "hydra.output_subdir=null"]  # the job's .hydra/ record is rank zero's to write
    return command, hydra_cfg.runtime.cwd


fabric_launcher._hydra_subprocess_cmd = ddp_process_command
pytorch_launcher._hydra_subprocess_cmd = ddp_process_command


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
    return {"name": cfg.logger.name or name, "group": cfg.logger.group or group,
            "tags": list(cfg.logger.tags or []) + [t for t in tags if t not in (cfg.logger.tags or [])]}


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
            log.info("W&B: no credentials found (WANDB_API_KEY or `wandb login`), logging offline. "
                     "Sync afterwards with: wandb sync %s/wandb/offline-run-*", cfg.paths.output_dir)
    return hydra.utils.instantiate(logger_cfg), OmegaConf.to_container(logger_cfg, resolve=True)


def resolve_ckpt_path(cfg: DictConfig) -> str | None:
    """The checkpoint to resume from, checked now: readable, and of this run's model and data. (Lightning
    reads the file again to restore it; checking first is what keeps a bad file's error one line.)"""
    if cfg.ckpt_path is None:
        return None
    path = Path(cfg.ckpt_path)
    if cfg.ckpt_path == "last":
        path = Path(cfg.paths.output_dir) / "checkpoints" / "last.ckpt"
        if not path.exists():
            raise ConfigError("ckpt_path", f"`last` means {path}, which does not exist; point hydra.run.dir at "
                                           "the directory of the run to resume")
    elif not path.is_file():
        raise ConfigError("ckpt_path", f"no checkpoint file at {path}")
    try:
        checkpoint = read_checkpoint(path)
    except UserError as e:
        raise ConfigError("ckpt_path", str(e)) from None
    check_compatible(checkpoint, OmegaConf.to_container(cfg.model, resolve=True), cfg.data.name, str(path))
    return str(path)


def peak_memory_mb() -> float:
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def run(cfg: DictConfig, start_time: float | None = None) -> dict:
    """Train one configuration and return its summary (also written to summary.json in the run dir)."""
    start_time = start_time or time.time()
    validate(cfg)
    ckpt_path = resolve_ckpt_path(cfg)
    output_dir = Path(cfg.paths.output_dir)
    L.seed_everything(cfg.seed, workers=True, verbose=False)
    if torch.cuda.is_available():
        torch.set_float32_matmul_precision("high")

    datamodule, model, task = build(cfg)
    summary = Summary()
    interrupt = GracefulInterrupt(output_dir / "checkpoints" / "last.ckpt")
    callbacks = [hydra.utils.instantiate(c) for c in (cfg.callbacks or {}).values()]
    callbacks += [summary, History(output_dir / "metrics.jsonl"), interrupt]
    if not cfg.trainer.enable_progress_bar:  # Lightning refuses a progress bar callback then
        callbacks = [c for c in callbacks if not isinstance(c, ProgressBar)]
    throughput = next((c for c in callbacks if isinstance(c, Throughput)), None)
    logger, logger_settings = build_logger(cfg)
    trainer = L.Trainer(**OmegaConf.to_container(cfg.trainer), logger=logger, callbacks=callbacks,
                        plugins=[AtomicCheckpointIO()], default_root_dir=str(output_dir))
    if trainer.logger and trainer.is_global_zero:
        trainer.logger.log_hyperparams({**OmegaConf.to_container(cfg, resolve=True), "logger": logger_settings})

    status = "failed"
    try:
        trainer.fit(task, datamodule=datamodule, ckpt_path=ckpt_path, weights_only=True)
        if datamodule.has_test_split:  # evaluated once, with the best weights
            best = next((c.best_model_path for c in trainer.checkpoint_callbacks if c.best_model_path), None)
            trainer.test(task, datamodule=datamodule, ckpt_path=best, weights_only=True)
        status = "completed"
    except SystemExit:  # SIGTERM (and Ctrl-C, made one by GracefulInterrupt) stop Lightning this way
        status = "interrupted"
        raise SystemExit(130 if interrupt.by_ctrl_c else 143) from None
    finally:
        result = {}
        if trainer.is_global_zero:
            result = summary.write(
                output_dir / "summary.json",
                status=status,
                tokens_per_sec=throughput.tokens_per_sec if throughput else None,
                flops_per_token=round(throughput.flops_per_token) if throughput and throughput.flops_per_token else None,
                mfu=throughput.mfu if throughput else None,
                wall_time_s=round(time.time() - start_time, 3),
                peak_mem_mb=round(peak_memory_mb(), 1),
                n_params=sum(p.numel() for p in model.parameters()),  # a tied weight counts once
                global_step=trainer.global_step,
                **({"padding_fraction": round(datamodule.padding_fraction, 4)}
                   if datamodule.padding_fraction is not None else {}),
            )
            log.info("summary: %s", output_dir / "summary.json")
        if type(logger).__name__ == "WandbLogger" and trainer.is_global_zero:
            # Otherwise the next job of a multirun would log into this run (WandbLogger reuses an open run).
            import wandb

            wandb.finish(exit_code=0 if status == "completed" else 1)
    return result


def output_dir_problem(argv: list[str]) -> str | None:
    """Why the run directory cannot be created, checked before Hydra tries (its failure is a traceback)."""
    dirs = [(key.lstrip("+~"), value) for key, _, value in (a.partition("=") for a in argv)
            if key.lstrip("+~") in ("hydra.run.dir", "hydra.sweep.dir")]
    for key, value in dirs or [("hydra.run.dir", "outputs")]:
        existing = Path(value.split("${")[0] or ".").absolute()
        while not existing.exists():
            existing = existing.parent
        if not existing.is_dir():
            return f"{key}={value}: cannot create the run directory, {existing} is a file"
        if not os.access(existing, os.W_OK | os.X_OK):
            return f"{key}={value}: cannot create the run directory, {existing} is not writable"
    return None


DDP_ENVIRONMENT = ("MASTER_ADDR", "MASTER_PORT", "NODE_RANK", "LOCAL_RANK", "WORLD_SIZE", "RANK", "LOCAL_WORLD_SIZE")


@contextmanager
def distributed_job():
    """One multirun job's DDP leaves nothing for the next: Lightning's launcher sets these variables in the
    launching process (the next job would then take itself for a child and start no processes) and keeps
    its process group open."""
    saved = {key: os.environ.get(key) for key in DDP_ENVIRONMENT}
    try:
        yield
    finally:
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def submitit_tasks_as_processes() -> None:
    """Under hydra/launcher=slurm_local every task of a job runs the job, as srun's tasks do on a cluster.
    There Lightning's SLURMEnvironment knows each task's rank; here submitit's variables become torch's
    (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR/PORT), which Lightning takes as processes started for it."""
    if int(os.environ.get("SUBMITIT_LOCAL_NTASKS", "1")) > 1 and "LOCAL_RANK" not in os.environ:
        from submitit.helpers import TorchDistributedEnvironment

        # Lightning picks each task's device from its local rank; variables left by whatever started us give way.
        TorchDistributedEnvironment().export(set_cuda_visible_devices=False, overwrite=True)


class TrialFailed(Exception):
    """A multirun job that could not produce its objective: the sweeper records it as failed and goes on."""


def objective_value(cfg: DictConfig, summary: dict) -> float | None:
    """The metric a sweeper optimises (`objective`, a summary.json key), or None when none is named."""
    if cfg.objective is None:
        return None
    value = summary.get(cfg.objective)
    if not isinstance(value, (int, float)) or value != value:  # missing, or nan
        found = ", ".join(k for k, v in sorted(summary.items()) if isinstance(v, (int, float)))
        raise TrialFailed(f"objective={cfg.objective} is not a number in this run's summary.json (it has: {found})")
    return float(value)


def main(cfg: DictConfig, start_time: float | None = None) -> float | None:
    """Entry for @hydra.main: a user's mistake becomes one clear message and exit code 2; in a multirun it
    fails only its own job (the sweep goes on). Returns the objective for sweepers."""
    if HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN:
        with distributed_job():
            submitit_tasks_as_processes()
            try:  # wall_time_s from the job's start: the process's start was the first job's
                summary = run(cfg, None)
                return objective_value(cfg, summary) if summary else None
            except UserError as e:
                log.error("error: %s", e)
                raise TrialFailed(str(e)) from None
    with exit_on_user_error():
        summary = run(cfg, start_time)
    return objective_value(cfg, summary) if summary else None  # the other DDP processes have no summary
