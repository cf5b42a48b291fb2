"""Lightning callbacks: throughput, attention maps at validation, the summary.json writer, metric history, graceful interrupts, Grokfast, grokking's
progress measures, the weights' moving average, the progress bar, last.ckpt at the end, the loggers' runs in checkpoints, the run directory settled once training starts, a moved run's checkpoint records."""

from transformer_lab.callbacks.attention_images import AttentionImages
from transformer_lab.callbacks.ema import EMAWeightAveraging
from transformer_lab.callbacks.grokfast import GrokfastEMA
from transformer_lab.callbacks.grokking import GrokkingProgress
from transformer_lab.callbacks.history import History, StepAxis
from transformer_lab.callbacks.interrupt import GracefulInterrupt
from transformer_lab.callbacks.last_checkpoint import LastCheckpoint
from transformer_lab.callbacks.logger_versions import LoggerVersions
from transformer_lab.callbacks.long_run import LongRunWarning
from transformer_lab.callbacks.moved import MovedRun
from transformer_lab.callbacks.progress import ModelSummary, RichProgressBar
from transformer_lab.callbacks.started import TrainingStarted
from transformer_lab.callbacks.summary import Summary
from transformer_lab.callbacks.throughput import Throughput

__all__ = [
    "AttentionImages",
    "EMAWeightAveraging",
    "GracefulInterrupt",
    "GrokfastEMA",
    "GrokkingProgress",
    "History",
    "LastCheckpoint",
    "LoggerVersions",
    "LongRunWarning",
    "ModelSummary",
    "MovedRun",
    "RichProgressBar",
    "StepAxis",
    "Summary",
    "Throughput",
    "TrainingStarted",
]
