"""The attention protocol (models/layers.py DrawsAttention): a user's own layer draws its attention through the
same `attention` command, training callback and `attention_of` (the Python API's) as ours. The user's model is a
causal linear-attention LM (tests/helpers/linear_attention.py, a file as a user writes it) trained two steps
through train.py; its maps are checked against the linear attention's weights computed here by hand from the
layer's inputs and parameters, and against the layer's own output (each output is those weights times the values).
A model implementing no such layer is refused in one line naming the protocol."""

import json
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors.torch import load_file
from torch import nn

from helpers.runs import ROOT, TINY, run_train
from transformer_lab.analysis.attention import attention_of, drawings, source_ids
from transformer_lab.api.run import load as load_run
from transformer_lab.callbacks.attention_images import AttentionImages
from transformer_lab.commands.attention import attention
from transformer_lab.errors import ConfigError, UserError
from transformer_lab.models.encdec import EncDec, EncDecConfig
from transformer_lab.models.layers import attention_maps
from transformer_lab.run.prepare import checked_callback

HELPERS = ROOT / "tests" / "helpers"
TEXT = "3 + 5 ="
REFUSED = (
    "has no layer with capture_attention(capture), the attention protocol (models/layers.py DrawsAttention; "
    'docs/extending.md, "Draw your own attention"): nothing to draw'
)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """The user's linear-attention model trained 2 steps on modular addition, the attention callback drawing
    "3 + 5 =" at its one validation (step 2): no W&B, so PNGs in the run's attention/step_2/."""
    run = tmp_path_factory.mktemp("linear") / "run"
    result = run_train(
        *TINY, "model=linear_attention", "model.n_layer=2", "data=modular", "data.p=11", "trainer.max_steps=2",
        "trainer.val_check_interval=2", "logger=csv", "callbacks=[default,attention]",
        f"callbacks.attention.text='{TEXT}'", f"hydra.searchpath=[file://{HELPERS / 'conf'}]", f"hydra.run.dir={run}",
        env={"PYTHONPATH": str(HELPERS)},  # (the user's folder, as docs/extending.md puts it on the path)
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    return run


def load(path: str):
    """(model, data module) of a run, as the Python API loads it."""
    loaded = load_run(path)
    return loaded.model, loaded.datamodule


def by_hand(run) -> tuple[dict[str, torch.Tensor], dict[str, tuple[torch.Tensor, torch.Tensor]]]:
    """({layer: (heads, T, T)} the linear attention's weights, a_ts = φ(q_t)·φ(k_s) / Σ_{s'≤t} φ(q_t)·φ(k_s') for
    s ≤ t (φ = elu + 1), computed from each layer's input and qkv parameters; {layer: (those weights times the
    values, the layer's own output before its projection)})."""
    model, datamodule = load(str(run))
    inputs, outputs = {}, {}
    layers = {name: m for name, m in model.named_modules() if name.endswith(".attn")}
    for name, layer in layers.items():
        layer.register_forward_pre_hook(lambda m, args, name=name: inputs.setdefault(name, args[0]))
        layer.proj.register_forward_pre_hook(lambda m, args, name=name: outputs.setdefault(name, args[0]))
    ids = torch.tensor([source_ids(model, datamodule, TEXT)])  # (the command's input: its tokens, tested below)
    with torch.no_grad():
        model(ids)
    weights, products = {}, {}
    for name, layer in layers.items():
        x = inputs[name][0]  # (T, C)
        T, C, nh = x.size(0), x.size(1), layer.n_head
        q, k, v = (x @ layer.qkv.weight.T + layer.qkv.bias).split(C, dim=1)
        q, k, v = (t.view(T, nh, C // nh).transpose(0, 1) for t in (q, k, v))  # (nh, T, hd)
        phi_q, phi_k = (torch.where(t > 0, t + 1, t.exp()) for t in (q, k))  # elu(t) + 1
        scores = torch.einsum("htd,hsd->hts", phi_q, phi_k) * torch.ones(T, T).tril()  # the future's weight: 0
        weights[name] = scores / scores.sum(-1, keepdim=True)
        products[name] = ((weights[name] @ v).transpose(0, 1).reshape(T, C), outputs[name][0])
    return weights, products


def test_the_command_draws_the_linear_attentions_own_weights(run, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # (its default folder, attention/N, is the current folder's: never the run's)
    lines = list(attention({"ckpt": str(run), "text": TEXT}))
    folder = Path("attention", "1")
    assert lines == [str(folder / name) for name in ("blocks.attn.png", "attention.safetensors", "tokens.json")]
    assert (folder / "blocks.attn.png").stat().st_size > 1000
    assert json.loads((folder / "tokens.json").read_text()) == {"text": TEXT, "source": ["3", "+", "5", "="]}
    maps = load_file(folder / "attention.safetensors")
    expected, products = by_hand(run)
    assert set(maps) == set(expected) == {"blocks.0.attn", "blocks.1.attn"}
    for name, weights in maps.items():
        assert weights.shape == (2, 4, 4) and weights.dtype == torch.float32  # (heads, queries, keys)
        torch.testing.assert_close(weights, expected[name], msg=name)
        torch.testing.assert_close(weights.sum(-1), torch.ones(2, 4), msg=name)  # every query's row sums to 1
        past = torch.ones(4, 4, dtype=torch.bool).tril()
        assert (weights[:, ~past] == 0).all() and (weights[:, past] > 0).all(), name  # causal; φ > 0: the past's > 0
        mixed, own = products[name]
        torch.testing.assert_close(mixed, own, msg=name)  # the weights are those the layer's output is made of


def test_the_callback_drew_the_same_maps_as_the_run_trained(run):
    assert sorted(p.relative_to(run).as_posix() for p in (run / "attention").glob("step_*/*")) == [
        "attention/step_2/blocks.attn.png"
    ]
    model, datamodule = load(str(run / "checkpoints" / "last.ckpt"))  # (step 2's weights: the callback's)
    options = {"text": TEXT, "target": None, "max_extra_len": 20, "device": "cpu"}
    ((kind, image),) = drawings(model, datamodule, options, "step 2")
    drawn = np.asarray(Image.open(run / "attention" / "step_2" / "blocks.attn.png"))
    assert kind == "blocks.attn" and drawn.shape == image.shape and (drawn == image).all()


def test_attention_of_is_the_commands_capture_with_nothing_written(run):
    model, datamodule = load(str(run))
    before = sorted(p for p in run.rglob("*"))
    weights, tokens = attention_of(model, datamodule, TEXT)
    assert sorted(p for p in run.rglob("*")) == before
    expected, _ = by_hand(run)
    assert tokens == {"source": ["3", "+", "5", "="]} and set(weights) == set(expected)
    for name, w in weights.items():
        torch.testing.assert_close(w, expected[name], msg=name)
    with pytest.raises(UserError) as refused:
        attention_of(model, datamodule, TEXT, target="8")
    assert str(refused.value) == "target: only an encoder-decoder has one; LinearGPT reads the text alone"
    with pytest.raises(UserError) as refused:
        attention_of(model, datamodule, TEXT, max_extra_len=0)
    assert str(refused.value) == "max_extra_len: an integer in 1..512, got 0"


def test_weights_of_another_shape_are_refused_naming_the_layer(run, monkeypatch):
    model, datamodule = load(str(run))
    layer = type(model.blocks[0].attn)
    unbatched = layer.weights
    monkeypatch.setattr(layer, "weights", staticmethod(lambda q, k: unbatched(q, k)[0]))  # (heads, T, T)
    with pytest.raises(UserError) as refused:
        attention_of(model, datamodule, TEXT)
    assert str(refused.value) == (
        "blocks.0.attn: its capture_attention() added weights of shape (2, 4, 4); the attention protocol "
        "(models/layers.py DrawsAttention) wants (batch, heads, queries, keys), here (1, heads, 4, 4)"
    )


def test_a_model_implementing_no_attention_layer_is_refused_naming_the_protocol(run, monkeypatch, tmp_path):
    from types import SimpleNamespace

    import transformer_lab.api.run as api_run

    _, datamodule = load(str(run))
    gru = nn.GRU(4, 4)
    with pytest.raises(UserError) as refused:
        attention_of(gru, datamodule, TEXT)
    assert str(refused.value) == f"GRU {REFUSED}"
    monkeypatch.setattr(api_run, "load", lambda *args: SimpleNamespace(model=gru, datamodule=datamodule))
    with pytest.raises(UserError) as refused:
        list(attention({"ckpt": str(run), "text": TEXT, "out": str(tmp_path / "never")}))
    assert str(refused.value) == f"GRU {REFUSED}" and not (tmp_path / "never").exists()
    with pytest.raises(ConfigError) as refused:
        checked_callback("attention", AttentionImages(TEXT, str(run)), gru, datamodule)
    assert str(refused.value) == f"callbacks.attention: GRU {REFUSED}"


def test_our_encoder_decoder_says_which_of_its_layers_read_the_source():
    model = EncDec(EncDecConfig(vocab_size=20, block_size=16, n_layer=1, n_head=2, n_embd=16, pad_id=0)).eval()
    with torch.no_grad(), attention_maps(model) as maps:
        model(torch.randint(1, 20, (1, 5)), torch.randint(1, 20, (1, 3)))
    assert {name: (capture.cross, capture[0].shape) for name, capture in maps.items()} == {
        "encoder.0.self_attn": (False, (1, 2, 5, 5)),
        "decoder.0.self_attn": (False, (1, 2, 3, 3)),
        "decoder.0.cross_attn": (True, (1, 2, 3, 5)),  # queries from the target, keys from the source
    }


def test_the_page_shows_the_users_layer_as_tested():
    """docs/extending.md's linear attention is this file's, word for word: what the page shows is what runs here."""
    page = (ROOT / "docs" / "extending.md").read_text()
    section = page[page.index("## Draw your own attention") :]
    blocks, current = [], []
    for line in section.splitlines():
        if line.startswith("    ") or (current and not line.strip()):
            current.append(line)
        elif current:
            blocks.append(textwrap.dedent("\n".join(current)).strip("\n"))
            current = []
    (block,) = [b for b in blocks if "class CausalLinearAttention" in b]
    header, _, shown = block.partition("\n")
    assert header.startswith("# mymodels/linear_attention.py") and shown.startswith("def feature_map")
    assert shown in (HELPERS / "linear_attention.py").read_text()
