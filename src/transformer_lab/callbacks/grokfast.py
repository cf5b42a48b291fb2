"""Grokfast (Lee et al. 2024, "Grokfast: accelerated grokking by amplifying slow gradients"), EMA form.

Before each optimizer step every gradient g becomes g + lamb * ema, where ema = alpha * ema + (1 - alpha) * g
is a running average of the parameter's gradients (starting at the first one): the slow, generalising
component of the gradient is amplified. Runs before gradient clipping; its state is checkpointed.
"""

from __future__ import annotations

import lightning as L
import torch

from transformer_lab.choices import check_number


class GrokfastEMA(L.Callback):
    def __init__(self, alpha: float = 0.98, lamb: float = 2.0):
        check_number("alpha", alpha, False, "[0, 1)")
        check_number("lamb", lamb, False, "[0, inf)")
        self.alpha, self.lamb = alpha, lamb
        self.ema: dict[str, torch.Tensor] = {}

    @torch.no_grad()
    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        for name, p in pl_module.named_parameters():
            if p.grad is None:
                continue
            ema = self.ema.get(name)
            if ema is None:
                ema = self.ema[name] = p.grad.detach().clone()
            else:
                ema.mul_(self.alpha).add_(p.grad, alpha=1 - self.alpha)
            p.grad.add_(ema, alpha=self.lamb)

    def state_dict(self) -> dict:
        return {"ema": dict(self.ema)}

    def load_state_dict(self, state: dict) -> None:
        self.ema = dict(state["ema"])
