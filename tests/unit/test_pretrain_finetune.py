"""Pretrain, then fine-tune: init_from across objectives (T5 span corruption -> translation, BERT masked LM ->
classifier), the vocabulary rows both models have, and the learning rates of the pretrained body and new head.

Here: the weights and learning rates; tests/e2e/test_pretrain_finetune.py has the rest."""

import torch

from transformer_lab.models.bert import Bert, BertConfig
from transformer_lab.models.t5 import T5, T5Config
from transformer_lab.run.build import init_weights
from transformer_lab.store.checkpoint import FORMAT
from transformer_lab.tasks.optim import adamw

VOCABULARY = {"tokenizer": "the same BPE"}


def checkpoint_of(model, path, vocabulary=VOCABULARY):
    """A checkpoint as train.py writes one (the task's `model.` prefix and the run's metadata)."""
    state = {f"model.{k}": v for k, v in model.state_dict().items()}
    torch.save({"state_dict": state, "transformer_lab": {"format": FORMAT, "config": {"task": {}}, **vocabulary}}, path)
    return path


def t5(vocab_size):
    return T5(T5Config(vocab_size=vocab_size, n_layer=2, n_head=2, n_embd=16, d_ff=32, dropout=0.0))


def test_span_t5_starts_a_translation_t5_with_the_rows_of_the_same_vocabulary(tmp_path):
    torch.manual_seed(0)
    pretrained = t5(vocab_size=108)  # 100 tokens and 8 sentinels
    path = checkpoint_of(pretrained, tmp_path / "best.ckpt")
    torch.manual_seed(1)
    model = t5(vocab_size=100)
    report, misfits, loaded = init_weights(model, str(path), VOCABULARY)
    assert misfits == [] and loaded == set(model.state_dict())
    assert "of the same vocabulary, the rows both have (2): embed.weight (100 of 108 rows)" in report
    for name, tensor in model.state_dict().items():
        torch.testing.assert_close(tensor, pretrained.state_dict()[name][: len(tensor)], rtol=0, atol=0)

    # Another vocabulary: its ids mean other tokens, so no rows are copied.
    torch.manual_seed(1)
    model = t5(vocab_size=100)
    before = model.embed.weight.clone()
    report, misfits, loaded = init_weights(model, str(path), {"tokenizer": "another BPE"})
    assert "rows both have" not in report and misfits == ["embed.weight", "lm_head.weight"]
    assert torch.equal(model.embed.weight, before)


def test_masked_lm_bert_starts_a_classifier_whose_head_is_new(tmp_path):
    settings = dict(vocab_size=40, block_size=16, n_layer=2, n_head=2, n_embd=16, dropout=0.0)
    torch.manual_seed(0)
    path = checkpoint_of(Bert(BertConfig(**settings)), tmp_path / "mlm.ckpt")
    classifier = Bert(BertConfig(**settings, n_classes=3))
    report, misfits, loaded = init_weights(classifier, str(path), VOCABULARY)
    new = ["head.bias", "head.weight", "pooler.bias", "pooler.weight"]
    assert f"left as initialised (4): {', '.join(new)}" in report
    assert "not in this model (5): mlm_head.bias, mlm_head.dense.bias" in report
    assert loaded == set(classifier.state_dict()) - set(new) and misfits[:4] == new


def test_pretrained_lr_gives_the_loaded_weights_their_own_rate():
    model = Bert(BertConfig(vocab_size=40, n_classes=3, block_size=16, n_layer=1, n_head=2, n_embd=16))
    pretrained = {name for name in model.state_dict() if not name.startswith(("head.", "pooler."))}
    plain = adamw(model, 1e-3, 0.1, (0.9, 0.99), 1e-8, fused=None)
    assert [(g["lr"], g["weight_decay"]) for g in plain.param_groups] == [(1e-3, 0.1), (1e-3, 0.0)]
    split = adamw(model, 1e-3, 0.1, (0.9, 0.99), 1e-8, fused=None, pretrained=pretrained, pretrained_lr=1e-4)
    assert [(g["lr"], g["weight_decay"]) for g in split.param_groups] == [
        (1e-3, 0.1),
        (1e-3, 0.0),
        (1e-4, 0.1),
        (1e-4, 0.0),
    ]
    names = {id(p): n for n, p in model.named_parameters()}
    head = {names[id(p)] for g in split.param_groups[:2] for p in g["params"]}
    assert head == {"head.weight", "head.bias", "pooler.weight", "pooler.bias"}
    assert sum(len(g["params"]) for g in split.param_groups) == len(list(model.parameters()))


def test_init_from_a_checkpoint_none_of_whose_tensors_fit_is_refused_before_the_run(tmp_path):
    """init_strict=false (the default) takes the tensors that fit; none fitting (another model's checkpoint) is a
    mistake, one line before the run directory is made, not an INFO line over a model trained from scratch."""
    from helpers.runs import TINY, run_train

    path = checkpoint_of(t5(vocab_size=100), tmp_path / "t5.ckpt")
    run = tmp_path / "run"
    result = run_train("model=gpt", "data=modular", "data.p=11", *TINY, "logger=none", f"init_from={path}",
                       f"hydra.run.dir={run}")  # fmt: skip
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith(
        f"error: init_from: no tensor of it fits this model: init_from {path}: loaded 0 of "
    )
    assert not run.exists()
