import pytest
import torch
from torch import nn

from helpers.layers import copy_attention, copy_common, randomise
from transformer_lab.models.encdec import DecoderLayer, EncDec, EncDecConfig, EncoderLayer, sinusoids

C, H, FF = 32, 4, 64


@pytest.mark.parametrize("norm_first", [True, False])
def test_encoder_layer_matches_transformer_encoder_layer(norm_first):
    torch.manual_seed(0)
    ours = EncoderLayer(C, H, FF, dropout=0.0, bias=True, norm_first=norm_first).eval()
    randomise(ours)
    theirs = nn.TransformerEncoderLayer(C, H, FF, dropout=0.0, batch_first=True, norm_first=norm_first).eval()
    with torch.no_grad():
        copy_attention(ours.self_attn, theirs.self_attn)
        copy_common(ours, theirs, ["norm1", "norm2"])
    x = torch.randn(3, 9, C, requires_grad=True)  # grad on: PyTorch's reference path, not its fast path
    pad = torch.zeros(3, 9, dtype=torch.bool)
    pad[1, 6:] = pad[2, 4:] = True
    real = ~pad
    torch.testing.assert_close(ours(x, pad)[real], theirs(x, src_key_padding_mask=pad)[real], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("norm_first", [True, False])
def test_decoder_layer_matches_transformer_decoder_layer(norm_first):
    torch.manual_seed(0)
    ours = DecoderLayer(EncDecConfig(n_embd=C, n_head=H, d_ff=FF, dropout=0.0, norm_first=norm_first)).eval()
    randomise(ours)
    theirs = nn.TransformerDecoderLayer(C, H, FF, dropout=0.0, batch_first=True, norm_first=norm_first).eval()
    with torch.no_grad():
        copy_attention(ours.self_attn, theirs.self_attn)
        copy_attention(ours.cross_attn, theirs.multihead_attn)
        copy_common(ours, theirs, ["norm1", "norm2", "norm3"])
    x, memory = torch.randn(3, 7, C), torch.randn(3, 10, C)
    memory_pad = torch.zeros(3, 10, dtype=torch.bool)
    memory_pad[0, 8:] = memory_pad[2, 3:] = True
    causal = nn.Transformer.generate_square_subsequent_mask(7)
    expected = theirs(x, memory, tgt_mask=causal, tgt_is_causal=True, memory_key_padding_mask=memory_pad)
    torch.testing.assert_close(ours(x, memory, memory_pad), expected, atol=1e-5, rtol=1e-5)


def model(**overrides):
    torch.manual_seed(0)
    config = dict(vocab_size=50, block_size=32, n_layer=2, n_head=H, n_embd=C, dropout=0.0)
    return EncDec(EncDecConfig(**{**config, **overrides})).eval()


@pytest.mark.parametrize("norm_first", [True, False])
@pytest.mark.parametrize("pos_encoding", ["sinusoidal", "learned"])
def test_more_padding_changes_nothing_for_real_tokens(norm_first, pos_encoding):
    m = model(norm_first=norm_first, pos_encoding=pos_encoding)
    src = torch.randint(1, 50, (2, 6))
    src[1, 4:] = 0
    tgt = torch.randint(1, 50, (2, 5))
    logits = m(src, tgt)
    padded_src = torch.cat([src, torch.zeros(2, 7, dtype=torch.long)], dim=1)
    padded_tgt = torch.cat([tgt, torch.zeros(2, 3, dtype=torch.long)], dim=1)
    torch.testing.assert_close(m(padded_src, padded_tgt)[:, :5], logits, atol=1e-5, rtol=1e-5)
    memory, pad = m.encode(src)
    memory_padded, _ = m.encode(padded_src)
    torch.testing.assert_close(memory_padded[:, :6][~pad], memory[~pad], atol=1e-5, rtol=1e-5)


def test_decoder_is_causal():
    m = model()
    src, tgt = torch.randint(1, 50, (2, 6)), torch.randint(1, 50, (2, 8))
    changed = tgt.clone()
    changed[:, 5:] = torch.randint(1, 50, (2, 3))
    torch.testing.assert_close(m(src, changed)[:, :5], m(src, tgt)[:, :5], atol=1e-6, rtol=0)


@pytest.mark.parametrize("norm_first", [True, False])
def test_incremental_decoding_with_the_cache_equals_recomputation(norm_first):
    m = model(norm_first=norm_first)
    src = torch.randint(1, 50, (3, 9))
    src[0, 5:] = 0
    tgt = torch.randint(1, 50, (3, 12))
    full = m(src, tgt)
    memory, pad = m.encode(src)
    cache = m.new_cache()
    steps = [m.decode(tgt[:, :4], memory, pad, cache)]  # a prefix at once, then one token at a time
    steps += [m.decode(tgt[:, t : t + 1], memory, pad, cache) for t in range(4, 12)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)
    assert cache[0]["self"]["k"].shape[2] == 12 and cache[0]["cross"]["k"].shape[2] == 9


def test_shared_embeddings_and_tied_output():
    m = model()
    assert m.lm_head.weight is m.embed.weight
    untied = model(tie_weights=False)
    assert untied.lm_head.weight is not untied.embed.weight


def test_sinusoids_follow_the_paper():
    table = sinusoids(50, 16)
    pos, i = 7, 3
    assert table[pos, 2 * i].item() == pytest.approx(
        torch.sin(torch.tensor(pos / 10000 ** (2 * i / 16))).item(), abs=1e-6
    )
    assert table[pos, 2 * i + 1].item() == pytest.approx(
        torch.cos(torch.tensor(pos / 10000 ** (2 * i / 16))).item(), abs=1e-6
    )


def test_separate_source_vocabulary_has_its_own_embedding():
    m = model(src_vocab_size=70)
    assert m.src_embed.weight.shape == (70, C) and m.lm_head.weight is m.embed.weight
    assert m(torch.randint(1, 70, (2, 5)), torch.randint(1, 50, (2, 4))).shape == (2, 4, 50)
    assert model().src_embed is None  # shared: one matrix, one name in the state dict
