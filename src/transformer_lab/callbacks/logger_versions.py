"""Each logger's run in every checkpoint, so that resuming a run goes on logging into the same runs."""

from __future__ import annotations

import lightning as L


class LoggerVersions(L.Callback):
    """Writes each logger's run into every checkpoint as `loggers`: `{section: {"version", "name"}}` (W&B's
    run id and display name, CSV's and TensorBoard's version and folder). A run resumed in its own
    directory builds its loggers with them (loggers.py), so W&B continues the same run (`resume="allow"`),
    under the same name, instead of starting a second one."""

    def __init__(self, loggers: dict, settings: dict):
        self.loggers, self.settings = loggers, settings

    def on_save_checkpoint(self, trainer, pl_module, checkpoint: dict) -> None:
        checkpoint["loggers"] = {
            section: {"version": logger.version, "name": self.settings[section].get("name")}
            for section, logger in self.loggers.items()
            if isinstance(logger.version, (str, int))
        }
