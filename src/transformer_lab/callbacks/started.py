"""A run's directory settles when training starts: what overwrite=true set aside goes, a resume's records stay."""

from __future__ import annotations

from pathlib import Path

import lightning as L

from transformer_lab.store.rundir import started


class TrainingStarted(L.Callback):
    """Tells store/rundir.py that training started: the data was read, the model built and the checkpoint, if any,
    loaded. Until then a failure or a stop puts the directory back as it was claimed (main.py, rundir.unwind):
    an earlier run set aside by overwrite=true returns, a failed resume's train.log lines and record go."""

    def __init__(self, run_dir: str | Path):
        self.run_dir = Path(run_dir)

    def on_train_start(self, trainer, pl_module):
        if trainer.is_global_zero:
            started(self.run_dir)
