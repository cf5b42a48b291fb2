"""metrics.jsonl: every metric at every step it is logged, one JSON object per line (written by
callbacks/history.py; read by the runs, compare and the experiment plots with store.files.read_jsonl, which leaves
out a last line cut short by a crash), and which steps have their metrics written."""

from __future__ import annotations


def last_step(trainer) -> bool:
    return 0 < trainer.max_steps <= trainer.global_step


def metrics_written(trainer, step: int) -> bool:
    """Whether the training metrics of `step` (optimizer steps done) are written: every log_every_n_steps,
    and the last (StepAxis). The task logs only those steps (Task.logging_step)."""
    return step % trainer.log_every_n_steps == 0 or 0 < trainer.max_steps <= step
