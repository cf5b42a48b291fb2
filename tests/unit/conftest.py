"""The unit tier (`make test-fast` runs tests/unit): no test here starts Python in a subprocess (train.py, a
command), so the tier stays fast by construction; such a test belongs in tests/e2e."""

import subprocess
import sys

import pytest

from helpers.run_dirs import seeded_runs
from helpers.trained_runs import trained_runs


@pytest.fixture(autouse=True)
def no_python_in_a_subprocess(request, monkeypatch):
    """Fails the test that starts `sys.executable` in a subprocess."""
    nodeid = request.node.nodeid
    popen_init = subprocess.Popen.__init__

    def popen_init_without_python(self, args, *rest, **kwargs):
        command = args if isinstance(args, (list, tuple)) else [args]
        if str(command[0]) == sys.executable:
            pytest.fail(
                f"{nodeid} starts Python in a subprocess ({' '.join(map(str, command[:3]))} ...): "
                "move it to tests/e2e (`make test-fast` runs tests/unit alone)",
                pytrace=False,
            )
        popen_init(self, args, *rest, **kwargs)

    monkeypatch.setattr(subprocess.Popen, "__init__", popen_init_without_python)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """run(name) -> the directory of a tiny run of helpers/trained_runs.py RUNS, trained once a session."""
    return trained_runs(tmp_path_factory)


@pytest.fixture
def seeded(tmp_path):
    """Five run directories: two learning rates, three and two seeds; val/loss chosen by hand."""
    return seeded_runs(tmp_path)
