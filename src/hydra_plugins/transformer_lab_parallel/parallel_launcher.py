"""A Hydra launcher that fills one machine: a multirun's jobs run `jobs` at a time, each as a fresh process through
submitit's local executor (hydra-submitit-launcher's `submitit_local`), each given its GPU and its share of the CPU
threads:

    python train.py -m hydra/launcher=parallel hydra.launcher.jobs=4 experiment=grokking_fast seed=0,1,2,3 ...

Why submitit's local executor and not joblib's: a job is then a process exactly like a run alone (its random
generators, torch's threads, signal handlers, CUDA context and memory are its own and end with it); joblib's loky
workers are reused from job to job, and a run's process-wide state would leak from one job into the next.

submitit's LocalExecutor starts every job it is given at once; here at most `jobs` run, the next starting as soon as
one ends (not in waves). Slot k of the `jobs` (the place a job takes while it runs) has GPU k % G of the G GPUs
torch sees, so `jobs_per_gpu` jobs share each GPU (submitit sets the job's CUDA_VISIBLE_DEVICES), and each job's
OMP_NUM_THREADS / MKL_NUM_THREADS are `threads_per_job` (the cores // jobs), in the environment it starts with.
Results come back in job order (the Optuna sweeper reads them). A job whose run failed returns its failure as with
Hydra's basic launcher (the sweeper raises it or records it and goes on); a job whose process ended without a
result (killed, out of memory) starts no further job: the running ones finish, then its error is raised. SIGTERM
of the sweep stops the running jobs after their current step with a checkpoint (`stop`), then `job.cancel()`s any
left; Ctrl-C reaches every job's process from the terminal and stops them at once.
"""

import inspect
import logging
import os
import signal
import time
from collections import deque
from contextlib import contextmanager, suppress
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Optional, Sequence

from hydra.core.config_store import ConfigStore
from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, filter_overrides
from hydra_plugins.hydra_submitit_launcher.submitit_launcher import LocalLauncher

log = logging.getLogger(__name__)

POLL_S = 0.1  # how often the running jobs are looked at (submitit's own controller looks 24 times a second)
STOP_GRACE_S = 60  # a stopped sweep's jobs save their checkpoint within this, or are cancelled
CANCEL_GRACE_S = 5  # a cancelled job's controller kills its run within about a second


@dataclass
class ParallelLauncherConf:
    """The keys of hydra/launcher=parallel; their defaults and what they mean: conf/hydra/launcher/parallel.yaml."""

    _target_: str = "hydra_plugins.transformer_lab_parallel.parallel_launcher.ParallelLauncher"
    submitit_folder: str = "${hydra.sweep.dir}/.submitit/%j"
    jobs: Optional[int] = None
    jobs_per_gpu: int = 1
    threads_per_job: Optional[int] = None
    timeout_min: int = 240
    stderr_to_stdout: bool = False


ConfigStore.instance().store(
    group="hydra/launcher", name="transformer_lab_parallel", node=ParallelLauncherConf, provider="transformer-lab"
)


def config_error(key: str, message: str) -> Exception:
    """A mistake in a launcher key, one line naming it (transformer_lab.errors, imported only when there is one)."""
    from transformer_lab.errors import ConfigError

    return ConfigError(f"hydra.launcher.{key}", message)


def whole_number(params: dict, key: str, allow_none: bool) -> Optional[int]:
    value = params.get(key)
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        also = " or null" if allow_none else ""
        raise config_error(key, f"must be an integer >= 1{also}, got {value!r}")
    return value


def cores() -> int:
    """The CPU cores this process may run on (a container's or taskset's share, not the machine's)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def visible_gpus() -> list[int]:
    """The GPUs torch sees, by the indices a job's CUDA_VISIBLE_DEVICES must name: this process's own
    CUDA_VISIBLE_DEVICES entries where it has one (torch's device 0 is then its first entry)."""
    import torch

    count = torch.cuda.device_count()
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if not count or listed is None:
        return list(range(count))
    names = [name.strip() for name in listed.split(",")][:count]
    if not all(name.isdigit() for name in names):
        raise config_error(
            "jobs",
            f"CUDA_VISIBLE_DEVICES={listed}: each job is given a GPU by its index; name the GPUs by index "
            "(CUDA_VISIBLE_DEVICES=0,1,...)",
        )
    return [int(name) for name in names]


@dataclass
class Plan:
    """How the jobs share this machine: how many at once, the GPU of each slot (none without GPUs), the threads
    of each job."""

    jobs: int
    slot_gpus: list[Optional[int]]
    threads: int


def plan(params: dict, gpus: list[int], cores: int, launched: int) -> Plan:
    """The keys checked (each mistake one line naming its key) and the machine shared out among `launched` jobs:
    by default one at a time per GPU times jobs_per_gpu, or cores // 2 (at least 1) without a GPU, never more at
    once than there are jobs; each job the cores // (the jobs at once) threads (at least 1)."""
    jobs = whole_number(params, "jobs", allow_none=True)
    per_gpu = whole_number(params, "jobs_per_gpu", allow_none=False)
    threads = whole_number(params, "threads_per_job", allow_none=True)
    whole_number(params, "timeout_min", allow_none=False)  # (submitit's: whole minutes)
    if jobs is None:
        jobs = len(gpus) * per_gpu if gpus else max(1, cores // 2)
    jobs = min(jobs, launched)  # (a slot no job takes would take threads from those that run)
    slot_gpus = [gpus[slot % len(gpus)] if gpus else None for slot in range(jobs)]
    return Plan(jobs, slot_gpus, threads if threads is not None else max(1, cores // jobs))


def crowding(shares: Plan, cores: int) -> Optional[str]:
    """A line where threads_per_job makes the jobs at once run more threads than there are cores (each then slower
    than alone). (More jobs than cores at one thread each is a choice: jobs sharing a GPU wait on it.)"""
    if shares.jobs * shares.threads <= cores or shares.threads <= max(1, cores // shares.jobs):
        return None
    return (
        f"{shares.jobs} jobs at once x {shares.threads} threads = {shares.jobs * shares.threads} threads on {cores} "
        "cores: each job runs slower than alone (threads_per_job=null shares the cores out)"
    )


def trials_of(task_function) -> Any:
    """The `Trials` (transformer_lab.run.main) the task function notes its jobs' outcomes in, or None (an app of
    another shape). The root train.py's task function holds it; each job's process notes into its own copy, so
    the outcomes are noted again here, where train.py reads them (a failed trial's one-line message)."""
    from transformer_lab.run.main import Trials

    try:
        held = inspect.getclosurevars(task_function).nonlocals.values()
    except TypeError:  # (not a Python function)
        return None
    return next((value for value in held if isinstance(value, Trials)), None)


def note_outcome(trials: Any, result: JobReturn) -> None:
    """What `transformer_lab.run.main.main` noted of this job in the job's process: a trial failed (its directory
    and error), or completed."""
    from hydra.core.utils import JobStatus

    from transformer_lab.run.main import TrialFailed

    run_dir = Path(str(result.hydra_cfg.hydra.runtime.output_dir))
    if result.status == JobStatus.COMPLETED:
        trials.completed.append(run_dir)
    elif isinstance(result._return_value, TrialFailed):  # (JobReturn's `return_value` raises it)
        trials.failed.append((run_dir, str(result._return_value)))


class ParallelLauncher(LocalLauncher):
    """hydra-submitit-launcher's local launcher (its `__call__` runs one job in the job's process), with jobs
    started `jobs` at a time."""

    def setup(self, **context: Any) -> None:
        """Hydra's setup, then every key checked: before the sweeper writes anything (multirun.yaml)."""
        super().setup(**context)
        folder = Path(str(self.params.get("submitit_folder")).split("%j")[0])
        if not folder.is_relative_to(Path(str(context["config"].hydra.sweep.dir))):  # (one of the user's own)
            try:
                folder.mkdir(parents=True, exist_ok=True)
            except OSError as error:
                raise config_error("submitit_folder", f"{folder} cannot be made ({error.strerror})") from None
        known = [f.name for f in fields(ParallelLauncherConf)]
        if unknown := [key for key in self.params if key not in known]:  # (+hydra.launcher.KEY=: the schema lets it in)
            from transformer_lab.config.checks import no_such_key

            raise no_such_key(f"hydra.launcher.{unknown[0]}", known)
        plan(self.params, [], 1, 1)

    def __call__(self, *arguments: Any) -> JobReturn:
        """One job, in its own process: what it was given is said first in its stdout (.submitit/ID/ID_0_log.out)."""
        import torch

        job_number = arguments[2]
        print(
            f"hydra/launcher=parallel: job #{job_number}: "
            f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '')!r}, "
            f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}, torch threads {torch.get_num_threads()}",
            flush=True,
        )
        return super().__call__(*arguments)

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        import submitit  # (lazily, as the plugin's own launchers do: Hydra imports every plugin to find them)

        assert self.config is not None and len(job_overrides) > 0
        shares = plan(self.params, visible_gpus(), cores(), len(job_overrides))
        if crowded := crowding(shares, cores()):
            log.warning(crowded)
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        if "mode" in self.config.hydra.sweep:
            os.chmod(sweep_dir, mode=int(str(self.config.hydra.sweep.mode), 8))
        executor = submitit.LocalExecutor(folder=self.params["submitit_folder"])
        gpus = sorted({g for g in shares.slot_gpus if g is not None})
        log.info(
            "Launching %d jobs, %d at a time (%s; %d CPU threads each), sweep output dir: %s",
            len(job_overrides),
            shares.jobs,
            f"GPUs {gpus}" if gpus else "no GPU",
            shares.threads,
            sweep_dir,
        )

        pending = deque(enumerate(job_overrides))
        running: dict[int, tuple[int, Any]] = {}  # slot -> (the job's index in job_overrides, its submitit job)
        results: list[Optional[JobReturn]] = [None] * len(job_overrides)
        lost: Optional[Exception] = None  # the first job that ended without a result, said in one line

        def start(slot: int, index: int, overrides: Sequence[str]) -> None:
            gpu = shares.slot_gpus[slot]
            executor.update_parameters(
                timeout_min=self.params["timeout_min"],
                tasks_per_node=1,
                gpus_per_node=0 if gpu is None else 1,
                visible_gpus=() if gpu is None else (gpu,),
                stderr_to_stdout=self.params.get("stderr_to_stdout", False),
            )
            number = initial_job_idx + index
            log.info("\t#%d : %s", number, " ".join(filter_overrides(overrides)))
            with environment(OMP_NUM_THREADS=str(shares.threads), MKL_NUM_THREADS=str(shares.threads)):
                job = executor.submit(
                    self, list(overrides), "hydra.sweep.dir", number, f"job_id_for_{number}", Singleton.get_state()
                )
            running[slot] = (index, job)

        previous_sigterm = signal.signal(signal.SIGTERM, stop_on_sigterm)
        try:
            while pending or running:
                for slot in range(shares.jobs):
                    if slot not in running and pending and lost is None:
                        start(slot, *pending.popleft())
                time.sleep(POLL_S)
                for slot, (index, job) in list(running.items()):
                    if job.done():
                        del running[slot]
                        try:
                            results[index] = job.results()[0]
                        except Exception:  # noqa: BLE001  (the job's process ended without a result)
                            lost = lost or self.job_lost(initial_job_idx + index, job)
                            if pending:
                                log.error("a job ended without a result: starting no more jobs (not started: %s)",
                                          not_started(pending, initial_job_idx))  # fmt: skip
                                pending.clear()
        except BaseException:  # Ctrl-C, SIGTERM: nothing of the sweep is left running
            stop([job for _, job in running.values()])
            if pending:
                log.error("not started: %s", not_started(pending, initial_job_idx))
            raise
        finally:
            signal.signal(signal.SIGTERM, previous_sigterm)
            with suppress(OSError):  # (the executor makes its folder's pattern itself, `%j` and all: empty)
                Path(self.params["submitit_folder"]).rmdir()
        if lost is not None:
            raise lost
        if (trials := trials_of(self.task_function)) is not None:
            for result in results:
                note_outcome(trials, result)
        return results  # type: ignore[return-value]  (every job returned)

    def job_lost(self, number: int, job: Any) -> Exception:
        """What ended the sweep when job #number's process ended without a result, in one line: the job, where its
        output is, and how it goes on (its run directory resumes from the last checkpoint it saved)."""
        from omegaconf import OmegaConf

        from transformer_lab.run.main import JobLost

        default_subdir = OmegaConf.to_container(self.config.hydra.sweep)["subdir"] == "${hydra.job.num}"
        run_dir = Path(str(self.config.hydra.sweep.dir)) / str(number) if default_subdir else None
        if run_dir is not None and (run_dir / "checkpoints" / "last.ckpt").is_file():
            go_on = f"resume it: python train.py ckpt_path=last hydra.run.dir={run_dir}"
        elif run_dir is not None and run_dir.is_dir():
            go_on = f"it saved no checkpoint in {run_dir}: run it again"
        else:
            go_on = "its run directory keeps what it wrote"
        return JobLost(
            f"job #{number} ended without a result: its process was killed "
            f"(kill -9, out of memory) or ran past hydra.launcher.timeout_min; its output: "
            f"{Path(job.paths.stdout).parent}; {go_on}"
        )


def not_started(pending, initial_job_idx: int) -> str:
    """The jobs never started, each by its number and overrides (to run them again: the same sweep, the same
    hydra.sweep.dir, whose finished jobs are refused and kept)."""
    return "; ".join(f"#{initial_job_idx + i} ({' '.join(filter_overrides(o))})" for i, o in pending)


@contextmanager
def environment(**variables: str):
    """This process's environment with `variables`, while submitit's local executor starts a job: the job's
    controller and its task inherit it. (The executor's `setup` lines would do it too, but through a shell,
    which `job.cancel()`'s SIGINT reaches instead of the job.)"""
    saved = {name: os.environ.get(name) for name in variables}
    os.environ.update(variables)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def stop(jobs: list) -> None:
    """The running jobs stopped, and waited for. First SIGTERM to each job's process (a local job's id is its
    controller's pid), which forwards it to the run: it stops after its current step and saves
    checkpoints/last.ckpt (callbacks/interrupt.py); then, for a job still running after STOP_GRACE_S,
    `job.cancel()` (SIGINT; the controller kills the run a second later)."""
    for job in jobs:
        with suppress(ProcessLookupError, ValueError):
            os.kill(int(job.job_id), signal.SIGTERM)
    for grace in (STOP_GRACE_S, CANCEL_GRACE_S):
        deadline = time.monotonic() + grace
        while any(not job.done() for job in jobs) and time.monotonic() < deadline:
            time.sleep(POLL_S)
        for job in jobs:
            if not job.done():
                job.cancel()
    for job in jobs:
        if not job.done():
            log.error("job %s did not stop: its process is still running", job.job_id)


def stop_on_sigterm(signum, frame) -> None:
    """SIGTERM of the sweep stops it as Ctrl-C does: its running jobs are cancelled, then it exits 128 + SIGTERM."""
    log.error("SIGTERM: stopping the running jobs (each saves its checkpoint)")
    raise SystemExit(128 + signal.SIGTERM)
