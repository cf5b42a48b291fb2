"""Pretrain, then fine-tune: init_from across objectives (T5 span corruption -> translation, BERT masked LM ->
classifier), the vocabulary rows both models have, and the learning rates of the pretrained body and new head.

Here: both pipelines through train.py; tests/unit/test_pretrain_finetune.py has the rest."""

import json
import math
from collections import Counter

import pytest

from helpers.runs import SHAKESPEARE, TINY, needs_shakespeare, run_command, run_train
from helpers.translation import bleu_matches_the_written_translations, write_pairs

SMALL_T5 = [
    *TINY,
    "model.n_layer=2",
    "model.n_head=4",
    "model.n_embd=64",
    "model.d_ff=128",
    "model.dropout=0.0",
    "data.vocab_size=120",
    "data.batch_size=32",
    "optim.lr=3e-3",
    "optim.warmup_steps=20",
    "logger=csv",
    "trainer.log_every_n_steps=5",
]


@pytest.fixture(scope="module")
def span_pretrained(tmp_path_factory):
    """T5 pretrained by span corruption on both sides of the toy pairs (the module's one pretraining)."""
    tmp = tmp_path_factory.mktemp("t5")
    pairs = write_pairs(tmp / "pairs.tsv", n=600)
    common = [f"data.path={pairs}", f"paths.data_dir={tmp / 'data'}", *SMALL_T5]
    run = tmp / "pretrained"
    result = run_train(
        "model=t5",
        "data=translation",
        *common,
        "task.input_length=24",
        "trainer.max_steps=100",
        "trainer.val_check_interval=50",
        f"hydra.run.dir={run}",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return run, pairs, common


def test_t5_fine_tuned_for_translation_from_span_corruption(span_pretrained, tmp_path):
    pretrained, pairs, common = span_pretrained
    run = tmp_path / "finetuned"
    result = run_train(
        "model=t5",
        "data=translation",
        "task=seq2seq",
        *common,
        f"init_from={pretrained}",
        "trainer.max_steps=150",
        "trainer.val_check_interval=50",
        "task.decode.beam_size=2",
        f"hydra.run.dir={run}",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    output = result.stdout + result.stderr
    # every tensor of the span model, the vocabulary's rows without its 100 sentinels
    assert (
        "loaded 36 of 36 tensors; of the same vocabulary, the rows both have (2): embed.weight (120 of 220 rows)"
        in output
    )
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["val/loss_best"] < 2.5  # from ln(120) = 4.8
    test_set = bleu_matches_the_written_translations(run, pairs, min_test_bleu=5)

    # translate serves the T5 translation checkpoint, and gives the outputs the run scored
    out = run_command("translate", run, "beam_size=2", input="\n".join(r["source"] for r in test_set) + "\n")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [r["output"] for r in test_set]


@needs_shakespeare
def test_bert_masked_lm_then_a_classifier_from_it(tmp_path):
    mlm = tmp_path / "mlm"
    result = run_train(
        "model=bert",
        "data=shakespeare",
        "task=mlm",
        "task.length=32",
        *TINY,
        "model.n_layer=2",
        "model.n_head=4",
        "model.n_embd=64",
        "model.dropout=0.0",
        "model.norm_first=true",
        "data.batch_size=64",
        "trainer.max_steps=240",
        "trainer.val_check_interval=80",
        "trainer.limit_val_batches=4",
        "optim.lr=3e-3",
        "optim.warmup_steps=20",
        "logger=csv",
        "trainer.log_every_n_steps=5",
        f"hydra.run.dir={mlm}",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    history = [json.loads(line) for line in (mlm / "metrics.jsonl").read_text().splitlines()]
    val = [r for r in history if "val/loss" in r]
    assert len(val) == 3 and val[0]["val/loss"] > val[-1]["val/loss"]
    # From ln(69) = 4.2 to below what the characters' frequencies alone give (3.35): the context is used
    # (measured 3.0); and more right than always guessing the commonest, a space (15% of the characters).
    text = SHAKESPEARE.read_text()
    train, held_out = text[: len(text) * 9 // 10], text[len(text) * 9 // 10 :]
    counts = Counter(train)
    unigram = sum(-math.log(counts[c] / len(train)) for c in held_out) / len(held_out)
    assert val[-1]["val/loss"] < unigram - 0.15 and val[-1]["val/acc"] > 0.2, (val[-1], unigram)
    assert "masked-token predictions at step 80" in result.stdout + result.stderr

    classifier = tmp_path / "classifier"
    result = run_train(
        "model=bert",
        "data=modular",
        f"init_from={mlm}",
        "optim.pretrained_lr=1e-4",
        *TINY,
        "model.n_layer=2",
        "model.n_head=4",
        "model.n_embd=64",
        "model.norm_first=true",
        "trainer.max_steps=5",
        "trainer.val_check_interval=5",
        "logger=none",
        f"hydra.run.dir={classifier}",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    output = result.stdout + result.stderr
    # the encoder's layers come from the masked LM; the classifier's head is new; the embeddings of the
    # other vocabulary and sequence length do not fit
    assert (
        "left as initialised (6): head.bias, head.weight, pooler.bias, pooler.weight, wpe.weight, wte.weight" in output
    )
    assert "not in this model (5): mlm_head.bias, mlm_head.dense.bias, mlm_head.dense.weight" in output
    assert json.loads((classifier / "summary.json").read_text())["status"] == "completed"
