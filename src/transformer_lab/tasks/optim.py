"""AdamW, Adafactor, or Muon with AdamW, over decay / no-decay parameter groups, and nanoGPT's warmup + cosine
learning-rate schedule."""

from __future__ import annotations

import functools
import math
from collections.abc import Collection

import torch
from torch import nn

from transformer_lab.errors import ConfigError


def param_groups(
    model: nn.Module,
    lr: float,
    weight_decay: float,
    pretrained: Collection[str] = (),
    pretrained_lr: float | None = None,
    leave_out: Collection[str] = (),
) -> list[dict]:
    """Matrices (linear and embedding weights) decay; biases and norm gains (1-D tensors) do not. With
    `pretrained_lr`, the parameters named in `pretrained` (those init_from loaded: a pretrained body) take
    that peak learning rate and the others (a new head) `lr`; the schedule scales both alike. Those named in
    `leave_out` are another optimizer's."""
    groups: dict[tuple[bool, float], list] = {}
    for name, p in model.named_parameters():  # tied weights once, under their first name
        if p.requires_grad and name not in leave_out:
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
    leave_out: Collection[str] = (),
) -> torch.optim.AdamW:
    """torch's AdamW over `param_groups` (but those named in `leave_out`)."""
    params = param_groups(model, lr, weight_decay, pretrained, pretrained_lr, leave_out)
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


def hidden_matrices(model: nn.Module) -> set[str]:
    """The parameters Muon takes: the weights of the model's nn.Linear layers but its outputs (the layers a model
    class names in `output_layers`: logits are no hidden state). Embeddings, norms, biases and any other tensor
    are AdamW's; a weight tied to an embedding is the embedding's. A name in output_layers that the model lacks
    is refused (a layer renamed would go to Muon unnoticed); one it sets to None (BERT's head, as a masked LM) is not."""
    outputs = tuple(getattr(model, "output_layers", ()))
    for name in outputs:
        try:
            functools.reduce(getattr, name.split("."), model)
        except AttributeError:
            raise ConfigError(
                "model", f"{type(model).__qualname__}.output_layers names {name!r}, which is none of its layers"
            ) from None
    embedded = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    return {
        f"{name}.weight" if name else "weight"
        for name, m in model.named_modules(remove_duplicate=False)
        if isinstance(m, nn.Linear) and name not in outputs and id(m.weight) not in embedded and m.weight.requires_grad
    }


def muon_matrices(model: nn.Module) -> set[str]:
    """hidden_matrices, or a ConfigError where there are none for Muon to step."""
    hidden = hidden_matrices(model)
    if not hidden:
        raise ConfigError(
            "optim.name",
            f"muon steps the weights of nn.Linear layers that give no logits, and {type(model).__qualname__} has "
            "none: use adamw",
        )
    return hidden


# What each optimizer needs of a model, checked once the model is built, before the run directory is claimed (run/prepare.py)
NEEDS_OF_THE_MODEL = {"muon": muon_matrices}


def check_optimizer(name: str, model: nn.Module) -> None:
    if name in NEEDS_OF_THE_MODEL:
        NEEDS_OF_THE_MODEL[name](model)


def newton_schulz(
    G: torch.Tensor, coefficients: tuple[float, float, float], steps: int, eps: float, dtype=torch.bfloat16
) -> torch.Tensor:
    """torch's Newton-Schulz iteration (torch.optim.Muon's: in bfloat16, on the wide orientation, normalised by the
    Frobenius norm, quintic steps) over a stack of same-shaped matrices G (S, A, B) at once, or one matrix (A, B);
    `dtype` float32 where bf16 is emulated (a CPU without bf16 units)."""
    a, b, c = coefficients
    add_product = torch.baddbmm if G.dim() == 3 else torch.addmm
    X = G.to(dtype)
    tall = G.size(-2) > G.size(-1)
    if tall:
        X = X.mT
    X = X / X.norm(dim=(-2, -1), keepdim=True).clamp(min=eps)
    for _ in range(steps):
        gram = X @ X.mT  # (S, min, min)
        X = add_product(X, add_product(gram, gram, gram, beta=b, alpha=c), X, beta=a)
    return X.mT if tall else X


def shape_scale(adjust_lr_fn: str | None, shape: torch.Size) -> float:
    """torch.optim.Muon's adjust_lr_fn: how much of lr a matrix of this shape takes."""
    A, B = shape[:2]
    return math.sqrt(max(1, A / B)) if adjust_lr_fn in (None, "original") else 0.2 * math.sqrt(max(A, B))


class StackedMuon(torch.optim.Muon):
    """torch's Muon, its settings, state and update, but each step orthogonalises the matrices of one shape
    together: torch's runs Newton-Schulz matrix by matrix (it has no foreach), ~15 small matmuls each, which at
    this repository's sizes cost as much as the model's own forward and backward (benchmarks/muon_step.py times both).
    The same arithmetic, stacked (tests/unit/test_optim.py checks it against torch's, bit for bit), in `ns_dtype`
    (bfloat16 as torch's; float32 where the CPU has no bf16 units)."""

    def __init__(self, params, ns_dtype=torch.bfloat16, **settings):
        super().__init__(params, **settings)
        self.ns_dtype = ns_dtype

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            lr, momentum = group["lr"], group["momentum"]
            stacks: dict[torch.Size, list] = {}
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if "momentum_buffer" not in state:
                    state["momentum_buffer"] = torch.zeros_like(p.grad, memory_format=torch.preserve_format)
                buf = state["momentum_buffer"]
                buf.lerp_(p.grad, 1 - momentum)
                stacks.setdefault(p.shape, []).append((p, p.grad.lerp(buf, momentum) if group["nesterov"] else buf))
            for shape, pairs in stacks.items():
                settings = group["ns_coefficients"], group["ns_steps"], group["eps"], self.ns_dtype
                if len(pairs) == 1:  # (a batch of one is dearer than one matrix)
                    updates = [newton_schulz(pairs[0][1], *settings)]
                else:
                    updates = newton_schulz(torch.stack([u for _, u in pairs]), *settings)  # (S, A, B)
                rate = lr * shape_scale(group["adjust_lr_fn"], shape)
                for (p, _), update in zip(pairs, updates):
                    p.mul_(1 - lr * group["weight_decay"])
                    p.add_(update, alpha=-rate)
        return loss


class MuonWithAdamW(torch.optim.Optimizer):
    """Muon (StackedMuon) on the hidden matrices and AdamW on every other tensor, stepped as one optimizer (Lightning's
    automatic optimization takes one): its param_groups are both's, AdamW's first (train/lr is optim.lr's), so the
    learning-rate schedule and gradient clipping reach every group; its state_dict holds both."""

    def __init__(self, muon: StackedMuon, adamw: torch.optim.AdamW):
        self.muon, self.adamw = muon, adamw
        super().__init__([*adamw.param_groups, *muon.param_groups], {})  # (the same group dicts, shared)

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self.muon.step()
        self.adamw.step()
        return loss

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.muon.zero_grad(set_to_none)
        self.adamw.zero_grad(set_to_none)

    def state_dict(self) -> dict:
        return {"muon": self.muon.state_dict(), "adamw": self.adamw.state_dict()}

    def load_state_dict(self, state_dict: dict) -> None:
        self.muon.load_state_dict(state_dict["muon"])
        self.adamw.load_state_dict(state_dict["adamw"])
        # torch's load_state_dict makes new group dicts: share them again, or the schedule would set stale ones
        self.param_groups = [*self.adamw.param_groups, *self.muon.param_groups]


def muon(
    model: nn.Module,
    lr: float,
    weight_decay: float,
    betas: tuple[float, float],
    eps: float,
    fused: bool | None,
    muon_lr: float,
    momentum: float,
    shape_scaling: str,
    muon_weight_decay: float,
    pretrained: Collection[str] = (),
    pretrained_lr: float | None = None,
    ns_dtype: torch.dtype = torch.bfloat16,
) -> MuonWithAdamW:
    """torch's Muon (Jordan et al. 2024: Nesterov momentum, orthogonalised by Newton-Schulz) on `hidden_matrices` at
    muon_lr, decaying by muon_weight_decay; AdamW on the rest as `adamw` builds it. With pretrained_lr, Muon's loaded matrices take
    muon_lr scaled as AdamW's loaded tensors are (pretrained_lr / lr)."""
    hidden = muon_matrices(model)
    matrices: dict[float, list] = {}
    for name, p in model.named_parameters():
        if name in hidden:
            rate = muon_lr * (pretrained_lr / lr if pretrained_lr is not None and name in pretrained else 1.0)
            matrices.setdefault(rate, []).append(p)
    muon_groups = [{"params": matrices[rate], "lr": rate} for rate in sorted(matrices, key=lambda r: r != muon_lr)]
    return MuonWithAdamW(
        StackedMuon(
            muon_groups,
            ns_dtype,
            lr=muon_lr,
            weight_decay=muon_weight_decay,
            momentum=momentum,
            adjust_lr_fn=shape_scaling,
        ),
        adamw(model, lr, weight_decay, betas, eps, fused, pretrained, pretrained_lr, leave_out=hidden),
    )


def warmup_cosine(step: int, lr: float, min_lr: float, warmup_steps: int, decay_steps: int) -> float:
    """Linear warmup to lr over warmup_steps, cosine decay to min_lr at decay_steps, then flat."""
    if step < warmup_steps:
        return lr * (step + 1) / (warmup_steps + 1)
    if step >= decay_steps:
        return min_lr
    progress = (step - warmup_steps) / max(1, decay_steps - warmup_steps)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * progress)) * (lr - min_lr)
