"""The settings of each model here: their types, defaults and checks, importable without torch, so a
command line is composed and checked before anything heavy loads (the model files import them from here)."""

from __future__ import annotations

from dataclasses import dataclass

from transformer_lab.choices import check_ranges, choice, within
from transformer_lab.errors import ConfigError

Norm = choice("Norm", "layernorm", "rmsnorm", "none")
# gelu-tanh: GPT-2's approximated GELU; relu2: ReLU(x)^2 (So et al. 2021, the NanoGPT speedrun's); none: no MLP,
# attention only (Olsson et al. 2022's toy models, where induction heads are read off the attention alone)
Mlp = choice("Mlp", "gelu", "gelu-tanh", "relu", "relu2", "swiglu", "none")
# pos_encoding: each model its own choices
GPTPositions = choice("GPTPositions", "learned", "rope")
EncDecPositions = choice("EncDecPositions", "sinusoidal", "learned")
Pooling = choice("Pooling", "cls", "mean")
FeedForwardKind = choice("FeedForwardKind", "relu", "gated-gelu")
Activation = choice("Activation", "relu", "gelu", "gelu-tanh", "silu")  # silu: Marian's "swish"
SinusoidLayout = choice("SinusoidLayout", "interleaved", "halves")


def check_sizes(config, heads_share_width: bool = True) -> None:
    """Each `within` field in its range (the sizes every model here has: positive depth, heads and width, a dropout
    probability) and, where the heads split the width (`heads_share_width`), a width the heads divide. First in
    each __post_init__, so the checks after it may divide by them."""
    check_ranges(config)
    if heads_share_width and config.n_embd % config.n_head:
        raise ConfigError("n_embd", f"{config.n_embd} is not divisible by model.n_head={config.n_head}")


# models/gpt.py
@dataclass
class GPTConfig:
    vocab_size: int = 65
    block_size: int = 256
    n_layer: int = within(6, "[1, inf)")
    n_head: int = within(6, "[1, inf)")
    n_kv_head: int | None = within(None, "[1, inf)")  # grouped-query attention: heads of keys and values (null: n_head)
    n_embd: int = within(384, "[1, inf)")
    dropout: float = within(0.0, "[0, 1)")
    bias: bool = False  # biases in Linear and LayerNorm layers
    qkv_bias: bool | None = None  # biases on the query, key and value projections (null: as bias; Qwen2: true)
    pos_encoding: GPTPositions = GPTPositions.learned
    rope_base: float = 10000.0
    mlp: Mlp = Mlp.gelu
    norm: Norm = Norm.layernorm  # none: as in Nanda et al.'s grokking model
    norm_eps: float = 1e-5
    mlp_ratio: float = 4.0
    d_ff: int | None = within(None, "[1, inf)")  # the MLP's hidden width (null: from mlp_ratio, 2/3 of it for swiglu)
    tie_weights: bool = True  # share the token embedding with the output projection
    init_std: float | None = within(0.02, "(0, inf)")  # std of every weight's normal init; None: 1/sqrt(n_embd)
    scale_residual_init: bool = True  # GPT-2: residual projections' std divided by sqrt(2 * n_layer)
    # The NanoGPT speedrun's options (issue #45), each off by default:
    qk_norm: bool = False  # RMS-normalise each head's queries and keys (no weight) before their dot product
    zero_init_projections: bool = False  # attention's and the MLP's output projections start at zero
    # logits -> c * tanh(logits / c) (Gemma 2; the speedrun's 30)
    logit_softcap: float | None = within(None, "(0, inf)")

    def __post_init__(self):
        check_sizes(self)
        if self.n_kv_head is not None and self.n_head % self.n_kv_head:
            raise ConfigError("n_kv_head", f"must divide n_head={self.n_head}, got {self.n_kv_head}")
        if self.pos_encoding == "rope" and (self.n_embd // self.n_head) % 2:
            raise ConfigError("n_embd", f"rope needs an even head size, n_embd/n_head = {self.n_embd // self.n_head}")


# models/encdec.py
@dataclass
class EncDecConfig:
    vocab_size: int = 8000  # the target vocabulary, and the source's unless src_vocab_size is given
    src_vocab_size: int | None = None  # a separate source vocabulary (its own embedding matrix)
    block_size: int = 256  # the longest source or target sequence
    n_layer: int = within(3, "[1, inf)")  # encoder layers
    n_decoder_layer: int | None = within(None, "[1, inf)")  # default: n_layer
    n_head: int = within(8, "[1, inf)")
    n_embd: int = within(256, "[1, inf)")
    d_ff: int | None = within(None, "[1, inf)")  # default: 4 * n_embd
    dropout: float = within(0.1, "[0, 1)")
    bias: bool = True
    norm_first: bool = True  # pre-LN; False is the paper's post-LN
    activation: Activation = Activation.relu  # of the feed-forward layers (Marian: silu)
    pos_encoding: EncDecPositions = EncDecPositions.sinusoidal
    sinusoid_layout: SinusoidLayout = SinusoidLayout.interleaved  # sin/cos on even/odd channels; halves: Marian's
    tie_weights: bool = True  # output projection shares the embedding matrix
    pad_id: int = 0

    def __post_init__(self):
        check_sizes(self)
        if self.pos_encoding == "sinusoidal" and self.n_embd % 2:
            raise ConfigError("n_embd", f"sinusoidal positions need an even width, got {self.n_embd}")


# models/bert.py
@dataclass
class BertConfig:
    vocab_size: int = 30522
    n_classes: int | None = None  # None: a masked LM (BERT's pretraining head) instead of a classifier
    block_size: int = 512  # the longest sequence (position embeddings)
    n_layer: int = within(4, "[1, inf)")
    n_head: int = within(4, "[1, inf)")
    n_embd: int = within(256, "[1, inf)")
    d_ff: int | None = within(None, "[1, inf)")  # default: 4 * n_embd
    dropout: float = within(0.1, "[0, 1)")
    bias: bool = True
    norm_first: bool = False  # BERT's post-LN; True: pre-LN (with a final LayerNorm)
    # every LayerNorm's (BERT: 1e-12); null: 1e-5 in the layers, 1e-12 elsewhere
    norm_eps: float | None = within(None, "(0, inf)")
    pooling: Pooling = Pooling.cls  # cls: the first position, through a tanh layer; mean: over real tokens
    pad_id: int = 0

    def __post_init__(self):
        check_sizes(self)


# models/t5.py
@dataclass
class T5Config:
    vocab_size: int = 32128
    n_layer: int = within(4, "[1, inf)")  # encoder layers
    n_decoder_layer: int | None = within(None, "[1, inf)")  # default: n_layer
    n_head: int = within(4, "[1, inf)")
    n_embd: int = within(256, "[1, inf)")
    # each head's width (null: n_embd / n_head; T5.1.1-small: 64 with 6 heads of 512)
    d_kv: int | None = within(None, "[1, inf)")
    d_ff: int = within(1024, "[1, inf)")
    dropout: float = within(0.1, "[0, 1)")
    feed_forward: FeedForwardKind = FeedForwardKind.relu  # relu: T5; gated-gelu: T5.1.1
    num_buckets: int = 32  # relative position buckets
    max_distance: int = 128  # distances beyond this share the last bucket
    tie_weights: bool = True
    pad_id: int = 0  # also the decoder's start token, as in T5

    def __post_init__(self):
        check_sizes(self, heads_share_width=self.d_kv is None)  # (d_kv: each head's own width)
        if self.num_buckets < 4 or self.max_distance <= self.num_buckets // 2:
            raise ConfigError(
                "num_buckets",
                "needs num_buckets >= 4 and max_distance > num_buckets / 2, got "
                f"{self.num_buckets} and {self.max_distance}",
            )
