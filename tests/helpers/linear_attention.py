"""A user's own language model with causal linear attention (Katharopoulos et al. 2020, "Transformers are RNNs"),
one file as a user writes it: a plain nn.Module, nothing of transformer_lab but the attention protocol's two
lines (docs/extending.md, "Draw your own attention", shows `CausalLinearAttention` from here).

Linear attention has no softmax matrix: it keeps running sums of φ(k_s) v_sᵀ and φ(k_s) and reads them with
φ(q_t), in time linear in the length. Yet each output is still a weighted mean of the values,
y_t = Σ_{s≤t} a_ts v_s with a_ts = φ(q_t)·φ(k_s) / Σ_{s'≤t} φ(q_t)·φ(k_s'), and those weights are what it gives
to be drawn (`capture_attention`). Trained by train.py through tests/helpers/conf/model/linear_attention.yaml."""

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class LinearGPTConfig:
    vocab_size: int = 0  # the data decides these two
    block_size: int = 0
    n_layer: int = 2
    n_head: int = 2
    n_embd: int = 32


def feature_map(x: torch.Tensor) -> torch.Tensor:
    """φ(x) = elu(x) + 1: positive, so every weight a_ts is, and each query's weights sum to 1."""
    return F.elu(x) + 1


class CausalLinearAttention(nn.Module):
    def __init__(self, n_embd: int, n_head: int):
        super().__init__()
        self.n_head, self.head_dim = n_head, n_embd // n_head
        self.qkv = nn.Linear(n_embd, 3 * n_embd)
        self.proj = nn.Linear(n_embd, n_embd)
        self.capture = None  # set while the attention is drawn

    def capture_attention(self, capture):
        """The attention protocol (transformer_lab.models.layers.DrawsAttention): while `capture` is not None,
        each forward call adds its weights to it."""
        self.capture = capture

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = (t.view(B, T, self.n_head, self.head_dim).transpose(1, 2) for t in self.qkv(x).split(C, dim=2))
        q, k = feature_map(q), feature_map(k)  # (B, nh, T, hd)
        kv = torch.einsum("bhsd,bhse->bhsde", k, v).cumsum(2)  # (B, nh, T, hd, hd): Σ_{s≤t} φ(k_s) v_sᵀ
        z = k.cumsum(2)  # (B, nh, T, hd): Σ_{s≤t} φ(k_s)
        y = torch.einsum("bhtd,bhtde->bhte", q, kv) / torch.einsum("bhtd,bhtd->bht", q, z).unsqueeze(-1)
        if self.capture is not None:
            self.capture.add(self.weights(q, k))
        return self.proj(y.transpose(1, 2).reshape(B, T, C))

    @staticmethod
    def weights(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        """a_ts, the weight of value s in output t: (B, nh, T, T), zero above the diagonal, each row summing to 1."""
        scores = (q @ k.transpose(-2, -1)).tril()  # φ(q_t)·φ(k_s), the future's zeroed
        return scores / scores.sum(-1, keepdim=True)


class Block(nn.Module):
    def __init__(self, n_embd: int, n_head: int):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(n_embd), nn.LayerNorm(n_embd)
        self.attn = CausalLinearAttention(n_embd, n_head)
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(), nn.Linear(4 * n_embd, n_embd))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class LinearGPT(nn.Module):
    architecture = "decoder"  # tokens -> next-token logits at every position
    config_class = LinearGPTConfig

    def __init__(self, config: LinearGPTConfig):
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.block_size, config.n_embd)
        self.blocks = nn.ModuleList(Block(config.n_embd, config.n_head) for _ in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.n_embd)
        self.head = nn.Linear(config.n_embd, config.vocab_size, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.wte(idx) + self.wpe(torch.arange(idx.size(1), device=idx.device))  # (B, T, C)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))  # (B, T, V)

    def forward_flops(self, T: int) -> int:
        return 2 * T * sum(p.numel() for p in self.parameters())
