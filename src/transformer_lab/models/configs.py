"""The settings of each model here: their types, defaults and checks, importable without torch, so a
command line is composed and checked before anything heavy loads (the model files import them from here)."""

from __future__ import annotations

from dataclasses import dataclass

from transformer_lab.choices import choice
from transformer_lab.errors import ConfigError

Norm = choice("Norm", "layernorm", "rmsnorm", "none")
PosEncoding = choice("PosEncoding", "learned", "rope")
Mlp = choice("Mlp", "gelu", "relu", "swiglu")
Positions = choice("Positions", "sinusoidal", "learned")
Pooling = choice("Pooling", "cls", "mean")
FeedForwardKind = choice("FeedForwardKind", "relu", "gated-gelu")


# models/gpt.py
@dataclass
class GPTConfig:
    vocab_size: int = 65
    block_size: int = 256
    n_layer: int = 6
    n_head: int = 6
    n_embd: int = 384
    dropout: float = 0.0
    bias: bool = False  # biases in Linear and LayerNorm layers
    pos_encoding: PosEncoding = PosEncoding.learned
    rope_base: float = 10000.0
    mlp: Mlp = Mlp.gelu
    norm: Norm = Norm.layernorm  # none: as in Nanda et al.'s grokking model
    mlp_ratio: float = 4.0
    tie_weights: bool = True  # share the token embedding with the output projection
    init_std: float | None = 0.02  # std of every weight's normal init; None: 1/sqrt(n_embd)
    scale_residual_init: bool = True  # GPT-2: residual projections' std divided by sqrt(2 * n_layer)

    def __post_init__(self):
        if self.pos_encoding == "rope" and (self.n_embd // self.n_head) % 2:
            raise ConfigError("n_embd", f"rope needs an even head size, n_embd/n_head = {self.n_embd // self.n_head}")
        if self.init_std is not None and self.init_std <= 0:
            raise ConfigError("init_std", f"must be positive or null (1/sqrt(n_embd)), got {self.init_std}")


# models/encdec.py
@dataclass
class EncDecConfig:
    vocab_size: int = 8000  # the target vocabulary, and the source's unless src_vocab_size is given
    src_vocab_size: int | None = None  # a separate source vocabulary (its own embedding matrix)
    block_size: int = 256  # the longest source or target sequence
    n_layer: int = 3  # encoder layers
    n_decoder_layer: int | None = None  # default: n_layer
    n_head: int = 8
    n_embd: int = 256
    d_ff: int | None = None  # default: 4 * n_embd
    dropout: float = 0.1
    bias: bool = True
    norm_first: bool = True  # pre-LN; False is the paper's post-LN
    pos_encoding: Positions = Positions.sinusoidal
    tie_weights: bool = True  # output projection shares the embedding matrix
    pad_id: int = 0

    def __post_init__(self):
        for key in ("n_decoder_layer", "d_ff"):
            if getattr(self, key) is not None and getattr(self, key) < 1:
                raise ConfigError(key, f"must be positive or null, got {getattr(self, key)}")
        if self.pos_encoding == "sinusoidal" and self.n_embd % 2:
            raise ConfigError("n_embd", f"sinusoidal positions need an even width, got {self.n_embd}")


# models/bert.py
@dataclass
class BertConfig:
    vocab_size: int = 30522
    n_classes: int | None = None  # None: a masked LM (BERT's pretraining head) instead of a classifier
    block_size: int = 512  # the longest sequence (position embeddings)
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 256
    d_ff: int | None = None  # default: 4 * n_embd
    dropout: float = 0.1
    bias: bool = True
    norm_first: bool = False  # BERT's post-LN; True: pre-LN (with a final LayerNorm)
    pooling: Pooling = Pooling.cls  # cls: the first position, through a tanh layer; mean: over real tokens
    pad_id: int = 0

    def __post_init__(self):
        if self.d_ff is not None and self.d_ff < 1:
            raise ConfigError("d_ff", f"must be positive or null, got {self.d_ff}")


# models/t5.py
@dataclass
class T5Config:
    vocab_size: int = 32128
    n_layer: int = 4  # encoder layers
    n_decoder_layer: int | None = None  # default: n_layer
    n_head: int = 4
    n_embd: int = 256
    d_ff: int = 1024
    dropout: float = 0.1
    feed_forward: FeedForwardKind = FeedForwardKind.relu  # relu: T5; gated-gelu: T5.1.1
    num_buckets: int = 32  # relative position buckets
    max_distance: int = 128  # distances beyond this share the last bucket
    tie_weights: bool = True
    pad_id: int = 0  # also the decoder's start token, as in T5

    def __post_init__(self):
        if self.d_ff < 1:
            raise ConfigError("d_ff", f"must be positive, got {self.d_ff}")
        if self.num_buckets < 4 or self.max_distance <= self.num_buckets // 2:
            raise ConfigError(
                "num_buckets",
                "needs num_buckets >= 4 and max_distance > num_buckets / 2, got "
                f"{self.num_buckets} and {self.max_distance}",
            )
