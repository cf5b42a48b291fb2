"""DDP under Hydra on CPU (gloo): the same trajectory as one process, one directory per run or job."""

import json

import pytest

from conftest import TINY, run_train

SETUP = [
    "data=modular",
    "data.p=11",
    "data.batch_size=64",
    *TINY,
    "model.dropout=0.0",
    "trainer.max_steps=20",
    "trainer.val_check_interval=10",
    "trainer.log_every_n_steps=1",
    "optim.warmup_steps=5",
    "optim.lr=1e-2",
]
DDP = ["hardware=[cpu,ddp]", "trainer.devices=2"]


def losses(run_dir):
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [r["train/loss"] for r in map(json.loads, lines) if "train/loss" in r]


def tree(path):
    return sorted(str(p.relative_to(path)) for p in path.rglob("*") if "wandb" not in p.parts)


@pytest.mark.e2e
def test_two_processes_follow_the_single_process_trajectory_in_one_directory(tmp_path):
    single = run_train(*SETUP, "logger=none", f"hydra.run.dir={tmp_path / 'single'}", cwd=tmp_path)
    assert single.returncode == 0, single.stderr[-3000:]
    ddp = run_train(
        *SETUP, *DDP, "logger=wandb", f"hydra.run.dir={tmp_path / 'ddp'}", cwd=tmp_path, env={"WANDB_MODE": "offline"}
    )
    assert ddp.returncode == 0, ddp.stderr[-3000:]
    a, b = losses(tmp_path / "single"), losses(tmp_path / "ddp")
    assert len(a) == len(b) == 20 and b == pytest.approx(a, abs=1e-4), (a, b)
    # One run directory, one summary, one W&B run, one set of checkpoints, whatever the process count.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ddp", "single"]
    run = tmp_path / "ddp"
    assert json.loads((run / "summary.json").read_text())["global_step"] == 20
    assert len(list((run / "wandb").glob("offline-run-*"))) == 1
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["best.ckpt", "last.ckpt"]
    assert (run / "ddp_process_1.log").exists() and not list(run.rglob("*/.hydra"))  # rank 1 wrote no record
    assert "ddp_process_1" not in (run / ".hydra" / "hydra.yaml").read_text()


@pytest.mark.e2e
def test_a_ddp_multirun_runs_each_job_once(tmp_path):
    sweep = tmp_path / "sweep"
    result = run_train(
        "-m", *SETUP, *DDP, "optim.lr=0.01,0.003", "logger=none", f"hydra.sweep.dir={sweep}", cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sweep"]  # no stray outputs/ or multirun/
    assert sorted(p.name for p in sweep.iterdir()) == ["0", "1", "multirun.yaml"]
    output = result.stdout + result.stderr
    assert output.count("Launching 2 jobs locally") == 1 and output.count("#0 :") == output.count("#1 :") == 1
    for job, lr in (("0", "0.01"), ("1", "0.003")):
        summary = json.loads((sweep / job / "summary.json").read_text())
        assert summary["global_step"] == 20 and summary["status"] == "completed"
        assert f"optim.lr={lr}" in (sweep / job / ".hydra" / "overrides.yaml").read_text()
        assert (sweep / job / "ddp_process_1.log").exists()  # the second process ran in its job's directory


@pytest.mark.e2e
def test_a_ddp_optuna_sweep_runs_each_trial_once(tmp_path):
    sweep = tmp_path / "sweep"
    result = run_train(
        "-m",
        *SETUP,
        *DDP,
        "hydra/sweeper=optuna",
        "hydra/sweeper/sampler=grid",
        "hydra.sweeper.n_jobs=1",
        "objective=val/loss_best",
        "optim.lr=choice(0.01,0.003)",
        "logger=none",
        f"hydra.sweep.dir={sweep}",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sweep"]
    assert sorted(p.name for p in sweep.iterdir()) == ["0", "1", "optimization_results.yaml"]
    output = result.stdout + result.stderr
    assert output.count("#0 :") == output.count("#1 :") == 1 and "#2 :" not in output
    for job in ("0", "1"):
        assert json.loads((sweep / job / "summary.json").read_text())["global_step"] == 20
        assert (sweep / job / "ddp_process_1.log").exists()
