"""Tiny Shakespeare, character level (Karpathy's char-rnn corpus): 1,115,394 characters, 65 symbols; or any
UTF-8 text file (`data.path`)."""

from __future__ import annotations

from pathlib import Path

import torch

from transformer_lab.data.base import DataSource
from transformer_lab.data.configs import ShakespeareConfig
from transformer_lab.data.download import ensure_file
from transformer_lab.data.tokenizers import CharTokenizer
from transformer_lab.data.tokens import TokenStreams
from transformer_lab.errors import DataUnavailableError
from transformer_lab.store.files import read_text, sha256_file

URL = "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"


class ShakespeareData(DataSource):
    """The text as one stream of character ids: the first 90% to train on, the last 10% to validate."""

    provides = ("text",)
    length_key = "block_size"
    reads_whole_file = True  # (setup(): all of a text evaluated whole in the validation stream)

    config_class = ShakespeareConfig

    def __init__(self, **settings):  # settings: ShakespeareConfig's
        super().__init__(**settings)
        c = self.config
        self.path = Path(c.path) if c.path else Path(c.data_dir) / "shakespeare" / "input.txt"
        self.tokenizer: CharTokenizer | None = None
        self.train_tokens = self.val_tokens = torch.empty(0, dtype=torch.long)
        self.ready = False

    def read_text(self) -> str:
        if self.config.path is None:
            return ensure_file(self.path, URL, SHA256).read_text(encoding="utf-8")
        return read_text(self.path, "data.path")

    def prepare_data(self) -> None:
        if self.config.path is None:
            ensure_file(self.path, URL, SHA256)

    def for_checkpoint(self, meta: dict) -> None:
        self.tokenizer = CharTokenizer(meta["vocab"], end_of_text=None)

    def setup(self, stage: str | None = None) -> None:
        if self.ready:
            return
        text = self.read_text()
        if self.tokenizer is None:
            self.tokenizer = CharTokenizer(sorted(set(text)), end_of_text=None)
        try:
            tokens = torch.tensor(self.tokenizer.encode(text), dtype=torch.long)
        except ValueError as e:  # only with a checkpoint's vocabulary
            raise DataUnavailableError(f"data.path: {self.path} has {e}") from None
        n_train = 0 if self.whole_file else int(len(tokens) * (1 - self.config.val_fraction))
        self.train_tokens, self.val_tokens = tokens[:n_train], tokens[n_train:]
        for split, split_tokens in (("validate", self.val_tokens), ("train", self.train_tokens)):
            if len(split_tokens) <= self.config.block_size and (split == "validate" or not self.whole_file):
                raise DataUnavailableError(
                    f"data.path: {self.path}: {len(split_tokens)} characters to {split} on, fewer than "
                    f"one window of data.block_size + 1 = {self.config.block_size + 1} "
                    f"(data.val_fraction={self.config.val_fraction} of {len(tokens)} is held out to validate on)"
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
        return self.tokenizer.encode(text).tolist()

    def sample_prompt_ids(self) -> list[int]:
        return self.encode(self.config.sample_prompt)

    def checkpoint_meta(self) -> dict:
        return {"vocab": self.tokenizer.chars}

    def data_files(self) -> dict[str, str]:
        return {str(self.path.absolute()): SHA256 if self.config.path is None else sha256_file(self.path)}

    def token_streams(self) -> TokenStreams:
        return TokenStreams(self.train_tokens, self.val_tokens, self.vocab_size, decode=self.decode, encode=self.encode)
