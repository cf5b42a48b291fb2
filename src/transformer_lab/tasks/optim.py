"""AdamW with decay / no-decay parameter groups, and nanoGPT's warmup + cosine learning-rate schedule."""

from __future__ import annotations

import math

import torch
from torch import nn


def adamw(
    model: nn.Module, lr: float, weight_decay: float, betas: tuple[float, float], eps: float, fused: bool | None
) -> torch.optim.AdamW:
    """Matrices (linear and embedding weights) decay; biases and norm gains (1-D tensors) do not."""
    params = {id(p): p for p in model.parameters() if p.requires_grad}.values()  # tied weights once
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps, fused=fused)


def warmup_cosine(step: int, lr: float, min_lr: float, warmup_steps: int, decay_steps: int) -> float:
    """Linear warmup to lr over warmup_steps, cosine decay to min_lr at decay_steps, then flat."""
    if step < warmup_steps:
        return lr * (step + 1) / (warmup_steps + 1)
    if step >= decay_steps:
        return min_lr
    progress = (step - warmup_steps) / max(1, decay_steps - warmup_steps)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * progress)) * (lr - min_lr)
