"""The dataset contract, enforced (data/base.py): a model evaluated on a file its run did not read scores every
row of it, whatever hooks a dataset of one's own has; what cannot hold is one line naming the hook, before
anything is evaluated or written. The datasets here are a user's: one module outside the package."""

import importlib
import json
import pickle
import sys
import textwrap

import pytest
from omegaconf import open_dict

from helpers.run_dirs import evaluated_on
from helpers.runs import TINY, compose_cfg, train_in_process
from transformer_lab.batching.equations import AnswerToken
from transformer_lab.batching.labelled import LabelledBatches
from transformer_lab.batching.pairs import PairBatches
from transformer_lab.batching.windows import TextWindows
from transformer_lab.errors import UserError

USERS = '''
"""A user's datasets: each reads `path` and shares its rows out itself; none reads whole_file."""
import hashlib
from pathlib import Path

import torch

from transformer_lab.data.base import DataSource, Equations
from transformer_lab.data.tokens import SPECIALS, TokenStreams

CHARS = "abcdefghij ABCDEFGHIJ!"


def rows_of(path):
    return [line.split("\\t") for line in Path(path).read_text().splitlines() if line.strip()]


class NoTokenStreams(DataSource):
    """Declares text and forgets its reader."""

    provides = ("text",)

    def __init__(self, batch_size=8, val_batch_size=None, seed=0):
        pass


class TsvLabels(DataSource):
    """The issue's: `text<TAB>label` lines, 70% to train on; no data_files(), no whole_file."""

    provides = ("labelled",)
    labels = ["calm", "shouting"]
    length_key = "max_length"

    def __init__(self, path, max_length=24, batch_size=8, val_batch_size=None, seed=0):
        self.path, self.max_length = Path(path), max_length
        self.vocab = SPECIALS + list(CHARS)

    def setup(self):
        rows = [(text, self.labels.index(label)) for text, label in rows_of(self.path)]
        n = int(len(rows) * 0.7)
        self.rows = {"train": rows[:n], "val": rows[n:]}

    @property
    def vocab_size(self):
        return len(self.vocab)

    @property
    def sequence_length(self):
        return self.max_length

    def encode(self, text):
        return [self.vocab.index(c) for c in text][: self.max_length - 2]

    def decode(self, ids):
        return "".join(self.vocab[int(i)] for i in ids if int(i) >= len(SPECIALS))

    def labelled(self, split):
        rows = self.rows[split]
        return [self.encode(text) for text, _ in rows], [label for _, label in rows]


class FilesAfterSetup(TsvLabels):
    """data_files() names what setup() read: it fails before setup()."""

    def setup(self):
        super().setup()
        self.read = self.path

    def data_files(self):
        return {str(self.read.absolute()): hashlib.sha256(self.read.read_bytes()).hexdigest()}


class ReadsWholeFileLate(FilesAfterSetup):
    reads_whole_file = True  # (it claims to read whole_file in setup(), which it cannot know before it)


class BrokenFiles(TsvLabels):
    def data_files(self):
        raise OSError("no index of the files")


class ListedFiles(TsvLabels):
    def data_files(self):
        return [str(self.path)]


class TextNinetyTen(DataSource):
    """The documented CharFile: characters, the first 90% to train on."""

    provides = ("text",)
    length_key = "block_size"

    def __init__(self, path, block_size=8, batch_size=4, val_batch_size=None, seed=0):
        self.path, self.block_size = Path(path), block_size
        self.chars = None

    def setup(self):
        text = self.path.read_text()
        self.chars = self.chars or sorted(set(text))
        ids = torch.tensor(self.encode(text))
        n = int(len(ids) * 0.9)
        self.train, self.val = ids[:n], ids[n:]

    def checkpoint_meta(self):
        return {"vocab": self.chars}

    def for_checkpoint(self, meta):
        self.chars = meta["vocab"]

    @property
    def vocab_size(self):
        return len(self.chars)

    @property
    def sequence_length(self):
        return self.block_size

    def encode(self, text):
        return [self.chars.index(c) for c in text]

    def decode(self, ids):
        return "".join(self.chars[int(i)] for i in ids)

    def token_streams(self):
        return TokenStreams(self.train, self.val, self.vocab_size, decode=self.decode)


class TextNoForCheckpoint(TextNinetyTen):
    for_checkpoint = DataSource.for_checkpoint  # (as if it had none: setup() learns the characters again)


class PairsWithTest(DataSource):
    """`source<TAB>target` lines: 80% to train on, 10% each to validate and test."""

    provides = ("pairs",)
    has_test_split = True
    length_key = "max_tokens"
    max_tokens = 16

    def __init__(self, path, batch_size=4, val_batch_size=None, seed=0):
        self.path = Path(path)
        self.vocab = SPECIALS + list(CHARS)

    def setup(self):
        rows = rows_of(self.path)
        n_val = n_test = max(1, len(rows) // 10)
        self.rows = {"val": rows[:n_val], "test": rows[n_val : n_val + n_test], "train": rows[n_val + n_test :]}

    @property
    def vocab_size(self):
        return len(self.vocab)

    @property
    def sequence_length(self):
        return self.max_tokens + 2

    def encode(self, text):
        return [self.vocab.index(c) for c in text]

    def decode(self, ids):
        return "".join(self.vocab[int(i)] for i in ids if int(i) >= len(SPECIALS))

    def pairs(self, split):
        return [self.encode(s) for s, _ in self.rows[split]], [self.encode(t) for _, t in self.rows[split]]

    def sources(self, split):
        return [s for s, _ in self.rows[split]]

    def references(self, split):
        return [self.decode(ids) for ids in self.pairs(split)[1]]  # (its own reader, called inside)


class MaxOfFile(DataSource):
    """`a b` digit lines, the answer the larger: half to train on."""

    provides = ("equations",)
    n_answers = 10

    def __init__(self, path, batch_size=4, val_batch_size=None, seed=0):
        self.path = Path(path)

    @property
    def vocab_size(self):
        return 11

    @property
    def sequence_length(self):
        return 3

    def encode(self, text):
        return [int(w) for w in text.split()]

    def decode(self, ids):
        return " ".join(map(str, ids))

    def equations(self):
        rows = [[int(w) for w in line.split()] for line in self.path.read_text().splitlines()]
        tokens = torch.tensor([[a, b, 10] for a, b in rows])
        answers = torch.tensor([max(a, b) for a, b in rows])
        order = torch.arange(len(rows))
        return Equations(tokens, answers, train=order[: len(rows) // 2], val=order[len(rows) // 2 :])
'''

YAML = """
_target_: contract_users.TsvLabels
name: tsvlabels
path: {path}
max_length: 24
batch_size: 8
val_batch_size: null
seed: ${{seed}}
"""


@pytest.fixture(scope="module")
def users(tmp_path_factory):
    """The user's module (contract_users), importable, with a training file and a new file of 7 rows."""
    folder = tmp_path_factory.mktemp("users")
    (folder / "code").mkdir()
    (folder / "code" / "contract_users.py").write_text(textwrap.dedent(USERS))
    sys.path.insert(0, str(folder / "code"))
    try:
        yield importlib.import_module("contract_users"), folder
    finally:
        sys.path.remove(str(folder / "code"))
        sys.modules.pop("contract_users", None)


def labelled_lines(n, start=0):
    return "".join(
        f"{'ABCDEFGHIJ'[i % 10] * 3}!\tshouting\n" if i % 2 else f"{'abcdefghij'[i % 10] * 4}\tcalm\n"
        for i in range(start, start + n)
    )


def scored_rows(batches_cls, data, split="val", **kwargs):
    batches = batches_cls(data, batch_size=4, seed=0, **kwargs)
    batches.setup()
    loader = batches.val_dataloader() if split == "val" else batches.test_dataloader()
    return sum(len(batch[1]) for batch in loader)


@pytest.mark.parametrize("name", ["TsvLabels", "FilesAfterSetup"])
def test_a_labelled_dataset_without_the_hooks_scores_all_7_rows_of_a_new_file(users, tmp_path, name):
    """The issue's dataset (no data_files(), no whole_file), and one whose data_files() needs setup(): 7 of 7."""
    module, _ = users
    (tmp_path / "train.tsv").write_text(labelled_lines(60))
    (tmp_path / "new.tsv").write_text(labelled_lines(7, start=100))
    run, data, meta = evaluated_on(getattr(module, name), tmp_path / "train.tsv", tmp_path / "new.tsv")
    assert data.whole_file and len(data.labelled("val")[1]) == 7 and data.labelled("train") == ([], [])
    assert scored_rows(LabelledBatches, data) == 7
    assert len(pickle.loads(pickle.dumps(data)).labelled("val")[1]) == 7  # (what spawned processes get)
    assert sorted(map(tuple, data.labelled("val")[0])) == sorted(
        map(tuple, [data.encode(line.split("\t")[0]) for line in labelled_lines(7, start=100).splitlines()])
    )  # every row once
    (tmp_path / "same.tsv").write_text(labelled_lines(60))  # the run's own file, wherever it is: its split
    again = getattr(module, name)(path=str(tmp_path / "same.tsv"))
    again.take_checkpoint(meta, str(tmp_path / "same.tsv"))
    again.setup()
    assert not again.whole_file and len(again.labelled("val")[1]) == len(run.labelled("val")[1]) == 18


def test_a_text_split_90_10_is_scored_to_its_last_character(users, tmp_path):
    module, _ = users
    (tmp_path / "train.txt").write_text("abc def ghij " * 40)
    (tmp_path / "new.txt").write_text("jih gfe dcba " * 3)
    _, data, _ = evaluated_on(module.TextNinetyTen, tmp_path / "train.txt", tmp_path / "new.txt")
    streams = data.token_streams()
    assert data.whole_file and len(streams.train) == 0 and data.decode(streams.val) == "jih gfe dcba " * 3
    windows = TextWindows(data, batch_size=4, seed=0)
    windows.setup()
    targets = sum(int((y != -100).sum()) for _, y in windows.val_dataloader())
    assert targets == len("jih gfe dcba " * 3) - 1  # every character after the first, once


def test_pairs_with_a_test_split_score_all_7_rows_in_both(users, tmp_path):
    module, _ = users
    (tmp_path / "train.tsv").write_text("".join(f"{'abcde'[i % 5] * 3}\t{'ABCDE'[i % 5] * 3}\n" for i in range(50)))
    (tmp_path / "new.tsv").write_text("".join(f"{'fghij'[i % 5] * 2}\t{'FGHIJ'[i % 5] * 2}\n" for i in range(7)))
    _, data, _ = evaluated_on(module.PairsWithTest, tmp_path / "train.tsv", tmp_path / "new.tsv")
    for split in ("val", "test"):
        assert len(data.pairs(split)[0]) == len(data.sources(split)) == len(data.references(split)) == 7
        assert [data.decode(t) for t in data.pairs(split)[1]] == data.references(split)  # still aligned
        assert scored_rows(PairBatches, data, split) == 7
    assert data.pairs("train") == ([], [])


def test_equations_from_a_file_score_every_row(users, tmp_path):
    module, _ = users
    (tmp_path / "train.txt").write_text("".join(f"{a} {b}\n" for a in range(10) for b in range(10)))
    (tmp_path / "new.txt").write_text("".join(f"{a} {9 - a}\n" for a in range(7)))
    _, data, _ = evaluated_on(module.MaxOfFile, tmp_path / "train.txt", tmp_path / "new.txt")
    assert data.equations().val.tolist() == list(range(7)) and len(data.equations().train) == 0
    assert scored_rows(AnswerToken, data) == 7


def test_ours_read_whole_file_themselves_and_are_left_as_they_are(tmp_path):
    from transformer_lab.data.labelled import LabelledText
    from transformer_lab.data.translation import TranslationData

    (tmp_path / "train.tsv").write_text("".join(f"a good play {i}\tpos\na bad play {i}\tneg\n" for i in range(50)))
    (tmp_path / "new.tsv").write_text("".join(f"a fine play {i}\t{'pos' if i % 2 else 'neg'}\n" for i in range(7)))
    settings = dict(data_dir=str(tmp_path), vocab_size=100)
    _, data, _ = evaluated_on(LabelledText, tmp_path / "train.tsv", tmp_path / "new.tsv", **settings)
    assert data.reads_whole_file and not {"setup", "labelled"} & set(vars(data))  # its own methods, no others
    assert len(data.labelled("val")[1]) == 7 and data.labelled("train") == ([], [])
    (tmp_path / "pairs.tsv").write_text("".join(f"ein Hund {i}\ta dog {i}\n" for i in range(60)))
    (tmp_path / "new_pairs.tsv").write_text("".join(f"eine Katze {i}\ta cat {i}\n" for i in range(7)))
    _, data, _ = evaluated_on(TranslationData, tmp_path / "pairs.tsv", tmp_path / "new_pairs.tsv", **settings)
    assert data.reads_whole_file and not {"setup", "pairs", "references", "token_streams"} & set(vars(data))
    assert len(data.references("val")) == len(data.references("test")) == 7 and data.pairs("train") == ([], [])
    _, _, meta = evaluated_on(LabelledText, tmp_path / "train.tsv", tmp_path / "new.tsv", **settings)
    (tmp_path / "train.tsv").unlink()  # the run directory alone: the inference commands read no file
    LabelledText(path=str(tmp_path / "train.tsv"), **settings).take_checkpoint(meta, None)
    with pytest.raises(UserError) as refused:  # evaluating on a file that is not there: one line
        LabelledText(path="gone.tsv", **settings).take_checkpoint(meta, "gone.tsv")
    assert str(refused.value) == "data.path: cannot read gone.tsv: No such file or directory"


def test_what_cannot_hold_is_refused_in_one_line_naming_the_hook(users, tmp_path):
    module, _ = users
    (tmp_path / "train.tsv").write_text(labelled_lines(20))
    (tmp_path / "new.tsv").write_text(labelled_lines(7, start=100))

    def refusal(cls, path=tmp_path / "new.tsv", trained=tmp_path / "train.tsv"):
        with pytest.raises(UserError) as refused:
            evaluated_on(cls, trained, path)
        assert "\n" not in str(refused.value)
        return str(refused.value)

    assert refusal(module.ReadsWholeFileLate) == (
        "ReadsWholeFileLate.data_files() fails before setup() (AttributeError: 'ReadsWholeFileLate' object has no "
        "attribute 'read'); ReadsWholeFileLate reads whole_file in setup(), so it must name its files from its "
        "settings alone"
    )
    data = module.BrokenFiles(path=str(tmp_path / "new.tsv"))  # (no run could record its files either)
    data.take_checkpoint({"data_files": {}, "config": {"data": {}}}, str(tmp_path / "new.tsv"))  # (after setup())
    with pytest.raises(UserError) as refused:
        data.setup()
    assert str(refused.value) == (
        "BrokenFiles.data_files() fails (OSError: no index of the files): evaluating a model needs the files its "
        "splits are read from, each with its SHA-256"
    )
    assert refusal(module.ListedFiles) == (
        "ListedFiles.data_files() returned a list, not {file: SHA-256} (the files its splits are read from)"
    )
    (tmp_path / "train.txt").write_text("abc def ghij " * 40)
    (tmp_path / "other.txt").write_text("jih gfe dcba! " * 3)
    assert refusal(module.TextNoForCheckpoint, tmp_path / "other.txt", tmp_path / "train.txt") == (
        "TextNoForCheckpoint has no for_checkpoint(): its setup() learned another vocab than the checkpoint's, so "
        "the model's ids would mean other tokens; give TextNoForCheckpoint a for_checkpoint(meta) that takes "
        "meta['vocab']"
    )


def test_a_dataset_without_the_reader_of_the_form_it_provides_is_refused_before_the_run(users):
    """provides=("text",) without token_streams() (the stranger's): one line naming the hook, from the checks
    every run passes before its directory is claimed, not the NotImplementedError of setup()."""
    from transformer_lab.config.classes import check_buildable
    from transformer_lab.errors import ConfigError

    cfg = compose_cfg(["model=gpt", "data=shakespeare", *TINY])
    with open_dict(cfg):
        cfg.data = {"_target_": "contract_users.NoTokenStreams", "name": "mine", "batch_size": 8}
    with pytest.raises(ConfigError) as refused:
        check_buildable(cfg)
    assert str(refused.value) == (
        "data: contract_users.NoTokenStreams provides text but defines no token_streams(): a dataset providing text "
        "gives its splits that way (data/base.py, docs/extending.md)"
    )


def test_evaluate_scores_7_of_7_rows_of_a_users_new_file_or_exits_2_before_writing(
    users, tmp_path, monkeypatch, capsys
):
    """The issue, through evaluate: a user's dataset (no data_files(), no whole_file) trained a few steps, then
    evaluated on a new file of 7 rows: all 7 are scored; a folder it cannot name the files of: exit 2, one
    line, nothing written."""
    import transformer_lab.run.build as factory
    from transformer_lab.commands.evaluate import evaluate, main

    _, folder = users
    (tmp_path / "conf" / "data").mkdir(parents=True)
    (tmp_path / "train.tsv").write_text(labelled_lines(60))
    (tmp_path / "new.tsv").write_text(labelled_lines(7, start=100))
    (tmp_path / "conf" / "data" / "tsvlabels.yaml").write_text(YAML.format(path=tmp_path / "train.tsv"))
    run_dir = tmp_path / "run"
    cfg = compose_cfg(
        [
            "model=bert",
            "data=tsvlabels",
            f"hydra.searchpath=[file://{tmp_path / 'conf'}]",
            *TINY,
            "logger=none",
            "trainer.max_steps=3",
        ],
        output_dir=str(run_dir),
        return_hydra_config=True,
    )
    train_in_process(cfg)
    built = []
    build = factory.build
    monkeypatch.setattr(factory, "build", lambda *a, **k: built.append(build(*a, **k)) or built[-1])
    on_file = evaluate(str(run_dir), "val", [f"data.path={tmp_path / 'new.tsv'}"], str(tmp_path / "a.json"))
    datamodule = built[-1][0]
    assert datamodule.data.whole_file and sum(len(y) for _, y in datamodule.val_dataloader()) == 7
    assert json.loads((tmp_path / "a.json").read_text())["metrics"] == on_file["metrics"]
    evaluate(str(run_dir), "val", [], str(tmp_path / "b.json"))  # the run's own file: its 30%
    assert not built[-1][0].data.whole_file and sum(len(y) for _, y in built[-1][0].val_dataloader()) == 18
    (tmp_path / "folder").mkdir()
    capsys.readouterr()
    with pytest.raises(SystemExit) as exited:
        main([str(run_dir), f"data.path={tmp_path / 'folder'}", f"out={tmp_path / 'c.json'}"])
    assert exited.value.code == 2 and not (tmp_path / "c.json").exists()
    assert capsys.readouterr().err == (
        f"error: TsvLabels has no data_files(), and data.path={tmp_path / 'folder'} is not a file: give TsvLabels "
        "a data_files() naming the files its splits are read from, each with its SHA-256\n"
    )


def test_evaluate_scores_the_runs_own_data_after_its_yaml_is_edited(tmp_path):
    """A data option's YAML edited after the run trained (another op, another split) does not change what evaluate
    scores: the checkpoint's resolved settings are put back, as a resume's (a researcher's finding: evaluate ran on
    the edited data, silently). (What the command line sets still applies: the test above, data.path.)"""
    from transformer_lab.commands.evaluate import evaluate

    option = tmp_path / "conf" / "data" / "mine.yaml"
    option.parent.mkdir(parents=True)
    yaml = "defaults:\n  - /schema/data@_here_: modular\n  - _self_\n\np: 11\nop: {op}\nseed: ${{seed}}\n"
    option.write_text(yaml.format(op='"+"'))
    run_dir = tmp_path / "run"
    cfg = compose_cfg(
        ["data=mine", f"hydra.searchpath=[file://{tmp_path / 'conf'}]", *TINY, "logger=none", "trainer.max_steps=3"],
        output_dir=str(run_dir),
        return_hydra_config=True,
    )
    train_in_process(cfg)
    before = evaluate(str(run_dir))["metrics"]
    option.write_text(yaml.format(op='"-"') + "train_fraction: 0.9\n")
    assert evaluate(str(run_dir))["metrics"] == before
