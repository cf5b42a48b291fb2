"""Callbacks that tests add to a real `train.py` run (`PYTHONPATH=tests`, `+callbacks.NAME._target_=helpers.callbacks...`)."""

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


class SleepAt(L.Callback):
    """Sleeps `seconds` after step `step`: a window in which a second process meets this running run."""

    def __init__(self, step: int, seconds: float):
        self.step, self.seconds = step, seconds

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step == self.step:
            import time

            time.sleep(self.seconds)


class SignalIn(L.Callback):
    """Sends its own process `signum` at the first batch of the sanity check or of the test, or as training starts
    (after a resume's checkpoint is restored) (`stage`: sanity, test, train)."""

    def __init__(self, stage: str, signum: str = "SIGINT"):
        self.stage, self.signum = stage, getattr(signal, signum)

    def on_train_start(self, trainer, pl_module):
        if self.stage == "train":
            os.kill(os.getpid(), self.signum)

    def on_validation_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0):
        if self.stage == "sanity" and trainer.sanity_checking and batch_idx == 0:
            os.kill(os.getpid(), self.signum)

    def on_test_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0):
        if self.stage == "test" and batch_idx == 0:
            os.kill(os.getpid(), self.signum)


class FailAtTrainStart(L.Callback):
    """Raises where training starts (after a checkpoint is restored, before any step): a crashed resume."""

    def on_train_start(self, trainer, pl_module):
        raise RuntimeError("a crash before the first step")


class SleepAtSetup(L.Callback):
    """Sleeps `seconds` in the run's setup, before training starts: a window to stop a run that has claimed
    its directory (overwrite=true's earlier run set aside) but not trained."""

    def __init__(self, seconds: float):
        self.seconds = seconds

    def setup(self, trainer, pl_module, stage):
        import time

        time.sleep(self.seconds)


class CtrlCTwiceAt(L.Callback):
    """Presses Ctrl-C after step `step`, and again while the run is stopping for it (in Lightning's handling of
    the stop, outside its own handling of a KeyboardInterrupt): the second Ctrl-C stops it at once. Once a run
    directory (`pressed`, a file it writes): its resume goes on."""

    def __init__(self, step: int, pressed: str):
        self.step, self.pressed = step, pressed

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step == self.step and not os.path.exists(self.pressed):
            open(self.pressed, "w").close()
            os.kill(os.getpid(), signal.SIGINT)

    def on_exception(self, trainer, pl_module, exception):
        os.kill(os.getpid(), signal.SIGINT)


class SignalInValidationAt(L.Callback):
    """Sends its own process `signum` inside the validation after step `step` (its first batch), once a run
    directory (`sent`, a file it writes): the resumed run goes on."""

    def __init__(self, step: int, sent: str, signum: str = "SIGINT"):
        self.step, self.sent, self.signum = step, sent, getattr(signal, signum)

    def on_validation_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0):
        if trainer.global_step == self.step and not trainer.sanity_checking and not os.path.exists(self.sent):
            open(self.sent, "w").close()
            os.kill(os.getpid(), self.signum)
