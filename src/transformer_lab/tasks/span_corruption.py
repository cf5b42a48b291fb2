"""T5-style denoising: predict the dropped spans (the target) from the corrupted input, teacher-forced;
target-token loss and accuracy, and greedy fills of a few validation windows."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torchmetrics import MeanMetric
from torchmetrics.classification import MulticlassAccuracy

from transformer_lab.batching.span_corruption import fill_spans
from transformer_lab.tasks.base import Task
from transformer_lab.tasks.configs import SpanCorruptionConfig
from transformer_lab.tasks.decoding import fill_spans_greedy


class SpanCorruptionTask(Task):
    architecture = "encoder-decoder"  # the network it trains
    config_class = SpanCorruptionConfig  # its settings: the task.* keys

    def __init__(self, model: torch.nn.Module, optim: dict, datamodule, n_examples: int = 2, **kwargs):
        super().__init__(model, optim, **kwargs)
        self.pad_id, self.eos_id = datamodule.pad_id, datamodule.eos_id
        self.first_sentinel, self.decode = datamodule.first_sentinel, datamodule.decode
        self.n_examples = n_examples
        self.val_loss = MeanMetric()
        self.val_acc = MulticlassAccuracy(model.config.vocab_size, average="micro", ignore_index=self.pad_id)

    @classmethod
    def settings(cls, cfg, datamodule) -> dict:
        return {"datamodule": datamodule}

    def batch_tokens(self, batch) -> int:
        return batch[0].numel() + batch[1].numel()

    def batch_flops(self, batch) -> int:
        inputs, targets = batch[:2]
        return 3 * inputs.size(0) * self.model.forward_flops(inputs.size(1), targets.size(1))

    def forward(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        # The decoder reads the target shifted right behind a start token (T5: the pad id).
        start = torch.full_like(targets[:, :1], self.pad_id)
        return self.model(inputs, torch.cat([start, targets[:, :-1]], 1))  # (B, T, V)

    def training_step(self, batch, batch_idx):
        inputs, targets = batch
        logits = self(inputs, targets)
        if self.logging_step():
            self.log("train/acc", (logits.argmax(-1) == targets).float().mean())
        loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=self.pad_id)
        return self.guarded(loss, (targets != self.pad_id).sum())

    def validation_step(self, batch, batch_idx):
        inputs, targets = batch
        logits = self(inputs, targets)
        self.val_loss.update(
            F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=self.pad_id),
            weight=(targets != self.pad_id).sum(),
        )
        self.val_acc.update(logits.flatten(0, 1), targets.flatten())
        self.metric.step(self, batch, logits)
        if batch_idx == 0 and not self.trainer.sanity_checking:
            self._examples(inputs[: self.n_examples], targets[: self.n_examples])

    def on_validation_epoch_end(self):
        self.log_evaluation("val", self.val_loss, self.val_acc)

    def _examples(self, inputs: torch.Tensor, targets: torch.Tensor) -> None:
        fills = fill_spans_greedy(self.model, inputs, targets.size(1), self.pad_id, self.eos_id)
        rows, lines = [], []
        for x, y, guess in zip(inputs.tolist(), targets.tolist(), fills):
            original = self.decode(fill_spans(x, y, self.first_sentinel, self.eos_id))
            row = [self.global_step, original, self.decode(x), self.decode(y), self.decode(guess)]
            rows.append(row)
            lines.append(
                f"  original:  {row[1]!r}\n  corrupted: {row[2]!r}\n  target:    {row[3]!r}\n  predicted: {row[4]!r}"
            )
        self.show_examples(
            "span fills", "\n".join(lines), "span_fills", ["step", "original", "corrupted", "target", "predicted"], rows
        )
