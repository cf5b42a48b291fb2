"""hydra/launcher=parallel: a multirun's jobs N at a time on one machine, each a process of its own with its share
of the CPU threads (and its GPU, where there are GPUs: docs/sweeps.md has the command that measures it).

Here: train.py's sweeps through the launcher (in a process of their own: the launcher starts processes), each job
against the same overrides run alone; how the machine is shared out for a given machine (GPUs, cores)."""

import json
import re
from datetime import datetime

import pytest
import yaml

from helpers.runs import ROOT, TINY, run_train, train_in_a_process
from hydra_plugins.transformer_lab_parallel.parallel_launcher import cores, crowding, plan

SETTINGS = [
    "data=modular",
    "data.p=11",
    *TINY,
    "trainer.max_steps=20",
    "trainer.val_check_interval=10",
    "callbacks.last_checkpoint.every_n_train_steps=10",
    "logger=none",
]
# Measurements of the process that ran, not results.
NOT_COMPARED = {"tokens_per_sec", "flops_per_token", "mfu", "wall_time_s", "train_time_s", "peak_mem_mb"}
THREADS = max(1, cores() // 2)  # each of 2 jobs at once: the cores // 2
HELPERS = {"PYTHONPATH": str(ROOT / "tests")}  # (helpers.callbacks, in the jobs' processes)


def results(run_dir):
    summary = json.loads((run_dir / "summary.json").read_text())
    return {k: v for k, v in summary.items() if k not in NOT_COMPARED}


def job_logs_by_folder(sweep):
    """(folder, its submitit log: stdout and stderr) of each job under the sweep's .submitit/."""
    return [(f, "".join(p.read_text() for p in sorted(f.glob("*_log.*")))) for f in (sweep / ".submitit").iterdir()]


def job_logs(sweep):
    """Each job's submitit log (stdout and stderr), by its job number."""
    logs = {}
    for _, text in job_logs_by_folder(sweep):
        if found := re.search(r"hydra/launcher=parallel: job #(\d+)", text):
            logs[int(found.group(1))] = text
    return logs


def lifetime(log):
    """When the job's process started and ended, as submitit logs them."""
    stamps = re.findall(r"submitit INFO \(([\d-]+ [\d:,]+)\) - (Starting with|Exiting after)", log)
    when = {what: datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f") for stamp, what in stamps}
    return when["Starting with"], when["Exiting after"]


@pytest.fixture(scope="module")
def alone(tmp_path_factory):
    """seed=1 run alone as a single run, with the threads a job of two at once gets."""
    run_dir = tmp_path_factory.mktemp("alone") / "run"
    result = run_train(*SETTINGS, "seed=1", f"hydra.run.dir={run_dir}", env={"OMP_NUM_THREADS": str(THREADS)})
    assert result.returncode == 0, result.stderr[-3000:]
    return run_dir


def test_three_jobs_run_two_at_a_time_each_as_it_would_alone(alone, tmp_path):
    sweep = tmp_path / "sweep"
    result = train_in_a_process(
        "-m", "hydra/launcher=parallel", "hydra.launcher.jobs=2", *SETTINGS, "seed=0,1,2", f"hydra.sweep.dir={sweep}",
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sweep"]  # no stray run directories
    assert sorted(p.name for p in sweep.iterdir()) == [".submitit", "0", "1", "2", "multirun.yaml"]
    assert "%j" not in [p.name for p in (sweep / ".submitit").iterdir()]  # (a folder a job, no other)
    for job in range(3):  # each job its own directory, with its own overrides
        assert f"seed={job}" in yaml.safe_load((sweep / str(job) / ".hydra" / "overrides.yaml").read_text())
        assert results(sweep / str(job))["status"] == "completed"
    assert results(sweep / "1") == results(alone)  # exactly: every digit
    assert results(sweep / "0") != results(sweep / "1")  # (the seed matters: the comparison could fail)

    logs = job_logs(sweep)
    assert sorted(logs) == [0, 1, 2]
    for log in logs.values():  # each job's threads, as the job's torch saw them
        assert f"OMP_NUM_THREADS={THREADS}, torch threads {THREADS}" in log, log[-2000:]
    lives = [lifetime(logs[job]) for job in range(3)]
    at_once = [sum(start <= moment < end for start, end in lives) for moment, _ in lives]
    assert max(at_once) == 2  # two at once, never three
    (start0, end0), (start1, end1), (start2, _) = lives
    assert start2 >= min(end0, end1)  # the third began only when one of the first two had ended


def test_a_failing_job_a_dead_one_and_the_exact_resume_of_a_job(alone, tmp_path):
    """Jobs one at a time: n_head=3 fails (its own error, the sweep goes on), n_head=2 is killed at step 15 (its
    process ends without a result: no further job starts), and is then resumed to the run alone's figures."""
    sweep = tmp_path / "sweep"
    result = train_in_a_process(
        "-m", "hydra/launcher=parallel", "hydra.launcher.jobs=1", *SETTINGS, "seed=1", "model.n_head=3,2,4",
        "+callbacks.kill._target_=helpers.callbacks.KillAt", "+callbacks.kill.step=15", f"hydra.sweep.dir={sweep}",
        cwd=tmp_path, env=HELPERS,
    )  # fmt: skip
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-3000:]
    (output,) = [folder for folder, log in job_logs_by_folder(sweep) if "job #1" in log]
    assert result.stderr.splitlines()[-1] == (  # (the sweep's last line: the dead job, how it goes on)
        "error: job #1 ended without a result: its process was killed (kill -9, out of memory) or "
        f"ran past hydra.launcher.timeout_min; its output: {output}; resume it: python train.py ckpt_path=last "
        f"hydra.run.dir={sweep / '1'}"
    )
    assert "error: model.n_embd: 32 is not divisible by model.n_head=3" in (sweep / "0" / "train.log").read_text()
    assert not (sweep / "2").exists()  # no job after the dead one, and the sweep says which it left
    assert re.search(r"starting no more jobs \(not started: #2 \(.*model.n_head=4.*\)\)", result.stdout + result.stderr)
    assert not (sweep / "1" / "summary.json").exists()

    resumed = run_train("ckpt_path=last", f"hydra.run.dir={sweep / '1'}", "+callbacks.kill.step=1000", env=HELPERS)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert results(sweep / "1") == results(alone)


@pytest.mark.parametrize(
    "setting, message",
    [
        ("jobs=0", "hydra.launcher.jobs: must be an integer >= 1 or null, got 0"),
        (
            "jobs_per_gpu=two",
            "hydra.launcher.jobs_per_gpu: Value 'two' of type 'str' could not be converted to Integer",
        ),  # (the schema's)
        ("threads_per_job=-1", "hydra.launcher.threads_per_job: must be an integer >= 1 or null, got -1"),
        ("timeout_min=0", "hydra.launcher.timeout_min: must be an integer >= 1, got 0"),
        ("job=2", "hydra.launcher.job: no such key; did you mean hydra.launcher.jobs?"),
        (
            "submitit_folder=/proc/x",
            "hydra.launcher.submitit_folder: /proc/x cannot be made (No such file or directory)",
        ),
        ("+hydra.launcher.job=2", "hydra.launcher.job: no such key; did you mean hydra.launcher.jobs?"),
        (
            "timeout_min=0.5",
            "hydra.launcher.timeout_min: Value '0.5' of type 'float' could not be converted to Integer",
        ),
    ],
)
def test_a_bad_launcher_setting_is_one_line_before_anything_is_written(setting, message, tmp_path):
    setting = setting if setting.startswith("+") else f"hydra.launcher.{setting}"
    result = run_train("-m", "hydra/launcher=parallel", setting, *SETTINGS, "seed=0,1",
                       f"hydra.sweep.dir={tmp_path / 'sweep'}", cwd=tmp_path)  # fmt: skip
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert result.stderr.splitlines()[-1] == f"error: {message}"
    assert not (tmp_path / "sweep").exists()  # (not even multirun.yaml)


@pytest.mark.parametrize(
    "settings, gpus, cores, launched, jobs, slot_gpus, threads",
    [
        ({}, [], 16, 16, 8, [None] * 8, 2),  # no GPU: cores // 2 jobs
        ({}, [], 1, 16, 1, [None], 1),
        ({}, [0, 1], 16, 16, 2, [0, 1], 8),  # one job per GPU
        ({"jobs_per_gpu": 3}, [2, 5], 16, 16, 6, [2, 5, 2, 5, 2, 5], 2),  # slot-wise round-robin, by the GPUs' indices
        ({"jobs": 4}, [0], 16, 16, 4, [0, 0, 0, 0], 4),  # four on one GPU
        ({"jobs": 3, "threads_per_job": 5}, [], 4, 16, 3, [None] * 3, 5),
        ({"jobs": 8}, [], 4, 16, 8, [None] * 8, 1),  # at least one thread
        ({"jobs": 100}, [], 4, 10, 10, [None] * 10, 1),  # never more at once than there are jobs
        ({"jobs": 4}, [], 2, 1, 1, [None], 2),  # one job: the machine's threads are its own
        ({}, [], 2, 3, 1, [None], 2),  # the default on 2 cores: one at a time, with both
    ],
)
def test_how_the_machine_is_shared_out(settings, gpus, cores, launched, jobs, slot_gpus, threads):
    defaults = {"jobs": None, "jobs_per_gpu": 1, "threads_per_job": None, "timeout_min": 240}
    shares = plan({**defaults, **settings}, gpus, cores, launched)
    assert (shares.jobs, shares.slot_gpus, shares.threads) == (jobs, slot_gpus, threads)


def test_more_threads_at_once_than_cores_is_said():
    defaults = {"jobs": None, "jobs_per_gpu": 1, "threads_per_job": None, "timeout_min": 240}
    assert crowding(plan({**defaults, "jobs": 2}, [], 2, 8), 2) is None  # (1 thread each, 2 at once: the cores)
    assert crowding(plan({**defaults, "jobs": 4}, [], 2, 8), 2) is None  # (1 each: jobs sharing a GPU, say)
    crowded = plan({**defaults, "jobs": 4, "threads_per_job": 2}, [], 2, 8)
    assert crowding(crowded, 2) == (
        "4 jobs at once x 2 threads = 8 threads on 2 cores: each job runs slower than alone (threads_per_job=null "
        "shares the cores out)"
    )
