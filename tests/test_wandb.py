"""Offline W&B runs, read back from their files: name, group and tags, the resolved config, the history."""

import json
import subprocess
import sys

import pytest

from conftest import TINY, run_train

OFFLINE = {"WANDB_MODE": "offline"}


def records(run_dir) -> dict[str, list[dict]]:
    """The records of the run directory's one offline W&B run, by type (run, config, history, ...)."""
    (offline_run,) = (run_dir / "wandb").glob("offline-run-*")  # one W&B run per job
    out = subprocess.run(
        [sys.executable, "-m", "wandb", "leet", "inspect", "--json", str(offline_run)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    by_type = {}
    for line in out.stdout.splitlines():
        record = json.loads(line)
        by_type.setdefault(record["type"], []).append(record[record["type"]])
    return by_type


@pytest.mark.e2e
def test_multirun_jobs_are_named_grouped_tagged_with_resolved_config(tmp_path):
    result = run_train(
        "-m",
        "data=modular",
        "data.p=7,11",
        *TINY,
        "trainer.max_steps=23",
        "trainer.val_check_interval=10",
        "trainer.log_every_n_steps=5",
        "callbacks=none",
        "hardware=cpu",
        f"hydra.sweep.dir={tmp_path}",
        env=OFFLINE,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    for job, p in (("0", "7"), ("1", "11")):
        run_records = records(tmp_path / job)
        (run,) = run_records["run"]
        assert f"data.p={p}" in run["display_name"] and "trainer.max_steps=23" in run["display_name"]
        assert run["run_group"] == str(tmp_path) and sorted(run["tags"]) == [
            "data=modular",
            "hardware=cpu",
            "model=gpt",
        ]
        (config,) = [c["update"] for c in run_records["config"] if "data" in c["update"]]
        assert config["data"]["p"] == int(p) and config["paths"]["output_dir"] == str(tmp_path / job)  # resolved
        assert config["data"]["seed"] == config["seed"] == 1337  # an interpolation, resolved
        used = config["logger"]["wandb"]  # the settings the logger was built with
        assert used["group"] == str(tmp_path) and used["name"] == run["display_name"]
        val_losses = [h["item"]["val/loss"] for h in run_records["history"] if "val/loss" in h["item"]]
        local = [json.loads(line) for line in (tmp_path / job / "metrics.jsonl").read_text().splitlines()]
        assert val_losses == [r["val/loss"] for r in local if "val/loss" in r] and len(val_losses) == 2
        # W&B's step axis is metrics.jsonl's (optimizer steps done), and the last step (23) is recorded
        for metric, steps in (("val/loss", [10, 20]), ("train/loss", [5, 10, 15, 20, 23])):
            logged = [h["item"]["trainer/global_step"] for h in run_records["history"] if metric in h["item"]]
            assert logged == [r["step"] for r in local if metric in r] == steps
