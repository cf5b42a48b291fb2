from types import SimpleNamespace

import pytest
import torch

from helpers.modular import solve
from helpers.run_dirs import evaluated_on
from helpers.runs import SHAKESPEARE, needs_shakespeare
from transformer_lab.batching.equations import AnswerClass, AnswerSequence, AnswerToken
from transformer_lab.batching.windows import TextWindows
from transformer_lab.data import shakespeare
from transformer_lab.data.batches import for_this_rank
from transformer_lab.data.download import ensure_file
from transformer_lab.data.modular import OPS, ModularData, make_equations
from transformer_lab.data.shakespeare import SHA256, ShakespeareData
from transformer_lab.data.tokens import BOS, EOS
from transformer_lab.errors import DataUnavailableError
from transformer_lab.store.files import sha256_file

UNREACHABLE = "http://127.0.0.1:9/input.txt"  # the discard port: refused at once, no network needed


@needs_shakespeare
def test_shakespeare_split_vocabulary_and_windows(tmp_path):
    assert sha256_file(SHAKESPEARE) == SHA256
    dm = TextWindows(ShakespeareData(data_dir=str(SHAKESPEARE.parents[1]), block_size=32), batch_size=5, seed=1)
    dm.setup()
    assert dm.vocab_size == 65
    assert len(dm.data.train_tokens) == 1_003_854 and len(dm.data.val_tokens) == 111_540  # 90 / 10
    text = SHAKESPEARE.read_text()
    assert dm.data.tokenizer.decode(dm.data.val_tokens[:100]) == text[1_003_854:1_003_954]
    assert dm.data.tokenizer.decode(dm.data.tokenizer.encode("ROMEO: hi!")) == "ROMEO: hi!"

    x, y = next(iter(dm.train_dataloader()))
    assert x.shape == y.shape == (5, 32)
    assert torch.equal(x[:, 1:], y[:, :-1])  # targets are the inputs shifted by one
    same_seed = TextWindows(ShakespeareData(data_dir=str(SHAKESPEARE.parents[1]), block_size=32), batch_size=5, seed=1)
    same_seed.setup()
    again = next(iter(same_seed.train_dataloader()))
    assert torch.equal(again[0], x)


@needs_shakespeare
def test_shakespeare_stream_continues_after_a_resume():
    dm = TextWindows(ShakespeareData(data_dir=str(SHAKESPEARE.parents[1]), block_size=16), batch_size=4, seed=3)
    dm.setup()
    stream = iter(dm.train_dataloader())
    first_ten = [next(stream)[0] for _ in range(10)]
    dm.trainer = SimpleNamespace(
        global_step=7, accumulate_grad_batches=1, world_size=1, overfit_batches=0
    )  # as restored
    resumed = iter(dm.train_dataloader())
    assert torch.equal(next(resumed)[0], first_ten[7]) and torch.equal(next(resumed)[0], first_ten[8])
    dm.trainer.overfit_batches = 1  # debug=overfit: every epoch starts the stream again
    assert torch.equal(next(iter(dm.train_dataloader()))[0], first_ten[0])


@needs_shakespeare
def test_shakespeare_validation_set_is_fixed_and_disjoint_windows():
    dm = TextWindows(ShakespeareData(data_dir=str(SHAKESPEARE.parents[1]), block_size=64), batch_size=12)
    dm.setup()
    first = [b for b in dm.val_dataloader()]
    second = [b for b in dm.val_dataloader()]
    assert all(torch.equal(a[0], b[0]) for a, b in zip(first, second))
    x = torch.cat([b[0] for b in first])
    assert len(x) == (len(dm.data.val_tokens) - 1) // 64
    # the windows are the consecutive non-overlapping chunks of the validation text, in shuffled order
    chunks = dm.data.val_tokens[: len(x) * 64].view(-1, 64)
    assert sorted(map(tuple, x.tolist())) == sorted(map(tuple, chunks.tolist()))
    assert not torch.equal(x, chunks)


def test_missing_file_offline_names_file_url_and_checksum(tmp_path, monkeypatch):
    monkeypatch.setattr(shakespeare, "URL", UNREACHABLE)
    dm = ShakespeareData(data_dir=str(tmp_path))
    with pytest.raises(DataUnavailableError) as info:
        dm.prepare_data()
    message = str(info.value)
    assert "input.txt" in message and UNREACHABLE in message and SHA256 in message
    assert str(tmp_path / "shakespeare" / "input.txt") in message
    assert list(tmp_path.iterdir()) == []  # no partial file left behind, nor the folder made for it


def test_corrupt_file_is_reported_not_used(tmp_path):
    path = tmp_path / "shakespeare" / "input.txt"
    path.parent.mkdir()
    path.write_text("not shakespeare")
    with pytest.raises(DataUnavailableError, match="corrupt"):
        ShakespeareData(data_dir=str(tmp_path)).prepare_data()


@needs_shakespeare
def test_download_verifies_and_renames_into_place(tmp_path):
    target = tmp_path / "sub" / "input.txt"
    ensure_file(target, SHAKESPEARE.as_uri(), SHA256)
    assert sha256_file(target) == SHA256
    with pytest.raises(DataUnavailableError, match="expected"):
        ensure_file(tmp_path / "other.txt", SHAKESPEARE.as_uri(), "0" * 64)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sub"]  # the bad download was discarded


@pytest.mark.parametrize("op", OPS)
def test_modular_equations_are_correct(op):
    p = 13
    operands, answer = make_equations(p, op)
    for (a, b), c in zip(operands.tolist(), answer.tolist()):
        if op == "/":
            assert b != 0 and (c * b) % p == a
        else:
            assert c == {"+": a + b, "-": a - b, "*": a * b}[op] % p
    assert len(operands) == (p * p if op != "/" else p * (p - 1))


def test_modular_split_is_disjoint_and_seeded():
    dm = AnswerToken(ModularData(p=17, op="*", train_fraction=0.3, split_seed=5), batch_size=1000)
    dm.setup()
    train_x, train_y = next(iter(dm.train_dataloader()))
    val_x, val_y = next(iter(dm.val_dataloader()))
    assert len(train_x) == round(17 * 17 * 0.3) and len(train_x) + len(val_x) == 17 * 17
    train_rows = {tuple(r) for r in train_x.tolist()}
    assert not train_rows & {tuple(r) for r in val_x.tolist()}
    # layout [a, op, b, =] with the answer as the only target
    assert (train_x[:, 1] == dm.data.op_id).all() and (train_x[:, 3] == dm.data.eq_id).all()
    assert (train_y[:, :3] == -100).all() and torch.equal(train_y[:, 3], (train_x[:, 0] * train_x[:, 2]) % 17)
    other = AnswerToken(ModularData(p=17, op="*", train_fraction=0.3, split_seed=6), batch_size=1000)
    other.setup()
    assert {tuple(r) for r in next(iter(other.train_dataloader()))[0].tolist()} != train_rows


def test_a_stream_placed_by_the_step_count_keeps_its_state_interface_in_each_ddp_share():
    # (Lightning asks a training stream for state_dict/load_state_dict, else it warns on a resume inside an epoch
    # that the stream "is not resumable"; tests/e2e/test_resume.py asserts the warning gone from a real resume)
    dm = AnswerToken(ModularData(p=17, op="*", train_fraction=0.3, split_seed=5), batch_size=8)
    dm.setup()
    alone = dm.train_dataloader()
    dm.trainer = SimpleNamespace(
        global_step=0,
        accumulate_grad_batches=1,
        world_size=2,
        global_rank=1,
        overfit_batches=0,
        num_training_batches=10,
    )
    share = dm.train_dataloader()
    for stream in (alone, share):
        assert stream.state_dict() == {} and stream.load_state_dict({}) is None
    assert len(share) == len(alone) and torch.equal(next(iter(share))[0], next(iter(alone))[0][1::2])
    own = [(torch.zeros(2, 3), torch.zeros(2, 3))]  # a stream of one's own, placed however it is: not claimed
    assert not hasattr(for_this_rank(own, dm.trainer), "state_dict")


def equations_and_answers(dm, x, y):
    """(the equation the model reads, as text; the answer it is trained to give) for each row of a batch."""
    if isinstance(dm, AnswerToken):  # the answer is the target at "=", and the only one
        assert (y[:, :-1] == -100).all()
        return [(dm.decode(row), int(answer)) for row, answer in zip(x.tolist(), y[:, -1].tolist())]
    if isinstance(dm, AnswerSequence):  # the target is <bos> answer <eos>
        assert (y[:, 0] == BOS).all() and (y[:, 2] == EOS).all()
        return [(dm.decode(row), int(dm.decode([answer]))) for row, answer in zip(x.tolist(), y[:, 1].tolist())]
    assert (x[:, 0] == BOS).all() and y.dim() == 1  # classify: [CLS] equation, the class is the answer
    return [(dm.decode(row), answer) for row, answer in zip(x.tolist(), y.tolist())]


@pytest.mark.parametrize("batches", [AnswerToken, AnswerSequence, AnswerClass])
@pytest.mark.parametrize("terms", [3, 4])
@pytest.mark.parametrize("op", OPS)
def test_every_equation_of_every_batch_transform_against_plain_arithmetic(op, terms, batches):
    p = 7
    dm = batches(ModularData(p=p, op=op, terms=terms, train_fraction=0.5), batch_size=10_000)
    dm.setup()
    seen = []
    for x, y in (next(iter(dm.train_dataloader())), next(iter(dm.val_dataloader()))):
        assert x.shape[1] == dm.sequence_length
        for equation, answer in equations_and_answers(dm, x, y):
            assert equation.split()[1:-1:2] == [op] * (terms - 1)
            assert answer == solve(equation, p), equation  # a zero divisor fails in pow(0, -1, p)
            seen.append(equation)
    divisors = p - 1 if op == "/" else p  # every operand after the first is a divisor for "/"
    assert len(set(seen)) == len(seen) == p * divisors ** (terms - 1)  # every equation, once


@pytest.mark.parametrize("op", ["-", "/"])
def test_sampled_equations_when_there_are_more_than_max_examples(op):
    p, terms = 11, 4  # 14,641 (or 11,000) equations, more than the 3,000 asked for: a random sample
    dm = AnswerToken(ModularData(p=p, op=op, terms=terms, max_examples=3000, split_seed=1), batch_size=10_000)
    dm.setup()
    rows = [
        pair
        for x, y in (next(iter(dm.train_dataloader())), next(iter(dm.val_dataloader())))
        for pair in equations_and_answers(dm, x, y)
    ]
    assert all(answer == solve(equation, p) for equation, answer in rows)
    equations = [equation for equation, _ in rows]
    # 3,000 draws with replacement from N equations, duplicates dropped: N (1 - (1 - 1/N)^3000) expected
    n = p * (p - (op == "/")) ** (terms - 1)
    assert len(set(equations)) == len(equations) == pytest.approx(n * (1 - (1 - 1 / n) ** 3000), abs=100)
    first = {int(e.split()[0]) for e in equations}
    later = {int(n) for e in equations for n in e.split()[2:-1:2]}
    assert first == set(range(p)) and later == set(range(1 if op == "/" else 0, p))
    again = AnswerToken(ModularData(p=p, op=op, terms=terms, max_examples=3000, split_seed=1), batch_size=10_000)
    again.setup()
    assert torch.equal(again.x, dm.x)  # the sample is the split seed's
    other = AnswerToken(ModularData(p=p, op=op, terms=terms, max_examples=3000, split_seed=2), batch_size=10_000)
    other.setup()
    assert not torch.equal(other.x, dm.x)


def test_text_windows_need_the_datasets_window_length():
    from transformer_lab.data.base import DataSource
    from transformer_lab.errors import ConfigError

    class NoLength(DataSource):  # text of one's own that says nothing of its windows' length
        provides = ("text",)

    with pytest.raises(ConfigError, match="^data: NoLength gives no sequence_length"):
        TextWindows(NoLength(), batch_size=2)


def test_bits_per_byte_weigh_each_predicted_token_by_its_utf8_bytes():
    import math
    from types import SimpleNamespace

    import torch.nn.functional as F

    from transformer_lab.data.base import DataSource
    from transformer_lab.tasks.metrics import BitsPerByte

    class Chars(DataSource):  # "a" is one byte, "é" two, "€" three
        provides, chars = ("text",), ["a", "é", "€"]
        vocab_size, sequence_length = 3, 4

        def decode(self, ids):
            return "".join(self.chars[int(i)] for i in ids)

    assert Chars().token_bytes() == [1, 2, 3]
    metric = BitsPerByte({}, TextWindows(Chars(), batch_size=2), None)
    logged = {}
    task = SimpleNamespace(log=lambda name, value: logged.update({name: float(value)}))
    logits = torch.randn(2, 4, 3, generator=torch.Generator().manual_seed(0))
    targets = torch.tensor([[0, 1, 2, -100], [2, 2, 1, 0]])
    metric.step(task, (None, targets), logits)
    metric.end(task, "val")
    kept = targets != -100
    nats = F.cross_entropy(logits[kept], targets[kept], reduction="sum").item()
    assert logged["val/bpb"] == pytest.approx(nats / math.log(2) / (1 + 2 + 3 + 3 + 3 + 2 + 1))


def test_a_dataset_without_encode_is_named_when_text_must_be_read():
    from transformer_lab.batching.base import encoder
    from transformer_lab.data.base import DataSource
    from transformer_lab.errors import UserError

    class NoEncode(DataSource):  # text of one's own with decode() only
        provides, sequence_length = ("text",), 8

    with pytest.raises(UserError, match=r"^NoEncode has no encode\(\): text cannot be turned into"):
        encoder(TextWindows(NoEncode(), batch_size=2))("ROMEO:")


def test_every_dataset_evaluates_all_of_a_file_it_did_not_train_on(tmp_path):
    """data/base.py's rule: `evaluate RUN data.path=FILE` scores every row, document or character of FILE
    (not the share a run would hold out), for each kind of dataset; the run's own file keeps its split."""
    from transformer_lab.data.corpus import TextCorpus
    from transformer_lab.data.labelled import LabelledText
    from transformer_lab.data.translation import TranslationData

    words = ["good", "fine", "bad", "poor", "great", "awful"]

    def labelled(n):
        return "".join(
            f"a {words[i % 6]} play number {i}\t{'pos' if i % 6 in (0, 1, 4) else 'neg'}\n" for i in range(n)
        )

    (tmp_path / "train.tsv").write_text(labelled(300))
    (tmp_path / "eval.tsv").write_text(labelled(200))
    run, evaluated, meta = evaluated_on(
        LabelledText, tmp_path / "train.tsv", tmp_path / "eval.tsv", data_dir=str(tmp_path), vocab_size=100
    )
    assert len(evaluated.labelled("val")[1]) == 200 and len(run.labelled("val")[1]) == 30
    from transformer_lab.batching.labelled import LabelledBatches

    batches = LabelledBatches(evaluated, batch_size=8, seed=0)  # (its training split is empty)
    batches.setup()
    assert sum(len(y) for _, y in batches.val_dataloader()) == 200
    again = LabelledText(path=str(tmp_path / "train.tsv"), data_dir=str(tmp_path), vocab_size=100)
    again.take_checkpoint(
        meta, str(tmp_path / "train.tsv")
    )  # the run's own file, unchanged: its validation share, as in training
    again.setup()
    assert len(again.labelled("val")[1]) == 30 and not again.whole_file

    def pairs(n):  # Windows line ends
        return "".join(f"ein Hund {i}\ta dog {i}\r\n" for i in range(n))

    (tmp_path / "train_pairs.tsv").write_text(pairs(200))
    (tmp_path / "eval_pairs.tsv").write_text(pairs(37))
    _, evaluated, _ = evaluated_on(
        TranslationData, tmp_path / "train_pairs.tsv", tmp_path / "eval_pairs.tsv", data_dir=str(tmp_path),
        vocab_size=100,
    )  # fmt: skip
    assert len(evaluated.references("val")) == len(evaluated.references("test")) == 37
    assert evaluated.references("test")[:2] == ["a dog 0", "a dog 1"]  # no "\r" left in a reference

    docs = "\n\n".join(f"Document {i}: the cat sat on the mat" for i in range(300))
    (tmp_path / "train.txt").write_text(docs)
    (tmp_path / "eval.txt").write_text("\n\n".join(f"Document {i}: the mat sat on the cat" for i in range(5)))
    settings = dict(cache_dir=str(tmp_path / "cache"), tokenizer="char", block_size=8)
    _, evaluated, _ = evaluated_on(TextCorpus, tmp_path / "train.txt", tmp_path / "eval.txt",
                                                 **settings)  # fmt: skip
    file_tokens = len(evaluated.encode((tmp_path / "eval.txt").read_text().replace("\n\n", ""))) + 5  # + end-of-texts
    assert len(evaluated.val) == file_tokens and len(evaluated.train) == 0  # 5 documents: too few to split at 1%


@needs_shakespeare
def test_shakespeare_evaluates_all_of_another_text(tmp_path):
    other = tmp_path / "sonnet.txt"
    other.write_text("Shall I compare thee to a summer's day?\n" * 3)
    run, evaluated, _ = evaluated_on(ShakespeareData, SHAKESPEARE, other, block_size=16)
    assert len(evaluated.val_tokens) == len(other.read_text()) and len(evaluated.train_tokens) == 0


def test_the_runs_own_data_is_its_files_contents_however_the_path_is_spelled(tmp_path, caplog):
    from transformer_lab.data.corpus import TextCorpus

    folder = tmp_path / "g"
    folder.mkdir()
    for name in ("a", "b"):
        (folder / f"{name}.txt").write_text("\n\n".join(f"{name} document {i}: the cat sat" for i in range(40)))
    settings = dict(cache_dir=str(tmp_path / "cache"), tokenizer="char", block_size=8, val_fraction=0.2)
    run, _, meta = evaluated_on(TextCorpus, f"{folder}/*.txt", folder / "a.txt", **settings)
    for spelled in (f"{folder}/*.txt", str(folder), [str(folder / "b.txt"), str(folder / "a.txt")],
                    f"{tmp_path}/./g/../g/*.txt"):  # fmt: skip
        again = TextCorpus(path=spelled, **settings)
        again.take_checkpoint(meta, spelled)
        assert not again.whole_file, spelled  # the run's own files: its validation split
    (folder / "b.txt").write_text("\n\n".join(f"b document {i}: a cat sat" for i in range(90)))  # changed since
    changed = TextCorpus(path=f"{folder}/*.txt", **settings)
    changed.take_checkpoint(meta, f"{folder}/*.txt")
    changed.setup()
    assert changed.whole_file and "b.txt has changed since the checkpoint's run" in caplog.text
    assert len(changed.train) == 0 and len(changed.val) > len(run.val)


def test_a_text_evaluated_whole_is_scored_to_its_last_token(tmp_path):
    """The windows of a file evaluated whole cover every token once: the last one, which ends where the text
    does, scores only the targets the windows before it did not."""
    from types import SimpleNamespace

    from transformer_lab.data.tokens import TokenStreams

    tokens = torch.arange(100)
    for whole, scored in ((False, 99 // 16 * 16), (True, 99)):
        windows = TextWindows.__new__(TextWindows)
        windows.data = SimpleNamespace(whole_file=whole, sequence_length=16)
        windows.streams = TokenStreams(tokens[:0], tokens, 100, decode=str)
        windows.val_batch_size = 4
        targets = torch.cat([y.flatten() for _, y in windows.val_dataloader()])
        kept = targets[targets != -100]
        assert len(kept) == scored and len(set(kept.tolist())) == scored  # each once
        assert (99 in kept.tolist()) == whole  # the last token


def test_repeats_text_is_segments_each_written_copies_times_and_drawn_by_its_seed():
    """data=repeats (the data induction heads form on): every segment, 4-16 letters of the first 32, comes
    `copies` times in a row; the same text_seed draws the same text, another another; a mistake names its key."""
    import re

    from transformer_lab.data.repeats import RepeatsData
    from transformer_lab.errors import ConfigError

    data = RepeatsData(characters=5_000, copies=3)
    text = data.read_text()
    assert len(text) == 5_000 and set(text) <= set("abcdefghijklmnopqrstuvwxyzABCDEF")
    segments = re.findall(r"([a-zA-Z]{4,16}?)\1\1", text)  # (the shortest period: a segment may repeat a letter)
    assert sum(3 * len(s) for s in segments) > 4_800  # all but the cut-off last
    assert RepeatsData(characters=5_000).read_text() != RepeatsData(characters=5_000, text_seed=1).read_text()
    data.setup()
    assert data.vocab_size == 32 and data.data_files() == {}
    with pytest.raises(ConfigError, match=r"^data\.max_segment: must be >= data\.min_segment=8$"):
        RepeatsData(min_segment=8, max_segment=4)
    with pytest.raises(ConfigError, match=r"^data\.characters: holds 10 to validate on, not a window of data"):
        RepeatsData(characters=100)


def test_a_char_tokenizer_writes_an_id_past_its_characters_as_the_replacement_character():
    # model_sizes may give the model a vocabulary padded beyond the data's: a sample drawn from an untrained model
    # then holds such ids, which decode as a decoder writes what it cannot read (it raised IndexError mid-run)
    from transformer_lab.data.tokenizers import CharTokenizer

    tokenizer = CharTokenizer(["a", "b"], end_of_text="<eot>")
    assert tokenizer.decode([0, 2, 1, 3, 7]) == "a<eot>b\ufffd\ufffd"
