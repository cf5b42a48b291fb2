"""Offline W&B runs read back from their files (`wandb leet inspect`)."""

import json
import sys

from helpers import forked


def inspect(offline_run) -> dict[str, list[dict]]:
    """The records of one offline W&B run folder, by type (run, config, history, ...)."""
    out = forked.run(
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


def records(run_dir) -> dict[str, list[dict]]:
    """The records of the run directory's one offline W&B run, by type."""
    (offline_run,) = (run_dir / "wandb").glob("offline-run-*")  # one W&B run per job
    return inspect(offline_run)
