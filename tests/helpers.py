"""Callbacks that tests add to a real `train.py` run (`PYTHONPATH=tests`, `+callbacks.NAME._target_=helpers...`)."""

import hashlib
import os
import signal

import lightning as L


class BatchLog(L.Callback):
    """Appends `step<TAB>hash of the batch` for every trained batch, across restarts of the run."""

    def __init__(self, path: str):
        self.path = path

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        digest = hashlib.sha1(batch[0].numpy().tobytes() + batch[1].numpy().tobytes()).hexdigest()[:16]
        with open(self.path, "a") as f:
            f.write(f"{trainer.global_step}\t{digest}\n")


class KillAt(L.Callback):
    """SIGKILLs its own process after step `step`, like a crash or an out-of-memory kill."""

    def __init__(self, step: int, signum: str = "SIGKILL"):
        self.step, self.signum = step, getattr(signal, signum)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step == self.step:
            os.kill(os.getpid(), self.signum)
