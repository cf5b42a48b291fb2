"""Starts `python SCRIPT ARGS` and `python -m MODULE ARGS` as forks of this process, which has imported the
libraries every command imports (torch, Lightning, Hydra: about 4 s a start here) once. Started by
helpers.forked, which sends each command over a Unix socket: its arguments, folder, environment and the three
file descriptors it reads and writes. The answer is the child's pid, then its wait status when it ends.

A child is a fresh `python` but for those libraries: this process never imports transformer_lab or a user's
code, and the child starts with the command's own sys.argv, sys.path (its folder, then PYTHONPATH, then the
interpreter's), environment, working folder, standard streams, default signal handlers and fresh random seeds
(numpy's and torch's global generators), and leaves through the interpreter's own exit (atexit handlers, the
exit code of SystemExit, a traceback and 1, or SIGINT's death for a KeyboardInterrupt). What it cannot give a
child is said in helpers.forked, which starts such commands as plain subprocesses instead."""

import atexit
import io
import json
import os
import runpy
import selectors
import signal
import socket
import sys
import threading
import traceback

import hydra  # noqa: F401
import lightning  # noqa: F401
import numpy
import omegaconf  # noqa: F401
import torch

# The interpreter's own path: started without PYTHONPATH, so all but this script's folder
INTERPRETER_PATH = sys.path[1:]


def serve(name: str) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is the test run's, not this server's
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(f"\0{name}")  # Linux's abstract namespace
    listener.listen(64)
    wakeup_read, wakeup_write = os.pipe()
    os.set_blocking(wakeup_write, False)
    signal.set_wakeup_fd(wakeup_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # only to wake the selector up
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    selector.register(wakeup_read, selectors.EVENT_READ)
    selector.register(sys.stdin, selectors.EVENT_READ)  # closed: the test worker is gone
    waiting = {}  # pid -> the connection its wait status goes to
    print("ready", flush=True)
    while True:
        for key, _ in selector.select():
            if key.fileobj is sys.stdin:
                if not sys.stdin.buffer.read1(1):
                    return
            elif key.fileobj is listener:
                connection, _ = listener.accept()
                message, fds, _, _ = socket.recv_fds(connection, 1 << 20, 3)
                pid = os.fork()
                if pid == 0:
                    selector.close()
                    listener.close()
                    for fd in (wakeup_read, wakeup_write):
                        os.close(fd)
                    signal.set_wakeup_fd(-1)
                    connection.close()
                    become(json.loads(message), fds)  # never returns
                for fd in fds:
                    os.close(fd)
                answer(connection, pid)
                waiting[pid] = connection
            else:
                os.read(wakeup_read, 4096)
                while waiting:
                    pid, status = os.waitpid(-1, os.WNOHANG)
                    if pid == 0:
                        break
                    connection = waiting.pop(pid)
                    answer(connection, status)
                    connection.close()


def answer(connection, number: int) -> None:
    try:
        connection.send(str(number).encode())
    except OSError:  # the test that asked has gone
        pass


def become(command: dict, fds) -> None:
    """Turn this forked child into `python ARGS` as the command describes it, and run it."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(command["cwd"])
    os.environ.clear()
    os.environ.update(command["env"])  # (its start-up variables are this server's: helpers.forked checks)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for signum in (signal.SIGTERM, signal.SIGCHLD):
        signal.signal(signum, signal.SIG_DFL)
    numpy.random.seed()  # a fresh process seeds its global generators anew
    torch.seed()
    # The streams as Python made this server's from the same start-up variables (encoding, errors, unbuffered),
    # on the child's own descriptors: stdout line-buffered only on a terminal, as Python does
    for fd, name in enumerate(("stdin", "stdout", "stderr")):
        model = getattr(sys, f"__{name}__")
        stream = io.TextIOWrapper(
            open(fd, "rb" if fd == 0 else "wb", buffering=0 if fd and model.write_through else -1, closefd=False),
            encoding=model.encoding,
            errors=model.errors,
            line_buffering=fd == 2 or (fd == 1 and os.isatty(1)),
            write_through=fd > 0 and model.write_through,
        )
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)
    python_path = [os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    arguments = command["args"]
    code, interrupted = 0, False
    try:
        if arguments[0] == "-m":
            sys.path[:] = [os.getcwd(), *python_path, *INTERPRETER_PATH]
            sys.argv = ["-m", *arguments[2:]]
            runpy._run_module_as_main(arguments[1])  # what `python -m` calls (sys.argv[0]: the module's file)
        else:
            script = arguments[0]
            sys.path[:] = [os.path.dirname(os.path.abspath(script)), *python_path, *INTERPRETER_PATH]
            sys.argv = list(arguments)
            runpy.run_path(script, run_name="__main__")
    except SystemExit as e:
        if e.code is None or isinstance(e.code, int):
            code = e.code or 0
        else:  # sys.exit("message"): the message on stderr, exit code 1
            print(e.code, file=sys.stderr)
            code = 1
    except BaseException as e:
        print_as_python_does(e, module=arguments[0] == "-m")
        code, interrupted = 1, isinstance(e, KeyboardInterrupt)
    exit_as_python_does(code, interrupted)


def print_as_python_does(error: BaseException, module: bool) -> None:
    """The traceback `python` prints, without the frames of this server (and of runpy, for a script: Python
    runs a script itself, a module through runpy)."""
    ours = {__file__} if module else {__file__, "<frozen runpy>", runpy.__file__}
    tb = error.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename in ours:
        tb = tb.tb_next
    sys.stderr.write("".join(traceback.format_exception(type(error), error, tb)))


def exit_as_python_does(code: int, interrupted: bool) -> None:
    """The interpreter's exit, but for tearing down every module (a second with torch loaded, and nothing a
    command's result depends on): non-daemon threads joined, atexit handlers run, streams flushed; an uncaught
    KeyboardInterrupt ends the process by SIGINT, as Python does."""
    threading._shutdown()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    if interrupted:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    os._exit(code & 0xFF)


if __name__ == "__main__":
    serve(sys.argv[1])  # the socket's name
