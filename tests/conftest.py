import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

import transformer_lab.config  # noqa: F401  (registers the schemas)

ROOT = Path(__file__).resolve().parents[1]
SHAKESPEARE = ROOT / "data" / "shakespeare" / "input.txt"

# A tiny model, so end-to-end runs take seconds on 2 cores.
# Validation on 2 batches unless a test sets more (a later override wins): every run validates at least
# once, at its last step, and tests that read validation figures set their own limit.
TINY = ["model.n_layer=1", "model.n_head=2", "model.n_embd=32", "trainer.enable_progress_bar=false",
        "trainer.enable_model_summary=false", "trainer.limit_val_batches=2"]

needs_shakespeare = pytest.mark.skipif(
    not SHAKESPEARE.exists(), reason=f"{SHAKESPEARE} missing: run `make data` (or train once online)"
)


def compose_cfg(overrides=(), output_dir="/tmp/transformer-lab-test", return_hydra_config=False):
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return compose("train", overrides=[f"paths.root_dir={ROOT}", f"paths.output_dir={output_dir}",
                                           *overrides], return_hydra_config=return_hydra_config)


def run_train(*overrides, cwd=ROOT, env=None, timeout=300):
    """python train.py OVERRIDES, as a user would run it."""
    return subprocess.run([sys.executable, str(ROOT / "train.py"), *overrides], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, "WANDB_SILENT": "true", **(env or {})})
