"""T5 and T5.1.1: our t5 (relative position buckets, RMSNorm, a ReLU or gated-GELU feed-forward)."""

from __future__ import annotations

from transformer_lab.pretrained.tables import (
    Entry,
    Family,
    linear,
    norm,
    qkv,
    refuse_unless,
)


class T5(Family):
    model, model_type = "t5", "t5"
    FF = {"relu": "relu", "gated-gelu": "gated-gelu"}

    def settings(self, hf, source):
        ff = hf.get("feed_forward_proj", "relu")
        refuse_unless(ff in self.FF, source, f"feed_forward_proj={ff!r}: t5 has {', '.join(self.FF)}")
        refuse_unless(
            hf.get("layer_norm_epsilon", 1e-6) == 1e-6, source, "layer_norm_epsilon apart from 1e-6: not here"
        )
        pad = hf.get("pad_token_id", 0)
        refuse_unless(hf.get("decoder_start_token_id", pad) == pad, source, "a decoder start other than the pad id")
        C, nh = hf["d_model"], hf["num_heads"]
        return dict(
            vocab_size=hf["vocab_size"],
            n_layer=hf["num_layers"],
            n_decoder_layer=hf.get("num_decoder_layers") or hf["num_layers"],
            n_head=nh,
            n_embd=C,
            d_kv=None if hf["d_kv"] * nh == C else hf["d_kv"],
            d_ff=hf["d_ff"],
            feed_forward=ff,
            num_buckets=hf.get("relative_attention_num_buckets", 32),
            max_distance=hf.get("relative_attention_max_distance", 128),
            # T5.1.1 leaves its output unscaled: untied in Transformers 4 configs (tie_word_embeddings false),
            # tied but scale_decoder_outputs false in 5's. Ours ties only with the scale, so it unties a copy.
            tie_weights=hf.get("tie_word_embeddings", True) and hf.get("scale_decoder_outputs", True),
            pad_id=pad,
        )

    def table(self, s):
        t = [Entry("embed.weight", ("shared.weight",))]
        t += [
            Entry(
                "encoder_bias.table.weight", ("encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight",)
            )
        ]
        t += [
            Entry(
                "decoder_bias.table.weight", ("decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight",)
            )
        ]
        gated = s["feed_forward"] == "gated-gelu"
        ff = [("gate", "wi_0"), ("up", "wi_1"), ("down", "wo")] if gated else [("up", "wi"), ("down", "wo")]
        for stack, n in (("encoder", s["n_layer"]), ("decoder", s["n_decoder_layer"] or s["n_layer"])):
            for i in range(n):
                ours, theirs = f"{stack}.{i}", f"{stack}.block.{i}.layer"
                sublayers = [("self", "SelfAttention")] + ([("cross", "EncDecAttention")] if stack == "decoder" else [])
                for j, (name, their_name) in enumerate(sublayers):
                    attn = f"{theirs}.{j}.{their_name}"
                    t += norm(f"{ours}.{name}_norm", f"{theirs}.{j}.layer_norm", False)
                    t += qkv(f"{ours}.{name}_attn.in_proj", [f"{attn}.{p}" for p in "qkv"], False)
                    t += linear(f"{ours}.{name}_attn.out_proj", f"{attn}.o", False)
                j = len(sublayers)
                t += norm(f"{ours}.ff_norm", f"{theirs}.{j}.layer_norm", False)
                t += [e for o, th in ff for e in linear(f"{ours}.ff.{o}", f"{theirs}.{j}.DenseReluDense.{th}", False)]
            t += norm(f"{stack}_norm", f"{stack}.final_layer_norm", False)
        return t + ([] if s["tie_weights"] else [Entry("lm_head.weight", ("lm_head.weight",))])

    def to_ours(self, theirs, s):
        if "shared.weight" not in theirs and "encoder.embed_tokens.weight" in theirs:
            theirs = {**theirs, "shared.weight": theirs["encoder.embed_tokens.weight"]}
        if not s["tie_weights"] and "lm_head.weight" not in theirs:
            theirs = {**theirs, "lm_head.weight": theirs["shared.weight"].clone()}
        return super().to_ours(theirs, s)

    def hf_config(self, s, tokens):
        return dict(
            architectures=["T5ForConditionalGeneration"],
            vocab_size=s["vocab_size"],
            d_model=s["n_embd"],
            d_kv=s["d_kv"] or s["n_embd"] // s["n_head"],
            d_ff=s["d_ff"],
            num_layers=s["n_layer"],
            num_decoder_layers=s["n_decoder_layer"] or s["n_layer"],
            num_heads=s["n_head"],
            relative_attention_num_buckets=s["num_buckets"],
            relative_attention_max_distance=s["max_distance"],
            dropout_rate=s["dropout"],
            layer_norm_epsilon=1e-6,
            feed_forward_proj=s["feed_forward"],
            tie_word_embeddings=s["tie_weights"],
            is_encoder_decoder=True,
            pad_token_id=s["pad_id"],
            **{"decoder_start_token_id": s["pad_id"], **tokens},  # (export and the twin give the run's <bos>)
        )
