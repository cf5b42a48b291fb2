"""Inputs longer than a model's length: decoding stops at it, sources are cut to it, nothing is lost.

Here: decoding and cutting; tests/e2e/test_long_inputs.py has the rest."""

import pytest
import torch

from transformer_lab.data.tokens import EOS, PAD
from transformer_lab.models.encdec import EncDec, EncDecConfig
from transformer_lab.tasks.decoding import decode

BOS = 1


def short_model(block_size=16):
    torch.manual_seed(0)
    return EncDec(
        EncDecConfig(vocab_size=40, block_size=block_size, n_layer=1, n_head=2, n_embd=32, dropout=0.0)
    ).eval()


def long_sources():
    src = torch.randint(5, 40, (6, 40), generator=torch.Generator().manual_seed(1))
    src[:, -1] = EOS
    src[2, 10:] = PAD  # one source that fits: 9 tokens and <eos>
    src[2, 9] = EOS
    return src


def positions_asked(model):
    """The highest position the model is asked to embed, recorded from each call."""
    highest = [0]
    embed_tokens = model.embed_tokens

    def recording(idx, offset=0, embed=None):
        highest[0] = max(highest[0], offset + idx.size(1))
        return embed_tokens(idx, offset, embed)

    model.embed_tokens = recording
    return highest


@pytest.mark.parametrize("beam_size", [1, 4])
def test_sources_and_outputs_past_block_size_are_cut_not_raised(beam_size):
    model, src = short_model(16), long_sources()
    highest = positions_asked(model)
    decoded = decode(model, src, beam_size, max_len=src.size(1) + 50, bos=BOS, eos=EOS)
    assert highest[0] <= 16
    assert len(decoded.outputs) == 6 and all(len(ids) <= 16 for ids in decoded.outputs)
    assert decoded.sources_truncated == 5 and decoded.longest_source == 40
    # an output of 16 tokens never reached its <eos>: the model's length stopped it (this untrained model
    # rarely picks <eos>, so most do)
    assert decoded.truncated == sum(len(ids) == 16 for ids in decoded.outputs) >= 3


def test_a_cut_source_ends_in_eos_and_keeps_its_first_tokens():
    model, src = short_model(16), long_sources()
    seen = []
    encode = model.encode
    model.encode = lambda s: (seen.append(s.clone()), encode(s))[1]
    decode(model, src, 1, max_len=20, bos=BOS, eos=EOS)
    assert seen[0].shape == (6, 16)
    assert torch.equal(seen[0][:, :15], src[:, :15]) and (seen[0][[0, 1, 3, 4, 5], 15] == EOS).all()
    assert torch.equal(seen[0][2], src[2, :16])  # the one that fitted is as it was


def test_a_short_max_len_is_not_counted_as_truncation():
    decoded = decode(short_model(64), long_sources()[:, :12], 1, max_len=5, bos=BOS, eos=EOS)
    assert all(len(ids) <= 5 for ids in decoded.outputs) and decoded.truncated == 0  # decode.max_extra_len's
