"""Lightning callbacks: throughput, and the summary.json writer."""

from transformer_lab.callbacks.summary import Summary
from transformer_lab.callbacks.throughput import Throughput

__all__ = ["Summary", "Throughput"]
