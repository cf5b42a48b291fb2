"""Train a model: python train.py model=gpt data=shakespeare [key=value ...]  (see README.md)."""

import time

START_TIME = time.time()

import sys  # noqa: E402

import hydra  # noqa: E402
from omegaconf import DictConfig  # noqa: E402

from transformer_lab.commands.train import command_line  # noqa: E402  (registers the config schemas)
from transformer_lab.run.main import Trials, main  # noqa: E402


def hydra_app(trials: Trials) -> None:
    """compose (Hydra) -> check, build, claim, record, train: transformer_lab.run.main.main, for each job of a multirun."""

    @hydra.main(version_base="1.3", config_path="conf", config_name="train")
    def task(cfg: DictConfig) -> float | None:
        return main(cfg, START_TIME, trials)  # the objective, for sweepers

    task()


if __name__ == "__main__":
    command_line(hydra_app, sys.argv[1:])  # (the one-line errors: transformer_lab/commands/train.py)
