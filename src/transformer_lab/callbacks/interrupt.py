"""Ctrl-C and SIGTERM stop a run at the next step boundary with a checkpoint to resume from; in a SLURM job,
so does the signal of its time limit drawing near, and the job is then requeued to resume."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
from pathlib import Path

import lightning as L
from lightning.pytorch.utilities.exceptions import SIGTERMException

log = logging.getLogger(__name__)


class _CtrlCIsNoSigterm(logging.Filter):
    """Lightning logs "Received SIGTERM" for the SIGTERM a first Ctrl-C is turned into; the line said then is
    ours (it names Ctrl-C), so Lightning's is dropped while a Ctrl-C is being handled."""

    by_ctrl_c = False

    def filter(self, record: logging.LogRecord) -> bool:
        return not (self.by_ctrl_c and "Received SIGTERM" in str(record.msg))


_ctrl_c_filter = _CtrlCIsNoSigterm()
logging.getLogger("lightning.pytorch.trainer.connectors.signal_connector").addFilter(_ctrl_c_filter)


class GracefulInterrupt(L.Callback):
    """Lightning already turns SIGTERM into a clean stop after the current step (SIGTERMException). The
    first Ctrl-C is made a SIGTERM too, instead of a KeyboardInterrupt that may land mid-step; a second
    Ctrl-C interrupts at once. On such a stop the run's state is saved to `ckpt_path`, so
    `ckpt_path=last` resumes exactly where it stopped.

    In a SLURM job, SIGUSR2 is the signal hydra/launcher=slurm asks SLURM to send `signal_delay_s` before
    the time limit (`#SBATCH --signal=USR2@...`): the run stops the same way, and once its checkpoint is
    saved, `scontrol requeue` puts the job back in the queue; started again, it resumes from that
    checkpoint (run/resume.py). A preemption or `scontrol requeue` sends SIGTERM: the checkpoint, then the
    same restart."""

    def __init__(self, ckpt_path: str | Path):
        self.ckpt_path = Path(ckpt_path)
        self.by_ctrl_c = False
        self.requeue = False  # stopped by the time limit's signal: requeue the job once saved
        self.start_step: int | None = None  # the step training started at (a resume's, its checkpoint's)
        self._previous_sigint = None
        self._previous_sigusr2 = None

    def _on_sigint(self, signum, frame):
        signal.signal(signal.SIGINT, self._previous_sigint)  # a second Ctrl-C: no more waiting
        self.by_ctrl_c = _ctrl_c_filter.by_ctrl_c = True
        log.info("Ctrl-C: stopping after this step and saving a checkpoint (Ctrl-C again to abort)")
        os.kill(os.getpid(), signal.SIGTERM)

    def _on_time_limit(self, signum, frame):
        self.requeue = True
        log.info("SLURM: the job's time limit is near; stopping after this step, saving a checkpoint, requeueing")
        os.kill(os.getpid(), signal.SIGTERM)

    def on_fit_start(self, trainer, pl_module):
        _ctrl_c_filter.by_ctrl_c = False
        if trainer.is_global_zero and hasattr(signal, "SIGTERM"):
            self._previous_sigint = signal.signal(signal.SIGINT, self._on_sigint)
        if "SLURM_JOB_ID" in os.environ and hasattr(signal, "SIGUSR2"):  # (in place of submitit's handler)
            self._previous_sigusr2 = signal.signal(signal.SIGUSR2, self._on_time_limit)

    def on_train_start(self, trainer, pl_module):  # (after the checkpoint's loops are restored)
        self.start_step = trainer.global_step

    def on_test_start(self, trainer, pl_module):  # the test after training stops the same way on Ctrl-C
        if trainer.is_global_zero and hasattr(signal, "SIGTERM"):
            self._previous_sigint = signal.signal(signal.SIGINT, self._on_sigint)

    def on_fit_end(self, trainer, pl_module):
        self._restore()

    def on_test_end(self, trainer, pl_module):
        self._restore()

    def on_exception(self, trainer, pl_module, exception):
        self._restore()
        if isinstance(exception, KeyboardInterrupt):  # Ctrl-C before on_fit_start took it over
            self.by_ctrl_c = True
        if not isinstance(exception, SIGTERMException):
            return
        run_dir = self.ckpt_path.parent.parent
        trained = self.start_step is not None and trainer.global_step > self.start_step  # (by this process)
        if trainer.testing:  # after training, whose end last.ckpt holds
            saved = f"testing stopped; {self.ckpt_path} holds the end of training, and resuming it tests"
        elif not trained:  # (its claim is taken back: main.py; a resumed run's files are as they were)
            saved = None
        elif trainer.training:  # between two training steps: a consistent state to save
            trainer.save_checkpoint(
                self.ckpt_path, weights_only=False
            )  # (the whole state, to resume: said, not defaulted)
            saved = f"saved {self.ckpt_path}"
        else:  # mid-validation, whose partial metrics a checkpoint cannot hold: the save before (last_checkpoint.py)
            saved = f"kept {self.ckpt_path}, saved before this step (a resume trains it again and validates it)"
        if saved is None:
            log.info("interrupted before the first step: nothing was trained; %s goes back to what it was", run_dir)
        elif self.ckpt_path.is_file():
            log.info(
                "interrupted at step %d; %s. Resume with ckpt_path=last hydra.run.dir=%s",
                trainer.global_step,
                saved,
                run_dir,
            )
        else:
            log.info(
                "interrupted at step %d, before any checkpoint was written: nothing to resume. "
                "Start it again with overwrite=true hydra.run.dir=%s",
                trainer.global_step,
                run_dir,
            )
        if self.requeue and trainer.is_global_zero:
            job = os.environ["SLURM_JOB_ID"]
            requeued = subprocess.run(["scontrol", "requeue", job], capture_output=True, text=True)
            if requeued.returncode == 0:
                log.info("SLURM job %s requeued: it resumes from %s when it starts again", job, self.ckpt_path)
            else:
                log.warning("SLURM job %s could not be requeued: %s", job, requeued.stderr.strip())

    def _restore(self):
        if self._previous_sigint is not None:
            signal.signal(signal.SIGINT, self._previous_sigint)
            self._previous_sigint = None
        if self._previous_sigusr2 is not None:
            signal.signal(signal.SIGUSR2, self._previous_sigusr2)
            self._previous_sigusr2 = None
