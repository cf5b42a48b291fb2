"""Transformers checkpoints in and out: `init_from=hf:NAME_OR_DIR` and `python -m transformer_lab export`.

A checkpoint's config.json names its `model_type`; each family here (GPT-2, Llama / Mistral / Qwen2, BERT,
T5, Marian) says which of our models computes what it computes, with which settings, and how its tensors
are named and laid out: a table of (our tensor, their tensors, how), read one way to load and the other to
export. Loading reads the files themselves (config.json, safetensors or pytorch_model.bin, tokenizer.json);
a hub name is fetched with huggingface_hub. `transformers` itself is not needed for either direction.
"""

from __future__ import annotations

import json
import logging
import pickle
from dataclasses import dataclass
from pathlib import Path

import torch

from transformer_lab.errors import ConfigError, UserError, first_line

log = logging.getLogger(__name__)

PREFIX = "hf:"
WEIGHT_FILES = ["config.json", "*.safetensors", "*.safetensors.index.json", "tokenizer.json", "tokenizer_config.json"]
WEIGHT_FILES += ["special_tokens_map.json", "generation_config.json"]


def is_hf(source) -> bool:
    return isinstance(source, str) and source.startswith(PREFIX)


def refuse(source: str, what: str) -> ConfigError:
    return ConfigError("init_from", f"{source}: {what}")


# ---------------------------------------------------------------------------------------------------------
# Reading a checkpoint's directory


def local_dir(source: str) -> Path:
    """The directory of `hf:NAME_OR_DIR`: the directory itself, or the hub repository's files downloaded
    (config, weights, tokenizer) into the Hugging Face cache."""
    spec = source.removeprefix(PREFIX)
    path = Path(spec).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise refuse(source, f"{path} has no config.json: not a Transformers model directory")
        return path
    if path.exists() or spec.startswith((".", "/", "~")) or spec.count("/") > 1:
        raise refuse(source, f"no Transformers model directory at {path}")
    try:
        from huggingface_hub import list_repo_files, snapshot_download

        files = list_repo_files(spec)
        patterns = WEIGHT_FILES if any(f.endswith(".safetensors") for f in files) else [*WEIGHT_FILES, "*.bin"]
        return Path(snapshot_download(spec, allow_patterns=patterns))
    except Exception as e:  # noqa: BLE001  (no network, no such repository, a gated one: the library's errors)
        first = first_line(e)
        raise refuse(source, f"not a directory, and the hub has no model {spec!r} here ({first})") from None


def require_pretrained(what: str) -> None:
    """init_from=hf: and export read and write safetensors, which the [pretrained] extra installs."""
    import importlib.util

    if importlib.util.find_spec("safetensors") is None:
        raise UserError(f"{what} needs safetensors: pip install 'transformer_lab[pretrained]'")


def check_safetensors(path: Path, source: str) -> None:
    """A .safetensors file is whole: its header parses and its tensors' data ends where the file does (a
    download or copy cut short is refused here, in one line, before any run starts)."""
    size = path.stat().st_size
    try:
        with open(path, "rb") as f:
            length = int.from_bytes(f.read(8), "little")
            if size < 8 or length > size - 8:
                raise ValueError("its header is cut short")
            header = json.loads(f.read(length))
        end = max((t["data_offsets"][1] for k, t in header.items() if k != "__metadata__"), default=0)
    except (ValueError, KeyError, TypeError, IndexError, UnicodeDecodeError) as e:
        raise refuse(source, f"{path} is not a readable safetensors file ({e})") from None
    if 8 + length + end != size:
        raise refuse(
            source,
            f"{path} is {size:,} bytes, its header says {8 + length + end:,}: truncated or corrupt, fetch it again",
        )


def weight_files(folder: Path) -> list[Path]:
    """The checkpoint's weight files: model.safetensors, its shards (an index), or pytorch_model.bin."""
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        try:
            shards = [folder / shard for shard in sorted(set(json.loads(index.read_text())["weight_map"].values()))]
        except (ValueError, KeyError, AttributeError, TypeError) as e:
            raise UserError(f"init_from: {index} is not a safetensors index ({e})") from None
        missing = [shard.name for shard in shards if not shard.is_file()]
        if missing:
            raise UserError(f"init_from: {index} names {', '.join(missing)}, which {folder} does not have")
        return shards
    for name in ("model.safetensors", "pytorch_model.bin"):
        if (folder / name).is_file():
            return [folder / name]
    raise UserError(f"init_from: {folder} has no model.safetensors (nor shards, nor pytorch_model.bin)")


def read_config(folder: Path) -> dict:
    return json.loads((folder / "config.json").read_text())


def read_tensors(folder: Path) -> dict[str, torch.Tensor]:
    """Every tensor of the checkpoint (weight_files), each file checked whole first."""
    tensors = {}
    for path in weight_files(folder):
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            check_safetensors(path, f"hf:{folder}")
            tensors.update(load_file(path))
        else:
            tensors.update(read_bin(path))
    return tensors


def read_bin(path: Path, mmap: bool = False) -> dict:
    """A pytorch_model.bin's tensors (weights_only); mmap: its directory only, the tensors left on disk."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except (RuntimeError, EOFError, OSError, ValueError, pickle.UnpicklingError) as e:
        first = first_line(e)
        raise UserError(f"init_from: {path} is not a readable checkpoint (truncated or corrupt: {first})") from None


# ---------------------------------------------------------------------------------------------------------
# The tables


@dataclass
class Entry:
    """Our tensor `ours` is their tensors `theirs`: copied ("copy"), transposed ("t": GPT-2's Conv1D), or
    stacked by rows ("cat": q, k, v into our in_proj)."""

    ours: str
    theirs: tuple[str, ...]
    how: str = "copy"
    kv_rows: int | None = None  # "cat" of q, k, v: the rows of k and of v, where fewer than q's (GQA)


def linear(ours: str, theirs: str, bias: bool, how: str = "copy") -> list[Entry]:
    entries = [Entry(f"{ours}.weight", (f"{theirs}.weight",), how)]
    return entries + ([Entry(f"{ours}.bias", (f"{theirs}.bias",))] if bias else [])


def fused(ours: str, theirs: list[str], bias: bool) -> list[Entry]:
    entries = [Entry(f"{ours}.weight", tuple(f"{t}.weight" for t in theirs), "cat")]
    return entries + ([Entry(f"{ours}.bias", tuple(f"{t}.bias" for t in theirs), "cat")] if bias else [])


def norm(ours: str, theirs: str, bias: bool = True) -> list[Entry]:
    return linear(ours, theirs, bias)


MODELS = {  # our conf/model option -> its class (a family loads into that class, whatever a YAML calls it)
    "gpt": "transformer_lab.models.gpt.GPT",
    "bert": "transformer_lab.models.bert.Bert",
    "t5": "transformer_lab.models.t5.T5",
    "encdec": "transformer_lab.models.encdec.EncDec",
}


class Family:
    """One model_type of Transformers: `model` is our model's conf/model option; `settings` its settings
    from their config (a ConfigError where one has no counterpart here); `table` the tensors; `hf_config`
    their config from our settings (export; a ConfigError naming what Transformers cannot express)."""

    model: str
    model_type: str

    def settings(self, hf: dict, source: str) -> dict:
        raise NotImplementedError

    def table(self, s: dict) -> list[Entry]:
        raise NotImplementedError

    def hf_config(self, s: dict, tokens: dict) -> dict:
        raise NotImplementedError

    def to_ours(self, theirs: dict, s: dict) -> dict:
        return from_table(self.table(s), theirs)

    def to_hf(self, ours: dict, s: dict) -> dict:
        return to_table(self.table(s), ours)


def from_table(table: list[Entry], theirs: dict) -> dict:
    out = {}
    for e in table:
        if all(t in theirs for t in e.theirs):
            parts = [theirs[t] for t in e.theirs]
            out[e.ours] = (
                parts[0].t().contiguous() if e.how == "t" else torch.cat(parts) if e.how == "cat" else parts[0]
            )
    return out


def to_table(table: list[Entry], ours: dict) -> dict:
    out = {}
    for e in table:
        if e.ours not in ours:
            continue
        v = ours[e.ours]
        if e.how == "cat":
            kv = e.kv_rows or len(v) // len(e.theirs)
            sizes = [len(v) - 2 * kv, kv, kv] if len(e.theirs) == 3 else [kv] * len(e.theirs)
            out.update(zip(e.theirs, (p.contiguous() for p in v.split(sizes))))
        else:
            out[e.theirs[0]] = v.t().contiguous() if e.how == "t" else v.contiguous()
    return out


def qkv(ours: str, theirs: list[str], bias: bool, kv_rows: int | None = None) -> list[Entry]:
    """q, k, v stacked by rows into our in_proj (kv_rows: the rows of k and of v, where fewer than q's)."""
    return [Entry(e.ours, e.theirs, e.how, kv_rows) for e in fused(ours, theirs, bias)]


def require(condition: bool, source: str, what: str) -> None:
    if not condition:
        raise refuse(source, what)


def refuse_export(key: str, what: str) -> ConfigError:
    return ConfigError(f"model.{key}", f"{what}: no Transformers architecture here expresses it")


ACT_TO_OURS = {"gelu_new": "gelu-tanh", "gelu_pytorch_tanh": "gelu-tanh", "gelu": "gelu", "relu": "relu"}
ACT_TO_HF = {"gelu-tanh": "gelu_new", "gelu": "gelu", "relu": "relu", "silu": "swish"}


class GPT2(Family):
    model, model_type = "gpt", "gpt2"

    def settings(self, hf, source):
        act = hf.get("activation_function", "gelu_new")
        require(act in ACT_TO_OURS, source, f"activation_function={act!r}: gpt's MLP has {', '.join(ACT_TO_OURS)}")
        require(hf.get("scale_attn_weights", True), source, "scale_attn_weights=false: attention here scales")
        require(not hf.get("scale_attn_by_inverse_layer_idx"), source, "scale_attn_by_inverse_layer_idx: not here")
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
        )

    def table(self, s):
        t = [Entry("wte.weight", ("transformer.wte.weight",)), Entry("wpe.weight", ("transformer.wpe.weight",))]
        for i in range(s["n_layer"]):
            ours, theirs = f"blocks.{i}", f"transformer.h.{i}"
            t += norm(f"{ours}.ln_1", f"{theirs}.ln_1") + norm(f"{ours}.ln_2", f"{theirs}.ln_2")
            t += linear(f"{ours}.attn.in_proj", f"{theirs}.attn.c_attn", True, "t")
            t += linear(f"{ours}.attn.out_proj", f"{theirs}.attn.c_proj", True, "t")
            t += linear(f"{ours}.mlp.up", f"{theirs}.mlp.c_fc", True, "t")
            t += linear(f"{ours}.mlp.down", f"{theirs}.mlp.c_proj", True, "t")
        t += norm("ln_f", "transformer.ln_f")
        return t + ([] if s["tie_weights"] else [Entry("lm_head.weight", ("lm_head.weight",))])

    def to_ours(self, theirs, s):
        if not any(k.startswith("transformer.") for k in theirs):  # GPT2Model's names (no LM head)
            theirs = {f"transformer.{k}": v for k, v in theirs.items()}
        return super().to_ours(theirs, s)

    def to_hf(self, ours, s):
        """A model without biases (model.bias=false) is GPT-2 with zero biases, which computes the same."""
        theirs = super().to_hf(ours, s)
        for e in self.table(s):
            if e.ours.endswith(".bias") and e.ours not in ours:
                weight = ours[e.ours.removesuffix(".bias") + ".weight"]
                theirs[e.theirs[0]] = torch.zeros(weight.shape[0], dtype=weight.dtype)
        return theirs

    def hf_config(self, s, tokens):
        for key, wanted in (("pos_encoding", "learned"), ("norm", "layernorm")):
            if s[key] != wanted:
                raise refuse_export(key, f"GPT-2 has {key}={wanted}, this model {s[key]}")
        if s["mlp"] not in ("gelu", "gelu-tanh", "relu"):
            raise refuse_export("mlp", f"GPT-2's MLP is not gated, this model's is {s['mlp']}")
        if s.get("n_kv_head") not in (None, s["n_head"]):
            raise refuse_export("n_kv_head", "GPT-2 has no grouped-query attention")
        return dict(
            architectures=["GPT2LMHeadModel"],
            vocab_size=s["vocab_size"],
            n_positions=s["block_size"],
            n_embd=s["n_embd"],
            n_layer=s["n_layer"],
            n_head=s["n_head"],
            n_inner=hidden_width(s),
            activation_function=ACT_TO_HF[s["mlp"]],
            layer_norm_epsilon=s["norm_eps"],
            resid_pdrop=s["dropout"],
            embd_pdrop=s["dropout"],
            attn_pdrop=s["dropout"],
            tie_word_embeddings=s["tie_weights"],
            **{"bos_token_id": None, "eos_token_id": None, **tokens},  # (GPT2Config's 50256 is GPT-2's own vocabulary)
        )


def hidden_width(s: dict) -> int:
    """gpt's MLP width (models/gpt.py Block)."""
    hidden = int(s["mlp_ratio"] * s["n_embd"])
    return s["d_ff"] or (int(2 * hidden / 3) if s["mlp"] == "swiglu" else hidden)


class Llama(Family):
    """LlamaForCausalLM, and the configs that are a Llama but for their names: Mistral (without a sliding
    window shorter than the context) and Qwen2 (biases on q, k, v)."""

    model = "gpt"

    def __init__(self, model_type: str = "llama", architecture: str = "LlamaForCausalLM"):
        self.model_type, self.architecture = model_type, architecture

    def settings(self, hf, source):
        require(
            hf.get("hidden_act", "silu") == "silu", source, f"hidden_act={hf.get('hidden_act')!r}: gpt's swiglu is silu"
        )
        rope = hf.get("rope_scaling") or hf.get("rope_parameters") or {}
        kind = rope.get("rope_type", rope.get("type", "default"))
        require(kind == "default", source, f"rope scaling {kind!r}: only plain RoPE here")
        theta = hf.get("rope_theta", rope.get("rope_theta", 10000.0))
        C, nh = hf["hidden_size"], hf["num_attention_heads"]
        require(
            hf.get("head_dim") in (None, C // nh),
            source,
            f"head_dim={hf.get('head_dim')} apart from hidden_size / heads",
        )
        require(not hf.get("mlp_bias"), source, "mlp_bias: gpt's swiglu has no biases where attention has none")
        window = hf.get("sliding_window") if hf.get("use_sliding_window", self.model_type == "mistral") else None
        require(
            window is None or window >= hf["max_position_embeddings"],
            source,
            f"sliding_window={window}: attention here sees the whole context",
        )
        qkv_bias = self.model_type == "qwen2" or bool(hf.get("attention_bias"))
        require(
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
        )

    def table(self, s):
        C, nh = s["n_embd"], s["n_head"]
        kv_rows = (s["n_kv_head"] or nh) * (C // nh)
        t = [Entry("wte.weight", ("model.embed_tokens.weight",))]
        for i in range(s["n_layer"]):
            ours, theirs = f"blocks.{i}", f"model.layers.{i}"
            t += norm(f"{ours}.ln_1", f"{theirs}.input_layernorm", False)
            t += norm(f"{ours}.ln_2", f"{theirs}.post_attention_layernorm", False)
            proj = [f"{theirs}.self_attn.{p}_proj" for p in "qkv"]
            t += qkv(f"{ours}.attn.in_proj", proj, bool(s["qkv_bias"]), kv_rows)
            t += linear(f"{ours}.attn.out_proj", f"{theirs}.self_attn.o_proj", False)
            for ours_name, their_name in (("gate", "gate_proj"), ("up", "up_proj"), ("down", "down_proj")):
                t += linear(f"{ours}.mlp.{ours_name}", f"{theirs}.mlp.{their_name}", False)
        t += norm("ln_f", "model.norm", False)
        return t + ([] if s["tie_weights"] else [Entry("lm_head.weight", ("lm_head.weight",))])

    def hf_config(self, s, tokens):
        for key, wanted in (("pos_encoding", "rope"), ("norm", "rmsnorm"), ("mlp", "swiglu"), ("bias", False)):
            if s[key] != wanted:
                raise refuse_export(key, f"a Llama has {key}={wanted}, this model {s[key]}")
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


class Bert(Family):
    """BertModel, BertForMaskedLM, BertForSequenceClassification. Our BERT has no token types: the type-0
    embedding (every token's, for one segment) is added to the position embeddings on loading."""

    model, model_type = "bert", "bert"

    def settings(self, hf, source):
        require(hf.get("hidden_act", "gelu") == "gelu", source, f"hidden_act={hf.get('hidden_act')!r}: bert's is gelu")
        kind = hf.get("position_embedding_type", "absolute")
        require(kind == "absolute", source, f"position_embedding_type={kind!r}: bert's are absolute")
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

    def hf_config(self, s, tokens):
        if s["norm_first"]:
            raise refuse_export("norm_first", "BERT is post-LN, this model pre-LN")
        if not s["bias"]:
            raise refuse_export("bias", "BERT has biases, this model none")
        classify = s.get("n_classes") is not None
        if classify and s["pooling"] != "cls":
            raise refuse_export("pooling", f"BERT's classifier pools [CLS], this model {s['pooling']}")
        if s["norm_eps"] is None:
            log.warning(
                "model.norm_eps was null (1e-5 in the layers, 1e-12 in the embedding and head norms): exported "
                "with BERT's one layer_norm_eps=1e-5, so the embedding and head norms differ by ~1e-5 relative"
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


class T5(Family):
    model, model_type = "t5", "t5"
    FF = {"relu": "relu", "gated-gelu": "gated-gelu"}

    def settings(self, hf, source):
        ff = hf.get("feed_forward_proj", "relu")
        require(ff in self.FF, source, f"feed_forward_proj={ff!r}: t5 has {', '.join(self.FF)}")
        require(hf.get("layer_norm_epsilon", 1e-6) == 1e-6, source, "layer_norm_epsilon apart from 1e-6: not here")
        pad = hf.get("pad_token_id", 0)
        require(hf.get("decoder_start_token_id", pad) == pad, source, "a decoder start other than the pad id")
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
            **tokens,
            pad_token_id=s["pad_id"],
            decoder_start_token_id=s["pad_id"],
        )


class Marian(Family):
    """MarianMTModel: our post-LN encdec with Marian's sinusoids (sin and cos in halves)."""

    model, model_type = "encdec", "marian"

    def settings(self, hf, source):
        act = hf.get("activation_function", "swish")
        acts = {"swish": "silu", "silu": "silu", "gelu": "gelu", "relu": "relu", "gelu_new": "gelu-tanh"}
        require(act in acts, source, f"activation_function={act!r}: encdec has {', '.join(acts)}")
        require(hf.get("scale_embedding", True), source, "scale_embedding=false: encdec scales by sqrt(d_model)")
        for a, b in (("encoder_attention_heads", "decoder_attention_heads"), ("encoder_ffn_dim", "decoder_ffn_dim")):
            require(hf[a] == hf[b], source, f"{a}={hf[a]} and {b}={hf[b]}: encdec's are one setting")
        vocab = hf.get("decoder_vocab_size") or hf["vocab_size"]
        shared = hf.get("share_encoder_decoder_embeddings", True)
        require(shared or vocab == hf["vocab_size"], source, "a decoder vocabulary apart from the encoder's")
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
        checks = (("norm_first", False), ("pos_encoding", "sinusoidal"), ("sinusoid_layout", "halves"), ("bias", True))
        differ = [(key, wanted) for key, wanted in checks if s[key] != wanted]  # all at once: one retraining
        if differ:
            raise refuse_export(
                differ[0][0], "Marian has " + ", ".join(f"model.{k}={w} (this model: {s[k]})" for k, w in differ)
            )
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
            **tokens,
            pad_token_id=s["pad_id"],
            decoder_start_token_id=s["pad_id"],
        )


FAMILIES: dict[str, Family] = {
    f.model_type: f for f in (GPT2(), Llama(), Llama("mistral", "MistralForCausalLM"), Qwen2(), Bert(), T5(), Marian())
}


def family_of(hf: dict, source: str) -> Family:
    model_type = hf.get("model_type")
    if model_type not in FAMILIES:
        raise refuse(source, f"model_type {model_type!r} is not one mapped here ({', '.join(FAMILIES)})")
    return FAMILIES[model_type]


# ---------------------------------------------------------------------------------------------------------
# Loading


@dataclass
class Checkpoint:
    """What `init_from=hf:...` brings: the directory, its family and our model's settings."""

    source: str
    folder: Path
    family: Family
    settings: dict

    @property
    def tokenizer(self) -> str | None:
        return str(self.folder) if (self.folder / "tokenizer.json").is_file() else None


def open_checkpoint(source: str) -> Checkpoint:
    folder = local_dir(source)
    try:
        hf = read_config(folder)
    except ValueError as e:
        raise refuse(source, f"{folder / 'config.json'} is not JSON ({e})") from None
    if not isinstance(hf, dict):
        raise refuse(source, f"{folder / 'config.json'} holds a {type(hf).__name__}, not a model's settings")
    family = family_of(hf, source)
    try:
        return Checkpoint(source, folder, family, family.settings(hf, source))
    except KeyError as e:
        raise refuse(source, f"its config.json has no {e.args[0]} (a {family.model_type} config needs it)") from None


def override_value(value) -> str:
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def check_tokenizer(cfg, checkpoint: Checkpoint) -> None:
    """The checkpoint's embedding rows mean its own tokenizer's pieces: a run reads its text with that tokenizer
    (the checkpoint's tokenizer.json, or one the user names where it has none), never with one learned here
    (ids would then mean other pieces). A named tokenizer must fit the embedding: no more ids than its rows,
    and no fewer than 99% of them (checkpoints pad their embeddings to a round number, by < 1%)."""
    from transformer_lab.data.configs import LEARNED_KINDS

    source = checkpoint.source
    if "tokenizer" not in cfg.data:
        raise refuse(
            source,
            f"data={cfg.data.name} reads text with a vocabulary of its own (no data.tokenizer), under which the "
            "checkpoint's embeddings would mean other pieces: fine-tune on data=text, labelled or translation, "
            "which read text with the checkpoint's tokenizer",
        )
    rows = checkpoint.settings.get("vocab_size")
    if checkpoint.tokenizer is not None:
        own = Path(checkpoint.tokenizer) / "tokenizer.json"
        try:
            from tokenizers import Tokenizer

            size = Tokenizer.from_file(str(own)).get_vocab_size()
        except Exception as e:  # noqa: BLE001  (the library's own errors: not JSON, not a tokenizer)
            raise refuse(source, f"{own} does not load as a tokenizer ({first_line(e)})") from None
        if rows is not None and size > rows:
            raise refuse(source, f"{own} has {size:,} ids, its embedding {rows:,} rows: they are not one model's")
        return
    named = cfg.data.tokenizer
    if named is None or named in LEARNED_KINDS:
        raise refuse(
            source,
            f"{checkpoint.folder} has no tokenizer.json, and data.tokenizer={named} would read text with a "
            "tokenizer made here, under which the checkpoint's embeddings mean other pieces: name the checkpoint's "
            "own tokenizer with data.tokenizer=FILE_OR_NAME (a tokenizer.json or a Hugging Face name)",
        )
    from transformer_lab.data.tokenizers import pretrained

    size = pretrained(named, "</s>").tokenizer.get_vocab_size()
    if rows is not None and not 0.99 * rows <= size <= rows:
        raise ConfigError(
            "data.tokenizer",
            f"{named} has {size:,} ids, {source}'s embedding {rows:,} rows: not the checkpoint's tokenizer "
            "(its ids would mean other pieces, or fall outside the embedding)",
        )


def apply(cfg, overrides: list[str] | None):
    """The run's config and overrides with its init_from=hf:... checkpoint's model settings (and, for data with
    a `tokenizer` key, the checkpoint's tokenizer): sizes are never retyped, and an override that says
    otherwise is refused by name. The settings join the overrides, so a resume composes the same model."""
    from omegaconf import OmegaConf, open_dict

    source = cfg.init_from
    checkpoint = open_checkpoint(source)
    files = weight_files(checkpoint.folder)
    if any(f.suffix == ".safetensors" for f in files):
        require_pretrained(f"init_from={source}")
    for path in files:  # whole, before the run starts (read_tensors reads them once it has)
        if path.suffix == ".safetensors":
            check_safetensors(path, source)
        else:
            read_bin(path, mmap=True)
    family = checkpoint.family
    if cfg.model.get("_target_") != MODELS[family.model]:
        raise refuse(
            source,
            f"a {family.model_type} checkpoint loads into model={family.model}; this run has model={cfg.model.name}",
        )
    from transformer_lab.data.configs import DATA_DECIDED

    given = {o.lstrip("+~").split("=", 1)[0] for o in overrides or []}
    added = []  # (in place: Hydra records and runs this config object)
    sizes = {k: v for k, v in checkpoint.settings.items() if k in DATA_DECIDED and v is not None}
    with open_dict(cfg):
        for key, value in checkpoint.settings.items():
            if key in DATA_DECIDED:
                continue
            if f"model.{key}" in given and OmegaConf.to_container(cfg.model, enum_to_str=True)[key] != value:
                raise ConfigError(
                    f"model.{key}", f"{source} has {key}={value}: leave model.{key} out (init_from sets the model)"
                )
            cfg.model[key] = value
            added.append(f"model.{key}={override_value(value)}")
        cfg.model_sizes = sizes  # the data's sizes give way to the checkpoint's (factory.build_model checks them)
        added.append("model_sizes={" + ",".join(f"{k}:{v}" for k, v in sizes.items()) + "}")
        tokenizer = checkpoint.tokenizer
        check_tokenizer(cfg, checkpoint)
        if tokenizer and "tokenizer" in cfg.data:
            named = Path(str(cfg.data.tokenizer)).resolve()
            if "data.tokenizer" in given and named not in (
                Path(tokenizer).resolve(),
                Path(tokenizer, "tokenizer.json").resolve(),
            ):
                raise ConfigError(
                    "data.tokenizer",
                    f"init_from={source} reads text with its own tokenizer ({tokenizer}): leave data.tokenizer out",
                )
            cfg.data.tokenizer = tokenizer
            added.append(f"data.tokenizer={tokenizer}")
    log.info(
        "init_from %s: a %s checkpoint, model=%s with %s", source, family.model_type, family.model, ", ".join(added)
    )
    return cfg, [o for o in overrides or [] if o.split("=", 1)[0] not in {a.split("=", 1)[0] for a in added}] + added


def load_state(model: torch.nn.Module, source: str) -> tuple[str, list[str], set[str]]:
    """init_weights for `hf:...`: the checkpoint's tensors under our names, loaded where they fit. Returns the
    report, what did not fit (left as initialised, then theirs unused) and what was loaded."""
    checkpoint = open_checkpoint(source)
    settings = {**vars(model.config), **checkpoint.settings}
    theirs = read_tensors(checkpoint.folder)
    mapped = checkpoint.family.to_ours(theirs, settings)
    ours = model.state_dict()
    if model.config.__dict__.get("tie_weights") and "lm_head.weight" in ours:
        embedding = next(k for k in ("wte.weight", "embed.weight") if k in ours)
        if embedding in mapped:
            mapped["lm_head.weight"] = mapped[embedding]
    fits = {k: v.to(ours[k].dtype) for k, v in mapped.items() if k in ours and ours[k].shape == v.shape}
    wrong = sorted(k for k in mapped if k in ours and k not in fits and not k.startswith("head."))  # (a new head)
    if wrong:
        k = wrong[0]
        raise refuse(source, f"{k} is {tuple(mapped[k].shape)} in the checkpoint, {tuple(ours[k].shape)} in this model")
    model.load_state_dict(fits, strict=False)
    used = {t for e in checkpoint.family.table(settings) if e.ours in fits for t in e.theirs}
    unused = sorted(k for k in theirs if k not in used and not k.endswith(IGNORED))
    left = sorted(set(ours) - set(fits))
    report = f"init_from {source} ({checkpoint.family.model_type}, {checkpoint.folder}): loaded {len(fits)} of {len(ours)} tensors"
    if left:
        report += f"; left as initialised ({len(left)}): {', '.join(left)}"
    if unused:
        report += f"; not in this model ({len(unused)}): {', '.join(unused[:8])}{' ...' if len(unused) > 8 else ''}"
    return report, left + unused, set(fits)


# Tensors that are not weights (buffers), or are already counted (tied copies, BERT's folded token types)
IGNORED = (
    "attn.bias",
    "attn.masked_bias",
    "position_ids",
    "token_type_embeddings.weight",
    "embed_positions.weight",
    "final_logits_bias",
    "embed_tokens.weight",
    "cls.predictions.decoder.weight",
    "cls.predictions.decoder.bias",
    "lm_head.weight",
    "rotary_emb.inv_freq",
)
