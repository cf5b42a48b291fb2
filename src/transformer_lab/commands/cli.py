"""One grammar for every command on runs: `python -m transformer_lab COMMAND [PATH ...] [key=value ...]`.

A command declares its paths (a run directory or checkpoint; several for compare), its options with their
defaults, and whether other keys are the run's config overrides (evaluate). Everything after the command
is parsed here: words without `=` are the paths, in order; `key=value` sets an option (its value read as
YAML: numbers, true/false, null, [a, b]; a text option's stays text; a list option also takes a,b); any
other key is refused naming the options, unless the command passes it to the run's config (a path holding
`=` is a word when it holds a `/`: `./lr=0.1`). `--help`
prints the command's page and its options. A mistake is one `error:` line and exit code 2.
"""

from __future__ import annotations

import difflib
import importlib
import os
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from transformer_lab.errors import UserError, exit_on_user_error

PROG = "python -m transformer_lab"


@dataclass
class Command:
    name: str
    doc: str  # its page: the module's docstring
    options: dict  # key -> default (a list default: a list option)
    run: Callable[[dict], Iterable[str] | None]  # the parsed options -> the lines to print, as they come
    paths: tuple[str, ...] = ("ckpt",)  # the options the words without `=` fill, in order ("paths": all of them)
    text: tuple[str, ...] = ()  # options whose values stay text
    overrides: bool = False  # other key=value go to the run's config (options["overrides"])
    minimums: dict = field(default_factory=dict)
    nullable: tuple[str, ...] = ()


# The commands, each in its own module (its COMMAND); train is `python train.py` (README).
COMMANDS = ("evaluate", "sample", "translate", "fill", "classify", "answer", "attention", "export", "compare")


def command(name: str) -> Command:
    return importlib.import_module(f"transformer_lab.commands.{name}").COMMAND


def parse(argv: list[str], cmd: Command) -> dict:
    """The options of a command line, checked against the command's declaration."""
    given: dict = {}
    overrides: list[str] = []
    words = []
    for item in argv:
        key, sep, value = item.partition("=")
        if not sep or key.startswith("-") or "/" in key or (key not in cmd.options and Path(item).exists()):
            words.append(item)  # a path (a sweep's `lr=0.1,seed=0` folder too, where it exists)
            continue
        if key in cmd.options and key not in given:
            text = key in cmd.text or (key in cmd.paths and not isinstance(cmd.options[key], list))
            given[key] = value if text else _value(key, value, cmd.options[key])
        elif key in given:
            raise UserError(f"{key} is given twice")
        else:
            close = difflib.get_close_matches(key, cmd.options, 1, 0.75)
            if cmd.overrides and ("." in key or not close):
                overrides.append(item)  # (a key of the run's config; one a letter away from an option is that option's)
                continue
            maybe = f" (did you mean {close[0]}?)" if close else ""
            raise UserError(f"unknown option {key!r}{maybe}; {cmd.name} takes: {', '.join(cmd.options)} (--help)")
    for word in words:
        if word.startswith("-"):
            raise UserError(f"unknown flag {word!r}: options are key=value; {cmd.name} takes: {', '.join(cmd.options)}")
    if cmd.paths == ("paths",):
        if "paths" not in given:
            given["paths"] = words
        elif words:
            raise UserError(f"paths given twice: {' '.join(words)} and paths={given['paths']}")
    else:
        free = [p for p in cmd.paths if p not in given]
        if len(words) > len(free):
            extra = words[len(free) :]
            taken = [p for p in cmd.paths if p in given]
            why = f"{taken[0]}= is given too" if taken else f"{PROG} {cmd.name} --help"
            raise UserError(f"expected key=value, got {extra[0]!r} ({why})")
        given.update(zip(free, words))
    if cmd.overrides:
        given["overrides"] = overrides
    return given


def _value(key: str, text: str, default):
    """An option's value from its text: YAML, and a list option's `a,b` as [a, b]."""
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        raise UserError(f"{key}={text}: not a value (YAML: a number, true/false, null, text or [a, b])") from None
    if isinstance(value, bool) and text.lower() not in ("true", "false"):
        value = text  # (YAML 1.1's yes/no/on/off: only true and false are booleans here, as in Hydra)
    if isinstance(value, str) and isinstance(default, (int, float)) and not isinstance(default, bool):
        try:
            value = float(text) if not isinstance(default, int) or not float(text).is_integer() else int(float(text))
        except ValueError:
            pass  # (refused by the command's check, naming the key)
    if isinstance(default, list):
        if isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        if value is None:
            value = []
        if not isinstance(value, list) or not all(isinstance(v, (str, int, float)) for v in value):
            raise UserError(f"{key}: must be a list (a,b or [a, b]), got {text!r}")
        value = [str(v) for v in value]
    return value


def print_help(cmd: Command) -> None:
    print(cmd.doc.strip())
    print("\noptions (key=value) and their defaults:")
    for key, default in cmd.options.items():
        shown = "RUN_DIR_OR_CKPT (or the first word)" if key == "ckpt" else repr(default)
        print(f"  {key}={shown}")
    if cmd.overrides:
        print("  any other key=value: the run's config (its overrides, as train.py takes them)")


def run_command(name: str, argv: list[str] | None = None) -> int:
    """A command's main: --help, or its options parsed and each line it gives printed as soon as it comes. Ctrl-C
    (from the imports on) is one line and exit code 130, SIGTERM exit code 143: what was printed stands, and what
    was being written goes (store/atomic.py: the one writer's temporaries are removed on the way out)."""
    from transformer_lab.store.rundir import stop_on_sigterm

    stop_on_sigterm()
    try:
        cmd = command(name)
        argv = list(sys.argv[1:] if argv is None else argv)
        if {"-h", "--help"} & set(argv):
            print_help(cmd)
            return 0
        with exit_on_user_error():
            try:
                for line in cmd.run(parse(argv, cmd)) or ():
                    print(line, flush=True)
            except BrokenPipeError:  # (`| head`: the reader has what it wanted)
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except KeyboardInterrupt:
        print(f"{name}: interrupted", file=sys.stderr, flush=True)
        sys.exit(130)
    return 0


def usage() -> str:
    lines = [f"usage: {PROG} COMMAND [RUN ...] [key=value ...]   ({PROG} COMMAND --help: its options)", ""]
    lines.append("commands:")
    for name in COMMANDS:
        first = " ".join(command(name).doc.strip().split("\n\n")[0].split())
        summary = first.split(": ")[0].split(". ")[0].rstrip(".")
        lines.append(f"  {name:<10} {summary}")
    lines.append(f"  {'train':<10} python train.py's: [group=option ...] [key=value ...] (README.md)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return
    name, rest = argv[0], argv[1:]
    if name == "help":  # `help COMMAND`: its --help
        name, rest = (rest[0], ["--help"]) if rest else ("--help", [])
        if name == "--help":
            print(usage())
            return
    if name == "train":
        train_script(rest)
    elif name not in COMMANDS:
        print(f"error: no command {name!r}; commands: {', '.join(COMMANDS)}, train", file=sys.stderr)
        sys.exit(2)
    else:
        run_command(name, rest)


def train_script(argv: list[str]) -> None:
    """`train ARGS`: the repository's train.py with these arguments, as `python train.py ARGS` runs it."""
    import runpy

    from transformer_lab.config.schema import CONF

    script = CONF.parent / "train.py"
    if not script.is_file():
        print(f"error: train: no train.py beside {CONF} (an installed copy without its repository)", file=sys.stderr)
        sys.exit(2)
    sys.argv = [str(script), *argv]
    runpy.run_path(str(script), run_name="__main__")
