"""T5: relative position buckets, attention without scaling, shared position bias, causality, padding.

Here: the model; tests/e2e/test_t5.py has the rest."""

import pytest
import torch
import torch.nn.functional as F

from transformer_lab.models.t5 import T5, T5Config, relative_position_bucket


def model(**overrides):
    torch.manual_seed(0)
    config = dict(vocab_size=60, n_layer=2, n_head=4, n_embd=32, d_ff=64, dropout=0.0)
    return T5(T5Config(**{**config, **overrides})).eval()


def test_relative_position_buckets():
    distance = torch.arange(-300, 301)  # key position - query position
    both = relative_position_bucket(distance, bidirectional=True, num_buckets=32, max_distance=128)
    # Bidirectional: 16 buckets a side; distances 0..7 exact, then log-spaced, the last from 128 on.
    assert [int(both[300 - d]) for d in range(8)] == list(range(8))
    assert [int(both[300 + d]) for d in range(1, 8)] == list(range(17, 24))
    assert both.max() == 31 and both.min() == 0
    assert set(both[: 300 - 127].tolist()) == {15} and set(both[300 + 128 :].tolist()) == {31}
    assert (both[:301].flip(0).diff() >= 0).all() and (both[301:].diff() >= 0).all()  # grows with distance
    # Causal: keys after the query all share bucket 0; earlier ones use all 32 buckets.
    causal = relative_position_bucket(distance, bidirectional=False, num_buckets=32, max_distance=128)
    assert set(causal[300:].tolist()) == {0}
    assert [int(causal[300 - d]) for d in range(16)] == list(range(16)) and set(causal[: 300 - 128].tolist()) == {31}
    # T5's log spacing: bucket = 16 + floor(log(d / 16) / log(128 / 16) * 16) for 16 <= d < 128.
    for d in (16, 20, 50, 100, 127):
        assert int(causal[300 - d]) == 16 + int(torch.log(torch.tensor(d / 16)) / torch.log(torch.tensor(8.0)) * 16)


def test_attention_is_unscaled_softmax_with_the_bias():
    torch.manual_seed(0)
    attention = model().decoder[0].cross_attn
    x, memory = torch.randn(2, 5, 32), torch.randn(2, 7, 32)
    bias = torch.randn(1, 4, 5, 7)
    pad = torch.zeros(2, 7, dtype=torch.bool)
    pad[:, 6] = True  # a masked key
    q, k, v = (F.linear(t, w) for t, w in zip((x, memory, memory), attention.in_proj.weight.split(32)))
    heads = lambda t: t.view(2, -1, 4, 8).transpose(1, 2)  # noqa: E731
    weights = torch.softmax(
        heads(q) @ heads(k).transpose(-1, -2) + bias.masked_fill(pad[:, None, None], float("-inf")), dim=-1
    )  # no 1/sqrt(d)
    expected = attention.out_proj((weights @ heads(v)).transpose(1, 2).reshape(2, 5, 32))
    torch.testing.assert_close(attention(x, memory, pad, bias=bias), expected, atol=1e-5, rtol=1e-5)


def test_one_position_table_per_stack_no_biases_rmsnorm():
    m = model()
    tables = [name for name, _ in m.named_parameters() if "table" in name]
    assert tables == ["encoder_bias.table.weight", "decoder_bias.table.weight"]  # shared by all layers
    assert all(module.bias is None for module in m.modules() if isinstance(module, torch.nn.Linear))
    assert all(not isinstance(module, torch.nn.LayerNorm) for module in m.modules())
    assert sum(isinstance(module, torch.nn.RMSNorm) for module in m.modules()) == 2 * 2 + 2 * 3 + 2


@pytest.mark.parametrize("feed_forward", ["relu", "gated-gelu"])
def test_decoder_is_causal_and_padding_changes_nothing(feed_forward):
    m = model(feed_forward=feed_forward)
    src = torch.randint(1, 60, (2, 9))
    src[1, 6:] = 0
    tgt = torch.randint(1, 60, (2, 6))
    logits = m(src, tgt)
    changed = tgt.clone()
    changed[:, 4:] = (changed[:, 4:] % 59) + 1
    torch.testing.assert_close(m(src, changed)[:, :4], logits[:, :4])  # earlier positions never see later ones
    assert not torch.allclose(m(src, changed)[:, 4:], logits[:, 4:])
    padded = torch.cat([src, torch.zeros(2, 4, dtype=torch.long)], 1)
    torch.testing.assert_close(m(padded, tgt), logits, atol=1e-5, rtol=1e-5)


def test_position_bias_makes_order_matter():
    m = model()
    src = torch.randint(1, 60, (1, 8))
    tgt = torch.randint(1, 60, (1, 3))
    assert not torch.allclose(m(src, tgt), m(src.flip(1), tgt))
