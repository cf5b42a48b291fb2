"""A run's directory settles at its first step: what overwrite=true set aside goes, a resume's records stay."""

from __future__ import annotations

from pathlib import Path

import lightning as L

from transformer_lab.store.rundir import started


class TrainingStarted(L.Callback):
    """Tells store/rundir.py that the run trained its first step (a resume's first since its checkpoint). Until
    then a failure or a stop puts the directory back as it was claimed (main.py, rundir.unwind): an earlier run
    set aside by overwrite=true returns, a resume's train.log lines and record go."""

    def __init__(self, run_dir: str | Path):
        self.run_dir, self.settled = Path(run_dir), False

    def on_train_batch_end(self, trainer, *args):
        if trainer.is_global_zero and not self.settled:
            started(self.run_dir)
            self.settled = True
