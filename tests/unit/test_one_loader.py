"""One loader for every command: a checkpoint whose tensors do not fit the model as its code builds it now
(a parameter added to the model's class, one removed, a shape changed) is refused in the same one-line
message whether sample/attention (inference.load), export or evaluate/resume (check_state_fits) reads it;
and a path inside a run directory an overwrite=true was killed in puts the earlier run back first."""

import shutil

import pytest
import torch
from torch import nn

import transformer_lab.models.gpt as gpt
from helpers.runs import TINY, compose_cfg
from transformer_lab.api.run import load
from transformer_lab.config.compatibility import check_state_fits
from transformer_lab.errors import ConfigError, UserError
from transformer_lab.run.build import build, load_model
from transformer_lab.store.atomic import MANIFEST
from transformer_lab.store.checkpoint import checkpoint_of
from transformer_lab.store.rundir import LOCK, OVERWRITTEN

OVERRIDES = ["model=gpt", "data=modular", "data.p=11", *TINY, "logger=none", "task.sample.enabled=false"]
GPT = gpt.GPT


class Added(GPT):
    """The class with a parameter added since the checkpoint was written."""

    def __init__(self, config):
        super().__init__(config)
        self.temperature = nn.Parameter(torch.ones(1))


class Removed(GPT):
    """The class without its learned positions (and the final norm's weight) since."""

    def __init__(self, config):
        super().__init__(config)
        self.wpe = None
        self.ln_f = nn.Identity()


class Reshaped(GPT):
    """The class with one more position and another head size since."""

    def __init__(self, config):
        super().__init__(config)
        self.wpe = nn.Embedding(config.block_size + 1, config.n_embd)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size + 2, bias=False)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A run directory holding a tiny GPT's checkpoint, as train.py writes one (not trained: its weights
    as built; what is read here is its tensors' names and shapes)."""
    run = tmp_path_factory.mktemp("one_loader") / "run"
    cfg = compose_cfg(OVERRIDES, output_dir=str(run))
    _, _, task = build(cfg, OVERRIDES)
    (run / "checkpoints").mkdir(parents=True)
    checkpoint = {"state_dict": task.state_dict(), "global_step": 0}
    task.on_save_checkpoint(checkpoint)  # (its config, vocabulary and random generators, as a run saves them)
    torch.save(checkpoint, run / "checkpoints" / "best.ckpt")
    return run


def message(path, shape_of) -> str:
    """The message each command gives for a GPT checkpoint at `path` loaded by each class of this module
    (shape_of: {name: shape} of the checkpoint, for the shapes it names)."""
    tail = (
        f". Restore the model code it was written with, or start a new run from its weights with init_from={path} "
        "(the tensors that fit are loaded, the others initialised)"
    )
    return {
        Added: f"{path} holds tensors that do not fit the model as its code builds it now: "
        f"missing from the checkpoint (1): temperature{tail}",
        Removed: f"{path} holds tensors that do not fit the model as its code builds it now: "
        f"unexpected in it (2): ln_f.weight, wpe.weight{tail}",
        Reshaped: f"{path} holds tensors that do not fit the model as its code builds it now: of other shapes (2): "
        f"lm_head.weight {list(shape_of['lm_head.weight'])} in the checkpoint, "
        f"[{shape_of['lm_head.weight'][0] + 2}, 32] in the model, "
        f"wpe.weight {list(shape_of['wpe.weight'])} in the checkpoint, "
        f"[{shape_of['wpe.weight'][0] + 1}, 32] in the model{tail}",
    }


@pytest.fixture
def saved(run_dir):
    path = run_dir / "checkpoints" / "best.ckpt"
    state = torch.load(path, weights_only=True)["state_dict"]
    return path, {k.removeprefix("model."): tuple(v.shape) for k, v in state.items()}, state


def test_the_checkpoint_loads_into_the_class_it_was_written_with(saved):
    path, _, _ = saved
    model, meta = load_model(path.parent.parent)
    assert type(model) is GPT and not model.training and meta["config"]["model"]["n_embd"] == 32


@pytest.mark.parametrize("cls", [Added, Removed, Reshaped])
def test_a_changed_model_class_is_one_message_from_every_command(saved, tmp_path, monkeypatch, cls):
    from transformer_lab.commands.evaluate import evaluate
    from transformer_lab.commands.export import export

    path, shape_of, state = saved
    expected = message(path, shape_of)[cls]
    assert "\n" not in expected
    monkeypatch.setattr(gpt, "GPT", cls)  # (the checkpoint's model._target_ names it: the code as it is now)

    for what, call in [
        ("sample, translate, fill, classify", lambda: load(str(path), command="sample")),
        ("attention", lambda: load(str(path))),
        ("the loader", lambda: load_model(path)),
        ("export", lambda: export(path, tmp_path / "exported")),
    ]:
        with pytest.raises(UserError) as error:
            call()
        assert str(error.value) == expected, what
    assert not (tmp_path / "exported").exists()

    # evaluate and resume: the same message, of the setting that names the checkpoint
    with pytest.raises(ConfigError) as error:
        evaluate(str(path))
    assert str(error.value) == f"ckpt_path: {expected}"
    cfg = compose_cfg(OVERRIDES, output_dir=str(tmp_path / "resumed"))
    _, _, task = build(cfg, OVERRIDES)
    shapes = {k: tuple(v.shape) for k, v in state.items()}
    meta = torch.load(path, weights_only=True)["transformer_lab"]
    with pytest.raises(ConfigError) as error:
        check_state_fits(str(path), shapes, meta["config"], cfg, task)
    assert str(error.value) == f"ckpt_path: {expected}"


def test_a_setting_that_changes_a_shape_is_named_with_the_tensors(saved, tmp_path):
    path, shape_of, state = saved
    meta = torch.load(path, weights_only=True)["transformer_lab"]
    cfg = compose_cfg([*OVERRIDES, "data.p=13"], output_dir=str(tmp_path / "resumed"))
    _, _, task = build(cfg, OVERRIDES)
    with pytest.raises(ConfigError) as error:
        check_state_fits(str(path), {k: tuple(v.shape) for k, v in state.items()}, meta["config"], cfg, task)
    text = str(error.value)
    assert text.startswith(f"ckpt_path: {path} holds tensors that do not fit the model as its code builds it now: ")
    assert f"lm_head.weight {list(shape_of['lm_head.weight'])} in the checkpoint, [" in text
    assert "settings that differ from the checkpoint's run: data.p=13 (the checkpoint's: 11)" in text
    assert text.endswith(
        f". Change those settings back, or start a new run from its weights with init_from={path} (the tensors "
        "that fit are loaded, the others initialised)"
    )


def killed_overwrite(run_dir, tmp_path):
    """A copy of the run as a kill -9 during overwrite=true's set-aside leaves it: the earlier run's files in
    .overwritten/, nothing of them at the top, the lock file of the process that died."""
    run = tmp_path / "run"
    (run / OVERWRITTEN).mkdir(parents=True)
    shutil.copytree(run_dir / "checkpoints", run / OVERWRITTEN / "checkpoints")
    (run / OVERWRITTEN / MANIFEST).write_text("checkpoints\n")  # (the first thing set aside: it makes the folder ours)
    (run / LOCK).write_text("999999\n")
    return run


def tree(run):
    return {p.relative_to(run).as_posix(): p.stat().st_mtime_ns for p in sorted(run.rglob("*"))}


@pytest.mark.parametrize("given", ["checkpoints/best.ckpt", "checkpoints", "."])
@pytest.mark.parametrize("writer", [False, True])
def test_a_run_an_overwrite_set_aside_is_read_where_it_is_and_left_alone(run_dir, tmp_path, given, writer):
    """Killed during overwrite=true's set-aside (or its overwrite under way: another process holds the lock): the
    loader reads the earlier run in .overwritten/ by the path a user knows it by, and changes nothing."""
    import fcntl
    import os

    run = killed_overwrite(run_dir, tmp_path)
    before, fd = tree(run), os.open(run / LOCK, os.O_RDWR)
    if writer:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # (an open file description of its own: another writer)
    try:
        model, meta = load_model(run / given)
        assert type(model) is GPT and meta["config"]["data"]["name"] == "modular"
        assert checkpoint_of(run / given) == run / OVERWRITTEN / "checkpoints" / "best.ckpt"
        loaded = load(str(run / given))
        assert type(loaded.model) is GPT and not loaded.model.training
        assert tree(run) == before and (run / LOCK).read_text() == "999999\n"
    finally:
        os.close(fd)


def test_a_model_settings_class_changed_since_is_one_line_from_every_command(saved, tmp_path, monkeypatch):
    """A field of the settings class renamed since (n_embd -> width): the loader names the settings the checkpoint
    holds that the class has no longer, instead of the dataclass's TypeError."""
    import dataclasses

    from transformer_lab.commands.export import export

    path, _, _ = saved
    fields = [(f.name if f.name != "n_embd" else "width", f.type, f) for f in dataclasses.fields(GPT.config_class)]
    Renamed = dataclasses.make_dataclass(  # noqa: N806
        "RenamedConfig",
        [(n, t, dataclasses.field(default=f.default, default_factory=f.default_factory)) for n, t, f in fields],
    )
    monkeypatch.setattr(gpt, "GPT", type("GPT", (GPT,), {"config_class": Renamed}))
    for call in (
        lambda: load(str(path), command="sample"),
        lambda: load_model(path),
        lambda: export(path, tmp_path / "out"),
    ):
        with pytest.raises(UserError) as error:
            call()
        assert str(error.value).startswith(f"{path} holds settings its model's class no longer has: model.n_embd (")
        assert str(error.value).endswith(f"start a new run from its weights with init_from={path}")


@pytest.mark.parametrize("signum, code", [("SIGTERM", 143), ("SIGINT", 130)])
def test_evaluate_stopped_by_a_signal_exits_with_its_code_not_success(saved, tmp_path, monkeypatch, signum, code):
    """Lightning catches both signals while it validates and returns (SIGTERM) or exits 1 (Ctrl-C): the command
    says it was stopped, with the signal's exit code, and writes no eval.json."""
    import os
    import signal

    import lightning as L

    from transformer_lab.commands import cli
    from transformer_lab.tasks.lm import LanguageModelTask as Task

    source, _, _ = saved
    checkpoint = torch.load(source, weights_only=True)  # (as Lightning writes one: its version among the keys)
    path = tmp_path / "run" / "checkpoints" / "best.ckpt"
    path.parent.mkdir(parents=True)
    torch.save({**checkpoint, "pytorch-lightning_version": L.__version__}, path)
    validation_step = Task.validation_step

    def stopped(self, *args, **kwargs):
        os.kill(os.getpid(), getattr(signal, signum))
        return validation_step(self, *args, **kwargs)

    monkeypatch.setattr(Task, "validation_step", stopped)
    with pytest.raises(SystemExit) as exited:
        cli.run_command("evaluate", [str(path)])
    assert exited.value.code == code
    assert not (path.parent / "eval.json").exists()
