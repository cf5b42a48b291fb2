"""helpers.forked starts `python SCRIPT` and `python -m MODULE` as forks of a server that has imported the libraries:
each child must look to its command like a fresh interpreter, or the e2e tests it serves would test something else."""

import json
import signal
import subprocess
import sys

import pytest

from helpers import forked

PROBE = """
import atexit, json, os, sys
atexit.register(lambda: print("atexit ran", flush=True))
print(json.dumps({
    "argv": sys.argv, "path": sys.path[:3], "cwd": os.getcwd(), "env": os.environ.get("PROBE"),
    "ours": sorted(m for m in sys.modules if m.split(".")[0] in ("transformer_lab", "helpers", "probe_mod")),
    "main": __name__, "stdin": sys.stdin.read(),
    "sigint": str(__import__("signal").getsignal(2)),
}))
ending = sys.argv[1] if len(sys.argv) > 1 else ""
if ending == "exit":
    sys.exit(3)
if ending == "message":
    sys.exit("gone")
if ending == "raise":
    raise ValueError("boom")
if ending == "interrupt":
    raise KeyboardInterrupt
if ending == "kill":
    os.kill(os.getpid(), 9)
"""


@pytest.fixture
def probe(tmp_path):
    (tmp_path / "lib").mkdir()
    (tmp_path / "probe.py").write_text(PROBE)
    (tmp_path / "probe_mod.py").write_text(PROBE)
    return tmp_path


def run(probe, *args, **kwargs):
    return forked.run([sys.executable, *map(str, args)], capture_output=True, text=True, cwd=probe, **kwargs)


def test_a_script_starts_as_python_starts_it(probe):
    result = run(probe, probe / "probe.py", "exit", env={"PROBE": "1", "PYTHONPATH": "lib"}, input="typed")
    assert result.returncode == 3
    first, last = result.stdout.splitlines()
    seen = json.loads(first)
    assert seen["argv"] == [str(probe / "probe.py"), "exit"] and seen["cwd"] == str(probe) and seen["env"] == "1"
    assert seen["path"][:2] == [str(probe), str(probe / "lib")]  # the script's folder, then PYTHONPATH
    assert seen["ours"] == [] and seen["main"] == "__main__" and seen["stdin"] == "typed"
    assert seen["sigint"] == str(signal.default_int_handler)
    assert last == "atexit ran"
    assert result.stdout == subprocess.run(
        [sys.executable, probe / "probe.py", "exit"], input="typed", capture_output=True, text=True, cwd=probe,
        env={"PROBE": "1", "PYTHONPATH": "lib"},
    ).stdout  # fmt: skip


def test_a_module_starts_as_python_m_starts_it(probe):
    result = run(probe, "-m", "probe_mod", "x", env={})
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout.splitlines()[0])
    assert seen["argv"] == [str(probe / "probe_mod.py"), "x"] and seen["path"][0] == str(probe)
    assert seen["ours"] == [] and seen["main"] == "__main__"
    fresh = subprocess.run([sys.executable, "-m", "probe_mod", "x"], capture_output=True, text=True, cwd=probe, env={})
    assert result.stdout == fresh.stdout


@pytest.mark.parametrize(
    "ending, code, stderr",
    [
        ("message", 1, "gone\n"),
        ("raise", 1, "ValueError: boom\n"),
        ("interrupt", -signal.SIGINT, "KeyboardInterrupt\n"),
        ("kill", -signal.SIGKILL, ""),
    ],
)
def test_a_child_ends_with_the_code_python_would(probe, ending, code, stderr):
    result = run(probe, probe / "probe.py", ending)
    assert result.returncode == code and result.stderr.endswith(stderr)
    assert result.stdout.endswith("atexit ran\n") == (ending != "kill")


def test_a_running_child_is_signalled_polled_and_waited_for(probe):
    (probe / "wait.py").write_text("import sys, time\nprint('up', flush=True)\ntime.sleep(60)\n")
    process = forked.Popen([sys.executable, probe / "wait.py"], stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline() == "up\n" and process.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        process.wait(timeout=0.2)
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=30) == -signal.SIGTERM
    process.stdout.close()


def test_other_commands_start_as_plain_subprocesses(probe):
    assert not forked.forkable([sys.executable, "-c", "pass"]) and not forked.forkable(["bash", "-c", "true"])
    assert forked.run(["bash", "-c", "exit 4"]).returncode == 4
    assert forked.run([sys.executable, "-c", "import sys; sys.exit(5)"]).returncode == 5
