"""A Hydra sweeper that runs a W&B sweep spec (conf/wandb_sweep/NAME.yaml, W&B's own format):

    python train.py -m hydra/sweeper=wandb hydra.sweeper.spec=grokking hydra.sweeper.count=20 [overrides]

Every trial is one Hydra job (its own directory under the sweep directory, its own W&B run in the
sweep's group) with the proposed parameters as overrides; a key also on the command line keeps the
command line's value.

- online (W&B credentials found, or mode=online): the spec is registered with the W&B server
  (`wandb.sweep`), which proposes each trial and sees every result (`wandb.agent`, in this process);
- offline (no credentials, or mode=offline): the trials are proposed here by W&B's own sweep
  algorithms (grid, random, bayes from the `sweeps` package behind `wandb[sweeps]`), from the results
  of the trials before; each trial is logged as an offline W&B run.

The results (every trial's parameters, state and metric, and the best one) go to
wandb_sweep_results.yaml in the sweep directory.
"""

import logging
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, List, Optional

import yaml
from hydra.core.config_store import ConfigStore
from hydra.core.plugins import Plugins
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf

log = logging.getLogger(__name__)


@dataclass
class WandbSweeperConf:
    _target_: str = "hydra_plugins.transformer_lab_wandb_sweeper.wandb_sweeper.WandbSweeper"
    spec: str = "???"  # a spec file, or NAME for conf/wandb_sweep/NAME.yaml
    count: int = 10  # trials to run (a grid may end sooner)
    mode: str = "auto"  # auto (online with W&B credentials, else offline) | online | offline
    project: str = "transformer-lab"
    entity: Optional[str] = None
    seed: int = 0  # offline proposals are reproducible


ConfigStore.instance().store(group="hydra/sweeper", name="wandb", node=WandbSweeperConf, provider="transformer-lab")


def failure(ret) -> BaseException:
    """What ended a failed job: Hydra's JobReturn raises it when its return value is asked for."""
    try:
        ret.return_value  # noqa: B018
    except BaseException as e:  # noqa: BLE001  (whatever the job raised)
        return e
    raise AssertionError("the job did not fail")


def override_value(value: Any) -> str:
    """A proposed value as Hydra override syntax."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(override_value(v) for v in value) + "]"
    return "null" if value is None else str(value)


def plain(value: Any) -> Any:
    """numpy scalars (what the sweeps package proposes) as Python numbers."""
    return value.item() if hasattr(value, "item") else value


def load_spec(spec: str, root: Path) -> dict:
    path = Path(spec)
    if not path.suffix:
        path = root / "conf" / "wandb_sweep" / f"{spec}.yaml"
    elif not path.is_absolute():
        path = root / path
    if not path.is_file():
        raise ValueError(f"hydra.sweeper.spec={spec}: no W&B sweep spec at {path}")
    with open(path) as f:
        spec_dict = yaml.safe_load(f)
    for key in ("method", "metric", "parameters"):
        if key not in spec_dict:
            raise ValueError(
                f"hydra.sweeper.spec={spec}: {path} has no `{key}` (a W&B sweep spec needs method, "
                "metric and parameters)"
            )
    return spec_dict


class WandbSweeper(Sweeper):
    def __init__(
        self,
        spec: str,
        count: int = 10,
        mode: str = "auto",
        project: str = "transformer-lab",
        entity: Optional[str] = None,
        seed: int = 0,
    ):
        if mode not in ("auto", "online", "offline"):
            raise ValueError(f"hydra.sweeper.mode must be auto, online or offline, got {mode!r}")
        self.spec_name, self.count, self.mode = spec, count, mode
        self.project, self.entity, self.seed = project, entity, seed
        self.job_idx = 0

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.hydra_context, self.config = hydra_context, config
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config
        )

    def _online(self) -> bool:
        if self.mode != "auto":
            return self.mode == "online"
        from transformer_lab.run.loggers import has_wandb_credentials

        return os.environ.get("WANDB_MODE") not in ("offline", "disabled") and has_wandb_credentials()

    @staticmethod
    def effective(arguments: List[str], params: dict) -> dict:
        """The proposed parameters the command line does not fix."""
        given = {a.split("=", 1)[0].lstrip("+~") for a in arguments}
        return {key: value for key, value in params.items() if key not in given}

    def _run_trial(self, arguments: List[str], params: dict) -> tuple[str, Optional[float], dict]:
        """One Hydra job with the proposed parameters: (state, metric value, summary). A key also given on the
        command line keeps the command line's value."""
        overrides = [f"{key}={override_value(value)}" for key, value in self.effective(arguments, params).items()]
        overrides += list(arguments)
        self.validate_batch_is_legal([overrides])
        (ret,) = self.launcher.launch([overrides], initial_job_idx=self.job_idx)
        self.job_idx += 1
        summary_path = Path(ret.hydra_cfg.hydra.runtime.output_dir) / "summary.json"
        summary = yaml.safe_load(summary_path.read_text()) if summary_path.exists() else {}
        value = summary.get(self.metric)
        failed = ret.status.name != "COMPLETED" or not isinstance(value, (int, float)) or math.isnan(value)
        if failed:
            reason = failure(ret) if ret.status.name != "COMPLETED" else f"no {self.metric} in summary.json"
            log.warning("Failed trial %d (%s): %s", self.job_idx - 1, " ".join(overrides), reason)
        return ("failed" if failed else "finished"), (None if failed else float(value)), summary

    def sweep(self, arguments: List[str]) -> Any:
        spec = load_spec(self.spec_name, Path(self.config.hydra.runtime.cwd))
        self.metric, self.goal = spec["metric"]["name"], spec["metric"].get("goal", "minimize")
        sweep_dir = Path(self.config.hydra.sweep.dir)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, sweep_dir / "multirun.yaml")
        online = self._online()
        log.info(
            "W&B sweep %s (%s, %s %s), %d trials, %s",
            self.spec_name,
            spec["method"],
            self.goal,
            self.metric,
            self.count,
            "online" if online else "offline: proposals made locally",
        )
        trials = self._sweep_online(spec, arguments) if online else self._sweep_offline(spec, arguments)
        self._write_results(sweep_dir / "wandb_sweep_results.yaml", trials)
        return trials

    def _sweep_offline(self, spec: dict, arguments: List[str]) -> list[dict]:
        import random

        import numpy as np
        from sweeps import RunState, next_run

        runs: list = []
        trials = []
        for i in range(self.count):
            # The sweeps package draws from Python's and numpy's global generators, which each trial's
            # seed_everything resets: seeded per trial, proposals differ and are reproducible.
            random.seed(self.seed * 1_000_003 + i)
            np.random.seed(self.seed * 1_000_003 + i)
            proposal = next_run(spec, runs, validate=True)
            if proposal is None:  # a grid with nothing left
                break
            params = {key: plain(entry["value"]) for key, entry in proposal.config.items()}
            state, value, _ = self._run_trial(arguments, params)
            proposal.name = f"trial-{i}"
            proposal.state = RunState.finished if state == "finished" else RunState.failed
            proposal.summary_metrics = {} if value is None else {self.metric: value}
            runs.append(proposal)
            trials.append({"params": self.effective(arguments, params), "state": state, self.metric: value})
        return trials

    def _sweep_online(self, spec: dict, arguments: List[str]) -> list[dict]:
        import wandb

        sweep_id = wandb.sweep(spec, project=self.project, entity=self.entity)
        trials = []

        def trial() -> None:
            run = wandb.init()  # the server's proposal; train.py's W&B logger logs into this run
            params = {key: value for key, value in dict(run.config).items() if key in spec["parameters"]}
            state, value, _ = self._run_trial(arguments, params)
            trials.append(
                {"params": self.effective(arguments, params), "state": state, self.metric: value, "run_id": run.id}
            )
            if wandb.run is not None:
                wandb.finish(exit_code=0 if state == "finished" else 1)

        wandb.agent(sweep_id, function=trial, count=self.count, project=self.project, entity=self.entity)
        return trials

    def _write_results(self, path: Path, trials: list[dict]) -> None:
        done = [t for t in trials if t["state"] == "finished"]
        best = (min if self.goal == "minimize" else max)(done, key=lambda t: t[self.metric]) if done else None
        results = {
            "metric": self.metric,
            "goal": self.goal,
            "trials": trials,
            "best_params": dict(best["params"]) if best else None,
            "best_value": best[self.metric] if best else None,
        }
        path.write_text(yaml.safe_dump(results, sort_keys=False))
        log.info("Best parameters: %s", results["best_params"])
        log.info("Best value: %s", results["best_value"])
