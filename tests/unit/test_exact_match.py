"""Answers of several tokens scored as answers: exact match per example (torchmetrics' MulticlassExactMatch), an
equation's answer under teacher forcing (AnswerAccuracy) and a translation's whole output (Bleu), checked by hand
and on a tiny model trained on sums written in two digits."""

import itertools
import logging
from types import SimpleNamespace

import lightning as L
import pytest
import torch

from transformer_lab.api.answer import answers
from transformer_lab.batching.base import for_lightning
from transformer_lab.batching.equations import AnswerClass, AnswerSequence, AnswerToken
from transformer_lab.data.base import DataSource, Equations
from transformer_lab.errors import UserError
from transformer_lab.models.encdec import EncDec, EncDecConfig
from transformer_lab.models.gpt import GPT, GPTConfig
from transformer_lab.tasks.lm import LanguageModelTask
from transformer_lab.tasks.metrics import AnswerAccuracy, padded_rows
from transformer_lab.tasks.seq2seq import Seq2SeqTask

OPTIM = {
    "name": "adamw",
    "lr": 1e-2,
    "min_lr": 1e-3,
    "weight_decay": 0.0,
    "betas": [0.9, 0.98],
    "eps": 1e-8,
    "fused": False,
    "warmup_steps": 10,
    "decay_steps": None,
    "skip_nonfinite": False,
}


class TwoDigitSums(DataSource):
    """`a + b =` for a, b in 0..9, the sum written as two digit tokens (tens, ones): `7 + 8 =` -> `1 5`. Ids: the
    digits are themselves, "+" is 10, "=" is 11. A dataset of one's own with a multi-token answer."""

    provides = ("equations",)
    answer_length = 2

    def __init__(self, answers_given: int = 2):
        super().__init__()
        self.answers_given = answers_given  # (a dataset whose answers disagree with its answer_length: 1)

    vocab_size = 12
    sequence_length = 4

    def decode(self, ids) -> str:
        return " ".join("0123456789+="[int(i)] for i in ids)

    def encode(self, text: str) -> list[int]:
        symbols = text.replace(" ", "").rstrip("=").split("+")
        if len(symbols) != 2 or not all(len(s) == 1 and s.isdigit() for s in symbols):
            raise ValueError(f"{text!r} is not `a + b =` of two digits")
        return [int(symbols[0]), 10, int(symbols[1]), 11]

    def equations(self) -> Equations:
        pairs = torch.tensor(list(itertools.product(range(10), range(10))))
        tokens = torch.stack([pairs[:, 0], torch.full((100,), 10), pairs[:, 1], torch.full((100,), 11)], 1)
        sums = pairs.sum(1)
        answers = torch.stack([sums // 10, sums % 10], 1)[:, : self.answers_given].squeeze(1)
        order = torch.randperm(100, generator=torch.Generator().manual_seed(0))
        return Equations(tokens, answers, order[:80], order[80:])


class Logged(SimpleNamespace):
    """The part of a task (a LightningModule) a metric component calls while it is evaluated: the trainer's
    state, log(), show_examples() and the predictions list."""

    def __init__(self, task, predictions=None):
        super().__init__(
            trainer=SimpleNamespace(sanity_checking=False, is_global_zero=True),
            answers=task.answers,
            greedy_answers=getattr(task, "greedy_answers", None),
            reference_ids=getattr(task, "reference_ids", None),
            predictions=predictions,
            global_step=0,
            logged={},
        )

    def log(self, name, value, **kwargs):
        self.logged[name] = float(value)

    def show_examples(self, *args):
        pass


def one_hot_logits(ids: torch.Tensor, vocab: int) -> torch.Tensor:
    return torch.nn.functional.one_hot(ids, vocab).float()


def test_exact_match_of_answers_of_two_tokens_by_hand():
    # Two equations of the sums' data as AnswerToken reads them: `7 + 8 = 1` -> targets (1, 5) at the last two
    # positions. The first is answered `1 5` (right), the second `1 2` (its first token right, its second not):
    # exact match 1/2, token accuracy 3/4.
    datamodule = AnswerToken(TwoDigitSums(), batch_size=2)
    datamodule.setup()
    x = torch.tensor([[7, 10, 8, 11, 1], [9, 10, 4, 11, 1]])
    y = torch.full_like(x, -100)
    y[:, -2:] = torch.tensor([[1, 5], [1, 3]])
    predicted = torch.zeros_like(x)
    predicted[:, -2:] = torch.tensor([[1, 5], [1, 2]])
    task = LanguageModelTask(GPT(GPTConfig(vocab_size=12, block_size=5, n_layer=1, n_head=1, n_embd=8)), OPTIM)
    records = []
    logged = Logged(task, records)
    metric = AnswerAccuracy({}, datamodule, task.model)
    metric.step(logged, (x, y), one_hot_logits(predicted, 12))
    metric.end(logged, "val")
    assert logged.logged == {"val/acc": 0.75, "val/exact_match": 0.5}
    assert records == [
        {"input": "7 + 8 =", "prediction": "1 5", "reference": "1 5", "exact": True},
        {"input": "9 + 4 =", "prediction": "1 2", "reference": "1 3", "exact": False},
    ]


def test_a_record_gives_the_models_own_answer_where_teacher_forcing_would_not():
    """A first token wrong: teacher forcing's second token follows the right one, the model's own answer its own
    first token (api/answer.py's greedy answers): the record is the model's."""
    datamodule = AnswerToken(TwoDigitSums(), batch_size=2)
    datamodule.setup()
    torch.manual_seed(0)
    task = LanguageModelTask(GPT(GPTConfig(vocab_size=12, block_size=5, n_layer=1, n_head=2, n_embd=16)), OPTIM)
    task.model.eval()
    x = torch.tensor([[7, 10, 8, 11, 1], [9, 10, 4, 11, 1]])
    y = torch.full_like(x, -100)
    y[:, -2:] = torch.tensor([[1, 5], [1, 3]])
    with torch.no_grad():
        logits = task.model(x)
        own = list(answers(task.model, datamodule, ["7 + 8 =", "9 + 4 ="]))
    forced = [datamodule.decode(row) for row in logits[:, -2:].argmax(-1).tolist()]
    records = []
    metric = AnswerAccuracy({}, datamodule, task.model)
    with torch.no_grad():
        metric.step(Logged(task, records), (x, y), logits)
    assert [r["prediction"] for r in records] == own
    assert own != forced  # (an untrained model's own answers are not teacher forcing's, here)


def test_an_encoder_decoders_answer_is_the_tokens_between_bos_and_eos():
    datamodule = AnswerSequence(TwoDigitSums(), batch_size=2)
    datamodule.setup()
    offset = datamodule.offset
    tgt = torch.tensor([[1, 1 + offset, 5 + offset, 2], [1, 1 + offset, 3 + offset, 2]])  # <bos> 1 5 <eos>, 1 3
    outputs = torch.tensor([[1 + offset, 5 + offset, 2], [0 + offset, 3 + offset, 2]])  # right; first token wrong
    task = Seq2SeqTask(EncDec(EncDecConfig(vocab_size=17, block_size=5, n_layer=1, n_head=1, n_embd=8)), OPTIM, {})
    logged = Logged(task)
    metric = AnswerAccuracy({}, datamodule, task.model)
    metric.step(logged, (torch.zeros(2, 4, dtype=torch.long), tgt), one_hot_logits(outputs, 17))
    metric.end(logged, "val")
    assert logged.logged == {"val/acc": 0.75, "val/exact_match": 0.5}


def test_an_output_is_exact_only_when_it_is_the_reference_token_for_token():
    outputs, references = padded_rows([[5, 6], [5, 7], [5], [5, 6, 7], []], [[5, 6], [5, 6], [5, 6], [5, 6], []])
    assert (outputs == references).all(1).tolist() == [True, False, False, False, True]
    task = LanguageModelTask(GPT(GPTConfig(vocab_size=12, block_size=8, n_layer=1, n_head=1, n_embd=8)), OPTIM)
    task.specials = SimpleNamespace(eos=2)
    # a prefix LM's targets: -100 over the source and <sep>, the target, <eos>, -100 as padding
    targets = torch.tensor([[-100, -100, 7, 8, 2, -100], [-100, -100, 9, 2, -100, -100]])
    assert task.reference_ids((None, targets)) == [[7, 8], [9]]


def test_answers_of_another_length_than_declared_and_a_classifier_of_several_tokens_are_refused():
    with pytest.raises(UserError, match=r"^TwoDigitSums.equations\(\) gives answers of 1 token\(s\), but "):
        AnswerToken(TwoDigitSums(answers_given=1), batch_size=2).setup()
    with pytest.raises(
        UserError,
        match=r"^TwoDigitSums's answers have 2 tokens, and a classifier gives one class: train it with task=lm",
    ):
        AnswerClass(TwoDigitSums(), batch_size=2)


def test_exact_match_of_a_tiny_model_trained_on_two_digit_sums_rises_above_chance_and_is_its_greedy_answers(caplog):
    torch.manual_seed(0)
    datamodule = for_lightning(AnswerToken)(TwoDigitSums(), batch_size=80)  # (as the build gives it to a Trainer)
    model = GPT(GPTConfig(vocab_size=12, block_size=datamodule.sequence_length, n_layer=1, n_head=2, n_embd=32))
    task = LanguageModelTask(model, {**OPTIM, "decay_steps": 300}, metric=AnswerAccuracy({}, datamodule, model))
    task.predictions = []
    caplog.set_level(logging.ERROR, logger="lightning.pytorch")  # (quiet here; put back after the test)
    trainer = L.Trainer(
        max_steps=300,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        check_val_every_n_epoch=1000,
    )
    trainer.fit(task, datamodule=datamodule)
    (metrics,) = trainer.validate(task, datamodule=datamodule, verbose=False)
    # chance: about 1 in 20 (the tens digit is 1 for 45 of 100 sums; the ones digit, one of ten)
    assert metrics["val/exact_match"] > 0.5  # (0.95 here: 19 of the 20 held-out sums)
    # the teacher-forced exact match is the share of greedy answers (api/answer.py) that are the sum's digits
    equations = [record["input"] for record in task.predictions]
    given = list(answers(model.eval(), datamodule, equations))
    truth = [f"{sum(map(int, e.rstrip(' =').split(' + '))):02d}" for e in equations]
    right = [g.replace(" ", "") == t for g, t in zip(given, truth)]
    assert [r["exact"] for r in task.predictions] == right
    assert [r["prediction"] for r in task.predictions] == given  # (its own answers, not teacher forcing's tokens)
    assert metrics["val/exact_match"] == pytest.approx(sum(right) / len(right))
