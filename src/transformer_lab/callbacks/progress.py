"""Lightning's rich progress bar without the "Epoch 0/-2" it prints when epochs are unlimited or the logger's
version (`v_num`), and reading the metrics only when they change; its model summary in one line."""

from __future__ import annotations

import logging

from lightning.pytorch.callbacks import ModelSummary as LightningModelSummary
from lightning.pytorch.callbacks import RichProgressBar as LightningRichProgressBar
from lightning.pytorch.utilities.model_summary import get_human_readable_count

from transformer_lab.callbacks.history import metrics_written

log = logging.getLogger(__name__)


class RichProgressBar(LightningRichProgressBar):
    """Runs here train for `trainer.max_steps` with `max_epochs=-1`, which Lightning 2.6's bar shows as a
    total of -2 epochs (fixed upstream in Lightning PR #21924, not yet released): show no total then."""

    def _get_train_description(self, current_epoch: int) -> str:
        if self.trainer.max_epochs is None or self.trainer.max_epochs >= 0:
            return super()._get_train_description(current_epoch)
        # Padded like Lightning's, so the bar does not flicker against "Validation".
        return f"Epoch {current_epoch}".ljust(len(self.validation_description))

    def _update_metrics(self, trainer, pl_module) -> None:
        # The training metrics change only on the steps that are written; reading them again at every other
        # step cost 0.2% of a step of the CPU preset.
        if trainer.training and not metrics_written(trainer, trainer.global_step):
            return
        super()._update_metrics(trainer, pl_module)

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
