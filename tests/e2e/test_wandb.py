"""Offline W&B runs, read back from their files: name, group and tags, the resolved config, the history.

Here: the runs; tests/unit/test_wandb.py has the rest."""

import json

from helpers.runs import ROOT, TINY, run_train, train_in_a_process
from helpers.wandb_records import inspect, records

OFFLINE = {"WANDB_MODE": "offline"}


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
    ids = set()
    for job, p in (("0", "7"), ("1", "11")):
        run_records = records(tmp_path / job)
        (run,) = run_records["run"]
        ids.add(run["run_id"])
        assert f"data.p={p}" in run["display_name"] and "trainer.max_steps=23" in run["display_name"]
        assert run["run_group"] == str(tmp_path) and sorted(run["tags"]) == [
            f"data.p={p}",  # the setting the sweep varies
            "data=modular",
            "hardware=cpu",
            "model=gpt",
        ]
        assert run["job_type"] == f"data.p={p}"  # W&B's grouping by job type: one line per configuration
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
    assert len(ids) == 2  # each job a W&B run of its own


def history_of(offline_run) -> tuple[dict, list[dict]]:
    """(the run record, its history items) of one offline W&B run folder."""
    found = inspect(offline_run)
    (run,) = found["run"]
    return run, [h["item"] for h in found.get("history", [])]


def test_a_resumed_run_continues_its_wandb_run_at_the_right_step(tmp_path):
    """Stopped at step 27 (SIGTERM: its checkpoint is that step's) and resumed with ckpt_path=last: one W&B
        run, its id and name kept, whose history goes on from step 30 as metrics.jsonl does. Offline, W&B writes
        each process's part in a folder of its own (`wandb sync` uploads them, in order, as that one run). The
    checkpoint resumed into another directory starts a W&B run of its own there."""

    helpers, run = {**OFFLINE, "PYTHONPATH": str(ROOT / "tests")}, tmp_path / "run"
    args = [
        "data=modular",
        "data.p=11",
        "data.batch_size=16",
        *TINY,
        "trainer.max_steps=60",
        "trainer.val_check_interval=20",
        "trainer.log_every_n_steps=5",
        "callbacks.last_checkpoint.every_n_train_steps=10",
        f"hydra.run.dir={run}",
    ]
    stop = [
        "+callbacks.kill._target_=helpers.callbacks.KillAt",
        "+callbacks.kill.step=27",
        "+callbacks.kill.signum=SIGTERM",
    ]
    assert train_in_a_process(*args, *stop, env=helpers).returncode == 143  # (the signal: a process of its own)
    resumed = run_train("ckpt_path=last", "+callbacks.kill.step=1000", f"hydra.run.dir={run}", env=helpers)
    assert resumed.returncode == 0, resumed.stderr[-3000:]

    parts = [history_of(folder) for folder in sorted((run / "wandb").glob("offline-run-*"))]
    assert len(parts) == 2
    (first, first_history), (second, second_history) = parts
    assert first["run_id"] == second["run_id"] and first["display_name"] == second["display_name"]
    assert "data.p=11" in first["display_name"] and "ckpt_path" not in second["display_name"]
    local = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    for metric in ("train/loss", "val/loss"):
        steps = [
            [h["trainer/global_step"] for h in history if metric in h] for history in (first_history, second_history)
        ]
        assert steps[0] + steps[1] == [r["step"] for r in local if metric in r]  # continuous, none twice
        assert max(steps[0]) <= 27 < min(steps[1])
    values = [h["train/loss"] for h in first_history + second_history if "train/loss" in h]
    assert values == [r["train/loss"] for r in local if "train/loss" in r]

    # Its checkpoint resumed into another directory is another run: a W&B run of its own
    last = run / "checkpoints" / "last.ckpt"
    fork = run_train(f"ckpt_path={last}", "trainer.max_steps=65", f"hydra.run.dir={tmp_path / 'fork'}", env=helpers)
    assert fork.returncode == 0, fork.stderr[-3000:]
    (forked,) = (tmp_path / "fork" / "wandb").glob("offline-run-*")
    assert history_of(forked)[0]["run_id"] != first["run_id"]
