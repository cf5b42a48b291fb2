"""Language modelling: next-token cross-entropy, on every position (text) or on the answer only
(equations, where targets elsewhere are -100)."""

from __future__ import annotations

import logging
import random
from functools import partial
from typing import Any, Callable

import lightning as L
import torch
import torch.nn.functional as F
from torchmetrics import MeanMetric
from torchmetrics.classification import MulticlassAccuracy

from transformer_lab.errors import NonFiniteLossError
from transformer_lab.tasks.optim import adamw, warmup_cosine

log = logging.getLogger(__name__)


class LanguageModelTask(L.LightningModule):
    def __init__(self, model: torch.nn.Module, optim: dict, sample: dict, decode: Callable[[Any], str],
                 answer_only: bool = False, prompt_ids: list[int] | None = None,
                 checkpoint_meta: dict | None = None):
        super().__init__()
        self.model = model
        self.optim, self.sample = optim, sample
        self.decode, self.answer_only = decode, answer_only
        self.prompt_ids = prompt_ids or [0]
        self.checkpoint_meta = checkpoint_meta or {}
        vocab_size = model.config.vocab_size
        self.val_loss = MeanMetric()
        self.val_acc = MulticlassAccuracy(vocab_size, average="micro", ignore_index=-100) if answer_only else None
        self.sample_rows: list[list] = []
        self.skipped_steps = 0

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.model(idx)

    def loss(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-100)

    def training_step(self, batch, batch_idx):
        x, y = batch
        logits = self.model(x)
        loss = self.loss(logits, y)
        if not torch.isfinite(loss):  # checked before backward, so the weights stay those of the last good step
            if not self.optim["skip_nonfinite"]:
                raise NonFiniteLossError(
                    f"the loss is {loss.item()} at step {self.global_step}; training stopped. The last good "
                    "checkpoint is kept; lower optim.lr, or set optim.skip_nonfinite=true to skip such steps.")
            self.skipped_steps += 1
            self.log("train/skipped_steps", float(self.skipped_steps))
            return None  # Lightning then skips backward and the optimizer step
        # Lightning hands step metrics to the logger every log_every_n_steps only, and each self.log
        # costs ~0.8 ms on CPU (6% of a small model's step): log just the steps that are written.
        if (self.global_step + 1) % self.trainer.log_every_n_steps == 0:
            self.log("train/loss", loss, prog_bar=True)
            self.log("train/lr", self.lr_schedulers().get_last_lr()[0])
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self.model(x)
        n_targets = (y != -100).sum()
        self.val_loss.update(self.loss(logits, y), weight=n_targets)
        if self.val_acc is not None:
            self.val_acc.update(logits.flatten(0, 1), y.flatten())
            if batch_idx == 0:
                self._equation_examples(x, logits.argmax(-1), y)

    def on_validation_epoch_end(self):
        loss = self.val_loss.compute()
        self.val_loss.reset()
        self.log("val/loss", loss, prog_bar=True)
        self.log("val/ppl", loss.exp())
        if self.val_acc is not None:
            self.log("val/acc", self.val_acc.compute(), prog_bar=True)
            self.val_acc.reset()
        elif self.sample.get("enabled", True) and not self.trainer.sanity_checking:
            self._text_samples()

    def _text_samples(self):
        prompt = torch.tensor([self.prompt_ids], device=self.device)
        generator = torch.Generator(device=self.device).manual_seed(self.sample["seed"])
        out = self.model.generate(prompt, self.sample["max_new_tokens"], self.sample["temperature"],
                                  self.sample["top_k"], generator=generator)
        text = self.decode(out[0].tolist())
        self._show(f"sample at step {self.global_step}", text)

    def _equation_examples(self, x, predicted, y):
        lines = []
        for row in range(min(4, len(x))):
            answer, guess = y[row, -1].item(), predicted[row, -1].item()
            mark = "ok" if answer == guess else f"expected {self.decode([answer])}"
            lines.append(f"{self.decode(x[row].tolist())} {self.decode([guess])}   ({mark})")
        if not self.trainer.sanity_checking:
            self._show(f"examples at step {self.global_step}", "\n".join(lines))

    def _show(self, title: str, text: str):
        if self.trainer.is_global_zero:
            log.info("%s:\n%s", title, text)
        self.sample_rows.append([self.global_step, text])
        log_table = getattr(self.logger, "log_text", None)
        if log_table is not None and self.logger.__class__.__name__ == "WandbLogger":
            log_table(key="samples", columns=["step", "text"], data=self.sample_rows)

    def configure_optimizers(self):
        o = self.optim
        optimizer = adamw(self.model, o["lr"], o["weight_decay"], tuple(o["betas"]), o["eps"], o["fused"])
        decay_steps = o["decay_steps"] or max(self.trainer.max_steps, 1)
        schedule = partial(warmup_cosine, lr=o["lr"], min_lr=o["min_lr"], warmup_steps=o["warmup_steps"],
                           decay_steps=decay_steps)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: schedule(step) / o["lr"])
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        # The resolved config and the vocabulary, so a checkpoint is enough to sample from; and the random
        # generators' states (dropout draws from them), so a resumed run continues exactly.
        checkpoint["transformer_lab"] = self.checkpoint_meta
        checkpoint["rng"] = {
            "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
            "python": list(random.getstate()[1]),
            "skipped_steps": self.skipped_steps,
        }

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        rng = checkpoint.get("rng")
        if rng is None:
            return
        torch.set_rng_state(rng["torch"])
        if rng["cuda"] and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(rng["cuda"])
        random.setstate((3, tuple(rng["python"]), None))
        self.skipped_steps = rng["skipped_steps"]
