"""The building blocks every model here is assembled from: attention on F.scaled_dot_product_attention,
rotary positions, the feed-forward variants and the norms.

One convention throughout: a padding mask is (B, S) bool, True at padding (nn.MultiheadAttention's
key_padding_mask); an attention cache is a dict one layer owns while decoding.

The attention protocol (`DrawsAttention`, `attention_maps`) is how any layer's attention is drawn, ours and a
user's alike (docs/extending.md, "Draw your own attention").
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol, runtime_checkable

import torch
import torch.nn.functional as F
from torch import nn

from transformer_lab.models.flops import attention_flops, linear_flops


def make_norm(kind: str, dim: int, bias: bool = True, eps: float = 1e-5) -> nn.Module:
    """ "layernorm" (nn.LayerNorm, optionally without bias) | "rmsnorm" (nn.RMSNorm) | "none"."""
    if kind == "layernorm":
        return nn.LayerNorm(dim, eps=eps, bias=bias)
    if kind == "rmsnorm":
        return nn.RMSNorm(dim, eps=eps)
    return nn.Identity()


class RotaryEmbedding(nn.Module):
    """RoPE (Su et al. 2021), "rotate half" layout: channel i pairs with channel i + head_dim/2."""

    def __init__(self, head_dim: int, max_len: int, base: float = 10000.0):
        super().__init__()
        assert head_dim % 2 == 0, "RoPE needs an even head dimension"
        inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2).float() / head_dim))  # (hd/2,)
        angles = torch.outer(torch.arange(max_len).float(), inv_freq)  # (L, hd/2)
        angles = torch.cat([angles, angles], dim=-1)  # (L, hd)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        # x: (B, nh, T, hd) at positions offset .. offset + T - 1
        cos, sin = (t[offset : offset + x.size(-2)].to(x.dtype) for t in (self.cos, self.sin))
        x1, x2 = x.chunk(2, dim=-1)
        rotated = torch.cat([-x2, x1], dim=-1)
        return x * cos + rotated * sin


class AttentionCapture(list):
    """One layer's attention weights while `attention_maps` captures them: a list of each forward call's weights,
    (B, heads, queries, keys) float32, in call order (a decoder's cache makes one entry a call). `cross`: the layer
    said its keys were another sequence's (cross-attention: an encoder-decoder's decoder reading the source)."""

    cross = False

    def add(self, weights: torch.Tensor, cross: bool = False) -> None:
        """One call's weights: each query's weight on each key, (B, heads, queries, keys)."""
        self.append(weights.detach().float())
        self.cross = self.cross or cross


@runtime_checkable
class DrawsAttention(Protocol):
    """The attention protocol: a module whose attention the `attention` command, its training callback and the
    Python API draw. It implements `capture_attention(capture)`: from then on each forward call adds its
    attention weights, `capture.add(weights)` (`cross=True` where the keys are another sequence's), until it is
    called with None. The weights are (B, heads, queries, keys): how much each query's output takes of each key's
    value, as the layer computes it (a softmax's probabilities; a linear attention's normalised kernel scores),
    zero where a query may not look (the future of a causal layer, padding). Our `Attention` implements it; so
    can a user's own layer, and `attention_maps` captures both alike. Outside a capture, nothing is computed."""

    def capture_attention(self, capture: AttentionCapture | None) -> None: ...


class Attention(nn.Module):
    """Multi-head attention of queries from `x` over keys and values from `x` (self) or `memory` (cross).

    The projection keeps nn.MultiheadAttention's layout: in_proj rows [q; k; v] (one matmul for
    self-attention, q and [k; v] apart for cross-attention), then out_proj, so weights copy one to one.
    Options: rotary positions (in self-attention), an additive logit bias (T5's relative positions), the
    logit scale (None: 1/sqrt(head_dim); T5 uses 1), grouped-query attention (n_kv_head < n_head heads of
    keys and values, each shared by n_head / n_kv_head query heads; the cache holds only those), a head
    width other than n_embd / n_head (T5's d_kv), biases on q, k, v but not the output (Qwen2's), QK-norm
    (each head's queries and keys RMS-normalised, without a weight, before the dot product: the speedrun's).
    """

    def __init__(
        self,
        n_embd: int,
        n_head: int,
        bias: bool = True,
        dropout: float = 0.0,
        rotary: RotaryEmbedding | None = None,
        scale: float | None = None,
        n_kv_head: int | None = None,
        head_dim: int | None = None,
        qkv_bias: bool | None = None,
        qk_norm: bool = False,
    ):
        super().__init__()
        assert head_dim or n_embd % n_head == 0, "n_embd must be divisible by n_head"
        self.n_head, self.n_kv_head = n_head, n_kv_head or n_head
        assert n_head % self.n_kv_head == 0, "n_head must be a multiple of n_kv_head"
        self.head_dim = head_dim or n_embd // n_head
        self.q_size, self.kv_size = n_head * self.head_dim, self.n_kv_head * self.head_dim
        self.dropout, self.rotary, self.scale, self.qk_norm = dropout, rotary, scale, qk_norm
        self.capture: AttentionCapture | None = None  # attention_maps() sets one: each call adds its weights
        self.in_proj = nn.Linear(n_embd, self.q_size + 2 * self.kv_size, bias=bias if qkv_bias is None else qkv_bias)
        self.out_proj = nn.Linear(self.q_size, n_embd, bias=bias)

    def _qk_norm(self, t: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(t, (self.head_dim,)) if self.qk_norm else t  # (B, heads, L, hd): over each head's hd

    def _heads(self, t: torch.Tensor) -> torch.Tensor:
        B, L, _ = t.shape
        return t.view(B, L, -1, self.head_dim).transpose(1, 2)  # (B, heads, L, hd)

    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor | None = None,
        pad: torch.Tensor | None = None,
        causal: bool = False,
        bias: torch.Tensor | None = None,
        cache: dict | None = None,
    ) -> torch.Tensor:
        # x: (B, T, C) queries; memory: (B, S, C), None for self-attention; pad: (B, S) True at padded keys;
        # causal: each query sees the keys up to its own position; bias: added to the logits, (1|B, nh, T, S).
        # cache: self-attention appends each call's keys and values to it, so a call may bring a chunk of
        # new positions (causal over the cache and among themselves); cross-attention keeps the memory's.
        B, T, _ = x.shape
        Q, KV = self.q_size, self.kv_size
        if memory is None:
            q, k, v = (self._heads(t) for t in self.in_proj(x).split([Q, KV, KV], dim=2))
            k = self._qk_norm(k)
        else:
            w, b = self.in_proj.weight, self.in_proj.bias
            q = self._heads(F.linear(x, w[:Q], None if b is None else b[:Q]))
            if cache is not None and "k" in cache:
                k, v = cache["k"], cache["v"]  # the memory's keys and values never change
            else:
                k, v = (self._heads(t) for t in F.linear(memory, w[Q:], None if b is None else b[Q:]).split(KV, dim=2))
                k = self._qk_norm(k)
        q = self._qk_norm(q)
        past = cache["k"].size(2) if cache and memory is None else 0
        if self.rotary is not None and memory is None:
            q, k = self.rotary(q, past), self.rotary(k, past)
        if cache is not None:
            if past:
                k, v = torch.cat([cache["k"], k], dim=2), torch.cat([cache["v"], v], dim=2)  # (B, nkv, past+T, hd)
            cache["k"], cache["v"] = k, v
        S = k.size(2)
        mask = None if pad is None else ~pad[:, None, None, :]  # (B, 1, 1, S), True = may attend
        if causal and (S != T or mask is not None or bias is not None):
            # The queries sit at positions S-T .. S-1: each sees the keys up to itself.
            chunk = torch.ones(T, S, dtype=torch.bool, device=x.device).tril(diagonal=S - T)
            mask, causal = chunk if mask is None else mask & chunk, False
        if bias is not None:
            bias = bias.to(q.dtype)
            mask = bias if mask is None else bias.masked_fill(~mask, float("-inf"))
        if self.capture is not None:
            self.capture.add(self.weights(q, k, mask, causal), cross=memory is not None)
        y = F.scaled_dot_product_attention(
            q,
            k,
            v,
            attn_mask=mask,
            is_causal=causal,
            scale=self.scale,
            dropout_p=self.dropout if self.training else 0.0,
            enable_gqa=self.n_kv_head != self.n_head,  # each kv head serves n_head / n_kv_head query heads
        )  # (B, nh, T, hd)
        return self.out_proj(y.transpose(1, 2).contiguous().view(B, T, Q))

    def capture_attention(self, capture: AttentionCapture | None) -> None:
        """The attention protocol (DrawsAttention): each forward call adds its weights to `capture` (None: stop)."""
        self.capture = capture

    def weights(self, q: torch.Tensor, k: torch.Tensor, mask: torch.Tensor | None, causal: bool) -> torch.Tensor:
        """softmax(q kᵀ scale + mask), what SDPA computes inside, written out in float32 to be looked at (the
        output still comes from SDPA, so capturing leaves it unchanged). (B, nh, T, S), each row summing to 1."""
        T, S = q.size(2), k.size(2)
        k = k.repeat_interleave(self.n_head // self.n_kv_head, dim=1)  # (B, nh, S, hd): a kv head per query head
        scale = self.scale if self.scale is not None else self.head_dim**-0.5
        scores = (q.float() @ k.float().transpose(-2, -1)) * scale  # (B, nh, T, S)
        if causal:
            mask = torch.ones(T, S, dtype=torch.bool, device=q.device).tril(diagonal=S - T)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask.float()
        return scores.softmax(dim=-1).detach()


@contextmanager
def attention_maps(model: nn.Module) -> Iterator[dict[str, AttentionCapture]]:
    """Within it, every module of `model` that implements the attention protocol (DrawsAttention, ours and a
    user's alike) keeps the weights of each call: {layer name: [(B, nh, T, S), ...]} (a decoder's cache makes one
    entry a call). Outside it nothing is kept and nothing computed."""
    layers = attention_layers(model)
    maps = {name: AttentionCapture() for name in layers}
    for name, layer in layers.items():
        layer.capture_attention(maps[name])
    try:
        yield maps
    finally:
        for layer in layers.values():
            layer.capture_attention(None)


def attention_layers(model: nn.Module) -> dict[str, DrawsAttention]:
    """{name: module} of the modules of `model` that implement the attention protocol, in the model's order."""
    return {name: m for name, m in model.named_modules() if isinstance(m, DrawsAttention)}


class FeedForward(nn.Module):
    """Position-wise feed-forward: down(dropout(act(up(x)))), or gated, down(dropout(act(gate(x)) * up(x))).

    activation: "relu" | "relu2" (ReLU squared) | "gelu" (exact) | "gelu-tanh" (GPT-2's approximation) | "silu"
    (Marian's swish) | "swiglu" (SiLU gate, Shazeer 2020) | "gated-gelu" (tanh-GELU gate, T5.1.1)."""

    ACTIVATIONS = {
        "relu": F.relu,
        "relu2": lambda h: F.relu(h).square(),
        "gelu": F.gelu,
        "gelu-tanh": lambda h: F.gelu(h, approximate="tanh"),
        "silu": F.silu,
        "swiglu": F.silu,
        "gated-gelu": lambda h: F.gelu(h, approximate="tanh"),
    }

    def __init__(self, n_embd: int, hidden: int, activation: str = "relu", bias: bool = True, dropout: float = 0.0):
        super().__init__()
        self.activation = self.ACTIVATIONS[activation]
        self.gate = nn.Linear(n_embd, hidden, bias=bias) if activation in ("swiglu", "gated-gelu") else None
        self.up = nn.Linear(n_embd, hidden, bias=bias)
        self.down = nn.Linear(hidden, n_embd, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.activation(self.up(x)) if self.gate is None else self.activation(self.gate(x)) * self.up(x)
        return self.down(self.dropout(h))


class EncoderDecoder(nn.Module):
    """What the encoder-decoders share (encdec.py, t5.py): a forward pass is encode() then decode(), the
    decoder's key/value cache, and the FLOP count. A subclass has `encoder` and `decoder` (ModuleLists;
    each decoder layer with `self_attn` and `ff`), `lm_head`, `config.n_embd`, encode() and decode()."""

    architecture = "encoder-decoder"  # (source, target prefix) -> next-token logits of the target
    output_layers = ("lm_head",)  # the layers that give logits (optim.name=muon leaves them to AdamW)

    def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        memory, pad = self.encode(src)  # (B, S, C), (B, S)
        return self.decode(tgt, memory, pad)  # (B, T, V)

    def new_cache(self) -> list[dict]:
        """An empty key/value cache for decode(): per decoder layer, its self- and cross-attention's."""
        return [{"self": {}, "cross": {}} for _ in self.decoder]

    def forward_flops(self, S: int, T: int) -> int:
        """Matmul FLOPs of one forward pass over a source of S tokens and a target of T (see models/flops.py):
        cross-attention projects the source into keys and values once per decoder layer."""
        C = self.config.n_embd
        flops = linear_flops(self.encoder, S)
        flops += sum(attention_flops(layer.self_attn.q_size, S, S) for layer in self.encoder)
        for layer in self.decoder:
            self_attn, cross = layer.self_attn, layer.cross_attn
            flops += linear_flops(self_attn, T) + attention_flops(self_attn.q_size, T, T) + linear_flops(layer.ff, T)
            # queries and output on the target, keys and values on the source
            flops += 2 * C * (2 * cross.q_size * T + 2 * cross.kv_size * S) + attention_flops(cross.q_size, T, S)
        return flops + linear_flops(self.lm_head, T)
