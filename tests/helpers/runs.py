"""The repository's paths, the tiny model, a composed config, and `python train.py` as a user runs it: in a
process of its own (run_train) or in one long-lived process for many runs (TrainProcess)."""

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

import transformer_lab.config.schema  # noqa: F401  (registers the schemas)
from helpers import forked

ROOT = Path(__file__).resolve().parents[2]
SHAKESPEARE = ROOT / "data" / "shakespeare" / "input.txt"

# A tiny model, so end-to-end runs take seconds on 2 cores.
# Validation on 2 batches unless a test sets more (a later override wins): every run validates at least
# once, at its last step, and tests that read validation figures set their own limit.
TINY = [
    "model.n_layer=1",
    "model.n_head=2",
    "model.n_embd=32",
    "trainer.enable_progress_bar=false",
    "trainer.enable_model_summary=false",
    "trainer.limit_val_batches=2",
]

needs_shakespeare = pytest.mark.skipif(
    not SHAKESPEARE.exists(), reason=f"{SHAKESPEARE} missing: run `make data` (or train once online)"
)


def compose_cfg(overrides=(), output_dir="/tmp/transformer-lab-test", return_hydra_config=False):
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return compose(
            "train",
            overrides=[f"paths.root_dir={ROOT}", f"paths.output_dir={output_dir}", *overrides],
            return_hydra_config=return_hydra_config,
        )


def run_train(*overrides, cwd=ROOT, env=None, timeout=300):
    """python train.py OVERRIDES, as a user would run it."""
    return forked.run(
        [sys.executable, str(ROOT / "train.py"), *overrides],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "WANDB_SILENT": "true", **(env or {})},
    )


class TrainProcess:
    """`python train.py ARGS` for many runs (bad inputs, short trainings): every run goes
    through train.py as __main__ in one long-lived process (tests/helpers/train_driver.py), so the imports are
    paid once. Results look like subprocess.run's."""

    def __init__(self, env=None):
        self.env = {**os.environ, "WANDB_SILENT": "true", **(env or {})}
        self.process = self._start()

    def _start(self):
        return forked.Popen(
            [sys.executable, str(ROOT / "tests" / "helpers" / "train_driver.py")],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=self.env,
        )

    def run(self, *overrides):
        if self.process.poll() is not None:  # a run that killed it fails alone, not every run after it
            self.process = self._start()
        self.process.stdin.write(json.dumps([str(o) for o in overrides]) + "\n")
        self.process.stdin.flush()
        return subprocess.CompletedProcess(overrides, **json.loads(self.process.stdout.readline()))

    def close(self):
        self.process.stdin.close()
        self.process.wait(timeout=60)


def logged(run_dir, name):
    """The values of `name` in a run's csv/metrics.csv (logger=csv), in order."""
    with open(run_dir / "csv" / "metrics.csv") as f:
        return [float(r[name]) for r in csv.DictReader(f) if r.get(name)]
