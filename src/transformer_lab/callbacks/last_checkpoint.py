"""checkpoints/last.ckpt every N steps and when training ends."""

from __future__ import annotations

from lightning.pytorch.callbacks import ModelCheckpoint


class LastCheckpoint(ModelCheckpoint):
    """ModelCheckpoint(save_last=True, every_n_train_steps=N) that also writes last.ckpt when training ends.
    Lightning's writes it then only if it never wrote it before: a 150-step run with N = 100 would keep
    step 100's weights in last.ckpt, and resuming or evaluating it would miss the last 50 steps."""

    def on_train_end(self, trainer, pl_module) -> None:
        if self.save_last and not trainer.fast_dev_run and self._last_global_step_saved != trainer.global_step:
            self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))
