"""The one writer (store/atomic.py) and the run directory's claim (store/rundir.py) where a process is the point:
SIGTERM mid-write, a writer killed outright, a second process holding the directory."""

import signal
import subprocess
import sys

import pytest

from transformer_lab.errors import UserError
from transformer_lab.store.atomic import atomic_dir
from transformer_lab.store.rundir import check_claim

SIGTERM_MID_WRITE = """
import os, signal, sys, time
from pathlib import Path
from transformer_lab.store.atomic import atomic_dir
from transformer_lab.store.rundir import stop_on_sigterm
stop_on_sigterm()
with atomic_dir(Path(sys.argv[1]) / "maps") as staging:
    (staging / "a.png").write_bytes(b"half")
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(30)
"""


def test_sigterm_mid_write_removes_the_staging_folder_and_exits_143(tmp_path):
    result = subprocess.run([sys.executable, "-c", SIGTERM_MID_WRITE, str(tmp_path)], capture_output=True, timeout=60)
    assert result.returncode == 128 + signal.SIGTERM, result.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_killed_writers_staging_folder_is_removed_by_the_next_writer(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(dead.stdout)
    from transformer_lab.store.atomic import _HOST

    stale = tmp_path / f".maps.{pid}@{_HOST}.abcd.tmp"
    stale.mkdir()
    (stale / "a.png").write_bytes(b"half")
    with atomic_dir(tmp_path / "maps") as staging:
        (staging / "a.png").write_bytes(b"whole")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["maps"]


HOLDER = """
import sys, time
from transformer_lab.store.rundir import claim
claim(sys.argv[1], "hydra.run.dir", None, False)
print("held", flush=True)
time.sleep(30)
"""


def test_check_claim_names_the_process_writing_there(tmp_path):
    run = tmp_path / "run"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(run)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(UserError) as error:
            check_claim(run, "hydra.run.dir", None, False)
        assert str(error.value) == (
            f"hydra.run.dir={run}: another process (pid {holder.pid}) is writing to this run directory; "
            "wait for it to end, or choose another hydra.run.dir"
        )
    finally:
        holder.kill()
        holder.wait()
