"""The data module of `data=text` (any text corpus, the package's docstring): its training and validation
documents as streams of ids, read from the corpus cache."""

from __future__ import annotations

import torch

from transformer_lab.data.base import DataSource
from transformer_lab.data.configs import TextConfig
from transformer_lab.data.corpus.cache import FileHashes, Shard, cache_folder
from transformer_lab.data.corpus.encoding import token_dtype
from transformer_lab.data.corpus.preparation import prepare
from transformer_lab.data.corpus.readers import find_files
from transformer_lab.data.corpus.token_file import TokenFile
from transformer_lab.data.tokenizers import Tokenizer, from_json
from transformer_lab.data.tokens import TokenStreams
from transformer_lab.errors import DataUnavailableError


class TextCorpus(DataSource):
    """A text corpus of any size (the package's docstring): the training and validation documents as streams of
    ids on disk."""

    provides = ("text",)
    length_key = "block_size"
    config_class = TextConfig
    reads_whole_file = True  # (prepare(whole=...): every document of a corpus evaluated whole is validation)

    def __init__(self, **settings):  # settings: TextConfig's
        super().__init__(**settings)
        self.tokenizer: Tokenizer | None = None
        self.shards: list[Shard] = []
        self.ready = False

    def prepare_data(self) -> None:
        if not self.shards:  # once (the run builds its data before Lightning asks again)
            self.tokenizer, self.shards = prepare(self.config, self.tokenizer, whole=self.whole_file)

    def for_checkpoint(self, meta: dict) -> None:
        self.tokenizer = from_json(meta["tokenizer"])

    def setup(self, stage: str | None = None) -> None:
        if self.ready:
            return
        if not self.shards:
            self.prepare_data()
        dtype = token_dtype(self.config, self.tokenizer)
        self.train = TokenFile([s.train for s in self.shards], dtype)
        self.val = TokenFile([s.val for s in self.shards], dtype)
        window = self.config.block_size + 1
        where = self.config.path if self.config.dataset is None else self.config.dataset
        documents = sum(s.documents for s in self.shards)
        if documents == 0:
            raise DataUnavailableError(f"data.path: {where}: no text (an empty corpus)")
        if self.whole_file and len(self.val) < window:  # (a trained model evaluated on all of it)
            raise DataUnavailableError(
                f"data.path: {where}: {len(self.val)} tokens in all, fewer than one window of data.block_size + 1 "
                f"= {window} to evaluate on"
            )
        for split, tokens in (("training", self.train), ("validation", self.val)):
            if len(tokens) < window and not self.whole_file:
                raise DataUnavailableError(
                    f"data.path: {where}: its {split} documents (of {documents}; data.val_fraction="
                    f"{self.config.val_fraction}) have {len(tokens)} tokens, fewer than one window of "
                    f"data.block_size + 1 = {window}"
                )
        self.ready = True

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.vocab_size

    @property
    def sequence_length(self) -> int:
        return self.config.block_size

    def decode(self, ids) -> str:
        return self.tokenizer.decode(ids)

    def encode(self, text: str) -> list[int]:
        return [int(i) for i in self.tokenizer.encode(text)]

    def sample_prompt_ids(self) -> list[int]:
        """A new document: the end-of-text token, then data.sample_prompt."""
        return [self.tokenizer.eot_id, *self.encode(self.config.sample_prompt)]

    def token_bytes(self) -> list[int]:
        return self.tokenizer.token_bytes()

    def checkpoint_meta(self) -> dict:
        return {"tokenizer": self.tokenizer.to_json()}

    def data_files(self) -> dict[str, str]:
        if self.config.dataset is not None or self.config.path is None:
            return {}
        hashes = FileHashes(cache_folder(self.config))
        return {str(p.absolute()): hashes.sha256(p) for p in find_files(self.config.path)}

    def token_streams(self) -> TokenStreams:
        if not self.ready:  # after for_checkpoint() alone: the vocabulary
            empty = torch.empty(0, dtype=torch.long)
            train = val = empty
        else:
            train, val = self.train, self.val
        return TokenStreams(
            train,
            val,
            self.vocab_size,
            decode=self.decode,
            encode=self.encode,
            pad_id=self.tokenizer.pad_id,
            eos_id=self.tokenizer.eot_id,
        )
