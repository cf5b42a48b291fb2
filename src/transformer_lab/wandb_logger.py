"""Lightning's W&B logger, quiet: W&B's banner, sync hints and end-of-run history stay out of the console
(they are in the run's files; loggers.py prints the one sync hint), and no "anonymous setting has no
effect" warning: Lightning passes `anonymous=None` to wandb.init, which W&B 0.31 warns about since it
removed anonymous mode (https://github.com/wandb/wandb/pull/10909). Lightning's arguments for wandb.init
are a private attribute: tests/unit/test_upstream.py fails once Lightning stops passing `anonymous`."""

from __future__ import annotations

from lightning.pytorch.loggers import WandbLogger as LightningWandbLogger


class WandbLogger(LightningWandbLogger):
    def __init__(self, *args, **kwargs):
        kwargs.setdefault("settings", {"silent": True})  # (WandbLogger passes its other arguments to wandb.init)
        super().__init__(*args, **kwargs)
        self._wandb_init.pop("anonymous", None)
