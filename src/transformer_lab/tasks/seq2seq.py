"""Sequence to sequence: label-smoothed cross-entropy with teacher forcing, and BLEU of decoded outputs."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from omegaconf import OmegaConf
from torchmetrics import MeanMetric

from transformer_lab.data.tokens import BOS, EOS, PAD
from transformer_lab.tasks import decoding
from transformer_lab.tasks.base import Task
from transformer_lab.tasks.configs import Seq2SeqConfig


class Seq2SeqTask(Task):
    """`decode`: beam_size for the test set (1 = greedy), val_beam_size for validation, length_penalty,
    max_extra_len (outputs may be this many tokens longer than their source). Training minimises the
    label-smoothed cross-entropy (task.label_smoothing); `val/loss` and `test/loss` are the plain one,
    comparable across smoothing settings."""

    architecture, layout = "encoder-decoder", "seq2seq"  # what it trains, and the batches it reads (data/base.py)
    config_class = Seq2SeqConfig  # its settings: the task.* keys

    def __init__(
        self,
        model: torch.nn.Module,
        optim: dict,
        decode: dict,
        datamodule,
        label_smoothing: float = 0.1,
        checkpoint_meta: dict | None = None,
    ):
        super().__init__(model, optim, checkpoint_meta)
        self.decode_cfg, self.label_smoothing = decode, label_smoothing
        self.detokenize = datamodule.decode
        self.answer_only = datamodule.answer_only  # equations: accuracy of the answer instead of BLEU
        self.eval_loss = MeanMetric()
        self.eval_acc = MeanMetric()

    @classmethod
    def settings(cls, cfg, datamodule) -> dict:
        return {
            "decode": OmegaConf.to_container(cfg.task.decode, resolve=True),
            "label_smoothing": cfg.task.label_smoothing,
            "datamodule": datamodule,
        }

    def batch_tokens(self, batch) -> int:
        src, tgt = batch[:2]
        return src.numel() + tgt.numel() - tgt.size(0)  # source, and the target minus its last token

    def batch_flops(self, batch) -> int:
        src, tgt = batch[:2]
        return 3 * src.size(0) * self.model.forward_flops(src.size(1), tgt.size(1) - 1)

    def forward(self, src, tgt_in):
        return self.model(src, tgt_in)

    def loss(self, src, tgt, smoothing: float) -> torch.Tensor:
        logits = self.model(src, tgt[:, :-1])  # teacher forcing: predict tgt[1:] from tgt[:-1]
        return F.cross_entropy(logits.flatten(0, 1), tgt[:, 1:].flatten(), ignore_index=PAD, label_smoothing=smoothing)

    def training_step(self, batch, batch_idx):
        src, tgt = batch
        return self.guarded(self.loss(src, tgt, self.label_smoothing), (tgt[:, 1:] != PAD).sum())

    def translate(self, src: torch.Tensor, beam_size: int) -> decoding.Decoded:
        d = self.decode_cfg
        return decoding.decode(
            self.model, src, beam_size, src.size(1) + d["max_extra_len"], BOS, EOS, d["length_penalty"]
        )

    def _eval_step(self, batch):
        src, tgt = batch[0], batch[1]
        n_targets = (tgt[:, 1:] != PAD).sum()
        self.eval_loss.update(self.loss(src, tgt, 0.0), weight=n_targets)
        if self.answer_only:  # the answer is the first token after <bos>
            predicted = self.model(src, tgt[:, :1])[:, 0].argmax(-1)
            self.eval_acc.update((predicted == tgt[:, 1]).float())
            if not self.trainer.sanity_checking and not self.hypotheses:
                self.hypotheses = {
                    i: f"{self.detokenize(src[i].tolist())} {self.detokenize([predicted[i]])}"
                    for i in range(min(4, len(src)))
                }
        elif not self.trainer.sanity_checking:
            beam_size = self.decode_cfg["beam_size" if self.trainer.testing else "val_beam_size"]
            decoded = self.translate(src, beam_size)
            self.truncated_outputs += decoded.truncated
            for row, ids in zip(batch[2].tolist(), decoded.outputs):
                self.hypotheses[row] = self.detokenize(ids)

    def _eval_end(self, split: str):
        self.log_evaluation(split, self.eval_loss, self.eval_acc if self.answer_only else None, ppl=True)
        if self.answer_only:
            if self.hypotheses:
                text = "\n".join(self.hypotheses.values())
                self.show_examples("examples", text, "examples", ["step", "text"], [[self.global_step, text]])
            self.hypotheses = {}
            return
        self.report_bleu(split)

    def validation_step(self, batch, batch_idx):
        self._eval_step(batch)

    def on_validation_epoch_end(self):
        self._eval_end("val")

    def test_step(self, batch, batch_idx):
        self._eval_step(batch)

    def on_test_epoch_end(self):
        self._eval_end("test")
