"""What run/main.py's `main` fits with: the Trainer of a checked and built run (its loggers, the run's own callbacks
beside the config's), and `fitting`, around trainer.fit and trainer.test: a refusal told in one line, a stop said,
summary.json written."""

from __future__ import annotations

import contextlib
import logging
import os
import resource
import time
import warnings
from pathlib import Path

import lightning as L
import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch.callbacks import ModelSummary, ProgressBar
from omegaconf import OmegaConf
from torch.nn.attention import SDPBackend, sdpa_kernel

from transformer_lab.callbacks import (
    GracefulInterrupt,
    History,
    LoggerVersions,
    MovedRun,
    StepAxis,
    Summary,
    Throughput,
    TrainingStarted,
)
from transformer_lab.config.schema import ATTENTION_KERNELS
from transformer_lab.config.trainer import trainer_arguments
from transformer_lab.errors import ConfigError, UserError, first_line
from transformer_lab.run.launch import ddp_process_command  # noqa: F401  (importing it patches Lightning's DDP launcher)
from transformer_lab.run.loggers import build_loggers, logger_versions
from transformer_lab.run.prepare import Prepared
from transformer_lab.store.atomic import atomic_write, note_written
from transformer_lab.store.files import read_json

log = logging.getLogger(__name__)


class _Quiet(logging.Filter):
    """Drops Lightning's lines with nothing for a user here: its "💡 Tip: ... try installing litlogger"
    advert, the TPU and HPU counts (the GPU line stays), that our model summary replaces its own, and a `limit_*`
    setting repeated back ("`Trainer(limit_val_batches=1.0)` was configured so 100% of the batches will be used")."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(
            ("💡", "TPU available", "HPU available", "Trainer already configured", "`Trainer(limit_")
        )


logging.getLogger("lightning.pytorch.utilities.rank_zero").addFilter(_Quiet())
for _name in ("lightning", "lightning.pytorch", "lightning.fabric"):  # its lines go through Hydra's handlers, once
    logging.getLogger(_name).handlers.clear()
    logging.getLogger(_name).propagate = True
# Lightning 2.6 calls a torch pytree API that torch 2.13 deprecates; nothing for a user to act on.
warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)")
# Lightning says so on every machine where SLURM is installed, to each run that is not a SLURM task; here
# hydra/launcher=slurm is the way onto the cluster (README), and a run on the login node is meant.
warnings.filterwarnings("ignore", message=r"The `srun` command is available on your system but is not used")
# A run's checkpoints/ folder is its own (store/rundir.py: a resume, or overwrite=true, alone write there), and
# best.ckpt and last.ckpt are replaced in place (conf/callbacks/default.yaml): nothing to warn of.
warnings.filterwarnings("ignore", message=r"Checkpoint directory .* exists and is not empty")
# Under bf16-mixed the weights stay float32, which is what the model summary's size assumes after this warning.
warnings.filterwarnings("ignore", message=r"Precision bf16-mixed is not supported by the model summary")


def peak_memory_mb() -> float:
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def earlier_summary(output_dir: Path) -> dict:
    """The summary.json a resumed run's directory holds from before, if a readable one."""
    try:
        return read_json(output_dir / "summary.json")
    except UserError:
        return {}


def trainer_for(prepared: Prepared) -> L.Trainer:
    """The Trainer of a run that prepare.prepare checked and build_run built: its loggers (a resume's continue its
    runs), the config's callbacks and the run's own (its summary, history, interrupt handling), its settings."""
    cfg, output_dir = prepared.cfg, Path(prepared.cfg.paths.output_dir)
    log.info("run directory: %s", output_dir)
    if "SLURM_JOB_ID" in os.environ and "SLURM_PROCID" in os.environ:  # a task of a SLURM job (srun)
        env = os.environ
        log.info(
            "SLURM job %s: task %s of %s on node %s",
            env.get("SLURM_ARRAY_JOB_ID", env["SLURM_JOB_ID"])
            + (f"_{env['SLURM_ARRAY_TASK_ID']}" if "SLURM_ARRAY_TASK_ID" in env else ""),
            env["SLURM_PROCID"],
            env.get("SLURM_NTASKS", "?"),
            env.get("SLURMD_NODENAME", "?"),
        )
    prepared.task.translations_dir = output_dir / "translations"
    callbacks = [
        *prepared.callbacks.values(),
        Summary(),
        History(output_dir / "metrics.jsonl"),
        StepAxis(),
        GracefulInterrupt(output_dir / "checkpoints" / "last.ckpt"),
        TrainingStarted(output_dir),
        MovedRun(output_dir),
    ]
    if not cfg.trainer.enable_progress_bar:  # Lightning refuses a progress bar callback then
        callbacks = [c for c in callbacks if not isinstance(c, ProgressBar)]
    if not cfg.trainer.enable_model_summary:  # and a model summary
        callbacks = [c for c in callbacks if not isinstance(c, ModelSummary)]
    loggers, logger_settings = build_loggers(cfg, logger_versions(cfg, prepared.resumed), prepared.hydra)
    for logger in loggers.values():  # what the loggers write, in the run's manifest (store/atomic.py)
        note_written(getattr(logger, "log_dir", None) or Path(logger.save_dir or output_dir) / "wandb")
    callbacks.append(LoggerVersions(loggers, logger_settings))
    trainer = L.Trainer(
        **trainer_arguments(cfg),
        logger=list(loggers.values()) or False,
        callbacks=callbacks,
        plugins=[AtomicCheckpointIO()],
        default_root_dir=str(output_dir),
    )
    if trainer.is_global_zero:
        for logger in trainer.loggers:
            logger.log_hyperparams(
                {**OmegaConf.to_container(cfg, resolve=True, enum_to_str=True), "logger": logger_settings}
            )
    return trainer


def best_checkpoint(trainer: L.Trainer) -> str | None:
    """The best checkpoint the run saved (trainer.test evaluates its weights), or None: the weights as they are."""
    return next((c.best_model_path for c in trainer.checkpoint_callbacks if c.best_model_path), None)


def callback(trainer: L.Trainer, kind: type):
    return next((c for c in trainer.callbacks if isinstance(c, kind)), None)


@contextlib.contextmanager
def fitting(trainer: L.Trainer, prepared: Prepared, start_time: float):
    """Around trainer.fit and trainer.test (under `attention_kernel`'s SDPA kernel): torch's and Lightning's
    refusals of the settings as fit starts told in one line, a stop (Ctrl-C, SIGTERM) as its exit code, and
    summary.json written for a run that trained (its summary is the dict yielded, filled on the way out)."""
    cfg, resumed, output_dir = prepared.cfg, prepared.resumed, Path(prepared.cfg.paths.output_dir)
    result, status = {}, "failed"
    summary, interrupt, throughput = (callback(trainer, kind) for kind in (Summary, GracefulInterrupt, Throughput))
    kernel = cfg.get("attention_kernel", "auto")
    attention = (
        contextlib.nullcontext() if kernel == "auto" else sdpa_kernel(getattr(SDPBackend, ATTENTION_KERNELS[kernel]))
    )
    try:
        with attention:
            yield result
        status = "completed"
    except RuntimeError as e:  # torch's refusal of a kernel that cannot serve a call (e.g. flash, attention dropout)
        if kernel == "auto" or not str(e).startswith(("No available kernel", "No viable backend")):
            raise
        dropout = cfg.model.get("dropout") or 0
        why = (
            f"the CPU's flash takes no attention dropout, and model.dropout={dropout}"
            if dropout > 0 and not torch.cuda.is_available()
            else "an attention mask or bias this model passes (padding, T5's relative positions) is one it cannot take"
        )
        raise ConfigError(
            "attention_kernel",
            f"{kernel} cannot serve this run's attention (torch: {first_line(e)} Likely {why}): use auto or math",
        ) from None
    except MisconfigurationException as e:  # Lightning's refusal of the settings as fit starts: a mistake, one line
        if trainer.global_step > (resumed.step if resumed else 0):
            raise
        raise ConfigError("trainer", f"Lightning refuses this run's settings: {first_line(e)}") from None
    except SystemExit:  # SIGTERM (and Ctrl-C, made one by GracefulInterrupt) stop Lightning this way
        status = "interrupted"
        raise SystemExit(130 if interrupt.by_ctrl_c else 143) from None
    except KeyboardInterrupt:  # a second Ctrl-C, which stops at once (callbacks/interrupt.py), or one before step 1
        if trainer.global_step <= (resumed.step if resumed else 0):
            raise  # (nothing trained: the directory goes back as it was claimed, as for a failure then)
        status = "interrupted"
        saved = Path(interrupt.ckpt_path)
        log.info(
            "interrupted at step %d by a second Ctrl-C; %s",
            trainer.global_step,
            f"{saved} holds the last step saved: resume with ckpt_path=last hydra.run.dir={output_dir}"
            if saved.is_file()
            else f"no checkpoint was saved: start it again with overwrite=true hydra.run.dir={output_dir}",
        )
        raise SystemExit(130) from None
    finally:
        # A run that failed or was stopped before its first step leaves the run directory as it was claimed (main.py:
        # a new run's goes, a resume's summary.json stays as it was); a failure or stop after it trained is recorded.
        untouched = status != "completed" and trainer.global_step <= (resumed.step if resumed else 0)
        if trainer.is_global_zero and not untouched:
            model, datamodule = prepared.model, prepared.datamodule
            result.update(
                summary.write(
                    output_dir / "summary.json",
                    earlier_summary(output_dir) if resumed else None,
                    status=status,
                    tokens_per_sec=throughput.tokens_per_sec if throughput else None,
                    flops_per_token=round(throughput.flops_per_token)
                    if throughput and throughput.flops_per_token
                    else None,
                    mfu=throughput.mfu if throughput else None,
                    train_time_s=round(throughput.train_time_s, 3) if throughput and throughput.train_time_s else None,
                    wall_time_s=round(time.time() - start_time, 3),
                    peak_mem_mb=round(peak_memory_mb(), 1),
                    n_params=sum(p.numel() for p in model.parameters()),  # a tied weight counts once
                    global_step=trainer.global_step,
                    **(
                        {"padding_fraction": round(datamodule.padding_fraction, 4)}
                        if datamodule.padding_fraction is not None
                        else {}
                    ),
                )
            )
            log.info("summary: %s", output_dir / "summary.json")
        if any(type(logger).__name__ == "WandbLogger" for logger in trainer.loggers) and trainer.is_global_zero:
            # Otherwise the next job of a multirun would log into this run (WandbLogger reuses an open run).
            import wandb

            wandb.finish(exit_code=0 if status == "completed" else 1)


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's own save goes through a temporary file that may sit on another filesystem, where the
    final move is a copy; this one renames within the checkpoint's folder."""

    def save_checkpoint(self, checkpoint: dict, path, storage_options=None) -> None:
        with atomic_write(path) as f:
            torch.save(checkpoint, f)
