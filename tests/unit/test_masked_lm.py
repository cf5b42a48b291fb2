"""BERT's masked LM: the masking recipe's statistics, no loss off the chosen tokens, the head, the stream."""

import torch

from transformer_lab.batching.masked_lm import IGNORE, MaskedLMBatches, mask_tokens
from transformer_lab.models.bert import Bert, BertConfig
from transformer_lab.tasks.masked_lm import MaskedLMTask

VOCAB, PAD = 50, 0  # the stream's vocabulary; [MASK] = 50, [CLS] = 51


def mask(windows, generator):
    return mask_tokens(windows, generator, VOCAB, PAD, 0.15, 0.8, 0.1)


def test_masking_follows_berts_recipe_within_one_percent():
    stream = torch.randint(1, VOCAB, (100_000,), generator=torch.Generator().manual_seed(0))
    batches = iter(MaskedLMBatches(stream, 127, 32, mask, seed=0))
    chosen = masked = replaced = kept = total = 0
    for _ in range(100):  # 100 batches of 32 x 127 tokens: 406,400 tokens, ~61,000 chosen
        inputs, labels = next(batches)
        assert (inputs[:, 0] == VOCAB + 1).all() and (labels[:, 0] == IGNORE).all()  # [CLS], never predicted
        inputs, labels = inputs[:, 1:], labels[:, 1:]
        picked = labels != IGNORE
        assert picked.any(1).all()  # every sequence has a token to predict
        assert (inputs != PAD).all()  # a random replacement is never padding
        original = labels[picked]
        chosen += int(picked.sum())
        total += labels.numel()
        masked += int((inputs[picked] == VOCAB).sum())
        kept += int((inputs[picked] == original).sum())
        replaced += int(((inputs[picked] != original) & (inputs[picked] != VOCAB)).sum())
    assert abs(chosen / total - 0.15) < 0.01
    assert abs(masked / chosen - 0.8) < 0.01
    # a random token (one of the 49 non-padding ids) is the original 1 time in 49: then it counts as kept
    assert abs(replaced / chosen - 0.1 * 48 / 49) < 0.01 and abs(kept / chosen - (0.1 + 0.1 / 49)) < 0.01


def test_unchosen_tokens_are_unchanged_and_labels_are_the_originals():
    windows = torch.randint(1, VOCAB, (64, 127), generator=torch.Generator().manual_seed(1))
    inputs, labels = mask(windows, torch.Generator().manual_seed(2))
    picked = labels[:, 1:] != IGNORE
    assert torch.equal(inputs[:, 1:][~picked], windows[~picked])
    assert torch.equal(labels[:, 1:][picked], windows[picked])


def test_unchosen_positions_carry_no_loss():
    torch.manual_seed(0)
    logits = torch.randn(4, 20, VOCAB + 2, requires_grad=True)
    labels = torch.full((4, 20), IGNORE)
    labels[:, 3] = torch.tensor([5, 6, 7, 8])
    labels[1, 10] = 9
    loss = MaskedLMTask.loss(logits, labels)
    loss.backward()
    chosen = labels != IGNORE
    assert (logits.grad[~chosen] == 0).all() and (logits.grad[chosen].abs().sum(-1) > 0).all()
    expected = torch.nn.functional.cross_entropy(logits[chosen], labels[chosen])  # the mean over chosen tokens
    torch.testing.assert_close(loss, expected)


def test_stream_restarts_at_any_batch():
    stream = torch.randint(1, VOCAB, (5_000,), generator=torch.Generator().manual_seed(0))
    whole = MaskedLMBatches(stream, 31, 8, mask, seed=3)
    resumed = MaskedLMBatches(stream, 31, 8, mask, seed=3, start=4)
    first_six = [b for _, b in zip(range(6), whole)]
    for a, b in zip(first_six[4:], resumed):
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


def test_masked_lm_head_and_classifier_share_the_encoders_names():
    torch.manual_seed(0)
    settings = dict(vocab_size=VOCAB + 2, block_size=16, n_layer=2, n_head=2, n_embd=32, dropout=0.0)
    mlm, classifier = Bert(BertConfig(**settings)), Bert(BertConfig(**settings, n_classes=3))
    idx = torch.randint(1, VOCAB + 2, (2, 16))
    logits = mlm(idx)
    assert logits.shape == (2, 16, VOCAB + 2) and classifier(idx).shape == (2, 3)
    # BERT's head: GELU layer, LayerNorm, then the token embedding's transpose plus a bias of its own
    x, _ = mlm.encode(idx)
    h = mlm.mlm_head
    expected = h.norm(torch.nn.functional.gelu(h.dense(x))) @ mlm.wte.weight.T + h.bias
    torch.testing.assert_close(logits, expected)
    mlm_names, classifier_names = set(mlm.state_dict()), set(classifier.state_dict())
    assert {n for n in mlm_names - classifier_names} == {
        f"mlm_head.{p}" for p in ("dense.weight", "dense.bias", "norm.weight", "norm.bias", "bias")
    }
    assert classifier_names - mlm_names == {"pooler.weight", "pooler.bias", "head.weight", "head.bias"}
