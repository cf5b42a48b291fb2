"""A real SLURM cluster on this host (tests/cluster/slurm.sh: munge, slurmctld and two slurmd, nodes n1 and n2):
sbatch and srun for real, through hydra/launcher=slurm. Skipped, with the reason, where the cluster cannot be
started (not Linux, not root, no apt-get to install SLURM)."""

import json
import os
import re
import subprocess
import time

import pytest
import yaml

from conftest import ROOT, TINY, run_train

SCRIPT = ROOT / "tests" / "cluster" / "slurm.sh"
MODULAR = ["data=modular", "data.p=11", *TINY, "trainer.max_steps=12", "trainer.val_check_interval=6", "logger=csv"]
ON_SLURM = [
    "hydra/launcher=slurm",
    "hydra.launcher.gpus_per_node=0",
    "hydra.launcher.timeout_min=10",
    # the nodes' names resolve nowhere: the processes meet on this host
    'hydra.launcher.setup=["export MASTER_ADDR=127.0.0.1"]',
]


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    """The environment that points SLURM's commands at a 2-node cluster started for this module."""
    directory = tmp_path_factory.mktemp("slurm")
    started = subprocess.run(
        ["bash", str(SCRIPT), "start", str(directory), "2"], capture_output=True, text=True, timeout=600
    )
    if started.returncode == 3:
        pytest.skip(f"no local SLURM cluster: {started.stderr.strip()}")
    assert started.returncode == 0, started.stdout + started.stderr
    env = {**os.environ, "SLURM_CONF": str(directory / "slurm.conf")}
    yield env
    subprocess.run(["bash", str(SCRIPT), "stop", str(directory)], check=True, timeout=60)
    assert not list((directory / "pids").glob("*.pid"))  # every daemon it started, stopped


def scontrol_jobs(env, settled: bool = True) -> list[dict]:
    """Every job the controller knows, as `scontrol show job` fields; settled: once none is still running
    or completing (a job's result is written before its step ends)."""
    for _ in range(300):
        out = subprocess.run(["scontrol", "-o", "show", "job"], capture_output=True, text=True, env=env, check=True)
        jobs = [dict(re.findall(r"(\w+)=(\S*)", line)) for line in out.stdout.splitlines() if "JobId=" in line]
        if not settled or not any(j["JobState"] in ("RUNNING", "COMPLETING", "PENDING") for j in jobs):
            return jobs
        time.sleep(0.1)
    raise AssertionError(f"jobs still running after 30 s: {jobs}")


@pytest.mark.e2e
def test_srun_spreads_tasks_over_the_nodes(slurm):
    out = subprocess.run(
        ["srun", "-N2", "-n4", "bash", "-c", "echo $SLURMD_NODENAME $SLURM_NODEID $SLURM_PROCID $SLURM_LOCALID"],
        capture_output=True,
        text=True,
        env=slurm,
        stdin=subprocess.DEVNULL,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert sorted(out.stdout.splitlines()) == ["n1 0 0 0", "n1 0 1 1", "n2 1 2 0", "n2 1 3 1"]


@pytest.mark.e2e
def test_ddp_across_two_nodes_through_sbatch_and_srun(slurm, tmp_path):
    sweep = tmp_path / "sweep"
    result = run_train(
        "-m",
        *ON_SLURM,
        "hardware=ddp",
        "trainer.accelerator=cpu",
        "trainer.num_nodes=2",
        "trainer.devices=1",
        *MODULAR,
        "seed=1,2",
        f"hydra.sweep.dir={sweep}",
        env=slurm,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    # two SLURM jobs (an array of two), each of two tasks on two nodes
    jobs = [j for j in scontrol_jobs(slurm) if j.get("ArrayJobId") and j.get("JobName") == "train"]
    assert len(jobs) == 2 and {j["JobState"] for j in jobs} == {"COMPLETED"}
    assert {(j["NumNodes"], j["NumTasks"], j["NodeList"]) for j in jobs} == {("2", "2", "n[1-2]")}
    # one sweep directory, one run directory per job, one summary each (rank zero's)
    assert sorted(p.name for p in sweep.iterdir() if p.is_dir() and not p.name.startswith(".")) == ["0", "1"]
    for job in ("0", "1"):
        logs = "".join(p.read_text() for p in (sweep / ".submitit").glob(f"*_{job}/*_log.out"))
        for rank, node in ((0, "n1"), (1, "n2")):
            assert re.search(rf"SLURM job \d+_{job}: task {rank} of 2 on node {node}", logs), logs
            assert f"Initializing distributed: GLOBAL_RANK: {rank}, MEMBER: {rank + 1}/2" in logs
        assert json.loads((sweep / job / "summary.json").read_text())["status"] == "completed"

    # the same global batches in one process: the same run, to float32 rounding
    alone = tmp_path / "alone"
    single = run_train(*MODULAR, "seed=1", f"hydra.run.dir={alone}", cwd=tmp_path)
    assert single.returncode == 0, single.stderr[-3000:]
    together = json.loads((sweep / "0" / "summary.json").read_text())
    reference = json.loads((alone / "summary.json").read_text())
    for key in ("train/loss", "val/loss", "val/acc"):
        assert together[key] == pytest.approx(reference[key], abs=1e-5), key


def overlap(a: dict, b: dict) -> bool:
    """Whether two jobs ran at the same time (scontrol's StartTime/EndTime, whole seconds)."""
    return a["StartTime"] <= b["EndTime"] and b["StartTime"] <= a["EndTime"]


@pytest.mark.e2e
def test_optuna_trials_run_as_parallel_slurm_jobs(slurm, tmp_path):
    sweep = tmp_path / "sweep"
    before = {j["JobId"] for j in scontrol_jobs(slurm)}
    result = run_train(
        "-m",
        "sweep=grokking",
        *ON_SLURM,
        "hardware=cpu",
        "trainer.devices=1",
        "hydra.sweeper.n_jobs=2",
        "hydra.sweeper.n_trials=4",
        "data.p=11",
        *TINY,
        "trainer.max_steps=20",
        "trainer.val_check_interval=10",
        "logger=none",
        f"hydra.sweep.dir={sweep}",
        env=slurm,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    jobs = [j for j in scontrol_jobs(slurm) if j["JobId"] not in before]
    assert len(jobs) == 4 and {j["JobState"] for j in jobs} == {"COMPLETED"}  # one SLURM job per trial
    batches = {}
    for job in jobs:
        batches.setdefault(job["ArrayJobId"], []).append(job)
    assert sorted(map(len, batches.values())) == [2, 2]  # two batches of n_jobs=2 trials, each run side by side
    assert all(overlap(*pair) for pair in batches.values())
    trials = [json.loads((sweep / str(i) / "summary.json").read_text()) for i in range(4)]
    results = yaml.safe_load((sweep / "optimization_results.yaml").read_text())
    assert set(results["best_params"]) == {"optim.lr", "optim.weight_decay", "callbacks.grokfast.lamb"}
    assert results["best_value"] == pytest.approx(max(t["val/acc_best"] for t in trials))
