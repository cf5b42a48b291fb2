"""Each logger's run in every checkpoint, so that resuming a run goes on logging into the same runs."""

from __future__ import annotations

import lightning as L

# What a logger's run is called and filed under, as its section was built (loggers.build_loggers): W&B's
# display name, group, job type and tags (a sweep's job's: its sweep and the settings it varies, which a resume,
# a run of its own outside the sweep, could not tell again); CSV's and TensorBoard's folder name.
IDENTITY = ("name", "group", "job_type", "tags")


class LoggerVersions(L.Callback):
    """Writes each logger's run into every checkpoint as `loggers`: `{section: {"version", "name", ...}}`
    (W&B's run id, display name, group, job type and tags; CSV's and TensorBoard's version and folder). A run
    resumed in its own directory builds its loggers with them (run/loggers.py), so W&B continues the same run
    (`resume="allow"`), under the same name, group, job type and tags, instead of starting a second one."""

    def __init__(self, loggers: dict, settings: dict):
        self.loggers, self.settings = loggers, settings

    def on_save_checkpoint(self, trainer, pl_module, checkpoint: dict) -> None:
        checkpoint["loggers"] = {
            section: {
                "version": logger.version,
                "name": self.settings[section].get("name"),
                **{key: self.settings[section][key] for key in IDENTITY[1:] if key in self.settings[section]},
            }
            for section, logger in self.loggers.items()
            if isinstance(logger.version, (str, int))
        }
