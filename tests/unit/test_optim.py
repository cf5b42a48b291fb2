from types import SimpleNamespace

import pytest
import torch

from transformer_lab.errors import ConfigError
from transformer_lab.models.bert import Bert, BertConfig
from transformer_lab.models.encdec import EncDec, EncDecConfig
from transformer_lab.models.gpt import GPT, GPTConfig
from transformer_lab.models.t5 import T5, T5Config
from transformer_lab.tasks.optim import StackedMuon, adafactor, adamw, hidden_matrices, muon, warmup_cosine


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


def test_adafactor_keeps_the_groups_and_steps_each_tensor_in_proportion_to_its_size():
    # T5's initialisation gives its embedding an RMS of 1 and its feed-forward's output weights 1/sqrt(d_ff) =
    # 1/16 here: one AdamW learning rate moves the first 16x slower in proportion; Adafactor's relative steps do not.
    torch.manual_seed(0)
    model = T5(T5Config(vocab_size=50, n_layer=1, n_head=4, n_embd=64))
    optimizer = adafactor(model, lr=1e-2, weight_decay=0.0)
    decay, no_decay = optimizer.param_groups
    assert all(p.dim() >= 2 for p in decay["params"]) and all(p.dim() == 1 for p in no_decay["params"])
    embed, down = model.embed.weight, model.encoder[0].ff.down.weight
    before = embed.detach().clone(), down.detach().clone()
    src, tgt = torch.randint(3, 50, (4, 7)), torch.randint(3, 50, (4, 6))
    model(src, tgt).logsumexp(-1).mean().backward()
    optimizer.step()
    rms = lambda t: t.pow(2).mean().sqrt().item()  # noqa: E731
    moved = [rms(after.detach() - b) / rms(b) for after, b in zip((embed, down), before)]
    assert rms(before[0]) / rms(before[1]) > 10  # the sizes the initialisation gave them
    assert 0.5 < moved[0] / moved[1] < 2, moved  # ... yet both move by about the same fraction of it
    assert all(0 < m <= 1.1e-2 for m in moved), moved  # at most lr of their own size


MODELS = {
    "gpt": lambda: GPT(GPTConfig(vocab_size=20, block_size=8, n_layer=2, n_head=2, n_embd=16, bias=True)),
    "encdec": lambda: EncDec(EncDecConfig(vocab_size=20, block_size=8, n_layer=1, n_head=2, n_embd=16)),
    "bert": lambda: Bert(BertConfig(vocab_size=20, block_size=8, n_layer=1, n_head=2, n_embd=16, n_classes=3)),
    "t5": lambda: T5(T5Config(vocab_size=20, n_layer=1, n_head=2, n_embd=16)),
}


@pytest.mark.parametrize("kind", MODELS)
def test_muon_takes_the_hidden_linear_weights_and_adamw_the_rest(kind):
    model = MODELS[kind]()
    hidden = hidden_matrices(model)
    linear = {f"{n}.weight" for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    assert hidden == linear - {f"{layer}.weight" for layer in model.output_layers}  # no logits layer
    assert hidden and all(dict(model.named_parameters())[n].dim() == 2 for n in hidden)
    optimizer = muon(model, 1e-3, 0.1, (0.9, 0.99), 1e-8, None, 0.02, 0.95, "original", 0.1)
    in_muon = {id(p) for g in optimizer.muon.param_groups for p in g["params"]}
    in_adamw = {id(p) for g in optimizer.adamw.param_groups for p in g["params"]}
    assert in_muon == {id(p) for n, p in model.named_parameters() if n in hidden} and not in_muon & in_adamw
    assert in_muon | in_adamw == {id(p) for p in model.parameters()}  # every tensor, once (tied ones too)
    embedding = next(m for m in model.modules() if isinstance(m, torch.nn.Embedding)).weight
    assert id(embedding) in in_adamw


def test_one_muon_step_is_torchs_muon_on_the_matrices_and_adamw_on_the_rest():
    torch.manual_seed(0)
    ours, theirs = MODELS["gpt"](), MODELS["gpt"]()
    theirs.load_state_dict(ours.state_dict())
    idx = torch.randint(0, 20, (4, 8))
    hidden = hidden_matrices(ours)
    optimizer = muon(ours, 1e-3, 0.1, (0.9, 0.99), 1e-8, None, 0.02, 0.95, "match_rms_adamw", 0.05)
    matrices = [p for n, p in theirs.named_parameters() if n in hidden]
    by_hand = [
        torch.optim.Muon(matrices, lr=0.02, weight_decay=0.05, momentum=0.95, adjust_lr_fn="match_rms_adamw"),
        torch.optim.AdamW(adamw_groups := [
            {"params": [p for n, p in theirs.named_parameters() if n not in hidden and p.dim() >= 2], "weight_decay": 0.1},
            {"params": [p for n, p in theirs.named_parameters() if n not in hidden and p.dim() < 2], "weight_decay": 0.0},
        ], lr=1e-3, betas=(0.9, 0.99), eps=1e-8),
    ]  # fmt: skip
    assert len(adamw_groups) == len(optimizer.adamw.param_groups)
    for _ in range(3):
        for model, step in ((ours, optimizer.step), (theirs, lambda: [o.step() for o in by_hand])):
            model(idx).logsumexp(-1).mean().backward()
            step()
            model.zero_grad()
    for (name, a), b in zip(ours.named_parameters(), theirs.parameters()):
        assert torch.equal(a, b), name


@pytest.mark.parametrize("nesterov", [True, False])
@pytest.mark.parametrize("scaling", ["original", "match_rms_adamw"])
def test_stacked_muon_steps_as_torchs_muon_bit_for_bit(scaling, nesterov):
    torch.manual_seed(0)
    shapes = [(48, 16), (16, 16), (16, 64), (48, 16), (16, 64), (16, 16), (7, 5)]  # tall, square, wide; repeats
    ours = [torch.nn.Parameter(torch.randn(*s) * 0.1) for s in shapes]
    theirs = [torch.nn.Parameter(p.detach().clone()) for p in ours]
    groups = lambda ps: [{"params": ps[:4]}, {"params": ps[4:], "lr": 0.005}]  # noqa: E731
    settings = dict(lr=0.02, weight_decay=0.1, momentum=0.9, nesterov=nesterov, adjust_lr_fn=scaling)
    stacked, torchs = StackedMuon(groups(ours), **settings), torch.optim.Muon(groups(theirs), **settings)
    for step in range(4):
        for a, b in zip(ours, theirs):
            a.grad = torch.randn(a.shape, generator=torch.Generator().manual_seed(step))
            b.grad = a.grad.clone()
        ours[2].grad = None if step == 1 else ours[2].grad  # a matrix without a gradient this step
        theirs[2].grad = ours[2].grad
        stacked.step()
        torchs.step()
    for a, b in zip(ours, theirs):
        assert torch.equal(a, b)
    assert str(stacked.state_dict()) == str(torchs.state_dict())  # each loads the other's


def test_a_muon_state_dict_comes_back_and_the_schedule_still_reaches_every_group():
    model = MODELS["gpt"]()
    optimizer = muon(model, 1e-3, 0.1, (0.9, 0.99), 1e-8, None, 0.02, 0.95, "original", 0.1)
    model(torch.randint(0, 20, (2, 8))).sum().backward()
    optimizer.step()
    state = optimizer.state_dict()
    restored = muon(model, 1e-3, 0.1, (0.9, 0.99), 1e-8, None, 0.02, 0.95, "original", 0.1)
    restored.load_state_dict(state)
    assert str(restored.state_dict()) == str(state)
    scheduler = torch.optim.lr_scheduler.LambdaLR(restored, lambda step: 0.5)
    assert scheduler.get_last_lr()[0] == 0.5e-3  # AdamW's group first: train/lr is optim.lr's
    inner = restored.adamw.param_groups + restored.muon.param_groups
    assert [g["lr"] for g in inner] == [0.5e-3] * len(restored.adamw.param_groups) + [0.01]


def test_muon_scales_loaded_matrices_as_adamw_scales_loaded_tensors_and_refuses_a_model_without_matrices():
    model = MODELS["gpt"]()
    loaded = {n for n, _ in model.named_parameters() if n.startswith("blocks.0.")}  # a pretrained body, in part
    optimizer = muon(model, 1e-3, 0.1, (0.9, 0.99), 1e-8, None, 0.02, 0.95, "original", 0.1, loaded, 1e-4)
    rates = {id(p): g["lr"] for g in optimizer.param_groups for p in g["params"]}
    for name, p in model.named_parameters():
        base = 0.02 if name in hidden_matrices(model) else 1e-3
        assert rates[id(p)] == pytest.approx(base * (0.1 if name in loaded else 1.0)), name
    gru = torch.nn.Sequential(torch.nn.Embedding(10, 4), torch.nn.GRU(4, 4))
    with pytest.raises(ConfigError, match="muon steps the weights of nn.Linear layers that give no logits, and "):
        muon(gru, 1e-3, 0.1, (0.9, 0.99), 1e-8, None, 0.02, 0.95, "original", 0.1)


def test_muon_weight_decay_is_the_matrices_own_and_null_means_weight_decay(tmp_path):
    import lightning as L

    from helpers.runs import TINY, compose_cfg
    from transformer_lab.config.checks import validate
    from transformer_lab.run.build import build

    def decays(*overrides):
        cfg = compose_cfg(["data=modular", "data.p=11", *TINY, "optim.name=muon", "optim.weight_decay=0.3", *overrides],
                          output_dir=str(tmp_path))  # fmt: skip
        validate(cfg)  # (as train.py checks it first)
        task = build(cfg)[2]
        task.trainer = L.Trainer(max_steps=3, logger=False, enable_progress_bar=False, enable_model_summary=False)
        optimizer = task.configure_optimizers()["optimizer"]
        return {g["weight_decay"] for g in optimizer.muon.param_groups}, {
            g["weight_decay"] for g in optimizer.adamw.param_groups
        }

    assert decays() == ({0.3}, {0.3, 0.0})
    assert decays("optim.muon_weight_decay=0.05") == ({0.05}, {0.3, 0.0})


def test_newton_schulz_in_float32_is_the_same_iteration_nearer_to_exact():
    """optim.muon_precision=float32 (a CPU without bf16 units): the same quintic steps, closer to the float64 ones
    than bfloat16's, and an update of the same size (the iteration's singular values near 1 either way)."""
    from transformer_lab.tasks.optim import newton_schulz

    torch.manual_seed(0)
    G = torch.randn(3, 48, 16)
    settings = (3.4445, -4.7750, 2.0315), 5, 1e-7
    exact = newton_schulz(G.double(), *settings, dtype=torch.float64)
    half, single = (newton_schulz(G, *settings, dtype=d).double() for d in (torch.bfloat16, torch.float32))
    assert single.dtype == half.dtype == torch.float64 and single.shape == G.shape
    assert (single - exact).abs().max() < 1e-5 < (half - exact).abs().max()
    assert torch.linalg.matrix_norm(single).sub(torch.linalg.matrix_norm(half)).abs().max() < 0.05


@pytest.mark.parametrize(
    "accelerator, bf16_units, chosen",
    [("cpu", False, "float32"), ("cpu", True, "bfloat16"), ("gpu", False, "bfloat16")],
)
def test_muon_precision_follows_the_devices_bf16_units_and_reaches_the_optimizer(
    accelerator, bf16_units, chosen, monkeypatch, tmp_path
):
    from omegaconf import OmegaConf

    import transformer_lab.config.schema as schema
    from helpers.runs import TINY, compose_cfg
    from transformer_lab.run.build import build

    monkeypatch.setattr(schema, "cpu_has_bf16_units", lambda: bf16_units)
    cfg = compose_cfg(["data=modular", "data.p=11", *TINY, "optim.name=muon", f"trainer.accelerator={accelerator}"])
    assert OmegaConf.to_container(cfg, resolve=True)["optim"]["muon_precision"] == chosen
    if accelerator == "cpu":
        _, _, task = build(cfg, None)
        task.trainer = SimpleNamespace(max_steps=10, precision_plugin=None, gradient_clip_val=None)  # (what it reads)
        optimizer = task.configure_optimizers()["optimizer"]
        assert optimizer.muon.ns_dtype == getattr(torch, chosen)
