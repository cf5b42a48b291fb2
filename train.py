"""Train a model: python train.py model=gpt data=shakespeare [key=value ...]  (see README.md)."""

import time

START_TIME = time.time()

import gc  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import hydra  # noqa: E402
from omegaconf import DictConfig  # noqa: E402

import transformer_lab.config  # noqa: E402,F401  (registers the config schemas)
from transformer_lab.main import (  # noqa: E402
    Trials,
    command_overrides,
    composition_problem,
    output_dir_problem,
    print_help,
    raised_in_a_run,
    searchpath_problem,
    with_resumed_choices,
)
from transformer_lab.main import main as run_main  # noqa: E402

CONFIG_DIR = str(Path(__file__).resolve().parent / "conf")


def main(trials: Trials) -> None:
    """compose (Hydra) -> check, claim, record, train (transformer_lab.main.main, for each job of a multirun)."""

    @hydra.main(version_base="1.3", config_path="conf", config_name="train")
    def task(cfg: DictConfig) -> float | None:
        return run_main(cfg, START_TIME, trials)  # the objective, for sweepers

    task()


if __name__ == "__main__":
    arguments = with_resumed_choices(sys.argv[1:])  # (a resume's keys of its run's own data, model, task)
    sys.argv[1:] = arguments
    overrides = command_overrides(arguments)
    if {"--help", "-h"} & set(arguments):
        try:
            print_help(CONFIG_DIR, overrides)
        except Exception as error:
            if (problem := composition_problem(error, CONFIG_DIR, overrides)) is None:
                raise
            print(f"error: {problem}", file=sys.stderr)
            sys.exit(2)
        sys.exit(0)
    if problem := output_dir_problem(arguments) or searchpath_problem(overrides):
        print(f"error: {problem}", file=sys.stderr)
        sys.exit(2)
    # What Hydra cannot compose, and what ends a sweep, come here (Hydra would print them in many lines),
    # to be told in one: whatever a user's shell sets (HYDRA_FULL_ERROR=0 makes Hydra print and exit 1 itself).
    os.environ["HYDRA_FULL_ERROR"] = "1"
    trials = Trials()
    try:
        main(trials)
    except KeyboardInterrupt:  # Ctrl-C before training took it over (callbacks/interrupt.py): nothing to save
        print("interrupted (Ctrl-C) before training started: nothing was trained", file=sys.stderr)
        sys.exit(130)
    except Exception as error:
        if (problem := composition_problem(error, CONFIG_DIR, overrides)) is not None:
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
    gc.freeze()
