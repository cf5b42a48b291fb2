"""What a data module promises the factory and the tasks: every attribute they read is named here.

A dataset of your own subclasses `DataModule`, declares the `layouts` it can produce, and builds the
one it is given as `layout`. The layouts, by what a batch holds:

- "lm": token sequences and their next tokens (-100 where nothing is predicted), for a decoder-only model;
- "seq2seq": (source, target) ids padded with `pad_id`, the target starting with <bos> and ending with
  <eos>; evaluation batches carry the rows' indices third, to match `references(split)`;
- "classify": token sequences and one class id each;
- "spans": T5's span corruption, and "mlm": BERT's masked LM, both made by the factory from the module's
  `token_streams()` (a module that has them declares these two).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import lightning as L

from transformer_lab.data.configs import DATA_DECIDED  # noqa: F401 (the factory's contract, re-exported)
from transformer_lab.files import sha256_file

log = logging.getLogger(__name__)


class DataModule(L.LightningDataModule):
    layouts: tuple[str, ...] = ()  # the batch layouts this data can be made into (above)
    # what evaluation shows, and which inference command serves the model (inference.py): "text" (samples;
    # sample), "equation" (answer accuracy), "bleu" (outputs scored against references; translate),
    # "span_corruption" (filled spans; fill) or "masked_lm" (predicted masked tokens)
    kind: str = "text"
    answer_only: bool = False  # loss and accuracy on the answer token only
    has_test_split: bool = False  # a test split, evaluated once with the best weights after training
    endless: bool = False  # training draws random windows without end: only trainer.max_steps stops it
    length_key: str | None = None  # the data.* key that sets `sequence_length` (named in messages)
    padding_fraction: float | None = None  # share of padding in training batches, once set up (summary.json)

    # The dataclass of its settings (the data.* keys; data/configs.py), or None: its constructor's arguments
    # are its settings. A dataclass needs no torch, so its types and checks apply while the command line is
    # checked; the module reads the values from `self.config`.
    config_class: type | None = None

    def __init__(self, layout: str, **settings):
        super().__init__()
        self.layout = layout
        if self.config_class is not None:
            self.config = self.config_class(**settings)

    # Sizes the model is built with; available after setup(). None where a layout has no such thing.
    @property
    def vocab_size(self) -> int:
        raise NotImplementedError

    @property
    def source_vocab_size(self) -> int | None:
        """The source side's vocabulary where it is not the target's."""
        return None

    @property
    def n_classes(self) -> int | None:
        return None

    @property
    def pad_id(self) -> int | None:
        return None

    @property
    def sequence_length(self) -> int | None:
        """The longest sequence a model will be fed in this layout; known before setup()."""
        return None

    def decode(self, ids) -> str:
        """Text of token ids (special tokens left out)."""
        raise NotImplementedError

    def encode(self, text: str) -> list[int]:
        """A model input of this layout from text (the inverse of decode, with the layout's special tokens),
        for the inference commands; a ValueError says what cannot be encoded."""
        raise NotImplementedError

    def for_checkpoint(self, meta: dict) -> None:
        """Called before setup() to evaluate or use a trained model: take the vocabulary its checkpoint
        carries (`meta`, with what checkpoint_meta() wrote) instead of learning one from the files, so every
        id means what it meant in training; a data file (`data.path`) other than the run's is all evaluation
        data. Without setup(), encode() and decode() work from the checkpoint alone. Nothing to do for data
        whose vocabulary its settings fix."""

    def references(self, split: str) -> list[str]:
        """Reference texts of a split's rows ("seq2seq" and translation "lm"), for BLEU."""
        raise NotImplementedError

    def sources(self, split: str) -> list[str]:
        """Source texts of a split's rows, beside references(split): shown with the outputs BLEU scores."""
        raise NotImplementedError

    # Translation data ("bleu"), for the translate command: the tokenizer of the source side (a HF
    # `tokenizers.Tokenizer`), the source tokens a model reads at most, and a source's ids as the model reads
    # them (source_input: cut to max_source_tokens, with the layout's special tokens).
    source_tokenizer: Any = None
    max_source_tokens: int | None = None

    def source_input(self, ids: list[int]) -> list[int]:
        raise NotImplementedError

    # Span corruption ("spans"), for the spans task and the fill command: the end-of-sequence id, and the
    # first sentinel id (sentinels count down from the top of the vocabulary to it).
    eos_id: int | None = None
    first_sentinel: int | None = None

    def token_streams(self):
        """The splits as token streams (a `TokenStreams`), for the "spans" and "mlm" layouts; after for_checkpoint()
        alone, its vocabulary with empty splits."""
        raise NotImplementedError

    def sample_prompt_ids(self) -> list[int] | None:
        """Where text samples start ("lm" on text), or None for no samples. A ValueError names what is wrong."""
        return None

    def batches_done(self) -> int:
        """Training batches already drawn, where a training stream starts: from the trainer's step count,
        which a checkpoint restores, so a resumed run continues the stream exactly. With
        `trainer.overfit_batches` always 0: the same first batches, again and again."""
        trainer = self.trainer
        if trainer is None or trainer.overfit_batches:
            return 0
        return trainer.global_step * trainer.accumulate_grad_batches

    def checkpoint_meta(self) -> dict[str, Any]:
        """What a checkpoint must carry to turn ids back into text (a vocabulary, a tokenizer)."""
        return {}

    def data_files(self) -> dict[str, str]:
        """The files the splits were read from, once set up, each with its SHA-256 (a checkpoint records
        them, and a run resuming it against other contents is refused); {} for generated data."""
        return {}


def is_runs_file(path: str | None, meta: dict) -> bool:
    """Whether `path` (a data.path given to evaluate a checkpoint) is the file its run trained on, as it was
    then; a file changed since is another file (all of it is evaluation data), and a warning says so."""
    if path is None or path != meta["config"]["data"].get("path"):
        return False
    recorded = (meta.get("data_files") or {}).get(str(Path(path).absolute()))
    if recorded is not None and Path(path).is_file() and sha256_file(path) != recorded:
        log.warning("data.path: %s has changed since the checkpoint's run: all of it is evaluation data now", path)
        return False
    return True
