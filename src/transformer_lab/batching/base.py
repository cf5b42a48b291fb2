"""A task's batches: what a dataset's raw splits (data/base.py) become for one objective. A task's YAML names
one transform per form it reads (`batches: {text: ..., pairs: ..., equations: ...}`); the build (run/build.py) builds the
first the dataset provides, around the dataset, and gives it to Lightning as the run's data module. Every
attribute the task, the build and the commands read from it is named here; what is the dataset's alone (its
specials, files, checkpoint record, references) they read from `.data`, the dataset (data/base.py).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

from transformer_lab.data.base import DataSource
from transformer_lab.data.tokens import TokenStreams, with_pad_and_eos
from transformer_lab.errors import UserError


class Batching:
    """Lightning's data module of a run: its class with L.LightningDataModule mixed in (`for_lightning`), made
    where a Trainer takes it, so a run loaded to sample, translate or export imports no Lightning."""

    form: str  # the raw form it reads (data/base.py FORMS)
    endless: bool = False  # training draws random windows without end: only trainer.max_steps stops it
    command: str | None = None  # the inference command that serves a model trained on it (commands/inference.py)
    padding_fraction: float | None = None  # share of padding in training batches, once set up (summary.json)
    has_test_split: bool = False  # test batches (of the data's test split), evaluated once after training
    # The task.* settings its constructor takes as keyword arguments (MaskedLM: mask_prob, ...): the build
    # passes exactly these, checked by the task's settings dataclass (tasks/configs.py).
    task_keys: tuple[str, ...] = ()
    trainer = None  # Lightning's Trainer, in a run (L.LightningDataModule's)

    def __init__(self, data: DataSource, batch_size: int, val_batch_size: int | None = None, seed: int = 1337):
        super().__init__()
        self.data = data
        self.batch_size, self.val_batch_size, self.seed = batch_size, val_batch_size or batch_size, seed
        self.ready = False

    @property
    def length_key(self) -> str | None:
        """The key that sets `sequence_length`, named in messages."""
        return self.data.length_key and f"data.{self.data.length_key}"

    # Sizes the model is built with (data.configs.DATA_DECIDED); after setup(). None where there is no such thing.
    @property
    def vocab_size(self) -> int:
        return self.data.vocab_size

    @property
    def source_vocab_size(self) -> int | None:
        return None

    @property
    def n_classes(self) -> int | None:
        return None

    @property
    def pad_id(self) -> int | None:
        return None

    @property
    def sequence_length(self) -> int | None:
        """The longest sequence a model is fed; known before setup()."""
        return self.data.sequence_length

    def prepare_data(self) -> None:
        self.data.prepare_data()

    def setup(self, stage: str | None = None) -> None:
        if not self.ready:
            self.data.setup()
            self.make()
            self.ready = True

    def make(self) -> None:
        """Build what the batches come from, once the data is set up."""

    def for_checkpoint(self, meta: dict, path=None) -> None:
        self.data.take_checkpoint(meta, path)

    def decode(self, ids) -> str:
        """Text of a model's ids (special tokens left out)."""
        return self.data.decode(ids)

    def encode(self, text: str) -> list[int]:
        """A model input from text, with its special tokens (the inference commands); a ValueError says what
        cannot be encoded."""
        return self.data.encode(text)

    def batches_done(self) -> int:
        """Training batches already drawn, where a training stream starts: from the trainer's step count,
        which a checkpoint restores, so a resumed run continues the stream exactly. With
        `trainer.overfit_batches` always 0: the same first batches, again and again."""
        trainer = self.trainer
        if trainer is None or trainer.overfit_batches:
            return 0
        return trainer.global_step * trainer.accumulate_grad_batches

    def position(self, batches_per_epoch: int) -> tuple[int, int]:
        """(epoch, batches of it already done) of a finite training set, from batches_done(). Exact when
        accumulate_grad_batches divides the epoch's batch count."""
        trainer = self.trainer
        if trainer is None:
            return 0, 0
        return divmod(self.batches_done(), min(batches_per_epoch, trainer.num_training_batches))

    # What a task's metrics read (tasks/metrics.py), where the batches have it:
    def sample_prompt_ids(self) -> list[int] | None:
        """Where text samples start (TextSamples)."""
        return None

    def token_bytes(self) -> list[int]:
        """The UTF-8 bytes of each target id's text (BitsPerByte)."""
        raise NotImplementedError

    answer_length = 1  # the tokens of an answer: an equation's (batching/equations.py, its dataset's), else one

    def answer_text(self, answer: int) -> str:
        """An answer's text (AnswerAccuracy's examples)."""
        return str(answer)

    # The translate command's: a source's ids (the dataset's encode()) as the model reads them (at most the
    # dataset's max_tokens of them, as in training).
    def source_input(self, ids: list[int]) -> list[int]:
        raise NotImplementedError

    # The attention command's: the names of ids these batches add that decode to nothing ([CLS]).
    @property
    def special_names(self) -> dict[int, str]:
        return {}

    # The fill command's (span corruption): the end-of-sequence id, and the first sentinel id (sentinels count
    # down from the top of the vocabulary to it).
    eos_id: int | None = None
    first_sentinel: int | None = None


class FromTokenStreams(Batching):
    """Batches made from the data's text with <pad> and <eos> ids (span corruption, masking), as endless
    random windows; `streams` holds the vocabulary after for_checkpoint() alone, the splits after setup()."""

    form = "text"
    endless = True
    streams: TokenStreams | None = None

    def for_checkpoint(self, meta: dict, path=None) -> None:
        super().for_checkpoint(meta, path)
        self.streams = with_pad_and_eos(self.text_streams())

    def make(self) -> None:
        self.streams = with_pad_and_eos(self.text_streams())
        self.make_validation()

    def text_streams(self) -> TokenStreams:
        """The data's token streams, encoding text with the dataset's own encode() where they name none."""
        streams = self.data.token_streams()
        return streams if streams.encode is not None else dataclasses.replace(streams, encode=self.data.encode)

    def make_validation(self) -> None:
        """The fixed validation batches, from `streams.val`."""
        raise NotImplementedError

    def token_bytes(self) -> list[int]:
        """The data's bytes of each id (where with_pad_and_eos moved them), none for the ids the batches
        add (padding, end of sequence, sentinels, [MASK], [CLS]): their predictions are left out of val/bpb."""
        data, out = self.data.token_bytes(), [0] * self.vocab_size
        out[self.streams.offset : self.streams.offset + len(data)] = data
        return out


def encoder(datamodule) -> Callable[[str], list[int]]:
    """The data module's encode(), or a clear error naming the dataset where a user's has none."""
    dataset = type(getattr(datamodule, "data", datamodule)).__name__  # (inside its batch transform)

    def encode(text: str) -> list[int]:
        try:
            return datamodule.encode(text)
        except NotImplementedError:
            raise UserError(
                f"{dataset} has no encode(): text cannot be turned into this model's input (data/base.py)"
            ) from None
        except ValueError:
            raise
        except Exception as e:  # noqa: BLE001  (a user's encode() failing its own way: that line's warning)
            raise ValueError(f"{dataset}.encode() failed on it ({type(e).__name__}: {e})") from None

    return encode


@functools.cache
def for_lightning(batching_cls: type) -> type:
    """`batching_cls` with L.LightningDataModule mixed in: the class a Trainer takes (config/classes.make_datamodule)."""
    import lightning as L

    names = {"__module__": batching_cls.__module__, "__qualname__": batching_cls.__qualname__}
    return type(batching_cls.__name__, (batching_cls, L.LightningDataModule), names)
