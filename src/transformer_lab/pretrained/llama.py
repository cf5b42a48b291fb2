"""Llama, Mistral and Qwen2: our gpt with RoPE, RMSNorm, SwiGLU and grouped-query attention."""

from __future__ import annotations

import torch

from transformer_lab.pretrained.gpt2 import hidden_width
from transformer_lab.pretrained.tables import (
    LOADED_OFF,
    Entry,
    Family,
    differ,
    linear,
    norm,
    options_on,
    qkv,
    refuse_export,
    refuse_unless,
)


class Llama(Family):
    """LlamaForCausalLM, and the configs that are a Llama but for their names: Mistral (without a sliding
    window shorter than the context) and Qwen2 (biases on q, k, v)."""

    model = "gpt"

    def __init__(self, model_type: str = "llama", architecture: str = "LlamaForCausalLM"):
        self.model_type, self.architecture = model_type, architecture

    def settings(self, hf, source):
        refuse_unless(
            hf.get("hidden_act", "silu") == "silu", source, f"hidden_act={hf.get('hidden_act')!r}: gpt's swiglu is silu"
        )
        rope = hf.get("rope_scaling") or hf.get("rope_parameters") or {}
        kind = rope.get("rope_type", rope.get("type", "default"))
        refuse_unless(kind == "default", source, f"rope scaling {kind!r}: only plain RoPE here")
        theta = hf.get("rope_theta", rope.get("rope_theta", 10000.0))
        C, nh = hf["hidden_size"], hf["num_attention_heads"]
        refuse_unless(
            hf.get("head_dim") in (None, C // nh),
            source,
            f"head_dim={hf.get('head_dim')} apart from hidden_size / heads",
        )
        refuse_unless(not hf.get("mlp_bias"), source, "mlp_bias: gpt's swiglu has no biases where attention has none")
        window = hf.get("sliding_window") if hf.get("use_sliding_window", self.model_type == "mistral") else None
        refuse_unless(
            window is None or window >= hf["max_position_embeddings"],
            source,
            f"sliding_window={window}: attention here sees the whole context",
        )
        qkv_bias = self.model_type == "qwen2" or bool(hf.get("attention_bias"))
        refuse_unless(
            not (hf.get("attention_bias") and self.model_type != "qwen2"), source, "attention_bias on o_proj: not here"
        )
        nkv = hf.get("num_key_value_heads") or nh
        return dict(
            vocab_size=hf["vocab_size"],
            block_size=hf["max_position_embeddings"],
            n_layer=hf["num_hidden_layers"],
            n_head=nh,
            n_kv_head=None if nkv == nh else nkv,
            n_embd=C,
            bias=False,
            qkv_bias=True if qkv_bias else None,
            pos_encoding="rope",
            rope_base=float(theta),
            mlp="swiglu",
            norm="rmsnorm",
            norm_eps=hf.get("rms_norm_eps", 1e-6),
            d_ff=hf["intermediate_size"],
            tie_weights=hf.get("tie_word_embeddings", False),
            **LOADED_OFF,
        )

    def table(self, s):
        C, nh = s["n_embd"], s["n_head"]
        kv_rows = (s["n_kv_head"] or nh) * (C // nh)
        t = [Entry("wte.weight", ("model.embed_tokens.weight",))]
        for i in range(s["n_layer"]):
            ours, theirs = f"blocks.{i}", f"model.layers.{i}"
            t += norm(f"{ours}.ln_1", f"{theirs}.input_layernorm", False)
            proj = [f"{theirs}.self_attn.{p}_proj" for p in "qkv"]
            t += qkv(f"{ours}.attn.in_proj", proj, bool(s["qkv_bias"]), kv_rows)
            t += linear(f"{ours}.attn.out_proj", f"{theirs}.self_attn.o_proj", False)
            if s["mlp"] != "none":
                t += norm(f"{ours}.ln_2", f"{theirs}.post_attention_layernorm", False)
                for ours_name, their_name in (("gate", "gate_proj"), ("up", "up_proj"), ("down", "down_proj")):
                    t += linear(f"{ours}.mlp.{ours_name}", f"{theirs}.mlp.{their_name}", False)
        t += norm("ln_f", "model.norm", False)
        return t + ([] if s["tie_weights"] else [Entry("lm_head.weight", ("lm_head.weight",))])

    def to_hf(self, ours, s):
        """An attention-only model (model.mlp=none) is a Llama with zero MLPs of width 1: it computes the same."""
        theirs = super().to_hf(ours, s)
        C, dtype = s["n_embd"], ours["wte.weight"].dtype
        for i in range(s["n_layer"]) if s["mlp"] == "none" else ():
            zero = {"post_attention_layernorm.weight": (C,), "mlp.gate_proj.weight": (1, C)}
            zero |= {"mlp.up_proj.weight": (1, C), "mlp.down_proj.weight": (C, 1)}
            theirs |= {f"model.layers.{i}.{name}": torch.zeros(shape, dtype=dtype) for name, shape in zero.items()}
        return theirs

    def hf_config(self, s, tokens):
        mlp = "none" if s["mlp"] == "none" else "swiglu"  # (attention only: zero MLPs, to_hf)
        wanted = {"pos_encoding": "rope", "norm": "rmsnorm", "mlp": mlp, "bias": False}
        refuse_export("a Llama", differ(s, wanted) + options_on(s))
        return dict(
            architectures=[self.architecture],
            vocab_size=s["vocab_size"],
            max_position_embeddings=s["block_size"],
            hidden_size=s["n_embd"],
            num_hidden_layers=s["n_layer"],
            num_attention_heads=s["n_head"],
            num_key_value_heads=s["n_kv_head"] or s["n_head"],
            intermediate_size=hidden_width(s),
            hidden_act="silu",
            rms_norm_eps=s["norm_eps"],
            rope_theta=s["rope_base"],
            attention_bias=False,
            attention_dropout=s["dropout"],
            tie_word_embeddings=s["tie_weights"],
            **tokens,
        )


class Qwen2(Llama):
    def __init__(self):
        super().__init__("qwen2", "Qwen2ForCausalLM")

    def hf_config(self, s, tokens):
        return {**super().hf_config(s, tokens), "use_sliding_window": False}


def llama_for(s: dict) -> Family:
    """The Llama-style family our gpt settings export as: Qwen2 where q, k, v have biases."""
    return Qwen2() if s.get("qkv_bias") else Llama()
