"""The Grokfast EMA filter: exactly g + lamb * ema(g) before each step, selectable, and checkpointed.

Here: the filter; tests/e2e/test_grokfast.py has the rest."""

import torch

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
