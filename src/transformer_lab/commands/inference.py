"""What the inference commands (sample, translate, fill, classify) share: their options' checks, and loading a
checkpoint of the kind the command serves, with the data module that turns its text into ids and back (built
from the checkpoint alone, no file read). Their command line is commands/cli.py's."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator

from transformer_lab.errors import ConfigError, UserError, require


def load(target: str | None, command: str | None, device: str = "cpu"):
    """(model in eval mode, data module with the checkpoint's vocabulary) of a run directory or checkpoint
    file, refused in one message unless `command` is the one for it (None: any model, `attention`'s)."""
    from transformer_lab.run.build import datamodule_from_checkpoint, load_model
    from transformer_lab.store.checkpoint import checkpoint_of

    if not target:
        raise UserError(
            f"which model? python -m transformer_lab {command or 'attention'} RUN_DIR_OR_CKPT [key=value ...] (--help)"
        )
    path = checkpoint_of(target)
    model, meta = load_model(path, map_location=device)
    datamodule = datamodule_from_checkpoint(meta)
    serves = datamodule.command  # the batches it was trained on decide (batching/base.py)
    if command is not None and serves != command:
        config = meta["config"]
        hint = (
            f"python -m transformer_lab {serves} {target}"
            if serves
            else f"it has no inference command; python -m transformer_lab evaluate {target} gives its metrics"
        )
        raise UserError(
            f"{path} holds a model={config['model']['name']} data={config['data']['name']} checkpoint, "
            f"which `{command}` cannot use: {hint}"
        )
    return model, datamodule


def unknown_options(args: dict, defaults: dict) -> None:
    unknown = sorted(set(args) - set(defaults))
    if unknown:
        raise UserError(f"unknown option(s) {unknown}; options: {', '.join(defaults)}")


def with_defaults(args: dict, defaults: dict, minimums: dict | None = None, nullable: tuple[str, ...] = ()) -> dict:
    """The options with their defaults, each checked against its default's type (an option whose default is
    None is text, or a number where `minimums` has one), its minimum and whether it may be null, and the
    device against torch's."""
    unknown_options(args, defaults)
    args = {**defaults, **args}
    for key, value in args.items():
        check_option(key, value, defaults[key], (minimums or {}).get(key), key in nullable)
    if "device" in args:
        check_device(args["device"])
    return args


def check_option(key: str, value, default, minimum: float | None, nullable: bool = False) -> None:
    """One option's value: of its default's kind, at least `minimum`; text given explicitly is not empty."""
    number = int if isinstance(default, int) and not isinstance(default, float) else float
    if isinstance(default, bool):
        require(isinstance(value, bool), key, f"must be true or false, got {value!r}")
    elif isinstance(default, (int, float)) or (default is None and minimum is not None):
        nullable = nullable or default is None
        if value is None and nullable:
            return
        kinds = (int,) if number is int else (int, float)
        what = "an integer" if number is int else "a number"
        bound = f" >= {minimum}" if minimum is not None else ""
        ok = isinstance(value, kinds) and not isinstance(value, bool) and (minimum is None or value >= minimum)
        require(ok, key, f"must be {what}{bound}{' or null' if nullable else ''}, got {value!r}")
    elif value is not None:
        require(isinstance(value, str), key, f"must be text, got {value!r}")
        require(value != "", key, "is empty")


def check_device(device) -> None:
    """A device torch knows and this machine has: `cpu`, `cuda`, `cuda:N`, `mps`."""
    import torch

    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError):
        raise ConfigError("device", f"{device!r} is not a device; use cpu, cuda, cuda:N or mps") from None
    if parsed.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        require(
            (parsed.index or 0) < count,
            "device",
            f"{device} asks for a CUDA GPU but torch sees {count or 'none'}; use device=cpu",
        )
    elif parsed.type == "mps":
        require(torch.backends.mps.is_available(), "device", "mps is not available on this machine; use device=cpu")
    else:
        require(parsed.type == "cpu", "device", f"{device!r}: only cpu, cuda, cuda:N or mps run the inference commands")


def input_lines(text: str | None) -> Iterable[str]:
    """`text=...` as the one input line, else standard input's lines (UTF-8), of which there must be one."""
    if text is not None:
        require(text != "", "text", "is empty")
        yield text
        return
    number = 0
    for number, raw in enumerate(sys.stdin.buffer, 1):
        try:
            yield raw.decode("utf-8").rstrip("\r\n")
        except UnicodeDecodeError as e:
            raise UserError(f"standard input, line {number}: not UTF-8 text (byte 0x{raw[e.start]:02x})") from None
    if number == 0:
        raise UserError("no input: give text=... or one input a line on standard input")


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
