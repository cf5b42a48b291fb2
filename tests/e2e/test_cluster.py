"""Beyond one machine: hydra/launcher=slurm (hydra-submitit-launcher) starts one task per device, which
Lightning's SLURMEnvironment turns into DDP processes; slurm_local does the same with local processes.

Here: train.py through both launchers; tests/unit/test_cluster.py has the rest."""

import json
import re

from helpers.runs import TINY, run_train, train_in_a_process


def test_slurm_launcher_without_a_device_count_is_one_clear_error(tmp_path):
    result = run_train(
        "-m",
        "hydra/launcher=slurm",
        "hardware=ddp",
        "data=modular",
        "data.p=7",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
        cwd=tmp_path,
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "error: trainer.devices: hydra/launcher=slurm and slurm_local start one task" in result.stderr
    assert "got 'auto': add trainer.devices=N" in result.stderr


def test_slurm_local_multirun_runs_each_job_once_with_all_its_processes(tmp_path):
    sweep = tmp_path / "sweep"
    result = train_in_a_process(  # (the launcher's processes, started from a process of its own)
        "-m",
        "hydra/launcher=slurm_local",
        "hardware=ddp",
        "trainer.accelerator=cpu",
        "trainer.devices=2",
        "data=modular",
        "data.p=11",
        *TINY,
        "trainer.max_steps=20",
        "trainer.val_check_interval=10",
        "logger=none",
        "callbacks=none",
        "seed=0,1",
        f"hydra.sweep.dir={sweep}",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sweep"]  # no stray run directories
    assert sorted(p.name for p in sweep.iterdir()) == [".submitit", "0", "1", "multirun.yaml"]
    for job in ("0", "1"):
        summary = json.loads((sweep / job / "summary.json").read_text())
        assert summary["status"] == "completed" and summary["global_step"] == 20
    submissions = sorted(p for p in (sweep / ".submitit").iterdir() if p.name != "%j")
    assert len(submissions) == 2  # one submitit job per Hydra job, each with two tasks = two DDP processes
    for folder in submissions:
        logs = "".join(p.read_text() for p in folder.glob("*_log.*"))
        assert "Starting with 2 processes" in logs, logs[-3000:]
        assert sorted(re.findall(r"GLOBAL_RANK: (\d)", logs)) == ["0", "1"]
