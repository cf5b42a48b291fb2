"""BERT: our bert, its token-type embedding folded into the positions."""

from __future__ import annotations

import torch

from transformer_lab.pretrained.tables import (
    Entry,
    Family,
    differ,
    linear,
    norm,
    qkv,
    refuse_export,
    refuse_unless,
)


class Bert(Family):
    """BertModel, BertForMaskedLM, BertForSequenceClassification. Our BERT has no token types: the type-0
    embedding (every token's, for one segment) is added to the position embeddings on loading."""

    model, model_type = "bert", "bert"

    def settings(self, hf, source):
        refuse_unless(
            hf.get("hidden_act", "gelu") == "gelu", source, f"hidden_act={hf.get('hidden_act')!r}: bert's is gelu"
        )
        kind = hf.get("position_embedding_type", "absolute")
        refuse_unless(kind == "absolute", source, f"position_embedding_type={kind!r}: bert's are absolute")
        return dict(
            vocab_size=hf["vocab_size"],
            block_size=hf["max_position_embeddings"],
            n_layer=hf["num_hidden_layers"],
            n_head=hf["num_attention_heads"],
            n_embd=hf["hidden_size"],
            d_ff=hf["intermediate_size"],
            bias=True,
            norm_first=False,
            norm_eps=hf.get("layer_norm_eps", 1e-12),
            pad_id=hf.get("pad_token_id") or 0,
        )

    def table(self, s):
        t = [Entry("wte.weight", ("bert.embeddings.word_embeddings.weight",))]
        t += [Entry("wpe.weight", ("bert.embeddings.position_embeddings.weight",))]
        t += norm("embed_norm", "bert.embeddings.LayerNorm")
        for i in range(s["n_layer"]):
            ours, theirs = f"encoder.{i}", f"bert.encoder.layer.{i}"
            t += qkv(
                f"{ours}.self_attn.in_proj", [f"{theirs}.attention.self.{p}" for p in ("query", "key", "value")], True
            )
            t += linear(f"{ours}.self_attn.out_proj", f"{theirs}.attention.output.dense", True)
            t += norm(f"{ours}.norm1", f"{theirs}.attention.output.LayerNorm")
            t += linear(f"{ours}.ff.up", f"{theirs}.intermediate.dense", True)
            t += linear(f"{ours}.ff.down", f"{theirs}.output.dense", True)
            t += norm(f"{ours}.norm2", f"{theirs}.output.LayerNorm")
        t += linear("pooler", "bert.pooler.dense", True) + linear("head", "classifier", True)
        t += linear("mlm_head.dense", "cls.predictions.transform.dense", True)
        t += norm("mlm_head.norm", "cls.predictions.transform.LayerNorm")
        return t + [Entry("mlm_head.bias", ("cls.predictions.bias",))]

    def to_ours(self, theirs, s):
        renamed = {}
        for k, v in theirs.items():  # BertModel's names have no "bert."; old checkpoints say gamma and beta
            k = k if k.startswith(("bert.", "cls.", "classifier.")) else f"bert.{k}"
            renamed[k.replace("LayerNorm.gamma", "LayerNorm.weight").replace("LayerNorm.beta", "LayerNorm.bias")] = v
        renamed.setdefault("cls.predictions.bias", renamed.get("cls.predictions.decoder.bias"))
        renamed = {k: v for k, v in renamed.items() if v is not None}
        ours = super().to_ours(renamed, s)
        token_types = renamed.get("bert.embeddings.token_type_embeddings.weight")
        if token_types is not None and "wpe.weight" in ours:
            ours["wpe.weight"] = ours["wpe.weight"] + token_types[0]  # every token is of type 0
        return ours

    def to_hf(self, ours, s):
        theirs = super().to_hf(ours, s)
        wpe = theirs["bert.embeddings.position_embeddings.weight"]
        theirs["bert.embeddings.token_type_embeddings.weight"] = torch.zeros(2, wpe.size(1), dtype=wpe.dtype)
        return theirs

    def export_caveat(self, s):
        if s["norm_eps"] is None:
            return (
                "model.norm_eps was null (1e-5 in the layers, 1e-12 in the embedding and head norms): exported "
                "with BERT's one layer_norm_eps=1e-5, so the embedding and head norms differ by ~1e-5 relative"
            )
        return None

    def hf_config(self, s, tokens):
        classify = s.get("n_classes") is not None  # (a classifier's pooling: BERT's pools [CLS])
        refuse_export(
            "BERT", differ(s, {"norm_first": False, "bias": True, **({"pooling": "cls"} if classify else {})})
        )
        return dict(
            architectures=["BertForSequenceClassification" if classify else "BertForMaskedLM"],
            vocab_size=s["vocab_size"],
            max_position_embeddings=s["block_size"],
            num_hidden_layers=s["n_layer"],
            num_attention_heads=s["n_head"],
            hidden_size=s["n_embd"],
            intermediate_size=s["d_ff"] or 4 * s["n_embd"],
            hidden_act="gelu",
            layer_norm_eps=s["norm_eps"] or 1e-5,
            hidden_dropout_prob=s["dropout"],
            attention_probs_dropout_prob=s["dropout"],
            type_vocab_size=2,
            **({"num_labels": s["n_classes"]} if classify else {}),
            **tokens,
            pad_token_id=s["pad_id"],
        )
