"""Lightning's CSV logger, which a resumed run continues: Lightning's deletes the metrics.csv it finds, and
the interrupted run's rows with it."""

from __future__ import annotations

import csv
import warnings
from pathlib import Path

from lightning.pytorch.loggers import CSVLogger as LightningCSVLogger


class CSVLogger(LightningCSVLogger):
    """Keeps the rows an earlier process of the run wrote to metrics.csv (the directory is the run's own:
    rundir.py) up to where this one starts logging; rows from after the checkpoint it resumed (steps the
    interrupted process logged, and this one logs again) are dropped, as metrics.jsonl drops them."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        earlier = Path(self.log_dir) / "metrics.csv"
        self._earlier: list[dict] = []
        if earlier.is_file():
            with open(earlier, newline="") as f:
                self._earlier = [{k: v for k, v in row.items() if v != ""} for row in csv.DictReader(f)]

    @property
    def experiment(self):
        # Lightning warns that it "will delete" earlier log files in the folder; this logger keeps them (above).
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r".*Previous log files in this directory will be deleted")
            return super().experiment

    def log_metrics(self, metrics: dict, step: int | None = None) -> None:
        if self._earlier:
            kept = [row for row in self._earlier if step is None or float(row.get("step", "nan")) < step]
            self.experiment.metrics[:0] = kept
            self._earlier = []
        super().log_metrics(metrics, step)
