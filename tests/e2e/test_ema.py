"""callbacks=[default,ema]: Lightning's EMAWeightAveraging through train.py, validated and resumed exactly."""

import json

import pytest
import torch

from helpers.runs import TINY, run_train
from helpers.translation import write_pairs

RUN = [
    "data=modular",
    "data.p=11",
    "data.train_fraction=0.9",
    "data.batch_size=16",
    *TINY,
    "model.dropout=0.1",
    "callbacks=[default,ema]",
    "callbacks.ema.decay=0.9",
    "callbacks.last_checkpoint.every_n_train_steps=10",
    "trainer.val_check_interval=10",
    "optim.decay_steps=40",
    "logger=none",
]


def state(path):
    return torch.load(path, weights_only=True)


def test_ema_validates_the_average_and_resumes_exactly(tmp_path):
    whole, split = tmp_path / "whole", tmp_path / "split"
    assert run_train(*RUN, "trainer.max_steps=40", f"hydra.run.dir={whole}").returncode == 0
    first = run_train(*RUN, "trainer.max_steps=20", f"hydra.run.dir={split}")
    assert first.returncode == 0, first.stderr[-3000:]
    resumed = run_train(*RUN, "trainer.max_steps=40", "ckpt_path=last", f"hydra.run.dir={split}")
    assert resumed.returncode == 0, resumed.stderr[-3000:]

    a, b = state(whole / "checkpoints" / "last.ckpt"), state(split / "checkpoints" / "last.ckpt")
    # the checkpoint's weights are the average; the trained ones are kept beside them
    assert a["state_dict"].keys() == a["current_model_state"].keys()
    assert any(not torch.equal(a["state_dict"][k], a["current_model_state"][k]) for k in a["state_dict"])
    for key in ("state_dict", "current_model_state"):  # both continue exactly across the resume
        assert all(torch.equal(a[key][k], b[key][k]) for k in a[key]), key
    ours, theirs = json.loads((whole / "summary.json").read_text()), json.loads((split / "summary.json").read_text())
    assert ours["val/loss"] == theirs["val/loss"]
    # What was validated (and tested, from best.ckpt) is the average: best.ckpt's weights, evaluated again, give
    # the logged best validation loss.
    from transformer_lab.commands.evaluate import evaluate

    metrics = evaluate(str(whole), "val", ["trainer.limit_val_batches=2"], out=str(tmp_path / "eval.json"))
    assert metrics["metrics"]["val/loss"] == pytest.approx(ours["val/loss_best"], abs=1e-6)


def test_ema_leaves_training_alone_and_evaluate_reads_either_weights(tmp_path):
    from transformer_lab.commands.evaluate import evaluate
    from transformer_lab.errors import UserError

    ema, plain = tmp_path / "ema", tmp_path / "plain"
    assert run_train(*RUN, "trainer.max_steps=40", f"hydra.run.dir={ema}").returncode == 0
    without = [o for o in RUN if not o.startswith("callbacks")] + ["callbacks.last_checkpoint.every_n_train_steps=10"]
    assert run_train(*without, "trainer.max_steps=40", f"hydra.run.dir={plain}").returncode == 0
    last = ema / "checkpoints" / "last.ckpt"
    check = ["trainer.limit_val_batches=2"]
    trained = evaluate(str(last), "val", check, out=str(tmp_path / "t.json"), weights="trained")["metrics"]["val/loss"]
    average = evaluate(str(last), "val", check, out=str(tmp_path / "a.json"))["metrics"]["val/loss"]
    # the average does not steer training: the trained weights are those of the same run without it
    assert trained == pytest.approx(json.loads((plain / "summary.json").read_text())["val/loss"], abs=1e-6)
    assert average != pytest.approx(trained, abs=1e-4)
    with pytest.raises(UserError, match="weights=trained: .* keeps no trained weights apart"):
        evaluate(str(plain / "checkpoints" / "last.ckpt"), "val", check, weights="trained")


def test_the_test_after_training_scores_the_average(tmp_path):
    """train.py tests best.ckpt after fit: its saved weights, the average, not the trained weights the
    checkpoint keeps beside them for resuming (which Lightning's callback would load back)."""
    from transformer_lab.commands.evaluate import evaluate

    pairs, run = write_pairs(tmp_path / "pairs.tsv", n=300), tmp_path / "run"
    translation = ["model=encdec", "data=translation", f"data.path={pairs}", "data.vocab_size=100"]
    result = run_train(
        *translation,
        f"paths.data_dir={tmp_path / 'data'}",
        *TINY,
        "data.batch_size=32",
        "callbacks=[default,ema]",
        "callbacks.ema.decay=0.9",
        "trainer.max_steps=30",
        "trainer.val_check_interval=30",
        "optim.lr=3e-3",
        "task.decode.beam_size=1",
        "logger=none",
        f"hydra.run.dir={run}",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    tested = json.loads((run / "summary.json").read_text())["test/loss"]
    best = run / "checkpoints" / "best.ckpt"
    average = evaluate(str(best), "test", out=str(tmp_path / "a.json"))["metrics"]["test/loss"]
    trained = evaluate(str(best), "test", out=str(tmp_path / "t.json"), weights="trained")["metrics"]["test/loss"]
    assert trained != pytest.approx(average, abs=1e-3)
    assert tested == pytest.approx(average, abs=1e-5)
