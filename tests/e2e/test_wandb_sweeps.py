"""W&B sweep specs driving Hydra: the agent's command line, and the offline `hydra/sweeper=wandb`.

Here: the agent's command line and the offline sweeper; tests/unit/test_wandb_sweeps.py has the rest."""

import json

import pytest
import yaml
from sweeps import next_run
from wandb.sdk.launch.sweeps.utils import create_sweep_command_args

from helpers.runs import ROOT, TINY, run_train
from helpers.wandb_records import records

OFFLINE = {"WANDB_MODE": "offline"}


def test_the_agents_command_line_is_train_pys_override_syntax(tmp_path):
    """`wandb agent` runs the spec's command with ${args_no_hyphens}: key=value, one per parameter."""
    spec = yaml.safe_load((ROOT / "conf" / "wandb_sweep" / "grokking.yaml").read_text())
    assert spec["command"][-1] == "${args_no_hyphens}"
    proposal = next_run(spec, [], validate=True)
    proposal.config["trainer.max_steps"] = {"value": 20}  # tiny, for the test
    args = create_sweep_command_args({"args": proposal.config})["args_no_hyphens"]  # what the agent passes
    result = run_train(
        *args, "data.p=11", *TINY, "trainer.val_check_interval=10", "logger=none", f"hydra.run.dir={tmp_path}"
    )
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["global_step"] == 20 and "val/acc_best" in summary
    config = yaml.safe_load((tmp_path / ".hydra" / "config.yaml").read_text())
    assert config["optim"]["lr"] == pytest.approx(proposal.config["optim.lr"]["value"])
    assert "grokfast" in config["callbacks"] and config["data"]["p"] == 11


def wandb_run_record(run_dir):
    (run,) = records(run_dir)["run"]
    return run


@pytest.mark.parametrize("method", ["random", "bayes"])
def test_offline_wandb_sweeper_proposes_runs_and_records_the_trials(method, tmp_path):
    spec = {
        "method": method,
        "metric": {"name": "val/loss_best", "goal": "minimize"},
        "parameters": {
            "optim.lr": {"distribution": "log_uniform_values", "min": 1e-3, "max": 3e-2},
            "model.n_embd": {"values": [16, 32]},
        },
    }
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    sweep_dir = tmp_path / "sweep"
    result = run_train(
        "-m",
        "hydra/sweeper=wandb",
        f"hydra.sweeper.spec={tmp_path / 'spec.yaml'}",
        "hydra.sweeper.count=3",
        "data=modular",
        "data.p=7",
        "model.n_layer=1",
        "model.n_head=2",
        "trainer.enable_progress_bar=false",
        "trainer.enable_model_summary=false",
        "trainer.max_steps=20",
        "trainer.val_check_interval=10",
        "callbacks=none",
        f"hydra.sweep.dir={sweep_dir}",
        env=OFFLINE,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "offline: proposals made locally" in result.stdout + result.stderr
    results = yaml.safe_load((sweep_dir / "wandb_sweep_results.yaml").read_text())
    assert [t["state"] for t in results["trials"]] == ["finished"] * 3
    for i, trial in enumerate(results["trials"]):
        summary = json.loads((sweep_dir / str(i) / "summary.json").read_text())
        assert trial["val/loss_best"] == pytest.approx(summary["val/loss_best"])
        config = yaml.safe_load((sweep_dir / str(i) / ".hydra" / "config.yaml").read_text())
        assert (
            config["optim"]["lr"] == pytest.approx(trial["params"]["optim.lr"])
            and 1e-3 <= config["optim"]["lr"] <= 3e-2
        )
        assert config["model"]["n_embd"] == trial["params"]["model.n_embd"] in (16, 32)
        run = wandb_run_record(sweep_dir / str(i))  # each trial an offline W&B run in the sweep's group
        assert run["run_group"] == str(sweep_dir) and f"optim.lr={trial['params']['optim.lr']}" in run["display_name"]
    assert len({t["params"]["optim.lr"] for t in results["trials"]}) == 3
    assert results["best_value"] == min(t["val/loss_best"] for t in results["trials"])


def test_unknown_spec_is_a_clear_error(tmp_path):
    result = run_train(
        "-m",
        "hydra/sweeper=wandb",
        "hydra.sweeper.spec=nonesuch",
        "logger=none",
        f"hydra.sweep.dir={tmp_path}",
        env=OFFLINE,
    )
    assert result.returncode != 0 and "hydra.sweeper.spec=nonesuch: no W&B sweep spec at" in result.stderr
