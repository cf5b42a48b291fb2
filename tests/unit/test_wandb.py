"""Offline W&B runs, read back from their files: name, group and tags, the resolved config, the history.

Here: the job type and tags; tests/e2e/test_wandb.py has the rest."""


def test_a_sweeps_varied_settings_without_seeds_are_its_jobs_job_type():
    from transformer_lab.run.loggers import swept

    overrides = ["data=modular", "optim.lr=0.003", "seed=1", "data.seed=4", "trainer.max_steps=50"]
    argv = ["-m", "data=modular", "optim.lr=1e-3,3e-3", "seed=range(3)", "data.seed=4,5", "trainer.max_steps=50"]
    assert swept(overrides, argv, None) == ["optim.lr=0.003"]  # seeds are a configuration's repeats
    assert swept(overrides, ["-m", "model.n_layer=[1,2]"], {"trainer.max_steps": "choice(50, 100)"}) == [
        "trainer.max_steps=50"  # a list value is no sweep; the sweeper's params are
    ]


def test_a_job_type_w_and_b_cannot_take_is_left_out_and_tags_are_each_once(monkeypatch):
    from omegaconf import OmegaConf

    from transformer_lab.run import loggers

    class Hydra:
        overrides = OmegaConf.create(
            {"task": ["model=gpt", "optim.lr=0.00054846122550776511234567890123456789012345678901234567890"]}
        )
        mode = loggers.RunMode.MULTIRUN
        sweep = OmegaConf.create({"dir": "multirun/x"})
        sweeper = OmegaConf.create({"params": {"optim.lr": "interval(1e-4, 1e-2)"}})
        runtime = OmegaConf.create({"choices": {"hardware": "cpu"}})

    monkeypatch.setattr(loggers.sys, "argv", ["train.py", "-m", "model=gpt,bert"])
    cfg = OmegaConf.create({"model": {"name": "gpt"}, "data": {"name": "modular"}})
    identity = loggers.wandb_identity(cfg, OmegaConf.create({"name": None, "group": None, "tags": []}), Hydra)
    assert identity["job_type"] is None  # over W&B's 64 characters: a trial of its own, grouping nothing
    assert identity["tags"] == ["model=gpt", "data=modular", "hardware=cpu"]  # the swept model=gpt once
