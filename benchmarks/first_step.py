"""Seconds from the process's start to its first training step: a callback that prints them and ends the
process there. Item 1 of issue #15 records it for `python train.py` with the defaults:

    PYTHONPATH=benchmarks python train.py +callbacks.first_step._target_=first_step.FirstStep logger=none
"""

import os
import time

from lightning.pytorch.callbacks import Callback


def process_start() -> float:
    """This process's start, in time.time()'s clock (Linux: /proc)."""
    ticks = int(open("/proc/self/stat").read().rsplit(")", 1)[1].split()[19])
    boot = next(float(line.split()[1]) for line in open("/proc/stat") if line.startswith("btime"))
    return boot + ticks / os.sysconf("SC_CLK_TCK")


class FirstStep(Callback):
    def on_train_batch_start(self, *args) -> None:
        print(f"first training step after {time.time() - process_start():.2f} s", flush=True)
        os._exit(0)
