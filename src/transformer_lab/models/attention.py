"""Multi-head attention on top of F.scaled_dot_product_attention, and rotary position embeddings."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


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
        cos, sin = (t[offset:offset + x.size(-2)].to(x.dtype) for t in (self.cos, self.sin))
        x1, x2 = x.chunk(2, dim=-1)
        rotated = torch.cat([-x2, x1], dim=-1)
        return x * cos + rotated * sin


class SelfAttention(nn.Module):
    """Multi-head self-attention with one fused q/k/v projection (the layout of nn.MultiheadAttention's
    in_proj_weight: rows [q; k; v]), so weights copy across one to one."""

    def __init__(self, n_embd: int, n_head: int, bias: bool = True, dropout: float = 0.0,
                 rotary: RotaryEmbedding | None = None):
        super().__init__()
        assert n_embd % n_head == 0, "n_embd must be divisible by n_head"
        self.n_head = n_head
        self.c_attn = nn.Linear(n_embd, 3 * n_embd, bias=bias)
        self.c_proj = nn.Linear(n_embd, n_embd, bias=bias)
        self.dropout = dropout
        self.resid_dropout = nn.Dropout(dropout)
        self.rotary = rotary

    def forward(self, x: torch.Tensor, is_causal: bool = False, attn_mask: torch.Tensor | None = None,
                cache: dict | None = None) -> torch.Tensor:
        # x: (B, T, C); attn_mask: bool, True = may attend, broadcastable to (B, nh, T, T);
        # cache: a dict this layer owns across decoding steps, holding the keys and values so far.
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hd)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        past = cache["k"].size(2) if cache else 0
        if self.rotary is not None:
            q, k = self.rotary(q, past), self.rotary(k, past)
        if cache is not None:
            if past:
                k, v = torch.cat([cache["k"], k], dim=2), torch.cat([cache["v"], v], dim=2)  # (B, nh, past+T, hd)
            cache["k"], cache["v"] = k, v
        if is_causal and past and attn_mask is None:
            # The new queries sit at positions past .. past+T-1: each sees the cache and the new keys up to itself.
            attn_mask = torch.ones(T, past + T, dtype=torch.bool, device=x.device).tril(diagonal=past)
        y = F.scaled_dot_product_attention(
            q, k, v, attn_mask=attn_mask, is_causal=is_causal and attn_mask is None,
            dropout_p=self.dropout if self.training else 0.0,
        )  # (B, nh, T, hd)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class MultiHeadAttention(nn.Module):
    """Multi-head attention of queries from `x` over keys and values from `memory` (cross-attention) or
    from `x` itself, with padding masks and a key/value cache for incremental decoding.

    The projections keep nn.MultiheadAttention's layout (in_proj rows [q; k; v] = q_proj, kv_proj).
    """

    def __init__(self, n_embd: int, n_head: int, bias: bool = True, dropout: float = 0.0):
        super().__init__()
        assert n_embd % n_head == 0, "n_embd must be divisible by n_head"
        self.n_head, self.dropout = n_head, dropout
        self.q_proj = nn.Linear(n_embd, n_embd, bias=bias)
        self.kv_proj = nn.Linear(n_embd, 2 * n_embd, bias=bias)
        self.out_proj = nn.Linear(n_embd, n_embd, bias=bias)

    def _heads(self, t: torch.Tensor) -> torch.Tensor:
        B, T, C = t.shape
        return t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hd)

    def forward(self, x: torch.Tensor, memory: torch.Tensor | None = None,
                key_padding_mask: torch.Tensor | None = None, is_causal: bool = False,
                cache: dict | None = None) -> torch.Tensor:
        # x: (B, T, C) queries; memory: (B, S, C) or None for self-attention;
        # key_padding_mask: (B, S) bool, True = padding; cache: a dict this layer owns across decoding steps.
        B, T, C = x.shape
        q = self._heads(self.q_proj(x))
        if cache is not None and memory is not None and "k" in cache:
            k, v = cache["k"], cache["v"]  # cross-attention: the memory's keys and values never change
        else:
            k, v = (self._heads(t) for t in self.kv_proj(x if memory is None else memory).split(C, dim=2))
            if cache is not None:
                if memory is None and "k" in cache:  # self-attention: append this step's keys and values
                    k, v = torch.cat([cache["k"], k], dim=2), torch.cat([cache["v"], v], dim=2)
                cache["k"], cache["v"] = k, v
        mask = None
        if key_padding_mask is not None:
            mask = ~key_padding_mask[:, None, None, :]  # (B, 1, 1, S), True = may attend
        # With a cache the new queries are the last positions and may see every cached key.
        causal = is_causal and (cache is None or k.size(2) == T)
        if causal and mask is not None:
            mask = mask & torch.ones(T, k.size(2), dtype=torch.bool, device=x.device).tril()
            causal = False
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal,
                                           dropout_p=self.dropout if self.training else 0.0)
        return self.out_proj(y.transpose(1, 2).contiguous().view(B, T, C))
