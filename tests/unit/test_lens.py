"""TransformerLens on our models (api/lens.py): each model and option a Transformers twin expresses
(pretrained/twin.py) opened as TransformerLens 4's TransformerBridge, its run_with_cache logits within 1e-5 of
our model's (float32) and its cache's attention patterns our attention's own weights; what it cannot express
refused in one line by name. And activations(): every named module's output of any model in one pass, by hooks
that are gone afterwards."""

import sys
from importlib.metadata import version

import pytest
import torch
from torch import nn

transformer_lens = pytest.importorskip("transformer_lens")

from transformer_lab.api.lens import activations, to_transformer_lens  # noqa: E402
from transformer_lab.errors import UserError  # noqa: E402
from transformer_lab.models.layers import attention_maps  # noqa: E402

V = 99
SMALL = dict(vocab_size=V, n_layer=2, n_head=4, n_embd=32, dropout=0.0)
SRC = torch.randint(2, V, (2, 7), generator=torch.Generator().manual_seed(1))  # (no pad id 0: no mask to differ)
TGT = torch.randint(2, V, (2, 5), generator=torch.Generator().manual_seed(2))


def randomised(model):
    """Every parameter moved off its initialisation (norm gains and biases too), so one mapped to the wrong
    place, or left out of the twin, shows in the logits."""
    torch.manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return model.eval()


def gpt(**settings):
    from transformer_lab.models.gpt import GPT, GPTConfig

    return GPT(GPTConfig(**SMALL, block_size=16, **settings))


def bert(**settings):
    from transformer_lab.models.bert import Bert, BertConfig

    return Bert(BertConfig(**SMALL, block_size=16, **settings))


def t5(**settings):
    from transformer_lab.models.t5 import T5, T5Config

    return T5(T5Config(**SMALL, d_ff=48, **settings))


def encdec(**settings):
    from transformer_lab.models.encdec import EncDec, EncDecConfig

    return EncDec(EncDecConfig(**SMALL, block_size=16, **settings))


# our attention layer -> TransformerLens's pattern hook, per layer i
DECODER = {"blocks.{i}.attn": "blocks.{i}.attn.hook_pattern"}
ENCODER = {"encoder.{i}.self_attn": "blocks.{i}.attn.hook_pattern"}
SEQ2SEQ = {
    "encoder.{i}.self_attn": "encoder_blocks.{i}.attn.hook_pattern",
    "decoder.{i}.self_attn": "decoder_blocks.{i}.self_attn.hook_pattern",
    "decoder.{i}.cross_attn": "decoder_blocks.{i}.cross_attn.hook_pattern",
}
LLAMA = dict(pos_encoding="rope", norm="rmsnorm", mlp="swiglu", bias=False, tie_weights=False)

# case: (our model, the twin's architecture, our attention -> TransformerLens's pattern hook)
CASES = {
    "gpt: learned positions, LayerNorm, GELU (GPT-2)": (lambda: gpt(bias=True), "GPT2LMHeadModel", DECODER),
    "gpt: tanh-GELU, no biases, untied": (
        lambda: gpt(mlp="gelu-tanh", bias=False, tie_weights=False),
        "GPT2LMHeadModel",
        DECODER,
    ),
    "gpt: attention only (GPT-2 with zero MLPs)": (lambda: gpt(mlp="none"), "GPT2LMHeadModel", DECODER),
    "gpt: rotary positions, RMSNorm, SwiGLU (a Llama)": (lambda: gpt(**LLAMA), "LlamaForCausalLM", DECODER),
    "gpt: a Llama with GQA": (lambda: gpt(**LLAMA, n_kv_head=2), "LlamaForCausalLM", DECODER),
    "gpt: rotary, attention only (a Llama with zero MLPs)": (
        lambda: gpt(**{**LLAMA, "mlp": "none"}),
        "LlamaForCausalLM",
        DECODER,
    ),
    "gpt: a Llama with GQA and biases on q, k, v (Qwen2)": (
        lambda: gpt(**LLAMA, n_kv_head=1, qkv_bias=True),
        "Qwen2ForCausalLM",
        DECODER,
    ),
    "bert: a masked LM, norm_eps null": (lambda: bert(), "BertForMaskedLM", ENCODER),
    "t5: ReLU": (lambda: t5(), "T5ForConditionalGeneration", SEQ2SEQ),
    "t5: gated GELU, untied (T5.1.1)": (
        lambda: t5(feed_forward="gated-gelu", tie_weights=False),
        "T5ForConditionalGeneration",
        SEQ2SEQ,
    ),
    "encdec: post-LN, sinusoids in halves (Marian)": (
        lambda: encdec(norm_first=False, sinusoid_layout="halves", activation="silu"),
        "MarianMTModel",
        SEQ2SEQ,
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_bridge_gives_our_logits_and_our_attention(case):
    build, architecture, patterns = CASES[case]
    model = randomised(build())
    bridge = to_transformer_lens(model)
    assert type(bridge.original_model).__name__ == architecture
    seq2seq = architecture.endswith(("ConditionalGeneration", "MTModel"))
    with torch.no_grad(), attention_maps(model) as ours:
        want = model(SRC, TGT) if seq2seq else model(SRC)
        got, cache = bridge.run_with_cache(SRC, **({"decoder_input": TGT} if seq2seq else {}))
    assert got.dtype == torch.float32 and got.shape == want.shape
    assert (got - want).abs().max() <= 1e-5
    for i in range(model.config.n_layer):
        for layer, hook in patterns.items():
            (weights,) = ours[layer.format(i=i)]
            assert torch.allclose(cache[hook.format(i=i)], weights, atol=1e-6), hook.format(i=i)


def test_a_pattern_is_causal_in_a_decoder():
    bridge = to_transformer_lens(randomised(gpt(bias=True)))
    _, cache = bridge.run_with_cache(SRC)
    pattern = cache["blocks.1.attn.hook_pattern"]  # (B, nh, T, T)
    assert pattern.shape == (2, 4, 7, 7)
    assert torch.allclose(pattern.sum(-1), torch.ones(2, 4, 7))
    assert pattern.triu(1).abs().max() == 0


def test_the_twin_is_made_in_memory_without_the_hub_or_a_file(tmp_path, monkeypatch):
    import transformers

    def refused(*args, **kwargs):
        raise AssertionError(f"from_pretrained{args}: the hub or a directory asked")

    for cls in (transformers.AutoConfig, transformers.AutoTokenizer, transformers.PreTrainedModel):
        monkeypatch.setattr(cls, "from_pretrained", staticmethod(refused))
    monkeypatch.chdir(tmp_path)
    model = randomised(gpt(bias=True))
    logits, _ = to_transformer_lens(model).run_with_cache(SRC)
    assert (logits - model(SRC)).abs().max() <= 1e-5
    assert list(tmp_path.iterdir()) == []


def test_a_classifiers_twin_names_its_classes_and_gives_its_logits():
    from transformer_lab.pretrained.twin import transformers_twin

    model = randomised(bert(n_classes=3))
    twin = transformers_twin(model, {"labels": ["negative", "neutral", "positive"]})
    assert type(twin).__name__ == "BertForSequenceClassification" and not twin.training
    assert twin.config.id2label == {0: "negative", 1: "neutral", 2: "positive"}
    with torch.no_grad():
        assert (twin(SRC).logits - model(SRC)).abs().max() <= 1e-5


QK = "no QK-norm (this model: model.qk_norm=true)"
REFUSALS = {
    "QK-norm": (
        lambda: gpt(qk_norm=True),
        "to_transformer_lens: no Transformers architecture has this model's settings: GPT-2 has "
        f"{QK}; a Llama has model.pos_encoding=rope (this model: learned), model.norm=rmsnorm (this model: "
        f"layernorm), model.mlp=swiglu (this model: gelu), {QK}",
    ),
    "rotary positions with LayerNorm": (
        lambda: gpt(pos_encoding="rope", mlp="swiglu", bias=False),
        "to_transformer_lens: no Transformers architecture has this model's settings: GPT-2 has "
        "model.pos_encoding=learned (this model: rope), no gated MLP (this model: model.mlp=swiglu); a Llama has "
        "model.norm=rmsnorm (this model: layernorm)",
    ),
    "encdec's defaults (pre-LN, interleaved sinusoids)": (
        lambda: encdec(),
        "to_transformer_lens: no Transformers architecture has this model's settings: Marian has "
        "model.norm_first=false (this model: true), model.sinusoid_layout=halves (this model: interleaved)",
    ),
    "a bert classifier": (
        lambda: bert(n_classes=3),
        f"to_transformer_lens: TransformerLens {version('transformer-lens')} has no bridge for "
        "BertForSequenceClassification, this Bert's Transformers architecture; activations() reads its modules",
    ),
}


@pytest.mark.parametrize("case", list(REFUSALS))
def test_what_no_twin_or_bridge_expresses_is_refused_by_name(case):
    build, message = REFUSALS[case]
    with pytest.raises(UserError) as info:
        to_transformer_lens(build())
    assert str(info.value) == message


class Residual(nn.Module):
    """A user's own layer: its output and what it added (a tuple)."""

    def __init__(self, width: int):
        super().__init__()
        self.linear = nn.Linear(width, width)

    def forward(self, x):
        added = torch.tanh(self.linear(x))
        return x + added, added


class Mine(nn.Module):
    """A user's own model: no Transformers family, no TransformerLens bridge."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(V, 8)
        self.layers = nn.ModuleList(Residual(8) for _ in range(2))
        self.out = nn.Linear(8, V)

    def forward(self, idx):
        x = self.embed(idx)
        for layer in self.layers:
            x, _ = layer(x)
        return self.out(x)


def test_a_users_own_model_is_refused_by_its_class():
    with pytest.raises(UserError) as info:
        to_transformer_lens(Mine())
    assert str(info.value) == (
        f"to_transformer_lens: {Mine.__module__}.Mine has no Transformers family here "
        "(pretrained/: gpt2, llama, mistral, qwen2, bert, t5, marian)"
    )


def test_without_transformer_lens_it_names_what_installs_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformer_lens", None)  # (import transformer_lens: ModuleNotFoundError)
    with pytest.raises(UserError) as info:
        to_transformer_lens(gpt())
    assert (
        str(info.value)
        == 'to_transformer_lens needs transformer_lens, which is not installed: pip install -e ".[lens]"'
    )


def no_hooks(model: nn.Module) -> bool:
    return all(not m._forward_hooks for m in model.modules())


def test_activations_are_every_modules_output_of_one_pass():
    model = randomised(gpt(bias=True))
    acts = activations(model, SRC)
    # every module called, once (a block's dropout twice: NAME#1), but the list of blocks, which is never called
    called = {name for name, _ in model.named_modules() if name and name != "blocks"}
    assert set(acts) == called | {"blocks.0.drop#1", "blocks.1.drop#1"}
    with torch.no_grad():  # each module again, by hand, on what the one before gave
        assert torch.equal(acts["blocks.1"], model.blocks[1](acts["blocks.0"]))
        assert torch.equal(acts["blocks.1.ln_1"], model.blocks[1].ln_1(acts["blocks.0"]))
        assert torch.equal(acts["ln_f"], model.ln_f(acts["blocks.1"]))
        assert torch.equal(acts["lm_head"], model(SRC))
    assert no_hooks(model)


def test_activations_of_a_users_own_model_named_modules_tuples_and_hooks_removed():
    model = randomised(Mine())
    acts = activations(model, SRC, modules=["layers.0", "layers.1"])
    assert set(acts) == {"layers.0.0", "layers.0.1", "layers.1.0", "layers.1.1"}  # (output, added) per layer
    with torch.no_grad():
        x = model.embed(SRC)
        for i, layer in enumerate(model.layers):
            x, added = layer(x)
            assert torch.equal(acts[f"layers.{i}.0"], x) and torch.equal(acts[f"layers.{i}.1"], added)
    assert no_hooks(model)


def test_a_module_called_twice_gives_each_call():
    model = randomised(t5())
    acts = activations(model, SRC, TGT, modules=["embed"])
    with torch.no_grad():
        assert torch.equal(acts["embed"], model.embed(SRC)) and torch.equal(acts["embed#1"], model.embed(TGT))
    assert set(acts) == {"embed", "embed#1"}


def test_a_failed_pass_leaves_no_hook():
    model = gpt()
    with pytest.raises(ValueError, match="^sequence length 17 exceeds block_size 16$"):
        activations(model, torch.zeros(1, 17, dtype=torch.long))
    assert no_hooks(model)


def test_an_unknown_module_is_named_in_one_line():
    with pytest.raises(UserError) as info:
        activations(Mine(), SRC, modules=["layers.2"])
    assert str(info.value) == (
        "activations: Mine has no module 'layers.2' (its modules: embed, layers, layers.0, layers.0.linear, "
        "layers.1, layers.1.linear, ...)"
    )


def test_the_norm_eps_caveat_is_an_exports_alone(caplog, tmp_path):
    """A bert with model.norm_eps=null has two epsilons; its twin in memory holds both (same_norm_eps), a
    config.json one: only export says so, once (it was said, twice, by every conversion to TransformerLens)."""
    import logging

    from transformer_lab.pretrained.twin import family_for, settings_of

    model = randomised(bert())
    with caplog.at_level(logging.WARNING):
        to_transformer_lens(model)
    assert not [r for r in caplog.records if "norm_eps" in r.getMessage()]
    caveat = family_for(model, settings_of(model)).export_caveat(settings_of(model))
    assert caveat.startswith("model.norm_eps was null") and "exported with BERT's one layer_norm_eps=1e-5" in caveat


@pytest.mark.parametrize("build", [lambda: t5(), lambda: encdec(norm_first=False, sinusoid_layout="halves")])
def test_an_encoder_decoders_bridge_without_the_decoders_input_is_refused(build):
    """TransformerLens feeds a decoder with no decoder_input the source shifted right: logits of nothing."""
    model = randomised(build())
    bridge = to_transformer_lens(model, bos=1)  # (the run's <bos>, which the line names: not the twin's start, pad)
    with pytest.raises(UserError) as refused:
        bridge(SRC)
    assert str(refused.value) == (
        "to_transformer_lens: an encoder-decoder's bridge needs the decoder's input, as the run decodes: "
        "bridge(source, decoder_input=torch.tensor([[1, *target_ids]])) (<bos> first; without it TransformerLens "
        "feeds the decoder the source shifted right)"
    )
    for wrong, what in ((TGT.tolist(), "list"), (TGT[0], "a 1-d tensor")):  # one line, not a traceback of ours
        with pytest.raises(UserError, match=rf"^to_transformer_lens: decoder_input=.*; got {what}$"):
            bridge(SRC, decoder_input=wrong)
    with torch.no_grad():
        assert (bridge(SRC, decoder_input=TGT) - model(SRC, TGT)).abs().max() <= 1e-5
