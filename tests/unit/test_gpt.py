import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from transformer_lab.models.gpt import GPT, Block, GPTConfig
from transformer_lab.models.layers import Attention


def test_attention_matches_multihead_attention_with_causal_mask():
    torch.manual_seed(0)
    B, T, C, H = 3, 11, 64, 4
    ours = Attention(C, H, bias=True).eval()
    reference = nn.MultiheadAttention(C, H, bias=True, batch_first=True).eval()
    with torch.no_grad():
        reference.in_proj_weight.copy_(ours.in_proj.weight)
        reference.in_proj_bias.copy_(torch.randn(3 * C))  # non-zero biases, so they are checked too
        ours.in_proj.bias.copy_(reference.in_proj_bias)
        reference.out_proj.weight.copy_(ours.out_proj.weight)
        reference.out_proj.bias.copy_(torch.randn(C))
        ours.out_proj.bias.copy_(reference.out_proj.bias)
    x = torch.randn(B, T, C)
    future = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)  # True = masked out
    expected, _ = reference(x, x, x, attn_mask=future, need_weights=False)
    torch.testing.assert_close(ours(x, causal=True), expected, atol=1e-5, rtol=1e-5)


def test_block_matches_transformer_encoder_layer_pre_ln():
    torch.manual_seed(0)
    C, H = 32, 4
    ours = Block(GPTConfig(n_embd=C, n_head=H, bias=True), rotary=None).eval()
    reference = nn.TransformerEncoderLayer(
        C, H, dim_feedforward=4 * C, dropout=0.0, activation="gelu", batch_first=True, norm_first=True
    ).eval()
    with torch.no_grad():
        for param in ours.parameters():
            param.normal_(0, 0.1)  # LayerNorm gains and biases away from their trivial init
        reference.self_attn.in_proj_weight.copy_(ours.attn.in_proj.weight)
        reference.self_attn.in_proj_bias.copy_(ours.attn.in_proj.bias)
        reference.self_attn.out_proj.weight.copy_(ours.attn.out_proj.weight)
        reference.self_attn.out_proj.bias.copy_(ours.attn.out_proj.bias)
        reference.linear1.weight.copy_(ours.mlp.up.weight)
        reference.linear1.bias.copy_(ours.mlp.up.bias)
        reference.linear2.weight.copy_(ours.mlp.down.weight)
        reference.linear2.bias.copy_(ours.mlp.down.bias)
        for mine, theirs in ((ours.ln_1, reference.norm1), (ours.ln_2, reference.norm2)):
            theirs.weight.copy_(mine.weight)
            theirs.bias.copy_(mine.bias)
    x = torch.randn(2, 9, C)
    mask = nn.Transformer.generate_square_subsequent_mask(9)
    torch.testing.assert_close(ours(x), reference(x, src_mask=mask, is_causal=True), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("pos_encoding", ["learned", "rope"])
@pytest.mark.parametrize("mlp", ["gelu", "swiglu"])
def test_future_tokens_never_change_earlier_logits(pos_encoding, mlp):
    torch.manual_seed(0)
    model = GPT(
        GPTConfig(
            vocab_size=50, block_size=16, n_layer=2, n_head=2, n_embd=32, bias=True, pos_encoding=pos_encoding, mlp=mlp
        )
    ).eval()
    idx = torch.randint(50, (2, 16))
    changed = idx.clone()
    changed[:, 9:] = torch.randint(50, (2, 7))
    a, b = model(idx), model(changed)
    torch.testing.assert_close(a[:, :9], b[:, :9], atol=1e-6, rtol=0)
    assert not torch.allclose(a[:, 9:], b[:, 9:])  # the change is visible where it should be


def test_gpt2_init_and_weight_tying():
    torch.manual_seed(0)
    config = GPTConfig(vocab_size=100, block_size=32, n_layer=8, n_head=4, n_embd=256)
    model = GPT(config)
    assert model.lm_head.weight is model.wte.weight
    residual = torch.cat([w.flatten() for b in model.blocks for w in (b.attn.out_proj.weight, b.mlp.down.weight)])
    assert residual.std().item() == pytest.approx(0.02 / math.sqrt(2 * config.n_layer), rel=0.05)
    assert model.blocks[0].mlp.up.weight.std().item() == pytest.approx(0.02, rel=0.05)
    untied = GPT(GPTConfig(vocab_size=100, block_size=32, n_layer=1, n_head=4, n_embd=64, tie_weights=False))
    assert untied.lm_head.weight is not untied.wte.weight


def test_swiglu_keeps_the_parameter_count_close():
    plain = GPT(GPTConfig(vocab_size=10, block_size=8, n_layer=2, n_head=2, n_embd=48))
    gated = GPT(GPTConfig(vocab_size=10, block_size=8, n_layer=2, n_head=2, n_embd=48, mlp="swiglu"))
    assert abs(gated.num_params() - plain.num_params()) / plain.num_params() < 0.02


def test_generate_greedy_and_top_k():
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=30, block_size=8, n_layer=1, n_head=2, n_embd=16)).eval()
    prompt = torch.randint(30, (2, 3))
    greedy = model.generate(prompt, 12, temperature=0)
    assert greedy.shape == (2, 15) and torch.equal(greedy[:, :3], prompt)
    # top_k=1 leaves one candidate: sampling equals greedy decoding, past the block size too
    assert torch.equal(model.generate(prompt, 12, temperature=1.0, top_k=1), greedy)
    # each greedy token is the argmax of the logits of its (cropped) context
    for t in range(3, 15):
        context = greedy[:, max(0, t - 8) : t]
        assert torch.equal(greedy[:, t], model(context)[:, -1].argmax(-1))


@pytest.mark.parametrize("pos_encoding", ["learned", "rope"])
def test_kv_cache_equals_recompute(pos_encoding):
    torch.manual_seed(0)
    model = GPT(
        GPTConfig(vocab_size=30, block_size=16, n_layer=2, n_head=2, n_embd=16, pos_encoding=pos_encoding)
    ).eval()
    seq = torch.randint(30, (2, 12))
    full = model(seq)
    cache = model.new_cache()
    # a prompt, then one token at a time, then a chunk of three (causal within the chunk, over the cache)
    pieces = [seq[:, :5], seq[:, 5:6], seq[:, 6:7], seq[:, 7:9], seq[:, 9:12]]
    cached = torch.cat([model(piece, cache) for piece in pieces], dim=1)
    torch.testing.assert_close(cached, full, atol=1e-5, rtol=1e-5)
    assert cache[0]["k"].shape == (2, 2, 12, 8)
    with pytest.raises(ValueError, match="block_size"):
        model(seq[:, :5], cache)  # 12 cached + 5 new > 16


@pytest.mark.parametrize("pos_encoding", ["learned", "rope"])
def test_generate_with_the_cache_equals_generate_without(pos_encoding):
    torch.manual_seed(0)
    model = GPT(
        GPTConfig(vocab_size=30, block_size=8, n_layer=2, n_head=2, n_embd=16, pos_encoding=pos_encoding)
    ).eval()
    prompt = torch.randint(30, (3, 3))
    # 15 new tokens: past block_size, where the window slides and the cache gives way to recomputation
    assert torch.equal(
        model.generate(prompt, 15, temperature=0), model.generate(prompt, 15, temperature=0, use_cache=False)
    )
    sampled = [
        model.generate(prompt, 15, top_k=5, generator=torch.Generator().manual_seed(1), use_cache=c)
        for c in (True, False)
    ]
    assert torch.equal(*sampled)


def test_sampling_is_reproducible_with_a_generator():
    model = GPT(GPTConfig(vocab_size=30, block_size=8, n_layer=1, n_head=2, n_embd=16)).eval()
    prompt = torch.zeros(1, 1, dtype=torch.long)
    a = model.generate(prompt, 20, top_k=10, generator=torch.Generator().manual_seed(3))
    b = model.generate(prompt, 20, top_k=10, generator=torch.Generator().manual_seed(3))
    assert torch.equal(a, b)


def test_forward_rejects_sequences_longer_than_block_size():
    model = GPT(GPTConfig(vocab_size=10, block_size=4, n_layer=1, n_head=1, n_embd=8))
    with pytest.raises(ValueError, match="block_size"):
        model(torch.zeros(1, 5, dtype=torch.long))


def test_model_learns_a_fixed_sequence():
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=10, block_size=8, n_layer=1, n_head=2, n_embd=32))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    x = torch.arange(9).remainder(10).unsqueeze(0)
    first = None
    for _ in range(60):
        loss = F.cross_entropy(model(x[:, :-1]).flatten(0, 1), x[:, 1:].flatten())
        first = first or loss.item()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert loss.item() < 0.1 * first
