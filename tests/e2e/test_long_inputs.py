"""Inputs longer than a model's length: decoding stops at it, sources are cut to it, nothing is lost.

Here: translate and training, as commands; tests/unit/test_long_inputs.py has the rest."""

import json

import pytest

import transformer_lab
from helpers.runs import ROOT, TINY, run_command, run_train
from helpers.translation import write_pairs
from transformer_lab.api import inference

MULTI30K = ROOT / "data" / "multi30k"


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A tiny encoder-decoder trained on toy pairs with data.max_length=12 (10 source tokens)."""
    tmp = tmp_path_factory.mktemp("short")
    pairs = write_pairs(tmp / "pairs.tsv", n=300)
    run = tmp / "run"
    result = run_train(
        "model=encdec",
        "data=translation",
        f"data.path={pairs}",
        "data.vocab_size=100",
        "data.max_length=12",
        f"paths.data_dir={tmp / 'data'}",
        *TINY,
        "trainer.max_steps=10",
        "trainer.val_check_interval=10",
        "logger=none",
        f"hydra.run.dir={run}",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return run / "checkpoints" / "last.ckpt"


def test_every_input_line_gets_an_output_line(checkpoint):
    lines = ["red dog runs", "", "the big cat " * 167, "你好 ☃", "   ", "blue bird sleeps"]  # 500 words on line 3
    proc = run_command("translate", f"ckpt={checkpoint}", "beam_size=2", "batch_size=4", input="\n".join(lines) + "\n")
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout.split("\n")
    assert out[-1] == "" and len(out[:-1]) == len(lines)
    assert out[1] == "" and out[3] == "" and out[4] == ""
    assert "warning: line 2 is empty" in proc.stderr and "warning: line 5 is empty" in proc.stderr
    assert "warning: line 4 has no character the model's vocabulary knows" in proc.stderr
    assert "1 line(s) longer than the model's 10 source tokens were cut to them" in proc.stderr
    assert "line 3)" in proc.stderr and "Traceback" not in proc.stderr


def test_outputs_come_batch_by_batch_and_a_failing_line_loses_only_itself(checkpoint, monkeypatch):
    def lines():
        yield from ["red dog runs", "blue bird sleeps"]
        raise AssertionError("read before the first batch's outputs were given")

    run = transformer_lab.load(checkpoint)
    outputs = run.translate(lines(), batch_size=2)  # (an iterator in: outputs as each batch is done)
    assert next(outputs) is not None and next(outputs) is not None  # the first batch, before reading on

    real_decode = inference.decode

    def failing_on_cat(model, src, *args):  # a source of more than 5 tokens breaks decoding
        if any(len(row) > 5 for row in src.tolist()):
            raise RuntimeError("out of memory")
        return real_decode(model, src, *args)

    monkeypatch.setattr(inference, "decode", failing_on_cat)
    warnings = []
    out = run.translate(["red dog", "the big cat sleeps under a small dog", "blue bird"], warnings.append, beam_size=1)
    assert len(out) == 3 and out[0] and out[1] == "" and out[2]
    assert "line 2 could not be translated (RuntimeError: out of memory); its output line is empty" in warnings
    assert not any(f"line {n} " in w for w in warnings for n in (1, 3))


@pytest.mark.skipif(not MULTI30K.exists(), reason=f"{MULTI30K} missing: run `make data`")
def test_training_with_a_short_max_length_completes_with_test_bleu(tmp_path):
    # Multi30k's test sentences run to 40+ tokens: data.max_length=12 cuts most of them, and decoding
    # (source length + decode.max_extra_len) would pass the model's 12 positions at every sentence.
    run = tmp_path / "run"
    result = run_train(
        "model=encdec",
        "data=translation",
        "data.max_length=12",
        "data.val_batch_size=256",
        *TINY,
        "trainer.limit_test_batches=2",
        "model.n_embd=64",
        "trainer.max_steps=20",
        "trainer.val_check_interval=20",
        "logger=none",
        f"hydra.run.dir={run}",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "completed" and "test/bleu" in summary
    assert summary["test/truncated"] > 0 and summary["val/truncated"] > 0  # untrained: few reach <eos>
    log = result.stdout + result.stderr
    assert "are longer than data.max_length=12 allows (10 tokens) and are cut to it" in log
    assert "outputs reached the model's length limit (12 positions)" in log
