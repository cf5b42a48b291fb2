"""The train command's entry (the root train.py): Hydra composes the config and calls `main`, the task
function, for a single run and for each job of a multirun alike. Hydra has made the run's directory and
written nothing in it (conf/hydra/default.yaml: no record, no log file), so `main` checks the run first
(`prepare.prepare`: the one validation pass), claims the directory (rundir.py), then records the run there
(.hydra/, train.log) and trains it (train.run). The config is checked with OmegaConf and the settings
dataclasses before torch and Lightning load."""

from __future__ import annotations

import contextlib
import logging
import logging.handlers
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf, open_dict

from transformer_lab.atomic import MANIFEST
from transformer_lab.errors import UserError, exit_on_user_error, no_such_key
from transformer_lab.files import read_json
from transformer_lab.overrides import override_key
from transformer_lab.prepare import Prepared, build_run, prepare
from transformer_lab.rundir import (
    LOCK,
    check_claim,
    claim,
    earlier_run,
    first_process,
    record,
    release,
    stop_on_sigterm,
)

log = logging.getLogger(__name__)


def nothing_to_do(prepared: Prepared, run_dir: Path, key: str) -> bool:
    """A resume with nothing to do (its checkpoint at the step limit of a completed run), said so; else what
    the claim of its run directory would refuse is refused now, before the run builds anything."""
    from transformer_lab.resume import nothing_to_do

    if not first_process():
        return False
    cfg, resumed = prepared.cfg, prepared.resumed
    if resumed is not None and nothing_to_do(cfg, resumed):
        print(
            f"{resumed.path} is at step {resumed.step}, the run's trainer.max_steps={cfg.trainer.max_steps}, and "
            f"its run completed: nothing to do, {run_dir} is left as it is (a higher trainer.max_steps trains it "
            "further)",
            file=sys.stderr,
        )
        return True
    check_claim(run_dir, key, Path(resumed.path) if resumed else None, bool(cfg.get("overwrite")))
    return False


def remove_if_unused(run_dir: Path | None) -> None:
    """Removes a run directory Hydra made for this run that holds only the run's record, log and lock: a run
    refused, stopped or failed before training (what it wrote then was taken back: rundir.unwind), or with
    nothing to do; and the date folder above it, left empty (outputs/DATE/TIME)."""

    if (
        run_dir is not None
        and first_process()  # (the directory is the job's first process's to remove)
        and run_dir.is_dir()
        and {p.name for p in run_dir.iterdir()} <= {".hydra", "train.log", LOCK, MANIFEST}
    ):
        shutil.rmtree(run_dir, ignore_errors=True)
        for folder in (run_dir.parent, run_dir.parent.parent):  # (Hydra's default layout: outputs/DATE/TIME)
            if re.fullmatch(r"\d{4}-\d{2}-\d{2}|outputs|multirun", folder.name) and not any(folder.iterdir()):
                folder.rmdir()
            else:
                break


def unwind_claim(run_dir: Path) -> None:
    """A run that failed or was stopped before it trained: its directory goes back to what it was when claimed
    (rundir.unwind). Only the process that claimed the directory does it."""
    from transformer_lab.rundir import unwind

    if first_process():
        unwind(run_dir)


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


def searchpath_problem(overrides: list[str]) -> str | None:
    """A hydra.searchpath folder that is not there (Hydra passes over it, and its options go missing)."""
    from transformer_lab.errors import UserError
    from transformer_lab.origins import recorded_searchpath

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
        existing = Path(value.split("${")[0] or ".").absolute()
        while not existing.exists():
            existing = existing.parent
        if not existing.is_dir():
            return f"{key}={value}: cannot create the run directory, {existing} is a file"
        try:  # a trial folder, removed at once: os.access cannot tell for root or for /proc
            os.rmdir(tempfile.mkdtemp(dir=existing))
        except OSError as e:
            return f"{key}={value}: cannot create the run directory in {existing} ({e.strerror})"
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
    if isinstance(error, MissingConfigException):  # data=imagenet
        if error.missing_cfg_file and error.options is not None:
            group, _, option = error.missing_cfg_file.rpartition("/")
            return f"{group}={option}: no such option; {group} has: {', '.join(error.options)}"
        return str(error).split("\n")[0]
    cause = error.__cause__ if isinstance(error.__cause__, OmegaConfBaseException) else None
    if cause is None or not cause.full_key:
        if raised_in_a_run(error) or not isinstance(error, (HydraException, OmegaConfBaseException)):
            return None  # (a run's own failure, or a sweep's end: not the command line's)
        return " ".join(line.strip() for line in str(error).split("\n") if line.strip())
    key, culprits = given_key(cause.full_key, overrides)
    if isinstance(cause, (ConfigKeyError, ConfigAttributeError)):  # a key the schema does not have
        from hydra import compose, initialize_config_dir

        parent = key.rpartition(".")[0]
        rest = [o for o in overrides if o not in culprits]
        try:
            with initialize_config_dir(config_dir=config_dir, version_base="1.3"):  # (on this error only)
                composed = compose("train", overrides=rest)
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
    """A YAML file among the config groups (ours and hydra.searchpath's) that is not UTF-8 text, named with its
    line: Hydra's error says only which byte it could not decode."""
    from transformer_lab.files import decode_text
    from transformer_lab.origins import recorded_searchpath

    if not isinstance(user_error_inside(error) or error, UnicodeDecodeError) and not isinstance(
        error.__cause__ or error.__context__, UnicodeDecodeError
    ):
        return None
    folders = [Path(config_dir)]
    for override in recorded_searchpath(overrides, None):
        entries = (e.strip().strip("'\"") for e in override.partition("=")[2].strip("[]").split(","))
        folders += [Path(e.removeprefix("file://")) for e in entries if e.startswith("file://")]
    for folder in folders:
        for path in sorted(folder.rglob("*.yaml")):
            try:
                decode_text(path.read_bytes(), path)
            except UserError as e:
                return str(e)
            except OSError:
                continue
    return None


def user_error_inside(error: BaseException) -> UserError | None:
    """The UserError that `error` wraps (Hydra and OmegaConf re-raise what a resolver raised), if any."""
    while error is not None and not isinstance(error, UserError):
        error = error.__cause__ or error.__context__
    return error


def raised_in_a_run(error: BaseException) -> bool:
    """Whether `error` came out of a run (this module's `main`, which Hydra calls once it has composed the
    config), not out of Hydra's composition of the command line."""
    import traceback

    return any(
        frame.name == main.__name__ and frame.filename == __file__
        for frame in traceback.extract_tb(error.__traceback__)
    )


def added_setting(key: str, composed: DictConfig) -> str:
    """For a key of a user's own model, data or task section (one without our schema): how to give a setting of
    its class that its YAML leaves out."""
    from transformer_lab.config import SETTINGS

    section = key.split(".")[0]
    target = OmegaConf.select(composed, f"{section}._target_", default=None)
    if section not in ("model", "data", "task") or target is None or target in SETTINGS or key.count(".") != 1:
        return ""
    return f" (a setting of {target} that its YAML leaves out is given with +{key}=VALUE, or listed in the YAML)"


def task_having(key: str, composed: DictConfig) -> str:
    """For a task.* key the run's task lacks, or a task's section given at the top (`sample.*`, `decode.*`,
    where they were before the task group): the tasks whose settings have it."""
    import dataclasses

    from transformer_lab.config import TASKS

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


class TrialFailed(Exception):
    """A multirun job that could not produce its objective: the sweeper records it as failed and goes on."""


class Trials:
    """The jobs of one multirun run in this process (Hydra's basic launcher, Optuna's sweeper): the root
    train.py makes one per command and hands it to `main`, which notes each job's outcome here."""

    def __init__(self):
        self.failed: list[tuple[Path, str]] = []  # their directories and errors
        self.completed: list[Path] = []

    def problem(self, error: BaseException) -> str | None:
        """What ended the multirun, in one line, when its trials failed (all of them: Optuna then finds no
        best trial; or some, with a sweeper that reports failures at the end or stops at one), or when a
        SLURM job ended without a result (scancel, a node failure, the time limit of a run that could not
        requeue). None otherwise."""
        if type(error).__name__ == "UncompletedJobError":  # submitit's (hydra/launcher=slurm)
            found = re.search(
                r"Job (\S+) \(task: \d+\) with path (\S+)\s+has not produced any output \(state: ([^)]*)\)", str(error)
            )
            if found:
                job, result, state = found.groups()
                return (
                    f"SLURM job {job} ended without a result (state: {state}); its logs: {Path(result).parent}; "
                    "its run directory keeps what it wrote (summary.json, checkpoints: ckpt_path=last resumes it)"
                )
        if not self.failed or not isinstance(error, (TrialFailed, ValueError, RuntimeError)):
            return None
        logs = ", ".join(str(directory / "train.log") for directory, _ in self.failed)
        first = self.failed[0][1]
        if not self.completed:
            return f"every trial failed ({len(self.failed)}; the first: {first}); their errors: {logs}"
        total = len(self.failed) + len(self.completed)
        return f"{len(self.failed)} of {total} trials failed (the first: {first}); their errors: {logs}"


def objective_value(cfg: DictConfig, summary: dict) -> float | None:
    """The metric a sweeper optimises (`objective`, a summary.json key), or None when none is named."""
    if cfg.objective is None:
        return None
    value = summary.get(cfg.objective)
    if not isinstance(value, (int, float)) or value != value:  # missing, or nan
        found = ", ".join(k for k, v in sorted(summary.items()) if isinstance(v, (int, float)))
        raise TrialFailed(f"objective={cfg.objective} is not a number in this run's summary.json (it has: {found})")
    return float(value)


@contextlib.contextmanager
def distributed_job():
    """A multirun's job: its DDP processes and SLURM tasks (launch.py), which leave nothing for the next job."""
    from transformer_lab.launch import distributed_job, submitit_tasks_as_processes

    with distributed_job():
        submitit_tasks_as_processes()
        yield


def main(cfg: DictConfig, start_time: float | None = None, trials: Trials | None = None) -> float | None:
    """Hydra's task function: check, claim, record, train. A user's mistake becomes one clear message and
    exit code 2; in a multirun it fails only its own job (the sweep goes on; `trials` notes it). Returns the
    objective for sweepers."""
    trials = trials if trials is not None else Trials()
    hydra = HydraConfig.get()
    multirun = hydra.mode == RunMode.MULTIRUN
    run_dir = Path(hydra.runtime.output_dir)
    new = run_dir.is_dir() and not any(run_dir.iterdir())  # (Hydra made it for this run)
    with distributed_job() if multirun else contextlib.nullcontext():
        try:
            with contextlib.nullcontext() if multirun else exit_on_user_error():
                summary = check_and_run(cfg, run_dir, "hydra.sweep.dir" if multirun else "hydra.run.dir", start_time)
            value = objective_value(cfg, summary) if summary else None  # (the other DDP processes have none)
        except (UserError, TrialFailed) as e:  # (a multirun's job: the sweep goes on)
            if not multirun:
                raise
            if new or earlier_run(run_dir) is None:  # (its own directory keeps what was tried and why it failed)
                with record(run_dir, cfg, None):
                    log.error("error: %s", e)
            else:
                log.error("error: %s", e)
            trials.failed.append((run_dir, str(e)))
            raise TrialFailed(str(e)) from None
        except BaseException:  # (a directory this run made and left unused goes, whatever stopped it)
            release(run_dir)
            remove_if_unused(run_dir if new else None)
            raise
        finally:
            release(run_dir)
        if summary is None:  # (nothing to do)
            remove_if_unused(run_dir if new else None)
        if multirun:
            trials.completed.append(run_dir)
        return value


def check_and_run(cfg: DictConfig, run_dir: Path, key: str, start_time: float | None) -> dict | None:
    """The run's summary (summary.json): `prepare` (validation, the data module), the directory's claim,
    the run's record in it, then the run. A resume with nothing to do gives the summary it has."""
    # What the checks log goes into the run's log file once there is one (a refused run writes none).
    early = logging.handlers.MemoryHandler(capacity=1_000, flushLevel=logging.CRITICAL + 1)
    logging.getLogger().addHandler(early)
    stop_on_sigterm()  # (until training starts: a SystemExit, and what was claimed goes back)
    try:
        prepared = prepare(cfg)  # (a mistake is told before torch and Lightning are imported)
        if nothing_to_do(prepared, run_dir, key):
            return read_json(run_dir / "summary.json") if key == "hydra.sweep.dir" else None
        from transformer_lab.train import run  # (its Lightning settings, before anything is built)

        build_run(prepared)  # every check that needs the data, the model or the callbacks
        if first_process():
            resumes = Path(prepared.resumed.path) if prepared.resumed else None
            claim(run_dir, key, resumes, bool(prepared.cfg.get("overwrite")))
    finally:
        logging.getLogger().removeHandler(early)

    try:
        with record(run_dir, prepared.cfg, prepared.overrides if prepared.recomposed else None) as log_handler:
            early.setTarget(log_handler)  # (None: no log file, the records go)
            early.close()  # (flushed into the log file)
            try:
                return run(cfg, None if key == "hydra.sweep.dir" else start_time, prepared)  # (a job's own start)
            except UserError as e:  # (the console's one line, in the run's log too)
                if log_handler is not None:
                    log_handler.handle(log.makeRecord(log.name, logging.ERROR, __file__, 0, "error: %s", (e,), None))
                raise
    except BaseException:
        unwind_claim(run_dir)
        raise
