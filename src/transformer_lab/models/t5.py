"""The T5 encoder-decoder (Raffel et al. 2020), readable top to bottom.

What sets it apart from models/encdec.py: no absolute positions but a learned relative position bias
(relative distances in log-spaced buckets; one table per stack, computed once and shared by every
layer; bidirectional in the encoder, causal in the decoder; none in cross-attention), pre-norm with
RMSNorm (no mean subtraction, no bias), no biases anywhere, attention logits without the 1/sqrt(d)
scale (the initialisation accounts for it), a ReLU feed-forward or T5.1.1's gated GELU, and a tied
output projection scaled by 1/sqrt(n_embd). Runs on its own:

    model = T5(T5Config(vocab_size=200, n_layer=2, n_head=4, n_embd=128))
    logits = model(src, tgt_in)      # (B, S), (B, T) -> (B, T, vocab_size); pad_id pads src
"""

from __future__ import annotations

import math

import torch
from torch import nn

from transformer_lab.models.configs import T5Config
from transformer_lab.models.layers import Attention, EncoderDecoder, FeedForward


def relative_position_bucket(
    relative_position: torch.Tensor, bidirectional: bool, num_buckets: int, max_distance: int
) -> torch.Tensor:
    """Bucket of each key-minus-query distance: half the buckets are exact distances 0, 1, 2, ..., the
    rest log-spaced up to max_distance (and beyond it the last). Bidirectional: separate halves for keys
    before and after the query. Causal: only keys at or before the query count; later ones go to 0."""
    buckets = torch.zeros_like(relative_position)
    if bidirectional:
        num_buckets //= 2
        buckets += (relative_position > 0).long() * num_buckets
        distance = relative_position.abs()
    else:
        distance = (-relative_position).clamp(min=0)
    max_exact = num_buckets // 2
    log_ratio = torch.log(distance.float().clamp(min=1) / max_exact) / math.log(max_distance / max_exact)
    large = (max_exact + (log_ratio * (num_buckets - max_exact)).long()).clamp(max=num_buckets - 1)
    return buckets + torch.where(distance < max_exact, distance, large)


class RelativePositionBias(nn.Module):
    """A learned scalar per (bucket, head), added to the attention logits: (1, nh, T, S)."""

    def __init__(self, config: T5Config, bidirectional: bool):
        super().__init__()
        self.bidirectional, self.num_buckets, self.max_distance = bidirectional, config.num_buckets, config.max_distance
        self.table = nn.Embedding(config.num_buckets, config.n_head)

    def forward(self, T: int, S: int, device: torch.device) -> torch.Tensor:
        # T queries at the last T of S key positions (S > T when a cache holds the earlier ones)
        relative = torch.arange(S, device=device)[None, :] - torch.arange(S - T, S, device=device)[:, None]  # (T, S)
        buckets = relative_position_bucket(relative, self.bidirectional, self.num_buckets, self.max_distance)
        return self.table(buckets).permute(2, 0, 1).unsqueeze(0)  # (1, nh, T, S)


class Block(nn.Module):
    """Pre-norm residual sublayers: self-attention, cross-attention (decoder only), feed-forward."""

    def __init__(self, config: T5Config, cross: bool):
        super().__init__()
        C, nh, dropout, d_kv = config.n_embd, config.n_head, config.dropout, config.d_kv
        self.self_norm = nn.RMSNorm(C, eps=1e-6)
        self.self_attn = Attention(C, nh, False, dropout, scale=1.0, head_dim=d_kv)
        self.cross_norm = nn.RMSNorm(C, eps=1e-6) if cross else None
        self.cross_attn = Attention(C, nh, False, dropout, scale=1.0, head_dim=d_kv) if cross else None
        self.ff_norm, self.ff = (
            nn.RMSNorm(C, eps=1e-6),
            FeedForward(C, config.d_ff, config.feed_forward, False, dropout),
        )
        self.dropout = nn.Dropout(config.dropout)

    def forward(
        self,
        x: torch.Tensor,
        position_bias: torch.Tensor,
        pad: torch.Tensor | None = None,
        memory: torch.Tensor | None = None,
        memory_pad: torch.Tensor | None = None,
        causal: bool = False,
        cache: dict | None = None,
    ) -> torch.Tensor:
        # x: (B, T, C); position_bias: (1, nh, T, T + cached); pad: (B, T) and memory_pad: (B, S), True at padding
        self_cache, cross_cache = (cache["self"], cache["cross"]) if cache is not None else (None, None)
        x = x + self.dropout(
            self.self_attn(self.self_norm(x), pad=pad, causal=causal, bias=position_bias, cache=self_cache)
        )
        if self.cross_attn is not None:  # no position bias across the two sequences
            x = x + self.dropout(self.cross_attn(self.cross_norm(x), memory, memory_pad, cache=cross_cache))
        return x + self.dropout(self.ff(self.ff_norm(x)))


class T5(EncoderDecoder):
    config_class = T5Config

    def __init__(self, config: T5Config):
        super().__init__()
        self.config = config
        C = config.n_embd
        self.embed = nn.Embedding(config.vocab_size, C)  # shared by encoder, decoder (and the output)
        self.encoder_bias = RelativePositionBias(config, bidirectional=True)
        self.decoder_bias = RelativePositionBias(config, bidirectional=False)
        self.encoder = nn.ModuleList(Block(config, cross=False) for _ in range(config.n_layer))
        self.decoder = nn.ModuleList(Block(config, cross=True) for _ in range(config.n_decoder_layer or config.n_layer))
        self.encoder_norm, self.decoder_norm = nn.RMSNorm(C, eps=1e-6), nn.RMSNorm(C, eps=1e-6)
        self.drop = nn.Dropout(config.dropout)
        self.lm_head = nn.Linear(C, config.vocab_size, bias=False)
        self._init_weights()
        if config.tie_weights:
            self.lm_head.weight = self.embed.weight

    def _init_weights(self) -> None:
        # Mesh TensorFlow's T5 initialisation: each matrix scaled by its fan-in, queries also by 1/sqrt(d_head)
        # in place of the missing attention scale.
        C = self.config.n_embd
        nn.init.normal_(self.embed.weight, std=1.0)
        for module in self.modules():
            if isinstance(module, Attention):
                w, Q, KV = module.in_proj.weight, module.q_size, module.kv_size  # rows [q; k; v]
                nn.init.normal_(w[:Q], std=(C * module.head_dim) ** -0.5)
                nn.init.normal_(w[Q : Q + KV], std=C**-0.5)
                nn.init.normal_(w[Q + KV :], std=C**-0.5)
                nn.init.normal_(module.out_proj.weight, std=Q**-0.5)
            elif isinstance(module, FeedForward):
                for linear in (module.up, module.gate):
                    if linear is not None:
                        nn.init.normal_(linear.weight, std=C**-0.5)
                nn.init.normal_(module.down.weight, std=self.config.d_ff**-0.5)
            elif isinstance(module, RelativePositionBias):
                nn.init.normal_(module.table.weight, std=C**-0.5)
        if not self.config.tie_weights:
            nn.init.normal_(self.lm_head.weight, std=C**-0.5)

    def encode(self, src: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """src: (B, S) -> memory (B, S, C) and the padding mask (B, S), True at padding."""
        pad = src == self.config.pad_id
        S = src.size(1)
        position_bias = self.encoder_bias(S, S, src.device)  # (1, nh, S, S), shared by every layer
        x = self.drop(self.embed(src))
        for block in self.encoder:
            x = block(x, position_bias, pad=pad)
        return self.drop(self.encoder_norm(x)), pad

    def decode(
        self, tgt: torch.Tensor, memory: torch.Tensor, memory_pad: torch.Tensor, cache: list[dict] | None = None
    ) -> torch.Tensor:
        """tgt: (B, T) decoder input (starting with pad_id) -> logits (B, T, V). With a cache (from
        new_cache()), tgt holds only the tokens after those already decoded, and the cache grows by them."""
        past = cache[0]["self"]["k"].size(2) if cache is not None and "k" in cache[0]["self"] else 0
        position_bias = self.decoder_bias(tgt.size(1), past + tgt.size(1), tgt.device)  # (1, nh, T, past+T)
        x = self.drop(self.embed(tgt))
        for i, block in enumerate(self.decoder):
            x = block(
                x,
                position_bias,
                memory=memory,
                memory_pad=memory_pad,
                causal=True,
                cache=cache[i] if cache is not None else None,
            )
        x = self.drop(self.decoder_norm(x))
        if self.config.tie_weights:
            x = x * self.config.n_embd**-0.5  # T5 rescales before a tied output projection
        return self.lm_head(x)
