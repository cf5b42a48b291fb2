"""overwrite=true: the earlier run's files (set aside by rundir.claim) go once this run starts training."""

from __future__ import annotations

from pathlib import Path

import lightning as L

from transformer_lab.rundir import discard_overwritten


class DiscardOverwritten(L.Callback):
    """Removes what `overwrite=true` set aside when training starts: the data was read, the model built and
    the checkpoint, if any, loaded. Until then a failure puts the earlier run back (main.py)."""

    def __init__(self, run_dir: str | Path):
        self.run_dir = Path(run_dir)

    def on_train_start(self, trainer, pl_module):
        if trainer.is_global_zero:
            discard_overwritten(self.run_dir)
