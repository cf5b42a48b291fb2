"""BERT: the encoder is nn.TransformerEncoder's computation, padding changes nothing, and it learns equations.

Here: the encoder and padding; tests/e2e/test_train.py has its learning equations."""

import pytest
import torch
from torch import nn

from helpers.layers import copy_attention, copy_common, randomise
from transformer_lab.models.bert import Bert, BertConfig

C, H, FF = 32, 4, 64


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_matches_transformer_encoder(norm_first):
    torch.manual_seed(0)
    bert = Bert(
        BertConfig(
            vocab_size=30,
            n_classes=5,
            block_size=16,
            n_layer=2,
            n_head=H,
            n_embd=C,
            d_ff=FF,
            dropout=0.0,
            norm_first=norm_first,
        )
    ).eval()
    randomise(bert)
    layer = nn.TransformerEncoderLayer(
        C, H, FF, dropout=0.0, activation="gelu", batch_first=True, norm_first=norm_first
    )
    final_norm = nn.LayerNorm(C) if norm_first else None
    reference = nn.TransformerEncoder(layer, num_layers=2, norm=final_norm, enable_nested_tensor=False).eval()
    with torch.no_grad():
        for ours, theirs in zip(bert.encoder, reference.layers):
            copy_attention(ours.self_attn, theirs.self_attn)
            copy_common(ours, theirs, ["norm1", "norm2"])
        if norm_first:
            reference.norm.load_state_dict(bert.final_norm.state_dict())
    idx = torch.randint(1, 30, (3, 9))
    idx[1, 6:] = idx[2, 4:] = 0  # padding
    pad = idx == 0
    embedded = bert.embed_norm(bert.wte(idx) + bert.wpe(torch.arange(9)))
    hidden, our_pad = bert.encode(idx)
    expected = reference(embedded.detach().requires_grad_(), src_key_padding_mask=pad)  # grad: the reference path
    assert torch.equal(our_pad, pad)
    torch.testing.assert_close(hidden[~pad], expected[~pad], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("pooling", ["cls", "mean"])
@pytest.mark.parametrize("norm_first", [False, True])
def test_extra_padding_changes_no_output(pooling, norm_first):
    torch.manual_seed(0)
    bert = Bert(
        BertConfig(
            vocab_size=30,
            n_classes=5,
            block_size=16,
            n_layer=2,
            n_head=H,
            n_embd=C,
            dropout=0.0,
            pooling=pooling,
            norm_first=norm_first,
        )
    ).eval()
    randomise(bert)
    idx = torch.randint(1, 30, (2, 6))
    idx[1, 4:] = 0
    padded = torch.cat([idx, torch.zeros(2, 5, dtype=torch.long)], 1)
    hidden, pad = bert.encode(idx)
    hidden_padded, _ = bert.encode(padded)
    torch.testing.assert_close(hidden_padded[:, :6][~pad], hidden[~pad], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(bert(padded), bert(idx), atol=1e-5, rtol=1e-5)
    changed = padded.clone()
    changed[0, 2] = (changed[0, 2] % 29) + 1  # a real token does change the output
    assert not torch.allclose(bert(changed)[0], bert(padded)[0])
