"""The encoder-decoder Transformer of Vaswani et al. (2017), readable top to bottom.

Encoder and decoder stacks with pre-LN blocks (post-LN, the paper's placement, as an option),
sinusoidal or learned positions, padding masks in self- and cross-attention, a causal decoder,
shared embeddings with a tied output projection, SDPA kernels, and a key/value cache for
incremental decoding. Runs on its own:

    model = EncDec(EncDecConfig(vocab_size=8000, n_layer=3, n_head=8, n_embd=256))
    logits = model(src, tgt_in)          # (B, S), (B, T) -> (B, T, vocab_size)
    memory, src_pad = model.encode(src)  # then model.decode(tokens, memory, src_pad, cache) step by step
"""

from __future__ import annotations

import math

import torch
from torch import nn

from transformer_lab.models.configs import EncDecConfig
from transformer_lab.models.layers import Attention, EncoderDecoder, FeedForward


def sinusoids(length: int, dim: int, layout: str = "interleaved") -> torch.Tensor:
    """The paper's fixed positions, wavelengths 2π … 10000·2π: sin on even channels and cos on odd
    (interleaved), or sin on the first half and cos on the second (halves: Marian's, tensor2tensor's)."""
    position = torch.arange(length).float()[:, None]  # (L, 1)
    inv_freq = torch.exp(torch.arange(0, dim, 2).float() * (-math.log(10000.0) / dim))  # (dim/2,)
    angles = position * inv_freq  # (L, dim/2)
    if layout == "halves":
        return torch.cat([torch.sin(angles), torch.cos(angles)], dim=1)
    table = torch.zeros(length, dim)
    table[:, 0::2] = torch.sin(angles)
    table[:, 1::2] = torch.cos(angles)
    return table


class EncoderLayer(nn.Module):
    """nn.TransformerEncoderLayer's computation (and parameter layout), on SDPA. Also BERT's layer."""

    def __init__(
        self,
        n_embd: int,
        n_head: int,
        d_ff: int,
        dropout: float,
        bias: bool,
        norm_first: bool,
        activation: str = "relu",
        eps: float = 1e-5,
    ):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = Attention(n_embd, n_head, bias, dropout)
        self.ff = FeedForward(n_embd, d_ff, activation, bias, dropout)
        self.norm1 = nn.LayerNorm(n_embd, eps=eps, bias=bias)
        self.norm2 = nn.LayerNorm(n_embd, eps=eps, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, pad: torch.Tensor | None) -> torch.Tensor:
        # x: (B, S, C); pad: (B, S) True at padding
        if self.norm_first:
            x = x + self.dropout(self.self_attn(self.norm1(x), pad=pad))
            return x + self.dropout(self.ff(self.norm2(x)))
        x = self.norm1(x + self.dropout(self.self_attn(x, pad=pad)))
        return self.norm2(x + self.dropout(self.ff(x)))


class DecoderLayer(nn.Module):
    def __init__(self, config: EncDecConfig):
        super().__init__()
        C = config.n_embd
        self.norm_first = config.norm_first
        self.self_attn = Attention(C, config.n_head, config.bias, config.dropout)
        self.cross_attn = Attention(C, config.n_head, config.bias, config.dropout)
        self.ff = FeedForward(C, config.d_ff or 4 * C, config.activation, config.bias, config.dropout)
        self.norm1 = nn.LayerNorm(C, bias=config.bias)
        self.norm2 = nn.LayerNorm(C, bias=config.bias)
        self.norm3 = nn.LayerNorm(C, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(
        self, x: torch.Tensor, memory: torch.Tensor, memory_pad: torch.Tensor | None, cache: dict | None = None
    ) -> torch.Tensor:
        # x: (B, T, C) target so far; memory: (B, S, C) encoder output; cache: {"self": {}, "cross": {}}
        self_cache, cross_cache = (cache["self"], cache["cross"]) if cache is not None else (None, None)
        if self.norm_first:
            x = x + self.dropout(self.self_attn(self.norm1(x), causal=True, cache=self_cache))
            x = x + self.dropout(self.cross_attn(self.norm2(x), memory, memory_pad, cache=cross_cache))
            return x + self.dropout(self.ff(self.norm3(x)))
        x = self.norm1(x + self.dropout(self.self_attn(x, causal=True, cache=self_cache)))
        x = self.norm2(x + self.dropout(self.cross_attn(x, memory, memory_pad, cache=cross_cache)))
        return self.norm3(x + self.dropout(self.ff(x)))


class EncDec(EncoderDecoder):
    config_class = EncDecConfig

    def __init__(self, config: EncDecConfig):
        super().__init__()
        self.config = config
        C = config.n_embd
        self.embed = nn.Embedding(config.vocab_size, C, padding_idx=config.pad_id)  # target (and shared)
        self.src_embed = (
            nn.Embedding(config.src_vocab_size, C, padding_idx=config.pad_id) if config.src_vocab_size else None
        )  # None: the source shares `embed`
        if config.pos_encoding == "learned":
            self.pos = nn.Embedding(config.block_size, C)
        else:
            self.register_buffer("sinusoids", sinusoids(config.block_size, C, config.sinusoid_layout), persistent=False)
        self.drop = nn.Dropout(config.dropout)
        d_ff = config.d_ff or 4 * C
        self.encoder = nn.ModuleList(
            EncoderLayer(C, config.n_head, d_ff, config.dropout, config.bias, config.norm_first, config.activation)
            for _ in range(config.n_layer)
        )
        self.decoder = nn.ModuleList(DecoderLayer(config) for _ in range(config.n_decoder_layer or config.n_layer))
        # Pre-LN stacks end un-normalised; the paper's post-LN blocks already end with a norm.
        self.encoder_norm = nn.LayerNorm(C, bias=config.bias) if config.norm_first else nn.Identity()
        self.decoder_norm = nn.LayerNorm(C, bias=config.bias) if config.norm_first else nn.Identity()
        self.lm_head = nn.Linear(C, config.vocab_size, bias=False)
        self._init_weights()
        if config.tie_weights:
            self.lm_head.weight = self.embed.weight

    def _init_weights(self) -> None:
        # Xavier-uniform matrices, zero biases, N(0, 1/C) embeddings with a zero padding row. An attention's
        # query rows and key/value rows take their Xavier bounds apart, as the two matrices they once were.
        C = self.config.n_embd
        in_projs = {module.in_proj for module in self.modules() if isinstance(module, Attention)}
        for module in self.modules():
            if isinstance(module, nn.Linear):
                for rows in (module.weight[:C], module.weight[C:]) if module in in_projs else (module.weight,):
                    nn.init.xavier_uniform_(rows)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                nn.init.normal_(module.weight, mean=0.0, std=C**-0.5)
                if module.padding_idx is not None:
                    with torch.no_grad():
                        module.weight[module.padding_idx].zero_()

    def embed_tokens(self, idx: torch.Tensor, offset: int = 0, embed: nn.Embedding | None = None) -> torch.Tensor:
        # idx: (B, T) -> (B, T, C); scaled by sqrt(C) as in the paper, positions offset..offset+T-1
        T = idx.size(1)
        if offset + T > self.config.block_size:
            raise ValueError(f"sequence length {offset + T} exceeds block_size {self.config.block_size}")
        positions = torch.arange(offset, offset + T, device=idx.device)
        pos = self.pos(positions) if self.config.pos_encoding == "learned" else self.sinusoids[positions]
        embed = self.embed if embed is None else embed
        return self.drop(embed(idx) * math.sqrt(self.config.n_embd) + pos)

    def encode(self, src: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """src: (B, S) -> memory (B, S, C), and the padding mask (B, S) cross-attention needs."""
        pad = src == self.config.pad_id
        x = self.embed_tokens(src, embed=self.src_embed)
        for layer in self.encoder:
            x = layer(x, pad)
        return self.encoder_norm(x), pad

    def decode(
        self, tgt: torch.Tensor, memory: torch.Tensor, memory_pad: torch.Tensor, cache: list[dict] | None = None
    ) -> torch.Tensor:
        """tgt: (B, T) target tokens -> logits (B, T, V). With a cache (from new_cache()), tgt holds only
        the tokens after those already decoded, and the cache grows by them."""
        offset = cache[0]["self"]["k"].size(2) if cache is not None and "k" in cache[0]["self"] else 0
        x = self.embed_tokens(tgt, offset)
        for i, layer in enumerate(self.decoder):
            x = layer(x, memory, memory_pad, cache[i] if cache is not None else None)
        return self.lm_head(self.decoder_norm(x))
