"""What both tiers share at run time: one thread per process and the long-lived train.py of each worker.
Everything else the tests share is the package helpers/ (tests/ is on the path: pyproject's pythonpath)."""

import os

import pytest

import transformer_lab.config.schema  # noqa: F401  (registers the schemas, for every test that composes a config)
from helpers.runs import TrainProcess

# One thread per process: the suite runs a worker per core, each starting train.py processes, and the
# tests' tiny models gain nothing from more threads (two each made the suite ~17% slower on 2 cores).
os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(scope="session")
def train_process():
    """One TrainProcess per test worker, for the short trainings of tests that need nothing of a fresh
    interpreter (no signal, environment or working directory of their own): the imports are paid once."""
    process = TrainProcess()
    yield process
    process.close()


@pytest.fixture(autouse=True)
def default_signal_handling():
    """Each test starts with Ctrl-C and SIGTERM as a terminal gives them: a test that ran Lightning in this
    worker may have left SIGINT ignored (Lightning ignores it while it shuts down after a KeyboardInterrupt),
    and a process a later test starts would inherit that and never see the Ctrl-C it is sent."""
    import signal

    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    yield
