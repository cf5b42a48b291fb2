"""checkpoints/last.ckpt every N steps and when training ends, never holding a step whose validation has not run."""

from __future__ import annotations

import os
from pathlib import Path

from lightning.pytorch.callbacks import ModelCheckpoint

from transformer_lab.store.atomic import note_written


class LastCheckpoint(ModelCheckpoint):
    """ModelCheckpoint(save_last=True, every_n_train_steps=N): checkpoints/last.ckpt, what `ckpt_path=last` resumes.

    Lightning resumes a checkpoint saved as a step ended past that step's validation, taking it for done. So the
    state of every N-th step waits in last.pending.ckpt until it is known whether the step is validated: if not,
    it becomes last.ckpt as the next step starts; if so, the state after the validation (the one that recorded it:
    metrics.jsonl's line, the best checkpoint's choice) is saved as last.ckpt instead. A run stopped inside a
    validation (Ctrl-C, kill -9) resumes from the save before and validates that step again, as the
    uninterrupted run did. Also written when training ends (Lightning's writes it then only if it never wrote it
    before: a 150-step run with N = 100 would keep step 100's weights, and resuming it would miss 50 steps)."""

    def __init__(self, *args, every_n_train_steps: int | None = None, **kwargs):
        super().__init__(*args, every_n_train_steps=every_n_train_steps, **kwargs)
        self.every_n = every_n_train_steps or 0
        self.pending_step: int | None = None  # the step last.pending.ckpt holds
        self.settled_step: int | None = None  # the step a pending save made last.ckpt of
        self.ending = False  # saving as training ends (on_save_checkpoint)

    @property
    def last_path(self) -> Path:
        return Path(self.dirpath) / f"{self.CHECKPOINT_NAME_LAST}{self.FILE_EXTENSION}"

    @property
    def pending_path(self) -> Path:
        return self.last_path.with_suffix(f".pending{self.FILE_EXTENSION}")

    def on_fit_start(self, trainer, pl_module) -> None:
        self.pending_step = self.settled_step = None
        if trainer.is_global_zero:  # (a killed run's: its step's validation never ran, or it was never settled)
            self.pending_path.unlink(missing_ok=True)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step = trainer.global_step
        skip = self._should_skip_saving_checkpoint(trainer)  # (Lightning's own: debug=fast, sanity check, saved)
        if (
            not skip
            and self.every_n
            and step % self.every_n == 0
            and step not in (self.pending_step, self.settled_step)
        ):
            trainer.save_checkpoint(self.pending_path, weights_only=False)  # (the whole state; a step: once)
            self.pending_step = step

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self._settle(trainer)  # (the pending step was not validated: it is the last)

    def on_validation_end(self, trainer, pl_module) -> None:
        if self.pending_step == trainer.global_step and not trainer.sanity_checking:
            self._drop(trainer)  # (the step's state is the one after its validation)
            self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))
        super().on_validation_end(trainer, pl_module)

    def on_train_end(self, trainer, pl_module) -> None:
        self._settle(trainer)
        saved = (self._last_global_step_saved, self.settled_step)
        if self.save_last and not trainer.fast_dev_run and trainer.global_step not in saved:
            self.ending = True
            try:
                self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))
            finally:
                self.ending = False

    def on_save_checkpoint(self, trainer, pl_module, checkpoint) -> None:
        # Saved as training ends, Lightning's count of the batches that stepped (its loggers' cadence) is one past
        # what its resume of that state counts from: every logging step after the resume fell off
        # log_every_n_steps, and no training metrics reached CSV or W&B (a stranger's finding). Measured, not
        # derived: a save at a SIGTERM resumes in step (tests/e2e/test_wandb.py), this one one ahead. Lightning's loop
        # state depends on where in a step it is saved: https://github.com/Lightning-AI/pytorch-lightning/issues/18060
        # (pinned by tests/unit/test_resume.py's resumed-run logging test).
        if self.ending and "loops" in checkpoint:
            checkpoint["loops"]["fit_loop"]["epoch_loop.state_dict"]["_batches_that_stepped"] -= 1

    def on_exception(self, trainer, pl_module, exception) -> None:
        super().on_exception(trainer, pl_module, exception)
        self._drop(trainer)  # (stopped inside the step's validation, or before it was settled: the save before)

    def _settle(self, trainer) -> None:
        if self.pending_step is None:
            return
        if trainer.is_global_zero:
            os.replace(self.pending_path, self.last_path)
            note_written(self.last_path)
        self.settled_step, self.pending_step = self.pending_step, None
        self.last_model_path = str(self.last_path)

    def _drop(self, trainer) -> None:
        if trainer.is_global_zero:
            self.pending_path.unlink(missing_ok=True)
        self.pending_step = None
