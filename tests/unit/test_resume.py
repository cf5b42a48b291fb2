"""Exact resume after a crash, graceful interrupts, and the non-finite loss guard, on real train.py runs.

Here: whole files; tests/e2e/test_resume.py has the rest."""

import pytest


def test_a_resume_refusal_lists_every_key_a_resume_may_change_model_dropout_and_compile_too():
    from transformer_lab.config.compatibility import check_changeable
    from transformer_lab.errors import ConfigError

    with pytest.raises(ConfigError) as refused:
        check_changeable({"data.train_fraction": (0.5, 0.4)}, "run/checkpoints/last.ckpt")
    assert str(refused.value) == (
        "data.train_fraction: run/checkpoints/last.ckpt was trained with data.train_fraction=0.5, and a resume continues "
        "it as it was trained (it may change only ckpt_path, trainer, logger, callbacks, paths, attention_kernel, "
        "objective, optim.decay_steps, data.path, data.cache_dir, data.num_workers, data.val_batch_size, task.sample, "
        "task.decode, model.dropout, model.compile: docs/runs.md); resume without data.train_fraction=0.4, or start a "
        "new run from its weights with init_from=run/checkpoints/last.ckpt"
    )
    check_changeable({"model.dropout": (0.0, 0.1), "model.compile": (False, True)}, "run/checkpoints/last.ckpt")


def test_a_resume_that_would_train_for_hours_says_so(tmp_path):
    """The long-run warning counts its steps from the first this process trains (a resume's from its checkpoint's
    step, not from step 1, which a resume never sees: a stranger's finding)."""
    from helpers.runs import run_train

    tiny = ["data=modular", "data.p=13", "model.n_layer=1", "model.n_embd=32", "model.n_head=2", "logger=none"]
    run = [f"hydra.run.dir={tmp_path}", "trainer.val_check_interval=12", "callbacks.long_run.hours=1e-9"]
    first = run_train(*tiny, *run, "trainer.max_steps=12")
    assert first.returncode == 0 and "this run would train for" in first.stdout + first.stderr, first.stderr[-2000:]
    resumed = run_train(*run, "ckpt_path=last", "trainer.max_steps=36")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    warning = next(
        line for line in (resumed.stdout + resumed.stderr).splitlines() if "this run would train for" in line
    )
    assert "(13 steps at" in warning  # (10 steps after its first, step 13: 36 - 23 to go)
    # the presets for its data and model, one through the preset it names in its defaults (grokking_fast: grokking)
    assert warning.endswith("sized for a CPU: python train.py experiment=grokking or experiment=grokking_fast")


def test_a_resumes_record_names_the_options_it_ran(tmp_path):
    """A resume's .hydra/TIME/hydra.yaml records the choices and config sources of the config it ran (its
    checkpoint's overrides composed again), not of its own command line's defaults (a stranger's finding:
    `data: shakespeare`, `logger: wandb` for a run of data=modular logger=csv)."""
    from omegaconf import OmegaConf

    from helpers.runs import run_train

    tiny = ["data=modular", "data.p=13", "model.n_layer=1", "model.n_embd=32", "model.n_head=2", "logger=csv"]
    first = run_train(*tiny, "trainer.max_steps=4", "trainer.val_check_interval=2", f"hydra.run.dir={tmp_path}")
    assert first.returncode == 0, first.stderr[-2000:]
    resumed = run_train("ckpt_path=last", "trainer.max_steps=6", f"hydra.run.dir={tmp_path}")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    (record,) = [p for p in (tmp_path / ".hydra").iterdir() if p.is_dir()]
    runtime = OmegaConf.load(record / "hydra.yaml").hydra.runtime
    assert (runtime.choices.data, runtime.choices.logger) == ("modular", "csv")
    assert OmegaConf.load(record / "hydra.yaml").hydra.overrides.task == ["ckpt_path=last", "trainer.max_steps=6"]


def test_a_completed_run_resumed_further_logs_its_training_metrics_at_every_logging_step(tmp_path):
    """A checkpoint saved as training ended held Lightning's count of batches that stepped one ahead of what a
    resume expects, and no training row of the resumed steps reached the loggers (a stranger's finding, on W&B;
    CSV's the same): the logged steps after the resume are those metrics.jsonl has."""
    import csv
    import json

    from helpers.runs import run_train

    tiny = ["data=modular", "data.p=13", "data.batch_size=16", "model.n_layer=1", "model.n_embd=32", "model.n_head=2"]
    run = [*tiny, "logger=csv", "trainer.val_check_interval=20", "trainer.log_every_n_steps=10"]
    assert run_train(*run, "trainer.max_steps=40", f"hydra.run.dir={tmp_path}").returncode == 0
    resumed = run_train("ckpt_path=last", "trainer.max_steps=80", f"hydra.run.dir={tmp_path}")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    with open(tmp_path / "csv" / "metrics.csv") as f:
        logged = [int(row["step"]) for row in csv.DictReader(f) if row.get("train/loss")]
    local = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert logged == [r["step"] for r in local if "train/loss" in r] == [10, 20, 30, 40, 50, 60, 70, 80]
