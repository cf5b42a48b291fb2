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

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x: (B, nh, T, hd)
        T = x.size(-2)
        x1, x2 = x.chunk(2, dim=-1)
        rotated = torch.cat([-x2, x1], dim=-1)
        return x * self.cos[:T].to(x.dtype) + rotated * self.sin[:T].to(x.dtype)


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

    def forward(self, x: torch.Tensor, is_causal: bool = False,
                attn_mask: torch.Tensor | None = None) -> torch.Tensor:
        # x: (B, T, C); attn_mask: bool, True = may attend, broadcastable to (B, nh, T, T)
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hd)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        if self.rotary is not None:
            q, k = self.rotary(q), self.rotary(k)
        y = F.scaled_dot_product_attention(
            q, k, v, attn_mask=attn_mask, is_causal=is_causal and attn_mask is None,
            dropout_p=self.dropout if self.training else 0.0,
        )  # (B, nh, T, hd)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))
