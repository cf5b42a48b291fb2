"""The NanoGPT speedrun's model options on gpt (issue #45): QK-norm, the ReLU² MLP (mlp=relu2, with the other
activations in test_layers.py), zero-initialised output projections and logit soft-capping, each against the
formula written out by hand, each off by default."""

import pytest
import torch
import torch.nn.functional as F

from transformer_lab.errors import ConfigError
from transformer_lab.models.gpt import GPT, GPTConfig
from transformer_lab.models.layers import Attention

SMALL = dict(vocab_size=30, block_size=16, n_layer=2, n_head=2, n_embd=16)


def rms(t: torch.Tensor) -> torch.Tensor:
    """Each head's vector divided by its root mean square (F.rms_norm without a weight, eps float32's)."""
    return t / (t.pow(2).mean(-1, keepdim=True) + torch.finfo(t.dtype).eps).sqrt()


def by_hand(attn: Attention, x: torch.Tensor, causal: bool, memory: torch.Tensor | None = None) -> torch.Tensor:
    """softmax(rms(q) rms(k)ᵀ / √d) v, heads written out."""
    B, T, C = x.shape
    nh, hd = attn.n_head, attn.head_dim
    w = attn.in_proj.weight
    src = x if memory is None else memory
    q, k, v = x @ w[:C].T, src @ w[C : 2 * C].T, src @ w[2 * C :].T
    q, k, v = (t.view(B, -1, nh, hd).transpose(1, 2) for t in (q, k, v))  # (B, nh, L, hd)
    scores = rms(q) @ rms(k).transpose(-1, -2) / hd**0.5
    if causal:
        scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    y = scores.softmax(-1) @ v
    return attn.out_proj(y.transpose(1, 2).reshape(B, T, C))


@pytest.mark.parametrize("causal", [False, True])
def test_qk_norm_is_attention_over_rms_normalised_queries_and_keys(causal):
    torch.manual_seed(0)
    attn = Attention(32, 4, bias=False, qk_norm=True)
    x = torch.randn(2, 7, 32)
    torch.testing.assert_close(attn(x, causal=causal), by_hand(attn, x, causal), atol=1e-5, rtol=1e-5)
    memory = torch.randn(2, 5, 32)
    torch.testing.assert_close(attn(x, memory), by_hand(attn, x, False, memory), atol=1e-5, rtol=1e-5)


def test_qk_norm_makes_attention_blind_to_the_size_of_queries_and_keys():
    torch.manual_seed(0)
    x = torch.randn(2, 7, 32)
    for qk_norm in (True, False):
        attn = Attention(32, 4, bias=False, qk_norm=qk_norm)
        before = attn(x, causal=True)
        with torch.no_grad():
            attn.in_proj.weight[:32] *= 5.0  # queries 5x larger
            attn.in_proj.weight[32:64] *= 3.0  # keys 3x larger
        same = torch.allclose(attn(x, causal=True), before, atol=1e-5, rtol=1e-5)
        assert same == qk_norm  # without it, the logits' scale (the softmax's temperature) moves


def test_qk_norm_cross_attention_cache_holds_normalised_keys_once():
    torch.manual_seed(0)
    attn = Attention(32, 4, bias=False, qk_norm=True)
    x, memory = torch.randn(2, 6, 32), torch.randn(2, 5, 32)
    cache = {}
    pieces = [attn(x[:, a:b], memory, cache=cache) for a, b in ((0, 2), (2, 3), (3, 6))]
    torch.testing.assert_close(torch.cat(pieces, dim=1), attn(x, memory), atol=1e-5, rtol=1e-5)


OPTIONS = dict(qk_norm=True, mlp="relu2", zero_init_projections=True, logit_softcap=5.0)


@pytest.mark.parametrize("pos_encoding", ["learned", "rope"])
def test_with_every_option_the_cache_equals_recompute_and_the_future_stays_unseen(pos_encoding):
    torch.manual_seed(0)
    model = GPT(GPTConfig(**SMALL, pos_encoding=pos_encoding, **OPTIONS)).eval()
    with torch.no_grad():  # the projections trained away from zero, so every branch counts
        for block in model.blocks:
            block.attn.out_proj.weight.normal_(0, 0.3)
            block.mlp.down.weight.normal_(0, 0.3)
    seq = torch.randint(30, (2, 12))
    full = model(seq)
    cache = model.new_cache()
    cached = torch.cat([model(seq[:, a:b], cache) for a, b in ((0, 5), (5, 6), (6, 9), (9, 12))], dim=1)
    torch.testing.assert_close(cached, full, atol=1e-5, rtol=1e-5)
    changed = seq.clone()
    changed[:, 8:] = (changed[:, 8:] + 1) % 30
    torch.testing.assert_close(model(changed)[:, :8], full[:, :8], atol=0, rtol=0)


def test_relu2_mlp_squares_the_relu_at_the_plain_mlps_width():
    torch.manual_seed(0)
    relu2, relu = (GPT(GPTConfig(**SMALL, mlp=m)) for m in ("relu2", "relu"))
    assert relu2.num_params() == relu.num_params()
    mlp = relu2.blocks[0].mlp
    x = torch.randn(3, 16)
    torch.testing.assert_close(mlp(x), mlp.down(F.relu(mlp.up(x)) ** 2))


def test_zero_initialised_projections_make_every_block_start_as_the_identity_and_still_learn():
    torch.manual_seed(0)
    model = GPT(GPTConfig(**SMALL, zero_init_projections=True, tie_weights=False))
    zeroed = [b.attn.out_proj.weight for b in model.blocks] + [b.mlp.down.weight for b in model.blocks]
    assert all(not w.any() for w in zeroed)
    assert all(b.attn.in_proj.weight.std() > 0.01 and b.mlp.up.weight.std() > 0.01 for b in model.blocks)
    idx = torch.randint(30, (2, 10))
    embedded = model.wte(idx) + model.wpe(torch.arange(10))  # the blocks add nothing yet
    torch.testing.assert_close(model(idx), model.lm_head(model.ln_f(embedded)), atol=0, rtol=0)
    F.cross_entropy(model(idx).flatten(0, 1), idx.roll(-1, 1).flatten()).backward()
    assert all(w.grad.abs().sum() > 0 for w in zeroed)  # the gradient reaches them: they move off zero
    default = GPT(GPTConfig(**SMALL))
    assert default.blocks[0].attn.out_proj.weight.std() > 0.001  # off by default


def test_logit_softcap_is_c_tanh_of_the_logits_over_c():
    torch.manual_seed(0)
    capped = GPT(GPTConfig(**SMALL, logit_softcap=2.0)).eval()
    plain = GPT(GPTConfig(**SMALL)).eval()
    plain.load_state_dict(capped.state_dict())
    with torch.no_grad():
        capped.lm_head.weight.mul_(50.0)  # logits well past the cap (tied: the embedding grows too, as in both)
        plain.lm_head.weight.copy_(capped.lm_head.weight)
    idx = torch.randint(30, (2, 10))
    raw = plain(idx)
    assert raw.abs().max() > 4.0
    torch.testing.assert_close(capped(idx), 2.0 * torch.tanh(raw / 2.0))
    assert capped(idx).abs().max() <= 2.0  # (tanh rounds to 1 in float32 past ~9)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert capped(idx).dtype == torch.float32  # tanh taken in float32, not bf16


def test_the_options_are_off_by_default_and_a_bad_cap_is_one_line():
    config = GPTConfig()
    assert (config.qk_norm, config.mlp, config.zero_init_projections, config.logit_softcap) == (
        False,
        "gelu",
        False,
        None,
    )
    for bad in (0.0, -1.0, float("inf"), float("nan")):
        with pytest.raises(ConfigError, match=rf"^logit_softcap: must be a number > 0 or null, got {bad}$"):
            GPTConfig(logit_softcap=bad)
