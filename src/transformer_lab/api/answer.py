"""A model trained on equations asked for its answers: `answers(model, datamodule, lines)` gives, for each line
(`12 + 34 =`, as the run's data writes an equation; the "=" may be left out), the model's answer as text, greedy:
a decoder-only model continues the equation (batching/equations.py AnswerToken), an encoder-decoder decodes from
it up to <eos> (AnswerSequence). An answer has as many tokens as the run's answers had (the data's
`answer_length`), or `max_len`. A line the model cannot take (empty, not an equation of the run's vocabulary,
longer than the model reads) gets an empty answer and a warning that says why. The answer command
(commands/answer.py) and the Python API's verb both call it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

import torch

from transformer_lab.api.inference import batched, device_of
from transformer_lab.api.options import ANSWER as OPTIONS
from transformer_lab.api.options import check_option, unknown_options
from transformer_lab.batching.base import encoder
from transformer_lab.data.tokens import BOS, EOS
from transformer_lab.errors import ConfigError, UserError
from transformer_lab.tasks.decoding import decode


def checked(options: dict) -> dict:
    """The options with their defaults, each checked: max_len an integer >= 1 or null (the run's answer length),
    batch_size an integer >= 1."""
    unknown_options(options, OPTIONS)
    options = {**OPTIONS, **options}
    check_option("max_len", options["max_len"], 1, 1, nullable=True)
    check_option("batch_size", options["batch_size"], OPTIONS["batch_size"], 1)
    return options


def _print_warning(message: str) -> None:
    import warnings

    warnings.warn(message, stacklevel=3)


def decoder_answers(model, inputs: list[list[int]], max_len: int) -> list[list[int]]:
    """The next `max_len` tokens after each equation, greedy, in batches of one length (no padding)."""
    outputs: list[list[int]] = [[] for _ in inputs]
    for length in sorted({len(ids) for ids in inputs}):
        rows = [i for i, ids in enumerate(inputs) if len(ids) == length]
        prompts = torch.tensor([inputs[i] for i in rows], device=device_of(model))
        with torch.no_grad():
            out = model.generate(prompts, max_len, temperature=0)[:, length:].tolist()
        for i, ids in zip(rows, out):
            outputs[i] = ids
    return outputs


def encoder_decoder_answers(model, inputs: list[list[int]], max_len: int) -> list[list[int]]:
    """Greedy outputs from each equation (padded into one batch), up to <eos> or `max_len` tokens."""
    src = torch.nn.utils.rnn.pad_sequence(
        [torch.tensor(ids) for ids in inputs], batch_first=True, padding_value=model.config.pad_id
    )
    return decode(model, src.to(device_of(model)), 1, max_len, BOS, EOS).outputs


# What answers with each architecture (a model class's `architecture`), and the methods it calls on the model.
ANSWERERS = {
    "decoder": (decoder_answers, ("generate",)),
    "encoder-decoder": (encoder_decoder_answers, ("encode", "decode", "new_cache")),
}


def room(model, datamodule) -> int | None:
    """The most answer tokens the model has positions for after an equation of the run's data, or None for no
    limit: a decoder-only model reads the equation and all but the last answer token."""
    block_size = getattr(model.config, "block_size", None)
    length = datamodule.data.sequence_length
    if block_size is None or length is None:
        return None
    return block_size - length + 1 if type(model).architecture == "decoder" else block_size


def answers(
    model,
    datamodule,
    lines: Iterable[str],
    max_len: int | None = None,
    warn: Callable[[str], None] | None = None,
    batch_size: int = 256,
) -> Iterator[str]:
    """One answer a line of `lines`, in order, batch by batch (see the module's docstring). `max_len`: the tokens
    of an answer (None: as many as the run's answers have); `warn`: what a line's warning goes to (default
    warnings.warn)."""
    options = checked({"max_len": max_len, "batch_size": batch_size})
    warn = warn or _print_warning
    if getattr(datamodule, "form", None) != "equations" or getattr(datamodule, "command", None) != "answer":
        raise UserError(
            f"{type(datamodule).__name__}: answers come from a model trained on equations (task=lm or seq2seq)"
        )
    architecture = getattr(type(model), "architecture", None)
    if architecture not in ANSWERERS:
        raise UserError(f"{type(model).__name__} ({architecture}): answers come from a decoder or an encoder-decoder")
    answer_of, needs = ANSWERERS[architecture]
    missing = [name for name in needs if not callable(getattr(model, name, None))]
    if missing:
        raise UserError(f"{type(model).__name__} has no {'(), '.join(missing)}() to answer with")
    max_len = options["max_len"] or datamodule.answer_length
    limit = room(model, datamodule)
    if limit is not None and max_len > limit:
        raise ConfigError(
            "max_len",
            f"{max_len} answer tokens do not fit the model's {model.config.block_size} positions after an equation "
            f"of {datamodule.data.sequence_length} tokens: at most {limit}",
        )
    encode = encoder(datamodule)
    block_size = getattr(model.config, "block_size", None)
    for chunk in batched(lines, options["batch_size"]):
        outputs = [""] * len(chunk)
        todo: dict[int, list[int]] = {}  # position in the chunk -> the model's input
        for i, (number, line) in enumerate(chunk):
            if not line.strip():
                warn(f"line {number} is empty; its answer is empty")
                continue
            try:
                ids = encode(line)
            except ValueError as e:  # (what the dataset cannot encode, in its words)
                warn(f"line {number}: {e}; its answer is empty")
                continue
            needed = len(ids) + (max_len - 1 if architecture == "decoder" else 0)
            if block_size is not None and needed > block_size:
                warn(
                    f"line {number} has {len(ids)} tokens, more than the model reads ({block_size}); its answer is empty"
                )
                continue
            todo[i] = ids
        if todo:
            for i, ids in zip(todo, answer_of(model, list(todo.values()), max_len)):
                outputs[i] = datamodule.answer_text(ids)
        yield from outputs
