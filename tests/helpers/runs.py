"""The repository's paths, the tiny model, a composed config, and the commands as a user runs them: `python
train.py ARGS` (run_train), `python -m transformer_lab COMMAND ARGS` (run_command) and `python SCRIPT ARGS`
(run_script), each through its own code path but in this process, its result as subprocess.run gives it; and
`python train.py ARGS` in a process of its own (train_command, train_in_a_process), for the tests whose point is
the process: a signal or kill -9 sent to a running training, several processes (DDP, a second process meeting a
running one), SLURM, what the interpreter reads or does as it starts.

A run in this process is `python ARGS` but for the interpreter: its sys.argv, sys.path (the script's folder, or
the working folder for a command, then PYTHONPATH, then this process's path), environment, working folder,
standard streams (stdin: `input`, or nothing), fresh signal handlers, torch's threads (OMP_NUM_THREADS) and the
warnings a fresh interpreter prints (Python's default filters plus those the libraries set as they are imported)
are its own while it runs; an exit is its code (SystemExit's, 1 with the traceback for an exception, -SIGINT for
a KeyboardInterrupt), and the end of its "process" puts back what a run claimed and left (store/rundir.py's exit
handler). Everything it changed of this process is put back afterwards (the environment, folder, path, streams,
signal handlers, logging's loggers, Hydra's singletons, torch's global settings and random generators), and the
modules of a user's own code it imported from elsewhere (a test's tmp folders) are forgotten, so the next run
imports its own. Not emulated: the variables read only as Python or a library starts (PYTHONHASHSEED, HF_*, ...),
the atexit handlers of the libraries, and anything written to the file descriptors 1 and 2 directly."""

import csv
import gc
import importlib.util
import io
import logging
import os
import random
import runpy
import signal
import subprocess
import sys
import time
import traceback
import warnings
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

import transformer_lab.config.schema  # noqa: F401  (registers the schemas)

ROOT = Path(__file__).resolve().parents[2]
TRAIN = ROOT / "train.py"
SHAKESPEARE = ROOT / "data" / "shakespeare" / "input.txt"

# A tiny model, so end-to-end runs take seconds on 2 cores.
# Validation on 2 batches unless a test sets more (a later override wins): every run validates at least
# once, at its last step, and tests that read validation figures set their own limit.
TINY = [
    "model.n_layer=1",
    "model.n_head=2",
    "model.n_embd=32",
    "trainer.enable_progress_bar=false",
    "trainer.enable_model_summary=false",
    "trainer.limit_val_batches=2",
]

needs_shakespeare = pytest.mark.skipif(
    not SHAKESPEARE.exists(), reason=f"{SHAKESPEARE} missing: run `make data` (or train once online)"
)


def train_in_process(cfg) -> None:
    """A config composed with return_hydra_config=True trained in this process, as under @hydra.main (the
    checkpoints keep the overrides), quietly (warnings and below not logged), Hydra's singleton put back."""
    import logging

    from hydra.core.hydra_config import HydraConfig
    from omegaconf import open_dict

    from transformer_lab.run.fit import best_checkpoint, fitting, trainer_for
    from transformer_lab.run.prepare import build_run, prepare

    HydraConfig.instance().set_config(cfg)  # (what ${hydra:...} reads)
    with open_dict(cfg):
        hydra = cfg.pop("hydra")
    logging.disable(logging.WARNING)
    try:  # (run/main.py's fit, without its run directory's claim)
        prepared = build_run(prepare(cfg, hydra))
        trainer = trainer_for(prepared)
        with fitting(trainer, prepared, time.time()):
            trainer.fit(prepared.task, datamodule=prepared.datamodule)
            if prepared.datamodule.has_test_split:
                trainer.test(prepared.task, datamodule=prepared.datamodule, ckpt_path=best_checkpoint(trainer))
    finally:
        logging.disable(logging.NOTSET)
        HydraConfig.instance().cfg = None


def compose_cfg(overrides=(), output_dir="/tmp/transformer-lab-test", return_hydra_config=False):
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return compose(
            "train",
            overrides=[f"paths.root_dir={ROOT}", f"paths.output_dir={output_dir}", *overrides],
            return_hydra_config=return_hydra_config,
        )


def logged(run_dir, name):
    """The values of `name` in a run's csv/metrics.csv (logger=csv), in order."""
    with open(run_dir / "csv" / "metrics.csv") as f:
        return [float(r[name]) for r in csv.DictReader(f) if r.get(name)]


# --- the commands in this process ---------------------------------------------------------------------------------


def run_train(*arguments, cwd=ROOT, env=None, input=None) -> subprocess.CompletedProcess:
    """`python train.py ARGUMENTS` in this process: train.py run as `__main__`, as Python runs a script.
    `env`: variables set for the run over this process's (None unsets one), as for every runner here."""
    argv = [str(TRAIN), *map(str, arguments)]
    run = lambda: runpy.run_path(str(TRAIN), run_name="__main__")  # noqa: E731
    # (what may bring configs or code from elsewhere: a search path, a checkpoint's, one's own code)
    own = any("searchpath" in a or a.startswith(("ckpt_path=", "init_from=")) for a in argv[1:])
    return _in_process(
        argv, run, first_on_path=ROOT, cwd=cwd, env=env, input=input,
        lightning_console=False,  # (train.py's Hydra configures logging before anything imports Lightning)
        reads_only_the_repository=not own and "PYTHONPATH" not in (env or {}),
    )  # fmt: skip


def run_command(*arguments, cwd=ROOT, env=None, input=None) -> subprocess.CompletedProcess:
    """`python -m transformer_lab ARGUMENTS` (a command, `train`, `--help`) in this process: what the package's
    __main__.py calls. (`python -m transformer_lab.commands.NAME ARGS` is `run_command("NAME", *ARGS)`.)"""
    from transformer_lab.commands.cli import main

    argv = [importlib.util.find_spec("transformer_lab.__main__").origin, *map(str, arguments)]  # (as `python -m`)
    return _in_process(argv, lambda: main(argv[1:]), first_on_path=cwd, cwd=cwd, env=env, input=input)


def run_script(script, *arguments, cwd=ROOT, env=None, input=None) -> subprocess.CompletedProcess:
    """`python SCRIPT ARGUMENTS` in this process: runpy, as Python runs a script (`__main__`, its folder first on
    the path). train.py's runs: run_train."""
    script = Path(cwd, script)
    argv = [str(script), *map(str, arguments)]
    run = lambda: runpy.run_path(str(script), run_name="__main__")  # noqa: E731
    return _in_process(argv, run, first_on_path=script.parent, cwd=cwd, env=env, input=input)


# --- train.py in a process of its own -----------------------------------------------------------------------------


def train_command(*arguments) -> list[str]:
    """`python train.py ARGUMENTS`, for subprocess.run/Popen."""
    return [sys.executable, str(TRAIN), *map(str, arguments)]


def environment(env=None) -> dict:
    """This process's environment with `env` over it (None unsets a variable), W&B quiet: a subprocess's."""
    merged = {**os.environ, "WANDB_SILENT": "true", **(env or {})}
    return {k: v for k, v in merged.items() if v is not None}


def train_in_a_process(*arguments, cwd=ROOT, env=None, timeout=300) -> subprocess.CompletedProcess:
    """`python train.py ARGUMENTS` in a process of its own: where the process is what a test is about."""
    return subprocess.run(
        train_command(*arguments), cwd=cwd, env=environment(env), capture_output=True, text=True, timeout=timeout
    )


# --- the in-process runner ----------------------------------------------------------------------------------------

_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2)
# What a fresh interpreter prints of the warnings (no -W, no PYTHONWARNINGS): Python's default filters...
_PYTHON_FILTERS = [
    ("default", "", DeprecationWarning, "__main__"),
    ("ignore", "", DeprecationWarning, ""),
    ("ignore", "", PendingDeprecationWarning, ""),
    ("ignore", "", ImportWarning, ""),
    ("ignore", "", ResourceWarning, ""),
]
# ... and those the libraries and the package add as they are imported, which pytest (a `catch_warnings` around
# each test, and around collection) takes away again: learned here below, and from every run (what a run sets
# stays set for the next, as in a long-lived process).
_imported_filters: list = []


class _Output(io.TextIOWrapper):
    """A run's stdout or stderr: text over bytes, as Python's own streams are (UTF-8; stderr's errors escaped)."""

    def __init__(self, console):
        errors = "backslashreplace" if console == "<stderr>" else "strict"
        super().__init__(io.BytesIO(), encoding="utf-8", errors=errors, write_through=True)
        self.console = console

    def text(self) -> str:
        """What was written, as `subprocess.run(text=True)` gives it."""
        self.flush()
        return self.buffer.getvalue().decode("utf-8", errors="replace")


def _learn_filters(before) -> None:
    for entry in warnings.filters:
        if entry not in before and entry not in _imported_filters:
            _imported_filters.append(entry)


def _apply_filters() -> None:
    warnings.resetwarnings()
    for action, message, category, module in reversed(_PYTHON_FILTERS):
        warnings.filterwarnings(action, message, category, module)
    for action, message, category, module, lineno in reversed(_imported_filters):
        warnings.filterwarnings(
            action, message.pattern if message else "", category, module.pattern if module else "", lineno
        )


def _show_warning(message, category, filename, lineno, file=None, line=None):
    """Python's own printing of a warning, to the run's stderr (pytest records them otherwise)."""
    (file or sys.stderr).write(warnings.formatwarning(message, category, filename, lineno, line))


with warnings.catch_warnings():  # the import-time filters of what every run imports (unless imported before)
    _before = list(warnings.filters)
    import transformer_lab.run.fit  # noqa: F401, E402

    _learn_filters(_before)


class _Saved:
    """What a run may change of this process, to be put back."""

    def __init__(self):
        import numpy
        import torch
        from hydra.core.global_hydra import GlobalHydra
        from hydra.core.hydra_config import HydraConfig

        self.environ = dict(os.environ)
        self.cwd = os.getcwd()
        self.path = list(sys.path)
        self.modules = set(sys.modules)
        self.argv = sys.argv
        self.streams = sys.stdin, sys.stdout, sys.stderr
        self.signals = {s: signal.getsignal(s) for s in _SIGNALS}
        self.loggers = {
            name: (logger.level, list(logger.handlers), logger.propagate, logger.disabled)
            for name, logger in _loggers()
        }
        self.logging_disabled = logging.root.manager.disable
        self.hydra = GlobalHydra.instance().hydra if GlobalHydra.instance().is_initialized() else None
        self.hydra_config = HydraConfig.instance().cfg
        self.torch = (
            torch.get_num_threads(),
            torch.get_default_dtype(),
            torch.are_deterministic_algorithms_enabled(),
            torch.is_deterministic_algorithms_warn_only_enabled(),
            torch.get_float32_matmul_precision(),
        )
        self.random = torch.get_rng_state(), numpy.random.get_state(), random.getstate()
        self.frozen = gc.get_freeze_count()

    def restore(self):
        import numpy
        import torch
        from hydra.core.global_hydra import GlobalHydra
        from hydra.core.hydra_config import HydraConfig

        if gc.get_freeze_count() > self.frozen:  # (train.py freezes what its run left, for its process's exit)
            gc.unfreeze()
        for s, handler in self.signals.items():
            signal.signal(s, handler)
        GlobalHydra.instance().clear()
        if self.hydra is not None:
            GlobalHydra.instance().initialize(self.hydra)
        HydraConfig.instance().cfg = self.hydra_config
        threads, dtype, deterministic, warn_only, precision = self.torch
        torch.set_num_threads(threads)
        torch.set_default_dtype(dtype)
        torch.use_deterministic_algorithms(deterministic, warn_only=warn_only)
        torch.set_float32_matmul_precision(precision)
        torch.set_rng_state(self.random[0])
        numpy.random.set_state(self.random[1])
        random.setstate(self.random[2])
        self._restore_logging()
        sys.stdin, sys.stdout, sys.stderr = self.streams
        sys.argv = self.argv
        # the user's own modules a run imported from folders not on this process's path: forgotten
        kept = [Path(p).resolve() for p in self.path if p and Path(p).is_dir()]
        for name in set(sys.modules) - self.modules:
            if _elsewhere(sys.modules.get(name), kept):
                del sys.modules[name]
        sys.path[:] = self.path
        os.chdir(self.cwd)
        os.environ.clear()
        os.environ.update(self.environ)

    def _restore_logging(self):
        logging.disable(self.logging_disabled)
        for name, logger in _loggers():
            if name in self.loggers:
                logger.level, handlers, logger.propagate, logger.disabled = self.loggers[name]
                for handler in logger.handlers:
                    if handler not in handlers:
                        handler.close()
                logger.handlers[:] = handlers
        logging.root.setLevel(logging.root.level)  # (the loggers' cached levels cleared, once for all)
        _point_console_handlers(*self.streams[1:], {})  # (and those a run made: this process's again)


def _loggers():
    """(name, logger) of the root logger and every other (not the placeholders of the dotted names' parents)."""
    pairs = [("", logging.root), *logging.root.manager.loggerDict.items()]
    return [(name, logger) for name, logger in pairs if isinstance(logger, logging.Logger)]


def _imported_from_elsewhere(saved) -> bool:
    """Whether a run imported a module from outside the folders on this process's path (a user's code)."""
    kept = [Path(p).resolve() for p in saved.path if p and Path(p).is_dir()]
    return any(_elsewhere(sys.modules.get(name), kept) for name in set(sys.modules) - saved.modules)


def _elsewhere(module, kept) -> bool:
    """Whether a module was imported from outside every folder in `kept` (not the stdlib's, not a package's)."""
    if module is None:
        return False
    files = [getattr(module, "__file__", None), *list(getattr(module, "__path__", None) or [])]
    files = [Path(f).resolve() for f in files if isinstance(f, str)]
    return bool(files) and not any(f.is_relative_to(folder) for f in files for folder in kept)


def _point_console_handlers(stdout, stderr, known) -> None:
    """Every console handler (a StreamHandler writing to stdout or stderr: the interpreter's, one of `known`,
    or a run's) writes to `stdout` or `stderr`, whichever it wrote to: a run's console is its own, and
    the handlers of a run (made while it ran) write to this process's afterwards."""
    for _, logger in _loggers():
        for handler in logger.handlers:
            if not isinstance(handler, logging.StreamHandler) or isinstance(handler, logging.FileHandler):
                continue
            if isinstance(getattr(type(handler), "stream", None), property):
                continue  # (one that writes to sys.stderr as it is then, as logging's last resort does)
            stream = handler.stream
            which = next((name for console, name in known.items() if console is stream), None)
            if isinstance(stream, _Output):
                which = stream.console
            elif getattr(stream, "name", None) in ("<stdout>", "<stderr>"):
                which = stream.name
            if which is not None:
                handler.setStream(stdout if which == "<stdout>" else stderr)


def _in_process(argv, main, *, first_on_path, cwd, env, input, lightning_console=True, reads_only_the_repository=False):
    """`main()` as the process `python ARGV` would run it (the module's docstring). lightning_console: Lightning's
    loggers have a console handler of their own, as Lightning gives them where it is imported before anything
    configures logging. reads_only_the_repository: the run reads no configs or code but the repository's (the
    package's caches of them, which a fresh process would build again, are kept for the next run)."""
    import torch

    stdout, stderr = _Output("<stdout>"), _Output("<stderr>")
    saved = _Saved()
    code = 0
    try:
        os.chdir(cwd)
        for key, value in {"WANDB_SILENT": "true", **(env or {})}.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = str(value)
        python_path = [os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        sys.path[:] = [str(first_on_path), *python_path, *(p for p in saved.path if p)]
        sys.argv = list(argv)
        sys.stdin = io.TextIOWrapper(io.BytesIO((input or "").encode()), encoding="utf-8")
        sys.stdout, sys.stderr = stdout, stderr
        _point_console_handlers(stdout, stderr, {saved.streams[1]: "<stdout>", saved.streams[2]: "<stderr>"})
        logging.root.handlers[:] = []  # logging as an interpreter starts it: nothing configured (pytest's out)
        logging.root.setLevel(logging.WARNING)
        for name in ("lightning.pytorch", "lightning.fabric"):  # (lightning/pytorch/__init__.py)
            logger = logging.getLogger(name)
            logger.handlers[:] = [logging.StreamHandler(stderr)] if lightning_console else []
            logger.propagate = not lightning_console
        for s in _SIGNALS:
            signal.signal(s, signal.default_int_handler if s == signal.SIGINT else signal.SIG_DFL)
        if os.environ.get("OMP_NUM_THREADS", "").isdigit():  # (read as torch starts)
            torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
        from hydra.core.global_hydra import GlobalHydra

        GlobalHydra.instance().clear()
        importlib.invalidate_caches()  # (a module file written since the last import from its folder)
        with warnings.catch_warnings():
            _apply_filters()
            before = list(warnings.filters)
            warnings.showwarning = _show_warning
            try:
                main()
            except SystemExit as e:
                if e.code is None or isinstance(e.code, int):
                    code = e.code or 0
                else:  # sys.exit("message"): the message, exit code 1
                    print(e.code, file=stderr)
                    code = 1
            except BaseException as e:  # as the interpreter tells it: the traceback (of the run's frames), then
                stderr.write(_traceback(e))  # exit code 1, or death by SIGINT for a KeyboardInterrupt
                code = -signal.SIGINT if isinstance(e, KeyboardInterrupt) else 1
            finally:
                _learn_filters(before)
                _end_of_process(forget_caches=not reads_only_the_repository or _imported_from_elsewhere(saved))
    finally:
        saved.restore()
    return subprocess.CompletedProcess([sys.executable, *argv], code, stdout.text(), stderr.text())


def _end_of_process(forget_caches: bool) -> None:
    """What the end of a run's process ends of the state that outlives a run in this one: what a run claimed
    and left unsettled goes back (rundir's exit handler), its claims are given up and its run directories'
    manifests no longer recorded (a later command's files are not the run's), W&B's setup is torn down (as its
    exit handler does), and, with forget_caches, what the package caches for its process's lifetime (functools
    caches: classes by their dotted path, the config groups' options: a user's, which a later run's same-named
    files may change) is forgotten."""
    rundir = sys.modules.get("transformer_lab.store.rundir")
    if rundir is not None:
        rundir.put_back_all()
        rundir.release()
    atomic = sys.modules.get("transformer_lab.store.atomic")
    if atomic is not None:
        for run_dir in list(atomic._recording):  # (the package's own record of them: it has no public list)
            atomic.stop_recording(run_dir)
    if "wandb" in sys.modules:  # W&B's process-wide setup, which keeps the environment it first read, ends
        sys.modules["wandb"].teardown()
    for name, module in list(sys.modules.items()) if forget_caches else []:
        if name.split(".")[0] == "transformer_lab" and module is not None:
            for value in list(vars(module).values()):
                if callable(getattr(value, "cache_clear", None)) and getattr(value, "__module__", None) == name:
                    value.cache_clear()


def _traceback(error: BaseException) -> str:
    """The traceback Python prints, without this module's frames and runpy's."""
    ours = {__file__, runpy.__file__, "<frozen runpy>"}
    tb = error.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename in ours:
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(error), error, tb))
