"""Language modelling: next-token cross-entropy, on every position (text), on the answer only
(equations), or on the target after `<sep>` (translation as a prefix LM); targets elsewhere are -100."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from omegaconf import OmegaConf
from torchmetrics import MeanMetric
from torchmetrics.classification import MulticlassAccuracy

from transformer_lab.data.tokens import EOS, SEP
from transformer_lab.errors import ConfigError, require
from transformer_lab.tasks.base import Task
from transformer_lab.tasks.configs import LanguageModelConfig
from transformer_lab.tasks.decoding import continue_prompts


class LanguageModelTask(Task):
    architecture, layout = "decoder", "lm"  # what it trains, and the batches it reads (data/base.py)
    config_class = LanguageModelConfig  # its settings: the task.* keys

    def __init__(
        self,
        model: torch.nn.Module,
        optim: dict,
        sample: dict,
        decode: Callable[[Any], str],
        answer_only: bool = False,
        prompt_ids: list[int] | None = None,
        checkpoint_meta: dict | None = None,
        kind: str = "text",
        decode_cfg: dict | None = None,
    ):
        super().__init__(model, optim, checkpoint_meta)
        self.sample, self.kind = sample, kind
        self.decode_cfg = decode_cfg or {"beam_size": 1, "val_beam_size": 1, "length_penalty": 0.6, "max_extra_len": 50}
        if kind == "bleu" and not hasattr(model, "new_cache"):  # beam search continues prompts with a cache
            for key in ("beam_size", "val_beam_size"):
                require(
                    self.decode_cfg[key] == 1,
                    f"task.decode.{key}",
                    f"{type(model).__name__} has no key/value "
                    "cache (new_cache()) for beam search: set it to 1 (greedy)",
                )
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
        return {
            "sample": OmegaConf.to_container(cfg.task.sample, resolve=True),
            "decode": datamodule.decode,
            "answer_only": datamodule.answer_only,
            "prompt_ids": prompt_ids,
            "kind": datamodule.kind,
            "decode_cfg": OmegaConf.to_container(cfg.task.decode, resolve=True),
        }

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
        return self.guarded(self.loss(logits, y), (y != -100).sum())

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
        """Continuation of `<bos> source <sep>` (one prompt length per batch) up to <eos>, greedy or by beam
        search (decode.val_beam_size, decode.beam_size for the test set), within the model's block_size: an
        output that reaches it first is cut there (counted as truncated)."""
        d = self.decode_cfg
        prompt_len = int((x[0] == SEP).nonzero()[0]) + 1
        decoded = continue_prompts(
            self.model,
            x[:, :prompt_len],
            prompt_len + d["max_extra_len"],
            EOS,
            d["beam_size" if self.trainer.testing else "val_beam_size"],
            d["length_penalty"],
        )
        self.truncated_outputs += decoded.truncated
        for row, ids in zip(rows.tolist(), decoded.outputs):
            self.hypotheses[row] = self.decode(ids)

    def on_validation_epoch_end(self):
        self._eval_end("val")

    def test_step(self, batch, batch_idx):
        self.validation_step(batch, batch_idx)

    def on_test_epoch_end(self):
        self._eval_end("test")

    def _eval_end(self, split: str):
        self.log_evaluation(split, self.val_loss, self.val_acc, ppl=True)
        if self.kind == "bleu":
            self.report_bleu(split)
        elif self.val_acc is None and self.sample.get("enabled", True) and not self.trainer.sanity_checking:
            self._text_samples()

    def _text_samples(self):
        prompt = torch.tensor([self.prompt_ids], device=self.device)
        generator = torch.Generator(device=self.device).manual_seed(self.sample["seed"])
        out = self.model.generate(
            prompt, self.sample["max_new_tokens"], self.sample["temperature"], self.sample["top_k"], generator=generator
        )
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
