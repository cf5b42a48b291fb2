"""Sequence classification (BERT-style): cross-entropy on the pooled logits; accuracy is the metric its YAML
names (AnswerAccuracy)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torchmetrics import MeanMetric

from transformer_lab.tasks.base import Task
from transformer_lab.tasks.configs import ClassifyConfig


class ClassificationTask(Task):
    architecture = "encoder"  # the network it trains
    config_class = ClassifyConfig  # its settings: the task.* keys

    def __init__(self, model: torch.nn.Module, optim: dict, **kwargs):
        super().__init__(model, optim, **kwargs)
        self.val_loss = MeanMetric()

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.model(idx)

    def training_step(self, batch, batch_idx):
        x, y = batch
        logits = self.model(x)
        self.metric.train_step(self, batch, logits)
        return self.guarded(F.cross_entropy(logits, y), len(y))

    def answers(self, batch, logits):
        """(inputs, predicted class, expected class) (AnswerAccuracy)."""
        return batch[0], logits.argmax(-1), batch[1]

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self.model(x)
        self.val_loss.update(F.cross_entropy(logits, y), weight=len(y))
        self.metric.step(self, batch, logits)

    def on_validation_epoch_end(self):
        self.log_evaluation("val", self.val_loss)
