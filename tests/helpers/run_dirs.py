"""Run directories as train.py leaves them, written without training (compare's and runs()'s tests), and a run's
dataset evaluated on another file as evaluate builds it."""

import functools
import json

from helpers.runs import ROOT, compose_cfg


def fake_run(run_dir, overrides, val_loss):
    """A run directory as train.py leaves it, without training: its composed config (interpolations and
    Hydra's `${hydra:...}` unresolved, as Hydra writes it), summary.json and metrics.jsonl."""
    from omegaconf import OmegaConf

    (run_dir / ".hydra").mkdir(parents=True)
    (run_dir / ".hydra" / "config.yaml").write_text(composed_yaml(tuple(overrides)))
    OmegaConf.save(
        {"hydra": {"runtime": {"output_dir": str(run_dir), "cwd": str(ROOT)}}}, run_dir / ".hydra" / "hydra.yaml"
    )
    (run_dir / "summary.json").write_text(json.dumps({"val/loss": val_loss, "global_step": 10, "status": "completed"}))
    (run_dir / "metrics.jsonl").write_text(
        "".join(json.dumps({"step": s, "val/loss": val_loss + 1 / s}) + "\n" for s in (5, 10))
    )
    return run_dir


@functools.cache
def composed_yaml(overrides: tuple) -> str:
    """The config Hydra composes for these overrides, as it writes it (composed once per module)."""
    from omegaconf import OmegaConf

    return OmegaConf.to_yaml(compose_cfg(overrides, output_dir="${hydra:runtime.output_dir}"))


def seeded_runs(tmp_path):
    """Five runs: two learning rates, three and two seeds; val/loss chosen by hand."""
    losses = {("1e-3", 0): 2.0, ("1e-3", 1): 2.5, ("1e-3", 2): 3.0, ("3e-3", 0): 1.0, ("3e-3", 1): 1.4}
    return [
        fake_run(tmp_path / f"lr{lr}_s{seed}", ["data=modular", f"optim.lr={lr}", f"seed={seed}"], loss)
        for (lr, seed), loss in losses.items()
    ]


def evaluated_on(cls, trained, other, **settings):
    """A run's dataset set up on `trained`, then one evaluating its checkpoint on `other` (what evaluate
    builds: take_checkpoint with the run's record, then setup())."""
    run = cls(path=str(trained), **settings)
    run.setup()
    meta = {"config": {"data": {"path": str(trained)}}, **run.checkpoint_meta(), "data_files": run.data_files()}
    data = cls(path=str(other), **settings)
    data.take_checkpoint(meta, str(other))
    data.setup()
    return run, data, meta
