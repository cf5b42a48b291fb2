"""What an evaluation shows beyond loss and perplexity, per kind of data a task reads: its YAML names the
components (`metrics: {text: [...], pairs: [...], equations: [...]}`), and the task builds those for the form
its batches read (batching/). A component is an nn.Module (its torchmetrics follow the task to its device)
that the task calls with itself:

- `step(task, batch, logits)` on each validation or test batch, after the task's loss;
- `train_step(task, batch, logits)` on each training batch;
- `end(task, split)` when the evaluation ends.

What each reads from the task is named in its docstring. A component that scores each example (`predicts`)
adds each one's record, {input, prediction, reference, exact}, to `task.predictions` where that is a list
(evaluate's predictions=FILE), in the split's order.

A multi-token answer is scored by exact match, per example, as `split/exact_match` (torchmetrics'
MulticlassExactMatch: the share of examples whose every token is right): an equation's answer of several
tokens (AnswerAccuracy), a translation's whole output (Bleu, beside BLEU).
"""

from __future__ import annotations

import json
import logging
import math

import sacrebleu
import torch
import torch.nn.functional as F
from torchmetrics import MeanMetric, SumMetric
from torchmetrics.classification import MulticlassExactMatch

from transformer_lab.errors import keyed

log = logging.getLogger(__name__)


class Metric(torch.nn.Module):
    predicts: bool = False  # whether it scores each example, and can give each one's record (task.predictions)

    def __init__(self, settings: dict, datamodule, model: torch.nn.Module):
        super().__init__()

    @classmethod
    def model_needs(cls, settings: dict, task_cls: type) -> dict[str, str | None]:
        """What this metric calls on the model beyond its forward pass, with these task settings: each method,
        and the option that does without it (None: none does). Checked before the run (config.classes.check_model)."""
        return {}

    def train_step(self, task, batch, logits) -> None:
        pass

    def step(self, task, batch, logits) -> None:
        pass

    def end(self, task, split: str) -> None:
        pass


class Metrics(Metric):
    """Several components as one, called in the order the YAML names them."""

    def __init__(self, components: list[Metric]):
        super().__init__({}, None, None)
        self.components = torch.nn.ModuleList(components)
        self.predicts = any(getattr(c, "predicts", False) for c in components)

    def train_step(self, task, batch, logits) -> None:
        for component in self.components:
            component.train_step(task, batch, logits)

    def step(self, task, batch, logits) -> None:
        for component in self.components:
            component.step(task, batch, logits)

    def end(self, task, split: str) -> None:
        for component in self.components:
            component.end(task, split)


class BitsPerByte(Metric):
    """`split/bpb`: the next-token loss in bits per UTF-8 byte of the predicted text (the data's
    `token_bytes()`), which compares models whose tokenizers differ (characters, bytes, BPE)."""

    def __init__(self, settings: dict, datamodule, model: torch.nn.Module):
        super().__init__(settings, datamodule, model)
        self.register_buffer("token_bytes", torch.tensor(datamodule.token_bytes()), persistent=False)
        self.nats, self.bytes = SumMetric(), SumMetric()

    def step(self, task, batch, logits) -> None:
        targets = batch[1].flatten()
        # each target's bytes: none where there is no target (-100) or a token of no text (end-of-text), as nanochat
        # (arithmetic: assigning through a boolean mask took a third of a validation step on 64 x 256 characters)
        nbytes = self.token_bytes[targets.clamp(min=0)] * (targets != -100)
        kept = nbytes > 0
        self.nats.update(F.cross_entropy(logits.flatten(0, 1)[kept].float(), targets[kept], reduction="sum"))
        self.bytes.update(nbytes.sum())

    def end(self, task, split: str) -> None:
        task.log(f"{split}/bpb", self.nats.compute() / math.log(2) / self.bytes.compute())
        self.nats.reset()
        self.bytes.reset()


class TextSamples(Metric):
    """A text sample at each validation (task.sample.*), from the data's prompt; `task.model.generate`."""

    def __init__(self, settings: dict, datamodule, model: torch.nn.Module):
        super().__init__(settings, datamodule, model)
        self.sample = dict(settings["sample"])
        with keyed("data.sample_prompt"):
            self.prompt_ids = datamodule.sample_prompt_ids() or [0]
        self.decode = datamodule.decode

    @classmethod
    def model_needs(cls, settings: dict, task_cls: type) -> dict[str, str | None]:
        return {"generate": "task.sample.enabled=false"} if settings["sample"]["enabled"] else {}

    def end(self, task, split: str) -> None:
        if not self.sample["enabled"] or task.trainer.sanity_checking:
            return
        prompt = torch.tensor([self.prompt_ids], device=task.device)
        generator = torch.Generator(device=task.device).manual_seed(self.sample["seed"])
        s = self.sample
        out = task.model.generate(prompt, s["max_new_tokens"], s["temperature"], s["top_k"], generator=generator)
        text = self.decode(out[0].tolist())
        task.show_examples("sample", text, "samples", ["step", "text"], [[task.global_step, text]])


def exact_match() -> MulticlassExactMatch:
    """torchmetrics' exact match over rows of ids (B, L) that `padded_rows` made alike in length; the ids are
    not checked against a vocabulary (validate_args=False): only their equality counts."""
    return MulticlassExactMatch(num_classes=2, validate_args=False)


def padded_rows(outputs: list[list[int]], references: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Outputs and references as two tensors of one shape, each row ended and padded with -1 (no id): two rows are
    equal exactly when the lists are (an output that is a reference's prefix, or goes on past it, is not)."""
    length = max(len(ids) for ids in [*outputs, *references]) + 1
    rows = [ids + [-1] * (length - len(ids)) for ids in [*outputs, *references]]
    table = torch.tensor(rows, dtype=torch.long)
    return table[: len(outputs)], table[len(outputs) :]


class AnswerAccuracy(Metric):
    """`split/acc` (and `train/acc`): the share of answers predicted right, from `task.answers(batch, logits)`
    = (questions, predicted, expected), one answer per row: a class or token (B,), or an answer's K tokens
    (B, K), whose acc is the share of its tokens right; a few examples at each validation. The batches'
    `answer_length` above 1 (equations of multi-token answers) adds `split/exact_match`: the share of answers
    whose every token is right."""

    predicts = True

    def __init__(self, settings: dict, datamodule, model: torch.nn.Module):
        super().__init__(settings, datamodule, model)
        self.acc = MeanMetric()
        self.exact = exact_match() if datamodule.answer_length > 1 else None
        self.decode, self.answer_text = datamodule.decode, datamodule.answer_text
        self.examples: list[str] = []

    def train_step(self, task, batch, logits) -> None:
        if task.logging_step():
            _, predicted, expected = task.answers(batch, logits)
            task.log("train/acc", (predicted == expected).float().mean())

    def step(self, task, batch, logits) -> None:
        questions, predicted, expected = task.answers(batch, logits)
        self.acc.update((predicted == expected).float())
        if self.exact is not None:
            self.exact.update(predicted, expected)
        rows = (predicted == expected) if predicted.dim() == 1 else (predicted == expected).all(1)
        keep = task.predictions is not None
        if keep and predicted.dim() == 2:  # (the records: the model's own answers, not teacher forcing's)
            # Teacher forcing's tokens after a wrong one follow the right prefix, not the model's own: where an answer
            # goes wrong before its last token, the model's answer is decoded (the task's greedy_answers).
            redo = ((predicted != expected)[:, :-1].any(1)).nonzero().flatten()
            if len(redo):
                predicted = predicted.clone()
                predicted[redo] = task.greedy_answers(questions[redo], predicted.size(1)).to(predicted)
        if keep or (not self.examples and not task.trainer.sanity_checking):
            shown = len(questions) if keep else min(4, len(questions))
            for row in range(shown):
                question = self.decode(questions[row].tolist())
                guess, answer = predicted[row].tolist(), expected[row].tolist()
                guess_text, answer_text = self.answer_text(guess), self.answer_text(answer)
                if keep:
                    task.predictions.append(
                        {
                            "input": question,
                            "prediction": guess_text,
                            "reference": answer_text,
                            "exact": bool(rows[row]),
                        }
                    )
                if row < 4 and not task.trainer.sanity_checking and len(self.examples) < 4:
                    mark = "ok" if rows[row] else f"expected {answer_text}"
                    self.examples.append(f"{question} {guess_text}   ({mark})")

    def end(self, task, split: str) -> None:
        task.log(f"{split}/acc", self.acc.compute(), prog_bar=True)
        self.acc.reset()
        if self.exact is not None:
            task.log(f"{split}/exact_match", self.exact.compute())
            self.exact.reset()
        if self.examples:
            text = "\n".join(self.examples)
            task.show_examples("examples", text, "examples", ["step", "text"], [[task.global_step, text]])
        self.examples = []


class Bleu(Metric):
    """sacreBLEU of decoded outputs against the split's references (detokenized, cased; the test split also
    lowercased), the number of outputs the model's length cut short (`split/truncated`), and a few examples.
    Outputs come from `task.continuations(batch, beam_size)` (a `tasks.decoding.Decoded`), the rows from the
    batch's third tensor; task.decode.* sets the beams. Beside BLEU, `split/exact_match`: the share of outputs
    whose tokens are exactly their reference's (`task.reference_ids(batch)`: the target as the model trained on
    it, cut to the data's max_tokens). In a run (task.translations_dir set), every output and its reference also
    go to `translations/SPLIT-stepNNNNNN.jsonl`."""

    predicts = True

    def __init__(self, settings: dict, datamodule, model: torch.nn.Module):
        super().__init__(settings, datamodule, model)
        self.beams = {"val": settings["decode"]["val_beam_size"], "test": settings["decode"]["beam_size"]}
        self.datamodule = datamodule
        self.hypotheses: dict[int, str] = {}  # row of the evaluation split -> decoded output
        self.exact_rows: dict[int, bool] = {}  # row -> whether its output is its reference, token for token
        self.exact = exact_match()
        self.truncated = 0  # of this evaluation's outputs, those stopped at the model's length limit

    @classmethod
    def model_needs(cls, settings: dict, task_cls: type) -> dict[str, str | None]:
        return task_cls.decoding_needs(settings)  # what the task's continuations() call

    def step(self, task, batch, logits) -> None:
        if task.trainer.sanity_checking:
            return
        decoded = task.continuations(batch, self.beams["test" if task.trainer.testing else "val"])
        self.truncated += decoded.truncated
        outputs, references = padded_rows(decoded.outputs, task.reference_ids(batch))
        self.exact.update(outputs.to(self.exact.device), references.to(self.exact.device))
        for row, ids, same in zip(batch[2].tolist(), decoded.outputs, (outputs == references).all(1).tolist()):
            self.hypotheses[row] = self.datamodule.decode(ids)
            self.exact_rows[row] = same

    def end(self, task, split: str) -> None:
        truncated, self.truncated = self.truncated, 0
        if task.trainer.sanity_checking or not self.hypotheses:
            self.hypotheses, self.exact_rows = {}, {}
            self.exact.reset()
            return
        task.log(f"{split}/exact_match", self.exact.compute())
        self.exact.reset()
        task.log(f"{split}/truncated", float(truncated))
        if truncated and task.trainer.is_global_zero:
            log.warning(
                "%s: %d of %d outputs reached the model's length limit (%d positions) before their end; "
                "they are cut there",
                split,
                truncated,
                len(self.hypotheses),
                task.model.config.block_size,
            )
        rows = sorted(self.hypotheses)
        hypotheses = [self.hypotheses[r] for r in rows]
        references = [self.datamodule.data.references(split)[r] for r in rows]
        exact = [self.exact_rows[r] for r in rows]
        self.hypotheses, self.exact_rows = {}, {}
        task.log(f"{split}/bleu", sacrebleu.corpus_bleu(hypotheses, [references]).score, prog_bar=True)
        if split == "test":
            task.log("test/bleu_lowercase", sacrebleu.corpus_bleu(hypotheses, [references], lowercase=True).score)
        sources = [self.datamodule.data.sources(split)[r] for r in rows]
        if task.predictions is not None:
            for record in zip(sources, hypotheses, references, exact):
                task.predictions.append(dict(zip(("input", "prediction", "reference", "exact"), record)))
        if task.translations_dir is not None and task.trainer.is_global_zero:
            from transformer_lab.store.atomic import atomic_write

            with atomic_write(task.translations_dir / f"{split}-step{task.global_step:06d}.jsonl", "w") as f:
                for record in zip(rows, sources, hypotheses, references):
                    f.write(json.dumps(dict(zip(("row", "source", "output", "reference"), record))) + "\n")
        examples = list(zip(sources, hypotheses, references))[:3]
        text = "\n".join(f"  src: {s}\n  out: {h}\n  ref: {r}" for s, h, r in examples)
        table = [[split, task.global_step, s, h, r] for s, h, r in examples]
        task.show_examples(
            f"{split} translations", text, "translations", ["split", "step", "source", "output", "reference"], table
        )
