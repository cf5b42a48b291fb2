"""A trained run in Python: `run = transformer_lab.load("outputs/DATE/TIME")`.

    run.model                      the model, in eval mode, on the device asked for (default cpu)
    run.encode(text), run.decode(ids)      the run's own vocabulary
    run.config                     the resolved config the run trained with (an OmegaConf DictConfig)
    run.metrics, run.summary       metrics.jsonl as a pandas DataFrame (a row a logged step), summary.json
    run.generate / translate / fill / classify / answer     what its task does (the commands' verbs)
    run.attention(text)            every layer's attention weights for one text
    run.to_transformer_lens(), run.activations(text)       the model opened for interpretability

A verb takes one text (and gives one output) or a list of texts (and gives a list); any other iterable of lines
is read lazily, a batch at a time, and gives an iterator (what the commands do with standard input). Options are
the commands' own (`python -m transformer_lab translate --help`), checked the same way, each mistake one line;
a line the model cannot take gives an empty output and a warning (warnings.warn, or the `warn=` given).
"""

from __future__ import annotations

import shlex
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

from transformer_lab.api.options import check_device
from transformer_lab.errors import UserError


def load(target: str | Path, device: str = "cpu", command: str | None = None) -> Run:
    """The run of a run directory (its checkpoints/best.ckpt, else last.ckpt) or a checkpoint file, its model
    in eval mode on `device`. With `command` (a command's name), refused in one line unless the run is one that
    command serves (its data's batches decide: batching/base.py `command`)."""
    from transformer_lab.run.build import datamodule_from_checkpoint, load_model
    from transformer_lab.store.checkpoint import checkpoint_of

    if not target:
        raise UserError(
            f"which model? python -m transformer_lab {command} RUN_DIR_OR_CKPT [key=value ...] (--help)"
            if command
            else f"load: which run? give a run directory or a checkpoint file, got {target!r}"
        )
    if not isinstance(target, (str, Path)):
        raise UserError(f"load: a run directory or a checkpoint file (a str or a Path), got {type(target).__name__}")
    check_device(device)
    path = checkpoint_of(target)
    model, meta = load_model(path, map_location=device)
    run = Run(path, model.to(device).eval(), datamodule_from_checkpoint(meta), meta)
    if command is not None:
        run.serves(command)
    return run


def _warn(message: str) -> None:
    warnings.warn(message, stacklevel=5)  # (the caller of the verb, for a list)


@dataclass(eq=False)
class Run:
    checkpoint: Path
    model: torch.nn.Module
    datamodule: Any  # batching/base.py Batching: the data's vocabulary, the batches' form
    meta: dict  # the checkpoint's transformer_lab record: config, model_args, vocab or tokenizer

    @property
    def path(self) -> Path:
        """The run directory (what holds checkpoints/), or the checkpoint's folder for a loose file."""
        folder = self.checkpoint.parent
        return folder.parent if folder.name == "checkpoints" else folder

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @cached_property
    def config(self):
        from omegaconf import OmegaConf

        return OmegaConf.create(self.meta["config"])

    def encode(self, text: str) -> list[int]:
        return self.datamodule.encode(text)

    def decode(self, ids: Iterable[int]) -> str:
        return self.datamodule.decode(list(ids))

    @property
    def summary(self) -> dict:
        """summary.json: the run's last and best metrics, its status (empty where the folder has none)."""
        from transformer_lab.store.files import read_json

        file = self.path / "summary.json"
        return read_json(file) if file.exists() else {}

    @property
    def metrics(self):
        """metrics.jsonl as a DataFrame: a row a logged record (`step`, and the metrics logged then; no rows where
        the run logged none). Read again only once the file has changed (a run still training)."""
        import pandas as pd

        from transformer_lab.store.files import read_jsonl

        file = self.path / "metrics.jsonl"
        stamp = (file.stat().st_mtime_ns, file.stat().st_size) if file.exists() else None
        if stamp is None or getattr(self, "_metrics", (None, None))[0] != stamp:
            records = read_jsonl(file) if stamp else []
            self._metrics = (stamp, pd.DataFrame(records, columns=None if records else ["step"]))
        return self._metrics[1].copy()

    def serves(self, command: str) -> None:
        """Nothing where `command` is what this run's task does; else one line naming what it does."""
        does = self.datamodule.command  # the batches it was trained on decide (batching/base.py)
        if does != command:
            config = self.meta["config"]
            where = shlex.quote(str(self.checkpoint))  # (a command to paste: a path with a space, quoted)
            hint = (
                f"python -m transformer_lab {does} {where}"
                if does
                else f"it has no inference command; python -m transformer_lab evaluate {where} gives its metrics"
            )
            raise UserError(
                f"{self.checkpoint} holds a model={config['model']['name']} data={config['data']['name']} checkpoint, "
                f"which `{command}` cannot use: {hint}"
            )

    def _lines(self, command: str, verb: Callable, texts, options: dict, warn) -> Any:
        """`verb` (model, datamodule, options, lines, warn) over one text (-> one output), a list (-> a list) or
        another iterable (-> an iterator), once the run is one `command` serves."""
        self.serves(command)
        if warn is not None and not callable(warn):
            raise UserError(f"warn: a function taking the warning's text, got {warn!r}")
        warn = warn or _warn
        if isinstance(texts, bytes) or not isinstance(texts, (str, Iterable)):
            raise UserError(f"{command}: a text, a list of texts or an iterable of lines, got {type(texts).__name__}")
        if isinstance(texts, str):
            return next(iter(verb(self.model, self.datamodule, options, [texts], warn)))
        outputs = verb(self.model, self.datamodule, options, texts, warn)
        return list(outputs) if isinstance(texts, (list, tuple)) else outputs

    def generate(self, prompt=None, **options) -> list:
        """`num_samples` continuations of `prompt` (None: the run's data.sample_prompt; options: max_new_tokens,
        num_samples, temperature, top_k, seed)."""
        from transformer_lab.api.inference import generate

        self.serves("sample")
        if isinstance(prompt, (list, tuple)):  # (a list of prompts, each a text: a list of their continuations)
            if bad := [p for p in prompt if not isinstance(p, str)]:
                raise UserError(f"prompt: each one a text, got {bad[0]!r}")
            return [generate(self.model, self.datamodule, {"prompt": p, **options}) for p in prompt]
        return generate(self.model, self.datamodule, {"prompt": prompt, **options})

    def translate(self, texts, warn: Callable[[str], None] | None = None, **options):
        """Translations (options: beam_size, length_penalty, max_extra_len, batch_size)."""
        from transformer_lab.api.inference import translate

        return self._lines("translate", translate, texts, options, warn)

    def fill(self, texts, warn: Callable[[str], None] | None = None, **options):
        """Each text with its gaps (<X0>, <X1>, ...) filled (options: max_len, spans, batch_size)."""
        from transformer_lab.api.inference import fill

        return self._lines("fill", fill, texts, options, warn)

    def classify(self, texts, warn: Callable[[str], None] | None = None, **options):
        """Each text's `top` classes as [(name, probability), ...], best first (options: top, batch_size)."""
        from transformer_lab.api.inference import ranked_classes

        return self._lines("classify", ranked_classes, texts, options, warn)

    def answer(self, texts, warn: Callable[[str], None] | None = None, **options):
        """Each equation's answer as text, greedy (`"12 + 34 ="` -> `"46"`; options: max_len, batch_size): a gpt
        trained on equations continues it, an encdec or t5 decodes it (the `answer` command)."""
        from transformer_lab.api.answer import answers, checked

        checked(options)  # (an unknown or wrong option: the command's one line, before any text is read)

        def verb(model, datamodule, options, lines, warn):
            return answers(model, datamodule, lines, warn=warn, **options)

        return self._lines("answer", verb, texts, options, warn)

    def attention(self, text: str, target: str | None = None, max_extra_len: int = 50):
        """({layer: its weights (heads, queries, keys)}, {side: its tokens}) for one text, as the `attention`
        command captures them (an encoder-decoder's target: `target`, else its greedy output); nothing written."""
        from transformer_lab.analysis.attention import attention_of

        return attention_of(self.model, self.datamodule, text, target, max_extra_len)

    def to_transformer_lens(self):
        """A TransformerLens 4 TransformerBridge of the run: its Transformers twin built in memory (export's
        tables), the same weights; refused in one line where no Transformers family expresses the model."""
        from transformer_lab.api.lens import to_transformer_lens

        return to_transformer_lens(self.model, self.meta, bos=self.datamodule.data.specials.bos)

    def activations(self, *inputs, modules: list[str] | None = None) -> dict[str, torch.Tensor]:
        """Every named module's output (or those of `modules`) for one forward pass: a text (encoded as the run
        reads it) or the model's own input tensors. Any model, a user's own included (forward hooks)."""
        import torch

        from transformer_lab.api.lens import activations

        text = len(inputs) == 1 and isinstance(inputs[0], str)
        if not text and not (inputs and all(isinstance(x, torch.Tensor) for x in inputs)):
            raise UserError(f"activations: a text or the model's input tensors, got {inputs!r:.60}")
        if text:  # (an encoder-decoder's target: its greedy output)
            from transformer_lab.analysis.attention import inputs as forward_inputs

            options = {"text": inputs[0], "target": None, "max_extra_len": 50, "device": str(self.device)}
            inputs, _ = forward_inputs(self.model, self.datamodule, options)
        return activations(self.model, *inputs, modules=[modules] if isinstance(modules, str) else modules)
