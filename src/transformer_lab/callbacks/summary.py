"""Collects the final and best value of every logged metric and writes the run's summary.json."""

from __future__ import annotations

import json
import math
from pathlib import Path

import lightning as L
import torch

from transformer_lab.store.atomic import atomic_write

# Metrics with a best value worth keeping, and which way is better.
_LOWER_IS_BETTER = ("loss", "ppl")
_HIGHER_IS_BETTER = ("acc", "bleu")


def better(name: str) -> str | None:
    leaf = name.rsplit("/", 1)[-1]
    if leaf in _LOWER_IS_BETTER:
        return "min"
    if leaf in _HIGHER_IS_BETTER:
        return "max"
    return None


class Summary(L.Callback):
    """Final values live under each metric's logged name (`val/loss`), best ones under `NAME_best`."""

    def __init__(self):
        self.final: dict[str, float] = {}
        self.best: dict[str, float] = {}

    def _collect(self, trainer) -> None:
        for name, value in trainer.callback_metrics.items():
            # `step` is the step Lightning's loggers write at (StepAxis), not a metric; `throughput/*` are
            # windows of a few steps for the loggers' curves: the whole run's figures are written apart.
            if name == "step" or name.startswith("throughput/"):
                continue
            value = float(value.item() if isinstance(value, torch.Tensor) else value)
            self.final[name] = value
            direction = better(name)
            if direction is None or not math.isfinite(value):
                continue
            old = self.best.get(name)
            if old is None or (value < old if direction == "min" else value > old):
                self.best[name] = value

    def on_validation_end(self, trainer, pl_module):
        if not trainer.sanity_checking:
            self._collect(trainer)

    def on_train_end(self, trainer, pl_module):
        self._collect(trainer)

    def on_test_end(self, trainer, pl_module):
        self._collect(trainer)

    def metrics(self) -> dict[str, float]:
        out = dict(self.final)
        out.update({f"{name}_best": value for name, value in self.best.items()})
        return out

    def write(self, path: Path, earlier: dict | None = None, **extra) -> dict:
        """summary.json: the metrics and `extra`; a figure this process could not measure (None: a resumed
        run that trained no step) keeps its value in `earlier`, the run's summary before this process."""
        extra = {key: (earlier or {}).get(key) if value is None else value for key, value in extra.items()}
        summary = {**self.metrics(), **extra}
        with atomic_write(path, "w") as f:
            json.dump(summary, f, indent=2, sort_keys=True)
            f.write("\n")
        return summary

    # Kept in checkpoints, so a resumed run's best values include those before the interruption.
    def state_dict(self) -> dict:
        return {"final": dict(self.final), "best": dict(self.best)}

    def load_state_dict(self, state: dict) -> None:
        self.final, self.best = dict(state["final"]), dict(state["best"])
