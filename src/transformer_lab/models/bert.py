"""A BERT-style encoder (Devlin et al. 2019), readable top to bottom: a classifier, or a masked LM.

Token + learned position embeddings (LayerNorm, dropout), a bidirectional encoder with a padding
mask (post-LN layers as in BERT, pre-LN as an option; the layers are nn.TransformerEncoderLayer's
computation on SDPA). A classifier (n_classes set) pools the first ([CLS]) position through BERT's tanh
pooler, or the mean over real tokens, into a linear head. A masked LM (n_classes None: BERT's
pretraining) predicts every position's token through BERT's head: a GELU layer, LayerNorm, and the
token embedding's transpose plus a bias. The encoder's weights have the same names in both, so a masked
LM's encoder starts a classifier. Runs on its own:

    model = Bert(BertConfig(vocab_size=120, n_classes=113, n_layer=2, n_head=4, n_embd=128))
    logits = model(idx)              # (B, T) -> (B, n_classes); idx[:, 0] is [CLS], pad_id pads
    mlm = Bert(BertConfig(vocab_size=120, n_layer=2, n_head=4, n_embd=128))
    logits = mlm(idx)                # (B, T) -> (B, T, vocab_size)
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from transformer_lab.models.configs import BertConfig
from transformer_lab.models.encdec import EncoderLayer
from transformer_lab.models.flops import attention_flops, linear_flops


class MaskedLMHead(nn.Module):
    """BERT's: dense + GELU + LayerNorm, then logits from the (tied) token embedding and a bias per token."""

    def __init__(self, C: int, vocab_size: int, bias: bool, eps: float = 1e-12):
        super().__init__()
        self.dense = nn.Linear(C, C)
        self.norm = nn.LayerNorm(C, eps=eps, bias=bias)
        self.bias = nn.Parameter(torch.zeros(vocab_size))

    def forward(self, x: torch.Tensor, embedding: torch.Tensor) -> torch.Tensor:
        # x: (B, T, C), embedding: (V, C) -> (B, T, V)
        return F.linear(self.norm(F.gelu(self.dense(x))), embedding, self.bias)


class Bert(nn.Module):
    architecture = "encoder"  # (B, T) -> (B, n_classes), or (B, T, vocab_size) with n_classes None
    output_layers = ("head",)  # the layers that give logits (optim.name=muon leaves them to AdamW)
    config_class = BertConfig

    def __init__(self, config: BertConfig):
        super().__init__()
        self.config = config
        C = config.n_embd
        self.wte = nn.Embedding(config.vocab_size, C, padding_idx=config.pad_id)
        self.wpe = nn.Embedding(config.block_size, C)
        layer_eps, outer_eps = (config.norm_eps, config.norm_eps) if config.norm_eps else (1e-5, 1e-12)
        self.embed_norm = nn.LayerNorm(C, eps=outer_eps, bias=config.bias)
        self.drop = nn.Dropout(config.dropout)
        self.encoder = nn.ModuleList(
            EncoderLayer(
                C,
                config.n_head,
                config.d_ff or 4 * C,
                config.dropout,
                config.bias,
                config.norm_first,
                activation="gelu",
                eps=layer_eps,
            )
            for _ in range(config.n_layer)
        )
        self.final_norm = nn.LayerNorm(C, eps=layer_eps, bias=config.bias) if config.norm_first else nn.Identity()
        classify = config.n_classes is not None
        self.pooler = nn.Linear(C, C) if classify and config.pooling == "cls" else None
        self.head = nn.Linear(C, config.n_classes) if classify else None
        self.mlm_head = None if classify else MaskedLMHead(C, config.vocab_size, config.bias, outer_eps)
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        # BERT's initialisation: N(0, 0.02) for every matrix, zero biases, unit norm gains.
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if getattr(module, "bias", None) is not None:
                nn.init.zeros_(module.bias)
            if isinstance(module, nn.Embedding) and module.padding_idx is not None:
                with torch.no_grad():
                    module.weight[module.padding_idx].zero_()

    def encode(self, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """idx: (B, T) -> hidden states (B, T, C) and the padding mask (B, T), True at padding."""
        B, T = idx.shape
        if T > self.config.block_size:
            raise ValueError(f"sequence length {T} exceeds block_size {self.config.block_size}")
        pad = idx == self.config.pad_id
        x = self.drop(self.embed_norm(self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))))
        for layer in self.encoder:
            x = layer(x, pad)
        return self.final_norm(x), pad

    def forward_flops(self, T: int) -> int:
        """Matmul FLOPs of one forward pass over a sequence of T tokens (see models/flops.py); a classifier's
        pooler and head see one vector per sequence, a masked LM's head every position."""
        C = self.config.n_embd
        encoder = linear_flops(self.encoder, T) + self.config.n_layer * attention_flops(C, T, T)
        if self.mlm_head is not None:
            return encoder + linear_flops(self.mlm_head, T) + 2 * T * C * self.config.vocab_size
        return encoder + linear_flops(self.head, 1) + (linear_flops(self.pooler, 1) if self.pooler else 0)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        # idx: (B, T) -> logits (B, n_classes), or a masked LM's (B, T, vocab_size)
        x, pad = self.encode(idx)
        if self.mlm_head is not None:
            return self.mlm_head(x, self.wte.weight)
        if self.pooler is not None:
            pooled = torch.tanh(self.pooler(x[:, 0]))  # (B, C) from [CLS]
        else:
            real = (~pad).unsqueeze(-1).to(x.dtype)  # (B, T, 1)
            pooled = (x * real).sum(1) / real.sum(1).clamp(min=1)
        return self.head(self.drop(pooled))
