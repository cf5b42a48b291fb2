"""Every metric at every step it is logged, one JSON object per line in the run's metrics.jsonl.

A local record that needs no logger or server: the compare command and the experiment plots read it.
A resumed run first drops the lines of steps after its checkpoint, which the interrupted run had
written but the resumed run does again.
"""

from __future__ import annotations

import json
from pathlib import Path

import lightning as L
import torch


def read_history(path: Path) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


class History(L.Callback):
    def __init__(self, path: Path):
        self.path = Path(path)

    def on_train_start(self, trainer, pl_module):
        # Not on_fit_start: Lightning restores a checkpoint's step count only after that hook.
        if not trainer.is_global_zero:
            return
        if trainer.global_step == 0 or not self.path.exists():  # a new run (or a new file)
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_text("")
            return
        kept = [r for r in read_history(self.path) if r["step"] <= trainer.global_step]
        self.path.write_text("".join(json.dumps(r) + "\n" for r in kept))

    def _append(self, trainer, prefixes: tuple[str, ...]) -> None:
        if not trainer.is_global_zero:
            return
        record = {name: float(v.item() if isinstance(v, torch.Tensor) else v)
                  for name, v in trainer.callback_metrics.items() if name.startswith(prefixes)}
        if record:
            with open(self.path, "a") as f:
                f.write(json.dumps({"step": trainer.global_step, **record}) + "\n")

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step % trainer.log_every_n_steps == 0:  # the steps the task logs
            self._append(trainer, ("train/", "throughput/"))

    def on_validation_end(self, trainer, pl_module):
        if not trainer.sanity_checking:
            self._append(trainer, ("val/",))

    def on_test_end(self, trainer, pl_module):
        self._append(trainer, ("test/",))
