"""BERT: the encoder is nn.TransformerEncoder's computation, padding changes nothing, and it learns equations.

Here: learning equations through train.py; tests/unit/test_bert.py has the rest."""

import json

import pytest

from helpers.modular import recomputed_val_accuracy
from helpers.runs import TINY, logged, run_train


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_bert_learns_modular_answers(pooling, tmp_path):
    result = run_train(
        "model=bert",
        "data=modular",
        "data.p=11",
        "data.train_fraction=0.9",
        "data.batch_size=128",
        *TINY,
        "model.n_embd=64",
        "model.n_head=4",
        "model.dropout=0.0",
        f"model.pooling={pooling}",
        "trainer.max_steps=150",
        "trainer.val_check_interval=50",
        "optim.warmup_steps=10",
        "optim.lr=3e-3",
        "logger=csv",
        "trainer.log_every_n_steps=1",
        f"hydra.run.dir={tmp_path}",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    train_losses = logged(tmp_path, "train/loss")
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert train_losses[0] > 2.0 and summary["train/loss"] < 0.5 * train_losses[0], (train_losses, summary)
    assert summary["train/acc"] > 0.5 and summary["status"] == "completed"
    assert summary["val/acc"] == pytest.approx(recomputed_val_accuracy(tmp_path), abs=1e-6)
    assert "examples at step" in result.stdout + result.stderr
