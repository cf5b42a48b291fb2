"""Marian (MarianMTModel): our post-LN encdec with sinusoids in halves."""

from __future__ import annotations

import torch

from transformer_lab.errors import UserError
from transformer_lab.pretrained.tables import (
    ACT_TO_HF,
    Entry,
    Family,
    differ,
    linear,
    norm,
    qkv,
    refuse_export,
    refuse_unless,
)


class Marian(Family):
    """MarianMTModel: our post-LN encdec with Marian's sinusoids (sin and cos in halves)."""

    model, model_type = "encdec", "marian"

    def settings(self, hf, source):
        act = hf.get("activation_function", "swish")
        acts = {"swish": "silu", "silu": "silu", "gelu": "gelu", "relu": "relu", "gelu_new": "gelu-tanh"}
        refuse_unless(act in acts, source, f"activation_function={act!r}: encdec has {', '.join(acts)}")
        refuse_unless(hf.get("scale_embedding", True), source, "scale_embedding=false: encdec scales by sqrt(d_model)")
        for a, b in (("encoder_attention_heads", "decoder_attention_heads"), ("encoder_ffn_dim", "decoder_ffn_dim")):
            refuse_unless(hf[a] == hf[b], source, f"{a}={hf[a]} and {b}={hf[b]}: encdec's are one setting")
        vocab = hf.get("decoder_vocab_size") or hf["vocab_size"]
        shared = hf.get("share_encoder_decoder_embeddings", True)
        refuse_unless(shared or vocab == hf["vocab_size"], source, "a decoder vocabulary apart from the encoder's")
        return dict(
            vocab_size=vocab,
            src_vocab_size=None if shared else hf["vocab_size"],
            block_size=hf["max_position_embeddings"],
            n_layer=hf["encoder_layers"],
            n_decoder_layer=hf["decoder_layers"],
            n_head=hf["encoder_attention_heads"],
            n_embd=hf["d_model"],
            d_ff=hf["encoder_ffn_dim"],
            bias=True,
            norm_first=False,
            activation=acts[act],
            pos_encoding="sinusoidal",
            sinusoid_layout="halves",
            tie_weights=hf.get("tie_word_embeddings", True),
            pad_id=hf["pad_token_id"],
        )

    def table(self, s):
        t = [Entry("embed.weight", ("model.shared.weight",))]
        if s["src_vocab_size"]:
            t += [Entry("src_embed.weight", ("model.encoder.embed_tokens.weight",))]
        for stack, n in (("encoder", s["n_layer"]), ("decoder", s["n_decoder_layer"] or s["n_layer"])):
            for i in range(n):
                ours, theirs = f"{stack}.{i}", f"model.{stack}.layers.{i}"
                attentions = [("self_attn", "self_attn")] + (
                    [("cross_attn", "encoder_attn")] if stack == "decoder" else []
                )
                for name, their_name in attentions:
                    t += qkv(f"{ours}.{name}.in_proj", [f"{theirs}.{their_name}.{p}_proj" for p in "qkv"], True)
                    t += linear(f"{ours}.{name}.out_proj", f"{theirs}.{their_name}.out_proj", True)
                norms = ["self_attn_layer_norm"] + (["encoder_attn_layer_norm"] if stack == "decoder" else [])
                for j, their_norm in enumerate([*norms, "final_layer_norm"], start=1):
                    t += norm(f"{ours}.norm{j}", f"{theirs}.{their_norm}")
                t += linear(f"{ours}.ff.up", f"{theirs}.fc1", True) + linear(f"{ours}.ff.down", f"{theirs}.fc2", True)
        return t + ([] if s["tie_weights"] else [Entry("lm_head.weight", ("lm_head.weight",))])

    def to_ours(self, theirs, s):
        bias = theirs.get("final_logits_bias")
        if bias is not None and bias.abs().max() > 0:
            raise UserError(
                "init_from: this Marian checkpoint has a non-zero final_logits_bias; encdec has no output bias"
            )
        if "model.shared.weight" not in theirs and "model.decoder.embed_tokens.weight" in theirs:
            theirs = {**theirs, "model.shared.weight": theirs["model.decoder.embed_tokens.weight"]}
        return super().to_ours(theirs, s)

    def to_hf(self, ours, s):
        theirs = super().to_hf(ours, s)
        theirs["final_logits_bias"] = torch.zeros(1, s["vocab_size"])
        return theirs

    def hf_config(self, s, tokens):
        wanted = {"norm_first": False, "pos_encoding": "sinusoidal", "sinusoid_layout": "halves", "bias": True}
        refuse_export("Marian", differ(s, wanted))
        return dict(
            architectures=["MarianMTModel"],
            vocab_size=s["src_vocab_size"] or s["vocab_size"],
            decoder_vocab_size=s["vocab_size"],
            share_encoder_decoder_embeddings=s["src_vocab_size"] is None,
            max_position_embeddings=s["block_size"],
            encoder_layers=s["n_layer"],
            decoder_layers=s["n_decoder_layer"] or s["n_layer"],
            encoder_attention_heads=s["n_head"],
            decoder_attention_heads=s["n_head"],
            d_model=s["n_embd"],
            encoder_ffn_dim=s["d_ff"] or 4 * s["n_embd"],
            decoder_ffn_dim=s["d_ff"] or 4 * s["n_embd"],
            activation_function=ACT_TO_HF[s["activation"]],
            scale_embedding=True,
            dropout=s["dropout"],
            tie_word_embeddings=s["tie_weights"],
            is_encoder_decoder=True,
            pad_token_id=s["pad_id"],
            **{"decoder_start_token_id": s["pad_id"], **tokens},  # (export and the twin give the run's <bos>)
        )
