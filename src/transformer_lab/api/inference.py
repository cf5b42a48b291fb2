"""What a trained model does with text, one function a verb: continue a prompt (generate), translate, fill the gaps
of a text (T5's span corruption), classify. Each takes the model, the data module that turns text into its ids and
back (built from the checkpoint alone), its options (checked: api/options.py) and the input lines, and gives one
output a line, batch by batch; a line the model cannot take gets its (empty) output and a warning that says why.
`Run`'s verbs (api/run.py) and the commands (commands/sample.py, translate.py, fill.py, classify.py) both call these.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

import torch

from transformer_lab.api.options import CLASSIFY, FILL, GENERATE, TRANSLATE
from transformer_lab.batching.base import encoder
from transformer_lab.batching.span_corruption import fill_spans
from transformer_lab.errors import ConfigError, UserError, keyed
from transformer_lab.tasks.decoding import Decoded, continue_prompts, decode, fill_spans_greedy

Warn = Callable[[str], None]


def device_of(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


def batched(lines: Iterable[str], size: int) -> Iterator[list[tuple[int, str]]]:
    """(line number, line) in batches of `size`; a line that is not text (a list's None or number, from Python) is
    refused naming it."""
    batch = []
    for number, line in enumerate(lines, start=1):
        if not isinstance(line, str):
            raise UserError(f"texts: each one a text, got {line!r} (line {number})")
        batch.append((number, line))
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def generate(model, datamodule, options: dict) -> list[str]:
    """`num_samples` continuations of the prompt, each the prompt and `max_new_tokens` more."""
    options = GENERATE.checked(options)
    if not callable(getattr(model, "generate", None)):
        raise UserError(f"{type(model).__qualname__} has no generate(): `sample` continues a prompt with it")
    prompt_ids = datamodule.sample_prompt_ids() if options["prompt"] is None else None
    with keyed("prompt"):  # (a dataset without a sample prompt of its own: a new line)
        prompt_ids = prompt_ids or encoder(datamodule)(str(options["prompt"] or "\n"))
    device = device_of(model)
    idx = torch.tensor([prompt_ids] * options["num_samples"], device=device)
    generator = torch.Generator(device=device).manual_seed(options["seed"])
    with torch.no_grad():
        out = model.generate(
            idx, options["max_new_tokens"], options["temperature"], options["top_k"], generator=generator
        )
    return [datamodule.decode(row.tolist()) for row in out]


def encoder_decoder_outputs(model, inputs: list[list[int]], options: dict, specials) -> Decoded:
    """Sources `ids <eos>`, padded into one batch."""
    src = torch.nn.utils.rnn.pad_sequence([torch.tensor(ids) for ids in inputs], batch_first=True)
    return decode(
        model,
        src.to(device_of(model)),
        options["beam_size"],
        src.size(1) + options["max_extra_len"],
        specials.bos,
        specials.eos,
        options["length_penalty"],
    )


def prefix_lm_outputs(model, inputs: list[list[int]], options: dict, specials) -> Decoded:
    """Prompts `<bos> ids <sep>`, continued in batches of one prompt length (no padding inside a prompt)."""
    outputs: list[list[int]] = [[] for _ in inputs]
    truncated = 0
    for length in sorted({len(ids) for ids in inputs}):
        rows = [i for i, ids in enumerate(inputs) if len(ids) == length]
        prompts = torch.tensor([inputs[i] for i in rows], device=device_of(model))
        decoded = continue_prompts(
            model,
            prompts,
            length + options["max_extra_len"],
            specials.eos,
            options["beam_size"],
            options["length_penalty"],
        )
        truncated += decoded.truncated
        for i, ids in zip(rows, decoded.outputs):
            outputs[i] = ids
    return Decoded(outputs, truncated)


OUTPUTS = {"encoder-decoder": encoder_decoder_outputs, "decoder": prefix_lm_outputs}  # by the model's architecture


def check_decoding(model, beam_size: int) -> None:
    """The model has what decoding calls (tasks' decoding_needs): greedy continuations of a decoder call
    generate(), beam search the key/value cache; an encoder-decoder's decoding both halves and the cache."""
    if type(model).architecture == "encoder-decoder":
        needs = ["encode", "decode", "new_cache"]
    else:
        needs = ["generate"] if beam_size == 1 else ["new_cache"]
    missing = [m for m in needs if not callable(getattr(model, m, None))]
    if missing:
        hint = (
            "; beam_size=1 decodes greedily with generate()"
            if missing == ["new_cache"] and hasattr(model, "generate")
            else ""
        )
        raise ConfigError(
            "beam_size" if hint else "ckpt",
            f"{type(model).__name__} has no {'(), '.join(missing)}() to translate with{hint}",
        )


def translate(model, datamodule, options: dict, lines: Iterable[str], warn: Warn) -> Iterator[str]:
    """One translation per line of `lines`, in order, batch by batch."""
    options = TRANSLATE.checked(options)
    outputs_of = OUTPUTS[type(model).architecture]
    check_decoding(model, options["beam_size"])
    encode = encoder(datamodule.data)  # the dataset's own: a source sentence's ids
    limit = datamodule.data.max_tokens  # source tokens the model read in training
    cut: list[tuple[int, int]] = []  # (line number, tokens) of the lines cut to the limit
    truncated = 0
    for chunk in batched(lines, options["batch_size"]):
        outputs = [""] * len(chunk)
        todo: dict[int, list[int]] = {}  # position in the chunk -> the model's input
        for i, (number, line) in enumerate(chunk):
            if not line.strip():
                warn(f"line {number} is empty; its output line is empty")
                continue
            try:
                ids = encode(line)
            except ValueError as e:  # (what the dataset cannot encode, in its words)
                warn(f"line {number} {e}; its output line is empty")
                continue
            if limit is not None and len(ids) > limit:
                cut.append((number, len(ids)))
            todo[i] = datamodule.source_input(ids)
        # A batch that fails is tried line by line, so one bad line costs only its own output.
        groups = [list(todo)] if todo else []
        while groups:
            group = groups.pop(0)
            try:
                decoded = outputs_of(model, [todo[i] for i in group], options, datamodule.data.specials)
            except Exception as e:  # noqa: BLE001  (whatever it was, the other lines are still translated)
                if len(group) > 1:
                    groups = [[i] for i in group] + groups
                else:
                    warn(
                        f"line {chunk[group[0]][0]} could not be translated ({type(e).__name__}: {e}); "
                        "its output line is empty"
                    )
                continue
            truncated += decoded.truncated
            for i, ids in zip(group, decoded.outputs):
                outputs[i] = datamodule.decode(ids)
        yield from outputs
    if cut:
        numbers = ", ".join(str(n) for n, _ in cut[:10]) + (", ..." if len(cut) > 10 else "")
        warn(
            f"{len(cut)} line(s) longer than the model's {limit} source tokens were cut to them (the longest: "
            f"{max(n for _, n in cut)} tokens; line {numbers})"
        )
    if truncated:
        warn(f"{truncated} output(s) reached the model's length ({model.config.block_size} tokens) and stop there")


def fill(model, datamodule, options: dict, lines: Iterable[str], warn: Warn) -> Iterator[str]:
    """One filled text per line of `lines`, in order."""
    options = FILL.checked(options)
    encode, first_sentinel = encoder(datamodule), datamodule.first_sentinel
    for chunk in batched(lines, options["batch_size"]):
        outputs = [""] * len(chunk)
        todo: dict[int, list[int]] = {}
        for i, (number, line) in enumerate(chunk):
            try:
                todo[i] = encode(line)
            except ValueError as e:
                warn(f"line {number}: {e}; its output line is empty")
                continue
            if not any(t >= first_sentinel for t in todo[i]):
                warn(f"line {number} has no gap (<X0>, <X1>, ...) to fill")
        if todo:
            inputs = torch.nn.utils.rnn.pad_sequence(
                [torch.tensor(ids) for ids in todo.values()], batch_first=True, padding_value=datamodule.pad_id
            ).to(device_of(model))
            filled = fill_spans_greedy(model, inputs, options["max_len"], datamodule.pad_id, datamodule.eos_id)
            for i, spans in zip(todo, filled):
                spans = spans[: spans.index(datamodule.eos_id) + 1] if datamodule.eos_id in spans else spans
                ids = spans if options["spans"] else fill_spans(todo[i], spans, first_sentinel, datamodule.eos_id)
                outputs[i] = datamodule.decode(ids)
        yield from outputs


def classify(
    model, datamodule, options: dict, lines: Iterable[str], warn: Warn, names: bool = False
) -> Iterator[tuple[str, list]]:
    """(line, [(class, probability), ...] best first) per line of `lines`, in order; a class is its index,
    or with `names` its text (an equation's answer, a label)."""
    options = CLASSIFY.checked(options)
    encode, top = encoder(datamodule), min(options["top"], model.config.n_classes)
    longest = datamodule.sequence_length if datamodule.form == "labelled" else None  # (texts are cut to it)
    for chunk in batched(lines, options["batch_size"]):
        texts = [line.split("\t", 1)[0] for _, line in chunk]  # (a labelled file's label is not the model's input)
        outputs: list[tuple[str, list]] = [(text, []) for text in texts]
        todo: dict[int, list[int]] = {}
        for i, ((number, line), text) in enumerate(zip(chunk, texts)):
            if not text.strip():
                warn(f"line {number} is empty; its output line holds no class")
                continue
            if line.count("\t") > 1:
                warn(f"line {number} has {line.count(chr(9)) + 1} tab-separated fields: its first is classified")
            try:
                todo[i] = encode(text)
            except ValueError as e:
                warn(f"line {number}: {e}")
                continue
            if longest is not None and len(todo[i]) >= longest:
                warn(f"line {number} reaches the model's length ({longest} tokens): what lies beyond was cut")
        if todo:
            inputs = torch.nn.utils.rnn.pad_sequence(
                [torch.tensor(ids) for ids in todo.values()], batch_first=True, padding_value=model.config.pad_id
            ).to(device_of(model))
            with torch.no_grad():
                probabilities, classes = model(inputs).float().softmax(-1).topk(top, dim=-1)
            for i, p, c in zip(todo, probabilities.tolist(), classes.tolist()):
                outputs[i] = (outputs[i][0], list(zip(map(datamodule.answer_text, c) if names else c, p)))
        yield from outputs


def ranked_classes(model, datamodule, options: dict, lines: Iterable[str], warn: Warn) -> Iterator[list]:
    """Each line's [(class name, probability), ...], best first (Run.classify's)."""
    return (ranked for _, ranked in classify(model, datamodule, options, lines, warn, names=True))
