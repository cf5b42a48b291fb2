"""Training throughput in tokens per second, with validation time left out."""

from __future__ import annotations

import time

import lightning as L


class Throughput(L.Callback):
    """Logs `throughput/tokens_per_sec` over the steps since the last log, and keeps the whole-run
    figure (first step left out: it pays for lazy initialisation) in `tokens_per_sec`."""

    def __init__(self, log_every_n_steps: int = 50):
        self.log_every_n_steps = log_every_n_steps
        self.tokens_per_sec: float | None = None
        self._total_tokens = 0
        self._total_time = 0.0
        self._window_tokens = 0
        self._window_time = 0.0
        self._last: float | None = None

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if self._last is None:
            self._last = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        now = time.perf_counter()
        elapsed, self._last = now - self._last, now
        tokens = pl_module.batch_tokens(batch) * trainer.world_size
        if trainer.global_step > 1:
            self._total_tokens += tokens
            self._total_time += elapsed
            self.tokens_per_sec = self._total_tokens / self._total_time
        self._window_tokens += tokens
        self._window_time += elapsed
        if trainer.global_step % self.log_every_n_steps == 0:
            pl_module.log("throughput/tokens_per_sec", self._window_tokens / self._window_time)
            self._window_tokens, self._window_time = 0, 0.0

    def on_validation_start(self, trainer, pl_module):
        self._last = None  # the next training step starts a fresh interval

    def on_validation_end(self, trainer, pl_module):
        self._last = None
