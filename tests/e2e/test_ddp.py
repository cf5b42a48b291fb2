"""DDP under Hydra on CPU (gloo): the weights and metrics of one process, one directory per run or job."""

import json

import pytest
import torch

from helpers.runs import ROOT, TINY, needs_shakespeare, run_train, train_in_a_process
from helpers.translation import write_pairs

SETUP = [
    "data=modular",
    "data.p=11",
    "data.batch_size=64",
    *TINY,
    "model.dropout=0.0",
    "trainer.max_steps=20",
    "trainer.val_check_interval=10",
    "trainer.log_every_n_steps=1",
    "optim.warmup_steps=5",
    "optim.lr=1e-2",
]
DDP = ["hardware=[cpu,ddp]", "trainer.devices=2"]


def weights(run_dir):
    """The weights of a run's last checkpoint, but the attention key biases: adding a constant to every key
    does not change a softmax, so their gradient is zero but for rounding, which AdamW scales up to steps of
    about lr whose sign depends on the order of the summation."""
    state = torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)["state_dict"]
    for name in [n for n in state if n.endswith("in_proj.bias")]:
        q, _, v = state[name].chunk(3)
        state[name] = torch.cat([q, v])
    return state


def largest_difference(a, b):
    assert a.keys() == b.keys()
    return max((a[k].float() - b[k].float()).abs().max().item() for k in a)


def single_and_ddp(tmp_path, setup, ddp_logger="none", env=None):
    """The same run in one process (this one) and in two (started from a process of their own); their run
    directories."""
    single = run_train(*setup, "logger=none", f"hydra.run.dir={tmp_path / 'single'}")
    assert single.returncode == 0, single.stderr[-3000:]
    ddp = train_in_a_process(
        *setup, *DDP, f"logger={ddp_logger}", f"hydra.run.dir={tmp_path / 'ddp'}", cwd=tmp_path, env=env
    )
    assert ddp.returncode == 0, ddp.stderr[-3000:]
    return tmp_path / "single", tmp_path / "ddp"


# Agreement of the weights after 12 AdamW steps at lr 1e-2: the largest absolute difference of any weight.
# Two processes sum their gradients in another order than one: measured 1.1e-6 (gpt x shakespeare) and
# 2.3e-6 (encdec x translation). Training on the mean of the processes' mean losses instead of the mean over
# every target of the batch: 0.061 and 0.052.
WEIGHTS_ATOL = 2e-5


@needs_shakespeare
def test_two_processes_train_the_single_process_weights_on_uneven_shards(tmp_path):
    # A batch of 15 windows: the processes hold 8 and 7 rows of every batch.
    setup = [
        "model=gpt",
        "data=shakespeare",
        "data.batch_size=15",
        "data.block_size=32",
        f"paths.data_dir={ROOT / 'data'}",
        *TINY,
        "model.dropout=0.0",
        "trainer.max_steps=12",
        "trainer.val_check_interval=6",
        "trainer.log_every_n_steps=1",
        "optim.warmup_steps=2",
        "optim.lr=1e-2",
        "task.sample.enabled=false",
    ]
    single, ddp = single_and_ddp(tmp_path, setup, "wandb", {"WANDB_MODE": "offline"})
    assert largest_difference(weights(single), weights(ddp)) < WEIGHTS_ATOL
    a, b = (json.loads((run / "summary.json").read_text()) for run in (single, ddp))
    assert b["val/loss"] == pytest.approx(a["val/loss"], abs=1e-5)
    # One run directory, one summary, one W&B run, one set of checkpoints, whatever the process count.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ddp", "single"]
    assert b["global_step"] == 12
    assert len(list((ddp / "wandb").glob("offline-run-*"))) == 1
    assert sorted(p.name for p in (ddp / "checkpoints").iterdir()) == ["best.ckpt", "last.ckpt"]
    assert (ddp / "ddp_process_1.log").exists() and not list(ddp.rglob("*/.hydra"))  # rank 1 wrote no record
    assert "ddp_process_1" not in (ddp / ".hydra" / "hydra.yaml").read_text()


@needs_shakespeare
def test_on_a_corpus_rank_zero_encodes_and_two_processes_train_the_single_process_weights(tmp_path):
    setup = [
        "model=gpt",
        "data=text",
        f"data.path={ROOT / 'data/shakespeare/input.txt'}",
        "data.tokenizer=bytes",
        "data.batch_size=16",
        "data.block_size=32",
        *TINY,
        "model.dropout=0.0",
        "trainer.max_steps=12",
        "trainer.val_check_interval=6",
        "optim.lr=1e-2",
        "task.sample.enabled=false",
    ]
    single = run_train(*setup, f"data.cache_dir={tmp_path / 'cache1'}", f"hydra.run.dir={tmp_path / 'single'}")
    assert single.returncode == 0, single.stderr[-3000:]
    ddp_dir = tmp_path / "ddp"
    ddp = train_in_a_process(
        *setup, *DDP, f"data.cache_dir={tmp_path / 'cache2'}", f"hydra.run.dir={ddp_dir}", cwd=tmp_path
    )
    assert ddp.returncode == 0, ddp.stderr[-3000:]
    assert largest_difference(weights(tmp_path / "single"), weights(ddp_dir)) < WEIGHTS_ATOL
    assert "data: encoded 1 file(s)" in (ddp_dir / "train.log").read_text()  # by rank 0, once
    assert "encoded" not in (ddp_dir / "ddp_process_1.log").read_text()
    assert len(list((tmp_path / "cache2" / "shards").iterdir())) == 3  # train, val, the record


def test_two_processes_train_the_single_process_weights_on_padded_pairs(tmp_path):
    # Sentence pairs of 3 to 7 words, 21 to a batch: the two shards hold unequal numbers of target tokens.
    pairs = write_pairs(tmp_path / "pairs.tsv", n=300)
    setup = [
        "model=encdec",
        "data=translation",
        f"data.path={pairs}",
        "data.vocab_size=100",
        "data.batch_size=21",
        f"paths.data_dir={tmp_path / 'data'}",
        *TINY,
        "model.dropout=0.0",
        "trainer.max_steps=12",
        "trainer.val_check_interval=6",
        "optim.warmup_steps=2",
        "optim.lr=1e-2",
        "task.decode.val_beam_size=2",
    ]
    single, ddp = single_and_ddp(tmp_path, setup)
    assert largest_difference(weights(single), weights(ddp)) < WEIGHTS_ATOL
    a, b = (json.loads((run / "summary.json").read_text()) for run in (single, ddp))
    assert b["val/loss"] == pytest.approx(a["val/loss"], abs=1e-5)
    assert b["val/bleu"] == pytest.approx(a["val/bleu"], abs=1e-6)
    assert b["test/bleu"] == pytest.approx(a["test/bleu"], abs=1e-6)


def test_a_ddp_multirun_runs_each_job_once(tmp_path):
    sweep = tmp_path / "sweep"
    result = train_in_a_process(
        "-m", *SETUP, *DDP, "optim.lr=0.01,0.003", "logger=none", f"hydra.sweep.dir={sweep}", cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sweep"]  # no stray outputs/ or multirun/
    assert sorted(p.name for p in sweep.iterdir()) == ["0", "1", "multirun.yaml"]
    output = result.stdout + result.stderr
    assert output.count("Launching 2 jobs locally") == 1 and output.count("#0 :") == output.count("#1 :") == 1
    for job, lr in (("0", "0.01"), ("1", "0.003")):
        summary = json.loads((sweep / job / "summary.json").read_text())
        assert summary["global_step"] == 20 and summary["status"] == "completed"
        assert f"optim.lr={lr}" in (sweep / job / ".hydra" / "overrides.yaml").read_text()
        assert (sweep / job / "ddp_process_1.log").exists()  # the second process ran in its job's directory


def test_a_ddp_optuna_sweep_runs_each_trial_once(tmp_path):
    sweep = tmp_path / "sweep"
    result = train_in_a_process(
        "-m",
        *SETUP,
        *DDP,
        "hydra/sweeper=optuna",
        "hydra/sweeper/sampler=grid",
        "hydra.sweeper.n_jobs=1",
        "objective=val/loss_best",
        "optim.lr=choice(0.01,0.003)",
        "logger=none",
        f"hydra.sweep.dir={sweep}",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sweep"]
    assert sorted(p.name for p in sweep.iterdir()) == ["0", "1", "optimization_results.yaml"]
    output = result.stdout + result.stderr
    assert output.count("#0 :") == output.count("#1 :") == 1 and "#2 :" not in output
    for job in ("0", "1"):
        assert json.loads((sweep / job / "summary.json").read_text())["global_step"] == 20
        assert (sweep / job / "ddp_process_1.log").exists()


def test_two_processes_train_the_single_process_weights_with_muon(tmp_path):
    # Muon's step orthogonalises each matrix's momentum in bfloat16 (torch's Newton-Schulz), which rounds the two
    # summation orders' 1e-7 apart gradients to steps up to a bf16 unit apart: measured 7.9e-3 after 12 steps at
    # muon_lr 0.02 (AdamW's: 1e-6). So weights agree to 2e-2 here, and the validation loss to 2e-3.
    setup = [*SETUP, "optim.name=muon", "trainer.max_steps=12", "trainer.val_check_interval=6"]
    single, ddp = single_and_ddp(tmp_path, setup)
    assert largest_difference(weights(single), weights(ddp)) < 0.02
    a, b = (json.loads((run / "summary.json").read_text()) for run in (single, ddp))
    assert b["val/loss"] == pytest.approx(a["val/loss"], abs=2e-3) and b["global_step"] == 12
