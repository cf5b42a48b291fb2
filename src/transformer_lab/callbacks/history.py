"""Every metric at every step it is logged, one JSON object per line in the run's metrics.jsonl, and
the same step numbers in every logger.

A local record that needs no logger or server: the compare command and the experiment plots read it.
A resumed run first drops the lines of steps after its checkpoint, which the interrupted run had
written but the resumed run does again.
"""

from __future__ import annotations

import json
from pathlib import Path

import lightning as L
import torch

from transformer_lab.store.atomic import atomic_write
from transformer_lab.store.files import read_jsonl
from transformer_lab.store.history import last_step


class History(L.Callback):
    def __init__(self, path: Path):
        self.path = Path(path)

    def on_train_start(self, trainer, pl_module):
        # Not on_fit_start: Lightning restores a checkpoint's step count only after that hook.
        if not trainer.is_global_zero:
            return
        new = trainer.global_step == 0 or not self.path.exists()  # a new run (or a new file)
        kept = [] if new else [r for r in read_jsonl(self.path) if r["step"] <= trainer.global_step]
        with atomic_write(self.path, "w") as f:  # (then appended to, a line at a time: a torn last line is dropped)
            f.write("".join(json.dumps(r) + "\n" for r in kept))

    def _append(self, trainer, prefixes: tuple[str, ...]) -> None:
        if not trainer.is_global_zero:
            return
        record = {
            name: float(v.item() if isinstance(v, torch.Tensor) else v)
            for name, v in trainer.callback_metrics.items()
            if name.startswith(prefixes)
        }
        if record:
            with open(self.path, "a") as f:
                f.write(json.dumps({"step": trainer.global_step, **record}) + "\n")

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step % trainer.log_every_n_steps == 0:  # the steps the task logs
            self._append(trainer, ("train/", "throughput/"))
        elif last_step(trainer):  # logged by the task too; throughput only at its own interval
            self._append(trainer, ("train/",))

    def on_validation_end(self, trainer, pl_module):
        if not trainer.sanity_checking:
            self._append(trainer, ("val/", "progress/"))  # (progress/: measures taken at validation)

    def on_test_end(self, trainer, pl_module):
        self._append(trainer, ("test/",))


class StepAxis(L.Callback):
    """Steps are counted once, as optimizer steps done (trainer.global_step), in metrics.jsonl, summary.json
    and every Lightning logger (CSV's `step`, W&B's `trainer/global_step`), which would otherwise write a
    step's metrics under the count before it: logging `step` sets the step Lightning writes them at.

    And a run records its last step whatever max_steps is: the task logs that step's training metrics,
    and a run that has not validated yet validates there (Lightning does when asked to stop), so
    summary.json has the loss and validation metrics and best.ckpt exists after the shortest run."""

    def __init__(self):
        self.validated = False

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        step, last = trainer.global_step, last_step(trainer)
        if last and not self.validated:  # stopping makes Lightning write this step's metrics and validate
            trainer.should_stop = True
        if step % trainer.log_every_n_steps == 0 or trainer.should_stop:  # Lightning writes this step's metrics
            pl_module.log("step", float(step))
        elif last:
            metrics = {
                name: float(value) for name, value in trainer.callback_metrics.items() if name.startswith("train/")
            }
            for logger in trainer.loggers:
                logger.log_metrics(metrics, step)

    def on_validation_epoch_end(self, trainer, pl_module):
        if not trainer.sanity_checking:
            self.validated = True
            pl_module.log("step", float(trainer.global_step))

    def on_test_epoch_end(self, trainer, pl_module):
        pl_module.log("step", float(trainer.global_step))
