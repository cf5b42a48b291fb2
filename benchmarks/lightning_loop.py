"""nanoGPT's CPU recipe (shakespeare_char_cpu's until issue #45) in Lightning with nothing else: no callbacks, logger, progress bar,
checkpoints, sanity check, samples, Hydra or config checks. The cost of Lightning's own training loop,
between the bare loop (benchmarks/plain_loop.py) and the preset (benchmarks/preset_vs_loop.py compares all three).

    python benchmarks/lightning_loop.py [--seed 1337] [--iters 2000]

Same model, data, batches, optimizer, schedule, clipping and validations as plain_loop.py (--order repo), so
it ends at the same val loss.
"""

import argparse
import time

START = time.time()

import lightning as L  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from transformer_lab.batching.windows import TextWindows  # noqa: E402
from transformer_lab.data.batches import Batches, RandomWindows  # noqa: E402
from transformer_lab.data.shakespeare import ShakespeareData  # noqa: E402
from transformer_lab.models.gpt import GPT, GPTConfig  # noqa: E402
from transformer_lab.tasks.optim import adamw, warmup_cosine  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--seed", type=int, default=1337)
parser.add_argument("--iters", type=int, default=2000)
args = parser.parse_args()
BLOCK, BATCH, EVAL_BATCHES = 64, 12, 20


class Recipe(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.model = GPT(GPTConfig(vocab_size=65, block_size=BLOCK, n_layer=4, n_head=4, n_embd=128))
        self.val_losses: list[torch.Tensor] = []

    def loss(self, batch) -> torch.Tensor:
        x, y = batch
        return F.cross_entropy(self.model(x).flatten(0, 1), y.flatten())

    def training_step(self, batch, batch_idx):
        return self.loss(batch)

    def validation_step(self, batch, batch_idx):
        self.val_losses.append(self.loss(batch))

    def on_validation_epoch_end(self):
        print(f"step {self.global_step}: val loss {torch.stack(self.val_losses).mean():.4f}", flush=True)
        self.val_losses.clear()

    def configure_optimizers(self):
        optimizer = adamw(self.model, 1e-3, 0.1, (0.9, 0.99), 1e-8, fused=True)
        schedule = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda step: warmup_cosine(step, 1e-3, 1e-4, 100, args.iters) / 1e-3
        )
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}


class StepTime(L.Callback):
    """Training time of steps 2 to N, validation left out (as the preset's train_time_s)."""

    def __init__(self):
        self.seconds, self.last = 0.0, None

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.last = self.last or time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        now = time.perf_counter()
        if trainer.global_step > 1:
            self.seconds += now - self.last
        self.last = now

    def on_validation_start(self, trainer, pl_module):
        self.last = None


torch.manual_seed(args.seed)
data = ShakespeareData(data_dir="data", block_size=BLOCK, batch_size=BATCH, seed=args.seed)
data.setup()
recipe = Recipe()
windows = TextWindows(data, BATCH)
windows.setup()
val_x, val_y = (torch.cat(t) for t in zip(*windows.val_dataloader()))  # the runs' validation windows, in order
step_time = StepTime()
trainer = L.Trainer(
    accelerator="cpu",
    devices=1,
    max_steps=args.iters,
    max_epochs=-1,
    val_check_interval=250,
    check_val_every_n_epoch=None,
    limit_val_batches=EVAL_BATCHES,
    num_sanity_val_steps=0,
    gradient_clip_val=1.0,
    logger=False,
    enable_checkpointing=False,
    enable_progress_bar=False,
    enable_model_summary=False,
    callbacks=[step_time],
)
trainer.fit(recipe, RandomWindows(data.train_tokens, BLOCK, BATCH, args.seed), Batches(val_x, val_y, BATCH))
print(
    f"{1000 * step_time.seconds / (args.iters - 1):.1f} ms/iter, wall {time.time() - START:.1f} s, "
    f"{BATCH * BLOCK * (args.iters - 1) / step_time.seconds:.0f} tokens/s"
)
