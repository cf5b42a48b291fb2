"""Lightning callbacks: throughput, the summary.json writer, graceful interrupts."""

from transformer_lab.callbacks.interrupt import GracefulInterrupt
from transformer_lab.callbacks.summary import Summary
from transformer_lab.callbacks.throughput import Throughput

__all__ = ["GracefulInterrupt", "Summary", "Throughput"]
