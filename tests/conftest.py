"""What both tiers share at run time: one thread per process, and each test's signal handling as a terminal's.
Everything else the tests share is the package helpers/ (tests/ is on the path: pyproject's pythonpath)."""

import os

# One thread per process: the suite runs a worker per core, each running train.py's code, and the tests' tiny
# models gain nothing from more threads (two each made the suite ~17% slower on 2 cores). Set before torch is
# imported, which reads it as it starts.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest  # noqa: E402

import transformer_lab.config.schema  # noqa: E402, F401  (registers the schemas, for every test that composes a config)


def pytest_configure(config):
    """In each process that runs tests (not xdist's controller, which runs none), helpers.runs before any test
    module is collected: it learns the warning filters Lightning and the package set as they are imported, which a
    run in the test's process should have (and pytest takes away again after collection)."""
    if not config.getoption("numprocesses", None) or hasattr(config, "workerinput"):
        import helpers.runs  # noqa: F401


@pytest.fixture(autouse=True)
def default_signal_handling():
    """Each test starts with Ctrl-C and SIGTERM as a terminal gives them: a test that ran Lightning in this
    worker may have left SIGINT ignored (Lightning ignores it while it shuts down after a KeyboardInterrupt),
    and a process a later test starts would inherit that and never see the Ctrl-C it is sent."""
    import signal

    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    yield
