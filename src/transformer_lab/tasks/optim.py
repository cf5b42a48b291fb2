"""AdamW with decay / no-decay parameter groups, and nanoGPT's warmup + cosine learning-rate schedule."""

from __future__ import annotations

import math
from collections.abc import Collection

import torch
from torch import nn


def adamw(
    model: nn.Module,
    lr: float,
    weight_decay: float,
    betas: tuple[float, float],
    eps: float,
    fused: bool | None,
    pretrained: Collection[str] = (),
    pretrained_lr: float | None = None,
) -> torch.optim.AdamW:
    """Matrices (linear and embedding weights) decay; biases and norm gains (1-D tensors) do not. With
    `pretrained_lr`, the parameters named in `pretrained` (those init_from loaded: a pretrained body) take
    that peak learning rate and the others (a new head) `lr`; the schedule scales both alike."""
    groups: dict[tuple[bool, float], list] = {}
    for name, p in model.named_parameters():  # tied weights once, under their first name
        if p.requires_grad:
            rate = pretrained_lr if pretrained_lr is not None and name in pretrained else lr
            groups.setdefault((p.dim() >= 2, rate), []).append(p)
    order = sorted(groups, key=lambda key: (key[1] != lr, not key[0]))  # optim.lr first, decaying first
    params = [{"params": groups[key], "weight_decay": weight_decay if key[0] else 0.0, "lr": key[1]} for key in order]
    return torch.optim.AdamW(params, lr=lr, betas=betas, eps=eps, fused=fused)


def warmup_cosine(step: int, lr: float, min_lr: float, warmup_steps: int, decay_steps: int) -> float:
    """Linear warmup to lr over warmup_steps, cosine decay to min_lr at decay_steps, then flat."""
    if step < warmup_steps:
        return lr * (step + 1) / (warmup_steps + 1)
    if step >= decay_steps:
        return min_lr
    progress = (step - warmup_steps) / max(1, decay_steps - warmup_steps)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * progress)) * (lr - min_lr)
