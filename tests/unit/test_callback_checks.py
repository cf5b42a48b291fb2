"""A callback's own checks (its `check(model, datamodule)`), run by the pipeline before the run directory is claimed
(prepare.build_run): what a new callback gets by declaring one, and the two of ours that have one, on the models
and data they refuse. The whole run's side (no directory left) is tests/e2e/test_bad_inputs.py's."""

import pytest
import torch
from torch import nn

from helpers.runs import TINY, compose_cfg
from transformer_lab.callbacks.attention_images import AttentionImages
from transformer_lab.callbacks.grokking import GrokkingProgress
from transformer_lab.errors import ConfigError, UserError
from transformer_lab.run.prepare import build_run, checked_callback, prepare


class Refusing:
    def __init__(self, error, threshold=1):
        self.error, self.threshold = error, threshold

    def check(self, model, datamodule):
        raise self.error


@pytest.mark.parametrize(
    "error, message",
    [
        (ValueError("threshold: must be below the model's 2 layers, got 3"), "callbacks.mine.threshold: must be below"),
        (ValueError("needs a decoder\nsecond line"), "callbacks.mine: needs a decoder"),
        (UserError("the data has no equations: nothing to measure"), "callbacks.mine: the data has no equations"),
        (ValueError("Mixed: case of a sentence"), "callbacks.mine: Mixed: case of a sentence"),
    ],
    ids=["its-setting", "plain", "user-error", "not-a-setting"],
)
def test_a_callbacks_own_check_is_one_line_naming_it(error, message):
    with pytest.raises(ConfigError) as refused:
        checked_callback("mine", Refusing(error), nn.Linear(1, 1), None)
    assert str(refused.value).startswith(message) and "\n" not in str(refused.value)


def test_a_callback_without_a_check_is_taken_as_it_is():
    callback = object()
    assert checked_callback("plain", callback, nn.Linear(1, 1), None) is callback


@pytest.fixture(scope="module")
def modular_run(tmp_path_factory):
    cfg = compose_cfg(["data=modular", "data.p=11", *TINY], output_dir=str(tmp_path_factory.mktemp("run")))
    return build_run(prepare(cfg))


class ParameterEmbedding(nn.Module):
    """A user's decoder whose token embedding is a plain nn.Parameter, not an nn.Embedding."""

    architecture = "decoder"

    def __init__(self, vocab: int, dim: int = 8):
        super().__init__()
        self.wte = nn.Parameter(torch.randn(vocab, dim))
        self.head = nn.Linear(dim, vocab)

    def forward(self, idx):
        return self.head(self.wte[idx])


def test_progress_measures_refuse_a_model_without_an_embedding_layer_before_the_run(modular_run):
    datamodule = modular_run.datamodule
    callback = GrokkingProgress("modular", "transformer_lab.models.gpt.GPT", "/nowhere", p=11, op="+", terms=2)
    assert checked_callback("progress", callback, modular_run.model, datamodule) is callback  # (ours: measured)
    with pytest.raises(ConfigError) as refused:
        checked_callback("progress", callback, ParameterEmbedding(datamodule.vocab_size), datamodule)
    assert str(refused.value) == (
        f"callbacks.progress: ParameterEmbedding has no nn.Embedding of the vocabulary's {datamodule.vocab_size} tokens"
    )


def test_the_attention_callback_refuses_a_model_without_attention_and_a_text_it_cannot_read(modular_run):
    datamodule = modular_run.datamodule
    with pytest.raises(ConfigError) as refused:
        checked_callback("attention", AttentionImages("3 + 4 =", "/nowhere"), nn.GRU(4, 4), datamodule)
    assert str(refused.value) == (
        "callbacks.attention: GRU has no layer with capture_attention(capture), the attention protocol "
        '(models/layers.py DrawsAttention; docs/extending.md, "Draw your own attention"): nothing to draw'
    )
    with pytest.raises(ConfigError) as refused:
        checked_callback("attention", AttentionImages("3 + @ =", "/nowhere"), modular_run.model, datamodule)
    assert str(refused.value) == "callbacks.attention.text: @: not a number in 0..10 (data.p=11)"
