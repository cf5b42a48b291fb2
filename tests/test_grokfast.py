"""The Grokfast EMA filter: exactly g + lamb * ema(g) before each step, selectable, and checkpointed."""

import json

import pytest
import torch

from conftest import TINY
from transformer_lab.callbacks import GrokfastEMA


class Module(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(3, 2)


def test_filter_adds_lamb_times_the_gradients_running_average():
    module, callback = Module(), GrokfastEMA(alpha=0.9, lamb=2.0)
    raw = [{n: torch.randn_like(p) for n, p in module.named_parameters()} for _ in range(3)]
    ema = {}
    for grads in raw:
        for name, p in module.named_parameters():
            p.grad = grads[name].clone()
        callback.on_before_optimizer_step(None, module, None)
        for name, p in module.named_parameters():
            ema[name] = grads[name] if name not in ema else 0.9 * ema[name] + 0.1 * grads[name]
            torch.testing.assert_close(p.grad, grads[name] + 2.0 * ema[name])
    restored = GrokfastEMA(alpha=0.9, lamb=2.0)
    restored.load_state_dict(callback.state_dict())
    assert restored.ema.keys() == ema.keys() and all(torch.equal(restored.ema[n], callback.ema[n]) for n in ema)


@pytest.mark.e2e
def test_grokfast_from_the_command_line(tmp_path, train_process):
    result = train_process.run(
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
