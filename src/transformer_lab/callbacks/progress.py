"""Lightning's rich progress bar without the "Epoch 0/-2" it prints when epochs are unlimited or the logger's
version (`v_num`); its model summary in one line."""

from __future__ import annotations

import logging

from lightning.pytorch.callbacks import ModelSummary as LightningModelSummary
from lightning.pytorch.callbacks import RichProgressBar as LightningRichProgressBar
from lightning.pytorch.utilities.model_summary import get_human_readable_count

log = logging.getLogger(__name__)


class RichProgressBar(LightningRichProgressBar):
    """Runs here train for `trainer.max_steps` with `max_epochs=-1`, which Lightning 2.6's bar shows as a
    total of -2 epochs (fixed upstream, not yet released: https://github.com/Lightning-AI/pytorch-lightning/pull/21924):
    show no total then. (A private method: tests/test_upstream.py fails once Lightning's is right.)"""

    def _get_train_description(self, current_epoch: int) -> str:
        if self.trainer.max_epochs is None or self.trainer.max_epochs >= 0:
            return super()._get_train_description(current_epoch)
        # Padded like Lightning's, so the bar does not flicker against "Validation".
        return f"Epoch {current_epoch}".ljust(len(self.validation_description))

    def get_metrics(self, trainer, pl_module) -> dict:
        metrics = super().get_metrics(trainer, pl_module)
        metrics.pop("v_num", None)  # the logger's run id: in the run directory, not news at every step
        return metrics


class ModelSummary(LightningModelSummary):
    """The parameter counts in one line, instead of Lightning's table of the task's modules, whose FLOPs
    column reads 0 for a model without an example input (summary.json has flops_per_token)."""

    @staticmethod
    def summarize(summary_data, total_parameters: int, trainable_parameters: int, model_size: float, *_, **__) -> None:
        log.info(
            "model: %s parameters (%s trainable), %.1f MB",
            get_human_readable_count(total_parameters),
            get_human_readable_count(trainable_parameters),
            model_size,
        )
