"""A run that will train for longer than a person expects says so after its first steps: the projected
time, and the experiment presets declared for its data and model on this kind of device."""

from __future__ import annotations

import logging
import time
from pathlib import Path

from lightning.pytorch.accelerators import CPUAccelerator
from lightning.pytorch.callbacks import Callback
from omegaconf import OmegaConf

log = logging.getLogger(__name__)


def selected(preset: Path) -> dict:
    """The options a preset's defaults select: its own, over those of a preset it names (`- grokking`)."""
    selects = {}
    for entry in OmegaConf.load(preset).get("defaults") or []:
        if OmegaConf.is_dict(entry):
            selects.update({k.removeprefix("override ").lstrip("/"): v for k, v in entry.items()})
        elif (preset.parent / f"{entry}.yaml").is_file() and entry != preset.stem:
            selects = {**selected(preset.parent / f"{entry}.yaml"), **selects}
    return selects


def presets_for(data: str, model: str, on_cpu: bool, run_dir: Path) -> list[str]:
    """The experiment presets (conf/experiment/ of the config sources the run's record names: .hydra/hydra.yaml,
    a resume's newer .hydra/TIME/hydra.yaml) whose defaults select this data and model, and a CPU hardware
    option (cpu, cpu_bf16) exactly when the run is on a CPU."""
    records = list((run_dir / ".hydra").glob("**/hydra.yaml"))
    if not records:  # (a run trained outside the command line has none)
        return []
    found = []
    for source in OmegaConf.load(max(records, key=lambda p: p.stat().st_mtime)).hydra.runtime.config_sources:
        folder = Path(source.path) / "experiment"
        if source.schema != "file" or not folder.is_dir():
            continue
        for path in sorted(folder.glob("*.yaml")):
            selects = selected(path)
            hardware = selects.get("hardware") or []  # an option or a list of them: cpu, cpu_bf16, [cpu,bf16]
            cpu = any(
                str(option).startswith("cpu") for option in ([hardware] if isinstance(hardware, str) else hardware)
            )
            if (selects.get("data"), selects.get("model")) == (data, model) and cpu == on_cpu:
                found.append(f"experiment={path.stem}")
    return found


class LongRunWarning(Callback):
    """After `after_steps` steps (the first of this process, which pays for lazy initialisation, not counted; a
    resume's from its checkpoint's step), warns when the remaining steps at the pace so far would take more than
    `hours`."""

    def __init__(self, data: str, model: str, hours: float = 1.0, after_steps: int = 10):
        self.data, self.model, self.hours, self.after_steps = data, model, hours, after_steps
        self.start: tuple[int, float] | None = None  # the first step this process trained, and when it ended

    def on_train_batch_end(self, trainer, *args) -> None:
        step = trainer.global_step
        if self.start is None:
            self.start = step, time.perf_counter()
        elif step == self.start[0] + self.after_steps:
            per_step = (time.perf_counter() - self.start[1]) / self.after_steps
            remaining = trainer.estimated_stepping_batches - step
            if remaining * per_step > self.hours * 3600 and trainer.is_global_zero:
                on_cpu = isinstance(trainer.accelerator, CPUAccelerator)
                presets = presets_for(self.data, self.model, on_cpu, Path(trainer.default_root_dir))
                advice = (
                    f"sized for a {'CPU' if on_cpu else 'GPU'}: python train.py {' or '.join(presets)}"
                    if presets
                    else "lower trainer.max_steps or the model's size (model.n_layer, model.n_embd)"
                )
                log.warning(
                    "this run would train for about %.1f hours more (%d steps at %.2f s a step on this %s); %s",
                    remaining * per_step / 3600,
                    remaining,
                    per_step,
                    "CPU" if on_cpu else "GPU",
                    advice,
                )
