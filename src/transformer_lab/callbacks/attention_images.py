"""The attention maps of one fixed input at each validation (`callbacks=[default,attention]`,
`callbacks.attention.text=...`): one image per kind of attention, as `python -m transformer_lab attention` draws
them, logged to W&B (`attention/KIND`), so runs compare side by side there; without W&B, PNG files in the run's
attention/step_N/."""

from __future__ import annotations

from pathlib import Path

import lightning as L


class AttentionImages(L.Callback):
    def __init__(self, text: str, run_dir: str, every_n_steps: int | None = None, max_extra_len: int = 20):
        def positive(value) -> bool:
            return isinstance(value, int) and not isinstance(value, bool) and value >= 1

        if not isinstance(text, str) or not text:
            raise ValueError(f'text: which input? give callbacks.attention.text="..." (a non-empty text), got {text!r}')
        if every_n_steps is not None and not positive(every_n_steps):
            raise ValueError(f"every_n_steps must be a positive number of steps or null, got {every_n_steps!r}")
        if not positive(max_extra_len) or max_extra_len > 512:
            raise ValueError(f"max_extra_len must be an integer in 1..512, got {max_extra_len!r}")
        self.text, self.every_n_steps, self.max_extra_len = text, every_n_steps, max_extra_len
        self.dirpath = Path(run_dir) / "attention"  # (the run's own folder: nothing of the user's is written over)

    def check(self, model, datamodule) -> None:
        """Run before the run's directory is claimed (prepare.build_run): a model with no layer implementing the
        attention protocol (models/layers.py DrawsAttention), or a text the model cannot read, is refused then."""
        from transformer_lab.analysis.attention import check_model, source_ids

        check_model(model)
        source_ids(model, datamodule, self.text)

    def on_validation_epoch_end(self, trainer, pl_module) -> None:
        if trainer.sanity_checking or not trainer.is_global_zero:
            return
        if self.every_n_steps is not None and trainer.global_step % self.every_n_steps:
            return
        from transformer_lab.analysis.attention import drawings

        model = pl_module.model
        device = next(model.parameters()).device
        options = {"text": self.text, "target": None, "max_extra_len": self.max_extra_len, "device": str(device)}
        images = dict(drawings(model, trainer.datamodule, options, f"step {trainer.global_step}"))
        wandb = [logger for logger in trainer.loggers if hasattr(logger, "log_image")]
        for logger in wandb:
            for kind, image in images.items():
                logger.log_image(f"attention/{kind}", [image], step=trainer.global_step)
        if not wandb:
            from PIL import Image

            from transformer_lab.store.atomic import atomic_path

            for kind, image in images.items():
                with atomic_path(self.dirpath / f"step_{trainer.global_step}" / f"{kind}.png") as tmp:
                    Image.fromarray(image).save(tmp, format="PNG")
