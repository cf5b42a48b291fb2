"""The attention weights `attention_maps` captures (models/layers.py): for every model and attention (self, causal,
cross, with T5's position bias, GQA and rotary), softmax(Q Kᵀ scale + mask) computed here by hand from the layer's
own inputs and weights; rows summing to 1, nothing above the diagonal of a causal layer, nothing on padding; and the
logits bit-identical with and without the capture."""

import math

import pytest
import torch
import torch.nn.functional as F

from transformer_lab.models.bert import Bert, BertConfig
from transformer_lab.models.encdec import EncDec, EncDecConfig
from transformer_lab.models.gpt import GPT, GPTConfig
from transformer_lab.models.layers import Attention, attention_maps
from transformer_lab.models.t5 import T5, T5Config

V, PAD = 30, 0
MODELS = {
    "gpt": lambda: GPT(GPTConfig(vocab_size=V, block_size=16, n_layer=2, n_head=4, n_embd=32)),
    "gpt_rope_gqa_qknorm": lambda: GPT(
        GPTConfig(
            vocab_size=V, block_size=16, n_layer=2, n_head=4, n_embd=32, pos_encoding="rope", n_kv_head=2, qk_norm=True
        )
    ),  # fmt: skip
    "encdec": lambda: EncDec(EncDecConfig(vocab_size=V, block_size=16, n_layer=2, n_head=4, n_embd=32, pad_id=PAD)),
    "bert": lambda: Bert(
        BertConfig(vocab_size=V, block_size=16, n_layer=2, n_head=4, n_embd=32, n_classes=3, pad_id=PAD)
    ),  # fmt: skip
    "t5": lambda: T5(T5Config(vocab_size=V, n_layer=2, n_head=4, n_embd=32, d_kv=8, d_ff=64, pad_id=PAD)),
}


def inputs(kind: str) -> tuple:
    g = torch.Generator().manual_seed(0)
    src = torch.randint(1, V, (2, 7), generator=g)
    src[1, 5:] = PAD  # the second row is padded: its last two keys must get no weight
    if kind.startswith("gpt"):
        return (src,)
    if kind == "bert":
        return (src,)
    return src, torch.randint(1, V, (2, 5), generator=g)


def by_hand(layer: Attention, args: tuple, kwargs: dict) -> torch.Tensor:
    """softmax(Q Kᵀ scale + bias + mask) from the layer's inputs and in_proj, step by step."""
    x = args[0]
    memory = kwargs.get("memory", args[1] if len(args) > 1 else None)
    pad, causal, bias = (
        kwargs.get("pad", args[2] if len(args) > 2 else None),
        kwargs.get("causal", False),
        kwargs.get("bias"),
    )
    Q, KV, hd = layer.q_size, layer.kv_size, layer.head_dim
    w = layer.in_proj.weight
    b = layer.in_proj.bias if layer.in_proj.bias is not None else torch.zeros(w.size(0))
    source = x if memory is None else memory
    q = x @ w[:Q].T + b[:Q]
    k = source @ w[Q : Q + KV].T + b[Q : Q + KV]
    B, T, S = x.size(0), x.size(1), source.size(1)
    q = q.view(B, T, layer.n_head, hd).transpose(1, 2)
    k = k.view(B, S, layer.n_kv_head, hd).transpose(1, 2)
    if layer.qk_norm:
        q, k = (t / t.pow(2).mean(-1, keepdim=True).add(torch.finfo(t.dtype).eps).sqrt() for t in (q, k))
    if layer.rotary is not None and memory is None:
        q, k = layer.rotary(q), layer.rotary(k)
    k = k.repeat_interleave(layer.n_head // layer.n_kv_head, dim=1)
    scale = layer.scale if layer.scale is not None else 1 / math.sqrt(hd)
    scores = q @ k.transpose(-2, -1) * scale  # (B, nh, T, S)
    if bias is not None:
        scores = scores + bias
    if causal:
        scores = scores.masked_fill(torch.ones(T, S, dtype=torch.bool).tril().logical_not(), float("-inf"))
    if pad is not None:
        scores = scores.masked_fill(pad[:, None, None, :], float("-inf"))
    return F.softmax(scores, dim=-1)


@pytest.mark.parametrize("kind", MODELS)
def test_captured_weights_are_softmax_of_scaled_scores_with_the_mask(kind):
    torch.manual_seed(0)
    model = MODELS[kind]().eval()
    calls = {}
    for name, layer in model.named_modules():
        if isinstance(layer, Attention):
            layer.register_forward_pre_hook(
                lambda m, a, kw, name=name: calls.setdefault(name, (a, kw)), with_kwargs=True
            )
    with torch.no_grad(), attention_maps(model) as maps:
        model(*inputs(kind))
    assert set(maps) == set(calls) and all(len(weights) == 1 for weights in maps.values())
    kinds = {name.split(".")[-1] for name in maps}
    assert kinds == (
        {"attn"} if kind.startswith("gpt") else {"self_attn"} if kind == "bert" else {"self_attn", "cross_attn"}
    )
    for name, (args, kwargs) in calls.items():
        weights = maps[name][0]
        with torch.no_grad():
            expected = by_hand(dict(model.named_modules())[name], args, kwargs)
        assert weights.shape == expected.shape and weights.dtype == torch.float32
        torch.testing.assert_close(weights, expected, atol=1e-5, rtol=1e-4, msg=name)
        torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:-1]), msg=name)
        T, S = weights.shape[-2:]
        if kwargs.get("causal"):
            assert (weights.triu(diagonal=1) == 0).all(), name
        if S == 7 and not kind.startswith("gpt"):  # keys from the (padded) source: nothing on its padding
            assert (weights[1, :, :, 5:] == 0).all() and (weights[1, :, :, :5] > 0).all(), name


@pytest.mark.parametrize("kind", MODELS)
def test_the_capture_leaves_the_logits_bit_identical_and_is_gone_after(kind):
    torch.manual_seed(0)
    model = MODELS[kind]().eval()
    with torch.no_grad():
        plain = model(*inputs(kind))
        with attention_maps(model) as maps:
            captured = model(*inputs(kind))
        after = model(*inputs(kind))
    assert torch.equal(plain, captured) and torch.equal(plain, after)
    assert all(maps.values()) and all(m.capture is None for m in model.modules() if isinstance(m, Attention))


def test_a_cached_decoder_captures_a_row_a_call_matching_the_full_map():
    torch.manual_seed(0)
    model = MODELS["gpt"]().eval()
    idx = torch.randint(0, V, (1, 6))
    with torch.no_grad(), attention_maps(model) as full:
        model(idx)
    cache = model.new_cache()
    with torch.no_grad(), attention_maps(model) as stepped:
        model(idx[:, :3], cache)
        for t in range(3, 6):
            model(idx[:, t : t + 1], cache)
    for name, [whole] in full.items():
        first, *rows = stepped[name]
        torch.testing.assert_close(first, whole[:, :, :3, :3])
        for t, row in zip(range(3, 6), rows):
            torch.testing.assert_close(row[..., 0, :], whole[:, :, t, : t + 1])
