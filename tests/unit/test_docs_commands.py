"""The benchmark commands that README.md and experiments/*.md tell a reader to run take the options they
are shown with (a renamed option otherwise leaves a command that fails as written).

Here: the train.py and inference commands, composed here; tests/e2e/test_docs_commands.py has the rest."""

import functools
import re
import tempfile

import pytest

from helpers.docs import DOCS, train_commands
from helpers.runs import ROOT, compose_cfg
from transformer_lab.commands.cli import COMMANDS


def test_the_docs_show_train_commands():
    commands = {overrides for _, overrides, _ in train_commands()}
    assert {"model=t5 data=translation task=seq2seq", "experiment=shakespeare_char_cpu"} <= commands


@functools.cache
def checked(args: tuple[str, ...]) -> tuple[str, str | None]:
    """What composing and checking these overrides gives: ("ok", None), ("ConfigError", its message) or
    ("ConfigCompositionException", its message); once per worker for a command shown in several docs."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import ConfigCompositionException

    from transformer_lab.config.checks import validate
    from transformer_lab.config.classes import check_buildable
    from transformer_lab.errors import ConfigError

    with tempfile.TemporaryDirectory() as output_dir:
        try:
            with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):  # (lists combinations)
                cfg = compose("train", overrides=[f"paths.root_dir={ROOT}", f"paths.output_dir={output_dir}", *args])
                validate(cfg)
                check_buildable(cfg)
        except (ConfigError, ConfigCompositionException) as e:
            return type(e).__name__, str(e)
    return "ok", None


@pytest.mark.parametrize(("doc", "overrides", "error"), train_commands())
def test_train_commands_in_the_docs_compose_as_written(doc, overrides, error):
    """The command's config composes and passes every check made before a file is read: a renamed key or
    option, or a model, task and data that no longer fit, fail here. A multirun's sweeps are checked at
    their first value; its launcher and sweeper (plugins) are not composed."""
    import torch

    args = [o for o in overrides.split() if o not in ("-m", "--help", "--cfg", "job")]
    args = [o.split("=")[0] + "=" + o.split("=")[1].split(",")[0] if "=[" not in o else o for o in args]
    args = [o for o in args if not o.startswith(("hydra/", "hydra.sweeper", "hydra.launcher"))]
    if not torch.cuda.is_available():  # a GPU command's other checks, on the CPU (it composes as written)
        args = [re.sub(r"\bgpu\b", "cpu", o).replace("fp16", "bf16") if o.startswith("hardware=") else o for o in args]
    outcome, message = checked(tuple(args))
    if outcome == "ConfigError":
        assert error is not None, f"{doc}: python train.py {overrides}: {message}"
        assert message.startswith(error.rstrip(". ")), f"{doc}: python train.py {overrides}: {message}"
    elif outcome == "ConfigCompositionException":  # (its one line as train.py prints it: e2e/test_documented_errors.py)
        assert error is not None, f"{doc}: python train.py {overrides} does not compose: {message}"
    else:
        assert error is None, f"{doc}: python train.py {overrides} is shown to fail with: {error}"


INFERENCE = re.compile(r"python -m transformer_lab (\w+)((?: +[^\s`#\\|<>]+)*)")


def inference_options() -> list[tuple[str, str, str]]:
    """(doc, command, option) for every key=value or --flag written after a `python -m transformer_lab CMD`
    in the docs (the paths aside)."""
    found = []
    for doc in DOCS:
        for command, rest in INFERENCE.findall(doc.read_text()):
            if command not in COMMANDS:  # (`train`: train.py's overrides, composed by train_commands; COMMAND)
                continue
            words = [w for w in rest.split() if "/" not in w.split("=")[0]]
            found += [(doc.name, command, w.split("=")[0]) for w in words if "=" in w or w.startswith("--")]
    return sorted(set(found))


def test_the_docs_show_inference_commands():
    assert {command for _, command, _ in inference_options()} >= {"sample", "translate", "classify", "evaluate"}


@functools.cache
def task_configs():
    """The configs of the tasks whose keys evaluate's overrides may name (composed once per worker)."""
    return [compose_cfg([f"task={task}"]) for task in ("lm", "seq2seq")]


@pytest.mark.parametrize(("doc", "command", "option"), inference_options())
def test_inference_commands_in_the_docs_take_their_options(doc, command, option):
    """Each option shown is one the command has (its declared options: cli.Command), or for evaluate a config
    group or a config key of some task (evaluate's overrides). No --flag: every command takes key=value."""
    from transformer_lab.commands.cli import command as declared

    assert not option.startswith("-"), f"{doc}: {command} {option}: the commands take key=value, not flags"
    if command == "evaluate" and option not in declared("evaluate").options:
        from omegaconf import OmegaConf

        if not (ROOT / "conf" / option).is_dir():  # (a group: hardware=gpu)
            configs = task_configs()
            assert any(OmegaConf.select(cfg, option, default=KeyError) is not KeyError for cfg in configs), (
                f"{doc}: evaluate ... {option}= is no config key"
            )
    else:
        assert option in declared(command).options, f"{doc}: {command} has no {option}"
