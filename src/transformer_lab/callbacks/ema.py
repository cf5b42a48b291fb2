"""An exponential moving average of the weights: Lightning's EMAWeightAveraging, tested on the average."""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import EMAWeightAveraging as LightningEMA
from lightning.pytorch.trainer.states import TrainerFn

from transformer_lab.choices import check_number


class EMAWeightAveraging(LightningEMA):
    """Lightning's EMA, except when a checkpoint is loaded to test, validate or predict (train.py's
    `trainer.test(ckpt_path=best)`): its saved weights, the average, stay in the model. Lightning's callback
    puts back the trained weights the checkpoint keeps beside them, which is right only for resuming a fit,
    and the test then scored weights that no validation had chosen."""

    def __init__(
        self,
        *args,
        decay: float = 0.999,
        update_every_n_steps: int = 1,
        update_starting_at_step: int | None = None,
        **kwargs,
    ):
        # (Lightning's own check of decay lets nan through; these two it takes as they come: 0 steps, a
        # ZeroDivisionError mid-run)
        check_number("decay", decay, False, "[0, 1]")
        check_number("update_every_n_steps", update_every_n_steps, True, "[1, inf)")
        check_number("update_starting_at_step", update_starting_at_step, True, "[0, inf)", nullable=True)
        super().__init__(
            *args,
            decay=decay,
            update_every_n_steps=update_every_n_steps,
            update_starting_at_step=update_starting_at_step,
            **kwargs,
        )

    def on_load_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        if trainer.state.fn == TrainerFn.FITTING:
            super().on_load_checkpoint(trainer, pl_module, checkpoint)
