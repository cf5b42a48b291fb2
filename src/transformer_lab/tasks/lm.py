"""Language modelling: next-token cross-entropy, on every position (text), on the answer only
(equations), or on the target after `<sep>` (translation as a prefix LM); targets elsewhere are -100."""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn.functional as F
from omegaconf import OmegaConf
from torchmetrics import MeanMetric
from torchmetrics.classification import MulticlassAccuracy

from transformer_lab.data.tokens import EOS, SEP
from transformer_lab.errors import ConfigError
from transformer_lab.tasks.base import Task


class LanguageModelTask(Task):
    def __init__(self, model: torch.nn.Module, optim: dict, sample: dict, decode: Callable[[Any], str],
                 answer_only: bool = False, prompt_ids: list[int] | None = None,
                 checkpoint_meta: dict | None = None, kind: str = "text", max_extra_len: int = 50):
        super().__init__(model, optim, checkpoint_meta)
        self.sample, self.kind, self.max_extra_len = sample, kind, max_extra_len
        self.decode, self.answer_only = decode, answer_only
        self.prompt_ids = prompt_ids or [0]
        vocab_size = model.config.vocab_size
        self.val_loss = MeanMetric()
        self.val_acc = MulticlassAccuracy(vocab_size, average="micro", ignore_index=-100) if answer_only else None

    @classmethod
    def settings(cls, cfg, datamodule) -> dict:
        try:  # text samples at each validation start from the data's prompt, where it has one
            prompt_ids = datamodule.sample_prompt_ids()
        except ValueError as e:
            raise ConfigError("data.sample_prompt", str(e)) from None
        return {"sample": OmegaConf.to_container(cfg.sample, resolve=True), "decode": datamodule.decode,
                "answer_only": datamodule.answer_only, "prompt_ids": prompt_ids, "kind": datamodule.kind,
                "max_extra_len": cfg.decode.max_extra_len}

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.model(idx)

    def loss(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-100)

    def training_step(self, batch, batch_idx):
        x, y = batch
        logits = self.model(x)
        if self.answer_only and self.logging_step():
            answers = y != -100
            self.log("train/acc", (logits.argmax(-1)[answers] == y[answers]).float().mean())
        return self.guarded(self.loss(logits, y))

    def validation_step(self, batch, batch_idx):
        x, y = batch[0], batch[1]
        logits = self.model(x)
        n_targets = (y != -100).sum()
        self.val_loss.update(self.loss(logits, y), weight=n_targets)
        if self.val_acc is not None:
            self.val_acc.update(logits.flatten(0, 1), y.flatten())
            if batch_idx == 0:
                self._equation_examples(x, logits.argmax(-1), y)
        if self.kind == "bleu" and not self.trainer.sanity_checking:
            self._translate(x, batch[2])

    def _translate(self, x: torch.Tensor, rows: torch.Tensor) -> None:
        """Greedy continuation of `<bos> source <sep>` (one prompt length per batch) up to <eos>, within
        the model's block_size: an output that reaches it first is cut there (counted as truncated)."""
        prompt_len = int((x[0] == SEP).nonzero()[0]) + 1
        room = self.model.config.block_size - prompt_len
        wanted = prompt_len + self.max_extra_len
        out = self.model.generate(x[:, :prompt_len], min(room, wanted), temperature=0)
        for row, ids in zip(rows.tolist(), out[:, prompt_len:].tolist()):
            self.hypotheses[row] = self.decode(ids[:ids.index(EOS)] if EOS in ids else ids)
            self.truncated_outputs += room < wanted and EOS not in ids

    def on_validation_epoch_end(self):
        self._eval_end("val")

    def test_step(self, batch, batch_idx):
        self.validation_step(batch, batch_idx)

    def on_test_epoch_end(self):
        self._eval_end("test")

    def _eval_end(self, split: str):
        loss = self.val_loss.compute()
        self.val_loss.reset()
        self.log(f"{split}/loss", loss, prog_bar=True)
        self.log(f"{split}/ppl", loss.exp())
        if self.val_acc is not None:
            self.log(f"{split}/acc", self.val_acc.compute(), prog_bar=True)
            self.val_acc.reset()
        elif self.kind == "bleu":
            self.report_bleu(split)
        elif self.sample.get("enabled", True) and not self.trainer.sanity_checking:
            self._text_samples()

    def _text_samples(self):
        prompt = torch.tensor([self.prompt_ids], device=self.device)
        generator = torch.Generator(device=self.device).manual_seed(self.sample["seed"])
        out = self.model.generate(prompt, self.sample["max_new_tokens"], self.sample["temperature"],
                                  self.sample["top_k"], generator=generator)
        text = self.decode(out[0].tolist())
        self.show_examples("sample", text, "samples", ["step", "text"], [[self.global_step, text]])

    def _equation_examples(self, x, predicted, y):
        lines = []
        for row in range(min(4, len(x))):
            answer, guess = y[row, -1].item(), predicted[row, -1].item()
            mark = "ok" if answer == guess else f"expected {self.decode([answer])}"
            lines.append(f"{self.decode(x[row].tolist())} {self.decode([guess])}   ({mark})")
        if not self.trainer.sanity_checking:
            text = "\n".join(lines)
            self.show_examples("examples", text, "examples", ["step", "text"], [[self.global_step, text]])
