"""What every training objective shares: AdamW with the warmup + cosine schedule, the non-finite loss
guard, step-metric logging, and checkpoints that carry the config and the random generators' states."""

from __future__ import annotations

import logging
import random
from collections import defaultdict
from functools import partial
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.plugins.precision import Precision
from lightning.pytorch.utilities import GradClipAlgorithmType
from omegaconf import OmegaConf

from transformer_lab.data.tokens import Specials
from transformer_lab.errors import NonFiniteLossError
from transformer_lab.store.history import metrics_written
from transformer_lab.tasks.metrics import Metric, Metrics
from transformer_lab.tasks.optim import adafactor, adamw, muon, warmup_cosine

log = logging.getLogger(__name__)


class Task(L.LightningModule):
    # What a task declares (run/build.py checks it against the model a run names): the kind of network it
    # trains, a model class's `architecture` ("decoder", "encoder" or "encoder-decoder"). The batches it reads
    # and the metrics it shows, per form of data, its YAML names (`batches`, `metrics`; batching/, metrics.py).
    architecture: str
    # What it calls on the model beyond forward(), as its metrics do (config.classes.check_model, before the run):
    # each method and the option that does without it (None: none does); `decoding_needs`, what its
    # continuations() call when a metric decodes (BLEU).
    model_calls: dict[str, str | None] = {"forward_flops": "callbacks.throughput=null"}  # (throughput and MFU)

    @classmethod
    def decoding_needs(cls, settings: dict) -> dict[str, str | None]:
        return {}

    @classmethod
    def model_needs(cls, cfg, metrics: list[type]) -> dict[str, str | None]:
        """Each method a run's model must have, and the option that does without it: the task's own calls
        (forward_flops only with the throughput callback) and those of the metrics it shows for the data."""
        settings = OmegaConf.to_container(cfg.task, resolve=True)
        calls = {k: v for k, v in cls.model_calls.items() if k != "forward_flops" or cfg.callbacks.get("throughput")}
        for metric in metrics:
            calls.update(metric.model_needs(settings, cls))
        return calls

    def __init__(
        self,
        model: torch.nn.Module,
        optim: dict,
        checkpoint_meta: dict | None = None,
        metric: Metric | None = None,
    ):
        super().__init__()
        self.model, self.optim = model, optim
        self.checkpoint_meta = checkpoint_meta or {}
        self.metric = metric or Metrics([])  # what evaluation shows beyond the loss (metrics.py)
        self.skipped_steps = 0
        self.example_tables: dict[str, list[list]] = defaultdict(list)
        self.translations_dir: Path | None = None  # where evaluation writes its outputs (a run sets it)
        # Where evaluation puts each example's record (input, prediction, reference, exact), where a list:
        # the metrics that predict per example add to it (metrics.py `predicts`; evaluate's predictions=FILE).
        self.predictions: list[dict] | None = None
        self.pretrained: set[str] = set()  # the model's tensors init_from loaded (optim.pretrained_lr applies)
        self.specials = Specials()  # the data's ids of padding, start, end and separator (build() sets them)

    @classmethod
    def build(cls, cfg, model: torch.nn.Module, datamodule, checkpoint_meta: dict, metrics: list[type]) -> Task:
        """The task for a run's config, model and data module (run/build.py's one call), with the metrics its
        YAML names for the form of data the batches read (`metrics`: their classes, imported by the build)."""
        settings = OmegaConf.to_container(cfg.task, resolve=True)
        task = cls(
            model,
            OmegaConf.to_container(cfg.optim, resolve=True),
            checkpoint_meta=checkpoint_meta,
            metric=Metrics([metric(settings, datamodule, model) for metric in metrics]),
            **cls.settings(cfg, datamodule),
        )
        task.specials = datamodule.data.specials
        return task

    @classmethod
    def settings(cls, cfg, datamodule) -> dict:
        """What this task takes from the config and the data beyond the model, optim and checkpoint meta."""
        return {}

    def log_evaluation(self, split: str, loss, acc=None, ppl: bool = False) -> None:
        """`split/loss` (and `split/ppl`, `split/acc`) of this evaluation from its metrics (torchmetrics),
        which are reset for the next; then what the metric component shows."""
        value = loss.compute()
        loss.reset()
        self.log(f"{split}/loss", value, prog_bar=True)
        if ppl:
            self.log(f"{split}/ppl", value.exp())
        if acc is not None:
            self.log(f"{split}/acc", acc.compute(), prog_bar=True)
            acc.reset()
        self.metric.end(self, split)

    def show_examples(self, title: str, text: str, table: str, columns: list[str], rows: list[list]) -> None:
        """Print examples (samples, translations) to the console, and keep them in a W&B table."""
        if self.trainer.is_global_zero:
            log.info("%s at step %d:\n%s", title, self.global_step, text)
        self.example_tables[table] += rows
        for logger in self.loggers:
            if type(logger).__name__ == "WandbLogger":
                logger.log_text(key=table, columns=columns, data=self.example_tables[table])

    def batch_tokens(self, batch) -> int:
        """Token positions a training batch feeds the model (for throughput), from its shapes alone: the
        Throughput callback counts once per shape, as it does `batch_flops`."""
        return batch[0].numel()

    def batch_flops(self, batch) -> int:
        """Model FLOPs of a training step on this batch: forward and backward, 3 forward passes."""
        B, T = batch[0].shape
        return 3 * B * self.model.forward_flops(T)

    def logging_step(self) -> bool:
        """Whether this training step's metrics are written. Lightning writes step metrics only every
        log_every_n_steps (and the last, callbacks.history.StepAxis), and each self.log costs ~0.8 ms on CPU:
        log just the steps that are written."""
        return metrics_written(self.trainer, self.global_step + 1)  # once this step is taken

    def guarded(self, loss: torch.Tensor, count: torch.Tensor | int) -> torch.Tensor | None:
        """The loss to train on, or None to skip the step (Lightning then skips backward and the optimizer).
        Checked before backward, so the weights stay those of the last good step. `loss` is the mean over
        this process's `count` targets; see `global_mean`."""
        loss = self.global_mean(loss, count)
        if torch.isfinite(loss):
            if self.logging_step():  # the mean over DDP processes (each holds a shard of the batch)
                self.log("train/loss", loss, prog_bar=True, sync_dist=self.trainer.world_size > 1)
                self.log("train/lr", self.lr_schedulers().get_last_lr()[0])
            return loss
        if not self.optim["skip_nonfinite"]:
            kept = (
                "The last good checkpoint is kept"
                if any(
                    getattr(c, "best_model_path", "") or getattr(c, "last_model_path", "")
                    for c in self.trainer.checkpoint_callbacks
                )
                else "No checkpoint was saved before it"
            )
            rates = "optim.lr or optim.muon_lr" if str(self.optim["name"]) == "muon" else "optim.lr"
            raise NonFiniteLossError(
                f"the loss is {loss.item()} at step {self.global_step}; training stopped. {kept}; lower "
                f"{rates}, or set optim.skip_nonfinite=true to skip such steps."
            )
        self.skipped_steps += 1
        self.log("train/skipped_steps", float(self.skipped_steps))
        return None

    def global_mean(self, loss: torch.Tensor, count: torch.Tensor | int) -> torch.Tensor:
        """Under DDP, this process's mean loss over its `count` targets, weighted so that DDP's mean of the
        processes' gradients is the gradient of the mean over every target of the global batch. The shards of
        a batch hold unequal numbers of targets (padding, a batch size the processes do not divide), and the
        plain mean of per-process means would weigh a target in a small shard more. One process: unchanged."""
        world = self.trainer.world_size
        if world == 1:
            return loss
        count = torch.as_tensor(count, dtype=torch.float32, device=loss.device)
        total = self.trainer.strategy.reduce(count.clone(), reduce_op="sum")
        return loss * (count * world / total)

    @property
    def loss_scaled(self) -> bool:
        """Whether the loss is scaled (fp16's GradScaler), so gradients are clipped only once unscaled."""
        return getattr(self.trainer.precision_plugin, "scaler", None) is not None

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None) -> None:
        if self.loss_scaled:
            super().configure_gradient_clipping(optimizer, gradient_clip_val, gradient_clip_algorithm)
        elif gradient_clip_val:
            # Unscaled (float32, bf16) gradients clip the same under any optimizer; Lightning's AMP plugin refuses
            # a fused one under bf16 too, which cost the CPU preset fused AdamW's ~5% of a step.
            algorithm = GradClipAlgorithmType(gradient_clip_algorithm or "norm")
            Precision.clip_gradients(self.trainer.precision_plugin, optimizer, gradient_clip_val, algorithm)

    def configure_optimizers(self):
        o = self.optim
        fused = o["fused"]
        if fused and self.loss_scaled and self.trainer.gradient_clip_val:
            # A fused optimizer unscales fp16's gradients inside its step, after Lightning would clip them. None,
            # not False: torch then takes its multi-tensor (foreach) kernels on a GPU; an explicit False means
            # a loop over the parameters, which made the optimizer half of a multi30k step on an H100.
            fused = None
        groups = {"pretrained": self.pretrained, "pretrained_lr": o.get("pretrained_lr")}
        optimizers = {
            "adamw": lambda: adamw(
                self.model, o["lr"], o["weight_decay"], tuple(o["betas"]), o["eps"], fused, **groups
            ),
            "adafactor": lambda: adafactor(self.model, o["lr"], o["weight_decay"], **groups),
            "muon": lambda: muon(
                self.model,
                o["lr"],
                o["weight_decay"],
                tuple(o["betas"]),
                o["eps"],
                fused,
                o["muon_lr"],
                o["muon_momentum"],
                str(o["muon_shape_scaling"]),
                o["weight_decay"] if o.get("muon_weight_decay") is None else o["muon_weight_decay"],
                **groups,
                ns_dtype=getattr(torch, str(o["muon_precision"])),
            ),
        }
        optimizer = optimizers[str(o["name"])]()
        decay_steps = o["decay_steps"] or max(self.trainer.max_steps, 1)
        schedule = partial(
            warmup_cosine, lr=o["lr"], min_lr=o["min_lr"], warmup_steps=o["warmup_steps"], decay_steps=decay_steps
        )
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: schedule(step) / o["lr"])
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        # The resolved config and the vocabulary, so a checkpoint is enough to sample from; and the random
        # generators' states (dropout draws from them), so a resumed run continues exactly.
        checkpoint["transformer_lab"] = self.checkpoint_meta
        checkpoint["pretrained"] = sorted(self.pretrained)  # the tensors init_from loaded: optim.pretrained_lr's
        checkpoint["rng"] = {
            "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
            "python": list(random.getstate()[1]),
            "skipped_steps": self.skipped_steps,
        }

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        # (before configure_optimizers: a resumed run that started with init_from has its pretrained_lr groups)
        self.pretrained = set(checkpoint["pretrained"])
        rng = checkpoint["rng"]
        torch.set_rng_state(rng["torch"])
        if rng["cuda"] and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(rng["cuda"])
        random.setstate((3, tuple(rng["python"]), None))
        self.skipped_steps = rng["skipped_steps"]
