"""Language modelling: next-token cross-entropy on every target that is not -100: every position of text,
an equation's answer, a translation's target after `<sep>` (the batches decide: batching/). What evaluation
shows beyond the loss (samples, answer accuracy, BLEU) is the metric its YAML names for the data."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from omegaconf import OmegaConf
from torchmetrics import MeanMetric

from transformer_lab.tasks.base import Task
from transformer_lab.tasks.configs import LanguageModelConfig
from transformer_lab.tasks.decoding import Decoded, continue_prompts, ids_before


class LanguageModelTask(Task):
    architecture = "decoder"  # the network it trains
    config_class = LanguageModelConfig  # its settings: the task.* keys

    def __init__(self, model: torch.nn.Module, optim: dict, decode: dict | None = None, **kwargs):
        super().__init__(model, optim, **kwargs)
        self.decode_cfg = decode or {"length_penalty": 0.6, "max_extra_len": 50}
        self.val_loss = MeanMetric()

    @classmethod
    def settings(cls, cfg, datamodule) -> dict:
        return {"decode": OmegaConf.to_container(cfg.task.decode, resolve=True)}

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.model(idx)

    def loss(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-100)

    def training_step(self, batch, batch_idx):
        x, y = batch
        logits = self.model(x)
        self.metric.train_step(self, batch, logits)
        return self.guarded(self.loss(logits, y), (y != -100).sum())

    def validation_step(self, batch, batch_idx):
        x, y = batch[0], batch[1]
        logits = self.model(x)
        self.val_loss.update(self.loss(logits, y), weight=(y != -100).sum())
        self.metric.step(self, batch, logits)

    def answers(self, batch, logits):
        """(questions, predicted, expected) of one answer per row (AnswerAccuracy): the equations, and the
        answer's K tokens (B, K) at the row's last K targets (batching/equations.py AnswerToken). Under teacher
        forcing all K are right exactly when greedy decoding after the question gives the answer: each step's
        prefix is then the answer's own."""
        x, y = batch[0], batch[1]
        k = int((y[0] != -100).sum())
        return x[:, : x.size(1) - k + 1], logits[:, -k:].argmax(-1), y[:, -k:]

    def greedy_answers(self, questions: torch.Tensor, k: int) -> torch.Tensor:
        """The model's own answers (B, k): greedy continuations of the equations (as `answer` gives them)."""
        return self.model.generate(questions, k, temperature=0)[:, -k:]

    def reference_ids(self, batch) -> list[list[int]]:
        """Each row's target ids after `<sep>`, up to its <eos> (left out): what a continuation must give to
        match exactly (Bleu's exact match)."""
        return [ids_before(row[row != -100].tolist(), self.specials.eos) for row in batch[1]]

    @classmethod
    def decoding_needs(cls, settings: dict) -> dict[str, str | None]:
        """Greedy continuations call generate(); beam search, the key/value cache (decoding.PrefixLM)."""
        beams = {settings["decode"]["beam_size"], settings["decode"]["val_beam_size"]}
        greedy = "task.decode.beam_size=1 task.decode.val_beam_size=1"
        return {**({"generate": None} if 1 in beams else {}), **({"new_cache": greedy} if beams - {1} else {})}

    def continuations(self, batch, beam_size: int) -> Decoded:
        """Continuations of `<bos> source <sep>` (one prompt length per batch) up to <eos>, greedy or by beam
        search, within the model's block_size: an output that reaches it first is cut there (counted as
        truncated). (Bleu)"""
        x, d = batch[0], self.decode_cfg
        prompt_len = int((x[0] == self.specials.sep).nonzero()[0]) + 1
        return continue_prompts(
            self.model, x[:, :prompt_len], prompt_len + d["max_extra_len"], self.specials.eos, beam_size,
            d["length_penalty"],
        )  # fmt: skip

    def on_validation_epoch_end(self):
        self.log_evaluation("val", self.val_loss, ppl=True)

    def test_step(self, batch, batch_idx):
        self.validation_step(batch, batch_idx)

    def on_test_epoch_end(self):
        self.log_evaluation("test", self.val_loss, ppl=True)
