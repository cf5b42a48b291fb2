"""How a run is started: the other DDP processes of a job under Hydra, and SLURM tasks under
hydra/launcher=slurm_local. Importing this module patches Lightning's DDP launcher (see below)."""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager

import torch
from hydra.core.hydra_config import HydraConfig
from lightning.fabric.strategies.launchers import subprocess_script as fabric_launcher
from lightning.pytorch.strategies.launchers import subprocess_script as pytorch_launcher

from transformer_lab.store.origins import typed_overrides


def ddp_process_command(local_rank: int) -> tuple[list[str], str]:
    """How Lightning's DDP launcher starts the other processes of this job under Hydra: this job alone, as
    a single run, in this job's directory. (Lightning's own command repeats the whole command line, so in
    a multirun every process would start the entire sweep again:
    https://github.com/Lightning-AI/pytorch-lightning/issues/11300,
    https://github.com/facebookresearch/hydra/issues/2070.)"""
    hydra_cfg = HydraConfig.get()
    command = [
        sys.executable,
        os.path.abspath(sys.argv[0]),
        *typed_overrides(hydra_cfg),
        f'hydra.run.dir="{hydra_cfg.runtime.output_dir}"',
        f"hydra.job.name=ddp_process_{local_rank}",
        "hydra.output_subdir=null",
    ]  # the job's .hydra/ record is rank zero's to write
    return command, hydra_cfg.runtime.cwd


# A private function of Lightning's, replaced in both launchers (the one function, imported by each);
# tests/unit/test_upstream.py fails once Lightning's own stops repeating the command line, or stops calling it.
LIGHTNING_COMMAND = fabric_launcher._hydra_subprocess_cmd
fabric_launcher._hydra_subprocess_cmd = ddp_process_command
pytorch_launcher._hydra_subprocess_cmd = ddp_process_command


DDP_ENVIRONMENT = ("MASTER_ADDR", "MASTER_PORT", "NODE_RANK", "LOCAL_RANK", "WORLD_SIZE", "RANK", "LOCAL_WORLD_SIZE")


@contextmanager
def distributed_job():
    """A multirun's job: its SLURM tasks run as processes (submitit_tasks_as_processes), and its DDP leaves nothing
    for the next job: Lightning's launcher sets these variables in the launching process (the next job would then
    take itself for a child and start no processes) and keeps its process group open."""
    saved = {key: os.environ.get(key) for key in DDP_ENVIRONMENT}
    try:
        submitit_tasks_as_processes()
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
