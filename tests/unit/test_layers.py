"""The shared layers (models/layers.py): caches that take a chunk of new positions, the feed-forward
variants, and checkpoints written with the per-model parameter names of before."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from transformer_lab.models.encdec import EncDec, EncDecConfig
from transformer_lab.models.layers import Attention, FeedForward
from transformer_lab.models.t5 import T5, T5Config

SMALL = dict(n_layer=2, n_head=4, n_embd=32)
PIECES = [(0, 4), (4, 7), (7, 8), (8, 12)]  # a prefix, a chunk of three, one token, a chunk of four


@pytest.mark.parametrize(
    "model",
    [
        EncDec(EncDecConfig(vocab_size=50, block_size=32, dropout=0.0, **SMALL)),
        EncDec(EncDecConfig(vocab_size=50, block_size=32, dropout=0.0, norm_first=False, **SMALL)),
        T5(T5Config(vocab_size=50, d_ff=64, dropout=0.0, **SMALL)),
    ],
    ids=["encdec", "encdec-post-ln", "t5"],
)
def test_chunked_decoding_with_the_cache_equals_recomputation(model):
    # A chunk of new target tokens must be causal among itself as well as over the cache (the encoder-decoder
    # once dropped the causal mask whenever cached + new keys != new queries).
    torch.manual_seed(0)
    model.eval()
    src = torch.randint(1, 50, (3, 9))
    src[0, 5:] = 0
    tgt = torch.randint(1, 50, (3, 12))
    full = model(src, tgt)
    memory, pad = model.encode(src)
    cache = model.new_cache()
    pieces = [model.decode(tgt[:, a:b], memory, pad, cache) for a, b in PIECES]
    torch.testing.assert_close(torch.cat(pieces, dim=1), full, atol=1e-5, rtol=1e-5)
    assert cache[0]["self"]["k"].shape[2] == 12 and cache[0]["cross"]["k"].shape[2] == 9


def test_cross_attention_with_padding_matches_multihead_attention():
    torch.manual_seed(0)
    ours = Attention(32, 4).eval()
    theirs = nn.MultiheadAttention(32, 4, batch_first=True).eval()
    with torch.no_grad():
        ours.in_proj.bias.normal_()
        theirs.in_proj_weight.copy_(ours.in_proj.weight)
        theirs.in_proj_bias.copy_(ours.in_proj.bias)
        theirs.out_proj.weight.copy_(ours.out_proj.weight)
        theirs.out_proj.bias.copy_(ours.out_proj.bias)
    x, memory = torch.randn(2, 5, 32), torch.randn(2, 8, 32)
    pad = torch.zeros(2, 8, dtype=torch.bool)
    pad[1, 3:] = True
    expected, _ = theirs(x, memory, memory, key_padding_mask=pad, need_weights=False)
    torch.testing.assert_close(ours(x, memory, pad), expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    "activation, formula",
    [
        ("relu", lambda f, x: F.relu(f.up(x))),
        ("relu2", lambda f, x: torch.where(f.up(x) > 0, f.up(x) * f.up(x), 0.0)),
        ("gelu", lambda f, x: F.gelu(f.up(x))),
        (
            "gelu-tanh",
            lambda f, x: 0.5 * f.up(x) * (1 + torch.tanh((2 / torch.pi) ** 0.5 * (f.up(x) + 0.044715 * f.up(x) ** 3))),
        ),
        ("silu", lambda f, x: f.up(x) * torch.sigmoid(f.up(x))),
        ("swiglu", lambda f, x: F.silu(f.gate(x)) * f.up(x)),
        ("gated-gelu", lambda f, x: F.gelu(f.gate(x), approximate="tanh") * f.up(x)),
    ],
)
def test_feed_forward_variants(activation, formula):
    torch.manual_seed(0)
    ff = FeedForward(16, 24, activation, bias=False)
    x = torch.randn(2, 3, 16)
    torch.testing.assert_close(ff(x), ff.down(formula(ff, x)))
    assert (ff.gate is not None) == (activation in ("swiglu", "gated-gelu"))


def by_hand_attention(attn: Attention, x: torch.Tensor, causal: bool) -> torch.Tensor:
    """Attention written out: each key/value head repeated for the query heads it serves, softmax(q kᵀ/√d) v."""
    B, T, _ = x.shape
    nh, nkv, hd = attn.n_head, attn.n_kv_head, attn.head_dim
    q, k, v = attn.in_proj(x).split([nh * hd, nkv * hd, nkv * hd], dim=-1)
    q = q.view(B, T, nh, hd).transpose(1, 2)
    k, v = (t.view(B, T, nkv, hd).transpose(1, 2).repeat_interleave(nh // nkv, dim=1) for t in (k, v))
    scores = q @ k.transpose(-1, -2) / hd**0.5  # (B, nh, T, T)
    if causal:
        scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    y = scores.softmax(-1) @ v  # (B, nh, T, hd)
    return attn.out_proj(y.transpose(1, 2).reshape(B, T, nh * hd))


@pytest.mark.parametrize("n_kv_head", [1, 2, 4])
@pytest.mark.parametrize("causal", [False, True])
def test_grouped_query_attention_equals_repeated_kv_heads(n_kv_head, causal):
    torch.manual_seed(0)
    attn = Attention(32, 4, bias=True, n_kv_head=n_kv_head)
    assert attn.in_proj.weight.shape == (32 + 2 * n_kv_head * 8, 32)
    x = torch.randn(2, 7, 32)
    torch.testing.assert_close(attn(x, causal=causal), by_hand_attention(attn, x, causal), atol=1e-5, rtol=1e-5)


def test_n_kv_head_equal_to_n_head_is_todays_attention():
    torch.manual_seed(0)
    today, gqa = Attention(32, 4), Attention(32, 4, n_kv_head=4)
    gqa.load_state_dict(today.state_dict())
    x = torch.randn(2, 5, 32)
    torch.testing.assert_close(gqa(x, causal=True), today(x, causal=True), atol=0, rtol=0)


def test_grouped_query_cache_holds_only_the_kv_heads_and_equals_recomputation():
    from transformer_lab.models.gpt import GPT, GPTConfig

    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=40, block_size=16, n_layer=2, n_head=4, n_kv_head=2, n_embd=32,
                          pos_encoding="rope", mlp="swiglu", norm="rmsnorm")).eval()  # fmt: skip
    idx = torch.randint(0, 40, (2, 12))
    cache = model.new_cache()
    pieces = [model(idx[:, a:b], cache) for a, b in PIECES]
    torch.testing.assert_close(torch.cat(pieces, dim=1), model(idx), atol=1e-5, rtol=1e-5)
    assert cache[0]["k"].shape == (2, 2, 12, 8)  # (B, n_kv_head, positions, head_dim)


def test_head_width_apart_from_n_embd():
    # T5.1.1-small: 6 heads of 64 over a width of 512; here 3 heads of 16 over 32.
    torch.manual_seed(0)
    attn = Attention(32, 3, bias=False, head_dim=16)
    assert attn.in_proj.weight.shape == (3 * 48, 32) and attn.out_proj.weight.shape == (32, 48)
    x = torch.randn(2, 5, 32)
    torch.testing.assert_close(attn(x), by_hand_attention(attn, x, causal=False), atol=1e-5, rtol=1e-5)
    model = T5(T5Config(vocab_size=50, d_ff=64, d_kv=16, dropout=0.0, n_layer=2, n_head=3, n_embd=32)).eval()
    src, tgt = torch.randint(1, 50, (2, 6)), torch.randint(1, 50, (2, 5))
    assert model(src, tgt).shape == (2, 5, 50)


def test_qkv_bias_without_an_output_bias():
    attn = Attention(32, 4, bias=False, qkv_bias=True)
    assert attn.in_proj.bias is not None and attn.out_proj.bias is None


def test_halves_sinusoids_are_marians():
    import math

    from transformer_lab.models.encdec import sinusoids

    L, dim = 50, 16
    angle = [[pos / math.pow(10000, 2 * (j // 2) / dim) for j in range(dim)] for pos in range(L)]
    marian = torch.tensor([[math.sin(a[j]) for j in range(0, dim, 2)] + [math.cos(a[j]) for j in range(1, dim, 2)]
                           for a in angle])  # fmt: skip
    torch.testing.assert_close(sinusoids(L, dim, "halves"), marian.float(), atol=2e-5, rtol=0)
    interleaved = sinusoids(L, dim)
    torch.testing.assert_close(interleaved[:, 0::2], marian[:, : dim // 2].float(), atol=2e-5, rtol=0)


def test_bert_norm_eps_sets_every_layer_norm():
    from transformer_lab.models.bert import Bert, BertConfig

    eps = lambda m: sorted({x.eps for x in m.modules() if isinstance(x, nn.LayerNorm)})  # noqa: E731
    assert eps(Bert(BertConfig(vocab_size=30, n_layer=1, n_head=2, n_embd=16))) == [1e-12, 1e-5]  # as before
    assert eps(Bert(BertConfig(vocab_size=30, n_layer=1, n_head=2, n_embd=16, norm_eps=1e-12))) == [1e-12]
