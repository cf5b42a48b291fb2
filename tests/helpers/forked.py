"""`python train.py ...` and `python -m transformer_lab ...` as subprocess.run and subprocess.Popen start them, but
forked from a process that has imported torch, Lightning and Hydra once (tests/helpers/fork_server.py): each
start costs a fork instead of about 4 s of imports. The child is otherwise a fresh interpreter (its own
sys.argv, sys.path, environment, folder and streams; transformer_lab and a user's code imported afresh), with
a real pid that signals reach. Commands that are not `sys.executable SCRIPT|-m MODULE ...` (other programs,
interpreter options) start as plain subprocesses.

One server per test worker, started on first use and stopped when the worker exits."""

import atexit
import json
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

SERVER = Path(__file__).resolve().with_name("fork_server.py")


class _Server:
    """The fork server of this process (a test worker), started on first use."""

    process = None

    @classmethod
    def address(cls) -> str:
        if cls.process is None or cls.process.poll() is not None:
            folder = tempfile.mkdtemp(prefix="fork-server-")
            cls.socket = os.path.join(folder, "socket")
            env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the children bring their own
            cls.process = subprocess.Popen(
                [sys.executable, str(SERVER), cls.socket], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env
            )
            ready = cls.process.stdout.readline()
            if ready != b"ready\n":
                raise RuntimeError(f"the fork server did not start ({ready!r}): run {SERVER} by hand to see why")
            atexit.register(cls.process.stdin.close)  # its stdin closed: it stops
        return cls.socket


def forkable(args) -> bool:
    """Whether a command is `python SCRIPT ...` or `python -m MODULE ...` with no interpreter options."""
    args = [str(a) for a in args] if isinstance(args, (list, tuple)) else []
    return len(args) >= 2 and args[0] == sys.executable and (args[1] == "-m" or not args[1].startswith("-"))


class Popen(subprocess.Popen):
    """subprocess.Popen for a Python command, forked from the fork server where it can be. Waiting and polling
    read the child's status from the server (the child is the server's, not this process's)."""

    _connection = None

    def _execute_child(
        self, args, executable, preexec_fn, close_fds, pass_fds, cwd, env, startupinfo, creationflags, shell,
        p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite, *rest,
    ):  # fmt: skip
        if not forkable(args) or executable is not None or preexec_fn is not None or pass_fds or shell:
            return super()._execute_child(
                args, executable, preexec_fn, close_fds, pass_fds, cwd, env, startupinfo, creationflags, shell,
                p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite, *rest,
            )  # fmt: skip
        command = {
            "args": [str(a) for a in args[1:]],
            "cwd": os.path.abspath(cwd if cwd is not None else os.getcwd()),
            "env": {str(k): str(v) for k, v in (os.environ if env is None else env).items()},
        }
        devnull = os.open(os.devnull, os.O_RDWR)
        try:
            # -1: not redirected, so the child shares this process's stream (stdin: nothing to read)
            fds = [
                devnull if p2cread == -1 else p2cread,
                1 if c2pwrite == -1 else c2pwrite,
                2 if errwrite == -1 else errwrite,
            ]
            self._connection = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            self._connection.connect(_Server.address())
            socket.send_fds(self._connection, [json.dumps(command).encode()], fds)
            self.pid = int(self._connection.recv(64))
            self._child_created = True
        finally:
            os.close(devnull)
        self._close_pipe_fds(p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite)

    def _status(self, block: bool):
        """(pid, wait status) once the child has ended, else (0, 0)."""
        self._connection.setblocking(block)
        try:
            status = self._connection.recv(64)
        except BlockingIOError:
            return 0, 0
        self._connection.close()
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
            except OSError:
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
            process.kill()
            process.wait()
            raise
        code = process.poll()
    if check and code:
        raise subprocess.CalledProcessError(code, process.args, output=stdout, stderr=stderr)
    return subprocess.CompletedProcess(process.args, code, stdout, stderr)
