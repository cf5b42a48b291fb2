"""bfloat16 autocast on the CPU (`hardware=[cpu,bf16]`) for every model: it trains, decodes (beam search
too) and ends near the float32 run of the same steps, with fused AdamW and its gradients clipped (bf16 scales no
loss, so nothing needs unscaling before the clip).

Here: fused AdamW and the clipped gradients, in this process; tests/e2e/test_mixed_precision.py has the rest."""

import lightning as L
import torch

from helpers.runs import TINY, compose_cfg


class GradientNorms(L.Callback):
    """The gradients' total norm each optimizer step used (Lightning steps with a closure that runs forward,
    backward and the clipping, so they are read after it)."""

    def __init__(self):
        self.norms = []

    def on_train_start(self, trainer, task):
        def record(optimizer, args, kwargs):
            grads = [p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
            self.norms.append(torch.linalg.vector_norm(torch.stack([g.norm() for g in grads])).item())

        trainer.optimizers[0].register_step_post_hook(record)


def test_bf16_keeps_fused_adamw_and_clips_its_gradients(tmp_path):
    from transformer_lab.config.trainer import trainer_arguments
    from transformer_lab.run.build import build

    cfg = compose_cfg(
        ["data=modular", "data.p=11", *TINY, "hardware=[cpu,bf16]", "trainer.gradient_clip_val=0.01"],
        output_dir=str(tmp_path),
    )
    datamodule, _, task = build(cfg)
    arguments = {**trainer_arguments(cfg), "max_steps": 3, "limit_val_batches": 0, "enable_checkpointing": False}
    norms = GradientNorms()
    trainer = L.Trainer(**arguments, logger=False, callbacks=[norms], default_root_dir=str(tmp_path))
    trainer.fit(task, datamodule=datamodule)
    assert str(trainer.precision) == "bf16-mixed" and trainer.optimizers[0].defaults["fused"] is True
    # a fresh model's gradients are far above 0.01 (~1): each step saw them clipped to it
    assert len(norms.norms) == 3 and all(0.0099 < n <= 0.01 * (1 + 1e-4) for n in norms.norms), norms.norms
