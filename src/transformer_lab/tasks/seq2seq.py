"""Sequence to sequence: label-smoothed cross-entropy with teacher forcing, and BLEU of decoded outputs."""

from __future__ import annotations

import sacrebleu
import torch
import torch.nn.functional as F
from torchmetrics import MeanMetric

from transformer_lab.data.translation import BOS, EOS, PAD
from transformer_lab.tasks.base import Task
from transformer_lab.tasks.decoding import beam_search


class Seq2SeqTask(Task):
    """`decode`: beam_size for the test set (1 = greedy), val_beam_size for validation, length_penalty,
    max_extra_len (outputs may be this many tokens longer than their source). Training minimises the
    label-smoothed cross-entropy (optim.label_smoothing); `val/loss` and `test/loss` are the plain one,
    comparable across smoothing settings."""

    def __init__(self, model: torch.nn.Module, optim: dict, decode: dict, datamodule,
                 checkpoint_meta: dict | None = None):
        super().__init__(model, optim, checkpoint_meta)
        self.decode_cfg = decode
        self.detokenize, self.references = datamodule.decode, datamodule.references
        self.eval_loss = MeanMetric()
        self.hypotheses: dict[int, str] = {}

    def batch_tokens(self, batch) -> int:
        src, tgt = batch[:2]
        return src.numel() + tgt.numel() - tgt.size(0)  # source, and the target minus its last token

    def forward(self, src, tgt_in):
        return self.model(src, tgt_in)

    def loss(self, src, tgt, smoothing: float) -> torch.Tensor:
        logits = self.model(src, tgt[:, :-1])  # teacher forcing: predict tgt[1:] from tgt[:-1]
        return F.cross_entropy(logits.flatten(0, 1), tgt[:, 1:].flatten(), ignore_index=PAD,
                               label_smoothing=smoothing)

    def training_step(self, batch, batch_idx):
        src, tgt = batch
        return self.guarded(self.loss(src, tgt, self.optim["label_smoothing"]))

    def translate(self, src: torch.Tensor, beam_size: int) -> list[list[int]]:
        d = self.decode_cfg
        return beam_search(self.model, src, beam_size, src.size(1) + d["max_extra_len"], BOS, EOS, d["length_penalty"])

    def _eval_step(self, batch):
        src, tgt, rows = batch
        n_targets = (tgt[:, 1:] != PAD).sum()
        self.eval_loss.update(self.loss(src, tgt, 0.0), weight=n_targets)
        if not self.trainer.sanity_checking:
            beam_size = self.decode_cfg["beam_size" if self.trainer.testing else "val_beam_size"]
            for row, ids in zip(rows.tolist(), self.translate(src, beam_size)):
                self.hypotheses[row] = self.detokenize(ids)

    def _eval_end(self, split: str):
        loss = self.eval_loss.compute()
        self.eval_loss.reset()
        self.log(f"{split}/loss", loss, prog_bar=True)
        self.log(f"{split}/ppl", loss.exp())
        if self.trainer.sanity_checking or not self.hypotheses:
            return
        rows = sorted(self.hypotheses)
        hypotheses = [self.hypotheses[r] for r in rows]
        references = [self.references(split)[r] for r in rows]
        self.hypotheses = {}
        self.log(f"{split}/bleu", sacrebleu.corpus_bleu(hypotheses, [references]).score, prog_bar=True)
        if split == "test":
            self.log("test/bleu_lowercase", sacrebleu.corpus_bleu(hypotheses, [references], lowercase=True).score)
        self._examples(split, [self.trainer.datamodule.pairs[split][r][0] for r in rows[:3]], hypotheses[:3],
                       references[:3])

    def _examples(self, split, sources, hypotheses, references):
        text = "\n".join(f"  src: {s}\n  out: {h}\n  ref: {r}" for s, h, r in zip(sources, hypotheses, references))
        rows = [[split, self.global_step, s, h, r] for s, h, r in zip(sources, hypotheses, references)]
        self.show_examples(f"{split} translations", text, "translations",
                           ["split", "step", "source", "output", "reference"], rows)

    def validation_step(self, batch, batch_idx):
        self._eval_step(batch)

    def on_validation_epoch_end(self):
        self._eval_end("val")

    def test_step(self, batch, batch_idx):
        self._eval_step(batch)

    def on_test_epoch_end(self):
        self._eval_end("test")
