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
        ("gelu", lambda f, x: F.gelu(f.up(x))),
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
