"""Grokking's progress measures (callbacks/grokking.py, Nanda et al. 2023) on a small p against a hand computation:
the embedding's spectrum against numpy's FFT, the key frequencies, and the excluded and restricted losses against
their definitions (logits along cos/sin(w_k(a+b)) of the inputs, removed or kept alone); and a wrong setting, one line."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from helpers.runs import compose_cfg
from transformer_lab.callbacks.grokking import (
    GrokkingProgress,
    embedding_spectrum,
    excluded_and_restricted,
    fourier_basis,
    key_frequencies,
)
from transformer_lab.config.classes import built_callbacks
from transformer_lab.errors import ConfigError

P = 7


def test_the_fourier_basis_is_orthonormal_and_its_rows_are_cos_then_sin():
    basis = fourier_basis(P)
    assert torch.allclose(basis @ basis.T, torch.eye(P, dtype=torch.float64), atol=1e-12)
    a = np.arange(P)
    assert np.allclose(basis[3].numpy(), np.cos(2 * np.pi * 2 * a / P) / math.sqrt(P / 2))  # k = 2's cos
    assert np.allclose(basis[4].numpy(), np.sin(2 * np.pi * 2 * a / P) / math.sqrt(P / 2))


def test_the_embedding_spectrum_is_the_fft_power_of_each_frequency():
    embedding = torch.randn(P, 5, generator=torch.Generator().manual_seed(0))
    fft = np.fft.fft(embedding.numpy(), axis=0)  # (P, 5) over the residues
    power = (np.abs(fft) ** 2).sum(1)  # per DFT index; k and P - k are one real frequency
    expected = 2 * power[1 : (P - 1) // 2 + 1] / (power.sum() - power[0])  # of the frequencies' power
    assert np.allclose(embedding_spectrum(embedding).numpy(), expected)
    a = torch.arange(P, dtype=torch.float32)[:, None]
    pure = torch.cat([torch.cos(2 * math.pi * 3 * a / P), 2 * torch.sin(2 * math.pi * 3 * a / P)], 1)  # k = 3 only
    assert torch.allclose(embedding_spectrum(pure), torch.tensor([0.0, 0.0, 1.0], dtype=torch.float64), atol=1e-6)


def test_key_frequencies_are_the_fewest_holding_the_share():  # (the shares add up to 1)
    spectrum = torch.tensor([0.1, 0.5, 0.05, 0.3, 0.05])
    assert key_frequencies(spectrum, 0.75) == [2, 4]
    assert key_frequencies(spectrum, 0.5) == [2]
    assert key_frequencies(spectrum, 1.0) == [1, 2, 3, 4, 5]


def grid() -> tuple[torch.Tensor, torch.Tensor]:
    a, b = torch.meshgrid(torch.arange(P), torch.arange(P), indexing="ij")
    return a.flatten().double(), b.flatten().double()  # input a * P + b


def test_excluded_and_restricted_losses_by_hand():
    logits = torch.randn(P * P, P, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    answers = torch.arange(P * P) % P
    train = torch.tensor([0, 3, 8, 10, 20, 33, 47])
    a, b = grid()
    along = torch.zeros_like(logits)
    for k in (1, 3):  # each output column's projection onto cos(w_k(a+b)) and sin(w_k(a+b)), one at a time
        for wave in (torch.cos(2 * math.pi * k * (a + b) / P), torch.sin(2 * math.pi * k * (a + b) / P)):
            along += wave[:, None] * (wave @ logits)[None, :] / (wave @ wave)
    rest = logits - along
    excluded, restricted = excluded_and_restricted(logits, answers, train, [1, 3])
    assert excluded == pytest.approx(float(F.cross_entropy(rest[train], answers[train])))
    assert restricted == pytest.approx(float(F.cross_entropy((along + rest.mean(0))[train], answers[train])))


def test_logits_made_of_the_key_frequencies_lose_nothing_restricted_and_everything_excluded():
    a, b = grid()
    c = torch.arange(P, dtype=torch.float64)
    logits = 4 * torch.cos(2 * math.pi * 2 * (a[:, None] + b[:, None] - c[None, :]) / P)  # the paper's circuit, k = 2
    answers = ((a + b) % P).long()
    train = torch.arange(0, P * P, 3)
    excluded, restricted = excluded_and_restricted(logits, answers, train, [2])
    assert restricted == pytest.approx(float(F.cross_entropy(logits[train], answers[train])))
    assert excluded == pytest.approx(math.log(P))  # nothing left: uniform
    assert excluded_and_restricted(logits, answers, train, [1])[0] == pytest.approx(restricted)  # k = 1 is not in it


BAD = [
    (["data=shakespeare"], "", "needs data=modular data.op=+ data.terms=2, got data=shakespeare"),
    (["data=modular", "data.op=*"], "", "got data.op='*', data.terms=2"),
    (["data=modular", "data.terms=3"], "", "got data.op='+', data.terms=3"),
    (["data=modular", "model=bert"], "", "reads a decoder's logits at '=' (model=gpt); transformer_lab.models.bert.Bert is an 'encoder' model"),
    (["data=modular", "data.p=2"], "", "needs a frequency to measure, 1..(p-1)/2: data.p >= 3, got 2"),
    (["data=modular", "callbacks.progress.key_share=0"], ".key_share", ": must be a number in (0, 1], got 0"),
    (["data=modular", "callbacks.progress.key_share=abc"], ".key_share", ": must be a number in (0, 1], got 'abc'"),
    (["data=modular", "callbacks.progress.key_share=nan"], ".key_share", ": must be a number in (0, 1], got nan"),
    (["data=modular", "callbacks.progress.key_share=null"], ".key_share", ": must be a number in (0, 1], got None"),
    *[(["data=modular", f"callbacks.progress.frequencies={bad}"], ".frequencies",
       f": must be a list of distinct integers in 1..48 (p=97), or null, got {shown}")
      for bad, shown in [("[0,60]", "[0, 60]"), ("[2,2]", "[2, 2]"), ("[]", "[]"), ("3", "3"), ("abc", "'abc'"),
                         ("[true]", "[True]"), ("[1.5]", "[1.5]")]],
    (["data=modular", "callbacks.progress.images=yes"], ".images", ": must be true or false, got 'yes'"),
]  # fmt: skip


@pytest.mark.parametrize("overrides,setting,message", BAD, ids=[m for _, _, m in BAD])
def test_a_wrong_setting_is_one_line_naming_the_callback(overrides, setting, message, tmp_path):
    """A setting the callback refuses is named (callbacks.progress.KEY); what the run's data or model lacks, the callback."""
    cfg = compose_cfg(["callbacks=[default,progress]", *overrides], tmp_path)
    with pytest.raises(ConfigError) as info:
        built_callbacks(cfg)
    key = f"callbacks.progress{setting}"
    assert info.value.key == key and str(info.value).endswith(message) and "\n" not in str(info.value)


def test_the_callback_is_built_for_modular_addition_on_a_decoder(tmp_path):
    cfg = compose_cfg(["callbacks=[default,progress]", "data=modular"], tmp_path)
    built_callbacks(cfg)
    assert isinstance(
        GrokkingProgress(**{k: v for k, v in cfg.callbacks.progress.items() if k != "_target_"}), GrokkingProgress
    )
