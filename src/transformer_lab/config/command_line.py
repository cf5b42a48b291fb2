"""The train command's line, checked before and after Hydra composes it: Hydra's overrides as text (`key=value`,
`+key=value`, `~key`), what Hydra would not check itself (an output directory that cannot be made, a search path
that is not there, a section deleted or given a value), and what it could not compose (a key, an option, a YAML
that is not YAML), each as one line. Light enough to run before torch is imported."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from transformer_lab.config.schema import CONF, RunConfig
from transformer_lab.errors import UserError, first_line
from transformer_lab.store.atomic import unmakeable
from transformer_lab.store.origins import override_key

# Hydra's flags that take a value (`--cfg job`): the value is no override
FLAGS_WITH_VALUE = ("--cfg", "-c", "--package", "-p", "--config-path", "-cp", "--config-name", "-cn",
                    "--config-dir", "-cd", "--experimental-rerun")  # fmt: skip


def command_overrides(argv: list[str]) -> list[str]:
    """The overrides of a train.py command line: its words less Hydra's flags and their values."""
    overrides, skip = [], False
    for argument in argv:
        if skip:
            skip = False
        elif argument.startswith("-"):
            skip = argument in FLAGS_WITH_VALUE
        else:
            overrides.append(argument)
    return overrides


def searchpath_problem(overrides: list[str]) -> str | None:
    """A hydra.searchpath folder that is not there (Hydra passes over it, and its options go missing)."""
    from transformer_lab.errors import UserError
    from transformer_lab.store.origins import recorded_searchpath

    try:
        recorded_searchpath(overrides, None)
    except UserError as e:
        return str(e)
    return None


def output_dir_problem(argv: list[str]) -> str | None:
    """Why the run directory cannot be created, checked before Hydra tries (its failure is a traceback)."""
    dirs = [
        (key.lstrip("+~"), value)
        for key, _, value in (a.partition("=") for a in argv)
        if key.lstrip("+~") in ("hydra.run.dir", "hydra.sweep.dir")
    ]
    for key, value in dirs or [("hydra.run.dir", "outputs")]:
        if value.strip().strip("'\"") == "":  # (Hydra would take the working folder, and the run would write there)
            return f"{key} is empty: name the folder the run writes in, e.g. {key}=outputs/NAME"
        folder = Path(value.split("${")[0] or ".")
        if "${" not in value and folder.is_dir():
            continue  # (there already: whether this run may write in it is its claim's to say, store/rundir.py)
        existing, why = unmakeable(folder)
        if why == "is a file":
            return f"{key}={value}: cannot create the run directory, {existing} is a file"
        if why is not None:
            return f"{key}={value}: cannot create the run directory in {existing} ({why})"
    return None


def sweep_dir_problem(sweep_dir: str | None) -> str | None:
    """A multirun's hydra.sweep.dir (as its first job composes it: the command line's, a preset's or the default)
    that holds another sweep (its multirun.yaml, which Hydra's sweeper would write over, its jobs' folders beside
    the new ones) or a single run: named before anything is written."""
    if not sweep_dir or not Path(sweep_dir).is_dir():
        return None
    folder = Path(sweep_dir)
    if (folder / "multirun.yaml").is_file():
        held = "another sweep (its multirun.yaml)"
    elif any((folder / name).exists() for name in ("summary.json", "checkpoints", ".hydra")):
        held = "a run"
    else:
        return None
    return (
        f"hydra.sweep.dir={sweep_dir} holds {held}: choose another hydra.sweep.dir (a job of a sweep resumes alone: "
        f"python train.py ckpt_path=last hydra.run.dir={sweep_dir}/N)"
    )


def given_key(key: str, overrides: list[str]) -> tuple[str, list[str]]:
    """The whole key OmegaConf's error names, and the overrides that set it. A dict-valued override
    (`optim={muon_lrr: 0.1}`) is merged into its section, and OmegaConf names the key inside it alone."""
    culprits = [
        o
        for o in overrides
        if override_key(o) == key
        or override_key(o).startswith(key + ".")  # (task.sample.top_k=5 where task has no sample)
        or (key.startswith(override_key(o) + ".") and o.partition("=")[2].lstrip().startswith("{"))
    ]
    if culprits:
        return key, culprits
    from hydra.core.override_parser.overrides_parser import OverridesParser

    for override in overrides:
        try:
            value = OverridesParser.create().parse_override(override).value()
        except Exception:  # noqa: BLE001  (not one Hydra parses: not this one)
            continue
        if isinstance(value, dict) and key.split(".")[0] in value:
            return f"{override_key(override)}.{key}", [override]
    return key, []


def unreadable_config(error: BaseException, config_dir: str, overrides: list[str]) -> str | None:
    """A YAML file among the config groups (ours and hydra.searchpath's) that is not UTF-8 text or not YAML, named
    with its line: Hydra's error is a traceback of the YAML parser's, or says only which byte it could not decode."""
    import yaml

    from transformer_lab.store.files import decode_text
    from transformer_lab.store.origins import recorded_searchpath

    chain, cause = [], error
    while cause is not None and len(chain) < 20:
        chain.append(cause)
        cause = cause.__cause__ or cause.__context__
    if not any(isinstance(e, (UnicodeDecodeError, yaml.YAMLError)) for e in chain):
        return None
    for e in chain:  # (the parser names the file it read where Hydra handed it one)
        mark = getattr(e, "problem_mark", None)
        if mark is not None and Path(str(mark.name)).is_file():
            return f"{mark.name}:{mark.line + 1}: is not YAML ({getattr(e, 'problem', None) or first_line(e)})"
    folders = [Path(config_dir)]
    for override in recorded_searchpath(overrides, None):
        entries = (e.strip().strip("'\"") for e in override.partition("=")[2].strip("[]").split(","))
        folders += [Path(e.removeprefix("file://")) for e in entries if e.startswith("file://")]
    for folder in folders:
        for path in sorted(folder.rglob("*.yaml")):
            try:
                yaml.safe_load(decode_text(path.read_bytes(), path))
            except UserError as e:
                return str(e)
            except yaml.YAMLError as e:
                mark = getattr(e, "problem_mark", None)
                where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
                return f"{where}: is not YAML ({getattr(e, 'problem', None) or first_line(e)})"
            except OSError:
                continue
    return None


# What a run needs of the config at its top: conf/train.yaml's groups and sections, and its own keys.
NEEDED = ("model", "data", "task", "hardware", "logger", "callbacks", "paths", "trainer", "optim")


SECTIONS_OF_SETTINGS = ("trainer", "optim")  # sections, not groups: set their keys, they have no options


def optimizers() -> list[str]:
    import typing

    from transformer_lab.config.schema import OptimConfig

    return list(typing.get_type_hints(OptimConfig)["name"].__members__)


def launcher_problem(argv: list[str], overrides: list[str]) -> str | None:
    """A launcher chosen or set for a single run, which Hydra ignores (it launches a multirun's jobs): the run
    would go on as if it were not there (`hydra/launcher=parallel` without -m)."""
    if {"-m", "--multirun"} & set(argv):
        return None
    for override in overrides:
        if override.lstrip("+~").startswith(("hydra/launcher", "hydra.launcher.")):
            return f"{override}: a launcher runs the jobs of a multirun; add -m (python train.py -m ...)"
    return None


def section_problem(overrides: list[str]) -> str | None:
    """An override that deletes what a run needs (`~optim`, `~seed`) or gives a section of settings one value
    (`optim=muon`, `trainer=null`): told before Hydra composes it (its errors are tracebacks then)."""
    own = [f.name for f in dataclasses.fields(RunConfig) if f.name not in NEEDED]
    for override in overrides:
        key, sep, value = override.partition("=")
        name = key.lstrip("+~")
        if key.startswith("~") and name in (*NEEDED, *own):
            if (CONF / name / "none.yaml").is_file():
                instead = f"{name}=none"
            elif (CONF / name).is_dir():
                instead = f"choose one ({name}=OPTION)"
            else:
                instead = f"set its keys ({name}.KEY=VALUE)" if name in NEEDED else f"give {name}=VALUE"
            what = "setting" if name in own else "section"
            return f"{override}: a run needs its {name} {what}; {instead} instead"
        if sep and name in SECTIONS_OF_SETTINGS and not value.strip().startswith("{"):
            named = value in optimizers() if name == "optim" else False
            example = f"{name}.name={value}" if named else f"{name}.KEY=VALUE"
            return f"{override}: {name} is a section of settings, not an option: set its keys, e.g. {example}"
    return None


def added_setting(key: str, composed: DictConfig) -> str:
    """For a key of a user's own model, data or task section (one without our schema): how to give a setting of
    its class that its YAML leaves out."""
    from transformer_lab.config.schema import SETTINGS

    section = key.split(".")[0]
    target = OmegaConf.select(composed, f"{section}._target_", default=None)
    if section not in ("model", "data", "task") or target is None or target in SETTINGS or key.count(".") != 1:
        return ""
    return f" (a setting of {target} that its YAML leaves out is given with +{key}=VALUE, or listed in the YAML)"


def task_having(key: str, composed: DictConfig) -> str:
    """For a task.* key the run's task lacks, or a task's section given at the top (`sample.*`, `decode.*`,
    where they were before the task group): the tasks whose settings have it."""
    import dataclasses

    from transformer_lab.config.schema import TASKS

    section, _, name = key.partition(".")
    at_top = section != "task" and not name
    name = section if at_top else name
    having = [
        t for t, (_, settings) in TASKS.items() if name.split(".")[0] in {f.name for f in dataclasses.fields(settings)}
    ]
    if not having or not (at_top or section == "task"):
        return ""
    tasks = f"task={' and task='.join(having)}"
    return (
        f" (task.{name} is a setting of {tasks})"
        if at_top
        else f" (a setting of {tasks}; this run's is task={composed.task.name})"
    )
