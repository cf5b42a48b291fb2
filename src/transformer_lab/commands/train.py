"""`python train.py`'s command line, around Hydra: what is checked before Hydra composes it (an output directory
that cannot be made, a search path that is not there, a resume's own data/model/task options), `--help`, and
what Hydra could not compose or a sweep ended with, each told in one `error:` line (exit 2; failed trials 1).
The root train.py is `@hydra.main` and one call of `command_line`; `in_this_process` is the same command line run in
the caller's process (`transformer_lab.train`, docs/python.md)."""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import io
import logging
import os
import re
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from omegaconf import OmegaConf, open_dict

from transformer_lab.config.checks import no_such_key
from transformer_lab.config.command_line import (
    added_setting,
    command_overrides,
    given_key,
    launcher_problem,
    output_dir_problem,
    searchpath_problem,
    section_problem,
    sweep_dir_problem,
    task_having,
    unreadable_config,
)
from transformer_lab.config.schema import CONF
from transformer_lab.errors import UserError, first_line
from transformer_lab.run.main import Trials

if TYPE_CHECKING:
    from transformer_lab.api.run import Run


MULTIRUN = {"-m", "--multirun"}
SINGLE_STOPPED = "interrupted (Ctrl-C) before training started: nothing was trained"
# (a job that was training stopped as a run does, with its last checkpoint; the launcher says which never started)
MULTIRUN_STOPPED = (
    "interrupted (Ctrl-C): the sweep stopped; a job that had trained resumes from its last checkpoint "
    "(python train.py ckpt_path=last hydra.run.dir=SWEEP_DIR/N); those not started did not run"
)


def command_line(app: Callable[[Trials], None], argv: list[str], process_ends: bool = True) -> None:
    """The train command: `app(trials)` runs Hydra's app (the root train.py's), each of its jobs noted in `trials`.
    A mistake is one line and exit code 2, Ctrl-C before training exit code 130. process_ends: the process ends
    after the command (train.py), so what it leaves is never collected (below)."""
    arguments = multirun_first(with_resumed_choices(argv))  # (a resume's keys of its run's own data, model, task)
    sys.argv[1:] = arguments
    overrides = command_overrides(arguments)
    config_dir = str(CONF)
    if {"--help", "-h"} & set(arguments):
        try:
            print_help(config_dir, overrides)
        except Exception as error:
            if (problem := composition_problem(error, config_dir, overrides)) is None:
                raise
            print(f"error: {problem}", file=sys.stderr)
            sys.exit(2)
        sys.exit(0)
    if problem := (
        output_dir_problem(arguments)
        or searchpath_problem(overrides)
        or section_problem(overrides)
        or launcher_problem(arguments, overrides)
    ):
        print(f"error: {problem}", file=sys.stderr)
        sys.exit(2)
    if MULTIRUN & set(arguments) and (problem := first_job_problem(config_dir, overrides)):
        print(f"error: {problem}", file=sys.stderr)  # (before the sweeper writes anything: multirun.yaml)
        sys.exit(2)
    # What Hydra cannot compose, and what ends a sweep, come here (Hydra would print them in many lines), to be
    # told in one: whatever a user's shell sets (HYDRA_FULL_ERROR=0 makes Hydra print and exit 1 itself).
    os.environ["HYDRA_FULL_ERROR"] = "1"
    trials = Trials()
    try:
        app(trials)
    except KeyboardInterrupt:  # Ctrl-C before training took it over (callbacks/interrupt.py), or a sweep's
        print(MULTIRUN_STOPPED if MULTIRUN & set(arguments) else SINGLE_STOPPED, file=sys.stderr)
        sys.exit(130)
    except Exception as error:
        if (problem := composition_problem(error, config_dir, overrides)) is not None:
            print(f"error: {problem}", file=sys.stderr)
            sys.exit(2)
        if (problem := trials.problem(error)) is not None:
            print(f"error: {problem}", file=sys.stderr)  # failed trials, in one line
            sys.exit(1)
        if isinstance(error, ValueError) and not (trials.failed or trials.completed or raised_in_a_run(error)):
            print(f"error: {str(error).splitlines()[0]}", file=sys.stderr)  # Hydra's, on its flags (-m --cfg job)
            sys.exit(2)
        raise
    # The runs are over and their files closed. Python's exit would run its garbage collector over the
    # ~400k objects torch, Lightning and W&B leave behind, ~1 s of a process (experiments/shakespeare_char_cpu.md).
    if process_ends:
        gc.freeze()


def multirun_first(arguments: list[str]) -> list[str]:
    """-m (--multirun) wherever it was written, before the overrides: Hydra's parser reads its overrides up to its
    first flag, so `python train.py seed=0,1 -m lr=...` left it 'unrecognized arguments' and its usage text."""
    return [a for a in arguments if a in MULTIRUN] + [a for a in arguments if a not in MULTIRUN]


COMMAND_LINE_FLAGS = ("-m", "--multirun", "--help", "-h", "--hydra-help", "--cfg", "-c", "--info", "-i", "--run", "-r")


def in_this_process(*overrides: str, **keywords) -> Run:
    """`python train.py OVERRIDES` run in this process (a notebook's kernel, where torch and Lightning are imported
    already): the same command line, composed by Hydra, checked, claimed, recorded and trained by the same code
    (run/main.py), then the trained run loaded (api/run.py). A mistake is the command's one line, raised as a
    UserError instead of printed with an exit; Ctrl-C is a KeyboardInterrupt once the run has saved what it
    would on the command line. What the command changes of the process for its run (sys.argv, the environment,
    the signal handlers, the logging Hydra configures, Hydra's own state) is put back; torch's settings and
    seeds stay as the run left them, as after any training in a process."""
    import threading

    import hydra
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig

    from transformer_lab.api.run import load
    from transformer_lab.run.main import main

    words = list(overrides)
    if problem := words_problem(words, keywords):
        raise UserError(f"train: {problem}")
    if threading.current_thread() is not threading.main_thread():  # (Python lets no other thread take signals)
        raise UserError("train: call it from the main thread (Ctrl-C and SIGTERM stop a run through signal handlers)")
    start, run_dirs = time.time(), []

    @hydra.main(version_base="1.3", config_path=str(CONF), config_name="train")
    def task(cfg):
        run_dirs.append(Path(cfg.paths.output_dir))
        return main(cfg, start)

    errors, root = _Kept(sys.stderr), logging.getLogger()
    saved = (sys.argv, sys.stderr, root.handlers[:], root.level, dict(os.environ))
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    hydra_before, hydra_config_before = GlobalHydra.instance().hydra, HydraConfig.instance().cfg  # (a caller's)
    try:
        sys.argv, sys.stderr = ["train.py", *words], errors
        GlobalHydra.instance().clear()
        command_line(lambda trials: task(), words, process_ends=False)
    except SystemExit as exit:
        if exit.code == 130:
            raise KeyboardInterrupt from None
        if exit.code:
            raise UserError(
                errors.last or f"train: python train.py {' '.join(words)} exited with {exit.code}"
            ) from None
    finally:
        sys.argv, sys.stderr, handlers_before, level, environment = saved
        root.handlers[:] = handlers_before
        root.setLevel(level)
        for key in set(os.environ) - set(environment):  # (Lightning's seed variables, HYDRA_FULL_ERROR)
            del os.environ[key]
        os.environ.update(environment)
        for number, handler in handlers.items():
            signal.signal(number, handler)
        GlobalHydra.instance().clear()
        if hydra_before is not None:
            GlobalHydra.instance().initialize(hydra_before)
        HydraConfig.instance().cfg = hydra_config_before
    return load(run_dirs[-1])  # (a resume with nothing left to do: the run as it is)


def words_problem(words: list, keywords: dict) -> str | None:
    """What is wrong with train()'s arguments as the command line's words, or None."""
    example = 'train("data=modular", "model.n_layer=2")'
    if keywords:
        return f"overrides are words, one an argument: {example}; got the keyword {next(iter(keywords))}="
    if wrong := [w for w in words if not isinstance(w, str)]:
        return f"overrides are the command line's words (str), got {type(wrong[0]).__name__}"
    if flags := [w for w in words if w in COMMAND_LINE_FLAGS]:
        return f"{flags[0]} is the command line's (python train.py {flags[0]} ...); train() runs one run"
    for word in words:
        if re.search(r"\s[+~]?[A-Za-z_][\w.@/-]*=", word):  # ("data=modular model.n_layer=2": two in one)
            return f"one override an argument: {example}; got {word!r}"
        if "=" not in word and not word.startswith("~"):
            return f"{word!r} is no key=value override (train() takes the words after python train.py)"
    return None


class _Kept(io.TextIOBase):
    """A stream written through to another but for the command's `error: ` line, kept in `last` to be raised
    (print writes the line and its newline apart)."""

    def __init__(self, stream):
        self.stream, self.last, self.holding = stream, None, False

    def write(self, text: str) -> int:
        if text.startswith("error: "):
            self.last, self.holding = text.removeprefix("error: ").rstrip("\n"), not text.endswith("\n")
            return len(text)
        if self.holding and text == "\n":
            self.holding = False
            return len(text)
        self.holding = False
        return self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()

    def isatty(self) -> bool:
        return self.stream.isatty()

    def fileno(self) -> int:
        return self.stream.fileno()

    @property
    def encoding(self) -> str:
        return getattr(self.stream, "encoding", "utf-8")


def with_resumed_choices(arguments: list[str]) -> list[str]:
    """A resume's command line with its run's data, model and task options added before its own words, where
    it sets a key of one of those sections without choosing the option: Hydra composes the command line before
    the run is resumed, and `data.cache_dir=NEW` is a key of the run's data=text, not of the default data group.
    The options come from the run's record (RUN/.hydra/hydra.yaml); the resume checks them against its checkpoint."""
    given = dict(a.lstrip("+").split("=", 1) for a in command_overrides(arguments) if "=" in a)
    target = given.get("ckpt_path")
    if target in (None, "null"):
        return arguments
    run_dir = Path(given.get("hydra.run.dir", "")) if target == "last" else Path(target).parent.parent
    record = run_dir / ".hydra" / "hydra.yaml"
    sections = {key.split(".")[0] for key in given if "." in key}
    wanted = [group for group in ("data", "model", "task") if group in sections and group not in given]
    if not wanted or not record.is_file():
        return arguments
    try:
        choices = OmegaConf.load(record).hydra.runtime.choices
    except Exception:  # noqa: BLE001  (an unreadable record: the resume reads the checkpoint and says what is wrong)
        return arguments
    added = [f"{group}={choices[group]}" for group in wanted if choices.get(group)]
    return [*added, *arguments]


def user_error_inside(error: BaseException) -> UserError | None:
    """The UserError that `error` wraps (Hydra and OmegaConf re-raise what a resolver raised), if any."""
    while error is not None and not isinstance(error, UserError):
        error = error.__cause__ or error.__context__
    return error


def raised_in_a_run(error: BaseException) -> bool:
    """Whether `error` came out of a run (this module's `main`, which Hydra calls once it has composed the
    config), not out of Hydra's composition of the command line."""
    import traceback

    from transformer_lab.run import main

    return any(
        frame.name == main.main.__name__ and frame.filename == main.__file__
        for frame in traceback.extract_tb(error.__traceback__)
    )


def print_help(config_dir: str, overrides: list[str]) -> None:
    """`python train.py [key=value ...] --help`: the groups a command line selects from, their options, and
    the config those overrides compose. (Hydra's own help lists every group of its config store, the
    schemas among them, and takes seconds doing so.)"""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    defaults = OmegaConf.load(Path(config_dir) / "train.yaml").defaults
    groups = [next(iter(d)) for d in defaults if OmegaConf.is_dict(d) and next(iter(d)) != "hydra"]
    with initialize_config_dir(config_dir=config_dir, version_base="1.3"):
        cfg = compose("train", overrides=overrides, return_hydra_config=True)
        choices = cfg.hydra.runtime.choices
        # groups a chosen option's own defaults list selects (a model's task), listed after the model
        selected = [g for g in choices if "/" not in g and "@" not in g and g != "hydra" and g not in groups]
        at = groups.index("model") + 1 if "model" in groups else len(groups)
        groups[at:at] = selected
        loader = GlobalHydra.instance().config_loader()
        options = {group: loader.get_group_options(group, config_name="train", overrides=overrides) for group in groups}
    print("python train.py [group=option ...] [key=value ...]   (README.md; Hydra's own options: --hydra-help)\n")
    print("== Groups (group=option; the current choice in brackets) ==")
    for group in groups:
        chosen = choices.get(group)
        listed = [f"[{o}]" if o == chosen else o for o in options[group]]
        print(f"{group}: {', '.join(listed)}")
    print("\n== Config (key=value to change; this is it with the overrides given) ==")
    with open_dict(cfg):
        del cfg["hydra"]
    print(OmegaConf.to_yaml(cfg))


def first_job_problem(config_dir: str, overrides: list[str]) -> str | None:
    """What would make a sweep's first job (each swept key at its first value) fail or write over another sweep, as one
    line: Hydra composes a sweep's jobs only after its sweeper has made the sweep's directory and written
    multirun.yaml, so a mistyped swept key (`model.n_layr=1,2`) and a hydra.sweep.dir that holds a sweep or a run
    (given on the command line or by a preset) are told here first. Each further option of a swept config group
    (data=modular,text) is composed too: its keys are its own; a swept key's further values are set into the first
    job's config, whose schema refuses a wrong type (seed=1,abc). None where all compose, or where the sweep's values
    are not a list (Optuna's intervals)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
        first = [next(o.sweep_string_iterator()) if o.is_sweep_override() else None for o in parsed]
    except Exception:  # noqa: BLE001  (Hydra says what it cannot parse, as it runs)
        return None
    job = [o.input_line if value is None else f"{o.get_key_element()}={value}" for o, value in zip(parsed, first)]
    groups = [o for o in parsed if o.is_sweep_override() and (Path(config_dir) / o.key_or_group).is_dir()]
    jobs = [job] + [
        [*job[:i], f"{o.get_key_element()}={v}", *job[i + 1 :]]
        for i, o in enumerate(parsed)
        if o in groups
        for v in list(o.sweep_string_iterator())[1:]
    ]
    for words in jobs:
        try:
            with initialize_config_dir(config_dir=config_dir, version_base="1.3"):
                composed = compose("train", overrides=words, return_hydra_config=words is job)
                sweep_dir = str(composed.hydra.sweep.dir) if words is job else None
        except Exception as error:  # noqa: BLE001
            return composition_problem(error, config_dir, words)  # (which composes again to name the keys)
        if problem := sweep_dir_problem(sweep_dir):
            return problem
        if words is job:
            first_config = composed
    for o in parsed:  # a swept key's further values, set into the first job's config: its schema types them
        for value in list(o.sweep_iterator())[1:] if o.is_sweep_override() and o not in groups else ():
            try:
                OmegaConf.update(first_config, o.key_or_group, value, merge=True)
            except Exception as error:  # noqa: BLE001  (OmegaConf's refusal of the value: seed=1,abc)
                return f"{o.key_or_group}: {first_line(error)}"
    return None


def group_options(config_dir: str, group: str, overrides: list[str]) -> list[str] | None:
    """The options of a config group, the search path's too (Hydra names them for a group=option it cannot find,
    not for an option in a list of them: callbacks=[default,emaa])."""
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    searchpath = [o for o in overrides if o.split("=", 1)[0].lstrip("+") == "hydra.searchpath"]
    try:
        with initialize_config_dir(config_dir=config_dir, version_base="1.3"):
            loader = GlobalHydra.instance().config_loader()
            return loader.get_group_options(group, config_name="train", overrides=searchpath) or None
    except Exception:  # noqa: BLE001  (the search path itself is wrong: Hydra's own line then)
        return None


def composition_problem(error: BaseException, config_dir: str, overrides: list[str]) -> str | None:
    """What Hydra could not compose from the command line, as one line (Hydra's own is several, and tells
    to add an unknown key with `+`, which only defers the error); None for an error of another kind.
    What is wrong comes from the exceptions' own fields (Hydra's missing option and its group's options,
    OmegaConf's key), not from their text."""
    from hydra.errors import HydraException, MissingConfigException
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException

    if (mistake := user_error_inside(error)) is not None and not raised_in_a_run(error):
        return str(mistake)
    if (unreadable := unreadable_config(error, config_dir, overrides)) is not None:
        return unreadable  # ours, raised while Hydra composed or resolved (a resolver: config.tasks_per_node)
    if isinstance(error, MissingConfigException):  # data=imagenet; callbacks=[default,emaa]
        group, _, option = (error.missing_cfg_file or "").rpartition("/")
        options = error.options if error.options is not None else group_options(config_dir, group, overrides)
        if group and options:
            return f"{group}={option}: no such option; {group} has: {', '.join(options)}"
        return str(error).split("\n")[0]
    # A YAML's key its schema has not: a user's own option's (data=mine: data.pp), or a preset's for another
    # option (experiment=induction_heads model=bert: model.mlp). Hydra names the YAML in its text alone ("In
    # 'experiment/induction_heads': ..."); the key's error is its context, with the schema's class.
    inside, yaml = error.__context__, re.match(r"In '([^']+)/([^'/]+)'", str(error))
    if isinstance(inside, (ConfigKeyError, ConfigAttributeError)) and inside.full_key and yaml:
        section = inside.full_key.partition(".")[0]
        if chosen := [o for o in overrides if o.lstrip("+").partition("=")[0] == section != yaml[1]]:
            return (
                f"{yaml[1]}={yaml[2]} sets {inside.full_key}, which {chosen[-1]} does not have: the {yaml[1]} is "
                f"made for its own {section}; leave {chosen[-1]} out"
            )
        if yaml[1] == section and dataclasses.is_dataclass(inside.object_type):
            known = [f.name for f in dataclasses.fields(inside.object_type)]
            return f"{no_such_key(inside.full_key, known)} (in {section}={yaml[2]}'s YAML)"
    cause = error.__cause__ if isinstance(error.__cause__, OmegaConfBaseException) else None
    if cause is None or not cause.full_key:
        if raised_in_a_run(error) or not isinstance(error, (HydraException, OmegaConfBaseException)):
            return None  # (a run's own failure, or a sweep's end: not the command line's)
        return " ".join(line.strip() for line in str(error).split("\n") if line.strip())
    key, culprits = given_key(cause.full_key, overrides)
    if isinstance(cause, (ConfigKeyError, ConfigAttributeError)):  # a key the schema does not have
        from hydra import compose, initialize_config_dir
        from hydra.core.override_parser.overrides_parser import OverridesParser

        parent = key.rpartition(".")[0]
        rest = [o for o in overrides if o not in culprits]
        with contextlib.suppress(Exception):  # (a sweep's values compose one at a time: its keys are its first's)
            rest = [o.input_line for o in OverridesParser.create().parse_overrides(rest) if not o.is_sweep_override()]
        try:
            with initialize_config_dir(config_dir=config_dir, version_base="1.3"):  # (on this error only)
                composed = compose("train", overrides=rest, return_hydra_config=key.startswith("hydra."))
        except Exception:  # noqa: BLE001  (another override is wrong too: this one is told first)
            return f"{key}: no such key"
        known = OmegaConf.select(composed, parent, default=None) if parent else composed
        if parent == "data.model_defaults":  # (suggestions for the model's settings, which name what may go in)
            name = key.rpartition(".")[2]
            settings = [k for k in composed.model if k not in ("_target_", "name", "compile")]
            if name in settings:
                return f"{key}: not among this data's suggestions; add it with +{key}=VALUE"
            known = settings
        message = str(no_such_key(key, list(known) if OmegaConf.is_dict(known) or isinstance(known, list) else []))
        return message + task_having(key, composed) + added_setting(key, composed)
    return f"{key}: {str(cause).split(chr(10))[0]}"
