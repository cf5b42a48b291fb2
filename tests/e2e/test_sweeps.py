"""Optuna sweeps through hydra-optuna-sweeper: trials run, a failed trial is recorded and the sweep goes on.

Here: the sweeps; tests/unit/test_sweeps.py has the rest."""

import yaml

from helpers.runs import TINY, run_train

SMALL = [
    "data.p=11",
    *TINY,
    "model.n_embd=32",
    "trainer.max_steps=30",
    "trainer.val_check_interval=10",
    "trainer.log_every_n_steps=5",
    "logger=none",
]


def test_three_trial_optuna_sweep_writes_the_best_parameters(tmp_path):
    result = run_train("-m", "sweep=grokking", *SMALL, "hydra.sweeper.n_trials=3", f"hydra.sweep.dir={tmp_path}")
    assert result.returncode == 0, result.stderr[-3000:]
    best = yaml.safe_load((tmp_path / "optimization_results.yaml").read_text())
    assert best["name"] == "optuna" and set(best["best_params"]) == {
        "optim.lr",
        "optim.weight_decay",
        "callbacks.grokfast.lamb",
    }
    summaries = [yaml.safe_load((tmp_path / str(i) / "summary.json").read_text()) for i in range(3)]
    assert best["best_value"] == max(s["val/acc_best"] for s in summaries)  # the objective, maximised


def test_a_failed_trial_is_recorded_and_the_sweep_goes_on(tmp_path):
    fixed = [o for o in SMALL if not o.startswith("model.n_head=")]
    result = run_train(
        "-m",
        "hydra/sweeper=optuna",
        "objective=val/loss_best",
        "data=modular",
        *fixed,
        "hydra/sweeper/sampler=grid",
        "hydra.sweeper.n_trials=4",
        "hydra.sweeper.n_jobs=1",
        "hydra.sweeper.max_failure_rate=1.0",
        "model.n_head=choice(2,3)",  # 32 is not divisible by 3
        "optim.lr=choice(0.001,0.01)",
        f"hydra.sweep.dir={tmp_path}",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    output = result.stdout + result.stderr
    failed = [line for line in output.splitlines() if "Failed experiment:" in line]
    assert len(failed) == 2 and all("model.n_embd: 32 is not divisible by model.n_head=3" in f for f in failed)
    jobs = [yaml.safe_load((tmp_path / str(i) / ".hydra" / "overrides.yaml").read_text()) for i in range(4)]
    finished = [i for i in range(4) if (tmp_path / str(i) / "summary.json").exists()]
    assert sorted("model.n_head=2" in jobs[i] for i in finished) == [True, True] and len(finished) == 2
    best = yaml.safe_load((tmp_path / "optimization_results.yaml").read_text())
    assert best["best_params"]["model.n_head"] == 2
    losses = [yaml.safe_load((tmp_path / str(i) / "summary.json").read_text())["val/loss_best"] for i in finished]
    assert best["best_value"] == min(losses)


def test_a_two_by_two_grid_gives_four_distinct_runs(tmp_path):
    result = run_train(
        "-m",
        "data=modular",
        "data.p=7,11",
        "optim.lr=0.001,0.01",
        *SMALL[1:],
        "callbacks=none",
        f"hydra.sweep.dir={tmp_path}",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    jobs = sorted(p.parent for p in tmp_path.rglob("summary.json"))
    assert [j.name for j in jobs] == ["0", "1", "2", "3"]
    overrides = {
        tuple(
            sorted(
                o
                for o in yaml.safe_load((j / ".hydra" / "overrides.yaml").read_text())
                if o.startswith(("data.p=", "optim.lr="))
            )
        )
        for j in jobs
    }
    assert overrides == {
        ("data.p=7", "optim.lr=0.001"),
        ("data.p=7", "optim.lr=0.01"),
        ("data.p=11", "optim.lr=0.001"),
        ("data.p=11", "optim.lr=0.01"),
    }
    assert all(yaml.safe_load((j / "summary.json").read_text())["status"] == "completed" for j in jobs)


def test_a_job_refused_a_directory_another_process_writes_leaves_that_runs_files_alone(tmp_path):
    """A job whose directory another process is writing to (a second sweep into the same hydra.sweep.dir) fails
    alone, and writes nothing there: not its record over the other run's .hydra/, nor its error into that run's
    train.log; the sweep's last line names no log for it."""
    import fcntl
    import os

    sweep = tmp_path / "sweep"
    other = sweep / "0"
    (other / ".hydra").mkdir(parents=True)
    (other / ".hydra" / "config.yaml").write_text("the other run's record\n")
    (other / "train.log").write_text("the other run's log\n")
    (other / ".lock").write_text("4242\n")
    held = os.open(other / ".lock", os.O_RDONLY)  # (another process's claim: a flock of its own)
    fcntl.flock(held, fcntl.LOCK_EX)
    try:
        result = run_train("-m", "data=modular", *SMALL, "seed=0,1", f"hydra.sweep.dir={sweep}")
    finally:
        os.close(held)
    assert result.returncode == 1, result.stderr[-3000:]
    assert result.stderr.splitlines()[-1] == (
        f"error: 1 of 2 trials failed (the first: the job's directory {other}: another process (pid 4242) is writing "
        "to this run directory; wait for it to end, or choose another hydra.sweep.dir)"
    )
    assert (other / ".hydra" / "config.yaml").read_text() == "the other run's record\n"
    assert (other / "train.log").read_text() == "the other run's log\n"
    assert sorted(p.name for p in other.iterdir()) == [".hydra", ".lock", "train.log"]
    assert (sweep / "1" / "summary.json").exists()


def test_a_swept_value_its_key_cannot_hold_is_one_line_before_the_sweep_writes_anything(tmp_path):
    # (Hydra composes a sweep's jobs one by one, after multirun.yaml: the first job's config types every value first)
    for swept, message in (
        ("seed=1,abc", "seed: Value 'abc' of type 'str' could not be converted to Integer"),
        ("optim.lr=1e-3,fast", "optim.lr: Value 'fast' of type 'str' could not be converted to Float"),
    ):
        result = run_train("-m", "data=modular", *SMALL, swept, f"hydra.sweep.dir={tmp_path / 'sweep'}")
        assert result.returncode == 2 and result.stderr.splitlines()[-1] == f"error: {message}", result.stderr[-2000:]
        assert not (tmp_path / "sweep").exists()  # (not even multirun.yaml)
