"""One path from `python train.py` to `Trainer.fit`: the config is composed by Hydra alone, validated once, and
its data module built once (README: "Where to read the code first"), for a new run and for a resumed one
(whose config is composed again, from its checkpoint's overrides: that is what resuming is). Hydra's
@main composes the command line twice itself (once to tell a run from a multirun, once to run it)."""

import json
import sys

from helpers import forked
from helpers.runs import ROOT, TINY

# train.py as `__main__`, with the steps counted: Hydra's compositions and ours (its public compose()),
# validate(), the data modules built.
COUNTING = """
import collections, json, runpy, sys
import hydra
import hydra._internal.config_loader_impl as loader
import transformer_lab.config.checks as validate
import transformer_lab.data.base as base

calls = collections.Counter()

def counted(name, function):
    def wrapper(*args, **kwargs):
        calls[name] += 1
        return function(*args, **kwargs)
    return wrapper

loader.ConfigLoaderImpl.load_configuration = counted("composed", loader.ConfigLoaderImpl.load_configuration)
hydra.compose = counted("compose", hydra.compose)
validate.validate = counted("validate", validate.validate)
base.DataModule.__init__ = counted("datamodule", base.DataModule.__init__)
sys.argv = [sys.argv[1], *sys.argv[2:]]
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
finally:
    print("CALLS " + json.dumps(calls), file=sys.stderr)
"""


def counted_run(tmp_path, *overrides):
    script = tmp_path / "counting.py"
    script.write_text(COUNTING)
    result = forked.run(
        [sys.executable, str(script), str(ROOT / "train.py"), *overrides],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stderr.split("CALLS ")[-1])


def test_a_run_composes_validates_and_builds_its_data_once(tmp_path):
    run = ["data=modular", "data.p=11", *TINY, "logger=none", "trainer.val_check_interval=5"]
    calls = counted_run(tmp_path, *run, "trainer.max_steps=5", f"hydra.run.dir={tmp_path}")
    assert calls == {"composed": 2, "validate": 1, "datamodule": 1}  # (Hydra's two; none of ours)
    # a resume: the checkpoint's overrides composed with and without this command's (their difference is what
    # it changes of the checkpoint's config: run/resume.py), checked once
    calls = counted_run(tmp_path, *run, "trainer.max_steps=10", "ckpt_path=last", f"hydra.run.dir={tmp_path}")
    assert calls == {"composed": 4, "compose": 2, "validate": 1, "datamodule": 1}
