"""Matmul FLOPs of a forward pass, from a model's shapes (for throughput/mfu).

The usual convention (Kaplan et al. 2020, PaLM's MFU, nanoGPT): a multiply-add is 2 FLOPs, only matrix
products count (norms, softmax and embeddings lookups are noise next to them), attention counts all T x S
scores even where a causal mask makes half of them unused, and a training step costs 3 forward passes.
"""

from __future__ import annotations

from torch import nn


def linear_flops(module: nn.Module, tokens: int) -> int:
    """Every nn.Linear in `module` applied to `tokens` vectors."""
    return 2 * tokens * sum(m.in_features * m.out_features for m in module.modules() if isinstance(m, nn.Linear))


def attention_flops(width: int, queries: int, keys: int) -> int:
    """Scores q·kᵀ and the weighted sum of values, over all heads: 2 products of queries x keys x width
    (heads x head width: n_embd, unless a model sets the head width apart)."""
    return 2 * 2 * queries * keys * width
