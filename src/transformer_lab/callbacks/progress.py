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
    show no total then. (A private method: tests/unit/test_upstream.py fails once Lightning's is right.)"""

    def _get_train_description(self, current_epoch: int) -> str:
        if self.trainer.max_epochs is None or self.trainer.max_epochs >= 0:
            return super()._get_train_description(current_epoch)
        # Padded like Lightning's, so the bar does not flicker against "Validation".
        return f"Epoch {current_epoch}".ljust(len(self.validation_description))

    @property
    def total_train_batches(self) -> int | float:
        """Lightning's total for step-limited runs is the steps left (max_steps - global_step), while the bar
        counts the epoch's batches from its start: a resumed run read 25/15. The total here is where the epoch
        will stop counted the same way, the batches it had done before the resume included."""
        trainer = self.trainer
        if trainer.max_epochs == -1 and trainer.max_steps is not None and trainer.max_steps > 0:
            done = trainer.fit_loop.epoch_loop.batch_progress.current.ready  # this epoch's, a resume's included
            left = (trainer.max_steps - trainer.global_step) * trainer.accumulate_grad_batches
            return min(trainer.num_training_batches, done + left)
        return super().total_train_batches

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
