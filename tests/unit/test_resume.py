"""Exact resume after a crash, graceful interrupts, and the non-finite loss guard, on real train.py runs.

Here: whole files; tests/e2e/test_resume.py has the rest."""

import pytest


def test_only_whole_files_appear(tmp_path):
    from transformer_lab.store.atomic import atomic_write

    target = tmp_path / "out.bin"
    target.write_bytes(b"old")
    with pytest.raises(RuntimeError):
        with atomic_write(target) as f:
            f.write(b"half of the new")
            raise RuntimeError("crash mid-write")
    assert target.read_bytes() == b"old" and [p.name for p in tmp_path.iterdir()] == ["out.bin"]


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
