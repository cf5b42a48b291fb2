"""One path from `python train.py` to `Trainer.fit`: the config is composed by Hydra alone, validated once, and
its data module and each callback built once (README: "Where to read the code first"), for a new run and for a resumed one
(whose config is composed again, from its checkpoint's overrides: that is what resuming is). Hydra's
@main composes the command line twice itself (once to tell a run from a multirun, once to run it)."""

import collections
import sys

from helpers.runs import TINY, run_train


def counted_run(monkeypatch, *overrides):
    """train.py's run (as `__main__`, in this process), with the steps counted: Hydra's compositions and ours
    (its public compose()), validate() wherever it is bound, the data modules built, and what Hydra instantiates
    (the callbacks: `instantiated`, by class)."""
    import hydra
    import hydra._internal.config_loader_impl as loader
    import hydra.utils

    import transformer_lab.config.checks as checks
    import transformer_lab.data.base as base

    calls = collections.Counter()

    def counted(name, function):
        def wrapper(*args, **kwargs):
            calls[name] += 1
            return function(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(
        loader.ConfigLoaderImpl, "load_configuration", counted("composed", loader.ConfigLoaderImpl.load_configuration)
    )
    monkeypatch.setattr(hydra, "compose", counted("compose", hydra.compose))
    validate, counted_validate = checks.validate, counted("validate", checks.validate)
    for module in list(sys.modules.values()):  # (run/prepare.py has it by name, imported before this test)
        if module is not None and getattr(module, "validate", None) is validate:
            monkeypatch.setattr(module, "validate", counted_validate)
    monkeypatch.setattr(base.DataSource, "__init__", counted("datamodule", base.DataSource.__init__))
    instantiated, instantiate = collections.Counter(), hydra.utils.instantiate

    def counted_instantiate(config, *args, **kwargs):
        instantiated[str(config.get("_target_"))] += 1
        return instantiate(config, *args, **kwargs)

    monkeypatch.setattr(hydra.utils, "instantiate", counted_instantiate)
    result = run_train(*overrides)
    assert result.returncode == 0, result.stderr[-3000:]
    assert len(instantiated) >= 5 and set(instantiated.values()) == {1}, instantiated  # (each callback once)
    return dict(calls)


def test_a_run_composes_validates_and_builds_its_data_once(tmp_path, monkeypatch):
    run = ["data=modular", "data.p=11", *TINY, "logger=none", "trainer.val_check_interval=5"]
    calls = counted_run(monkeypatch, *run, "trainer.max_steps=5", f"hydra.run.dir={tmp_path}")
    assert calls == {"composed": 2, "validate": 1, "datamodule": 1}  # (Hydra's two; none of ours)
    # a resume: the checkpoint's overrides composed with and without this command's (their difference is what
    # it changes of the checkpoint's config: run/resume.py), checked once
    calls = counted_run(monkeypatch, *run, "trainer.max_steps=10", "ckpt_path=last", f"hydra.run.dir={tmp_path}")
    assert calls == {"composed": 4, "compose": 2, "validate": 1, "datamodule": 1}
