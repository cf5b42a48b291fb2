"""What the inference commands (sample, translate, fill, classify) share: the command line (a run directory
or checkpoint, then key=value options), and loading a checkpoint of the kind the command serves, with the
data module that turns its text into ids and back (built from the checkpoint alone, no file read)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Iterator

import yaml

from transformer_lab.errors import UserError, exit_on_user_error

# The command that serves a checkpoint: by the model's layout, else by what its data is (the data module's kind).
BY_LAYOUT = {"spans": "fill", "classify": "classify"}
BY_KIND = {"text": "sample", "bleu": "translate"}


def command_for(layout: str, kind: str) -> str | None:
    return BY_LAYOUT.get(layout) or BY_KIND.get(kind)


def load(target: str | None, command: str, device: str = "cpu"):
    """(model in eval mode, data module with the checkpoint's vocabulary) of a run directory or checkpoint
    file, refused in one message unless `command` is the one for it."""
    from transformer_lab.checkpoint import checkpoint_of, load_model
    from transformer_lab.factory import datamodule_from_checkpoint

    if not target:
        raise UserError(f"which model? python -m transformer_lab.{command} RUN_DIR_OR_CKPT [key=value ...] (--help)")
    path = checkpoint_of(target)
    model, meta = load_model(path, map_location=device)
    datamodule = datamodule_from_checkpoint(meta)
    serves = command_for(datamodule.layout, datamodule.kind)  # the layout the model was trained on
    if serves != command:
        config = meta["config"]
        hint = (
            f"python -m transformer_lab.{serves} {target}"
            if serves
            else f"it has no inference command; python -m transformer_lab.evaluate {target} gives its metrics"
        )
        raise UserError(
            f"{path} holds a model={config['model']['name']} data={config['data']['name']} checkpoint, "
            f"which `{command}` cannot use: {hint}"
        )
    return model, datamodule


def encoder(datamodule) -> Callable[[str], list[int]]:
    """The data module's encode(), or a clear error where a user's data module has none."""

    def encode(text: str) -> list[int]:
        try:
            return datamodule.encode(text)
        except NotImplementedError:
            raise UserError(
                f"{type(datamodule).__qualname__} has no encode(): text cannot be turned into this "
                "model's input (data/base.py)"
            ) from None

    return encode


def run_command(
    argv: list[str] | None,
    doc: str,
    defaults: dict,
    outputs: Callable[[dict], Iterable[str]],
    text_keys: tuple[str, ...] = ("ckpt", "text", "device"),
) -> None:
    """A command's main: --help, or its options parsed and each line of `outputs(options)` printed as soon
    as it comes; a user's mistake is one `error:` line and exit code 2."""
    argv = argv if argv is not None else sys.argv[1:]
    if {"-h", "--help"} & set(argv):
        return print_help(doc, defaults)
    with exit_on_user_error():
        for line in outputs(parse_args(argv, defaults, text_keys)):
            print(line, flush=True)


def print_help(doc: str, defaults: dict) -> None:
    print(doc.strip())
    print("\noptions (key=value) and their defaults:")
    for key, value in defaults.items():
        print(f"  {key}=" + ("RUN_DIR_OR_CKPT (or the first argument)" if key == "ckpt" else repr(value)))


def parse_args(argv: list[str], defaults: dict, text_keys: tuple[str, ...]) -> dict:
    """The first argument may be the run directory or checkpoint (else `ckpt=`); then key=value pairs,
    whose values are YAML scalars except those of text_keys, which stay text. Unknown keys are refused."""
    args = {}
    for i, item in enumerate(argv):
        key, sep, value = item.partition("=")
        if not sep:
            if i == 0:
                args["ckpt"] = item
                continue
            raise UserError(f"expected key=value, got {item!r} (--help lists the options)")
        args[key] = value if key in text_keys else yaml.safe_load(value)
    return with_defaults(args, defaults)


def with_defaults(args: dict, defaults: dict) -> dict:
    unknown = sorted(set(args) - set(defaults))
    if unknown:
        raise UserError(f"unknown option(s) {unknown}; options: {', '.join(defaults)}")
    return {**defaults, **args}


def input_lines(text: str | None) -> Iterable[str]:
    """`text=...` as the one input line, else standard input's lines."""
    return [text] if text is not None else (line.rstrip("\r\n") for line in sys.stdin)


def batched(lines: Iterable[str], size: int) -> Iterator[list[tuple[int, str]]]:
    """(line number, line) in batches of `size`."""
    batch = []
    for number, line in enumerate(lines, start=1):
        batch.append((number, line))
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr, flush=True)
