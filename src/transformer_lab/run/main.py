"""The run, top to bottom: `main` is Hydra's task function (the root train.py's), for a single run and for each
job of a multirun alike. Hydra has composed the config and made the run's directory, writing nothing in it
(conf/hydra/default.yaml: no record, no log file); `main` checks the run (run/prepare.py: a resume's config, every
part's checks, before torch and Lightning load), builds it, claims the directory (store/rundir.py), records the
run there (.hydra/, train.log), fits it (run/fit.py) and returns its objective."""

from __future__ import annotations

import contextlib
import logging
import logging.handlers
import re
import shutil
import time
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from transformer_lab.errors import UserError, exit_on_user_error
from transformer_lab.run.prepare import Prepared, build_run, prepare
from transformer_lab.store.atomic import MANIFEST, recording
from transformer_lab.store.files import read_json
from transformer_lab.store.rundir import (
    LOCK,
    claim,
    earlier_run,
    first_process,
    holds,
    record,
    release,
    started,
    stop_on_sigterm,
    unwind,
)

log = logging.getLogger(__name__)


def remove_if_unused(run_dir: Path | None) -> None:
    """Removes a run directory Hydra made for this run that holds only the run's record, log and lock: a run
    refused, stopped or failed before training (what it wrote then was taken back: rundir.unwind), or with
    nothing to do; and the date folder above it, left empty (outputs/DATE/TIME)."""

    if (
        run_dir is not None
        and first_process()  # (the directory is the job's first process's to remove)
        and run_dir.is_dir()
        and {p.name for p in run_dir.iterdir()} <= {".hydra", "train.log", LOCK, MANIFEST}
    ):
        shutil.rmtree(run_dir, ignore_errors=True)
        for folder in (run_dir.parent, run_dir.parent.parent):  # (Hydra's default layout: outputs/DATE/TIME)
            if re.fullmatch(r"\d{4}-\d{2}-\d{2}|outputs|multirun", folder.name) and not any(folder.iterdir()):
                folder.rmdir()
            else:
                break


class TrialFailed(UserError):
    """A job that could not produce its objective: a multirun's sweeper records it as failed and goes on; a single
    run says so in one line (exit code 2), its files kept."""


class JobLost(Exception):
    """A multirun job whose process ended without a result (killed, out of memory, past a time limit), in one line
    naming the job and how to go on (hydra/launcher=parallel raises it)."""


class Trials:
    """The jobs of one multirun run in this process (Hydra's basic launcher, Optuna's sweeper): the root
    train.py makes one per command and hands it to `main`, which notes each job's outcome here."""

    def __init__(self):
        self.failed: list[tuple[Path, str]] = []  # their directories and errors
        self.completed: list[Path] = []

    def problem(self, error: BaseException) -> str | None:
        """What ended the multirun, in one line, when its trials failed (all of them: Optuna then finds no
        best trial; or some, with a sweeper that reports failures at the end or stops at one), or when a
        SLURM job ended without a result (scancel, a node failure, the time limit of a run that could not
        requeue). None otherwise."""
        if isinstance(error, JobLost):
            return str(error)
        if type(error).__name__ == "UncompletedJobError":  # submitit's (hydra/launcher=slurm)
            found = re.search(
                r"Job (\S+) \(task: \d+\) with path (\S+)\s+has not produced any output \(state: ([^)]*)\)", str(error)
            )
            if found:
                job, result, state = found.groups()
                return (
                    f"SLURM job {job} ended without a result (state: {state}); its logs: {Path(result).parent}; "
                    "its run directory keeps what it wrote (summary.json, checkpoints: ckpt_path=last resumes it)"
                )
        if not self.failed or not isinstance(error, (TrialFailed, ValueError, RuntimeError)):
            return None
        logs = ", ".join(str(log) for log in self.logs_told())
        first, told = self.failed[0][1], f"; their errors: {logs}" if logs else ""
        if not self.completed:
            return f"every trial failed ({len(self.failed)}; the first: {first}){told}"
        total = len(self.failed) + len(self.completed)
        return f"{len(self.failed)} of {total} trials failed (the first: {first}){told}"

    def logs_told(self) -> list[Path]:
        """The failed trials' log files that hold their error (not a trial refused a directory another run holds,
        whose log is that run's)."""
        told = []
        for directory, error in self.failed:
            log_file = directory / "train.log"
            with contextlib.suppress(OSError, UnicodeDecodeError):
                if f"error: {error}" in log_file.read_text():
                    told.append(log_file)
        return told


def objective_value(cfg: DictConfig, summary: dict) -> float | None:
    """The metric a sweeper optimises (`objective`, a summary.json key), or None when none is named."""
    if cfg.objective is None:
        return None
    value = summary.get(cfg.objective)
    if not isinstance(value, (int, float)) or value != value:  # missing, or nan
        found = ", ".join(k for k, v in sorted(summary.items()) if isinstance(v, (int, float)))
        raise TrialFailed(f"objective={cfg.objective} is not a number in this run's summary.json (it has: {found})")
    return float(value)


@contextlib.contextmanager
def job(cfg: DictConfig, trials: Trials):
    """Hydra's runtime, read here alone (the run's code is handed it): the run directory, the setting that names
    it and whether this is a multirun's job. A user's mistake is one line and exit code 2; in a multirun it fails its own job only (its
    directory keeps what was tried and why, the sweep goes on; `trials` notes it); a directory this run made and
    left unused goes, whatever stopped it. A multirun's DDP processes and SLURM tasks leave nothing for the next job."""
    hydra = HydraConfig.get()
    multirun = hydra.mode == RunMode.MULTIRUN
    run_dir = Path(hydra.runtime.output_dir)
    new = run_dir.is_dir() and not any(run_dir.iterdir())  # (Hydra made it for this run)
    stop_on_sigterm()  # (until training starts: a SystemExit, and what was claimed goes back)
    if multirun:  # (its DDP processes and SLURM tasks: run/launch.py, which imports Lightning)
        from transformer_lab.run.launch import distributed_job
    with distributed_job() if multirun else contextlib.nullcontext():
        try:
            with contextlib.nullcontext() if multirun else exit_on_user_error():
                yield hydra, run_dir, "hydra.sweep.dir" if multirun else "hydra.run.dir", multirun
        except UserError as e:  # (a multirun's job, TrialFailed too: the sweep goes on)
            if not multirun:
                raise
            # Its own directory keeps what was tried and why it failed; not one another process is writing to.
            if (new or earlier_run(run_dir) is None) and (not first_process() or holds(run_dir)):
                with recording(run_dir), record(run_dir, cfg, None, hydra):  # (in its manifest: a run's, not a user's)
                    log.error("error: %s", e)
            else:
                log.error("error: %s", e)
            trials.failed.append((run_dir, str(e)))
            raise TrialFailed(str(e)) from None
        except BaseException:
            release(run_dir)
            remove_if_unused(run_dir if new else None)
            raise
        finally:
            release(run_dir)
        remove_if_unused(run_dir if new else None)  # (a resume with nothing to do, into a new directory)
        if multirun:
            trials.completed.append(run_dir)


def main(cfg: DictConfig, start_time: float | None = None, trials: Trials | None = None) -> float | None:
    """Hydra's task function: check, build, claim, record, fit, finish. Returns the objective, for sweepers."""
    with job(cfg, trials if trials is not None else Trials()) as (hydra, run_dir, key, multirun):
        early = logging.handlers.MemoryHandler(capacity=1_000, flushLevel=logging.CRITICAL + 1)
        logging.getLogger().addHandler(early)  # (what the checks log goes into the run's log file once there is one)
        try:
            prepared = prepare(
                cfg, hydra, run_dir, key
            )  # a resume's config; every check (a mistake before torch loads)
            if prepared.settled:  # (a resume with nothing to do)
                return objective_value(cfg, read_json(run_dir / "summary.json")) if multirun else None
            from transformer_lab.run.fit import best_checkpoint, fitting, trainer_for  # (Lightning's settings, first)

            build_run(prepared)  # data, model and task, each built once, and the checks that need them
            claim(run_dir, key, prepared.resumed and prepared.resumed.path, bool(prepared.cfg.get("overwrite")))
        finally:
            logging.getLogger().removeHandler(early)
        with recorded(run_dir, prepared, early):  # .hydra/ and train.log; a failure before training unwinds the claim
            start, trainer = start_time if not multirun else None, trainer_for(prepared)  # (a job's from its own start)
            with fitting(trainer, prepared, start or time.time()) as summary:  # summary.json on the way out
                task, data = prepared.task, prepared.datamodule
                trainer.fit(
                    task, datamodule=data, ckpt_path=prepared.resumed and prepared.resumed.path, weights_only=True
                )
                if data.has_test_split:  # evaluated once, with the best weights
                    trainer.test(task, datamodule=data, ckpt_path=best_checkpoint(trainer), weights_only=True)
        return objective_value(cfg, summary) if summary else None  # (the other DDP processes have none)


@contextlib.contextmanager
def recorded(run_dir: Path, prepared: Prepared, early: logging.handlers.MemoryHandler):
    """The run's record in its claimed directory (.hydra/: a resume's recomposed config; train.log, which gets what
    the checks logged before it existed) for as long as the run lasts; a mistake's one line is in the log too. A run
    that fails or is stopped before it trained puts the directory back as it was claimed (rundir.unwind)."""
    try:
        overrides = prepared.overrides if prepared.recomposed else None
        with record(run_dir, prepared.cfg, overrides, prepared.hydra) as log_handler:
            early.setTarget(log_handler)  # (None: no log file, the records go)
            early.close()  # (flushed into the log file)
            try:
                yield
            except UserError as e:  # (the console's one line, in the run's log too)
                if log_handler is not None:
                    log_handler.handle(log.makeRecord(log.name, logging.ERROR, __file__, 0, "error: %s", (e,), None))
                raise
        if first_process():  # (ended well, if without a step to train: a resume at its last step; nothing goes back)
            started(run_dir)
    except BaseException:
        if first_process():  # (the directory is the claiming process's to put back)
            unwind(run_dir)
        raise
