"""GPT-2 (GPT2LMHeadModel, GPT2Model): our gpt with learned positions, LayerNorm and biases."""

from __future__ import annotations

import torch

from transformer_lab.pretrained.tables import (
    ACT_TO_HF,
    ACT_TO_OURS,
    LOADED_OFF,
    Entry,
    Family,
    differ,
    linear,
    norm,
    options_on,
    refuse_export,
    refuse_unless,
)


class GPT2(Family):
    model, model_type = "gpt", "gpt2"

    def settings(self, hf, source):
        act = hf.get("activation_function", "gelu_new")
        refuse_unless(
            act in ACT_TO_OURS, source, f"activation_function={act!r}: gpt's MLP has {', '.join(ACT_TO_OURS)}"
        )
        refuse_unless(hf.get("scale_attn_weights", True), source, "scale_attn_weights=false: attention here scales")
        refuse_unless(
            not hf.get("scale_attn_by_inverse_layer_idx"), source, "scale_attn_by_inverse_layer_idx: not here"
        )
        C = hf["n_embd"]
        return dict(
            vocab_size=hf["vocab_size"],
            block_size=hf["n_positions"],
            n_layer=hf["n_layer"],
            n_head=hf["n_head"],
            n_kv_head=None,
            n_embd=C,
            bias=True,
            qkv_bias=None,
            pos_encoding="learned",
            mlp=ACT_TO_OURS[act],
            norm="layernorm",
            norm_eps=hf.get("layer_norm_epsilon", 1e-5),
            d_ff=hf.get("n_inner") or 4 * C,
            tie_weights=hf.get("tie_word_embeddings", True),
            **LOADED_OFF,
        )

    def table(self, s):
        t = [Entry("wte.weight", ("transformer.wte.weight",)), Entry("wpe.weight", ("transformer.wpe.weight",))]
        for i in range(s["n_layer"]):
            ours, theirs = f"blocks.{i}", f"transformer.h.{i}"
            t += norm(f"{ours}.ln_1", f"{theirs}.ln_1")
            t += linear(f"{ours}.attn.in_proj", f"{theirs}.attn.c_attn", True, "t")
            t += linear(f"{ours}.attn.out_proj", f"{theirs}.attn.c_proj", True, "t")
            if s["mlp"] != "none":
                t += norm(f"{ours}.ln_2", f"{theirs}.ln_2")
                t += linear(f"{ours}.mlp.up", f"{theirs}.mlp.c_fc", True, "t")
                t += linear(f"{ours}.mlp.down", f"{theirs}.mlp.c_proj", True, "t")
        t += norm("ln_f", "transformer.ln_f")
        return t + ([] if s["tie_weights"] else [Entry("lm_head.weight", ("lm_head.weight",))])

    def to_ours(self, theirs, s):
        if not any(k.startswith("transformer.") for k in theirs):  # GPT2Model's names (no LM head)
            theirs = {f"transformer.{k}": v for k, v in theirs.items()}
        return super().to_ours(theirs, s)

    def to_hf(self, ours, s):
        """A model without biases (model.bias=false) is GPT-2 with zero biases, and an attention-only one
        (model.mlp=none) GPT-2 with zero MLPs of width 1: each computes the same."""
        theirs = super().to_hf(ours, s)
        for e in self.table(s):
            if e.ours.endswith(".bias") and e.ours not in ours:
                weight = ours[e.ours.removesuffix(".bias") + ".weight"]
                theirs[e.theirs[0]] = torch.zeros(weight.shape[0], dtype=weight.dtype)
        C, dtype = s["n_embd"], ours["wte.weight"].dtype
        for i in range(s["n_layer"]) if s["mlp"] == "none" else ():
            zero = {"ln_2.weight": (C,), "ln_2.bias": (C,), "mlp.c_fc.weight": (C, 1), "mlp.c_fc.bias": (1,)}
            zero |= {"mlp.c_proj.weight": (1, C), "mlp.c_proj.bias": (C,)}
            theirs |= {f"transformer.h.{i}.{name}": torch.zeros(shape, dtype=dtype) for name, shape in zero.items()}
        return theirs

    def hf_config(self, s, tokens):
        mismatches = differ(s, {"pos_encoding": "learned", "norm": "layernorm"})
        if s["mlp"] not in ("gelu", "gelu-tanh", "relu", "relu2", "none"):
            mismatches.append(("mlp", f"no gated MLP (this model: model.mlp={s['mlp']})"))
        if s.get("n_kv_head") not in (None, s["n_head"]):
            mismatches.append(
                ("n_kv_head", f"no grouped-query attention (this model: model.n_kv_head={s['n_kv_head']})")
            )
        refuse_export("GPT-2", mismatches + options_on(s))
        return dict(
            architectures=["GPT2LMHeadModel"],
            vocab_size=s["vocab_size"],
            n_positions=s["block_size"],
            n_embd=s["n_embd"],
            n_layer=s["n_layer"],
            n_head=s["n_head"],
            n_inner=hidden_width(s),
            activation_function=ACT_TO_HF.get(s["mlp"], "gelu_new"),  # (none: a zero MLP's)
            layer_norm_epsilon=s["norm_eps"],
            resid_pdrop=s["dropout"],
            embd_pdrop=s["dropout"],
            attn_pdrop=s["dropout"],
            tie_word_embeddings=s["tie_weights"],
            **{"bos_token_id": None, "eos_token_id": None, **tokens},  # (GPT2Config's 50256 is GPT-2's own vocabulary)
        )


def hidden_width(s: dict) -> int:
    """gpt's MLP width (models/gpt.py Block); 1 for an attention-only one's zero MLP in GPT-2."""
    if s["mlp"] == "none":
        return 1
    hidden = int(s["mlp_ratio"] * s["n_embd"])
    return s["d_ff"] or (int(2 * hidden / 3) if s["mlp"] == "swiglu" else hidden)
