"""Offline W&B runs read back from their files, with W&B's own reader (`wandb leet inspect`'s: the wandb-core
program that command runs, started here without the Python process in front of it)."""

import json
import subprocess
from pathlib import Path


def inspect(offline_run) -> dict[str, list[dict]]:
    """The records of one offline W&B run folder, by type (run, config, history, ...)."""
    from wandb.util import get_core_path

    offline_run = Path(offline_run).resolve()
    (run_file,) = offline_run.glob("run-*.wandb")
    out = subprocess.run(
        [get_core_path(), "leet", "inspect", "--no-observability", "--json", "--run-file", str(run_file)]
        + [str(offline_run.parent)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    by_type = {}
    for line in out.stdout.splitlines():
        record = json.loads(line)
        by_type.setdefault(record["type"], []).append(record[record["type"]])
    return by_type


def records(run_dir) -> dict[str, list[dict]]:
    """The records of the run directory's one offline W&B run, by type."""
    (offline_run,) = (run_dir / "wandb").glob("offline-run-*")  # one W&B run per job
    return inspect(offline_run)
