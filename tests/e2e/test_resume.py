"""Exact resume after a crash, graceful interrupts, and the non-finite loss guard, on real train.py runs.

Here: the runs; tests/unit/test_resume.py has the rest."""

import csv
import json
import subprocess
import time
from pathlib import Path

import pytest
import torch

from helpers.runs import (
    ROOT,
    TINY,
    environment,
    needs_shakespeare,
    run_command,
    run_train,
    train_command,
    train_in_a_process,
)
from helpers.translation import write_pairs

DATA = {
    "modular": ["data=modular", "data.p=11", "data.train_fraction=0.9", "data.batch_size=16"],
    # Muon on the hidden matrices and AdamW on the rest: both optimizers' states come back; the speedrun's options
    "modular-muon": [
        "data=modular",
        "data.p=11",
        "data.train_fraction=0.9",
        "data.batch_size=16",
        "optim.name=muon",
        "model.qk_norm=true",
        "model.mlp=relu2",
        "model.zero_init_projections=true",
        "model.logit_softcap=15",
    ],
    "shakespeare": ["data=shakespeare", "data.block_size=32", "data.batch_size=8", "task.sample.max_new_tokens=10"],
    # a corpus on disk (memmap windows), its cache in the fixture's folder
    "text": [
        "data=text",
        f"data.path={ROOT / 'data/shakespeare/input.txt'}",
        "data.tokenizer=bpe",
        "data.vocab_size=300",
        "data.block_size=32",
        "data.batch_size=8",
        "task.sample.max_new_tokens=10",
    ],
    # a pair file written by the fixture below; encoder-decoder, length-grouped batches, BLEU
    "translation": [
        "model=encdec",
        "data=translation",
        "data.vocab_size=100",
        "data.batch_size=16",
        "task.decode.beam_size=2",
    ],
}
# Dropout on, so the resumed run must also restore the random generators' states.
COMMON = [
    *TINY,
    "model.dropout=0.1",
    "trainer.max_steps=60",
    "trainer.val_check_interval=20",
    "trainer.limit_val_batches=3",
    "callbacks.last_checkpoint.every_n_train_steps=10",
    "trainer.log_every_n_steps=5",
    "logger=csv",
    "+callbacks.batch_log._target_=helpers.callbacks.BatchLog",
]
HELPERS = {"PYTHONPATH": str(ROOT / "tests")}
# Measurements of the process that ran, not results: a resumed run measures only its own steps.
NOT_COMPARED = {
    "tokens_per_sec",
    "flops_per_token",
    "mfu",
    "wall_time_s",
    "train_time_s",
    "peak_mem_mb",
}


def train(run_dir, *overrides, own_process=False):
    """train.py with the batch log, in this process; own_process=True: in a process of its own (one a test kills
    or signals)."""
    arguments = (*overrides, f"+callbacks.batch_log.path={run_dir / 'batches.tsv'}", f"hydra.run.dir={run_dir}")
    return (train_in_a_process if own_process else run_train)(*arguments, env=HELPERS)


def batches(run_dir):
    return [tuple(line.split("\t")) for line in (run_dir / "batches.tsv").read_text().splitlines()]


def summary(run_dir):
    return json.loads((run_dir / "summary.json").read_text())


def history(run_dir):
    """metrics.jsonl without the timing figures, which differ between any two runs."""
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if not k.startswith("throughput/")} for line in lines]


def csv_rows(run_dir):
    """The CSV logger's rows as (step, train/loss, val/loss)."""
    with open(run_dir / "csv" / "metrics.csv", newline="") as f:
        return [(r["step"], r.get("train/loss"), r.get("val/loss")) for r in csv.DictReader(f)]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """The uninterrupted run of each data's settings, trained once for the tests that compare with it:
    data -> (its overrides, its run directory)."""
    root, runs = tmp_path_factory.mktemp("whole"), {}

    def run(data):
        if data not in runs:
            args = DATA[data]
            if data == "translation":
                args = args + [f"data.path={write_pairs(root / 'pairs.tsv', n=300)}", f"paths.data_dir={root / 'data'}"]
            if data == "text":
                args = args + [f"data.cache_dir={root / 'cache'}"]
            result = train(root / data, *args, *COMMON)
            assert result.returncode == 0, result.stderr[-3000:]
            runs[data] = (args, root / data)
        return runs[data]

    return run


@pytest.mark.parametrize(
    "data",
    [
        "modular",
        "modular-muon",
        *(pytest.param(d, marks=needs_shakespeare) for d in ("shakespeare", "text")),
        "translation",
    ],
)
def test_sigkill_then_resume_equals_an_uninterrupted_run(data, uninterrupted, tmp_path):
    crashed = tmp_path / "crashed"
    args, whole = uninterrupted(data)

    killed = train(
        crashed,
        *args,
        *COMMON,
        "+callbacks.kill._target_=helpers.callbacks.KillAt",
        "+callbacks.kill.step=25",
        own_process=True,
    )
    assert killed.returncode == -9  # SIGKILL: no chance to clean up
    assert not (crashed / "summary.json").exists()
    # The run's own settings (from its checkpoint), but its killer's step moved past the end.
    resumed = train(crashed, "ckpt_path=last", "+callbacks.kill.step=1000")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "will be deleted" not in resumed.stdout + resumed.stderr  # (Lightning's CSV warning: the rows stay)
    # (nor Lightning's doubt on a resume inside an epoch: each training stream declares its place the step count's)
    assert "not resumable" not in resumed.stdout + resumed.stderr

    # The killed run trained steps 1..25; its last checkpoint is from step 20, so the resumed run trains
    # 21..60. Together, without the five lost steps, that is exactly the uninterrupted run's sequence.
    log = batches(crashed)
    resumed_from = next(i for i in range(1, len(log)) if int(log[i][0]) <= int(log[i - 1][0]))
    assert [int(s) for s, _ in log[:resumed_from]] == list(range(1, 26))
    assert int(log[resumed_from][0]) == 21
    stitched = [entry for entry in log[:resumed_from] if int(entry[0]) <= 20] + log[resumed_from:]
    assert stitched == batches(whole)  # no batch repeated, none skipped, same data at every step

    # metrics.jsonl: the killed run's lines after its checkpoint are dropped, the rest are the same lines
    assert history(crashed) == history(whole) and len(history(whole)) >= 6
    # and the CSV logger's file too: the killed process's rows kept up to its checkpoint, none twice
    assert csv_rows(crashed) == csv_rows(whole) and len(csv_rows(whole)) >= 6

    a, b = summary(whole), summary(crashed)
    assert a.keys() == b.keys()
    for key in a.keys() - NOT_COMPARED:
        assert b[key] == (a[key] if isinstance(a[key], str) else pytest.approx(a[key], rel=0, abs=1e-6)), key
    assert a["val/loss"] == b["val/loss"] and a["global_step"] == b["global_step"] == 60


@pytest.mark.parametrize("signum", ["SIGTERM", "SIGINT"])
def test_interrupt_saves_a_checkpoint_and_resumes(signum, uninterrupted, tmp_path):
    stopped = tmp_path / "stopped"
    _, whole = uninterrupted("modular")
    result = train(
        stopped,
        *DATA["modular"],
        *COMMON,
        "+callbacks.kill._target_=helpers.callbacks.KillAt",
        "+callbacks.kill.step=27",
        f"+callbacks.kill.signum={signum}",
        own_process=True,
    )
    assert result.returncode == (130 if signum == "SIGINT" else 143), result.stderr[-3000:]
    interrupted = summary(stopped)
    assert interrupted["status"] == "interrupted" and interrupted["global_step"] == 27
    assert "Resume with ckpt_path=last" in result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert "`weights_only` was not set" not in result.stdout + result.stderr  # (Lightning's, on a save it defaults)
    # a Ctrl-C is named as one, not as the SIGTERM it is turned into
    assert ("Received SIGTERM" in result.stdout + result.stderr) == (signum == "SIGTERM")
    assert ("Ctrl-C: stopping after this step" in result.stdout + result.stderr) == (signum == "SIGINT")
    if signum == "SIGTERM":  # its checkpoint is resumed as SIGINT's is, below
        return

    resumed = train(stopped, *DATA["modular"], *COMMON, "ckpt_path=last")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    log = batches(stopped)
    assert [int(s) for s, _ in log] == list(range(1, 61))  # stopped after 27, resumed at 28
    assert log == batches(whole)
    assert summary(stopped)["val/loss"] == summary(whole)["val/loss"]


@needs_shakespeare
@pytest.mark.parametrize("signum", ["SIGINT", "SIGKILL"])
def test_a_run_stopped_inside_a_validation_resumes_and_validates_that_step_again(signum, uninterrupted, tmp_path):
    """Lightning resumes a checkpoint saved as a step ended past that step's validation: last.ckpt never holds a
    step whose validation has not run (callbacks/last_checkpoint.py), so the stopped validation is run again and
    nothing of the uninterrupted run's record is missing (its line, the best checkpoint's choice)."""
    stopped = tmp_path / "stopped"
    _, whole = uninterrupted("shakespeare")  # (its validations are 3 batches: stopped after the first)
    result = train(
        stopped,
        *DATA["shakespeare"],
        *COMMON,
        "+callbacks.stop._target_=helpers.callbacks.SignalInValidationAt",
        "+callbacks.stop.step=40",  # (validated every 20 steps, saved every 10: step 40 is both)
        f"+callbacks.stop.sent={tmp_path / 'sent'}",
        f"+callbacks.stop.signum={signum}",
        own_process=True,
    )
    assert result.returncode == (130 if signum == "SIGINT" else -9), result.stderr[-3000:]
    assert sorted(p.name for p in (stopped / "checkpoints").iterdir()) == (
        ["best.ckpt", "last.ckpt"] if signum == "SIGINT" else ["best.ckpt", "last.ckpt", "last.pending.ckpt"]
    )
    assert torch.load(stopped / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 30

    resumed = train(stopped, "ckpt_path=last")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    log = batches(stopped)
    assert [int(s) for s, _ in log] == [*range(1, 41), *range(31, 61)]  # steps 31..40 trained again
    assert log[:30] + log[40:] == batches(whole)
    assert history(stopped) == history(whole)  # step 40's validation too
    assert csv_rows(stopped) == csv_rows(whole)
    a, b = summary(whole), summary(stopped)
    for key in a.keys() - NOT_COMPARED:
        assert b[key] == (a[key] if isinstance(a[key], str) else pytest.approx(a[key], rel=0, abs=1e-6)), key
    assert sorted(p.name for p in (stopped / "checkpoints").iterdir()) == ["best.ckpt", "last.ckpt"]
    assert torch.equal(
        torch.load(stopped / "checkpoints" / "best.ckpt", weights_only=True)["state_dict"]["model.lm_head.weight"],
        torch.load(whole / "checkpoints" / "best.ckpt", weights_only=True)["state_dict"]["model.lm_head.weight"],
    )


def test_nonfinite_loss_stops_with_the_step_and_keeps_the_last_good_checkpoint(tmp_path):
    # lr 1e4 without clipping sends the weights to inf within a few steps.
    diverge = [
        *DATA["modular"],
        *TINY,
        "optim.lr=1e4",
        "optim.warmup_steps=0",
        "trainer.gradient_clip_val=null",
        "trainer.max_steps=60",
        "callbacks.last_checkpoint.every_n_train_steps=1",
        "logger=none",
    ]
    run = tmp_path / "diverge"  # (beside the second run: a run inside another's directory is refused)
    result = run_train(*diverge, f"hydra.run.dir={run}")
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert "the loss is nan at step" in result.stderr or "the loss is inf at step" in result.stderr
    step = int(result.stderr.split(" at step ")[1].split(";")[0])
    assert "The last good checkpoint is kept" in result.stderr
    assert "error: the loss is" in (run / "train.log").read_text()  # (the console's line, in the log too)
    failed = summary(run)
    assert failed["status"] == "failed" and failed["global_step"] == step
    # last.ckpt is from the last good step and loads as a finite model
    checkpoint = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    assert checkpoint["global_step"] == step
    assert all(torch.isfinite(v).all() for v in checkpoint["state_dict"].values())

    skipping = run_train(
        *diverge,
        "optim.skip_nonfinite=true",
        "trainer.log_every_n_steps=1",
        "logger=csv",
        f"hydra.run.dir={tmp_path / 'skip'}",
    )
    assert skipping.returncode == 0, skipping.stderr[-3000:]
    assert summary(tmp_path / "skip")["train/skipped_steps"] >= 1


def test_truncated_checkpoint_is_reported_not_loaded(tmp_path):
    run = tmp_path / "run"
    assert (
        run_train(*DATA["modular"], *TINY, "trainer.max_steps=10", "logger=none", f"hydra.run.dir={run}").returncode
        == 0
    )
    last = run / "checkpoints" / "last.ckpt"
    before = last.read_bytes()
    last.write_bytes(before[: len(before) // 2])
    result = run_train(
        *DATA["modular"], *TINY, "trainer.max_steps=20", "logger=none", "ckpt_path=last", f"hydra.run.dir={run}"
    )
    assert result.returncode == 2 and "is not a readable checkpoint (truncated or corrupt" in result.stderr
    assert "Traceback" not in result.stderr
    assert last.read_bytes() == before[: len(before) // 2]  # left as found, for the user to inspect


def test_checkpoints_load_with_weights_only_and_carry_the_config(tmp_path):
    run = tmp_path / "run"
    assert (
        run_train(*DATA["modular"], *TINY, "trainer.max_steps=5", "logger=none", f"hydra.run.dir={run}").returncode == 0
    )
    checkpoint = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    config = checkpoint["transformer_lab"]["config"]
    assert config["model"]["n_embd"] == 32 and config["data"]["name"] == "modular"
    assert "${" not in json.dumps(config)  # resolved: no interpolation left to resolve elsewhere

    # A checkpoint whose tensors are named otherwise (a model class of one's own, changed since): a run
    # refuses to resume from it with one line rather than failing inside the optimizer's state.
    old_names = {
        "attn.in_proj": "attn.c_attn",
        "attn.out_proj": "attn.c_proj",
        "mlp.up": "mlp.c_fc",
        "mlp.down": "mlp.c_proj",
    }
    renamed = {}
    for key, value in checkpoint["state_dict"].items():
        for new, old in old_names.items():
            key = key.replace(f".{new}.", f".{old}.")
        renamed[key] = value
    old = run / "checkpoints" / "old.ckpt"
    torch.save({**checkpoint, "state_dict": renamed}, old)
    result = run_train(
        *DATA["modular"],
        *TINY,
        "trainer.max_steps=10",
        "logger=none",
        f"ckpt_path={old}",
        f"hydra.run.dir={tmp_path / 'resumed'}",
    )
    assert (
        result.returncode == 2 and "holds tensors that do not fit the model as its code builds it now" in result.stderr
    )
    assert "attn.c_attn" in result.stderr and "Traceback" not in result.stderr


def test_a_checkpoint_with_arbitrary_objects_is_refused(tmp_path):
    evil = tmp_path / "evil.ckpt"
    torch.save({"transformer_lab": {}, "state_dict": {}, "payload": subprocess.Popen}, evil)
    result = run_train(*DATA["modular"], "logger=none", f"ckpt_path={evil}", f"hydra.run.dir={tmp_path / 'run'}")
    assert result.returncode == 2 and "refusing to load it (weights_only=True)" in result.stderr


def snapshot(folder):
    """Every file's bytes, but the lock's (it names the pid of the last process to claim the directory)."""
    return {
        p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file() and p.name != ".lock"
    }


def test_a_run_directory_belongs_to_one_run(tmp_path):
    """A second writer is refused while the first runs, and a kill -9 leaves no lock behind; a finished
    run is not overwritten, a resume with nothing to do changes nothing, overwrite=true starts afresh."""
    run = tmp_path / "run"
    short = [*DATA["modular"], *TINY, "logger=none", "callbacks.last_checkpoint.every_n_train_steps=5"]
    first = subprocess.Popen(  # (a second process, writing the run)
        train_command(*short, "trainer.max_steps=30", f"hydra.run.dir={run}")
        + [
            "+callbacks.sleep._target_=helpers.callbacks.SleepAt",
            "+callbacks.sleep.step=6",
            "+callbacks.sleep.seconds=120",
        ],
        cwd=ROOT,
        env=environment(HELPERS),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.time() + 120
        while not (run / "checkpoints" / "last.ckpt").exists() and time.time() < deadline:
            time.sleep(0.5)
        time.sleep(1)  # (step 6, asleep)
        second = run_train(*short, "trainer.max_steps=30", f"hydra.run.dir={run}")
        assert second.returncode == 2 and "Traceback" not in second.stderr, second.stderr[-2000:]
        assert f"error: hydra.run.dir={run}: another process (pid {first.pid}) is writing" in second.stderr
    finally:
        first.kill()  # SIGKILL: no chance to clean up
        first.wait()
    resumed = run_train("ckpt_path=last", "+callbacks.sleep.step=1000", f"hydra.run.dir={run}")
    # (the lock died with its process)
    assert resumed.returncode == 0 and summary(run)["global_step"] == 30, resumed.stderr[-2000:]

    finished = snapshot(run)
    again = run_train(*short, "trainer.max_steps=30", f"hydra.run.dir={run}")
    assert again.returncode == 2 and f"hydra.run.dir={run} holds a completed run (step 30)" in again.stderr
    no_op = run_train("ckpt_path=last", f"hydra.run.dir={run}")
    assert no_op.returncode == 0 and "nothing to do" in no_op.stderr, no_op.stderr[-2000:]
    assert snapshot(run) == finished  # summary.json, metrics.jsonl, checkpoints, .hydra, train.log: all as they were
    crashed = run_train(
        "ckpt_path=last", "trainer.max_steps=40", "+callbacks.fail._target_=helpers.callbacks.FailAtTrainStart",
        f"hydra.run.dir={run}",
    )  # fmt: skip
    assert crashed.returncode != 0 and "a crash before the first step" in crashed.stderr, crashed.stderr[-2000:]
    for name in ("summary.json", "metrics.jsonl", "checkpoints/last.ckpt", "checkpoints/best.ckpt"):
        assert (run / name).read_bytes() == finished[Path(name)], name  # the completed run's, as they were

    # overwrite=true whose data is found bad only once it is read (after the directory is claimed): the
    # completed run is left as it was, and so is a file of the user's beside it
    (run / "corpus.txt").write_bytes("caf\u00e9 au lait\n".encode("latin-1") * 50)
    finished = snapshot(run)
    refused = run_train(
        *TINY, "logger=none", "data=text", "data.tokenizer=char", f"data.path={run / 'corpus.txt'}",
        f"data.cache_dir={tmp_path / 'cache'}", "overwrite=true", f"hydra.run.dir={run}",
    )  # fmt: skip
    assert refused.returncode == 2 and "corpus.txt: is not UTF-8 text" in refused.stderr, refused.stderr[-2000:]
    assert snapshot(run) == finished

    afresh = run_train(*short, "trainer.max_steps=10", "overwrite=true", f"hydra.run.dir={run}")
    assert afresh.returncode == 0 and summary(run)["global_step"] == 10, afresh.stderr[-2000:]
    assert (run / "corpus.txt").read_bytes() == finished[Path("corpus.txt")]  # the user's file stays
    assert not (run / ".overwritten").exists()
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["best.ckpt", "last.ckpt"]  # no -v1
    assert len(list((run / ".hydra").glob("*/config.yaml"))) == 0  # one run's record
    # the run overwrite=true started resumes with nothing repeated (overwrite is no setting of the run's)
    further = run_train("ckpt_path=last", "trainer.max_steps=15", f"hydra.run.dir={run}")
    assert further.returncode == 0 and summary(run)["global_step"] == 15, further.stderr[-2000:]


@pytest.mark.parametrize("data", ["pairs", "text"])
def test_a_resume_on_changed_data_is_refused_by_name(data, tmp_path):

    if data == "pairs":
        path = write_pairs(tmp_path / "pairs.tsv", n=200)
        args = [*DATA["translation"], f"data.path={path}", f"paths.data_dir={tmp_path / 'data'}"]
    else:
        path = tmp_path / "poem.txt"
        path.write_text("Shall I compare thee to a summer's day?\nThou art more lovely and more temperate.\n" * 40)
        args = ["data=shakespeare", f"data.path={path}", "data.block_size=16", "data.batch_size=4"]
    run = tmp_path / "run"
    assert run_train(*args, *TINY, "logger=none", "trainer.max_steps=4", f"hydra.run.dir={run}").returncode == 0
    path.write_text("".join(path.read_text().splitlines(keepends=True)[3:]))  # edited: other splits (and tokens)
    result = run_train("ckpt_path=last", "trainer.max_steps=8", f"hydra.run.dir={run}")
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert f"was trained on other data than this run reads: {path} (SHA-256" in result.stderr
    assert "is not what it read (a file changed since, or another file" in result.stderr
    assert summary(run)["global_step"] == 4
    # evaluate keeps the checkpoint's vocabulary and takes the changed file as another file, saying so
    evaluated = run_command("evaluate", run)
    assert evaluated.returncode == 0 and f"data.path: {path} has changed since the checkpoint's run" in evaluated.stderr


def test_ctrl_c_while_testing_exits_130_and_resuming_tests_keeping_the_figures(uninterrupted, tmp_path):
    args, _ = uninterrupted("translation")
    run = tmp_path / "run"
    stopped = train(
        run,
        *args,
        *COMMON,
        "data.val_batch_size=4",
        "+callbacks.stop._target_=helpers.callbacks.SignalIn",
        "+callbacks.stop.stage=test",
        own_process=True,
    )  # (several test batches: Lightning stops after the batch the signal came in)
    assert stopped.returncode == 130, stopped.stderr[-3000:]
    assert "testing stopped" in stopped.stderr + stopped.stdout
    interrupted = summary(run)
    assert interrupted["status"] == "interrupted" and "test/bleu" not in interrupted

    resumed = train(run, "ckpt_path=last", "+callbacks.stop.stage=none")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    done = summary(run)
    assert done["status"] == "completed" and "test/bleu" in done and done["global_step"] == 60
    for key in ("tokens_per_sec", "train_time_s", "flops_per_token"):  # measured before, not turned null
        assert done[key] == interrupted[key] is not None


def test_sigterm_before_the_first_step_says_nothing_was_trained(tmp_path):
    result = train(
        tmp_path / "run",
        *DATA["modular"],
        *COMMON,
        "data.val_batch_size=4",  # (several batches to sanity-check: it stops after the first)
        "+callbacks.stop._target_=helpers.callbacks.SignalIn",
        "+callbacks.stop.stage=sanity",
        "+callbacks.stop.signum=SIGTERM",
        own_process=True,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 143 and "Traceback" not in result.stderr, output[-3000:]
    assert (
        f"interrupted before the first step: nothing was trained; {tmp_path / 'run'} goes back to what it was" in output
    )
    assert "Resume with" not in output and "overwrite=true" not in output
    assert not (tmp_path / "run").exists()  # (Hydra made it for this run: it goes)


def test_a_resume_stopped_before_its_first_step_leaves_the_run_as_it_was(tmp_path):
    """SIGTERM as a resume's training starts, where its first loop action is the end of the epoch its checkpoint
    closed (one batch an epoch): nothing is trained, so no checkpoint is saved over the run's, its summary stays
    `completed` and the resume's record and log lines go (a stranger's finding: last.ckpt and summary.json were
    rewritten as `interrupted`, and a plain resume then took the stopped one's trainer.max_steps)."""
    run = tmp_path / "run"
    one_batch = ["data=modular", "data.p=5", "data.train_fraction=0.9", "data.batch_size=64", *TINY, "logger=none"]
    first = run_train(*one_batch, "trainer.max_steps=6", "trainer.val_check_interval=3", f"hydra.run.dir={run}")
    assert first.returncode == 0, first.stderr[-2000:]
    before = snapshot(run)
    stopped = train_in_a_process(
        "ckpt_path=last",
        "trainer.max_steps=12",
        "+callbacks.stop._target_=helpers.callbacks.SignalIn",
        "+callbacks.stop.stage=train",
        "+callbacks.stop.signum=SIGTERM",
        f"hydra.run.dir={run}",
        env=HELPERS,
    )
    assert stopped.returncode == 143, stopped.stderr[-2000:]
    output = stopped.stdout + stopped.stderr
    assert f"interrupted before the first step: nothing was trained; {run} goes back to what it was" in output
    assert snapshot(run) == before


def test_a_run_directory_moved_or_copied_resumes_as_it_would_in_place(tmp_path):
    import shutil

    short = [*DATA["modular"], *TINY, "logger=none", "callbacks.last_checkpoint.every_n_train_steps=5"]
    first = run_train(*short, "trainer.max_steps=10", f"hydra.run.dir={tmp_path / 'a'}")
    assert first.returncode == 0, first.stderr[-2000:]
    shutil.move(tmp_path / "a", tmp_path / "moved")
    shutil.copytree(tmp_path / "moved", tmp_path / "copy")
    for run, steps in ((tmp_path / "moved", (20, 30)), (tmp_path / "copy", (15,))):
        for step in steps:
            resumed = run_train("ckpt_path=last", f"trainer.max_steps={step}", f"hydra.run.dir={run}")
            assert resumed.returncode == 0, resumed.stderr[-2000:]
            assert "exists and is not empty" not in resumed.stderr
            assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["best.ckpt", "last.ckpt"]  # no -v1
            assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == step
            assert summary(run)["global_step"] == step and [r["step"] for r in history(run)][-1] == step


@pytest.mark.parametrize("signum", ["SIGTERM", "SIGINT", "SIGKILL"])
def test_an_overwrite_stopped_before_it_trains_leaves_the_earlier_run_as_it_was(signum, tmp_path):
    import signal

    run = tmp_path / "run"
    short = [*DATA["modular"], *TINY, "logger=none"]
    first = run_train(*short, "trainer.max_steps=10", f"hydra.run.dir={run}")
    assert first.returncode == 0, first.stderr[-2000:]
    finished = snapshot(run)
    process = subprocess.Popen(  # (the one the signal stops)
        train_command(*short, "trainer.max_steps=20", "overwrite=true", f"hydra.run.dir={run}",
                      "+callbacks.sleep._target_=helpers.callbacks.SleepAtSetup", "+callbacks.sleep.seconds=60"),
        cwd=ROOT, env=environment(HELPERS), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.time() + 120
    while not (run / ".overwritten").is_dir() and time.time() < deadline:
        time.sleep(0.2)
    time.sleep(3)  # (in its setup, asleep)
    process.send_signal(getattr(signal, signum))
    _, stderr = process.communicate(timeout=60)
    if signum != "SIGKILL":  # a stop (Ctrl-C too): the earlier run goes back on the way out
        assert process.returncode == (143 if signum == "SIGTERM" else 130), stderr[-2000:]
        assert "Traceback" not in stderr, stderr[-2000:]
        assert snapshot(run) == finished
        return
    assert (run / ".overwritten").is_dir()  # killed outright: reads find the earlier run there, moving nothing
    aside = snapshot(run)
    evaluated = run_command("evaluate", run)
    assert evaluated.returncode == 0 and "val/loss" in evaluated.stdout, evaluated.stderr[-2000:]
    assert snapshot(run) == aside
    refused = run_train(*short, "trainer.max_steps=20", f"hydra.run.dir={run}")  # the next run there puts it back
    assert refused.returncode == 2 and "holds a completed run (step 10)" in refused.stderr, refused.stderr[-2000:]
    assert not (run / ".overwritten").exists()
    assert {k: v for k, v in snapshot(run).items() if k.parts[0] != ".hydra"} == {
        k: v for k, v in finished.items() if k.parts[0] != ".hydra"
    }  # (the killed run's own .hydra record aside)


def test_a_resume_that_fails_before_its_first_step_adds_nothing_to_the_run(tmp_path):
    run = tmp_path / "run"
    text = tmp_path / "poem.txt"
    text.write_text("To be, or not to be, that is the question.\n\n" * 40)
    corpus = ["data=text", "data.tokenizer=char", f"data.path={text}", f"data.cache_dir={tmp_path / 'cache'}",
              "data.block_size=16", "data.val_fraction=0.3"]  # fmt: skip
    first = run_train(*corpus, *TINY, "logger=none", "trainer.max_steps=5", f"hydra.run.dir={run}")
    assert first.returncode == 0, first.stderr[-2000:]
    finished = snapshot(run)
    for broken in (f"data.path={tmp_path / 'missing.txt'}", "data.block_size=400"):
        refused = run_train("ckpt_path=last", "trainer.max_steps=10", broken, f"hydra.run.dir={run}")
        assert refused.returncode == 2 and "Traceback" not in refused.stderr, refused.stderr[-2000:]
        assert snapshot(run) == finished  # not a .hydra record, not a train.log line


def test_a_refused_run_leaves_the_lock_file_and_a_nothing_to_do_resume_leaves_no_directory(tmp_path):
    """A run refused at another run's directory leaves its lock file as it was (the pid of the process that
    wrote the run, not of the refused one); a resume with nothing to do makes no directory."""
    run = tmp_path / "run"
    tiny = [*TINY, "data=modular", "data.p=11", "logger=none", "trainer.max_steps=4", "trainer.val_check_interval=2"]
    assert run_train(*tiny, f"hydra.run.dir={run}").returncode == 0
    lock = (run / ".lock").read_bytes()
    refused = run_train(*tiny, f"hydra.run.dir={run}")
    assert refused.returncode == 2 and "holds a completed run" in refused.stderr
    assert (run / ".lock").read_bytes() == lock
    done = run_train(*tiny, f"ckpt_path={run}/checkpoints/last.ckpt", f"hydra.run.dir={tmp_path / 'new'}")
    assert done.returncode == 0 and "nothing to do" in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_a_new_run_replaces_what_an_attempt_that_never_trained_left(tmp_path):
    """A directory holding only the record and log of a run refused before training (a failed trial of an
    earlier sweep, listed in its manifest: a run's, not a user's) is a new run's: its .hydra/ says what ran, its
    train.log holds no stale error."""
    run = tmp_path / "sweep" / "0"
    tiny = [*TINY, "data=modular", "data.p=11", "logger=none", "trainer.max_steps=2", "trainer.val_check_interval=2"]
    failed = run_train("-m", *tiny, "optim.lr=-1", f"hydra.sweep.dir={tmp_path / 'sweep'}")
    assert failed.returncode == 1 and "error: optim.lr" in (run / "train.log").read_text()
    assert run_train(*tiny, "seed=5", f"hydra.run.dir={run}").returncode == 0
    assert sorted(p.name for p in (run / ".hydra").iterdir()) == ["config.yaml", "hydra.yaml", "overrides.yaml"]
    assert "seed: 5" in (run / ".hydra" / "config.yaml").read_text()
    assert "error:" not in (run / "train.log").read_text()


@pytest.mark.parametrize("optimizer", ["adamw", "muon"])
def test_a_run_started_with_init_from_and_pretrained_lr_resumes_and_is_evaluated(optimizer, tmp_path):
    # Its checkpoints name the tensors init_from loaded, so a resume builds the same optimizer groups (the
    # loaded ones at pretrained_lr) and takes up their state; evaluating it needs no optimizer.
    tiny = ["data=modular", "data.p=11", *TINY, "trainer.val_check_interval=10", "logger=none"]
    source, run = tmp_path / "source", tmp_path / "run"
    assert run_train(*tiny, "trainer.max_steps=10", f"hydra.run.dir={source}").returncode == 0
    started = run_train(
        *tiny, "trainer.max_steps=10", f"init_from={source}", "optim.pretrained_lr=1e-4", f"optim.name={optimizer}",
        f"hydra.run.dir={run}",
    )  # fmt: skip
    assert started.returncode == 0, started.stderr[-3000:]
    checkpoint = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    assert checkpoint["pretrained"] and set(checkpoint["pretrained"]) <= set(checkpoint["state_dict"]) | {
        k.removeprefix("model.") for k in checkpoint["state_dict"]
    }
    # what the optimizer's state holds is taken up, not changed: a resume changing it is refused by name
    changed = run_train("ckpt_path=last", "trainer.max_steps=20", "optim.pretrained_lr=1e-3", f"hydra.run.dir={run}")
    assert changed.returncode == 2 and changed.stderr.strip().splitlines()[-1].startswith(
        f"error: optim.pretrained_lr: {run / 'checkpoints' / 'last.ckpt'} was trained with optim.pretrained_lr=0.0001, "
        "and a resume continues it as it was trained"
    )
    resumed = run_train("ckpt_path=last", "trainer.max_steps=20", f"hydra.run.dir={run}")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert summary(run)["global_step"] == 20
    evaluated = run_command("evaluate", run)
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]


def test_a_resume_continues_what_was_trained_not_the_yaml_files_as_they_are_now(tmp_path):
    """An edited preset (a user's experiment YAML) does not change a resumed run; the command line changes only
    what CHANGEABLE_ON_RESUME declares (a Muon setting is refused, naming it); and the schedule keeps its horizon
    when trainer.max_steps is raised (a 20-step run's learning rate does not jump back up at step 21)."""
    conf = tmp_path / "conf" / "experiment"
    conf.mkdir(parents=True)
    preset = conf / "mine.yaml"
    preset.write_text(
        "# @package _global_\ndefaults:\n  - override /data: modular\n  - _self_\n"
        "data: {p: 11, train_fraction: 0.9, batch_size: 16}\n"
        "optim: {name: muon, lr: 0.003, muon_lr: 0.02, warmup_steps: 2, min_lr: 0.0003}\n"
        "model: {n_layer: 1, n_head: 2, n_embd: 32, dropout: 0.0}\n"
    )
    run = tmp_path / "run"
    given = [
        "experiment=mine",
        f"hydra.searchpath=[file://{tmp_path / 'conf'}]",
        "logger=none",
        "trainer.enable_progress_bar=false",
        "trainer.val_check_interval=10",
        "trainer.limit_val_batches=1",
        "trainer.log_every_n_steps=1",
    ]
    first = run_train(*given, "trainer.max_steps=20", f"hydra.run.dir={run}")
    assert first.returncode == 0, first.stderr[-2000:]
    preset.write_text(preset.read_text().replace("dropout: 0.0", "dropout: 0.3").replace("lr: 0.003", "lr: 0.01"))

    refused = run_train("ckpt_path=last", "trainer.max_steps=30", "optim.muon_weight_decay=0.5", f"hydra.run.dir={run}")
    assert refused.returncode == 2 and refused.stderr.startswith(
        f"error: optim.muon_weight_decay: {run}/checkpoints/last.ckpt was trained with optim.muon_weight_decay=null, "
        "and a resume continues it as it was trained (it may change only ckpt_path, trainer, "
    ), refused.stderr[-2000:]

    resumed = run_train("ckpt_path=last", "trainer.max_steps=30", f"hydra.run.dir={run}")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    (record,) = (run / ".hydra").glob("*/config.yaml")
    config = record.read_text()
    assert "dropout: 0.0" in config and "lr: 0.003" in config and "decay_steps: 20" in config
    assert "the run continues as it was trained: " in (run / "train.log").read_text()
    lrs = {r["step"]: r["train/lr"] for r in map(json.loads, (run / "metrics.jsonl").open()) if "train/lr" in r}
    assert lrs[21] == pytest.approx(0.0003) and lrs[30] == pytest.approx(0.0003)  # at min_lr from step 20 on
    assert lrs[19] > lrs[20] >= 0.0003


@needs_shakespeare
def test_a_resume_may_move_the_corpus_cache_of_its_own_data_group(tmp_path):
    run = tmp_path / "run"
    corpus = ["data=text", f"data.path={ROOT / 'data/shakespeare/input.txt'}", "data.tokenizer=char"]
    short = [*corpus, *TINY, "logger=none", "data.block_size=16", "trainer.val_check_interval=5"]
    first = run_train(*short, f"data.cache_dir={tmp_path / 'a'}", "trainer.max_steps=5", f"hydra.run.dir={run}")
    assert first.returncode == 0, first.stderr[-2000:]
    moved = run_train(
        "ckpt_path=last", "trainer.max_steps=8", f"data.cache_dir={tmp_path / 'b'}", f"hydra.run.dir={run}"
    )
    assert moved.returncode == 0, moved.stderr[-2000:]
    assert json.loads((run / "summary.json").read_text())["global_step"] == 8 and any((tmp_path / "b").iterdir())


@pytest.mark.parametrize("where", ["new", "user-file"])
def test_a_new_run_failing_after_its_claim_and_before_its_first_step_leaves_nothing(tmp_path, where):
    """A user's callback that fails in its setup (no check declared): the run directory is as it was before the
    run (removed where Hydra made it), so the corrected command runs there without overwrite=true."""
    run = tmp_path / "outputs" / "run"
    if where == "user-file":
        run.mkdir(parents=True)
        (run / "notes.txt").write_text("the user's")
    short = [*DATA["modular"], *TINY, "logger=[csv,tensorboard]", "trainer.max_steps=4", f"hydra.run.dir={run}"]
    failed = run_train(*short, "+callbacks.fail._target_=helpers.callbacks.FailAtTrainStart", env=HELPERS)
    assert failed.returncode != 0 and "a crash before the first step" in failed.stderr, failed.stderr[-2000:]
    if where == "new":
        assert not run.exists()
    else:
        assert sorted(p.name for p in run.iterdir()) == [".lock", "notes.txt"]
    corrected = run_train(*short)
    assert corrected.returncode == 0, corrected.stderr[-2000:]
    assert json.loads((run / "summary.json").read_text())["status"] == "completed"
    assert {"csv", "tensorboard", "summary.json", ".hydra", "train.log"} <= set((run / ".manifest").read_text().split())


def test_overwrite_sets_aside_what_a_callback_wrote_and_nothing_of_the_users(tmp_path):
    """The attention callback's per-step maps (no name pattern lists them) are in the run's manifest: overwrite=true
    sets them aside with the rest, and the new run's folder holds only its own steps; a user's file stays."""
    run = tmp_path / "run"
    maps = [
        *DATA["modular"],
        *TINY,
        "logger=none",
        "callbacks=[default,attention]",
        'callbacks.attention.text="3 + 4 ="',
    ]
    first = run_train(*maps, "trainer.max_steps=20", "trainer.val_check_interval=10", f"hydra.run.dir={run}")
    assert first.returncode == 0, first.stderr[-2000:]
    assert sorted(p.name for p in (run / "attention").iterdir()) == ["step_10", "step_20"]
    (run / "attention" / "my_notes.txt").write_text("the user's, beside the maps")
    again = run_train(
        *maps, "trainer.max_steps=5", "trainer.val_check_interval=5", "overwrite=true", f"hydra.run.dir={run}"
    )
    assert again.returncode == 0, again.stderr[-2000:]
    assert sorted(p.name for p in (run / "attention").iterdir()) == ["my_notes.txt", "step_5"]
    assert not (run / ".overwritten").exists()
    assert "attention/step_5/blocks.attn.png" in (run / ".manifest").read_text().split()


def test_a_resume_on_a_changed_corpus_is_refused_before_it_is_encoded(tmp_path):
    corpus = tmp_path / "poem.txt"
    corpus.write_text("the quick brown fox jumps over the lazy dog\n\n" * 60)
    run, cache = tmp_path / "run", tmp_path / "cache"
    text = ["data=text", f"data.path={corpus}", "data.tokenizer=char", f"data.cache_dir={cache}", "data.block_size=16"]
    text.append("data.val_fraction=0.2")
    first = run_train(*text, *TINY, "logger=none", "trainer.max_steps=4", f"hydra.run.dir={run}")
    assert first.returncode == 0, first.stderr[-2000:]
    encoded = sorted(p.relative_to(cache) for p in cache.rglob("*"))
    corpus.write_text(corpus.read_text() + "a line added since\n")
    refused = run_train("ckpt_path=last", "trainer.max_steps=8", f"hydra.run.dir={run}")
    assert refused.returncode == 2 and "was trained on other data than this run reads" in refused.stderr
    assert "encoded" not in refused.stderr and sorted(p.relative_to(cache) for p in cache.rglob("*")) == encoded


def test_a_second_ctrl_c_after_steps_ends_an_interrupted_run_not_a_failed_one(tmp_path):
    """The first Ctrl-C stops the run after the step and saves it; a second one stops it at once: exit code 130
    (transformer_lab.train's KeyboardInterrupt), the run's status `interrupted` at its step, resumable, and never
    "before training started: nothing was trained". (A process of its own: its signals are the point.)"""
    pressed = f"+callbacks.twice.pressed={tmp_path.parent / 'pressed'}"
    twice = ["+callbacks.twice._target_=helpers.callbacks.CtrlCTwiceAt", "+callbacks.twice.step=3", pressed]
    every_2 = "callbacks.last_checkpoint.every_n_train_steps=2"  # (the second Ctrl-C saves nothing: step 2's)
    words = ["data=modular", *TINY, "trainer.max_steps=20", "logger=none", every_2, f"hydra.run.dir={tmp_path}"]
    result = train_in_a_process(*words, *twice, env={"PYTHONPATH": str(ROOT / "tests")})
    assert result.returncode == 130 and "nothing was trained" not in result.stderr, result.stderr[-2000:]
    assert "interrupted at step 3 by a second Ctrl-C" in result.stderr + result.stdout
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["global_step"] == 3
    resumed = train_in_a_process(*words, "ckpt_path=last", env={"PYTHONPATH": str(ROOT / "tests")})
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert json.loads((tmp_path / "summary.json").read_text())["global_step"] == 20


def test_a_resume_at_its_checkpoints_step_keeps_the_run_and_writes_its_summary(tmp_path):
    """Killed after its last checkpoint and before its summary (summary.json gone), resumed to that same step:
    nothing to train, the run completes, and nothing it had goes back as if it had failed (the exit took back its
    summary.json and the CSV log: the stranger's)."""
    run = tmp_path / "run"
    short = [*DATA["modular"], *TINY, "logger=csv", "trainer.max_steps=4", f"hydra.run.dir={run}"]
    assert run_train(*short).returncode == 0
    (run / "summary.json").unlink()  # (as a kill -9 after the last checkpoint leaves it)
    resumed = run_train(*short, "ckpt_path=last")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert json.loads((run / "summary.json").read_text())["status"] == "completed"
    assert (run / "csv" / "metrics.csv").is_file()


def test_a_resume_by_a_path_inside_its_set_aside_run_finds_it_put_back(tmp_path):
    run = tmp_path / "run"
    short = [*DATA["modular"], *TINY, "logger=none", f"hydra.run.dir={run}"]
    assert run_train(*short, "trainer.max_steps=4").returncode == 0
    aside = run / ".overwritten"
    aside.mkdir()
    for entry in [p for p in run.iterdir() if p.name not in (".lock", ".overwritten")]:
        entry.rename(aside / entry.name)  # (as a kill -9 during an overwrite=true leaves it)
    resumed = run_train(*short, "trainer.max_steps=6", f"ckpt_path={aside / 'checkpoints' / 'last.ckpt'}")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert json.loads((run / "summary.json").read_text())["global_step"] == 6 and not aside.exists()
