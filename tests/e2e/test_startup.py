"""train.py answers `--help`, `--cfg job` and a mistake in the config without importing torch or Lightning
(seconds of start-up): only a run that is going to train pays for them."""

import os
import re
import subprocess
import sys

import pytest

from helpers.runs import ROOT, needs_shakespeare

HEAVY = re.compile(r"\|\s+(torch|lightning)$", re.M)  # `python -X importtime`'s line for a top-level import

COMMANDS = [
    (["--help"], 0, "data: labelled, modular, repeats, [shakespeare], text, translation"),
    (["--cfg", "job"], 0, "n_layer: ${suggested:n_layer,6}"),
    (["model=t5", "data=translation", "--cfg", "job"], 0, "mean_noise_span_length: 3.0"),
    (["model.n_layr=2"], 2, "error: model.n_layr: no such key; did you mean model.n_layer?"),
    (["+model.n_layers=2"], 2, "error: model.n_layers: no such key; did you mean model.n_layer?"),
    (["model.n_layer=two"], 2, "error: model.n_layer: Value 'two' of type 'str' could not be converted to Integer"),
    (["seed=abc"], 2, "error: seed: Value 'abc' of type 'str' could not be converted to Integer"),
    (["data=modular", "data.p=4"], 2, "error: data.p: must be a prime"),
    (["model.pos_encoding=rope", "model.n_embd=36", "model.n_head=4"], 2, "error: model.n_embd: rope needs an even"),
    (["model=t5", "model.num_buckets=2"], 2, "error: model.num_buckets: needs num_buckets >= 4"),
    (["data=translation", "model=encdec", "data.target=es"], 2, "error: data.target: Multi30k has de, en, fr"),
    (["optim.min_lr=1"], 2, "error: optim.min_lr: must be in [0, optim.lr=0.001]"),
]


@pytest.mark.parametrize("arguments,code,expected", COMMANDS, ids=[" ".join(c[0]) for c in COMMANDS])
def test_answers_without_importing_torch_or_lightning(arguments, code, expected, tmp_path):
    result = subprocess.run(
        [sys.executable, "-X", "importtime", str(ROOT / "train.py"), f"hydra.run.dir={tmp_path / 'run'}", *arguments],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == code, result.stderr[-2000:]
    assert expected in result.stdout + result.stderr
    assert not HEAVY.findall(result.stderr), HEAVY.findall(result.stderr)
    assert not (tmp_path / "run").exists()  # a mistake creates no run directory


def test_a_short_run_prints_a_screenful_and_a_long_one_names_the_preset_that_fits(tmp_path):
    """The default logger (W&B, offline without credentials) and callbacks: where the run is, one sync hint,
    no W&B banner or history, Lightning's summary in one line, no logger version in the progress bar; and,
    as any run is long by a threshold of 1e-9 hours, the warning with the CPU preset for gpt x shakespeare."""
    tiny = [
        "model.n_layer=1",
        "model.n_head=2",
        "model.n_embd=32",
        "data.block_size=32",
        "trainer.val_check_interval=10",
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    result = subprocess.run(  # (a process of its own: what it prints from its start to its exit)
        [sys.executable, str(ROOT / "train.py"), "trainer.max_steps=12", *tiny, f"hydra.run.dir={tmp_path}"]
        + ["hardware=cpu", "callbacks.long_run.hours=1e-9", "trainer.limit_val_batches=1.0"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**env, "HOME": str(tmp_path), "COLUMNS": "120"},  # no W&B login in HOME
    )
    assert result.returncode == 0, result.stderr[-2000:]
    lines = (result.stdout + result.stderr).splitlines()
    assert len(lines) <= 25, "\n".join(lines)
    text = "\n".join(lines)
    assert f"run directory: {tmp_path}" in text and text.count("wandb sync") == 1
    for noise in ("wandb:", "anonymous", "FLOPs", "v_num", "Run history", "TPU available", "was configured so"):
        assert noise not in text, noise
    assert "model: 15.5 K parameters" in text
    assert list(tmp_path.glob("wandb/offline-run-*/run-*.wandb"))  # the run's W&B record is kept
    warning = next(line for line in lines if line.startswith("this run would train for"))
    assert "(1 steps at" in warning and "on this CPU" in warning
    assert warning.endswith("sized for a CPU: python train.py experiment=shakespeare_char_cpu"), warning


@pytest.mark.parametrize("command", [[], ["answer"], ["attention"], ["export"], ["compare"], ["translate"]])
def test_the_commands_help_imports_no_torch(command):
    """`python -m transformer_lab [COMMAND] --help` reads every command's page (its module's docstring and
    options): a command module imports torch, Lightning and the models where it runs, not where it is read."""
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "transformer_lab", *command, "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0 and "python -m transformer_lab" in result.stdout, result.stderr[-2000:]
    assert not HEAVY.findall(result.stderr), HEAVY.findall(result.stderr)


LIBRARIES_TO_TRAIN = re.compile(r"\|\s+(lightning|torchmetrics|transformers)$", re.M)  # what only training needs
TINY = ["model.n_layer=1", "model.n_head=2", "model.n_embd=32", "trainer.max_steps=2", "trainer.limit_val_batches=1"]
TINY += ["trainer.limit_test_batches=1", "trainer.num_sanity_val_steps=0", "logger=none"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Tiny runs of the forms the inference commands serve: text (sample, fill), equations (answer), pairs."""
    import transformer_lab

    folder = tmp_path_factory.mktemp("lean")
    (folder / "pairs.tsv").write_text("".join(f"ein Hund {i}\ta dog {i}\n" for i in range(40)))
    trained = {
        "sample": ["data=shakespeare", "data.block_size=16"],
        "fill": ["model=t5", "data=shakespeare", "data.block_size=16"],
        "answer": ["data=modular"],
        "translate": [
            "model=encdec",
            "data=translation",
            f"data.path={folder / 'pairs.tsv'}",
            "data.vocab_size=100",
            f"paths.data_dir={folder}",
        ],
    }
    for command, overrides in trained.items():
        transformer_lab.train(*overrides, *TINY, f"hydra.run.dir={folder / command}")
    return folder


@needs_shakespeare
@pytest.mark.parametrize(
    "command,arguments",
    [
        ("sample", ["max_new_tokens=4"]),
        ("fill", ["text=ROMEO: <X0> me"]),
        ("answer", ["text=3 + 5 ="]),
        ("translate", ["text=ein Hund 3"]),
        ("load", []),
    ],
)
def test_a_command_that_does_not_train_imports_nothing_training_needs(runs, command, arguments):
    """A run loaded (transformer_lab.load) and the inference commands import neither Lightning, nor torchmetrics,
    nor transformers: a second or two of start-up instead of five (docs/tests.md)."""
    run = runs / ("sample" if command == "load" else command)
    if command == "load":
        line = ["-c", f"import transformer_lab; print(transformer_lab.load({str(run)!r}).model.__class__.__name__)"]
    else:
        line = ["-m", "transformer_lab", command, str(run), *arguments]
    result = subprocess.run(
        [sys.executable, "-X", "importtime", *line], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip()
    assert not LIBRARIES_TO_TRAIN.findall(result.stderr), LIBRARIES_TO_TRAIN.findall(result.stderr)
