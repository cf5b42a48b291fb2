"""An exponential moving average of the weights: Lightning's EMAWeightAveraging, tested on the average."""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import EMAWeightAveraging as LightningEMA
from lightning.pytorch.trainer.states import TrainerFn


class EMAWeightAveraging(LightningEMA):
    """Lightning's EMA, except when a checkpoint is loaded to test, validate or predict (train.py's
    `trainer.test(ckpt_path=best)`): its saved weights, the average, stay in the model. Lightning's callback
    puts back the trained weights the checkpoint keeps beside them, which is right only for resuming a fit,
    and the test then scored weights that no validation had chosen."""

    def on_load_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        if trainer.state.fn == TrainerFn.FITTING:
            super().on_load_checkpoint(trainer, pl_module, checkpoint)
