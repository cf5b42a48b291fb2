"""helpers.forked starts `python SCRIPT` and `python -m MODULE` as forks of a server that has imported the libraries:
each child must look to its command like a fresh interpreter, or the e2e tests it serves would test something else."""

import json
import os
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
    "torch": __import__("torch").initial_seed(),
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
    assert forked.forkable([sys.executable, *args], probe, kwargs.get("env"))  # (else this tests subprocess)
    return forked.run([sys.executable, *map(str, args)], capture_output=True, text=True, cwd=probe, **kwargs)


def test_a_script_starts_as_python_starts_it(probe):
    env = {**os.environ, "PROBE": "1", "PYTHONPATH": "lib"}
    result = run(probe, probe / "probe.py", "exit", env=env, input="typed")
    assert result.returncode == 3
    first, last = result.stdout.splitlines()
    seen = json.loads(first)
    assert seen.pop("torch") != json.loads(run(probe, probe / "probe.py", env=env).stdout.splitlines()[0])["torch"]
    assert seen["argv"] == [str(probe / "probe.py"), "exit"] and seen["cwd"] == str(probe) and seen["env"] == "1"
    assert seen["path"][:2] == [str(probe), str(probe / "lib")]  # the script's folder, then PYTHONPATH
    assert seen["ours"] == [] and seen["main"] == "__main__" and seen["stdin"] == "typed"
    assert seen["sigint"] == str(signal.default_int_handler)
    assert last == "atexit ran"
    fresh = subprocess.run(
        [sys.executable, probe / "probe.py", "exit"], input="typed", capture_output=True, text=True, cwd=probe, env=env
    )
    assert json.loads(fresh.stdout.splitlines()[0]).keys() == {**seen, "torch": 0}.keys()
    assert {k: v for k, v in json.loads(fresh.stdout.splitlines()[0]).items() if k != "torch"} == seen


def test_a_module_starts_as_python_m_starts_it(probe):
    result = run(probe, "-m", "probe_mod", "x")
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout.splitlines()[0])
    assert seen["argv"] == [str(probe / "probe_mod.py"), "x"] and seen["path"][0] == str(probe)
    assert seen["ours"] == [] and seen["main"] == "__main__"
    fresh = subprocess.run([sys.executable, "-m", "probe_mod", "x"], capture_output=True, text=True, cwd=probe)
    assert {**json.loads(fresh.stdout.splitlines()[0]), "torch": 0} == {**seen, "torch": 0}


@pytest.mark.parametrize(
    "ending, code", [("message", 1), ("raise", 1), ("interrupt", -signal.SIGINT), ("kill", -signal.SIGKILL)]
)
def test_a_child_ends_with_the_code_and_the_words_python_would(probe, ending, code):
    result = run(probe, probe / "probe.py", ending)
    fresh = subprocess.run([sys.executable, probe / "probe.py", ending], capture_output=True, text=True, cwd=probe)
    assert result.returncode == fresh.returncode == code
    assert result.stderr == fresh.stderr  # the traceback of the script's own frames alone
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


def test_what_a_fork_cannot_give_starts_as_a_plain_subprocess(probe):
    assert not forked.forkable([sys.executable, "-c", "pass"]) and not forked.forkable(["bash", "-c", "true"])
    assert forked.run(["bash", "-c", "exit 4"]).returncode == 4
    assert forked.run([sys.executable, "-c", "import sys; sys.exit(5)"]).returncode == 5
    # python's own refusals: a file that is not there, -m without a module
    for args in ([probe / "nope.py"], [f"{probe / 'probe.py'}/"], ["-m"]):
        assert not forked.forkable([sys.executable, *args], probe)
        assert forked.run([sys.executable, *args], capture_output=True).returncode == 2
    # variables read while Python and torch start: the server's are not the command's
    for name, value in (("OMP_NUM_THREADS", "3"), ("PYTHONHASHSEED", "7"), ("HF_HUB_OFFLINE", "1")):
        env = {**os.environ, name: value}
        assert not forked.forkable([sys.executable, probe / "probe.py"], probe, env)
    (probe / "threads.py").write_text("import torch\nprint(torch.get_num_threads())\n")
    threads = [sys.executable, probe / "threads.py"]
    for n in ("1", "2"):
        result = forked.run(threads, env={**os.environ, "OMP_NUM_THREADS": n}, capture_output=True, text=True)
        assert result.stdout == f"{n}\n"


def test_the_server_is_out_of_reach_of_a_terminals_ctrl_c(probe):
    run(probe, probe / "probe.py")
    assert os.getsid(forked._Server.process.pid) != os.getsid(0)
