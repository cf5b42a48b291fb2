"""A resumed run's W&B run keeps the name, group, job type and tags its first process gave it: a sweep's job
resumed with `ckpt_path=last hydra.run.dir=JOB` is a run of its own outside the sweep, whose command line tells
neither the sweep's directory (the group) nor the settings the sweep varies (the job type, tags), so they come
from the checkpoint (callbacks/logger_versions.py), as the run's id does.

Here in-process: the loggers built as train.py builds them (loggers.build_loggers, Hydra's record of the launch
stood in for), W&B offline, the first process's checkpoint written by LoggerVersions, and the resume's loggers
built from it; tests/e2e/test_wandb.py runs train.py."""

import pytest

from helpers.runs import compose_cfg


class Launch:
    """What loggers.wandb_identity reads of Hydra's config of a job: its overrides, mode, sweep and choices."""

    def __init__(self, task, multirun=False, sweep_dir=None, params=None, hardware="cpu"):
        from omegaconf import OmegaConf

        from transformer_lab.run import loggers

        self.overrides = OmegaConf.create({"task": list(task)})
        self.mode = loggers.RunMode.MULTIRUN if multirun else loggers.RunMode.RUN
        self.sweep = OmegaConf.create({"dir": str(sweep_dir)})
        self.sweeper = OmegaConf.create({"params": params})
        self.runtime = OmegaConf.create({"choices": {"hardware": hardware}})


def launched(monkeypatch, argv, launch):
    """The job's Hydra runtime (`launch`), for build_loggers, once its command line is this process's."""
    from transformer_lab.run import loggers

    monkeypatch.setattr(loggers.sys, "argv", ["train.py", *argv])
    return launch


@pytest.fixture(scope="module")
def wandb_service():
    """W&B's service process, which the runs of this module start: one for them all, ended after the last."""
    yield
    import wandb

    wandb.teardown()


@pytest.fixture(autouse=True)
def offline(monkeypatch, wandb_service):
    monkeypatch.setenv("WANDB_MODE", "offline")  # (no key, never a prompt)
    monkeypatch.setenv("WANDB_SILENT", "true")
    # (not the list of installed packages W&B records with each run: about half a second each, and never read here)
    monkeypatch.setenv("WANDB_X_SAVE_REQUIREMENTS", "false")


def first_process(monkeypatch, cfg, argv, launch) -> tuple[dict, dict]:
    """The first process's W&B run started (offline: its id) and its checkpoint's `loggers`, as LoggerVersions
    writes them; returns them and the arguments wandb.init was given."""
    from transformer_lab.callbacks.logger_versions import LoggerVersions
    from transformer_lab.run.loggers import build_loggers

    loggers, settings = build_loggers(cfg, None, launched(monkeypatch, argv, launch))
    run = loggers["wandb"].experiment  # (started: W&B gives the run its id)
    run.finish()
    checkpoint = {}
    LoggerVersions(loggers, settings).on_save_checkpoint(None, None, checkpoint)
    return checkpoint["loggers"], {**loggers["wandb"]._wandb_init, "id": run.id}


IDENTITY = ("id", "name", "group", "job_type", "tags")
RESUME = ["ckpt_path=last", "trainer.max_steps=30"]


@pytest.mark.parametrize(
    "argv, task, params, group, job_type, tags",
    [
        (  # a grid over the command line: the job's overrides of what it sweeps
            ["-m", "data=modular", "data.p=7,11", "seed=0,1"],
            ["data=modular", "data.p=7", "seed=1"],
            None,
            "SWEEP",
            "data.p=7",
            ["model=gpt", "data=modular", "hardware=cpu", "data.p=7"],
        ),
        (  # a sweeper's parameters (sweep=NAME, Optuna)
            ["-m", "data=modular", "sweep=lr"],
            ["data=modular", "optim.lr=0.003"],
            {"optim.lr": "interval(1e-4, 1e-2)"},
            "SWEEP",
            "optim.lr=0.003",
            ["model=gpt", "data=modular", "hardware=cpu", "optim.lr=0.003"],
        ),
        (  # no sweep: no group, no job type, and its tags
            ["data=modular", "data.p=7"],
            ["data=modular", "data.p=7"],
            None,
            None,
            None,
            ["model=gpt", "data=modular", "hardware=cpu"],
        ),
    ],
    ids=["grid", "sweeper-params", "no-sweep"],
)
def test_a_resumed_run_keeps_its_wandb_group_job_type_and_tags(
    tmp_path, monkeypatch, argv, task, params, group, job_type, tags
):
    from transformer_lab.run.loggers import build_loggers

    job = tmp_path / "sweep" / "0"
    cfg = compose_cfg(["data=modular", "data.p=7", "logger=wandb"], output_dir=str(job))
    multirun = argv[0] == "-m"
    launch = Launch(task, multirun, tmp_path / "sweep", params)
    recorded, first = first_process(monkeypatch, cfg, argv, launch)
    group = str(tmp_path / "sweep") if group == "SWEEP" else group
    assert (first["group"], first["job_type"], first["tags"]) == (group, job_type, tags)
    assert recorded["wandb"]["version"] == first["id"] and recorded["wandb"].get("group") == group

    # the resume: `python train.py ckpt_path=last hydra.run.dir=JOB ...`, a run of its own (not a sweep), whose
    # Hydra composed hardware's default (auto) where the job had hardware=cpu among the sweep's arguments
    resume = launched(monkeypatch, [*RESUME, f"hydra.run.dir={job}"], Launch(RESUME, hardware="auto"))
    loggers, settings = build_loggers(cfg, recorded, resume)
    resumed = loggers["wandb"]._wandb_init
    assert {k: resumed[k] for k in IDENTITY} == {k: first[k] for k in IDENTITY}
    assert resumed["resume"] == "allow" and {k: settings["wandb"][k] for k in ("group", "job_type", "tags")} == {
        "group": group,
        "job_type": job_type,
        "tags": tags,
    }  # (what the run's config in W&B records as the logger's settings)
    run = loggers["wandb"].experiment  # the offline run itself: the same run, filed the same way
    assert (run.id, run.group or None, run.job_type or None, list(run.tags)) == (first["id"], group, job_type, tags)
    run.finish()
    folders = list((job / "wandb").glob(f"offline-run-*-{first['id']}*"))
    assert len(folders) == 2  # one W&B run, two processes (a folder each)


def test_a_tag_the_resume_adds_joins_its_own_and_a_checkpoint_from_before_keeps_its_name(tmp_path, monkeypatch):
    """logger.wandb.tags=[...] on the resume's command line joins the recorded tags; the other loggers' records
    are their version and folder name alone; a checkpoint written before group, job type and tags were recorded
    (version and name) still resumes the run under its name."""
    from transformer_lab.run.loggers import build_loggers

    job = tmp_path / "sweep" / "1"
    cfg = compose_cfg(["data=modular", "data.p=11", "logger=[wandb,csv]"], output_dir=str(job))
    argv, task = ["-m", "data=modular", "data.p=7,11"], ["data=modular", "data.p=11"]
    recorded, first = first_process(monkeypatch, cfg, argv, Launch(task, True, tmp_path / "sweep"))
    assert set(recorded["csv"]) == {"version", "name"} and set(recorded["wandb"]) == {
        *("version", "name", "group", "job_type", "tags")
    }

    resume = launched(monkeypatch, RESUME, Launch([*RESUME, "logger.wandb.tags=[extended]"]))
    extended = compose_cfg(["data=modular", "data.p=11", "logger=[wandb,csv]", "logger.wandb.tags=[extended]"],
                           output_dir=str(job))  # fmt: skip
    loggers, _ = build_loggers(extended, recorded, resume)
    resumed = loggers["wandb"]._wandb_init
    assert (resumed["group"], resumed["job_type"]) == (str(tmp_path / "sweep"), "data.p=11")
    assert resumed["tags"] == ["model=gpt", "data=modular", "hardware=cpu", "data.p=11", "extended"]
    assert loggers["csv"].version == recorded["csv"]["version"]

    before = {"wandb": {"version": first["id"], "name": first["name"]}, "csv": recorded["csv"]}
    loggers, _ = build_loggers(cfg, before, resume)
    resumed = loggers["wandb"]._wandb_init
    assert (resumed["id"], resumed["name"], resumed["group"]) == (first["id"], first["name"], None)
