"""BERT's masked-LM pretraining: cross-entropy on the chosen tokens only (batching/masked_lm.py); `val/loss`
and `val/acc`, the share of chosen tokens predicted right; a few validation sequences filled greedily."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torchmetrics import MeanMetric

from transformer_lab.batching.masked_lm import IGNORE
from transformer_lab.tasks.base import Task
from transformer_lab.tasks.configs import MaskedLMConfig


class MaskedLMTask(Task):
    architecture = "encoder"  # the network it trains
    config_class = MaskedLMConfig  # its settings: the task.* keys

    def __init__(
        self,
        model: torch.nn.Module,
        optim: dict,
        decode: Callable[[Any], str],
        n_examples: int = 2,
        **kwargs,
    ):
        super().__init__(model, optim, **kwargs)
        self.decode, self.n_examples = decode, n_examples
        self.val_loss, self.val_acc = MeanMetric(), MeanMetric()

    @classmethod
    def settings(cls, cfg, datamodule) -> dict:
        return {"decode": datamodule.decode}

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.model(idx)  # (B, T, V)

    @staticmethod
    def loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=IGNORE)

    def training_step(self, batch, batch_idx):
        inputs, labels = batch
        logits = self.model(inputs)
        chosen = labels != IGNORE
        if self.logging_step():
            self.log("train/acc", (logits.argmax(-1) == labels)[chosen].float().mean())
        return self.guarded(self.loss(logits, labels), chosen.sum())

    def validation_step(self, batch, batch_idx):
        inputs, labels = batch
        logits = self.model(inputs)
        chosen = labels != IGNORE
        self.val_loss.update(self.loss(logits, labels), weight=chosen.sum())
        self.val_acc.update((logits.argmax(-1) == labels)[chosen].float())
        self.metric.step(self, batch, logits)
        if batch_idx == 0 and not self.trainer.sanity_checking:
            guesses = torch.where(chosen, logits.argmax(-1), inputs)
            lines = [
                f"  masked:    {self.decode(inputs[i].tolist())!r}\n  predicted: {self.decode(guesses[i].tolist())!r}"
                for i in range(min(self.n_examples, len(inputs)))
            ]
            text = "\n".join(lines)
            self.show_examples(
                "masked-token predictions", text, "examples", ["step", "text"], [[self.global_step, text]]
            )

    def on_validation_epoch_end(self):
        self.log_evaluation("val", self.val_loss, self.val_acc)
