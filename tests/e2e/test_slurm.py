"""A real SLURM cluster on this host (tests/helpers/cluster/slurm.sh: munge, slurmctld and two slurmd, nodes n1 and n2):
sbatch and srun for real, through hydra/launcher=slurm. Skipped, with the reason, where the cluster cannot be
started (not Linux, not root, no apt-get to install SLURM)."""

import json
import os
import re
import subprocess
import time

import pytest
import yaml

from helpers.runs import ROOT, TINY, run_train, train_command, train_in_a_process

SCRIPT = ROOT / "tests" / "helpers" / "cluster" / "slurm.sh"
MODULAR = ["data=modular", "data.p=11", *TINY, "trainer.max_steps=12", "trainer.val_check_interval=6", "logger=csv"]
ON_SLURM = [
    "hydra/launcher=slurm",
    "hydra.launcher.gpus_per_node=0",
    "hydra.launcher.timeout_min=10",
    # the nodes' names resolve nowhere: the processes meet on this host
    'hydra.launcher.setup=["export MASTER_ADDR=127.0.0.1"]',
]


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    """The environment that points SLURM's commands at a 2-node cluster started for this module."""
    directory = tmp_path_factory.mktemp("slurm")
    started = subprocess.run(
        ["bash", str(SCRIPT), "start", str(directory), "2"], capture_output=True, text=True, timeout=600
    )
    if started.returncode == 3:
        pytest.skip(f"no local SLURM cluster: {started.stderr.strip()}")
    assert started.returncode == 0, started.stdout + started.stderr
    # sacct answers from the controller's record (this cluster keeps no accounting database)
    env = {**os.environ, "SLURM_CONF": str(directory / "slurm.conf"), "PATH": f"{SCRIPT.parent}:{os.environ['PATH']}"}
    yield env
    subprocess.run(["bash", str(SCRIPT), "stop", str(directory)], check=True, timeout=60)
    assert not list((directory / "pids").glob("*.pid"))  # every daemon it started, stopped


def scontrol_jobs(env, settled: bool = True) -> list[dict]:
    """Every job the controller knows, as `scontrol show job` fields; settled: once none is still running
    or completing (a job's result is written before its step ends)."""
    for _ in range(300):
        out = subprocess.run(["scontrol", "-o", "show", "job"], capture_output=True, text=True, env=env, check=True)
        jobs = [dict(re.findall(r"(\w+)=(\S*)", line)) for line in out.stdout.splitlines() if "JobId=" in line]
        if not settled or not any(j["JobState"] in ("RUNNING", "COMPLETING", "PENDING") for j in jobs):
            return jobs
        time.sleep(0.1)
    raise AssertionError(f"jobs still running after 30 s: {jobs}")


def test_srun_spreads_tasks_over_the_nodes(slurm):
    out = subprocess.run(
        ["srun", "-N2", "-n4", "bash", "-c", "echo $SLURMD_NODENAME $SLURM_NODEID $SLURM_PROCID $SLURM_LOCALID"],
        capture_output=True,
        text=True,
        env=slurm,
        stdin=subprocess.DEVNULL,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert sorted(out.stdout.splitlines()) == ["n1 0 0 0", "n1 0 1 1", "n2 1 2 0", "n2 1 3 1"]


def test_ddp_across_two_nodes_through_sbatch_and_srun(slurm, tmp_path):
    sweep = tmp_path / "sweep"
    result = train_in_a_process(
        "-m",
        *ON_SLURM,
        "hardware=ddp",
        "trainer.accelerator=cpu",
        "trainer.num_nodes=2",
        "trainer.devices=1",
        *MODULAR,
        "seed=1,2",
        f"hydra.sweep.dir={sweep}",
        env=slurm,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    # two SLURM jobs (an array of two), each of two tasks on two nodes
    jobs = [j for j in scontrol_jobs(slurm) if j.get("ArrayJobId") and j.get("JobName") == "train"]
    assert len(jobs) == 2 and {j["JobState"] for j in jobs} == {"COMPLETED"}
    assert {(j["NumNodes"], j["NumTasks"], j["NodeList"]) for j in jobs} == {("2", "2", "n[1-2]")}
    # one sweep directory, one run directory per job, one summary each (rank zero's)
    assert sorted(p.name for p in sweep.iterdir() if p.is_dir() and not p.name.startswith(".")) == ["0", "1"]
    for job in ("0", "1"):
        logs = "".join(p.read_text() for p in (sweep / ".submitit").glob(f"*_{job}/*_log.out"))
        for rank, node in ((0, "n1"), (1, "n2")):
            assert re.search(rf"SLURM job \d+_{job}: task {rank} of 2 on node {node}", logs), logs
            assert f"Initializing distributed: GLOBAL_RANK: {rank}, MEMBER: {rank + 1}/2" in logs
        assert json.loads((sweep / job / "summary.json").read_text())["status"] == "completed"

    # the same global batches in one process: the same run, to float32 rounding
    alone = tmp_path / "alone"
    single = run_train(*MODULAR, "seed=1", f"hydra.run.dir={alone}", cwd=tmp_path)
    assert single.returncode == 0, single.stderr[-3000:]
    together = json.loads((sweep / "0" / "summary.json").read_text())
    reference = json.loads((alone / "summary.json").read_text())
    for key in ("train/loss", "val/loss", "val/acc"):
        assert together[key] == pytest.approx(reference[key], abs=1e-5), key


def overlap(a: dict, b: dict) -> bool:
    """Whether two jobs ran at the same time (scontrol's StartTime/EndTime, whole seconds)."""
    return a["StartTime"] <= b["EndTime"] and b["StartTime"] <= a["EndTime"]


def test_optuna_trials_run_as_parallel_slurm_jobs(slurm, tmp_path):
    sweep = tmp_path / "sweep"
    before = {j["JobId"] for j in scontrol_jobs(slurm)}
    result = train_in_a_process(
        "-m",
        "sweep=grokking",
        *ON_SLURM,
        "hardware=cpu",
        "trainer.devices=1",
        "hydra.sweeper.n_jobs=2",
        "hydra.sweeper.n_trials=4",
        "data.p=11",
        *TINY,
        "trainer.max_steps=20",
        "trainer.val_check_interval=10",
        "logger=none",
        f"hydra.sweep.dir={sweep}",
        env=slurm,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    jobs = [j for j in scontrol_jobs(slurm) if j["JobId"] not in before]
    assert len(jobs) == 4 and {j["JobState"] for j in jobs} == {"COMPLETED"}  # one SLURM job per trial
    batches = {}
    for job in jobs:
        batches.setdefault(job["ArrayJobId"], []).append(job)
    assert sorted(map(len, batches.values())) == [2, 2]  # two batches of n_jobs=2 trials, each run side by side
    assert all(overlap(*pair) for pair in batches.values())
    trials = [json.loads((sweep / str(i) / "summary.json").read_text()) for i in range(4)]
    results = yaml.safe_load((sweep / "optimization_results.yaml").read_text())
    assert set(results["best_params"]) == {"optim.lr", "optim.weight_decay", "callbacks.grokfast.lamb"}
    assert results["best_value"] == pytest.approx(max(t["val/acc_best"] for t in trials))


SHORT_RUN = [*MODULAR, "trainer.max_steps=400", "trainer.val_check_interval=100", "trainer.log_every_n_steps=10"]


class Job:
    """One job of `python train.py -m hydra/launcher=slurm ...` started in the background, and its run."""

    def __init__(self, slurm, tmp_path, *overrides):
        self.slurm, self.run = slurm, tmp_path / "sweep" / "0"
        command = train_command("-m", *ON_SLURM, "hardware=cpu", "trainer.devices=1")
        command += [*SHORT_RUN, *overrides, f"hydra.sweep.dir={tmp_path / 'sweep'}"]
        self.launcher = subprocess.Popen(
            command, cwd=tmp_path, env=slurm, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )

    def wait_for_step(self, step: int) -> str:
        """Once the run has logged `step`: its SLURM job id."""
        metrics = self.run / "metrics.jsonl"
        for _ in range(1200):
            if metrics.is_file() and any(json.loads(line)["step"] >= step for line in metrics.open()):
                (job,) = [j["JobId"] for j in scontrol_jobs(self.slurm, settled=False) if j["JobState"] == "RUNNING"]
                return job
            time.sleep(0.05)
        self.launcher.kill()
        raise AssertionError(f"step {step} never came: {self.launcher.communicate()[0][-3000:]}")

    def start_again_now(self, job: str) -> None:
        """A requeued job waits (SLURM makes it eligible two minutes on); start it once it is pending. Not in
        the second its first run was killed: slurmd refuses a job's credential issued in the same second as
        the one it revoked ("Job credential revoked"), and the job then fails without running."""
        for _ in range(600):
            (state,) = [j for j in scontrol_jobs(self.slurm, settled=False) if j["JobId"] == job]
            if state["JobState"] == "PENDING":
                time.sleep(1.1)
                scontrol("update", f"JobId={job}", "StartTime=now", env=self.slurm)
                return
            time.sleep(0.05)
        raise AssertionError(f"job {job} was not requeued: {state}")

    def finish(self) -> str:
        try:
            output, _ = self.launcher.communicate(timeout=240)
        finally:
            self.launcher.kill()  # (a no-op once it has ended)
        return output

    def story(self) -> str:
        """What a failed assertion shows: the job's SLURM logs, its run's train.log and the states SLURM keeps."""
        logs = sorted((self.run.parent / ".submitit").glob("*/*_log.*")) + [self.run / "train.log"]
        parts = [f"== {p}\n{p.read_text()[-2500:]}" for p in logs if p.is_file()]
        return "\n".join([*parts, f"== scontrol: {scontrol_jobs(self.slurm, settled=False)}"])

    def log(self) -> str:
        return (self.run / "train.log").read_text()

    def summary(self) -> dict:
        return json.loads((self.run / "summary.json").read_text())


def scontrol(*args: str, env=None) -> None:
    subprocess.run(["scontrol", *args], check=True, capture_output=True, env=env)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """The short run without SLURM, nothing stopping it."""
    run = tmp_path_factory.mktemp("uninterrupted")
    result = run_train(*SHORT_RUN, f"hydra.run.dir={run}")
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads((run / "summary.json").read_text())


@pytest.mark.parametrize("how", ["scontrol requeue", "time limit"])
def test_a_requeued_job_resumes_from_its_checkpoint_and_ends_as_if_never_stopped(slurm, tmp_path, uninterrupted, how):
    job = Job(slurm, tmp_path)
    job_id = job.wait_for_step(150)
    if how == "scontrol requeue":  # a preemption, or an administrator: SIGTERM, and the job queued again
        scontrol("requeue", job_id, env=slurm)
    else:  # what `#SBATCH --signal=USR2@S` sends S seconds before the time limit (hydra.launcher.signal_delay_s)
        subprocess.run(["scancel", "--signal=USR2", job_id], check=True, env=slurm)
    job.start_again_now(job_id)
    output = job.finish()
    assert job.launcher.returncode == 0, output[-3000:] + job.story()
    log = job.log()
    stopped = re.search(r"interrupted at step (\d+); saved .*last.ckpt", log)
    assert stopped and 150 <= int(stopped[1]) < 400, log
    if how == "time limit":
        assert "the job's time limit is near; stopping after this step" in log
        assert f"SLURM job {job_id} requeued: it resumes from" in log
    assert "SLURM requeued this job (restart 1): resuming from its last.ckpt" in log
    summary = job.summary()
    assert summary["status"] == "completed" and summary["global_step"] == 400
    for key in ("train/loss", "val/loss", "val/acc", "val/loss_best"):
        assert summary[key] == pytest.approx(uninterrupted[key], abs=1e-6), key


def test_scancel_leaves_an_interrupted_run_and_its_checkpoint(slurm, tmp_path):
    job = Job(slurm, tmp_path)
    job_id = job.wait_for_step(150)
    subprocess.run(["scancel", job_id], check=True, env=slurm)
    output = job.finish()
    # the submitting side: one line, no traceback
    assert job.launcher.returncode == 1 and "Traceback" not in output, output[-3000:]
    assert f"error: SLURM job {job_id} ended without a result (state: CANCELLED); its logs: " in output
    summary = job.summary()
    assert summary["status"] == "interrupted" and 150 <= summary["global_step"] < 400
    assert (job.run / "checkpoints" / "last.ckpt").is_file()
    assert f"interrupted at step {summary['global_step']}; saved" in job.log()
    (state,) = [j for j in scontrol_jobs(slurm) if j["JobId"] == job_id]
    assert state["JobState"] == "CANCELLED"
