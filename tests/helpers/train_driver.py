"""Runs train.py as `__main__` once per line of standard input (a JSON list of its arguments), in this one
process, and answers each with a JSON line: exit code, stdout, stderr. The code path is `python train.py
ARGS`'s; the interpreter's start-up and imports (seconds) are paid once instead of once per run."""

import contextlib
import io
import json
import runpy
import sys
import traceback
from pathlib import Path

TRAIN = str(Path(__file__).resolve().parents[2] / "train.py")
answer = sys.stdout
for line in sys.stdin:
    stdout, stderr, code = io.StringIO(), io.StringIO(), 0
    sys.argv = [TRAIN, *json.loads(line)]
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        try:
            runpy.run_path(TRAIN, run_name="__main__")
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except BaseException:  # as the interpreter would: the traceback on stderr, exit code 1
            traceback.print_exc(file=stderr)
            code = 1
    answer.write(json.dumps({"returncode": code, "stdout": stdout.getvalue(), "stderr": stderr.getvalue()}) + "\n")
    answer.flush()
