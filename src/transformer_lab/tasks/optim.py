"""AdamW or Adafactor with decay / no-decay parameter groups, and nanoGPT's warmup + cosine learning-rate schedule."""

from __future__ import annotations

import math
from collections.abc import Collection

import torch
from torch import nn


def param_groups(
    model: nn.Module,
    lr: float,
    weight_decay: float,
    pretrained: Collection[str] = (),
    pretrained_lr: float | None = None,
) -> list[dict]:
    """Matrices (linear and embedding weights) decay; biases and norm gains (1-D tensors) do not. With
    `pretrained_lr`, the parameters named in `pretrained` (those init_from loaded: a pretrained body) take
    that peak learning rate and the others (a new head) `lr`; the schedule scales both alike."""
    groups: dict[tuple[bool, float], list] = {}
    for name, p in model.named_parameters():  # tied weights once, under their first name
        if p.requires_grad:
            rate = pretrained_lr if pretrained_lr is not None and name in pretrained else lr
            groups.setdefault((p.dim() >= 2, rate), []).append(p)
    order = sorted(groups, key=lambda key: (key[1] != lr, not key[0]))  # optim.lr first, decaying first
    return [{"params": groups[key], "weight_decay": weight_decay if key[0] else 0.0, "lr": key[1]} for key in order]


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
    """torch's AdamW over `param_groups`."""
    params = param_groups(model, lr, weight_decay, pretrained, pretrained_lr)
    return torch.optim.AdamW(params, lr=lr, betas=betas, eps=eps, fused=fused)


def adafactor(
    model: nn.Module,
    lr: float,
    weight_decay: float,
    pretrained: Collection[str] = (),
    pretrained_lr: float | None = None,
) -> torch.optim.Adafactor:
    """torch's Adafactor (Shazeer & Stern 2018, as T5 was trained) over `param_groups`: no momentum, a
    factored second moment, and relative steps: each tensor moves by lr times its own RMS (at least 1e-3), so
    T5's embeddings (RMS 1) and its query weights (RMS 1/sqrt(n_embd * d_head)) move alike in proportion,
    which one AdamW learning rate cannot do. Its lr is thus a relative size (T5's 1e-2), and torch caps it
    at 1/sqrt(step)."""
    return torch.optim.Adafactor(param_groups(model, lr, weight_decay, pretrained, pretrained_lr), lr=lr)


def warmup_cosine(step: int, lr: float, min_lr: float, warmup_steps: int, decay_steps: int) -> float:
    """Linear warmup to lr over warmup_steps, cosine decay to min_lr at decay_steps, then flat."""
    if step < warmup_steps:
        return lr * (step + 1) / (warmup_steps + 1)
    if step >= decay_steps:
        return min_lr
    progress = (step - warmup_steps) / max(1, decay_steps - warmup_steps)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * progress)) * (lr - min_lr)
