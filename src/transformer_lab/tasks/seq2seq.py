"""Sequence to sequence: label-smoothed cross-entropy with teacher forcing, and BLEU of decoded outputs."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from omegaconf import OmegaConf
from torchmetrics import MeanMetric

from transformer_lab.tasks import decoding
from transformer_lab.tasks.base import Task
from transformer_lab.tasks.configs import Seq2SeqConfig


class Seq2SeqTask(Task):
    """`decode`: beam_size for the test set (1 = greedy), val_beam_size for validation, length_penalty,
    max_extra_len (outputs may be this many tokens longer than their source). Training minimises the
    label-smoothed cross-entropy (task.label_smoothing); `val/loss` and `test/loss` are the plain one,
    comparable across smoothing settings."""

    architecture = "encoder-decoder"  # the network it trains
    config_class = Seq2SeqConfig  # its settings: the task.* keys

    def __init__(self, model: torch.nn.Module, optim: dict, decode: dict, label_smoothing: float = 0.1, **kwargs):
        super().__init__(model, optim, **kwargs)
        self.decode_cfg, self.label_smoothing = decode, label_smoothing
        self.eval_loss = MeanMetric()

    @classmethod
    def settings(cls, cfg, datamodule) -> dict:
        return {
            "decode": OmegaConf.to_container(cfg.task.decode, resolve=True),
            "label_smoothing": cfg.task.label_smoothing,
        }

    def batch_tokens(self, batch) -> int:
        src, tgt = batch[:2]
        return src.numel() + tgt.numel() - tgt.size(0)  # source, and the target minus its last token

    def batch_flops(self, batch) -> int:
        src, tgt = batch[:2]
        return 3 * src.size(0) * self.model.forward_flops(src.size(1), tgt.size(1) - 1)

    def forward(self, src, tgt_in):
        return self.model(src, tgt_in)

    def loss(self, logits, tgt, smoothing: float) -> torch.Tensor:
        return F.cross_entropy(
            logits.flatten(0, 1), tgt[:, 1:].flatten(), ignore_index=self.specials.pad, label_smoothing=smoothing
        )

    def training_step(self, batch, batch_idx):
        src, tgt = batch
        logits = self.model(src, tgt[:, :-1])  # teacher forcing: predict tgt[1:] from tgt[:-1]
        self.metric.train_step(self, batch, logits)
        return self.guarded(self.loss(logits, tgt, self.label_smoothing), (tgt[:, 1:] != self.specials.pad).sum())

    def answers(self, batch, logits):
        """(questions, predicted, expected) of one answer per row (AnswerAccuracy): the sources, and the answer's
        K tokens (B, K) between the target's <bos> and <eos> (batching/equations.py AnswerSequence); all K right
        under teacher forcing is greedy decoding's first K tokens being the answer."""
        k = batch[1].size(1) - 2
        return batch[0], logits[:, :k].argmax(-1), batch[1][:, 1 : k + 1]

    def greedy_answers(self, questions: torch.Tensor, k: int) -> torch.Tensor:
        """The model's own answers (B, k): greedy decoding of the sources up to <eos> or k tokens (as `answer`
        gives them), <eos> after an early one."""
        eos = self.specials.eos
        outputs = decoding.decode(self.model, questions, 1, k, self.specials.bos, eos).outputs
        return torch.tensor([ids[:k] + [eos] * (k - len(ids[:k])) for ids in outputs], device=questions.device)

    def reference_ids(self, batch) -> list[list[int]]:
        """Each row's target ids after <bos>, up to its <eos> (left out): what an output must be to match
        exactly (Bleu's exact match)."""
        return [decoding.ids_before(row[1:].tolist(), self.specials.eos) for row in batch[1]]

    @classmethod
    def decoding_needs(cls, settings: dict) -> dict[str, str | None]:
        """The encoder and decoder halves, and the decoder's key/value cache (decoding.greedy, beam_search)."""
        return {"encode": None, "decode": None, "new_cache": None}

    def continuations(self, batch, beam_size: int) -> decoding.Decoded:
        """The sources' outputs, greedy or by beam search (Bleu)."""
        src, d = batch[0], self.decode_cfg
        return decoding.decode(
            self.model,
            src,
            beam_size,
            src.size(1) + d["max_extra_len"],
            self.specials.bos,
            self.specials.eos,
            d["length_penalty"],
        )

    def validation_step(self, batch, batch_idx):
        src, tgt = batch[0], batch[1]
        logits = self.model(src, tgt[:, :-1])
        self.eval_loss.update(self.loss(logits, tgt, 0.0), weight=(tgt[:, 1:] != self.specials.pad).sum())
        self.metric.step(self, batch, logits)

    def on_validation_epoch_end(self):
        self.log_evaluation("val", self.eval_loss, ppl=True)

    def test_step(self, batch, batch_idx):
        self.validation_step(batch, batch_idx)

    def on_test_epoch_end(self):
        self.log_evaluation("test", self.eval_loss, ppl=True)
