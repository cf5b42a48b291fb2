"""Each Transformers family's table against our own models, without `transformers`: the table names every
tensor the model's state_dict has (and nothing else), and export then load gives back every tensor bit for
bit. tests/unit/test_pretrained.py compares the same tables with Transformers' models, where it is installed."""

import pytest
import torch

from transformer_lab.models.bert import Bert
from transformer_lab.models.encdec import EncDec
from transformer_lab.models.gpt import GPT
from transformer_lab.models.t5 import T5
from transformer_lab.pretrained.load import FAMILIES

V = 50
SOURCE = "hf:tables"

GPT2 = dict(vocab_size=V, n_positions=24, n_embd=16, n_layer=2, n_head=2)
LLAMA = dict(vocab_size=V, max_position_embeddings=24, hidden_size=16, intermediate_size=24, num_hidden_layers=2,
             num_attention_heads=4)  # fmt: skip
BERT = dict(vocab_size=V, max_position_embeddings=24, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
            num_attention_heads=2, pad_token_id=0)  # fmt: skip
T5_ = dict(vocab_size=V, d_model=16, num_heads=2, d_kv=8, d_ff=32, num_layers=2, num_decoder_layers=3)
MARIAN = dict(vocab_size=V, max_position_embeddings=24, d_model=16, encoder_layers=2, decoder_layers=3,
              encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32,
              pad_token_id=V - 1)  # fmt: skip

# name -> (model_type, their config.json, our model class, settings of ours beyond what their config sets)
CASES = {
    "gpt2": ("gpt2", GPT2, GPT, {}),
    "gpt2-untied-relu": (
        "gpt2",
        {**GPT2, "activation_function": "relu", "n_inner": 40, "tie_word_embeddings": False},
        GPT,
        {},
    ),
    "gpt2-gelu": ("gpt2", {**GPT2, "activation_function": "gelu"}, GPT, {}),
    "gpt-without-bias": ("gpt2", GPT2, GPT, {"bias": False}),  # (exported as GPT-2 with zero biases)
    "llama-gqa": ("llama", {**LLAMA, "num_key_value_heads": 2}, GPT, {}),
    "llama-tied": ("llama", {**LLAMA, "tie_word_embeddings": True}, GPT, {}),
    "mistral": ("mistral", {**LLAMA, "num_key_value_heads": 1, "sliding_window": None}, GPT, {}),
    "qwen2": ("qwen2", {**LLAMA, "num_key_value_heads": 2}, GPT, {}),
    "bert-masked-lm": ("bert", BERT, Bert, {}),
    "bert-classifier": ("bert", BERT, Bert, {"n_classes": 3}),
    "t5": ("t5", T5_, T5, {}),
    "t5.1.1-untied": ("t5", {**T5_, "feed_forward_proj": "gated-gelu", "tie_word_embeddings": False}, T5, {}),
    "t5-d_kv": ("t5", {**T5_, "d_kv": 4}, T5, {}),
    "marian": ("marian", MARIAN, EncDec, {}),
    "marian-untied-src-vocab": (
        "marian",
        {**MARIAN, "share_encoder_decoder_embeddings": False, "tie_word_embeddings": False},
        EncDec,
        {},
    ),
}


def build(case: str):
    """The family, our model (every tensor drawn apart, so one put in another's place shows) and its settings."""
    model_type, hf, cls, extra = CASES[case]
    family = FAMILIES[model_type]
    model = cls(cls.config_class(**{**family.settings(hf, SOURCE), "dropout": 0.0, **extra}))
    torch.manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_()
    return family, model, vars(model.config)


def left_out(model, s: dict) -> set[str]:
    """What the model has and the table deliberately does not name: a tied output projection, which is the
    embedding under a second name (load_state copies the embedding into it; Transformers ties it likewise)."""
    return {"lm_head.weight"} if s.get("tie_weights") and "lm_head.weight" in model.state_dict() else set()


def not_in_model(family, model, s: dict) -> set[str]:
    """What the table names and this variant of our model has not: BERT's table covers both heads (the
    masked LM's, the classifier's pooler and head), a model has one; GPT-2 always has biases, a gpt without
    them leaves them out (GPT2.to_hf writes zeros, which compute the same)."""
    if isinstance(model, Bert):
        heads = ("pooler.", "head.") if s["n_classes"] is None else ("mlm_head.",)
        return {e.ours for e in family.table(s) if e.ours.startswith(heads)}
    if family.model_type == "gpt2" and not s["bias"]:
        return {e.ours for e in family.table(s) if e.ours.endswith(".bias")}
    return set()


def test_every_family_has_a_case():
    assert {model_type for model_type, *_ in CASES.values()} == set(FAMILIES)


@pytest.mark.parametrize("case", list(CASES))
def test_the_table_names_exactly_the_models_tensors(case):
    family, model, s = build(case)
    table = family.table(s)
    ours = [e.ours for e in table]
    theirs = [t for e in table for t in e.theirs]
    assert len(ours) == len(set(ours)) and len(theirs) == len(set(theirs))  # (none named twice, either side)
    state = set(model.state_dict())
    assert left_out(model, s) <= state
    assert set(ours) - not_in_model(family, model, s) == state - left_out(model, s)


@pytest.mark.parametrize("case", list(CASES))
def test_export_then_load_gives_every_tensor_back_bit_for_bit(case):
    family, model, s = build(case)
    state = {k: v for k, v in model.state_dict().items() if k not in left_out(model, s)}
    theirs = family.to_hf(state, s)
    assert set(theirs) >= {t for e in family.table(s) if e.ours in state for t in e.theirs}
    back = family.to_ours(theirs, s)
    for name, tensor in state.items():
        assert name in back, name
        assert back[name].dtype == tensor.dtype and torch.equal(back[name], tensor), name
    extra = set(back) - set(state)  # only what the model has not: a bias-free gpt's exported zero biases
    assert extra == (not_in_model(family, model, s) if family.model_type == "gpt2" else set())
    assert all(not back[name].any() for name in extra)


def test_their_tensors_have_their_layouts():
    """What a round trip cannot see (a transpose or a split undone by its inverse): their shapes, as
    Transformers lays them out. GPT-2's Conv1D is (in, out); a GQA k_proj has n_kv_head heads' rows."""
    family, model, s = build("gpt2-untied-relu")
    theirs = family.to_hf(model.state_dict(), s)
    assert theirs["transformer.h.0.mlp.c_fc.weight"].shape == (16, 40)
    assert theirs["transformer.h.0.attn.c_attn.weight"].shape == (16, 48)
    family, model, s = build("llama-gqa")
    theirs = family.to_hf(model.state_dict(), s)
    assert theirs["model.layers.0.self_attn.q_proj.weight"].shape == (16, 16)
    assert theirs["model.layers.0.self_attn.k_proj.weight"].shape == (8, 16)
    assert theirs["model.layers.0.self_attn.v_proj.weight"].shape == (8, 16)
    family, model, s = build("t5-d_kv")
    theirs = family.to_hf(model.state_dict(), s)
    assert theirs["encoder.block.0.layer.0.SelfAttention.k.weight"].shape == (8, 16)
