"""Lightning's rich progress bar, without the "Epoch 0/-2" it prints when epochs are unlimited."""

from __future__ import annotations

from lightning.pytorch.callbacks import RichProgressBar as LightningRichProgressBar


class RichProgressBar(LightningRichProgressBar):
    """Runs here train for `trainer.max_steps` with `max_epochs=-1`, which Lightning 2.6's bar shows as a
    total of -2 epochs (fixed upstream in Lightning PR #21924, not yet released): show no total then."""

    def _get_train_description(self, current_epoch: int) -> str:
        if self.trainer.max_epochs is None or self.trainer.max_epochs >= 0:
            return super()._get_train_description(current_epoch)
        # Padded like Lightning's, so the bar does not flicker against "Validation".
        return f"Epoch {current_epoch}".ljust(len(self.validation_description))
