import json

import pytest

from helpers.runs import TINY, run_command, run_train
from helpers.translation import bleu_matches_the_written_translations, scored_test_set, write_pairs
from transformer_lab.data.translation import TranslationData


def test_translation_pairs_train_end_to_end(tmp_path):
    pairs = write_pairs(tmp_path / "pairs.tsv", n=600)
    run = tmp_path / "run"
    result = run_train(
        "model=encdec",
        "data=translation",
        f"data.path={pairs}",
        "data.vocab_size=120",
        "data.batch_size=32",
        f"paths.data_dir={tmp_path / 'data'}",
        *TINY,
        "model.n_embd=64",
        "model.n_head=4",
        "trainer.max_steps=150",
        "trainer.val_check_interval=50",
        "optim.lr=3e-3",
        "optim.warmup_steps=20",
        "task.decode.beam_size=2",
        "logger=csv",
        "trainer.log_every_n_steps=5",
        f"hydra.run.dir={run}",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["val/loss_best"] < 3.0  # from ln(120) = 4.8
    assert "test translations at step 150" in result.stdout + result.stderr
    test_set = bleu_matches_the_written_translations(run, pairs, min_test_bleu=5)  # measured 9.9

    # The translate command gives the outputs the run scored: the best checkpoint, beam 2, the test sources.
    out = run_command("translate", run, "beam_size=2", input="\n".join(r["source"] for r in test_set) + "\n")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [r["output"] for r in test_set]

    # Evaluated again without training: the same test BLEU with the same beam, another with greedy decoding
    from transformer_lab.commands.evaluate import evaluate  # in this process: the command line is tested in test_train

    beam2, greedy = (
        evaluate(str(run), "test", [f"task.decode.beam_size={beam}"], str(tmp_path / f"{beam}.json"))["metrics"]
        for beam in (2, 1)
    )
    assert beam2["test/bleu"] == pytest.approx(summary["test/bleu"], abs=1e-6) and "test/bleu" in greedy


def test_gpt_translates_as_a_prefix_lm(tmp_path):
    pairs = write_pairs(tmp_path / "pairs.tsv", n=600)
    run = tmp_path / "run"
    result = run_train(
        "model=gpt",
        "data=translation",
        f"data.path={pairs}",
        "data.vocab_size=120",
        "data.max_length=16",
        "data.batch_size=32",
        f"paths.data_dir={tmp_path / 'data'}",
        *TINY,
        "model.n_embd=64",
        "model.n_head=4",
        "trainer.max_steps=150",
        "trainer.val_check_interval=50",
        "optim.lr=3e-3",
        "optim.warmup_steps=20",
        "logger=csv",
        "trainer.log_every_n_steps=5",
        f"hydra.run.dir={run}",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["val/loss_best"] < 3.0  # from ln(120) = 4.8, on target tokens only
    assert "test translations at step 150" in result.stdout + result.stderr
    bleu_matches_the_written_translations(run, pairs, min_test_bleu=1)  # measured 3.0


def test_separate_vocabularies(tmp_path):
    pairs = write_pairs(tmp_path / "pairs.tsv", n=300)
    dm = TranslationData(data_dir=str(tmp_path / "data"), path=str(pairs), vocab_size=100, shared_vocab=False)
    dm.setup()
    assert dm.source_tokenizer is not dm.tokenizer and dm.source_vocab_size is not None

    def has_capitals(tokenizer):
        return any(piece.strip("▁").isupper() for piece in tokenizer.get_vocab())

    assert has_capitals(dm.tokenizer) and not has_capitals(dm.source_tokenizer)  # targets are in capitals
    run = tmp_path / "run"
    result = run_train(
        "model=encdec",
        "data=translation",
        f"data.path={pairs}",
        "data.vocab_size=100",
        "data.shared_vocab=false",
        f"paths.data_dir={tmp_path / 'data'}",
        *TINY,
        "trainer.max_steps=20",
        "trainer.val_check_interval=10",
        "logger=none",
        f"hydra.run.dir={run}",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    # The translate command reads sources with the source vocabulary: its outputs (beam 4, as decode.beam_size)
    # are those the run scored on the test set with the best checkpoint.
    test_set = scored_test_set(run)
    out = run_command("translate", run, "beam_size=4", input="\n".join(r["source"] for r in test_set) + "\n")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [r["output"] for r in test_set]
