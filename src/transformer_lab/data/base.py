"""What a dataset promises: its raw splits in one or more forms, and the vocabulary. Every attribute the
batch transforms (batching/), the build (run/build.py) and the commands read from a dataset is named here.

A dataset of your own subclasses `DataSource`, declares the forms it `provides` and gives them:

- "text": `token_streams()`, each split one stream of token ids (tiny Shakespeare's characters);
- "pairs": `pairs(split)`, sentence pairs as ids, with `sources(split)` / `references(split)` as text;
- "equations": `equations()`, every equation as ids and its answer, split into training and validation;
- "labelled": `labelled(split)`, texts as ids with a class each, the classes named by `labels` (`n_classes`
  of them).

It does not make batches: the task does (its YAML's `batches` names a transform for each form it reads,
batching/), so one dataset serves every objective that reads a form it provides.

Evaluating a trained model on a file of the user's scores all of it, by construction (`take_checkpoint`):
the dataset's files are known from `data_files()` (by default, the files its constructor's arguments name),
and a dataset that does not put the whole file in its validation split itself (`reads_whole_file`) has its
splits joined into one: every row, document or character once. A dataset that cannot be told apart from its
run's data is refused in one line naming the hook it lacks, before anything is read.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from transformer_lab.data.configs import DATA_DECIDED  # noqa: F401 (the build's contract, re-exported)
from transformer_lab.data.tokens import Specials
from transformer_lab.errors import UserError, first_line, under
from transformer_lab.store.files import sha256_file

log = logging.getLogger(__name__)

FORMS = ("text", "pairs", "equations", "labelled")
# What a dataset providing each form defines (DataSource's own raise NotImplementedError): checked before a run
# is claimed (config/classes.py make_datamodule), so a dataset missing one is a line naming it, not a traceback.
READERS = {
    "text": ("token_streams",),
    "pairs": ("pairs", "references", "sources"),
    "equations": ("equations",),
    "labelled": ("labelled",),
}
SPLIT_READERS = ("pairs", "sources", "references", "labelled")  # (split) -> that split's rows


@dataclass
class Equations:
    """A dataset's equations ("equations"): rows of `a op b ... =` as ids, each with its answer's id."""

    tokens: torch.Tensor  # (N, L) ids
    answers: torch.Tensor  # (N,) ids (a number's id is the number)
    train: torch.Tensor  # indices of the training rows
    val: torch.Tensor  # and of the validation rows


class DataSource:
    provides: tuple[str, ...] = ()  # the forms of its raw splits (FORMS), the one a task should read first
    has_test_split: bool = False  # a test split, evaluated once with the best weights after training
    length_key: str | None = None  # the data.* key that sets `sequence_length` (named in messages)
    specials = Specials()  # "pairs": the ids of padding, a target's start and end, a prefix-LM's separator

    # The dataclass of its settings (the data.* keys; data/configs.py), or None: its constructor's arguments
    # are its settings. A dataclass needs no torch, so its types and checks apply while the command line is
    # checked; the module reads the values from `self.config`.
    config_class: type | None = None

    def __new__(cls, *args, **settings):
        self = super().__new__(cls)
        # What its constructor was given, whether or not its __init__ calls this class's: the default
        # data_files() names the files among them.
        self._arguments = (*args, *settings.values())
        return self

    def __init__(self, **settings):
        if self.config_class is not None:
            with under("data"):  # (its settings are the data.* keys)
                self.config = self.config_class(**settings)

    def prepare_data(self) -> None:
        """Download what is missing (once, before setup())."""

    def setup(self) -> None:
        """Read the splits and learn the vocabulary (or take a checkpoint's: for_checkpoint)."""

    @property
    def vocab_size(self) -> int:
        """Of the raw ids; after setup() or for_checkpoint()."""
        raise NotImplementedError

    @property
    def sequence_length(self) -> int | None:
        """The longest raw sequence, known before setup(): a text window (where the data sets one), a sentence
        with its specials ("pairs": its tokens + 2), an equation."""
        return None

    def decode(self, ids) -> str:
        """Text of raw token ids (special tokens left out)."""
        raise NotImplementedError

    def encode(self, text: str) -> list[int]:
        """Raw ids of text, for the inference commands; a ValueError says what cannot be encoded."""
        raise NotImplementedError

    # Evaluating a trained model on data of the user's (a `data.path` whose files are not those its run read,
    # as the checkpoint's SHA-256 record says: another file, or that file changed since) makes every row,
    # document or character of it evaluation data, in the validation split (and the test split, where the data
    # has one), nothing held out for training. take_checkpoint() decides it, for every dataset alike, from
    # data_files(); the run's own files, however their path is spelled, keep their validation split.
    whole_file: bool = False
    # Whether setup() reads `whole_file` itself and then puts all of the file in its validation (and test)
    # split, as ours do (the file given as `data.path`); data_files() must then name the files before setup().
    # Otherwise (a dataset of one's own) the base class joins the splits setup() made (train + val [+ test])
    # into the validation and test splits, which are then the whole file when the splits share its rows out,
    # as a held-out fraction does; where data_files() needs setup() first, it is decided right after it.
    reads_whole_file: bool = False

    def take_checkpoint(self, meta: dict, path=None) -> None:
        """What the commands call before setup() to evaluate or use a trained model (`path`: the run's
        `data.path` now): the whole-file rule above, then the dataset's own for_checkpoint(). What cannot
        hold is refused in one line naming the dataset's hook (a UserError), before a model is evaluated."""
        name = type(self).__name__
        self.whole_file = False
        if path is None and self.reads_whole_file:  # (ours: a file to evaluate on is a data.path)
            self.for_checkpoint(meta)
            return
        try:
            files = self.checked_data_files()
        except UserError:
            raise
        except Exception as e:  # noqa: BLE001  (a dataset's data_files() reading what its setup() makes)
            if self.reads_whole_file and isinstance(e, OSError) and e.filename:
                raise UserError(f"data.path: cannot read {e.filename}: {e.strerror}") from None
            if self.reads_whole_file:
                raise UserError(
                    f"{name}.data_files() fails before setup() ({type(e).__name__}: {first_line(e)}); {name} "
                    "reads whole_file in setup(), so it must name its files from its settings alone"
                ) from None
            files = None  # the rule is decided right after setup()
        if files is not None:
            self.decide_whole_file(files, meta, path)
        if not self.reads_whole_file and (files is None or self.whole_file):
            self.join_splits()
        cls = type(self)
        own_vocabulary = (
            cls.for_checkpoint is DataSource.for_checkpoint and cls.checkpoint_meta is not DataSource.checkpoint_meta
        )
        if files is None or own_vocabulary:
            self.check_after_setup(meta, path, decide=files is None, vocabulary=own_vocabulary)
        self.for_checkpoint(meta)

    def checked_data_files(self) -> dict[str, str]:
        """data_files(), refused unless it is {file: SHA-256}."""
        files = self.data_files()
        if not isinstance(files, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in files.items()):
            raise UserError(
                f"{type(self).__name__}.data_files() returned a {type(files).__name__}, not {{file: SHA-256}} "
                "(the files its splits are read from)"
            )
        return files

    def decide_whole_file(self, files: dict[str, str], meta: dict, path) -> None:
        """`whole_file`, from the files now (data_files()) against the checkpoint's. A dataset with the
        default data_files() whose `data.path` is there but not a file (a folder) is refused: which files it
        reads cannot be told, so neither whether they are its run's. (One that is not there at all is the
        dataset's setup() to refuse, in its words.)"""
        if path is not None and type(self).data_files is DataSource.data_files:
            given = [path] if isinstance(path, (str, os.PathLike)) else list(path)  # (a list: a ListConfig)
            if any(Path(p).exists() and not Path(p).is_file() for p in given if isinstance(p, (str, os.PathLike))):
                name = type(self).__name__
                raise UserError(
                    f"{name} has no data_files(), and data.path={path} is not a file: give {name} a "
                    "data_files() naming the files its splits are read from, each with its SHA-256"
                )
        self.whole_file = not is_runs_data(path, meta, files)

    def check_after_setup(self, meta: dict, path, decide: bool, vocabulary: bool) -> None:
        """Right after this instance's setup() (once): the whole-file rule, where data_files() needed
        setup() first (`decide`); and, for a dataset with a checkpoint_meta() but no for_checkpoint()
        (`vocabulary`), that what setup() learned is the checkpoint's, or the model's ids would mean other
        tokens."""
        self.setup = functools.partial(self.set_up_then_check, meta, path, decide, vocabulary)

    def set_up_then_check(self, meta: dict, path, decide: bool, vocabulary: bool, *args, **kwargs):
        name = type(self).__name__
        result = type(self).setup(self, *args, **kwargs)
        del self.setup  # (once: its own method again)
        if decide:
            try:
                files = self.checked_data_files()
            except UserError:
                raise
            except Exception as e:  # noqa: BLE001
                raise UserError(
                    f"{name}.data_files() fails ({type(e).__name__}: {first_line(e)}): evaluating a model needs "
                    "the files its splits are read from, each with its SHA-256"
                ) from None
            self.decide_whole_file(files, meta, path)
        if vocabulary:
            differ = [key for key, value in self.checkpoint_meta().items() if not same(meta.get(key), value)]
            if differ:
                raise UserError(
                    f"{name} has no for_checkpoint(): its setup() learned another {differ[0]} than the "
                    f"checkpoint's, so the model's ids would mean other tokens; give {name} a "
                    f"for_checkpoint(meta) that takes meta[{differ[0]!r}]"
                )
        return result

    def join_splits(self) -> None:
        """For a dataset that does not read `whole_file` itself: its split readers (those it has) give, while
        the file is evaluated whole, all of its splits joined as the validation and test splits and none for
        training; its own methods stay as they are (these stand in front of them, on this instance only)."""
        cls = type(self)
        self.joining = False  # (inside a joined read: the dataset's own calls of its readers pass through)
        for reader in SPLIT_READERS:
            if getattr(cls, reader) is not getattr(DataSource, reader):
                setattr(self, reader, functools.partial(self.joined_read, reader))
        if cls.token_streams is not DataSource.token_streams:
            self.token_streams = self.joined_token_streams
        if cls.equations is not DataSource.equations:
            self.equations = self.joined_equations

    def joined_read(self, reader: str, split: str):
        """A split reader's rows (`reader`: pairs, sources, references, labelled) with the splits joined."""
        read = getattr(type(self), reader).__get__(self)
        if not self.whole_file or self.joining or split not in ("train", "val", "test"):
            return read(split)
        self.joining = True
        try:
            if split == "train":
                return emptied(read("train"))
            parts = []
            for part in ("train", "val", "test") if self.has_test_split else ("train", "val"):
                rows = read(part)
                if not any(same(rows, taken) for taken in parts):  # (a split that is another, whole)
                    parts.append(rows)
            return joined(parts)
        finally:
            self.joining = False

    def joined_token_streams(self):
        """token_streams() with the training stream put before the validation stream."""
        streams = type(self).token_streams(self)
        if not self.whole_file or self.joining:
            return streams
        every = torch.cat([torch.as_tensor(streams.train), torch.as_tensor(streams.val)])
        return dataclasses.replace(streams, train=every[:0], val=every)

    def joined_equations(self) -> Equations:
        """equations() with every row validation."""
        rows = type(self).equations(self)
        if not self.whole_file:
            return rows
        every = torch.arange(len(rows.tokens))
        return dataclasses.replace(rows, train=every[:0], val=every)

    def for_checkpoint(self, meta: dict) -> None:
        """Called before setup() to evaluate or use a trained model: take the vocabulary its checkpoint
        carries (`meta`, with what checkpoint_meta() wrote) instead of learning one from the files, so every
        id means what it meant in training (`whole_file` is already decided). Without setup(), encode() and
        decode() work from the checkpoint alone. Nothing to do for data whose vocabulary its settings fix."""

    def checkpoint_meta(self) -> dict[str, Any]:
        """What a checkpoint must carry to turn ids back into text (a vocabulary, a tokenizer)."""
        return {}

    def data_files(self) -> dict[str, str]:
        """The files the splits are read from, each with its SHA-256 (a checkpoint records them, a run
        resuming it against other contents is refused, and evaluating on other files scores them whole);
        {} for generated data. Called before setup() too (take_checkpoint). This default: the files the
        constructor's arguments name (a path to an existing file, or a list of them)."""
        return {str(Path(p).absolute()): sha256_file(p) for p in named_files(getattr(self, "_arguments", ()))}

    # "text"
    def token_streams(self):
        """The splits as token streams (a `data.tokens.TokenStreams`); after for_checkpoint() alone, its
        vocabulary with empty splits."""
        raise NotImplementedError

    def sample_prompt_ids(self) -> list[int] | None:
        """Where text samples start, or None for no samples. A ValueError names what is wrong."""
        return None

    def token_bytes(self) -> list[int]:
        """The UTF-8 bytes of each id's text (`val/bpb`, bits per byte, compares tokenizers). This default
        decodes each id alone: exact for characters and bytes; a sub-word tokenizer whose pieces decode
        differently inside a text (a leading space) gives its own."""
        return [len(self.decode([i]).encode("utf-8")) for i in range(self.vocab_size)]

    # "pairs": ids without special tokens (data.tokens' SPECIALS are the vocabulary's first ids), each side
    # cut to `max_tokens`; the source side has its own tokenizer and vocabulary where `source_vocab_size`
    # is not None.
    max_tokens: int | None = None  # (the translate command encodes a source sentence with encode())

    @property
    def source_vocab_size(self) -> int | None:
        return None

    def pairs(self, split: str) -> tuple[list[list[int]], list[list[int]]]:
        """(source ids, target ids) of a split's rows ("train", "val", "test")."""
        raise NotImplementedError

    def references(self, split: str) -> list[str]:
        """Target texts of a split's rows, for BLEU."""
        raise NotImplementedError

    def sources(self, split: str) -> list[str]:
        """Source texts of a split's rows, shown with the outputs BLEU scores."""
        raise NotImplementedError

    # "equations"
    n_answers: int | None = None  # answers are the ids 0 .. n_answers - 1 (the numbers)
    answer_length: int = 1  # the tokens of each answer: Equations.answers is (N,) for 1, (N, answer_length) beyond

    def equations(self) -> Equations:
        raise NotImplementedError

    # "labelled": ids without special tokens (each text cut to sequence_length - 2: [CLS] ... [SEP] are added),
    # and the classes' names, an id each (labels[i] is class i's)
    labels: list[str] = []

    @property
    def n_classes(self) -> int | None:
        return len(self.labels) or None

    def labelled(self, split: str) -> tuple[list[list[int]], list[int]]:
        """(text ids, class ids) of a split's rows ("train", "val")."""
        raise NotImplementedError


def named_files(values) -> list:
    """The existing files among constructor arguments: paths, and lists of them."""
    files = []
    for value in values:
        for item in value if isinstance(value, (list, tuple)) else [value]:
            if isinstance(item, (str, os.PathLike)) and str(item) and Path(item).is_file():
                files.append(item)
    return files


def joined(parts: list):
    """Split readers' results one after another: lists joined, a tuple of lists (ids, targets) member by
    member."""
    if isinstance(parts[0], tuple):
        return tuple(joined([part[i] for part in parts]) for i in range(len(parts[0])))
    return [row for part in parts for row in part]


def same(a, b) -> bool:
    """Whether two results (split readers', checkpoint_meta()'s) are equal; False where they cannot be
    compared."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == b.shape and torch.equal(a, b)
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001  (tensors inside, ...)
        return False


def emptied(result):
    """A split reader's result with no rows."""
    return tuple([] for _ in result) if isinstance(result, tuple) else []


def is_runs_data(path, meta: dict, now: dict[str, str]) -> bool:
    """Whether `path` (a data.path given to evaluate a checkpoint: a file, or a corpus's directory, glob or
    list) names what its run trained on, as it was then: the same files' contents (`now`, data_files(),
    against the checkpoint's record), whatever the path's spelling. A file of the run's changed since is
    another file (all of it evaluation data), and a warning says so."""
    recorded = meta.get("data_files")
    if recorded is None or (not recorded and now):  # (a checkpoint that recorded no files: the path as written)
        return path == meta["config"]["data"].get("path")
    if sorted(now.values()) == sorted(recorded.values()):
        return True
    changed = [name for name, digest in now.items() if name in recorded and recorded[name] != digest]
    if changed:
        log.warning(
            "data.path: %s has changed since the checkpoint's run: all of it is evaluation data now", changed[0]
        )
    return False
