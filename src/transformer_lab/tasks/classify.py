"""Sequence classification (BERT-style): cross-entropy on the pooled logits; loss and accuracy."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torchmetrics import MeanMetric
from torchmetrics.classification import MulticlassAccuracy

from transformer_lab.tasks.base import Task
from transformer_lab.tasks.configs import ClassifyConfig


class ClassificationTask(Task):
    architecture, layout = "encoder", "classify"  # what it trains, and the batches it reads (data/base.py)
    config_class = ClassifyConfig  # its settings: the task.* keys

    def __init__(
        self, model: torch.nn.Module, optim: dict, decode: Callable[[Any], str], checkpoint_meta: dict | None = None
    ):
        super().__init__(model, optim, checkpoint_meta)
        self.decode = decode
        n_classes = model.config.n_classes
        self.val_loss = MeanMetric()
        self.val_acc = MulticlassAccuracy(n_classes, average="micro")

    @classmethod
    def settings(cls, cfg, datamodule) -> dict:
        return {"decode": datamodule.decode}

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.model(idx)

    def training_step(self, batch, batch_idx):
        x, y = batch
        logits = self.model(x)
        if self.logging_step():
            self.log("train/acc", (logits.argmax(-1) == y).float().mean())
        return self.guarded(F.cross_entropy(logits, y), len(y))

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self.model(x)
        self.val_loss.update(F.cross_entropy(logits, y), weight=len(y))
        self.val_acc.update(logits, y)
        if batch_idx == 0 and not self.trainer.sanity_checking:
            guesses = logits.argmax(-1)
            lines = [
                f"{self.decode(x[i].tolist())} {guesses[i].item()}   "
                f"({'ok' if guesses[i] == y[i] else f'expected {y[i].item()}'})"
                for i in range(min(4, len(y)))
            ]
            text = "\n".join(lines)
            self.show_examples("examples", text, "examples", ["step", "text"], [[self.global_step, text]])

    def on_validation_epoch_end(self):
        self.log_evaluation("val", self.val_loss, self.val_acc)
