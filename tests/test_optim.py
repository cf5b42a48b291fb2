import pytest

from transformer_lab.models.gpt import GPT, GPTConfig
from transformer_lab.tasks.optim import adamw, warmup_cosine


def test_warmup_then_cosine_to_min_lr():
    lr = lambda step: warmup_cosine(step, lr=1e-3, min_lr=1e-4, warmup_steps=100, decay_steps=2000)  # noqa: E731
    assert lr(0) == pytest.approx(1e-3 / 101)
    assert lr(99) == pytest.approx(1e-3 * 100 / 101)
    assert lr(100) == pytest.approx(1e-3)
    assert lr(1050) == pytest.approx(5.5e-4)  # half way down the cosine
    assert lr(2000) == lr(5000) == pytest.approx(1e-4)
    steps = [lr(s) for s in range(100, 2001)]
    assert all(a >= b for a, b in zip(steps, steps[1:]))


def test_adamw_decays_matrices_only_and_counts_tied_weights_once():
    model = GPT(GPTConfig(vocab_size=20, block_size=8, n_layer=2, n_head=2, n_embd=16, bias=True))
    optimizer = adamw(model, lr=1e-3, weight_decay=0.1, betas=(0.9, 0.99), eps=1e-8, fused=None)
    decay, no_decay = optimizer.param_groups
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert all(p.dim() >= 2 for p in decay["params"]) and all(p.dim() == 1 for p in no_decay["params"])
    counted = sum(p.numel() for g in optimizer.param_groups for p in g["params"])
    assert counted == sum(p.numel() for p in model.parameters())  # parameters() yields a tied weight once
    assert any(p is model.wte.weight for p in decay["params"])
