"""What a dataset promises: its raw splits in one or more forms, and the vocabulary. Every attribute the
batch transforms (batching/), the factory and the commands read from a dataset is named here.

A dataset of your own subclasses `DataModule`, declares the forms it `provides` and gives them:

- "text": `token_streams()`, each split one stream of token ids (tiny Shakespeare's characters);
- "pairs": `pairs(split)`, sentence pairs as ids, with `sources(split)` / `references(split)` as text;
- "equations": `equations()`, every equation as ids and its answer, split into training and validation;
- "labelled": `labelled(split)`, texts as ids with a class each, the classes named by `labels` (`n_classes`
  of them).

It does not make batches: the task does (its YAML's `batches` names a transform for each form it reads,
batching/), so one dataset serves every objective that reads a form it provides.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import torch

from transformer_lab.data.configs import DATA_DECIDED  # noqa: F401 (the factory's contract, re-exported)
from transformer_lab.data.tokens import Specials

log = logging.getLogger(__name__)

FORMS = ("text", "pairs", "equations", "labelled")


@dataclass
class Equations:
    """A dataset's equations ("equations"): rows of `a op b ... =` as ids, each with its answer's id."""

    tokens: torch.Tensor  # (N, L) ids
    answers: torch.Tensor  # (N,) ids (a number's id is the number)
    train: torch.Tensor  # indices of the training rows
    val: torch.Tensor  # and of the validation rows


class DataModule:
    provides: tuple[str, ...] = ()  # the forms of its raw splits (FORMS), the one a task should read first
    has_test_split: bool = False  # a test split, evaluated once with the best weights after training
    length_key: str | None = None  # the data.* key that sets `sequence_length` (named in messages)
    specials = Specials()  # "pairs": the ids of padding, a target's start and end, a prefix-LM's separator

    # The dataclass of its settings (the data.* keys; data/configs.py), or None: its constructor's arguments
    # are its settings. A dataclass needs no torch, so its types and checks apply while the command line is
    # checked; the module reads the values from `self.config`.
    config_class: type | None = None

    def __init__(self, **settings):
        if self.config_class is not None:
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
    # document or character of it evaluation data: setup() then holds nothing out for training and puts all of
    # it in the validation split (and the test split, where the data has one). take_checkpoint() decides it,
    # for every dataset alike, from data_files(); the run's own files, however their path is spelled, keep
    # their validation split.
    whole_file: bool = False

    def take_checkpoint(self, meta: dict, path=None) -> None:
        """What the commands call before setup() to evaluate or use a trained model (`path`: the run's
        `data.path` now): the whole-file rule above, then the dataset's own for_checkpoint()."""
        self.whole_file = path is not None and not is_runs_data(path, meta, self.data_files)
        self.for_checkpoint(meta)

    def for_checkpoint(self, meta: dict) -> None:
        """Called before setup() to evaluate or use a trained model: take the vocabulary its checkpoint
        carries (`meta`, with what checkpoint_meta() wrote) instead of learning one from the files, so every
        id means what it meant in training (`whole_file` is already decided). Without setup(), encode() and
        decode() work from the checkpoint alone. Nothing to do for data whose vocabulary its settings fix."""

    def checkpoint_meta(self) -> dict[str, Any]:
        """What a checkpoint must carry to turn ids back into text (a vocabulary, a tokenizer)."""
        return {}

    def data_files(self) -> dict[str, str]:
        """The files the splits were read from, once set up, each with its SHA-256 (a checkpoint records
        them, and a run resuming it against other contents is refused); {} for generated data."""
        return {}

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


def is_runs_data(path, meta: dict, data_files) -> bool:
    """Whether `path` (a data.path given to evaluate a checkpoint: a file, or a corpus's directory, glob or
    list) names what its run trained on, as it was then: the same files' contents (`data_files()` against
    the checkpoint's record), whatever the path's spelling. A file of the run's changed since is another
    file (all of it evaluation data), and a warning says so."""
    recorded = meta.get("data_files")
    if recorded is None:  # (a checkpoint from before data files were recorded: the path as written)
        return path == meta["config"]["data"].get("path")
    now = data_files()
    if sorted(now.values()) == sorted(recorded.values()):
        return True
    changed = [name for name, digest in now.items() if name in recorded and recorded[name] != digest]
    if changed:
        log.warning(
            "data.path: %s has changed since the checkpoint's run: all of it is evaluation data now", changed[0]
        )
    return False
