"""Training throughput in tokens per second and model FLOPs utilisation, with validation time left out."""

from __future__ import annotations

import logging
import time

import lightning as L
import torch
from lightning.fabric.utilities.throughput import get_available_flops

from transformer_lab.choices import check_number

log = logging.getLogger(__name__)

# Dense tensor-core peaks of the H200, which Lightning's table misses under the name CUDA reports
# ("NVIDIA H200"): the H100 SXM's compute die, so its figures.
_H200_FLOPS = {torch.float32: 66.9e12, "tfloat32": 494.7e12, torch.bfloat16: 989.4e12, torch.float16: 989.4e12}


def compute_dtype(precision: str) -> torch.dtype:
    """The dtype matmuls run in under a Lightning precision setting."""
    if precision.startswith("bf16"):
        return torch.bfloat16
    if precision.startswith("16"):
        return torch.float16
    return torch.float32


def device_peak_flops(device: torch.device, precision: str) -> float | None:
    """Peak FLOP/s of one device for the precision in use, or None where unknown (every CPU)."""
    if device.type != "cuda":
        return None
    dtype = compute_dtype(precision)
    if "h200" in torch.cuda.get_device_name(device).lower():
        if dtype is torch.float32 and torch.get_float32_matmul_precision() != "highest":
            dtype = "tfloat32"
        return _H200_FLOPS[dtype]
    return get_available_flops(device, dtype)


class Throughput(L.Callback):
    """Logs `throughput/tokens_per_sec` over the steps since the last log and, where the device's peak is
    known, `throughput/mfu`: model FLOPs per second (models' `forward_flops`, x3 for the backward pass)
    over the peak of all devices. Whole-run figures (first step left out: it pays for lazy initialisation)
    go to summary.json.

    peak_flops: one device's peak FLOP/s; None looks it up for the GPU and precision in use.
    """

    def __init__(self, log_every_n_steps: int = 50, peak_flops: float | None = None):
        check_number("peak_flops", peak_flops, False, "(0, inf)", nullable=True)  # (FLOP/s, e.g. 989e12)
        self.log_every_n_steps = log_every_n_steps
        self.peak_flops = peak_flops
        self.tokens_per_sec: float | None = None
        self.flops_per_token: float | None = None
        self.mfu: float | None = None
        self.train_time_s: float | None = None  # the wall time of training steps 2 to N (tokens_per_sec's)
        self._total = [0, 0, 0.0]  # tokens, flops, seconds
        self._window = [0, 0, 0.0]
        self._last: float | None = None
        self._counts: dict[tuple, tuple[int, int]] = {}  # batch shapes -> (tokens, FLOPs)

    def on_fit_start(self, trainer, pl_module):
        if self.peak_flops is None:
            self.peak_flops = device_peak_flops(trainer.strategy.root_device, str(trainer.precision))
            if self.peak_flops is None and trainer.strategy.root_device.type == "cuda":
                log.warning(
                    "no peak FLOP/s known for %s: set callbacks.throughput.peak_flops for throughput/mfu",
                    torch.cuda.get_device_name(trainer.strategy.root_device),
                )

    def _mfu(self, flops: int, seconds: float, world_size: int) -> float | None:
        if self.peak_flops is None or seconds <= 0:
            return None
        return flops / seconds / (self.peak_flops * world_size)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if self._last is None:
            self._last = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        now = time.perf_counter()
        elapsed, self._last = now - self._last, now
        # Every process's batch has the same shape (translation's padded lengths differ a little). Both counts
        # depend only on the shapes, and counting a model's FLOPs walks its modules: once per shape.
        shapes = tuple(t.shape for t in batch if isinstance(t, torch.Tensor))
        if shapes not in self._counts:
            self._counts[shapes] = (pl_module.batch_tokens(batch), pl_module.batch_flops(batch))
        tokens, flops = self._counts[shapes]
        step = (tokens * trainer.world_size, flops * trainer.world_size, elapsed)
        if trainer.global_step > 1:
            self._total = [a + b for a, b in zip(self._total, step)]
            tokens, flops, seconds = self._total
            self.tokens_per_sec, self.flops_per_token = tokens / seconds, flops / tokens
            self.train_time_s = seconds
            self.mfu = self._mfu(flops, seconds, trainer.world_size)
        self._window = [a + b for a, b in zip(self._window, step)]
        if trainer.global_step % self.log_every_n_steps == 0:
            tokens, flops, seconds = self._window
            pl_module.log("throughput/tokens_per_sec", tokens / seconds)
            if (mfu := self._mfu(flops, seconds, trainer.world_size)) is not None:
                pl_module.log("throughput/mfu", mfu)
            self._window = [0, 0, 0.0]

    def on_validation_start(self, trainer, pl_module):
        self._last = None  # the next training step starts a fresh interval

    def on_validation_end(self, trainer, pl_module):
        self._last = None
