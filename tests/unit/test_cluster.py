"""Beyond one machine: hydra/launcher=slurm (hydra-submitit-launcher) starts one task per device, which
Lightning's SLURMEnvironment turns into DDP processes; slurm_local does the same with local processes.

Here: the launcher's settings and Lightning under srun's variables, in this process; tests/e2e/test_cluster.py has the rest."""

import re

import hydra
import lightning as L
import pytest
from lightning.fabric.plugins.environments import SLURMEnvironment
from lightning.fabric.utilities import rank_zero as fabric_rank_zero
from lightning.pytorch.utilities import rank_zero as pytorch_rank_zero
from omegaconf import OmegaConf

from helpers.runs import compose_cfg

CLUSTER = ["hardware=ddp", "trainer.accelerator=cpu", "trainer.devices=4", "trainer.num_nodes=2"]


def test_slurm_launcher_asks_one_task_per_device_on_each_node(tmp_path):
    cfg = compose_cfg(
        ["hydra/launcher=slurm", *CLUSTER, "hydra.launcher.partition=gpu", f"hydra.sweep.dir={tmp_path}"],
        tmp_path,
        return_hydra_config=True,
    )
    launcher = hydra.utils.instantiate(cfg.hydra.launcher)
    assert type(launcher).__name__ == "SlurmLauncher"
    params = launcher.params
    assert (params["nodes"], params["tasks_per_node"], params["gpus_per_node"]) == (2, 4, 4)
    assert params["partition"] == "gpu" and params["submitit_folder"] == f"{tmp_path}/.submitit/%j"


SLURM_TASK = {  # srun's variables for the second task on the second node of a 2 x 4 job
    "SLURM_NTASKS": "8",
    "SLURM_NTASKS_PER_NODE": "4",
    "SLURM_NNODES": "2",
    "SLURM_JOB_NUM_NODES": "2",
    "SLURM_PROCID": "5",
    "SLURM_LOCALID": "1",
    "SLURM_NODEID": "1",
    "SLURM_JOB_ID": "4242",
    "SLURM_JOB_NAME": "train",
    "SLURM_NODELIST": "gpu[01-02]",
}


@pytest.fixture
def slurm_task(monkeypatch):
    for name, value in SLURM_TASK.items():
        monkeypatch.setenv(name, value)
    for name in ("LOCAL_RANK", "WORLD_SIZE", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.setenv(name, "")  # recorded, so what Lightning sets is undone after the test
        monkeypatch.delenv(name)
    monkeypatch.setenv("OMP_NUM_THREADS", "2")  # else Lightning's launcher cuts this test process's threads
    # The trainer sets the process's rank-zero flag; later tests in this process must still be rank zero.
    monkeypatch.setattr(fabric_rank_zero.rank_zero_only, "rank", fabric_rank_zero.rank_zero_only.rank)
    monkeypatch.setattr(pytorch_rank_zero.rank_zero_only, "rank", pytorch_rank_zero.rank_zero_only.rank)


def test_lightning_takes_each_slurm_task_for_one_ddp_process(slurm_task, tmp_path):
    cfg = compose_cfg(CLUSTER, tmp_path)
    trainer = L.Trainer(**OmegaConf.to_container(cfg.trainer), logger=False, default_root_dir=str(tmp_path))
    environment = trainer.strategy.cluster_environment
    assert isinstance(environment, SLURMEnvironment) and environment.creates_processes_externally
    assert (trainer.world_size, trainer.num_nodes, trainer.num_devices) == (8, 2, 4)
    assert (trainer.global_rank, trainer.node_rank, trainer.local_rank) == (5, 1, 1)
    assert environment.main_address == "gpu01" and not trainer.is_global_zero
    # fit() goes through the launcher: it checks the counts against SLURM's and starts no process of its own
    assert trainer.strategy.launcher.launch(lambda: "trained here") == "trained here"
    assert trainer.strategy.launcher.procs == []


def test_slurm_tasks_and_devices_must_agree(slurm_task, tmp_path):
    cfg = compose_cfg(["hardware=ddp", "trainer.accelerator=cpu", "trainer.devices=2", "trainer.num_nodes=2"], tmp_path)
    trainer = L.Trainer(**OmegaConf.to_container(cfg.trainer), logger=False, default_root_dir=str(tmp_path))
    with pytest.raises(
        ValueError,
        match=re.escape(
            "`devices=2` in Lightning, but the number of tasks per node "
            "configured in SLURM `--ntasks-per-node=4` does not match"
        ),
    ):
        trainer.strategy.launcher.launch(lambda: "trained here")
