"""T5: relative position buckets, attention without scaling, shared position bias, causality, padding.

Here: span corruption through train.py; tests/unit/test_t5.py has the rest."""

import json

from helpers.runs import TINY, needs_shakespeare, run_train

# a small T5 learning span corruption fast (the data, steps and logger are each test's)
T5 = ["model=t5", *TINY, "model.n_head=4", "model.n_embd=64", "model.d_ff=128", "model.dropout=0.0",
      "task.input_length=32", "data.batch_size=16", "optim.lr=1e-2", "optim.warmup_steps=10",
      "trainer.log_every_n_steps=1", "callbacks=none"]  # fmt: skip


@needs_shakespeare
def test_t5_span_corruption_on_shakespeare_learns(tmp_path):
    result = run_train(*T5, "data=shakespeare", "trainer.max_steps=120", "trainer.val_check_interval=40",
                       "trainer.limit_val_batches=4", "logger=csv", f"hydra.run.dir={tmp_path}")  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    history = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    train = [r["train/loss"] for r in history if "train/loss" in r]
    val = [r["val/loss"] for r in history if "val/loss" in r]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert train[0] > 4.0 and summary["train/loss"] < train[0] - 1.5, (train[:3], summary)
    assert len(val) == 3 and val[-1] < val[0] and summary["val/acc"] > 0.2 and summary["status"] == "completed"
    output = result.stdout + result.stderr
    assert "span fills at step 40" in output and "<X0>" in output


def test_t5_span_corruption_on_translation_text(tmp_path):
    result = run_train(*T5, "data=translation", "data.vocab_size=500", "trainer.max_steps=60",
                       "trainer.val_check_interval=30", "trainer.limit_val_batches=2", "logger=none",
                       f"hydra.run.dir={tmp_path}")  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    history = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    train = [r["train/loss"] for r in history if "train/loss" in r]
    assert summary["train/loss"] < train[0] - 1.0 and "val/loss" in summary and "test/bleu" not in summary
