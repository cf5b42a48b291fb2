"""`python train.py ...` and `python -m transformer_lab ...` as subprocess.run and subprocess.Popen start them, but
forked from a process that has imported torch, Lightning and Hydra once (tests/helpers/fork_server.py): each
start costs a fork instead of about 4 s of imports. The child is otherwise a fresh interpreter (its own
sys.argv, sys.path, environment, folder, streams and random seeds; transformer_lab and a user's code imported
afresh), with a real pid that signals reach.

What a fork cannot give, a plain subprocess does: a command is forked only where it is `sys.executable
SCRIPT_FILE ...` or `sys.executable -m MODULE ...` (no interpreter options, an existing file), on Linux, with the
variables read while Python and the libraries start (PYTHON*, OMP_*, HF_*, TORCH*, the locale, ...: START_UP) as
the server has them; anything else starts plainly. Left as they are: the hash seed (the server's), the warning
filters the libraries' imports add (in the server's order), and `ps` naming the server's script.

One server per test process (each xdist worker), started on first use in a session of its own (a terminal's
Ctrl-C is the test run's), and stopped when that process exits."""

import atexit
import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

SERVER = Path(__file__).resolve().with_name("fork_server.py")
# Environment variables read as Python and the server's libraries start (not emulated in a child; PYTHONPATH is)
START_UP = ("PYTHON", "OMP_", "MKL_", "OPENBLAS_", "KMP_", "LC_", "LANG", "HF_", "HUGGINGFACE", "TRANSFORMERS_")
START_UP += ("TORCH", "PYTORCH", "CUDA", "PL_", "LD_", "MALLOC", "TZ")


def start_up(env) -> dict:
    return {k: v for k, v in env.items() if k.startswith(START_UP) and k != "PYTHONPATH"}


class _Server:
    """The fork server of this process, started on first use."""

    process = address = log = None
    ready = False
    env = None  # its environment: this process's when it started, without PYTHONPATH

    @classmethod
    def environment(cls) -> dict:
        if cls.env is None:
            cls.env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        return cls.env

    @classmethod
    def connect(cls) -> socket.socket:
        if cls.process is not None and cls.process.poll() is not None:  # killed: a new one
            cls.process, cls.ready = None, False
        if cls.process is None:
            name = f"transformer-lab-fork-server-{os.getpid()}-{uuid.uuid4().hex}"
            cls.address = f"\0{name}"  # in the abstract namespace: no file to leave behind, no path too long
            cls.log = tempfile.TemporaryFile()
            cls.process = subprocess.Popen(
                [sys.executable, str(SERVER), name],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=cls.log,
                env=cls.environment(),
                start_new_session=True,
            )
            atexit.register(cls.process.stdin.close)  # its stdin closed: it stops
        if not cls.ready:  # (a start interrupted, by a test's timeout, is waited for by the next command)
            line = cls.process.stdout.readline()
            if line != b"ready\n":
                raise RuntimeError(f"the fork server did not start: {cls.problem()}")
            cls.ready = True
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        connection.connect(cls.address)
        return connection

    @classmethod
    def problem(cls) -> str:
        cls.log.seek(0)
        lines = cls.log.read().decode(errors="replace").strip().splitlines()
        return lines[-1] if lines else f"nothing on its stderr (run {SERVER} ADDRESS by hand)"


def forkable(args, cwd=None, env=None) -> bool:
    """Whether a command runs as a fork of the server (else as a plain subprocess): see the module's docstring."""
    if sys.platform != "linux" or not isinstance(args, (list, tuple)) or len(args) < 2:
        return False
    args = [os.fspath(a) for a in args]
    if args[0] != sys.executable:
        return False
    if args[1] == "-m":
        runs = len(args) >= 3 and not args[2].startswith("-")
    else:
        script = os.path.join(cwd or os.getcwd(), args[1])
        runs = not args[1].startswith("-") and os.path.isfile(script) and not args[1].endswith(os.sep)
    return runs and start_up(os.environ if env is None else env) == start_up(_Server.environment())


class Popen(subprocess.Popen):
    """subprocess.Popen for a Python command, forked from the fork server where it can be. Waiting and polling
    read the child's status from the server (the child is the server's, not this process's)."""

    _connection = None

    def _execute_child(
        self, args, executable, preexec_fn, close_fds, pass_fds, cwd, env, startupinfo, creationflags, shell,
        p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite, *rest,
    ):  # fmt: skip
        plain = executable is not None or preexec_fn is not None or pass_fds or shell
        if plain or not forkable(args, cwd, env):
            return super()._execute_child(
                args, executable, preexec_fn, close_fds, pass_fds, cwd, env, startupinfo, creationflags, shell,
                p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite, *rest,
            )  # fmt: skip
        command = {
            "args": [os.fspath(a) for a in args[1:]],
            "cwd": os.path.abspath(cwd if cwd is not None else os.getcwd()),
            "env": {os.fsdecode(k): os.fsdecode(v) for k, v in (os.environ if env is None else env).items()},
        }
        # -1: not redirected, so the child shares this process's stream
        fds = [0 if p2cread == -1 else p2cread, 1 if c2pwrite == -1 else c2pwrite, 2 if errwrite == -1 else errwrite]
        self._connection = _Server.connect()
        socket.send_fds(self._connection, [json.dumps(command).encode()], fds)
        self.pid = int(self._connection.recv(64))
        self._child_created = True
        self._close_pipe_fds(p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite)

    def _status(self, block: bool):
        """(pid, wait status) once the child has ended, else (0, 0)."""
        self._connection.setblocking(block)
        try:
            status = self._connection.recv(64)
        except BlockingIOError:
            return 0, 0
        self._connection.close()
        if not status:
            raise subprocess.SubprocessError(f"the fork server ended before pid {self.pid}: its exit status is lost")
        return self.pid, int(status)

    def _try_wait(self, wait_flags):
        if self._connection is None:
            return super()._try_wait(wait_flags)
        return self._status(block=not wait_flags & os.WNOHANG)

    def _internal_poll(self, _deadstate=None, **kwargs):
        if self._connection is None:
            return super()._internal_poll(_deadstate, **kwargs)
        if self.returncode is None and self._waitpid_lock.acquire(False):
            try:
                if self.returncode is None:
                    pid, status = self._status(block=False)
                    if pid:
                        self._handle_exitstatus(status)
            except (OSError, subprocess.SubprocessError):
                if _deadstate is not None:
                    self.returncode = _deadstate
            finally:
                self._waitpid_lock.release()
        return self.returncode


def run(args, *, input=None, capture_output=False, timeout=None, check=False, **kwargs):
    """subprocess.run with this module's Popen."""
    if input is not None:
        kwargs["stdin"] = subprocess.PIPE
    if capture_output:
        kwargs["stdout"] = kwargs["stderr"] = subprocess.PIPE
    with Popen(args, **kwargs) as process:
        try:
            stdout, stderr = process.communicate(input, timeout=timeout)
        except BaseException:
            with contextlib.suppress(Exception):  # the error that stopped it is the one to tell
                process.kill()
                process.wait()
            raise
        code = process.poll()
    if check and code:
        raise subprocess.CalledProcessError(code, process.args, output=stdout, stderr=stderr)
    return subprocess.CompletedProcess(process.args, code, stdout, stderr)
