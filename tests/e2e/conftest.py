"""The e2e tier: tests that run train.py or a command (seconds each): in the test's process, through their own
code paths (helpers/runs.py), or in a process of their own where the process is the point. Every test under
tests/e2e is marked e2e here, so `-m e2e` and `-m "not e2e"` still pick the tiers out of a whole run."""

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


@pytest.hookimpl(tryfirst=True)  # before -m deselects by marker
def pytest_collection_modifyitems(items):
    for item in items:
        if HERE in item.path.resolve().parents:
            item.add_marker(pytest.mark.e2e)
