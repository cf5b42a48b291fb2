"""A decoder-only transformer (GPT), readable top to bottom.

Pre-LN blocks, causal self-attention through F.scaled_dot_product_attention (grouped-query as an
option), a GELU (tanh-GELU, ReLU, SwiGLU) MLP, learned (or rotary) positions, optional biases, weight
tying and GPT-2 initialisation with the residual projections scaled by 1/sqrt(2 * n_layer). GPT-2 is
the learned/layernorm/gelu-tanh/bias settings; a Llama is rope/rmsnorm/swiglu without biases. The NanoGPT
speedrun's options: QK-norm, a ReLU² MLP (mlp=relu2), zero-initialised output projections, logit soft-capping.
Runs on its own:

    model = GPT(GPTConfig(vocab_size=65, block_size=64, n_layer=4, n_head=4, n_embd=128))
    logits = model(idx)                     # (B, T) -> (B, T, vocab_size)
    out = model.generate(idx, 100, top_k=20)   # with a key/value cache: one token's work per new token
"""

from __future__ import annotations

import math
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from transformer_lab.models.configs import GPTConfig
from transformer_lab.models.flops import attention_flops, linear_flops
from transformer_lab.models.layers import Attention, FeedForward, RotaryEmbedding, make_norm


class Block(nn.Module):
    """Pre-LN transformer block: x + attn(ln(x)), then x + mlp(ln(x)) (none: attention only), with dropout on each
    branch."""

    def __init__(self, config: GPTConfig, rotary: RotaryEmbedding | None):
        super().__init__()
        C, hidden = config.n_embd, int(config.mlp_ratio * config.n_embd)
        if config.mlp == "swiglu":
            hidden = int(2 * hidden / 3)  # 3 matrices of 2/3 the width keep the plain MLP's parameter count
        hidden = config.d_ff or hidden
        self.ln_1 = make_norm(config.norm, C, config.bias, config.norm_eps)
        self.attn = Attention(
            C,
            config.n_head,
            config.bias,
            config.dropout,
            rotary,
            n_kv_head=config.n_kv_head,
            qkv_bias=config.qkv_bias,
            qk_norm=config.qk_norm,
        )
        attention_only = config.mlp == "none"
        self.ln_2 = None if attention_only else make_norm(config.norm, C, config.bias, config.norm_eps)
        self.mlp = None if attention_only else FeedForward(C, hidden, config.mlp, config.bias)
        self.drop = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor, cache: dict | None = None) -> torch.Tensor:
        x = x + self.drop(self.attn(self.ln_1(x), causal=True, cache=cache))
        return x if self.mlp is None else x + self.drop(self.mlp(self.ln_2(x)))


class GPT(nn.Module):
    architecture = "decoder"  # causal: tokens -> next-token logits at every position
    output_layers = ("lm_head",)  # the layers that give logits (optim.name=muon leaves them to AdamW)
    config_class = GPTConfig

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = config
        rotary = None
        if config.pos_encoding == "rope":
            rotary = RotaryEmbedding(config.n_embd // config.n_head, config.block_size, config.rope_base)
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.block_size, config.n_embd) if config.pos_encoding == "learned" else None
        self.drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(Block(config, rotary) for _ in range(config.n_layer))
        self.ln_f = make_norm(config.norm, config.n_embd, config.bias, config.norm_eps)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        if config.tie_weights:
            self.lm_head.weight = self.wte.weight

        std = config.init_std or config.n_embd**-0.5
        self.apply(partial(self._init_weights, std=std))
        if config.scale_residual_init:
            # GPT-2: residual projections scaled down so the residual stream's variance stays put with depth.
            for name, p in self.named_parameters():
                if name.endswith(("attn.out_proj.weight", "mlp.down.weight")):
                    nn.init.normal_(p, mean=0.0, std=std / math.sqrt(2 * config.n_layer))
        if config.zero_init_projections:
            # The speedrun's: every block starts as the identity (its branches add zero), yet learns (the
            # projections' gradients need only their inputs, which are not zero).
            for block in self.blocks:
                nn.init.zeros_(block.attn.out_proj.weight)
                if block.mlp is not None:
                    nn.init.zeros_(block.mlp.down.weight)

    @staticmethod
    def _init_weights(module: nn.Module, std: float) -> None:
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=std)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=std)

    def num_params(self, non_embedding: bool = True) -> int:
        """Parameter count; position embeddings excluded by default, as in nanoGPT."""
        n = sum(p.numel() for p in self.parameters())
        if non_embedding and self.wpe is not None:
            n -= self.wpe.weight.numel()
        return n

    def forward_flops(self, T: int) -> int:
        """Matmul FLOPs of one forward pass over a sequence of T tokens (see models/flops.py)."""
        return linear_flops(self, T) + self.config.n_layer * attention_flops(self.config.n_embd, T, T)

    def new_cache(self) -> list[dict]:
        """An empty key/value cache, one dict per block, for forward(idx, cache)."""
        return [{} for _ in self.blocks]

    def forward(self, idx: torch.Tensor, cache: list[dict] | None = None) -> torch.Tensor:
        # idx: (B, T) token ids -> logits (B, T, vocab_size). With a cache (from new_cache()), idx holds only
        # the tokens after those already seen, and the cache grows by them.
        B, T = idx.shape
        past = cache[0]["k"].size(2) if cache and cache[0] else 0
        if past + T > self.config.block_size:
            raise ValueError(f"sequence length {past + T} exceeds block_size {self.config.block_size}")
        x = self.wte(idx)  # (B, T, C)
        if self.wpe is not None:
            x = x + self.wpe(torch.arange(past, past + T, device=idx.device))  # (T, C) broadcast over B
        x = self.drop(x)
        for i, block in enumerate(self.blocks):
            x = block(x, cache[i] if cache is not None else None)
        logits = self.lm_head(self.ln_f(x))  # (B, T, V)
        if self.config.logit_softcap is not None:  # bounded to (-c, c), in float32 (tanh saturates in bf16)
            c = self.config.logit_softcap
            logits = c * torch.tanh(logits.float() / c)
        return logits

    @torch.no_grad()
    def generate(
        self,
        idx: torch.Tensor,
        max_new_tokens: int,
        temperature: float = 1.0,
        top_k: int | None = None,
        generator: torch.Generator | None = None,
        use_cache: bool = True,
    ) -> torch.Tensor:
        """Sample max_new_tokens continuations of idx (B, T); temperature 0 means greedy.

        The key/value cache serves while the sequence fits in block_size; past that the window slides and
        every position moves, so the last block_size tokens are recomputed for each new one."""
        cache = self.new_cache() if use_cache else None
        for step in range(max_new_tokens):
            if cache is not None and idx.size(1) <= self.config.block_size:
                logits = self(idx if step == 0 else idx[:, -1:], cache)[:, -1, :]  # (B, V)
            else:
                logits = self(idx[:, -self.config.block_size :])[:, -1, :]
            if temperature == 0:
                next_id = logits.argmax(dim=-1, keepdim=True)
            else:
                logits = logits / temperature
                if top_k is not None:
                    kth = torch.topk(logits, min(top_k, logits.size(-1))).values[:, [-1]]
                    logits = logits.masked_fill(logits < kth, float("-inf"))
                probs = F.softmax(logits, dim=-1)
                next_id = torch.multinomial(probs, num_samples=1, generator=generator)  # (B, 1)
            idx = torch.cat([idx, next_id], dim=1)
        return idx
