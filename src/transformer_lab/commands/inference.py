"""What the inference commands (sample, translate, fill, classify, attention) share on the command line: their
input lines (text=... or standard input) and their warnings (stderr). What they do is the Python API's
(api/inference.py, api/run.py); their command line is commands/cli.py's."""

from __future__ import annotations

import sys
from collections.abc import Iterable

from transformer_lab.errors import UserError, require


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


def warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr, flush=True)
