"""Train a model: python train.py model=gpt data=shakespeare [key=value ...]  (see README.md)."""

import time

START_TIME = time.time()

import sys  # noqa: E402

import hydra  # noqa: E402
from omegaconf import DictConfig  # noqa: E402

import transformer_lab.config  # noqa: E402,F401  (registers the config schemas)
from transformer_lab.train import main as run_main  # noqa: E402
from transformer_lab.train import output_dir_problem  # noqa: E402


@hydra.main(version_base="1.3", config_path="conf", config_name="train")
def main(cfg: DictConfig) -> float | None:
    return run_main(cfg, START_TIME)  # the objective, for sweepers


if __name__ == "__main__":
    if problem := output_dir_problem(sys.argv[1:]):
        print(f"error: {problem}", file=sys.stderr)
        sys.exit(2)
    main()
