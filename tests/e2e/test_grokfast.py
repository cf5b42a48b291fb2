"""The Grokfast EMA filter: exactly g + lamb * ema(g) before each step, selectable, and checkpointed.

Here: the command line; tests/unit/test_grokfast.py has the rest."""

import json

import torch

from helpers.runs import TINY, run_train


def test_grokfast_from_the_command_line(tmp_path):
    result = run_train(
        "data=modular",
        "data.p=11",
        "data.train_fraction=0.9",
        "data.batch_size=128",
        *TINY,
        "callbacks=[default,grokfast]",
        "callbacks.grokfast.lamb=1.0",
        "trainer.max_steps=40",
        "trainer.val_check_interval=20",
        "optim.warmup_steps=5",
        "logger=none",
        "trainer.log_every_n_steps=1",
        f"hydra.run.dir={tmp_path}",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    history = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    losses = [r["train/loss"] for r in history if "train/loss" in r]
    assert losses[-1] < losses[0]
    checkpoint = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)
    (state,) = [v for k, v in checkpoint["callbacks"].items() if k.startswith("GrokfastEMA")]
    assert state["ema"].keys() == {n for n, _ in checkpoint["state_dict"].items() if n.startswith("model.")} - {
        "model.lm_head.weight"
    }  # tied to the embedding: one parameter
